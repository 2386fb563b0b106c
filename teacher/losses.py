"""EMS training objectives (Mao et al., "EMS: Efficient and Effective Massively Multilingual Sentence
Embedding Learning", arXiv:2205.15744, eq. 2-11).

All functions return SUMS over the batch; the model divides the total by N as the paper does:
L = (L_XTR + L_cntrs) / N.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F


def bag_of_tokens(ids: torch.Tensor, mask: torch.Tensor, vocab_size: int) -> torch.Tensor:
    """Target distribution p(w) = count(w in S) / |S| over the vocabulary, one row per sentence."""
    m = mask.to(torch.float32)
    bag = torch.zeros(ids.shape[0], vocab_size, dtype=torch.float32, device=ids.device)
    bag.scatter_add_(1, ids, m)
    return bag / m.sum(dim=1, keepdim=True).clamp(min=1.0)


def xtr_kl(logits: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """Sum over the batch of KL(p || q) with q = softmax(logits) and p = ``target`` rows."""
    log_q = F.log_softmax(logits.float(), dim=-1)
    return F.kl_div(log_q, target, reduction="sum")


def info_nce(
    queries: torch.Tensor, keys: torch.Tensor, temperature: float, offset: int = 0
) -> torch.Tensor:
    """Sum over queries of -log softmax(cos(q_i, k_j) / T)[i + offset].

    ``keys`` may hold more rows than ``queries`` (negatives gathered from other processes);
    query i's positive is key ``i + offset``.
    """
    q = F.normalize(queries.float(), dim=-1)
    k = F.normalize(keys.float(), dim=-1)
    logits = q @ k.T / temperature
    labels = torch.arange(q.shape[0], device=q.device) + offset
    return F.cross_entropy(logits, labels, reduction="sum")


def bidirectional_info_nce(hx: torch.Tensor, hy: torch.Tensor, temperature: float) -> torch.Tensor:
    """In-batch contrastive loss in both directions (x -> y and y -> x), summed."""
    return info_nce(hx, hy, temperature) + info_nce(hy, hx, temperature)
