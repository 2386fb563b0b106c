"""Exact cosine k-nearest-neighbour search, blocked so that large sets fit in memory.

Embeddings in tinyglot are L2-normalised float32 rows (see :mod:`tinyglot.encoder`), so cosine
similarity is the inner product.  :func:`knn` compares one block of queries at a time with all
keys: peak memory is ``O(block_size * n_keys)``, never ``n_queries * n_keys``.  It uses faiss
(``IndexFlatIP``, exact) when faiss is importable, numpy otherwise; both return the same
neighbours, ties broken towards the lowest key index.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from tinyglot.errors import TinyglotError

# Up to this k, top-k is k rounds of argmax (much faster than a partition for small k).
_ARGMAX_MAX_K = 32
# Extra neighbours asked of faiss so that ties at the k-th score can be resolved by index.
_FAISS_SLACK = 8


def as_embeddings(x: Any, name: str) -> np.ndarray:
    """Return ``x`` as a C-contiguous 2-D float32 array of finite values, or raise TinyglotError."""
    arr = np.asarray(x)
    if arr.ndim != 2:
        raise TinyglotError(
            f"{name} must be a 2-D array (n_rows, dim), got shape {arr.shape}",
            "pass one embedding per row, e.g. the output of encoder.encode(sentences)",
        )
    if not (np.issubdtype(arr.dtype, np.floating) or np.issubdtype(arr.dtype, np.integer)):
        raise TinyglotError(f"{name} must hold numbers, got dtype {arr.dtype}")
    arr = np.ascontiguousarray(arr, dtype=np.float32)
    if not np.isfinite(arr).all():
        raise TinyglotError(
            f"{name} contains NaN or infinite values",
            "check the encoder that produced these embeddings",
        )
    return arr


def faiss_available() -> bool:
    """True when the optional faiss package can be imported."""
    return _import_faiss() is not None


def _import_faiss() -> Any | None:
    try:
        import faiss
    except ImportError:
        return None
    return faiss


def knn(
    queries: np.ndarray,
    keys: np.ndarray,
    k: int,
    block_size: int = 4096,
    use_faiss: bool | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Exact top-``k`` keys by inner product (cosine on normalised rows) for every query.

    Returns ``(scores, indices)``, both of shape ``(n_queries, k)``: float32 scores in
    decreasing order and int64 key indices; among equal scores the lower key index comes first
    (and wins a place in the top ``k``).  Queries are processed ``block_size`` rows at a time.
    ``use_faiss``: ``None`` uses faiss if importable, ``True`` requires it, ``False`` uses numpy.
    """
    q = as_embeddings(queries, "queries")
    kv = as_embeddings(keys, "keys")
    _check_knn_args(q, kv, k, block_size)
    faiss = _resolve_faiss(use_faiss)
    if faiss is not None:
        return _knn_faiss(faiss, q, kv, k, block_size)
    return _knn_numpy(q, kv, k, block_size)


def _check_knn_args(q: np.ndarray, kv: np.ndarray, k: int, block_size: int) -> None:
    if q.shape[1] != kv.shape[1]:
        raise TinyglotError(
            f"queries have dimension {q.shape[1]} but keys have dimension {kv.shape[1]}",
            "embed queries and keys with the same encoder",
        )
    if kv.shape[0] == 0:
        raise TinyglotError("keys are empty: there is nothing to search")
    if not 1 <= k <= kv.shape[0]:
        raise TinyglotError(f"k must be between 1 and the number of keys ({kv.shape[0]}), got {k}")
    if block_size < 1:
        raise TinyglotError(f"block_size must be a positive integer, got {block_size}")


def _resolve_faiss(use_faiss: bool | None) -> Any | None:
    if use_faiss is False:
        return None
    faiss = _import_faiss()
    if faiss is None and use_faiss:
        raise TinyglotError(
            "use_faiss=True but faiss is not installed",
            "pip install 'tinyglot[faiss]' (faiss-cpu), or pass use_faiss=None to fall back to numpy",
        )
    return faiss


