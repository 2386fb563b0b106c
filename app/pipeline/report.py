"""The report of a ``tinyglot run``: ``report.md``, ``report.html``, figures and model cards.

Everything is read from the run folder (stage markers, ``teacher.json``, ``distill/summary.json``,
``eval/results.json``, each bundle's ``config.json``/``parity.json``, ``bench/results.sqlite``), so
the report holds only numbers the stages measured.
"""

from __future__ import annotations

import datetime as _dt
import json
import platform
import shlex
import sys
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tinyglot.io import atomic_write_text

if TYPE_CHECKING:  # pragma: no cover
    from .context import RunContext

VERSIONED = ("tinyglot", "torch", "transformers", "sentencepiece", "numpy", "onnx", "onnxruntime", "litert-torch",
             "ai-edge-litert", "matplotlib")
FIGURES = "figures"


# ------------------------------------------------------------------ the numbers
@dataclass
class Column:
    """One evaluated model: a column of the P@1 table and a row of the model table."""

    name: str
    kind: str  # tfidf | teacher | student | bundle
    path: str
    result: Any  # BitextResult
    cached: bool = False
    bundle: dict = field(default_factory=dict)  # config.json of a bundle
    parity: dict = field(default_factory=dict)  # parity.json of a bundle
    bench: dict | None = None  # the bench row at the reference setting

    @classmethod
    def from_dict(cls, m: dict) -> Column:
        """A model of the eval stage's results.json."""
        from tinyglot.evaluation import BitextResult

        return cls(m["name"], m["kind"], m["path"], BitextResult.from_dict(m["result"]), m.get("cached", False))

    @property
    def p1(self) -> float:
        return 100 * self.result.primary_metric


@dataclass
class ExtraTest:
    """A test set of ``data.tests``: its name, path and one column per model."""

    name: str
    path: str
    columns: list[Column]
    kind: str = "bitext"  # or "teacher-retrieval": a monolingual check (tinyglot.evaluation.teacher_check)


@dataclass
class ReportData:
    testset: str
    columns: list[Column]
    teacher: dict
    student: dict
    bench_rows: list[dict]
    reference: tuple[int, int, int] | None  # (threads, batch, seq) the models are compared at
    generated: str
    extra: list[ExtraTest] = field(default_factory=list)
    regimes: dict = field(default_factory=dict)  # bench/regimes.json: the call regimes

    def column(self, kind: str) -> Column | None:
        return next((c for c in self.columns if c.kind == kind), None)


def _read_json(path: Path) -> dict:
    return json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}


def collect(ctx: RunContext) -> ReportData:
    from tinyglot.devices.bench import read_measurements
    from tinyglot.devices.report import latest_rows, reference_setting

    evals = _read_json(ctx.out / "eval" / "results.json")
    rows = latest_rows(read_measurements(ctx.out / "bench" / "results.sqlite"))
    reference = reference_setting(rows) if rows else None
    by_path = {bench_key(r["bundle"]): r for r in rows
               if reference and (r["threads"], r["batch"], r["seq"]) == reference}
    columns = []
    for m in evals.get("models", []):
        col = Column.from_dict(m)
        if m["kind"] in ("bundle", "teacher-bundle"):
            col.bundle = _read_json(Path(m["path"]) / "config.json")
            col.parity = _read_json(Path(m["path"]) / "parity.json")
        if m["path"]:
            col.bench = by_path.get(column_bench_key(col))
        columns.append(col)
    teacher = {**_read_json(ctx.out / "teacher.json"), "spec": ctx.teacher_spec()}
    extra = [ExtraTest(t["name"], t["testset"], [Column.from_dict(m) for m in t["models"]], t.get("kind", "bitext"))
             for t in evals.get("extra", [])]
    return ReportData(evals.get("testset", ""), columns, teacher,
                      _read_json(ctx.out / "distill" / "summary.json"), rows, reference,
                      _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds"), extra,
                      _read_json(ctx.out / "bench" / "regimes.json"))


def bench_key(target: str) -> str:
    """How a bench row names its model: a resolved folder, or ``peer:NAME`` as it is."""
    return target if target.startswith("peer:") else str(Path(target).resolve())


def column_bench_key(col: Column) -> str:
    return f"peer:{col.name.removeprefix('peer ')}" if col.kind == "peer" else bench_key(col.path)


