"""The unit of parallel data: one sentence in some language and its English (pivot) translation."""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from typing import Any

from tinyglot.errors import TinyglotError


# Licences whose text a shipped model may be trained on, by tier (attribution kept in its model card).
# permissive: the weights are released under Apache-2.0; share-alike: permissive text plus CC-BY-SA text,
# and the weights are released under CC-BY-SA-4.0.  Anything else (GPL, AGPL, LGPL, unknown) is copyleft:
# it trains benchmarks and users' own students, never a shipped model.
PERMISSIVE = ("MPL-2.0", "BSD-3-Clause", "BSD-2-Clause", "MIT", "Apache-2.0", "ISC", "PSF-2.0", "CC0-1.0",
              "CC-BY-4.0", "CC-BY-3.0", "CC-BY-2.0", "public-domain", "Unicode-3.0",
              "Unicode-DFS-2016")
SHARE_ALIKE = ("CC-BY-SA-2.0", "CC-BY-SA-3.0", "CC-BY-SA-4.0")
TIERS = ("permissive", "share-alike")  # the tiers of shipped models, the stricter first
COPYLEFT = "copyleft"
WEIGHTS_LICENCE = {"permissive": "Apache-2.0", "share-alike": "CC-BY-SA-4.0"}


def licence_tier(licence: str) -> str:
    """The tier of an SPDX-like licence expression: ``permissive``, ``share-alike`` or ``copyleft``
    (``A OR B``: the better of the two, as the recipient may choose; ``A AND B``: the stricter; ``-X+``,
    "or later", counts as ``-X``)."""
    text = str(licence or "").strip().strip("()")
    if " OR " in text:
        return min((licence_tier(part) for part in text.split(" OR ")), key=_tier_rank)
    if " AND " in text:
        return max((licence_tier(part) for part in text.split(" AND ")), key=_tier_rank)
    text = text.removesuffix("+")
    return "permissive" if text in PERMISSIVE else "share-alike" if text in SHARE_ALIKE else COPYLEFT


def _tier_rank(tier: str) -> int:
    return TIERS.index(tier) if tier in TIERS else len(TIERS)


def tier_allows(tier: str, licence: str) -> bool:
    """Whether text under ``licence`` may train a model of ``tier`` (``""``: any licence, a local model)."""
    return not tier or _tier_rank(licence_tier(licence)) <= _tier_rank(tier)


def check_tier(tier: str, what: str) -> str:
    """``tier`` when it is ``""`` or one of :data:`TIERS`; else a clear error naming ``what`` sets it."""
    if tier and tier not in TIERS:
        raise TinyglotError(f"{what}={tier!r} is not a licence tier",
                            f"choose {' or '.join(TIERS)} (a shipped model), or leave it empty for any licence")
    return tier


def is_permissive(license: str) -> bool:
    return licence_tier(license) == "permissive"


def source_counts(rows: Iterable[tuple[str, str, str]]) -> list[dict[str, Any]]:
    """Rows and languages per ``(src, license)`` of ``(src, license, lang)`` triples, largest first: what a
    model was trained on, for its data attributions.  A general-domain row counts under its source's own
    name (``general:fortunes-it`` -> ``fortunes-it``); a missing src or licence counts as ``unknown``."""
    rows_by: Counter[tuple[str, str]] = Counter()
    langs_by: defaultdict[tuple[str, str], set[str]] = defaultdict(set)
    for src, lic, lang in rows:
        key = (src.removeprefix(GENERAL_SRC_PREFIX) or "unknown", lic or "unknown")
        rows_by[key] += 1
        if lang:
            langs_by[key].add(lang)
    return [{"src": src, "license": lic, "rows": n, "languages": len(langs_by[(src, lic)])}
            for (src, lic), n in sorted(rows_by.items(), key=lambda kv: (-kv[1], kv[0]))]


# The ``src`` prefix of general-domain rows (the pipeline's ``data.general``), which
# ``train.general_share`` samples apart from the software-localisation rows of the same language.
GENERAL_SRC_PREFIX = "general:"


@dataclass(frozen=True, slots=True)
class Pair:
    """A translation pair aligned to the pivot language (English).

    ``lang`` is the canonical code (see :mod:`tinyglot.languages`) of ``x``; ``en`` is the
    pivot-side sentence.  ``src`` and ``license`` record where the pair came from.

    A *monolingual* row has ``en == x``: a sentence with no translation (general-domain text,
    ``tinyglot data general``).  A multilingual teacher embeds it itself, so it is distilled on
    like a pair, but it never enters a dev or test set (it would be found trivially).
    """

    lang: str
    x: str
    en: str
    src: str = ""
    license: str = ""

    @property
    def monolingual(self) -> bool:
        return self.x == self.en

    @property
    def general(self) -> bool:
        """A general-domain row (``src`` starts with :data:`GENERAL_SRC_PREFIX`)."""
        return self.src.startswith(GENERAL_SRC_PREFIX)

    def to_dict(self) -> dict[str, str]:
        return asdict(self)
