"""Evaluation of sentence encoders: bitext retrieval P@1, margin mining, Spearman, baselines.

Light to import (numpy and rich only); :class:`TfidfEncoder` loads scikit-learn on first use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from tinyglot.evaluation.bitext import (BitextResult, LangResult, compare, encode_checked, evaluate_all,
                                        evaluate_bitext)
from tinyglot.evaluation.knn import faiss_available, knn
from tinyglot.evaluation.metrics import (
    MiningResult,
    bitext_p_at_1,
    bucc_mining,
    choose_threshold,
    margin_denominators,
    margin_scores,
    mine,
    mining_prf,
    p_at_1,
    spearman,
)

if TYPE_CHECKING:
    from tinyglot.evaluation.tfidf import TfidfEncoder

__all__ = [
    "BitextResult",
    "LangResult",
    "MiningResult",
    "TfidfEncoder",
    "bitext_p_at_1",
    "bucc_mining",
    "choose_threshold",
    "compare",
    "encode_checked",
    "evaluate_all",
    "evaluate_bitext",
    "faiss_available",
    "knn",
    "margin_denominators",
    "margin_scores",
    "mine",
    "mining_prf",
    "p_at_1",
    "spearman",
]


def __getattr__(name: str) -> Any:
    if name == "TfidfEncoder":  # imported lazily: scikit-learn is slow to import
        from tinyglot.evaluation.tfidf import TfidfEncoder

        return TfidfEncoder
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