# ------------------------------------------------------------------ formatting helpers
def _pct(v: float | None) -> str:
    return "–" if v is None else f"{v:.1f}"


def _ms(v: float | None) -> str:
    return "–" if v is None else f"{v:.2f}"


def _size(n: int | None) -> str:
    from tinyglot.export.bundle import human_size

    return "–" if not n else human_size(int(n))


def _count(n: int | None) -> str:
    return "–" if n is None else f"{n:,}"


def table(header: list[str], rows: list[list[str]], right_from: int = 1) -> str:
    lines = ["| " + " | ".join(header) + " |",
             "|" + "|".join("---" if i < right_from else "---:" for i in range(len(header))) + "|"]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(lines)


def p1_table(columns: list[Column]) -> str:
    langs = [r.lang for r in columns[0].result.rows]
    rows = [[lang] + [_pct(100 * c.result.rows[i].mean) for c in columns] for i, lang in enumerate(langs)]
    rows.append(["**average**"] + [f"**{_pct(c.p1)}**" for c in columns])
    return table(["lang"] + [c.name for c in columns], rows)


def test_sets_table(data: ReportData) -> str:
    """Mean P@1 of every model on every test set, and the student's and each bundle's share of the
    teacher's on each."""
    sets = [(data.testset, data.columns), *((t.name, t.columns) for t in data.extra)]
    rows = []
    for col in data.columns:
        cells = [col.name]
        for _, columns in sets:
            ours = next((c for c in columns if c.name == col.name), None)
            teacher = next((c for c in columns if c.kind == "teacher"), None)
            share = (f" ({100 * ours.p1 / teacher.p1:.0f} %)" if ours is not None and teacher is not None
                     and teacher.p1 > 0 and col.kind in ("student", "bundle") else "")
            cells.append(_pct(ours.p1 if ours else None) + share)
        rows.append(cells)
    return table(["model", *(name for name, _ in sets)], rows)


def model_bytes(col: Column, data: ReportData) -> int | None:
    if col.kind == "teacher":
        return data.teacher.get("bytes")
    if col.kind == "student":
        return data.student.get("bytes")
    if col.kind in ("bundle", "teacher-bundle"):
        files = col.bundle.get("files", [])
        return sum((Path(col.path) / f).stat().st_size for f in files if (Path(col.path) / f).is_file()) or None
    if col.kind == "peer":
        from tinyglot.io import folder_bytes
        from tinyglot.encoders.peers import peer_files

        files = peer_files(col.name.removeprefix("peer "))
        return folder_bytes(files) if files is not None else None
    return None


def parameters(col: Column, data: ReportData) -> str:
    if col.kind in ("teacher", "teacher-bundle"):
        return _count(data.teacher.get("parameters")) + (" (the teacher's)" if col.kind == "teacher-bundle" else "")
    if col.kind in ("student", "bundle"):
        total = (data.student.get("parameters") or {}).get("total")
        return _count(total) + (" (the student's)" if col.kind == "bundle" and total else "")
    return "–"


def tfidf_dim() -> int:
    from tinyglot.evaluation.tfidf import TfidfEncoder

    return TfidfEncoder().dim


def models_table(data: ReportData) -> str:
    rows = []
    for c in data.columns:
        from tinyglot.encoders.peers import PEERS

        peer = PEERS.get(c.name.removeprefix("peer ")) if c.kind == "peer" else None
        dim = {"teacher": data.teacher.get("dim"), "student": data.student.get("dim"),
               "bundle": c.bundle.get("dim"), "teacher-bundle": c.bundle.get("dim"), "tfidf": tfidf_dim(),
               "peer": peer.dim if peer else None}.get(c.kind)
        q = (c.bundle.get("quantization") or {}).get("name") or (c.bundle.get("quantization") or {}).get("mode")
        fmt = {"tfidf": "character n-gram TF-IDF", "teacher": data.teacher.get("kind") or "",
               "student": "PyTorch (fp32)", "peer": f"peer: {peer.model}" if peer else "peer"}.get(
            c.kind, f"{c.bundle.get('format')} ({q})")
        b = c.bench or {}
        rows.append([c.name, fmt, str(dim or "–"), parameters(c, data), _size(model_bytes(c, data)), _pct(c.p1),
                     _ms(b.get("p50_ms")), _ms(b.get("p90_ms")),
                     "–" if b.get("throughput_sps") is None else f"{b['throughput_sps']:.1f}"])
    return table(["model", "format", "dim", "parameters", "size", "P@1 %", "p50 ms", "p90 ms", "sentences/s"],
                 rows, right_from=2)


