"""Mining (BUCC style) and STS evaluations of any ``Encoder``, with results written as files."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any
from collections.abc import Mapping, Sequence

import numpy as np

from tinyglot.data.pairs import Pair
from tinyglot.encoder import Encoder
from tinyglot.errors import DataError, TinyglotError
from tinyglot.evaluation.bitext import encode_checked
from tinyglot.evaluation.metrics import bucc_mining, spearman
from tinyglot.io import atomic_write_json


@dataclass
class MiningReport:
    """Margin-based mining per language: threshold chosen on half the sources, P/R/F1 on the rest."""

    model: str
    testset: str
    rows: dict[str, dict[str, float]] = field(default_factory=dict)

    @property
    def primary_metric(self) -> float:
        return float(np.mean([r["f1"] for r in self.rows.values()])) if self.rows else float("nan")

    def to_dict(self) -> dict[str, Any]:
        return {"model": self.model, "testset": self.testset, "primary_metric": self.primary_metric,
                "languages": self.rows}

    def write_json(self, path: str | Path) -> None:
        atomic_write_json(path, self.to_dict())

    def to_table(self):
        from rich.table import Table

        table = Table(title=f"Mining (ratio margin, k=4): {self.model} on {self.testset}")
        for name, justify in (("lang", "left"), ("threshold", "right"), ("P", "right"), ("R", "right"),
                              ("F1", "right")):
            table.add_column(name, justify=justify)
        for lang, r in self.rows.items():
            table.add_row(lang, f"{r['threshold']:.3f}", *(f"{100 * r[k]:.1f}" for k in ("precision", "recall", "f1")))
        table.add_row("average", "", "", "", f"{100 * self.primary_metric:.1f}", end_section=True)
        return table


def evaluate_mining(encoder: Encoder, testset: Mapping[str, Sequence[Pair]], *, batch_size: int = 64,
                    model_name: str = "", testset_name: str = "", seed: int = 0) -> MiningReport:
    """For each language mine x -> en pairs by margin; the gold pairs are the test pairs."""
    name = model_name or getattr(encoder, "name", type(encoder).__name__)
    report = MiningReport(name, testset_name)
    for lang, pairs in testset.items():
        if len(pairs) < 4:
            raise TinyglotError(f"language {lang!r} has {len(pairs)} pairs; mining needs at least 4")
        x = encode_checked(encoder, [p.x for p in pairs], batch_size, name)
        en = encode_checked(encoder, [p.en for p in pairs], batch_size, name, x.shape[1])
        result = bucc_mining(x, en, [(i, i) for i in range(len(pairs))], seed=seed)
        report.rows[lang] = asdict(result)
    return report


def read_sts(path: str | Path) -> tuple[list[str], list[str], np.ndarray]:
    """An STS file: ``sentence1<TAB>sentence2<TAB>score`` per line (optionally gzipped)."""
    path = Path(path)
    if not path.is_file():
        raise DataError(path, "file not found", "pass an STS file: sentence1<TAB>sentence2<TAB>score")
    from tinyglot.data.readers import MAX_LINE_CHARS, iter_lines

    a, b, gold = [], [], []
    for n, line in iter_lines(path, MAX_LINE_CHARS):
        if line is None or not line.strip():
            continue
        cols = [c.strip() for c in line.split("\t")]
        if len(cols) != 3:
            raise DataError(path, f"expected 3 tab-separated columns, found {len(cols)}",
                            "write lines as sentence1<TAB>sentence2<TAB>score", line=n)
        try:
            gold.append(float(cols[2]))
        except ValueError:
            raise DataError(path, f"score {cols[2]!r} is not a number", line=n) from None
        if not cols[0] or not cols[1]:
            raise DataError(path, "an empty sentence", "remove the line or fill both sentences", line=n)
        a.append(cols[0])
        b.append(cols[1])
    if len(gold) < 2:
        raise DataError(path, "an STS file needs at least 2 scored pairs")
    return a, b, np.asarray(gold)


def evaluate_sts(encoder: Encoder, path: str | Path, *, batch_size: int = 64) -> dict[str, Any]:
    """Spearman rho between cosine similarities and gold scores (None if undefined)."""
    a, b, gold = read_sts(path)
    name = getattr(encoder, "name", type(encoder).__name__)
    ea = encode_checked(encoder, a, batch_size, name)
    eb = encode_checked(encoder, b, batch_size, name, ea.shape[1])
    cos = (ea * eb).sum(axis=1)
    rho = spearman(cos, gold)
    return {"model": name, "file": str(path), "pairs": len(gold),
            "spearman": None if np.isnan(rho) else rho}  # NaN (constant scores) is not valid JSON
