"""Cleaning, language sampling and train/dev splitting of parallel pairs.

* :func:`clean_pairs` filters a stream of pairs (length, length ratio, copies, duplicates,
  per-language cap) and counts every reason in a :class:`CleanStats`.
* :func:`sampling_probs` and :class:`LanguageSampler` implement temperature-based language
  sampling, ``p_l ∝ (n_l / N) ** (1 / T)``, as in XLM, LASER and EMS.
* :func:`train_dev_split` splits on the English side, so that an English sentence translated
  into many languages lands on one side only.
"""

from __future__ import annotations

import hashlib
import logging
import math
import re
import unicodedata
from dataclasses import dataclass, fields
from collections.abc import Iterable, Iterator, Mapping, Sized

import numpy as np

from tinyglot.data.pairs import Pair
from tinyglot.errors import TinyglotError
from tinyglot.languages import normalize_lang

logger = logging.getLogger("tinyglot.data")


# --------------------------------------------------------------------------------------------
# cleaning


@dataclass
class CleanConfig:
    """What :func:`clean_pairs` keeps.

    Lengths are in characters after stripping, checked on each side.  The length ratio
    (longer / shorter side) is checked only when both sides have at least ``ratio_min_chars``
    (short UI labels vary too much), and counts an East Asian wide character (CJK, kana,
    Hangul) as ``wide_char_weight`` characters, since one such character carries about as much
    as two Latin letters: without it a plain character ratio of 3 drops about 40% of
    legitimate Chinese pairs.
    """

    min_chars: int = 1
    max_chars: int = 1000
    max_len_ratio: float = 3.0
    ratio_min_chars: int = 10
    wide_char_weight: float = 2.0
    drop_copies: bool = True
    dedup: bool = True
    per_lang_cap: int | None = None

    def __post_init__(self) -> None:
        if self.min_chars < 0 or self.max_chars < max(self.min_chars, 1):
            raise TinyglotError(
                f"invalid lengths min_chars={self.min_chars}, max_chars={self.max_chars}",
                "use 0 <= min_chars <= max_chars, with max_chars >= 1",
            )
        if not self.max_len_ratio >= 1.0:
            raise TinyglotError(f"invalid max_len_ratio={self.max_len_ratio}",
                                "use a ratio >= 1, e.g. 3.0")
        if self.per_lang_cap is not None and self.per_lang_cap < 1:
            raise TinyglotError(f"invalid per_lang_cap={self.per_lang_cap}",
                                "use a positive number, or None for no cap")


@dataclass
class CleanStats:
    """How many pairs :func:`clean_pairs` saw, kept, and dropped for each reason."""

    seen: int = 0
    kept: int = 0
    too_short: int = 0
    too_long: int = 0
    bad_ratio: int = 0
    copy: int = 0
    duplicate: int = 0
    over_cap: int = 0

    @property
    def dropped(self) -> int:
        """Pairs dropped for any reason."""
        return self.seen - self.kept

    def summary(self) -> str:
        """One line: kept of seen, and each non-zero reason."""
        reasons = [
            f"{getattr(self, f.name)} {f.name.replace('_', ' ')}"
            for f in fields(self)
            if f.name not in ("seen", "kept") and getattr(self, f.name)
        ]
        dropped = f"; dropped {', '.join(reasons)}" if reasons else ""
        return f"kept {self.kept} of {self.seen} pairs{dropped}"


def _weighted_len(text: str, wide_weight: float) -> float:
    """Length counting East Asian wide/full-width characters as ``wide_weight``."""
    if text.isascii():
        return float(len(text))
    wide = sum(1 for c in text if unicodedata.east_asian_width(c) in "WF")
    return len(text) - wide + wide * wide_weight


def _ratio_ok(x: str, en: str, config: CleanConfig) -> bool:
    """Whether the length ratio of the two sides is acceptable."""
    if min(len(x), len(en)) < config.ratio_min_chars:
        return True
    a = _weighted_len(x, config.wide_char_weight)
    b = _weighted_len(en, config.wide_char_weight)
    if min(a, b) < config.ratio_min_chars:
        return True
    return max(a, b) / min(a, b) <= config.max_len_ratio


def _pair_key(pair: Pair) -> bytes:
    """An 8-byte digest of the case-folded (lang, x, en)."""
    text = f"{pair.lang}\t{pair.x.casefold()}\t{pair.en.casefold()}"
    return hashlib.blake2b(text.encode("utf-8"), digest_size=8).digest()


def _reject_reason(x: str, en: str, config: CleanConfig) -> str | None:
    """The CleanStats field naming why a pair is dropped (before dedup and cap), or None."""
    if min(len(x), len(en)) < max(config.min_chars, 1):
        return "too_short"
    if max(len(x), len(en)) > config.max_chars:
        return "too_long"
    if not _ratio_ok(x, en, config):
        return "bad_ratio"
    if config.drop_copies and x.casefold() == en.casefold():
        return "copy"
    return None