def parity_table(columns: list[Column]) -> str:
    rows = []
    for c in columns:
        p = c.parity
        if not p:
            continue
        rows.append([c.name, "passed" if p.get("passed") else "FAILED: " + "; ".join(p.get("failures", [])),
                     str(p.get("n_sentences")), f"{p.get('mean_cosine', 0):.5f}", f"{p.get('min_cosine', 0):.5f}",
                     f"{p.get('max_abs_diff', 0):.2e}", _pct(p.get("p1_reference")), _pct(p.get("p1_exported")),
                     f"{p.get('p1_drop', 0):+.2f}"])
    return table(["bundle", "gates", "sentences", "mean cos", "min cos", "max abs diff", "P@1 source",
                  "P@1 bundle", "P@1 drop"], rows, right_from=2)


def stages_table(ctx: RunContext) -> str:
    rows = []
    for name, marker in ctx.markers.items():
        ran = ctx.ran.get(name)
        status = "ran" if ran else f"reused (done {marker.finished})"
        extra = ""
        if marker.info.get("resumed"):
            extra = " (resumed from last.pt)"
        rows.append([name, status + extra, f"{marker.seconds:.1f}", _mb(marker.info.get("peak_rss_mb"))])
    rows.append(["report", "ran", "–", "–"])
    return table(["stage", "in the run that wrote this report", "wall time, s", "peak memory (RSS) so far, MB"],
                 rows, right_from=2)


def _mb(value) -> str:
    return f"{value:,.0f}" if isinstance(value, (int, float)) and value > 0 else "–"


