"""Parallel data: the :class:`Pair` unit, streaming readers, cleaning, sampling and splits.

Light on purpose: importing :mod:`tinyglot.data` pulls in only the standard library and numpy.
"""

from __future__ import annotations

from tinyglot.data.clean import (
    CleanConfig,
    CleanStats,
    LanguageSampler,
    clean_pairs,
    group_by_lang,
    heldout_pairs,
    require_languages,
    sampling_probs,
    select_languages,
    train_dev_split,
)
from tinyglot.data.pairs import PERMISSIVE, Pair, is_permissive
from tinyglot.data.readers import (
    MAX_LINE_CHARS,
    SUPPORTED_FORMATS,
    ReadStats,
    detect_format,
    read_corpus,
    read_jsonl,
    read_moses,
    read_po,
    read_tatoeba,
    read_tmx,
    read_tsv,
)

__all__ = [
    "PERMISSIVE",
    "Pair",
    "is_permissive",
    "ReadStats",
    "MAX_LINE_CHARS",
    "SUPPORTED_FORMATS",
    "detect_format",
    "read_corpus",
    "heldout_pairs",
    "select_languages",
    "read_jsonl",
    "read_moses",
    "read_po",
    "read_tatoeba",
    "read_tmx",
    "read_tsv",
    "CleanConfig",
    "CleanStats",
    "clean_pairs",
    "group_by_lang",
    "require_languages",
    "sampling_probs",
    "LanguageSampler",
    "train_dev_split",
]