def _knn_numpy(q: np.ndarray, kv: np.ndarray, k: int, block_size: int) -> tuple[np.ndarray, np.ndarray]:
    n = q.shape[0]
    scores = np.empty((n, k), dtype=np.float32)
    indices = np.empty((n, k), dtype=np.int64)
    for start in range(0, n, block_size):
        stop = min(start + block_size, n)
        sims = q[start:stop] @ kv.T
        scores[start:stop], indices[start:stop] = topk_rows(sims, k, overwrite=True)
    return scores, indices


def topk_rows(sims: np.ndarray, k: int, overwrite: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """Top-``k`` columns of every row of ``sims``, decreasing, ties to the lowest column index.

    ``overwrite=True`` lets a small-``k`` search use ``sims`` as scratch space.
    """
    if k <= _ARGMAX_MAX_K:
        return _topk_by_argmax(sims if overwrite else sims.copy(), k)
    b, n = sims.shape
    if k == n:
        order = np.argsort(-sims, axis=1, kind="stable")
        return np.take_along_axis(sims, order, axis=1), order.astype(np.int64)
    kth = np.partition(sims, n - k, axis=1)[:, n - k : n - k + 1]  # k-th largest per row
    selected = sims >= kth
    surplus = selected.sum(axis=1) - k  # > 0 where ties at the k-th score overflow the top k
    for row in np.flatnonzero(surplus):
        ties = np.flatnonzero(sims[row] == kth[row, 0])
        selected[row, ties[len(ties) - surplus[row] :]] = False  # drop the highest-index ties
    cols = np.nonzero(selected)[1].reshape(b, k)  # ascending column index within each row
    vals = np.take_along_axis(sims, cols, axis=1)
    order = np.argsort(-vals, axis=1, kind="stable")  # stable: equal scores keep index order
    return np.take_along_axis(vals, order, axis=1), np.take_along_axis(cols, order, axis=1)


def _topk_by_argmax(sims: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """``k`` rounds of row-wise argmax (first maximum = lowest index), masking each winner."""
    rows = np.arange(sims.shape[0])
    vals = np.empty((sims.shape[0], k), dtype=np.float32)
    cols = np.empty((sims.shape[0], k), dtype=np.int64)
    for t in range(k):
        cols[:, t] = np.argmax(sims, axis=1)
        vals[:, t] = sims[rows, cols[:, t]]
        sims[rows, cols[:, t]] = -np.inf
    return vals, cols


def _knn_faiss(
    faiss: Any, q: np.ndarray, kv: np.ndarray, k: int, block_size: int
) -> tuple[np.ndarray, np.ndarray]:
    index = faiss.IndexFlatIP(kv.shape[1])
    index.add(kv)
    n_keys = kv.shape[0]
    wide = min(k + _FAISS_SLACK, n_keys)
    n = q.shape[0]
    scores = np.empty((n, k), dtype=np.float32)
    indices = np.empty((n, k), dtype=np.int64)
    for start in range(0, n, block_size):
        stop = min(start + block_size, n)
        s, i = index.search(q[start:stop], wide)
        s, i = _faiss_ties_by_index(s, i.astype(np.int64), k, wide < n_keys, q[start:stop], kv)
        scores[start:stop], indices[start:stop] = s, i
    return scores, indices


def _faiss_ties_by_index(
    s: np.ndarray, i: np.ndarray, k: int, truncated: bool, q: np.ndarray, kv: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Re-order faiss hits to the numpy tie rule; redo exactly rows whose ties outrun the hits."""
    order = _order_score_then_index(s, i)
    s = np.take_along_axis(s, order, axis=1)
    i = np.take_along_axis(i, order, axis=1)
    out_s, out_i = s[:, :k].copy(), i[:, :k].copy()
    if truncated:
        # If the last hit scores as high as the k-th, equal-scored keys may have been left out.
        redo = np.flatnonzero(s[:, -1] >= s[:, k - 1])
        if len(redo):
            out_s[redo], out_i[redo] = topk_rows(q[redo] @ kv.T, k)
    return out_s, out_i


def _order_score_then_index(s: np.ndarray, i: np.ndarray) -> np.ndarray:
    """Per row, the permutation sorting by decreasing score, then increasing index."""
    by_index = np.argsort(i, axis=1, kind="stable")
    s_by_index = np.take_along_axis(s, by_index, axis=1)
    by_score = np.argsort(-s_by_index, axis=1, kind="stable")
    return np.take_along_axis(by_index, by_score, axis=1)
