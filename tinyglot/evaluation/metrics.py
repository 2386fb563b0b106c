"""Evaluation metrics: bitext P@1, margin mining (BUCC), Spearman.

All functions take L2-normalised float32 embeddings (rows), so cosine is the inner product.
Margin scoring follows Artetxe & Schwenk (2019), ratio margin::

    score(x, y) = cos(x, y) / (sum_{z in NN_k(x)} cos(x, z) / 2k + sum_{z in NN_k(y)} cos(y, z) / 2k)

where ``NN_k(x)`` are the ``k`` nearest targets of source ``x`` and ``NN_k(y)`` the ``k``
nearest sources of target ``y``.  The denominator is ``a[i] + b[j]`` with per-row constants
``a`` and ``b``, so the best target by margin is found exactly, block by block.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from collections.abc import Iterable, Sequence

import numpy as np

from tinyglot.errors import TinyglotError
from tinyglot.evaluation.knn import as_embeddings, knn

# Margin denominators are clamped to this, so that all-zero neighbourhoods cannot divide by 0.
_MIN_DENOMINATOR = 1e-6


def _aligned(src: np.ndarray, tgt: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    s, t = as_embeddings(src, "src"), as_embeddings(tgt, "tgt")
    if s.shape[0] != t.shape[0]:
        raise TinyglotError(
            f"src has {s.shape[0]} rows but tgt has {t.shape[0]}; P@1 needs src[i] aligned with tgt[i]"
        )
    if s.shape[0] == 0:
        raise TinyglotError("P@1 of an empty set is undefined: src and tgt have no rows")
    return s, t


def p_at_1(
    src: np.ndarray,
    tgt: np.ndarray,
    margin: bool = False,
    k: int = 4,
    block_size: int = 4096,
    use_faiss: bool | None = None,
) -> float:
    """Fraction of ``i`` whose nearest target is ``tgt[i]`` (``src[i]`` aligned with ``tgt[i]``).

    Nearest by cosine, or by ratio margin with ``k`` neighbours when ``margin=True``.  A tie
    goes to the lower target index.  This is one direction; see :func:`bitext_p_at_1`.
    """
    s, t = _aligned(src, tgt)
    if margin:
        best, _ = margin_scores(s, t, k=k, block_size=block_size, use_faiss=use_faiss)
    else:
        best = knn(s, t, 1, block_size=block_size, use_faiss=use_faiss)[1][:, 0]
    return float(np.mean(best == np.arange(len(s))))


def bitext_p_at_1(
    src: np.ndarray,
    tgt: np.ndarray,
    margin: bool = False,
    k: int = 4,
    block_size: int = 4096,
    use_faiss: bool | None = None,
) -> tuple[float, float]:
    """P@1 in both directions: ``(src -> tgt, tgt -> src)``, e.g. ``(x -> en, en -> x)``."""
    options = dict(margin=margin, k=k, block_size=block_size, use_faiss=use_faiss)
    return p_at_1(src, tgt, **options), p_at_1(tgt, src, **options)  # type: ignore[arg-type]


def margin_denominators(
    src: np.ndarray, tgt: np.ndarray, k: int = 4, block_size: int = 4096, use_faiss: bool | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """Per-row margin terms ``(a, b)``: ``a[i]`` = sum of the ``k`` best cos of ``src[i]`` among
    targets / 2k, ``b[j]`` = the same for ``tgt[j]`` among sources.  ``k`` is capped at the set size.
    """
    s, t = as_embeddings(src, "src"), as_embeddings(tgt, "tgt")
    if k < 1:
        raise TinyglotError(f"margin k must be at least 1, got {k}")
    k_t, k_s = min(k, len(t)), min(k, len(s))
    a = knn(s, t, k_t, block_size, use_faiss)[0].sum(axis=1) / (2 * k_t)
    b = knn(t, s, k_s, block_size, use_faiss)[0].sum(axis=1) / (2 * k_s)
    return a.astype(np.float32), b.astype(np.float32)


def margin_scores(
    src: np.ndarray, tgt: np.ndarray, k: int = 4, block_size: int = 4096, use_faiss: bool | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """Forward margin retrieval: for each source, its best target and that ratio-margin score.

    Returns ``(best, score)``: int64 target indices and float32 scores, one per source row.
    Exact (every pair is scored, ``block_size`` sources at a time); ties go to the lower index.
    Denominators are clamped to a small positive value.
    """
    s, t = as_embeddings(src, "src"), as_embeddings(tgt, "tgt")
    if s.shape[1] != t.shape[1]:
        raise TinyglotError(f"src has dimension {s.shape[1]} but tgt has dimension {t.shape[1]}")
    if len(t) == 0:
        raise TinyglotError("tgt is empty: there is nothing to retrieve")
    a, b = margin_denominators(s, t, k, block_size, use_faiss)
    best = np.empty(len(s), dtype=np.int64)
    score = np.empty(len(s), dtype=np.float32)
    for start in range(0, len(s), block_size):
        stop = min(start + block_size, len(s))
        den = np.add(a[start:stop, None], b[None, :])
        np.maximum(den, np.float32(_MIN_DENOMINATOR), out=den)
        block = np.divide(s[start:stop] @ t.T, den, out=den)
        best[start:stop] = np.argmax(block, axis=1)  # first maximum = lowest index
        score[start:stop] = block[np.arange(stop - start), best[start:stop]]
    return best, score


def mine(
    src: np.ndarray,
    tgt: np.ndarray,
    threshold: float,
    k: int = 4,
    block_size: int = 4096,
    use_faiss: bool | None = None,
) -> list[tuple[int, int, float]]:
    """BUCC-style mining: each source's best target by margin, kept if its score >= threshold.

    Returns ``(i, j, score)`` triples in source order.
    """
    best, score = margin_scores(src, tgt, k, block_size, use_faiss)
    keep = np.flatnonzero(score >= threshold)
    return [(int(i), int(best[i]), float(score[i])) for i in keep]


def mining_prf(
    predicted_pairs: Iterable[Sequence[float]], gold_pairs: Iterable[Sequence[float]]
) -> tuple[float, float, float]:
    """Precision, recall and F1 of predicted ``(i, j[, score])`` pairs against gold ``(i, j)``.

    Only ``(i, j)`` is compared.  Precision is 0 with no predictions, recall 0 with no gold.
    """
    predicted = {(int(p[0]), int(p[1])) for p in predicted_pairs}
    gold = {(int(g[0]), int(g[1])) for g in gold_pairs}
    tp = len(predicted & gold)
    precision = tp / len(predicted) if predicted else 0.0
    recall = tp / len(gold) if gold else 0.0
    return precision, recall, _f1(precision, recall)


def _f1(precision: float, recall: float) -> float:
    return 2 * precision * recall / (precision + recall) if precision + recall > 0 else 0.0


def choose_threshold(
    scores_of_candidates: Sequence[float] | np.ndarray,
    is_gold: Sequence[bool] | np.ndarray,
    n_gold: int | None = None,
) -> tuple[float, float]:
    """The threshold (keep ``score >= threshold``) maximising F1 on held-out candidates.

    ``is_gold[c]`` says whether candidate ``c`` is a gold pair; ``n_gold`` is the number of gold
    pairs to recall (default: the gold candidates; pass more when some gold pairs were never
    proposed).  Returns ``(threshold, f1)``.  Of equally good cuts the one keeping fewest
    candidates wins; the threshold lies midway between the lowest kept score and the next score
    down (so it generalises to unseen pairs), or equals the lowest score when all are kept.
    """
    scores = np.asarray(scores_of_candidates, dtype=np.float64).reshape(-1)
    gold = np.asarray(is_gold, dtype=bool).reshape(-1)
    if len(scores) != len(gold):
        raise TinyglotError(f"{len(scores)} candidate scores but {len(gold)} is_gold flags")
    if len(scores) == 0:
        raise TinyglotError("no candidates to choose a threshold from")
    n_gold = int(gold.sum()) if n_gold is None else n_gold
    if n_gold < gold.sum():
        raise TinyglotError(f"n_gold={n_gold} is less than the {int(gold.sum())} gold candidates")
    order = np.argsort(-scores, kind="stable")
    scores, gold = scores[order], gold[order]
    tp = np.cumsum(gold)
    kept = np.arange(1, len(scores) + 1)
    cuts = np.flatnonzero(np.r_[scores[1:] != scores[:-1], True])  # last of each equal-score run
    precision = tp[cuts] / kept[cuts]
    recall = tp[cuts] / n_gold if n_gold else np.zeros(len(cuts))
    den = precision + recall
    f1 = np.divide(2 * precision * recall, den, out=np.zeros_like(den), where=den > 0)
    best = int(np.argmax(f1))  # first maximum = highest threshold
    return _threshold_below(scores, cuts[best]), float(f1[best])


def _threshold_below(sorted_scores: np.ndarray, last_kept: int) -> float:
    """Midway between the last kept score and the next one down (or the last kept, if none)."""
    kept = float(sorted_scores[last_kept])
    if last_kept + 1 == len(sorted_scores):
        return kept
    mid = (kept + float(sorted_scores[last_kept + 1])) / 2
    return mid if sorted_scores[last_kept + 1] < mid <= kept else kept


@dataclass(frozen=True)
class MiningResult:
    """Outcome of :func:`bucc_mining`: the dev-chosen threshold and test P/R/F1."""

    threshold: float
    dev_f1: float
    precision: float
    recall: float
    f1: float
    n_test_sources: int
    n_test_gold: int

    def to_dict(self) -> dict[str, float | int]:
        return asdict(self)


def bucc_mining(
    src: np.ndarray,
    tgt: np.ndarray,
    gold: Iterable[tuple[int, int]],
    *,
    dev_fraction: float = 0.5,
    k: int = 4,
    seed: int = 0,
    block_size: int = 4096,
    use_faiss: bool | None = None,
) -> MiningResult:
    """End-to-end BUCC-style mining evaluation.

    Every source gets its best target by margin.  Sources are split at random (``seed``) into a
    dev part (``dev_fraction``) and a test part; the threshold maximising F1 on the dev part's
    candidates is applied to the test part, whose precision, recall and F1 are reported.
    ``gold`` holds ``(source index, target index)`` pairs.
    """
    s, t = as_embeddings(src, "src"), as_embeddings(tgt, "tgt")
    gold_set = _checked_gold(gold, len(s), len(t))
    if not 0 < dev_fraction < 1:
        raise TinyglotError(f"dev_fraction must be between 0 and 1 (exclusive), got {dev_fraction}")
    best, score = margin_scores(s, t, k, block_size, use_faiss)
    is_dev = np.zeros(len(s), dtype=bool)
    is_dev[np.random.default_rng(seed).permutation(len(s))[: round(dev_fraction * len(s))]] = True
    dev_gold = {g for g in gold_set if is_dev[g[0]]}
    if not dev_gold:
        raise TinyglotError(
            "the dev part holds no gold pair, so no threshold can be chosen",
            "use more gold pairs or a larger dev_fraction",
        )
    dev = np.flatnonzero(is_dev)
    hits = [(int(i), int(best[i])) in dev_gold for i in dev]
    threshold, dev_f1 = choose_threshold(score[dev], hits, n_gold=len(dev_gold))
    test = np.flatnonzero(~is_dev)
    predicted = [(int(i), int(best[i])) for i in test if score[i] >= threshold]
    test_gold = gold_set - dev_gold
    p, r, f = mining_prf(predicted, test_gold)
    return MiningResult(threshold, dev_f1, p, r, f, len(test), len(test_gold))


def _checked_gold(gold: Iterable[tuple[int, int]], n_src: int, n_tgt: int) -> set[tuple[int, int]]:
    pairs = {(int(i), int(j)) for i, j in gold}
    bad = [(i, j) for i, j in pairs if not (0 <= i < n_src and 0 <= j < n_tgt)]
    if bad:
        raise TinyglotError(
            f"gold pair {sorted(bad)[0]} is out of range for {n_src} sources and {n_tgt} targets"
        )
    if not pairs:
        raise TinyglotError("gold is empty: mining needs gold (source, target) pairs")
    return pairs


def spearman(a: Sequence[float] | np.ndarray, b: Sequence[float] | np.ndarray) -> float:
    """Spearman's rank correlation (``scipy.stats.spearmanr``: ties share their average rank).

    Returns NaN when either side is constant (the correlation is undefined).
    """
    import warnings

    from scipy.stats import spearmanr

    x = np.asarray(a, dtype=np.float64).reshape(-1)
    y = np.asarray(b, dtype=np.float64).reshape(-1)
    if len(x) != len(y):
        raise TinyglotError(f"spearman needs equal lengths, got {len(x)} and {len(y)}")
    if len(x) < 2:
        raise TinyglotError(f"spearman needs at least 2 values, got {len(x)}")
    if not (np.isfinite(x).all() and np.isfinite(y).all()):
        raise TinyglotError("spearman inputs contain NaN or infinite values")
    with warnings.catch_warnings():  # constant input: scipy warns and returns NaN, which we document
        warnings.simplefilter("ignore")
        return float(spearmanr(x, y).statistic)