def clean_pairs(pairs: Iterable[Pair], config: CleanConfig | None = None,
                stats: CleanStats | None = None) -> Iterator[Pair]:
    """Yield the pairs that pass ``config``'s filters, streaming, counting drops in ``stats``.

    Deduplication keeps the first of each case-folded (lang, x, en) and stores 8-byte
    BLAKE2b digests, not the strings.  The per-language cap keeps the first pairs.
    """
    config = config if config is not None else CleanConfig()
    stats = stats if stats is not None else CleanStats()
    seen_keys: set[bytes] = set()
    per_lang: dict[str, int] = {}
    for pair in pairs:
        stats.seen += 1
        reason = _reject_reason(pair.x.strip(), pair.en.strip(), config)
        if reason is None and config.dedup:
            key = _pair_key(pair)
            if key in seen_keys:
                reason = "duplicate"
            else:
                seen_keys.add(key)
        if reason is None and config.per_lang_cap is not None:
            if per_lang.get(pair.lang, 0) >= config.per_lang_cap:
                reason = "over_cap"
            else:
                per_lang[pair.lang] = per_lang.get(pair.lang, 0) + 1
        if reason is not None:
            setattr(stats, reason, getattr(stats, reason) + 1)
            continue
        stats.kept += 1
        yield pair
    logger.info("clean: %s", stats.summary())


# --------------------------------------------------------------------------------------------
# grouping and language sampling


def group_by_lang(pairs: Iterable[Pair]) -> dict[str, list[Pair]]:
    """Pairs grouped by language, languages in sorted order, pairs in input order."""
    groups: dict[str, list[Pair]] = {}
    for pair in pairs:
        groups.setdefault(pair.lang, []).append(pair)
    return {lang: groups[lang] for lang in sorted(groups)}


def require_languages(grouped: Mapping[str, Sized], langs: Iterable[str]) -> list[str]:
    """Canonical codes of ``langs``; raise TinyglotError naming those with no pairs."""
    wanted = [normalize_lang(code) for code in langs]
    missing = [code for code in wanted if len(grouped.get(code, ())) == 0]
    if missing:
        available = ", ".join(sorted(k for k, v in grouped.items() if len(v))) or "none"
        raise TinyglotError(
            f"no pairs for language(s) {', '.join(missing)} (languages with pairs: {available})",
            "add data for these languages, or leave them out of the request",
        )
    return wanted


def sampling_probs(counts: Mapping[str, int], temperature: float) -> dict[str, float]:
    """Temperature-scaled sampling probabilities ``p_l ∝ (n_l / N) ** (1 / T)``.

    ``T = 1`` samples in proportion to the data, larger ``T`` flattens towards uniform
    (XLM, LASER and EMS use ``T`` around 1.4–5).  Languages with no pairs get 0.
    """
    if not (isinstance(temperature, (int, float)) and math.isfinite(temperature)
            and temperature > 0):
        raise TinyglotError(f"invalid sampling temperature {temperature!r}",
                            "use a temperature > 0: 1 = proportional, larger = flatter")
    if not counts:
        raise TinyglotError("no languages to sample from", "give at least one language with data")
    if any(n < 0 for n in counts.values()):
        raise TinyglotError("negative pair counts", "counts must be >= 0")
    total = sum(counts.values())
    if total <= 0:
        raise TinyglotError("every language has 0 pairs", "give at least one language with data")
    weights = {lang: (n / total) ** (1.0 / temperature) if n else 0.0
               for lang, n in counts.items()}
    norm = sum(weights.values())
    return {lang: w / norm for lang, w in weights.items()}


class LanguageSampler:
    """A seeded stream of ``(lang, index)`` draws for building a multilingual training order.

    Each draw picks a language with :func:`sampling_probs`, then the next index of that
    language in a shuffled order that is reshuffled each time it is used up (so every pair is
    seen once before any is repeated).  The same seed gives the same stream.

    >>> sampler = LanguageSampler({"de": 90, "fy": 10}, temperature=2.0, seed=0)
    >>> len(sampler.draw(5))
    5
    """

    _CHUNK = 4096

    def __init__(self, grouped: Mapping[str, Sized | int], temperature: float = 1.0,
                 seed: int = 0) -> None:
        sizes = {lang: v if isinstance(v, int) else len(v) for lang, v in grouped.items()}
        self.sizes = {lang: sizes[lang] for lang in sorted(sizes)}
        self.probs = sampling_probs(self.sizes, temperature)
        self.temperature = temperature
        self.seed = seed
        self._langs = [lang for lang in self.sizes if self.sizes[lang] > 0]
        self._p = np.array([self.probs[lang] for lang in self._langs], dtype=np.float64)
        self._p /= self._p.sum()

    def stream(self, n: int | None = None) -> Iterator[tuple[str, int]]:
        """Yield ``n`` draws (forever when None), always the same ones for the same seed."""
        if n is not None and n < 0:
            raise TinyglotError(f"invalid number of draws {n}", "use n >= 0")
        rng = np.random.default_rng(self.seed)
        orders: dict[str, np.ndarray] = {}
        cursors = dict.fromkeys(self._langs, 0)
        produced = 0
        while n is None or produced < n:
            for li in rng.choice(len(self._langs), size=self._CHUNK, p=self._p):
                if n is not None and produced >= n:
                    return
                lang = self._langs[int(li)]
                if cursors[lang] == 0:
                    orders[lang] = rng.permutation(self.sizes[lang])
                yield lang, int(orders[lang][cursors[lang]])
                cursors[lang] = (cursors[lang] + 1) % self.sizes[lang]
                produced += 1

    def draw(self, n: int) -> list[tuple[str, int]]:
        """The first ``n`` draws of :meth:`stream`."""
        return list(self.stream(n))

    def __iter__(self) -> Iterator[tuple[str, int]]:
        return self.stream()


