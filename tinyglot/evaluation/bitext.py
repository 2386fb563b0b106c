"""Tatoeba-style bitext retrieval evaluation of any :class:`~tinyglot.encoder.Encoder`.

For each language, the ``x`` sides and the English sides of its pairs are encoded, and P@1 is
measured in both directions (x -> en, en -> x).  The one primary metric is the mean of both
directions averaged over languages (:attr:`BitextResult.primary_metric`).
"""

from __future__ import annotations

import json
import math
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from collections.abc import Callable, Mapping, Sequence

import numpy as np
from rich.table import Table

from tinyglot.data.pairs import Pair
from tinyglot.io import atomic_write_json
from tinyglot.encoder import Encoder, l2_normalize
from tinyglot.errors import TinyglotError
from tinyglot.evaluation.metrics import bitext_p_at_1


@dataclass(frozen=True)
class LangResult:
    """P@1 of one language in both directions (fractions in [0, 1])."""

    lang: str
    n: int
    x2en: float
    en2x: float

    @property
    def mean(self) -> float:
        """Mean of both directions."""
        return (self.x2en + self.en2x) / 2

    def to_dict(self) -> dict[str, Any]:
        return {"lang": self.lang, "n": self.n, "x2en": self.x2en, "en2x": self.en2x, "mean": self.mean}


