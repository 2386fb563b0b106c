"""The multi-stage recipe's losses (stage 1 and 3: MSE; stage 2: token-level MSE; stage 4: L_MCL + L_KD
and its variants)."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from ..losses import Gather, cosine_matrix, logit_distillation


def mse(target: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """Mean over rows and dimensions of (x - target)^2 (``nn.MSELoss``, as Reimers & Gurevych 2020)."""
    return F.mse_loss(x.float(), target.float())


def pair_mse(target_s: torch.Tensor, s: torch.Tensor, target_t: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
    """MSE(target_s, s) + MSE(target_t, t): stage 1 (eq. 2), stage 3 (eq. 4) and L_KD (eq. 6); the
    stages log the two terms as ``mse_s`` / ``mse_t``."""
    return mse(target_s, s) + mse(target_t, t)


def masked_mse(target: torch.Tensor, x: torch.Tensor, mask: torch.Tensor,
               denominator: float | None = None) -> torch.Tensor:
    """Mean squared error over the real (mask 1) token positions and every dimension (stage 2).
    ``denominator`` (data-parallel runs): the global batch's real positions x dimensions."""
    m = mask.unsqueeze(-1).to(torch.float32)
    if denominator is not None:
        return (((x.float() - target.float()) ** 2) * m).sum() / max(1.0, denominator)
    return (((x.float() - target.float()) ** 2) * m).sum() / (m.sum() * x.shape[-1]).clamp(min=1.0)


def mcl_loss(t_s: torch.Tensor, s_s: torch.Tensor, s_t: torch.Tensor, gather: Gather | None = None,
             n_global: int | None = None) -> torch.Tensor:
    """Eq. 5: (1/N^2) sum_ij (cos(t_s_i, t_s_j) - cos(s_s_i, s_t_j))^2 (LEALLA's logit distillation with
    the teacher's English side on both axes and T = 1).  With ``gather``: this process's rows i
    against every process's columns j."""
    return logit_distillation(t_s, t_s, s_s, s_t, 1.0, gather, n_global)


def hard_label_loss(s_s: torch.Tensor, s_t: torch.Tensor, gather: Gather | None = None,
                    n_global: int | None = None) -> torch.Tensor:
    """Eq. 8 ("Bool"): (1/N^2) sum_ij (delta_ij - cos(s_s_i, s_t_j))^2."""
    if gather is not None:
        cols, offset = gather(s_t)
        sim = cosine_matrix(s_s, cols)
        eye = F.one_hot(torch.arange(sim.shape[0], device=sim.device) + offset, sim.shape[1]).to(sim.dtype)
        n = n_global or sim.shape[1]
        return ((eye - sim) ** 2).sum() / (n * n)
    sim = cosine_matrix(s_s, s_t)
    return ((torch.eye(sim.shape[0], device=sim.device) - sim) ** 2).mean()


def soft_ce_loss(t_s: torch.Tensor, s_s: torch.Tensor, s_t: torch.Tensor, temperature: float,
                 gather: Gather | None = None, n_global: int | None = None) -> torch.Tensor:
    """Eq. 9 with normalised targets: mean_i CE(softmax_j(cos_T(s_i, s_j) / tau), softmax_j(cos_S(s_i, t_j) / tau))."""
    if gather is not None:
        t_cols, s_cols = gather(t_s)[0], gather(s_t)[0]
        target = torch.softmax(cosine_matrix(t_s, t_cols) / temperature, dim=1)
        ce = -(target * torch.log_softmax(cosine_matrix(s_s, s_cols) / temperature, dim=1)).sum(1)
        return ce.sum() / (n_global or s_cols.shape[0])
    target = torch.softmax(cosine_matrix(t_s, t_s) / temperature, dim=1)
    return -(target * torch.log_softmax(cosine_matrix(s_s, s_t) / temperature, dim=1)).sum(1).mean()


def contrastive_loss(kind: str, t_s: torch.Tensor, s_s: torch.Tensor, s_t: torch.Tensor,
                     temperature: float, gather: Gather | None = None, n_global: int | None = None) -> torch.Tensor:
    if kind == "mcl":
        return mcl_loss(t_s, s_s, s_t, gather, n_global)
    if kind == "hard":
        return hard_label_loss(s_s, s_t, gather, n_global)
    if kind == "ce":
        return soft_ce_loss(t_s, s_s, s_t, temperature, gather, n_global)
    return s_s.new_zeros(())


__all__ = ["contrastive_loss", "hard_label_loss", "masked_mse", "mcl_loss", "mse", "pair_mse", "soft_ce_loss"]
