"""The unit of parallel data: one sentence in some language and its English (pivot) translation."""

from __future__ import annotations

from dataclasses import asdict, dataclass


@dataclass(frozen=True, slots=True)
class Pair:
    """A translation pair aligned to the pivot language (English).

    ``lang`` is the canonical code (see :mod:`tinyglot.languages`) of ``x``; ``en`` is the
    pivot-side sentence.  ``src`` and ``license`` record where the pair came from.
    """

    lang: str
    x: str
    en: str
    src: str = ""
    license: str = ""

    def to_dict(self) -> dict[str, str]:
        return asdict(self)