@dataclass
class BitextResult:
    """Per-language bitext P@1 of one model on one test set."""

    model: str
    testset: str
    margin: bool
    rows: list[LangResult] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def average(self) -> LangResult:
        """Unweighted mean over languages of each column (``lang="average"``, ``n`` = total pairs)."""
        if not self.rows:
            return LangResult("average", 0, math.nan, math.nan)
        return LangResult(
            "average",
            sum(r.n for r in self.rows),
            float(np.mean([r.x2en for r in self.rows])),
            float(np.mean([r.en2x for r in self.rows])),
        )

    @property
    def primary_metric(self) -> float:
        """The one number to compare models by: mean of both directions, averaged over languages."""
        return self.average.mean

    def to_dict(self) -> dict[str, Any]:
        return {
            "model": self.model,
            "testset": self.testset,
            "margin": self.margin,
            "seconds": self.seconds,
            "primary_metric": self.primary_metric,
            "average": self.average.to_dict(),
            "languages": [r.to_dict() for r in self.rows],
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> BitextResult:
        """Inverse of :meth:`to_dict` (derived fields are recomputed, not read)."""
        rows = [
            LangResult(str(r["lang"]), int(r["n"]), float(r["x2en"]), float(r["en2x"]))
            for r in data["languages"]
        ]
        return cls(
            str(data["model"]), str(data["testset"]), bool(data["margin"]), rows, float(data["seconds"])
        )

    def write_json(self, path: str | Path) -> Path:
        """Write :meth:`to_dict` as JSON atomically (temporary file in the same folder, then rename)."""
        atomic_write_json(path, self.to_dict())
        return Path(path)

    @classmethod
    def read_json(cls, path: str | Path) -> BitextResult:
        """Read a file written by :meth:`write_json`."""
        return cls.from_dict(json.loads(Path(path).read_text(encoding="utf-8")))

    def _title(self) -> str:
        scoring = "margin" if self.margin else "cosine"
        return f"Bitext P@1 ({scoring}): {self.model or 'model'} on {self.testset or 'test set'}"

    def to_table(self) -> Table:
        """A rich table: one row per language, then the average row; P@1 in percent."""
        title = self._title()
        table = Table(title=title, min_width=len(title))
        table.add_column("lang")
        for name in ("n", "x→en", "en→x", "mean"):
            table.add_column(name, justify="right")
        for i, r in enumerate([*self.rows, self.average]):
            table.add_row(r.lang, str(r.n), _pct(r.x2en), _pct(r.en2x), _pct(r.mean),
                          end_section=i == len(self.rows) - 1)
        return table

    def to_markdown(self) -> str:
        """The same table as GitHub-flavoured Markdown."""
        lines = [f"**{self._title()}**", "", "| lang | n | x→en | en→x | mean |"]
        lines.append("|---|---:|---:|---:|---:|")
        for r in self.rows:
            lines.append(f"| {r.lang} | {r.n} | {_pct(r.x2en)} | {_pct(r.en2x)} | {_pct(r.mean)} |")
        a = self.average
        lines.append(f"| **average** | {a.n} | {_pct(a.x2en)} | {_pct(a.en2x)} | **{_pct(a.mean)}** |")
        return "\n".join(lines) + "\n"


def _pct(value: float) -> str:
    return "—" if math.isnan(value) else f"{100 * value:.1f}"


def encode_checked(
    encoder: Encoder, sentences: Sequence[str], batch_size: int, name: str, dim: int | None = None
) -> np.ndarray:
    """``encoder.encode(sentences)``, verified against the Encoder protocol and re-normalised.

    Raises TinyglotError naming the encoder when the output is not a finite 2-D float array
    with one row per sentence (and ``dim`` columns when given).
    """
    out = encoder.encode(list(sentences), batch_size=batch_size)
    broke = f"encoder {name!r} broke the Encoder protocol"
    fix = "encode(sentences) must return a float32 array of shape (len(sentences), dim)"
    arr = np.asarray(out)
    if arr.ndim != 2 or arr.shape[0] != len(sentences):
        raise TinyglotError(f"{broke}: {len(sentences)} sentences gave an array of shape {arr.shape}", fix)
    if not np.issubdtype(arr.dtype, np.floating):
        raise TinyglotError(f"{broke}: it returned dtype {arr.dtype}, not floating point", fix)
    if dim is not None and arr.shape[1] != dim:
        raise TinyglotError(f"{broke}: it returned dimension {arr.shape[1]} after {dim} before", fix)
    if not np.isfinite(arr).all():
        raise TinyglotError(f"{broke}: its output contains NaN or infinite values", fix)
    return l2_normalize(arr)


def evaluate_bitext(
    encoder: Encoder,
    testset: Mapping[str, Sequence[Pair]],
    *,
    batch_size: int = 64,
    margin: bool = False,
    model_name: str = "",
    testset_name: str = "",
    on_language: Callable[[str], None] | None = None,
) -> BitextResult:
    """Bitext P@1 of ``encoder`` on every language of ``testset`` (``{lang: pairs}``), both directions.

    Retrieval is among all pairs of the same language, by cosine, or by ratio margin (k=4) with
    ``margin=True``.  Languages are reported in the order of ``testset``; ``on_language(lang)`` is
    called as each one is done (a progress bar).
    """
    if not testset:
        raise TinyglotError(f"test set {testset_name!r} is empty: there are no languages to evaluate")
    name = model_name or getattr(encoder, "name", None) or type(encoder).__name__
    started = time.perf_counter()
    rows: list[LangResult] = []
    dim: int | None = None
    for lang, pairs in testset.items():
        if not pairs:
            raise TinyglotError(f"language {lang!r} of test set {testset_name!r} has no pairs",
                                "drop the language or fill it with pairs")
        x = encode_checked(encoder, [p.x for p in pairs], batch_size, name, dim)
        dim = x.shape[1]
        en = encode_checked(encoder, [p.en for p in pairs], batch_size, name, dim)
        x2en, en2x = bitext_p_at_1(x, en, margin=margin)
        rows.append(LangResult(lang, len(pairs), x2en, en2x))
        if on_language is not None:
            on_language(lang)
    return BitextResult(name, testset_name, margin, rows, time.perf_counter() - started)


def evaluate_all(models: Sequence[tuple[str, Encoder]], testset: Mapping[str, Sequence[Pair]], testset_name: str,
                    *, progress: bool = True, say: Callable[[str], None] | None = None,
                    batch_size: int = 64) -> list[BitextResult]:
    """:func:`evaluate_bitext` of each ``(label, encoder)``, saying which model is evaluated on how many
    sentences and showing a progress bar over the languages (a plain line a minute off a terminal): a
    slow model (a 100 MB teacher on two cores) is never minutes of silence."""
    from tinyglot.training import Progress

    sentences = 2 * sum(len(pairs) for pairs in testset.values())
    results = []
    for label, encoder in models:
        if say is not None:
            say(f"evaluating the {label} on {testset_name} ({len(testset)} languages, {sentences:,} sentences)")
        bar = Progress(total=len(testset), description=f"eval {label}", enabled=progress)
        with bar.run() as shown:
            results.append(evaluate_bitext(encoder, testset, batch_size=batch_size, model_name=label,
                                           testset_name=testset_name, on_language=_counter(shown.update)))
    return results


def _counter(update: Callable[[int, str], None]) -> Callable[[str], None]:
    """``on_language`` for a progress bar: ``update(languages done, the last one)``."""
    done = 0

    def step(lang: str) -> None:
        nonlocal done
        done += 1
        update(done, lang)

    return step


def _column_name(result: BitextResult, results: Sequence[BitextResult]) -> str:
    name = result.model or "model"
    if len({r.testset for r in results}) > 1:
        name += f" / {result.testset}"
    if len({r.margin for r in results}) > 1:
        name += " (margin)" if result.margin else " (cosine)"
    return name


def compare(results: Sequence[BitextResult]) -> Table:
    """A rich table with one column per result: mean P@1 (%) per language, then the average.

    The average row covers the languages every result has, so columns stay comparable.
    """
    if not results:
        raise TinyglotError("compare() needs at least one BitextResult")
    langs: list[str] = []
    for res in results:
        langs += [r.lang for r in res.rows if r.lang not in langs]
    by_lang = [{r.lang: r for r in res.rows} for res in results]
    common = [lang for lang in langs if all(lang in m for m in by_lang)]
    table = Table(title="Bitext P@1, mean of both directions (%)")
    table.add_column("lang")
    for res in results:
        table.add_column(_column_name(res, results), justify="right")
    for i, lang in enumerate(langs):
        cells = [_pct(m[lang].mean) if lang in m else "—" for m in by_lang]
        table.add_row(lang, *cells, end_section=i == len(langs) - 1)
    label = "average" if len(common) == len(langs) else f"average ({len(common)} common)"
    averages = [_pct(float(np.mean([m[lang].mean for lang in common]))) if common else "—" for m in by_lang]
    table.add_row(label, *averages)
    return table