# --------------------------------------------------------------------------------------------
# train/dev split

_NON_WORD = re.compile(r"[\W_]+")


def english_key(en: str) -> str:
    """The English side as the split sees it: case-folded, punctuation and spaces dropped."""
    folded = en.casefold().strip()
    return _NON_WORD.sub("", folded) or folded


def _in_dev(en: str, dev_fraction: float, seed: int) -> bool:
    """Whether the English sentence ``en`` belongs to the dev side."""
    digest = hashlib.blake2b(f"{seed}\0{english_key(en)}".encode(), digest_size=8)
    return int.from_bytes(digest.digest(), "big") / 2.0**64 < dev_fraction


def train_dev_split(pairs: Iterable[Pair], dev_fraction: float = 0.05,
                    seed: int = 0) -> tuple[list[Pair], list[Pair]]:
    """Split pairs into (train, dev), deterministically, on a hash of the English side.

    The hash covers the seed and the English sentence case-folded with punctuation and spaces
    removed, so a given English sentence (in any language's pair) lands on one side only, and
    the split does not depend on the order or on the other pairs.  About ``dev_fraction`` of
    the distinct English sentences go to dev.  Monolingual rows (``en == x``) always go to train.
    """
    if not 0.0 <= dev_fraction <= 1.0:
        raise TinyglotError(f"invalid dev_fraction {dev_fraction}", "use a fraction in [0, 1]")
    train: list[Pair] = []
    dev: list[Pair] = []
    for pair in pairs:
        (dev if not pair.monolingual and _in_dev(pair.en, dev_fraction, seed) else train).append(pair)
    return train, dev


def select_languages(pairs: Iterable[Pair], languages: Iterable[str] | None = None, min_pairs: int = 0,
                     cap: int | None = None, seed: int = 0, extra_counts: Mapping[str, int] | None = None
                     ) -> tuple[list[Pair], dict[str, int]]:
    """The pairs of ``languages`` (all when None) whose language has at least ``min_pairs`` pairs,
    at most ``cap`` per language drawn at random (seeded) so that every source of a mixed corpus is
    represented; returns ``(pairs, dropped)`` where ``dropped`` maps each language left out for
    having too few pairs to its count.  Languages stay in sorted order, each one's pairs shuffled.

    ``extra_counts`` (language -> rows) counts rows of other text towards ``min_pairs`` (the
    general-domain rows that will join the corpus's): a language whose corpus is thin but whose
    other text makes up the rest is kept.  The counts in ``dropped`` include them."""
    wanted = None if languages is None else {normalize_lang(code) for code in languages}
    groups = group_by_lang(p for p in pairs if wanted is None or p.lang in wanted)
    extra = {normalize_lang(lang): n for lang, n in (extra_counts or {}).items()}
    rng = np.random.default_rng(seed)
    kept: list[Pair] = []
    dropped: dict[str, int] = {}
    for lang in sorted(set(groups) | {lang for lang in extra if wanted is None or lang in wanted}):
        group = groups.get(lang, [])
        if len(group) + extra.get(lang, 0) < min_pairs:
            dropped[lang] = len(group) + extra.get(lang, 0)
            continue
        order = rng.permutation(len(group)) if cap is not None and cap < len(group) else range(len(group))
        kept += [group[i] for i in list(order)[:cap]]
    return kept, dropped


def heldout_pairs(pairs: Iterable[Pair], min_words: int = 0, cap: int | None = None,
                  seed: int = 0) -> list[Pair]:
    """A test set from held-out pairs: English sides of at least ``min_words`` words, each English and
    each translation used once per language, at most ``cap`` pairs per language (seeded sample)."""
    seen: set[tuple[str, str]] = set()
    kept: list[Pair] = []
    for pair in pairs:
        if len(pair.en.split()) < min_words:
            continue
        keys = ((pair.lang, "en\0" + english_key(pair.en)), (pair.lang, "x\0" + pair.x.casefold().strip()))
        if any(k in seen for k in keys):
            continue
        seen.update(keys)
        kept.append(pair)
    return select_languages(kept, cap=cap, seed=seed)[0]


__all__ = [
    "CleanConfig", "CleanStats", "clean_pairs", "english_key", "heldout_pairs", "select_languages", "group_by_lang",
    "require_languages",
    "sampling_probs", "LanguageSampler", "train_dev_split",
]
