"""LEALLA objectives (METHOD.md section 2; lealla.md eq. 1-4)."""

from __future__ import annotations

import torch
import torch.nn.functional as F


def cosine_matrix(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return F.normalize(a.float(), dim=-1) @ F.normalize(b.float(), dim=-1).T


def ams_loss(x: torch.Tensor, y: torch.Tensor, margin: float = 0.3, scale: float = 1.0) -> torch.Tensor:
    """Bidirectional additive-margin softmax: (1/N) sum_i L(x_i, y_i) + L(y_i, x_i), eq. 1-2.

    The positive's cosine is lowered by ``margin`` before the softmax; logits are ``scale * cos``.
    """
    sim = cosine_matrix(x, y)
    logits = scale * (sim - margin * torch.eye(sim.shape[0], device=sim.device, dtype=sim.dtype))
    labels = torch.arange(sim.shape[0], device=sim.device)
    return F.cross_entropy(logits, labels) + F.cross_entropy(logits.T, labels)


def feature_distillation(x_t: torch.Tensor, y_t: torch.Tensor, fx_s: torch.Tensor, fy_s: torch.Tensor) -> torch.Tensor:
    """(1/N) sum_i ||x_t_i - f(x_s_i)||^2 + ||y_t_i - f(y_s_i)||^2, eq. 3 (f already applied)."""
    return ((x_t.float() - fx_s.float()) ** 2).sum(-1).mean() + ((y_t.float() - fy_s.float()) ** 2).sum(-1).mean()


def logit_distillation(x_t, y_t, x_s, y_s, temperature: float = 100.0) -> torch.Tensor:
    """(1/N^2) sum_ij ((cos(x_t_i, y_t_j) - cos(x_s_i, y_s_j)) / T)^2, eq. 4."""
    return (((cosine_matrix(x_t, y_t) - cosine_matrix(x_s, y_s)) / temperature) ** 2).mean()
