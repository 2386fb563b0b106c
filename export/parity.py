"""Parity of an exported model against its source: same sentences in, same embeddings out.

:func:`check_parity` encodes held-out sentences of every language of the bundle (the embedded test
set by default, up to ``max_sentences`` pairs per language) with the reference encoder (the torch
source) and the exported one, and measures:

- per language: max abs difference, mean and min cosine of the two embeddings of each sentence,
  and bitext P@1 of both (``tinyglot.evaluation.evaluate_bitext``);
- the norm of the exported rows (the graph must normalise);
- batch and padding invariance: each of a few sentences encoded alone vs inside a padded batch of
  long sentences (max abs difference).

:class:`Gates` holds the thresholds; ``Gates.for_mode("none"|"dynamic"|"static"|"fp16")`` gives
the defaults (fp32: mean cosine >= 0.9999; int8/fp16: mean cosine >= 0.99 and P@1 within 1 point).

String-in bundles (``onnx-text``, ``tflite-mediapipe``) are also checked by :func:`check_standalone`:
the file runs in a separate ``python -I`` process that imports only its runtime (the scripts
``standalone_onnx.py`` / ``standalone_mediapipe.py`` beside this module: no tinyglot, no
sentencepiece) on the test pairs plus :data:`HARD_SENTENCES`; its token ids must equal the Python
tokenizer's on every sentence, sentences without tokens must give zero rows, and the cosine and
P@1 gates apply.  The result is :attr:`ParityReport.standalone` (``"standalone"`` in parity.json)
and its failures are the report's failures.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any
from collections.abc import Mapping, Sequence

import numpy as np

from tinyglot.encoder import Encoder
from tinyglot.errors import TinyglotError
from tinyglot.io import atomic_write_json


@dataclass
class Gates:
    """Thresholds a bundle must meet.  P@1 figures are in points (percent)."""

    min_mean_cosine: float = 0.9999
    min_cosine: float = 0.999
    max_abs_diff: float = 1e-3
    max_p1_drop: float = 1.0
    max_norm_error: float = 1e-3
    max_invariance_diff: float = 1e-4

    @classmethod
    def for_mode(cls, mode: str) -> Gates:
        """Defaults for a quantization mode: ``none`` (fp32) is strict; int8 and fp16 looser."""
        if mode in ("none", "fp32"):
            return cls()
        if mode == "fp16":
            return cls(min_mean_cosine=0.99, min_cosine=0.95, max_abs_diff=0.1, max_p1_drop=1.0,
                       max_norm_error=1e-2, max_invariance_diff=1e-2)
        # int8: dynamic quantization scales activations per tensor, i.e. per batch, so the same
        # sentence in another batch differs slightly; the cosine gates bound what matters.
        return cls(min_mean_cosine=0.99, min_cosine=0.9, max_abs_diff=0.25, max_p1_drop=1.0,
                   max_norm_error=1e-2, max_invariance_diff=5e-2)


@dataclass
class LangParity:
    lang: str
    n_sentences: int
    mean_cosine: float
    min_cosine: float
    max_abs_diff: float
    p1_reference: float  # percent, mean of both directions
    p1_exported: float

    @property
    def p1_drop(self) -> float:
        return self.p1_reference - self.p1_exported


@dataclass
class ParityReport:
    """Figures of one parity check; :attr:`failures` lists the gates that failed, with numbers."""

    gates: Gates
    rows: list[LangParity] = field(default_factory=list)
    max_norm_error: float = 0.0
    invariance_diff: float = 0.0
    invariance_sentences: int = 0
    label: str = ""
    # the same file checked in a process without tinyglot (string-in bundles), see check_standalone
    standalone: StandaloneReport | None = None

    # -------------------------------------------------------------- aggregates
    @property
    def n_sentences(self) -> int:
        return sum(r.n_sentences for r in self.rows)

    @property
    def mean_cosine(self) -> float:
        n = self.n_sentences
        return float(sum(r.mean_cosine * r.n_sentences for r in self.rows) / n) if n else math.nan

    @property
    def min_cosine(self) -> float:
        return min((r.min_cosine for r in self.rows), default=math.nan)

    @property
    def max_abs_diff(self) -> float:
        return max((r.max_abs_diff for r in self.rows), default=math.nan)

    @property
    def p1_reference(self) -> float:
        return float(np.mean([r.p1_reference for r in self.rows])) if self.rows else math.nan

    @property
    def p1_exported(self) -> float:
        return float(np.mean([r.p1_exported for r in self.rows])) if self.rows else math.nan

    @property
    def p1_drop(self) -> float:
        return self.p1_reference - self.p1_exported

    @property
    def failures(self) -> list[str]:
        g = self.gates
        out = []
        if not self.rows:
            return ["no sentences were compared"]
        if not self.mean_cosine >= g.min_mean_cosine:
            out.append(f"mean cosine {self.mean_cosine:.6f} < {g.min_mean_cosine}")
        if not self.min_cosine >= g.min_cosine:
            worst = min(self.rows, key=lambda r: r.min_cosine)
            out.append(f"min cosine {self.min_cosine:.6f} < {g.min_cosine} (language {worst.lang})")
        if not self.max_abs_diff <= g.max_abs_diff:
            out.append(f"max abs diff {self.max_abs_diff:.3g} > {g.max_abs_diff}")
        if not self.p1_drop <= g.max_p1_drop:
            out.append(f"P@1 {self.p1_exported:.2f} vs reference {self.p1_reference:.2f}: "
                       f"drop of {self.p1_drop:.2f} points > {g.max_p1_drop}")
        if not self.max_norm_error <= g.max_norm_error:
            out.append(f"rows are not L2-normalised: | |e| - 1 | up to {self.max_norm_error:.3g} > {g.max_norm_error}")
        if not self.invariance_diff <= g.max_invariance_diff:
            out.append(f"batch/padding invariance: a sentence alone vs in a padded batch differs by "
                       f"{self.invariance_diff:.3g} > {g.max_invariance_diff}")
        if self.standalone is not None:
            out += [f"standalone {self.standalone.runtime}: {f}" for f in self.standalone.failures(g)]
        return out

    @property
    def passed(self) -> bool:
        return not self.failures

    def raise_if_failed(self, fix: str | None = None) -> None:
        if self.failures:
            raise TinyglotError(
                f"parity check failed{' for ' + self.label if self.label else ''}: " + "; ".join(self.failures),
                fix or "the exported model does not compute what the source computes; "
                       "pass --no-parity-gate to keep it anyway",
            )

    # -------------------------------------------------------------- output
    def to_dict(self) -> dict[str, Any]:
        return {
            "label": self.label,
            "passed": self.passed,
            "failures": self.failures,
            "gates": asdict(self.gates),
            "n_sentences": self.n_sentences,
            "mean_cosine": self.mean_cosine,
            "min_cosine": self.min_cosine,
            "max_abs_diff": self.max_abs_diff,
            "p1_reference": self.p1_reference,
            "p1_exported": self.p1_exported,
            "p1_drop": self.p1_drop,
            "max_norm_error": self.max_norm_error,
            "invariance_diff": self.invariance_diff,
            "invariance_sentences": self.invariance_sentences,
            "languages": [{**asdict(r), "p1_drop": r.p1_drop} for r in self.rows],
            **({"standalone": self.standalone.to_dict()} if self.standalone is not None else {}),
        }

    def write_json(self, path: str | Path) -> Path:
        path = Path(path)
        atomic_write_json(path, self.to_dict())
        return path

    def to_table(self):
        from rich.table import Table

        verdict = "[green]passed[/]" if self.passed else "[red]FAILED[/]"
        table = Table(title=f"Parity {self.label or 'exported vs reference'}: {verdict}")
        table.add_column("lang")
        for name in ("sentences", "mean cos", "min cos", "max |Δ|", "P@1 ref", "P@1 exp", "Δ P@1"):
            table.add_column(name, justify="right")
        for i, r in enumerate(self.rows):
            table.add_row(r.lang, str(r.n_sentences), f"{r.mean_cosine:.6f}", f"{r.min_cosine:.6f}",
                          f"{r.max_abs_diff:.2e}", f"{r.p1_reference:.1f}", f"{r.p1_exported:.1f}",
                          f"{-r.p1_drop:+.1f}", end_section=i == len(self.rows) - 1)
        table.add_row("all", str(self.n_sentences), f"{self.mean_cosine:.6f}", f"{self.min_cosine:.6f}",
                      f"{self.max_abs_diff:.2e}", f"{self.p1_reference:.1f}", f"{self.p1_exported:.1f}",
                      f"{-self.p1_drop:+.1f}")
        table.caption = (f"max | |e| - 1 |: {self.max_norm_error:.1e}; alone vs padded batch: "
                         f"{self.invariance_diff:.1e} ({self.invariance_sentences} sentences)")
        if self.standalone is not None:
            sa = self.standalone
            table.caption += (f"\nseparate process, {sa.runtime} only: ids identical on {sa.n_ids_equal}/"
                              f"{sa.n_sentences} sentences, mean cosine {sa.mean_cosine:.6f}, min "
                              f"{sa.min_cosine:.6f}, P@1 {sa.p1_exported:.1f} vs {sa.p1_reference:.1f}")
        if self.failures:
            table.caption += "\nfailed: " + "; ".join(self.failures)
        return table


def _subset(testset: Mapping[str, Sequence], languages: Sequence[str] | None, max_sentences: int) -> dict:
    if languages is not None:
        wanted = set(languages)
        chosen = {lang: list(pairs) for lang, pairs in testset.items() if lang in wanted}
        if not chosen:
            raise TinyglotError(
                f"the test set has none of the model's languages ({', '.join(sorted(wanted))}); "
                f"it has {', '.join(sorted(testset))}",
                "pass a test set in the model's languages",
            )
    else:
        chosen = {lang: list(pairs) for lang, pairs in testset.items()}
    return {lang: pairs[:max_sentences] for lang, pairs in chosen.items() if pairs}


def _invariance(exported: Encoder, sentences: Sequence[str], n_probe: int = 3, n_long: int = 5) -> tuple[float, int]:
    """Max abs diff of each probe sentence encoded alone vs in one padded batch of long sentences."""
    uniq = sorted(set(sentences), key=len)
    if len(uniq) < 2:
        return 0.0, 0
    probes = uniq[: min(n_probe, len(uniq) - 1)]
    longs = uniq[-min(n_long, len(uniq) - len(probes)):]
    batch = [*longs, *probes]
    together = np.asarray(exported.encode(batch, batch_size=len(batch)), dtype=np.float32)
    worst = 0.0
    for i, s in enumerate(probes):
        alone = np.asarray(exported.encode([s], batch_size=1), dtype=np.float32)[0]
        worst = max(worst, float(np.abs(alone - together[len(longs) + i]).max()))
    # batch size: the same sentences in batches of 2 vs all at once
    halves = np.asarray(exported.encode(batch, batch_size=2), dtype=np.float32)
    worst = max(worst, float(np.abs(halves - together).max()))
    return worst, len(probes)


def check_parity(
    reference: Encoder,
    exported: Encoder,
    testset: Mapping[str, Sequence] | None = None,
    gates: Gates | None = None,
    *,
    languages: Sequence[str] | None = None,
    max_sentences: int = 100,
    batch_size: int = 32,
    label: str = "",
) -> ParityReport:
    """Compare ``exported`` against ``reference`` on held-out pairs (see the module docstring).

    ``testset`` is ``{lang: [Pair]}`` (default: the embedded test set); ``languages`` keeps only
    those (e.g. the bundle's); ``max_sentences`` caps the pairs per language (each pair gives two
    sentences).  Returns a :class:`ParityReport`; it does not raise on a failed gate (call
    :meth:`ParityReport.raise_if_failed`).
    """
    from tinyglot.evaluation import evaluate_bitext

    if max_sentences < 1:
        raise TinyglotError(f"max_sentences must be >= 1, got {max_sentences}")
    if testset is None:
        from tinyglot.data.embedded import load_testset

        testset = load_testset()
    subset = _subset(testset, languages, max_sentences)
    if not subset:
        raise TinyglotError("the parity test set is empty", "pass a test set with pairs")
    report = ParityReport(gates or Gates(), label=label)
    all_sentences: list[str] = []
    for lang, pairs in subset.items():
        sentences = [p.x for p in pairs] + [p.en for p in pairs]
        all_sentences += sentences
        ref = np.asarray(reference.encode(sentences, batch_size=batch_size), dtype=np.float64)
        exp = np.asarray(exported.encode(sentences, batch_size=batch_size), dtype=np.float64)
        if exp.shape != ref.shape:
            raise TinyglotError(f"the exported model gives shape {exp.shape}, the reference {ref.shape}",
                                "the export does not match its source; re-export it")
        norms = np.linalg.norm(exp, axis=1)
        report.max_norm_error = max(report.max_norm_error, float(np.abs(norms - 1).max()))
        ref_n = ref / np.maximum(np.linalg.norm(ref, axis=1, keepdims=True), 1e-12)
        exp_n = exp / np.maximum(norms[:, None], 1e-12)
        cos = (ref_n * exp_n).sum(axis=1)
        report.rows.append(LangParity(lang, len(sentences), float(cos.mean()), float(cos.min()),
                                      float(np.abs(exp - ref).max()), math.nan, math.nan))
    ref_p1 = evaluate_bitext(reference, subset, batch_size=batch_size)
    exp_p1 = evaluate_bitext(exported, subset, batch_size=batch_size)
    for row, r, e in zip(report.rows, ref_p1.rows, exp_p1.rows, strict=True):
        row.p1_reference = 100 * r.mean
        row.p1_exported = 100 * e.mean
    report.invariance_diff, report.invariance_sentences = _invariance(exported, all_sentences)
    return report


# ====================================================================== string-in bundles, outside tinyglot
# Sentences every string-in bundle must treat like the Python tokenizer: longer than any max_len (one of
# them 1 MB), empty and whitespace-only, emoji, mixed scripts, odd whitespace, case folding, full width.
HARD_SENTENCES: tuple[str, ...] = (
    "", " ", "\t \n", "\u200b", "\u3000\u00a0\u2009",
    "Hello WORLD", "İSTANBUL ıstanbul", "STRASSE Straße GROẞ", "ΟΔΥΣΣΕΥΣ",
    "ＦＵＬＬ　ｗｉｄｔｈ　１２３", "emoji 😀👍🏽 👨\u200d👩\u200d👧 ok", "日本語とEnglishとРусский混在",
    "tab\there\u00a0nbsp\u200bzero-width  double   spaces", "line\r\nbreak\u2028sep", "<2de> Hallo <2fr>",
    "ﬁ ℌ ① ㍻ e\u0301", "Откройте диалоговое окно и выберите нужный параметр из списка. " * 20,
    " " * 3000 + "words after many spaces", "long " * 200_000,
)
FORBIDDEN_MODULES = ("tinyglot", "sentencepiece", "tensorflow", "tensorflow_text", "torch", "transformers")
STANDALONE_ONNX = "standalone_onnx.py"  # scripts beside this module, run with ``python -I``
STANDALONE_MEDIAPIPE = "standalone_mediapipe.py"


@dataclass
class StandaloneReport:
    """A bundle run by a separate process that imports only its runtime (no tinyglot, no sentencepiece)."""

    runtime: str
    forbidden_modules: list[str]  # tinyglot / sentencepiece modules the process had loaded (must be none)
    n_sentences: int
    n_ids_equal: int
    first_id_mismatch: str
    mean_cosine: float
    min_cosine: float
    max_empty_row: float  # largest |value| of the rows of sentences without tokens (must be 0)
    p1_reference: float
    p1_exported: float
    seconds: float

    @property
    def p1_drop(self) -> float:
        return self.p1_reference - self.p1_exported

    def failures(self, gates: Gates) -> list[str]:
        out = []
        if self.forbidden_modules:
            out.append(f"the process imported {', '.join(self.forbidden_modules)}")
        if self.n_ids_equal != self.n_sentences:
            out.append(f"token ids differ on {self.n_sentences - self.n_ids_equal}/{self.n_sentences} sentences "
                       f"(first: {self.first_id_mismatch})")
        if not self.mean_cosine >= gates.min_mean_cosine:
            out.append(f"mean cosine {self.mean_cosine:.6f} < {gates.min_mean_cosine}")
        if not self.min_cosine >= gates.min_cosine:
            out.append(f"min cosine {self.min_cosine:.6f} < {gates.min_cosine}")
        if not self.max_empty_row <= 1e-6:
            out.append(f"a sentence without tokens gave a non-zero row ({self.max_empty_row:.3g})")
        if not self.p1_drop <= gates.max_p1_drop:
            out.append(f"P@1 {self.p1_exported:.2f} vs reference {self.p1_reference:.2f}: drop of "
                       f"{self.p1_drop:.2f} points > {gates.max_p1_drop}")
        return out

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "p1_drop": self.p1_drop}


class _Lookup:
    """An ``Encoder`` answering from precomputed rows (embeddings another process computed)."""

    def __init__(self, rows: Mapping[str, np.ndarray]) -> None:
        self.rows = rows

    def encode(self, sentences: Sequence[str], batch_size: int = 64) -> np.ndarray:
        return np.stack([self.rows[s] for s in sentences]).astype(np.float32)


def run_standalone(script: str, model_file: str | Path, sentences: Sequence[str], threads: int = 1,
                   timeout: float = 1800, python: str | None = None) -> dict[str, Any]:
    """Run ``script`` (beside this module) with ``python -I`` on ``sentences``; returns its JSON answer
    ``{"runtime", "modules", "ids": [[...]], "embeddings": [[...]]}``.  ``python``: another
    interpreter (e.g. a virtual environment with another MediaPipe version; default: this one)."""
    import json
    import os
    import subprocess
    import sys
    import tempfile

    path = Path(__file__).with_name(script)
    with tempfile.TemporaryDirectory(prefix="tinyglot-standalone-") as tmp:
        spec = Path(tmp) / "in.json"
        answer = Path(tmp) / "out.json"
        spec.write_text(json.dumps({"model": str(Path(model_file).resolve()), "sentences": list(sentences),
                                    "threads": int(threads)}), encoding="utf-8")
        env = {k: v for k, v in os.environ.items() if not k.startswith("PYTHON")}
        env.update(OMP_NUM_THREADS=str(threads), GLOG_minloglevel="2", TF_CPP_MIN_LOG_LEVEL="2")
        proc = subprocess.run([python or sys.executable, "-I", str(path), str(spec), str(answer)], env=env, check=False,
                              capture_output=True, text=True, timeout=timeout)
        if proc.returncode != 0 or not answer.is_file():
            raise TinyglotError(f"the standalone check {script} failed (exit {proc.returncode}): "
                                f"{(proc.stderr or proc.stdout).strip()[-2000:]}",
                                "install the bundle's runtime (pip install 'tinyglot[export]') and re-export")
        return json.loads(answer.read_text(encoding="utf-8"))


def check_standalone(
    script: str,
    model_file: str | Path,
    reference: Encoder,
    tokenizer,
    max_len: int,
    testset: Mapping[str, Sequence] | None = None,
    gates: Gates | None = None,
    *,
    languages: Sequence[str] | None = None,
    max_sentences: int = 100,
    threads: int = 1,
    extra: Sequence[str] = HARD_SENTENCES,
    python: str | None = None,
) -> StandaloneReport:
    """Run a string-in bundle in a separate process that imports only its runtime and compare it with
    ``reference`` (the torch source) on the test pairs and ``extra`` sentences: the token ids must be
    ``tokenizer.tokenize(s)[:max_len]`` on every sentence, a sentence without tokens must give a zero
    row, cosine and P@1 as the gates say."""
    import time

    from tinyglot.evaluation import evaluate_bitext

    if testset is None:
        from tinyglot.data.embedded import load_testset

        testset = load_testset()
    subset = _subset(testset, languages, max_sentences)
    pairs_sentences = [s for pairs in subset.values() for p in pairs for s in (p.x, p.en)]
    sentences = list(dict.fromkeys([*pairs_sentences, *extra, *(s.upper() for s in pairs_sentences[:50])]))
    start = time.perf_counter()
    answer = run_standalone(script, model_file, sentences, threads, python=python)
    seconds = time.perf_counter() - start
    got_ids = [list(map(int, row)) for row in answer["ids"]]
    emb = np.asarray(answer["embeddings"], dtype=np.float64)
    want_ids = [tokenizer.tokenize(s)[:max_len] for s in sentences]
    # a different segmentation with the same score is a tie of the Viterbi search, broken differently by
    # onnxruntime-extensions' SentencePiece ("edit...." -> "." "..." or "..." "."): the same model
    equal = [tokenizer.equally_likely(g, w) for g, w in zip(got_ids, want_ids, strict=True)]
    mismatch = next((f"{s[:60]!r}: {g[:12]} vs {w[:12]}" for s, g, w, e in
                     zip(sentences, got_ids, want_ids, equal, strict=True) if not e), "")
    filled = [i for i, w in enumerate(want_ids) if w]
    empty = [i for i, w in enumerate(want_ids) if not w]
    ref = np.asarray(reference.encode([sentences[i] for i in filled]), dtype=np.float64)
    exp = emb[filled]
    cos = (ref * exp).sum(axis=1) / np.maximum(np.linalg.norm(ref, axis=1) * np.linalg.norm(exp, axis=1), 1e-12)
    rows = {s: emb[i] for i, s in enumerate(sentences)}
    ref_p1 = evaluate_bitext(reference, subset)
    exp_p1 = evaluate_bitext(_Lookup(rows), subset)
    forbidden = sorted({m.split(".")[0] for m in answer.get("modules", [])} & set(FORBIDDEN_MODULES))
    return StandaloneReport(
        runtime=str(answer.get("runtime", script)), forbidden_modules=forbidden, n_sentences=len(sentences),
        n_ids_equal=int(sum(equal)), first_id_mismatch=mismatch, mean_cosine=float(cos.mean()),
        min_cosine=float(cos.min()), max_empty_row=float(np.abs(emb[empty]).max()) if empty else 0.0,
        p1_reference=100 * float(np.mean([r.mean for r in ref_p1.rows])),
        p1_exported=100 * float(np.mean([r.mean for r in exp_p1.rows])), seconds=seconds)


__all__ = ["HARD_SENTENCES", "Gates", "LangParity", "ParityReport", "StandaloneReport", "check_parity",
           "check_standalone", "run_standalone"]


def parity_paragraph(report: ParityReport | None) -> str:
    """The "Parity with the PyTorch source" section of a string-in bundle's model card ("" without rows)."""
    if report is None or not report.rows:
        return ""
    text = (f"\n## Parity with the PyTorch source\n\nMean cosine {report.mean_cosine:.6f}, P@1 "
            f"{report.p1_exported:.1f} vs {report.p1_reference:.1f} ({report.n_sentences} test sentences)")
    sa = getattr(report, "standalone", None)
    if sa is not None:
        text += (f"; in a process with {sa.runtime} only: token ids identical on {sa.n_ids_equal}/"
                 f"{sa.n_sentences} sentences, mean cosine {sa.mean_cosine:.6f}")
    return text + ". See `parity.json`.\n"