def versions() -> dict[str, str]:
    out = {"python": platform.python_version()}
    for dist in VERSIONED:
        try:
            out[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            out[dist] = "not installed"
    return out


def host_line(short: bool = False) -> str:
    from tinyglot.devices.profiles import detect_host

    h = detect_host()
    cpu = f"{h.get('cpu_model') or '?'} ({h.get('machine')}, {h.get('cores_logical')} logical cores)"
    if short:
        return cpu
    return (f"{cpu}, {h.get('cores_physical') or '?'} physical, ISA {' '.join(h.get('flags') or []) or '-'}, "
            f"{(h.get('memory_bytes') or 0) / 2**30:.1f} GiB RAM")


def command_line() -> str:
    args = sys.argv[1:]
    return "tinyglot " + shlex.join(args) if args[:1] == ["run"] else "(run from Python: see config.toml)"


# ------------------------------------------------------------------ figures
def make_figures(ctx: RunContext, data: ReportData) -> list[Path]:
    """The Pareto view (latency vs P@1, size) and latency vs sequence length, with devices/report.py."""
    from tinyglot.devices.report import plot_latency_vs_seq, plot_pareto

    if not data.bench_rows:
        return []
    folder = ctx.out / FIGURES
    folder.mkdir(parents=True, exist_ok=True)
    device = data.bench_rows[0]["device"]
    by_path = {column_bench_key(c): c for c in data.columns if c.path}
    p1: dict[str, tuple[float | None, str]] = {}
    for r in data.bench_rows:
        col = by_path.get(bench_key(r["bundle"]))
        if col is not None:
            p1[r["bundle_hash"]] = (col.p1, f"eval/results.json ({data.testset})")
    out = [plot_pareto(data.bench_rows, p1, folder / "pareto.png", device),
           plot_latency_vs_seq(data.bench_rows, folder / "latency_vs_seq.png", device)]
    return [p for p in out if p is not None]


def against_teacher_bundle(data: ReportData, bundles: list[Column]) -> list[str]:
    """One line per teacher bundle: each student bundle of the same format against it (speed, P@1, size)."""
    lines = []
    for t in (c for c in data.columns if c.kind == "teacher-bundle"):
        tb, t_size = t.bench or {}, model_bytes(t, data)
        for c in (b for b in bundles if b.bundle.get("format") == t.bundle.get("format")):
            b = c.bench or {}
            if not (tb.get("throughput_sps") and b.get("throughput_sps") and t.p1 > 0):
                continue
            size = model_bytes(c, data)
            lines.append(f"- **Student vs its teacher**, `{c.name}` against `{t.name}`: "
                         f"{b['throughput_sps'] / tb['throughput_sps']:.2f}x the sentences/s at "
                         f"{100 * c.p1 / t.p1:.1f} % of its P@1"
                         + (f", {t_size / size:.2f}x smaller" if size and t_size else "") + ".")
    return lines


# ------------------------------------------------------------------ report.md
def render_markdown(ctx: RunContext, data: ReportData, figures: list[Path]) -> str:
    from tinyglot.devices.report import markdown_table
    from .settings import to_toml

    student, teacher, tfidf = data.column("student"), data.column("teacher"), data.column("tfidf")
    retention = student.p1 / teacher.p1 if student and teacher and teacher.p1 > 0 else None
    t_ref = data.reference
    bundles = [c for c in data.columns if c.kind == "bundle"]
    lines = [f"# tinyglot run report ({ctx.cfg.profile} profile)", "",
             f"Generated {data.generated} in `{ctx.out}`.", ""]
    summary = [f"- **Student** `{data.student.get('student')}`: {data.student.get('dim')}-d, "
               f"{_count((data.student.get('parameters') or {}).get('total'))} parameters, "
               f"{_size(data.student.get('bytes'))}, {data.student.get('trained_steps')} distillation steps; "
               f"P@1 **{_pct(student.p1 if student else None)}**"
               + (f" ({100 * retention:.1f} % of the teacher's)" if retention is not None else "") + ".",
               f"- **Teacher** `{data.teacher.get('spec')}` ({data.teacher.get('kind')}, {data.teacher.get('dim')}-d): "
               f"P@1 {_pct(teacher.p1 if teacher else None)}; TF-IDF baseline {_pct(tfidf.p1 if tfidf else None)}."]
    for c in bundles:
        b = c.bench or {}
        summary.append(f"- **Bundle** `{c.name}`: P@1 {_pct(c.p1)}, {_size(model_bytes(c, data))}, p50 "
                       f"{_ms(b.get('p50_ms'))} ms" + (f" at {t_ref[0]} thread(s), batch {t_ref[1]}, seq {t_ref[2]}"
                                                       if t_ref else "")
                       + f"; parity {'passed' if c.parity.get('passed') else 'failed'}.")
    summary += against_teacher_bundle(data, bundles)
    lines += ["## Summary", "", *summary, ""]
    lines += ["## Retrieval quality: P@1 per language", "",
              f"Test set: {data.testset}. P@1 in % (mean of x→en and en→x), cosine retrieval among the pairs of "
              "each language, `tinyglot.evaluation.evaluate_bitext`. TF-IDF is fitted on the training corpus.", "",
              p1_table(data.columns), ""]
    if data.extra:
        lines += ["## P@1 on every test set", "",
                  "Mean P@1 in % per test set (`data.test` first, then `data.tests`); in brackets, the student's "
                  "and each bundle's share of the teacher's P@1 on the same set.", "", test_sets_table(data), ""]
        for t in data.extra:
            lines += [f"### {t.name}: P@1 per language", "", f"Test set: `{t.path}`." + (
                " A monolingual check of teacher retrieval: each held-out sentence's embedding, mapped into the "
                "teacher's space by a least-squares linear map fitted on other held-out sentences of every "
                "language, retrieves the teacher's embedding of the same sentence among the language's check "
                "sentences (and back); P@1 in %, mean of both directions. The teacher scores 100 by construction; "
                "TF-IDF is not scored." if t.kind == "teacher-retrieval" else ""), "", p1_table(t.columns), ""]
    lines += ["## Models: dimensions, parameters, size, speed", "",
              "Size: weight files (teacher: its checkpoint; student: the transformers folder; bundle: the model "
              "file). Latency per query and throughput from the bench stage"
              + (f" at {t_ref[0]} thread(s), batch {t_ref[1]}, sequence length {t_ref[2]}." if t_ref else "."), "",
              models_table(data), ""]
    if data.bench_rows:
        lines += ["## Latency and throughput per runtime", "", f"Host: {host_line()}.", "",
                  "Each row is one process: warm-up, then queries one after the other (p50/p90/p99 per query of "
                  "`batch` sentences padded to exactly `seq` tokens; sentences/s = batch x queries / time). "
                  "Database: `bench/results.sqlite`; `bench/report/report.md` has the same tables.", "",
                  markdown_table(data.bench_rows), ""]
        for fig in figures:
            alt = ("Pareto view: latency vs P@1 and size vs P@1" if "pareto" in fig.name
                   else "latency vs sequence length")
            lines += [f"![{alt}]({fig.relative_to(ctx.out).as_posix()})", ""]
    lines += regimes_section(data)
    if bundles:
        lines += ["## Export parity", "",
                  "Each bundle against its PyTorch source (the student; the teacher for `teacher-*` bundles) on the "
                  f"first {ctx.cfg.export.parity_sentences} test pairs per language (`parity.json` in the bundle).",
                  "", parity_table([c for c in data.columns if c.kind in ("bundle", "teacher-bundle")]), ""]
    lines += ["## Stages", "", stages_table(ctx), "",
              "A stage is reused when its settings and the outputs of the stages it reads are unchanged and its "
              "own outputs still hash the same (`stages/*.json`).", ""]
    lines += ["## Settings and versions", "", f"Command: `{command_line()}`", "",
              table(["package", "version"], [[k, v] for k, v in versions().items()], right_from=2), "",
              f"Platform: {platform.platform()}; CPU: {host_line()}.", "",
              "Settings (`config.toml`; `tinyglot run --config config.toml` repeats the run):", "",
              "```toml", to_toml(ctx.cfg).rstrip(), "```", ""]
    return "\n".join(lines)


def regimes_section(data: ReportData) -> list[str]:
    """The call regimes (single sentences, arrival-order batches of 32, one bulk call) of every benched
    model on the two length profiles, with the ratios to USE-m and the tokens per sentence."""
    from tinyglot.devices.isa import ISAS, NATIVE
    from tinyglot.devices.regimes import BASELINE, REGIMES, regimes_table, tokens_table

    reg = data.regimes
    if not reg.get("rows"):
        return []
    sets = [s["name"] for s in reg.get("sets", [])]
    names = {r["spec"]: r["spec"] if r["spec"].startswith("peer:") else Path(r["spec"]).name for r in reg["rows"]}
    base = any(r["spec"].removeprefix("peer:") == BASELINE and "error" not in r for r in reg["rows"])
    return ["## Call regimes", "",
            f"Sentences/s through each model's `encode` ({reg.get('cpu') or '?'}"
            + ("" if reg.get("isa", NATIVE) == NATIVE else f", {ISAS.get(reg['isa'], reg['isa'])}")
            + f", {reg.get('threads')} thread(s), "
            f"each model in its own process, fastest of {reg.get('repeats')} pass(es)): {', '.join(REGIMES)} = one "
            "sentence per call, consecutive batches of 32 in arrival order, one `encode(all, batch_size=32)` "
            f"call. Sets: {reg.get('description', '')}."
            + (f" `× {BASELINE}`: the ratio to USE-m in the same regime and set." if base else ""),
            "", regimes_table(reg["rows"], sets, names=names), "",
            "Tokens per sentence (each model's own tokenizer, truncated to its max_len; – for models without "
            "one):", "", tokens_table(reg["rows"], sets, names=names), ""]


# ------------------------------------------------------------------ model cards
def _usage_without_tinyglot(col: Column) -> list[str]:
    """For string-in bundles (onnx-text, tflite-mediapipe): the stock-runtime code of their own card."""
    if col.kind != "bundle" or not col.bundle:
        return []
    from tinyglot.export.formats import usage_without_tinyglot

    text = usage_without_tinyglot(col.bundle)
    return ["## Use without tinyglot (raw strings in)", "", text, ""] if text else []


def model_card(ctx: RunContext, data: ReportData, col: Column) -> str:
    """README.md of a student or bundle folder: languages, intended use, limits, numbers."""
    s = data.student
    langs = [lang for lang in (s.get("languages") or []) if lang != "en"]
    multistage = s.get("recipe") == "multi-stage"
    arch, recipe = ("AlbertModel", "the multi-stage recipe") if multistage else ("BertModel", "LEALLA")
    fmt = f"PyTorch (transformers {arch}, fp32)" if col.kind == "student" else \
        f"{col.bundle.get('format')} ({(col.bundle.get('quantization') or {}).get('mode')} quantization)"
    tfidf, teacher, student = data.column("tfidf"), data.column("teacher"), data.column("student")
    compare: list[Column] = []
    for c in (col, student, teacher, tfidf):
        if c is not None and all(c is not x for x in compare):
            compare.append(c)
    b = col.bench or {}
    train = (s.get("settings") or {}).get("train") or {}
    corpus = ctx.cfg.data.train or "the embedded corpus: software localisation strings"
    lines = [f"# {s.get('student')} sentence encoder: {fmt}", "",
             f"Multilingual sentence embeddings ({s.get('dim')} dimensions, L2-normalised) for English and "
             f"{len(langs)} languages, distilled with {recipe} from the teacher `{data.teacher.get('spec')}` and "
             f"written by `tinyglot run` on {data.generated[:10]}.", "",
             "## Use", "", "```python", "import tinyglot", "",
             f'encoder = tinyglot.load("{col.path}")',
             'emb = encoder.encode(["Where is the printer?", "¿Dónde está la impresora?"])  # float32, L2-normalised',
             "similarity = emb[0] @ emb[1]", "```", "",
             "ONNX and TFLite bundles need `pip install \"tinyglot[export]\"` (onnxruntime, ai-edge-litert).", "",
             *_usage_without_tinyglot(col),
             "## Languages", "", ", ".join(["en", *langs]) + ".", "",
             "## Intended use", "",
             "Cross-lingual retrieval, bitext mining and semantic similarity between English and the languages "
             "above, where a large encoder does not fit: on CPUs and phones, for short texts such as interface "
             "strings, help sentences and search queries.", "",
             "## Limits", "",
             f"- Trained on {s.get('train_pairs', 0):,} sentence pairs ({corpus}) for "
             f"{s.get('trained_steps')} steps of {train.get('batch_size')} pairs; other domains (chat, news, long "
             "documents) were not measured and will be weaker.",
             f"- Inputs are truncated to {s.get('max_len')} tokens.",
             "- Languages not listed above were not trained; their embeddings are not meaningful.",
             "- Quantized bundles give embeddings slightly different from the PyTorch student (parity below): "
             "compare embeddings made by the same bundle.",
             "- Evaluated only on the test set below (P@1 of translation retrieval); no bias or fairness "
             "evaluation was done.", "",
             "## Numbers", "", f"P@1 in % on {data.testset} (mean of x→en and en→x):", "",
             p1_table(compare), ""]
    lines += [f"Parameters: {_count((s.get('parameters') or {}).get('total'))}; model size: "
              f"{_size(model_bytes(col, data))}."]
    if col.parity:
        p = col.parity
        lines += ["", f"Parity against the PyTorch student ({p.get('n_sentences')} sentences): mean cosine "
                      f"{p.get('mean_cosine', 0):.5f}, min cosine {p.get('min_cosine', 0):.5f}, P@1 drop "
                      f"{p.get('p1_drop', 0):+.2f} points; gates {'passed' if p.get('passed') else 'FAILED'}."]
    if b:
        lines += ["", f"Latency on {host_line(short=True)}: p50 {_ms(b.get('p50_ms'))} ms, "
                      f"p90 {_ms(b.get('p90_ms'))} ms per "
                      f"query of {b.get('batch')} sentence(s) of {b.get('seq')} tokens with {b.get('threads')} "
                      f"thread(s) ({b.get('runtime')} {b.get('runtime_version') or ''}); "
                      f"{b.get('throughput_sps', 0):.1f} sentences/s."]
    lines += ["", "## Provenance", "", f"Teacher: `{data.teacher.get('spec')}` ({data.teacher.get('kind')}). "
              f"Settings: `{ctx.out / 'config.toml'}`; full report: `{ctx.out / 'report.md'}`.", ""]
    return "\n".join(lines)


# ------------------------------------------------------------------ everything
def write_report(ctx: RunContext) -> list[Path]:
    """Write report.md (+ report.html, figures, model cards); return the files written."""
    data = collect(ctx)
    figures = make_figures(ctx, data)
    md = render_markdown(ctx, data, figures)
    files = [ctx.out / "report.md", *figures]
    atomic_write_text(files[0], md)
    if ctx.cfg.report.html:
        from .report_html import markdown_to_html

        html = markdown_to_html(md, base=ctx.out, title=f"tinyglot run report ({ctx.cfg.profile})")
        atomic_write_text(ctx.out / "report.html", html)
        files.append(ctx.out / "report.html")
    if ctx.cfg.report.model_cards:
        for col in data.columns:
            if col.kind in ("student", "bundle"):
                card = Path(col.path) / "README.md"
                atomic_write_text(card, model_card(ctx, data, col))
                files.append(card)
    return files


__all__ = ["ReportData", "collect", "model_card", "render_markdown", "versions", "write_report"]
