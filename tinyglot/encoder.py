"""The one interface every model in tinyglot answers: sentences in, embeddings out."""

from __future__ import annotations

from typing import Protocol, runtime_checkable
from collections.abc import Callable, Sequence

import numpy as np


@runtime_checkable
class Encoder(Protocol):
    """Anything that turns sentences into L2-normalised float32 rows.

    ``encode(sentences)`` returns an array of shape ``(len(sentences), dim)``, dtype float32,
    each row of unit L2 norm.  Teachers, students, exported bundles and baselines all answer it,
    so evaluation and benchmarks treat them alike.
    """

    def encode(self, sentences: Sequence[str], batch_size: int = 64) -> np.ndarray: ...


def encode_by_length(lengths: Sequence[int], batch_size: int,
                     run: Callable[[np.ndarray], np.ndarray]) -> np.ndarray:
    """Run ``run(rows)`` on batches of item indices sorted by length (little padding) and return
    the float32 outputs in the original order.  Shared by every encoder implementation."""
    order = np.argsort(np.asarray(lengths), kind="stable")
    out: np.ndarray | None = None
    step = max(1, int(batch_size))
    for start in range(0, len(order), step):
        rows = order[start:start + step]
        emb = np.asarray(run(rows), dtype=np.float32)
        if out is None:
            out = np.zeros((len(order), emb.shape[1]), dtype=np.float32)
        out[rows] = emb
    if out is None:
        from tinyglot.errors import TinyglotError

        raise TinyglotError("encode() got no sentences", "pass at least one sentence")
    return out


def l2_normalize(x: np.ndarray, eps: float = 1e-12) -> np.ndarray:
    """Return float32 rows of unit L2 norm (zero rows stay zero)."""
    x = np.asarray(x, dtype=np.float32)
    norms = np.linalg.norm(x, axis=-1, keepdims=True)
    return (x / np.maximum(norms, eps)).astype(np.float32, copy=False)
