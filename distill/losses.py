"""LEALLA objectives (Mao and Nakagawa, "LEALLA: Learning Lightweight Language-agnostic Sentence Embeddings
with Knowledge Distillation", arXiv:2302.08387, eq. 1-4)."""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F

# A data-parallel run's gather (tinyglot.distributed.DistContext.gather): every process's rows of a
# tensor, gradients flowing back to their owners, and this process's offset among them.  With a gather
# each loss returns this process's share of the global batch's loss (normalised by ``n_global``): the
# shares of all processes sum to the loss of one process over the whole batch.
Gather = Callable[[torch.Tensor], "tuple[torch.Tensor, int]"]


def cosine_matrix(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return F.normalize(a.float(), dim=-1) @ F.normalize(b.float(), dim=-1).T


def ams_loss(x: torch.Tensor, y: torch.Tensor, margin: float = 0.3, scale: float = 1.0,
             gather: Gather | None = None, n_global: int | None = None) -> torch.Tensor:
    """Bidirectional additive-margin softmax: (1/N) sum_i L(x_i, y_i) + L(y_i, x_i), eq. 1-2.

    The positive's cosine is lowered by ``margin`` before the softmax; logits are ``scale * cos``.
    With ``gather`` the negatives are every process's rows.
    """
    if gather is not None:
        return _ams_one_way(x, y, margin, scale, gather, n_global) + _ams_one_way(y, x, margin, scale, gather, n_global)
    sim = cosine_matrix(x, y)
    logits = scale * (sim - margin * torch.eye(sim.shape[0], device=sim.device, dtype=sim.dtype))
    labels = torch.arange(sim.shape[0], device=sim.device)
    return F.cross_entropy(logits, labels) + F.cross_entropy(logits.T, labels)


def _ams_one_way(q: torch.Tensor, k: torch.Tensor, margin: float, scale: float, gather: Gather,
                 n_global: int | None) -> torch.Tensor:
    """This process's queries ``q`` against all processes' keys ``k``, summed and divided by N."""
    keys, offset = gather(k)
    sim = cosine_matrix(q, keys)
    labels = torch.arange(sim.shape[0], device=sim.device) + offset
    logits = scale * (sim - margin * F.one_hot(labels, sim.shape[1]).to(sim.dtype))
    return F.cross_entropy(logits, labels, reduction="sum") / (n_global or keys.shape[0])


def feature_distillation(x_t: torch.Tensor, y_t: torch.Tensor, fx_s: torch.Tensor, fy_s: torch.Tensor,
                         n_global: int | None = None) -> torch.Tensor:
    """(1/N) sum_i ||x_t_i - f(x_s_i)||^2 + ||y_t_i - f(y_s_i)||^2, eq. 3 (f already applied)."""
    if n_global is not None:
        return (((x_t.float() - fx_s.float()) ** 2).sum() + ((y_t.float() - fy_s.float()) ** 2).sum()) / n_global
    return ((x_t.float() - fx_s.float()) ** 2).sum(-1).mean() + ((y_t.float() - fy_s.float()) ** 2).sum(-1).mean()


def logit_distillation(x_t, y_t, x_s, y_s, temperature: float = 100.0, gather: Gather | None = None,
                       n_global: int | None = None) -> torch.Tensor:
    """(1/N^2) sum_ij ((cos(x_t_i, y_t_j) - cos(x_s_i, y_s_j)) / T)^2, eq. 4.  With ``gather``: this
    process's rows i against every process's columns j."""
    if gather is not None:
        y_t_all, y_s_all = gather(y_t)[0], gather(y_s)[0]
        n = n_global or y_s_all.shape[0]
        return (((cosine_matrix(x_t, y_t_all) - cosine_matrix(x_s, y_s_all)) / temperature) ** 2).sum() / (n * n)
    return (((cosine_matrix(x_t, y_t) - cosine_matrix(x_s, y_s)) / temperature) ** 2).mean()

