"""``tinyglot run``: the whole job in one command, teacher -> distill -> export -> eval -> bench -> report.

    tinyglot run                                   # embedded defaults, into runs/pipeline
    tinyglot run --profile tiny --out /tmp/p       # the small profile the tests use
    tinyglot run --config my.toml --set distill.max_steps=300 --set export.formats=onnx-avx512-vnni

Settings come from a named profile (``default``, ``tiny``), then a TOML file (same sections as
:class:`PipelineConfig`; a top-level ``profile = "tiny"`` picks the base), then ``--set``.

Every stage writes ``OUT/stages/<stage>.json`` when it is done (see :mod:`tinyglot.stagecache`): a
rerun skips a stage whose inputs (its settings and the outputs of the stages it reads) are unchanged
and whose output files still hash the same, and reruns it and everything downstream otherwise.
Training stages interrupted mid-way resume from their own ``last.pt``.

Layout of ``OUT``::

    config.toml            the effective settings of the last run
    teacher.json           the teacher used (spec, kind, dimension, parameters); teacher/ if trained here
    distill/               the distillation run (last.pt, metrics.jsonl, summary.json) and student/
    bundles/FMT-QUANT/     exported bundles (tinyglot.load opens each), with parity.json and README.md
    eval/results.json      P@1 per language of TF-IDF, teacher, student and every bundle
    bench/results.sqlite   latency / throughput measurements, and bench/report/ (tinyglot bench report)
    report.md, report.html the report; figures/*.png
    stages/*.json          stage markers
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import shutil
import signal
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, get_args, get_origin, get_type_hints
from collections.abc import Callable, Mapping, Sequence

from tinyglot.config import parse_sets, read_toml, replace, to_dict, validate_positive
from tinyglot.errors import TinyglotError
from tinyglot.io import atomic_write_json, atomic_write_text, folder_bytes
from tinyglot.locks import run_lock
from tinyglot.stagecache import Marker, StageStore, hash_json

DEFAULT_OUT = Path("runs/pipeline")
STAGE_VERSION = 1  # bump when a stage's outputs change meaning: every marker is then stale
Say = Callable[[str], None]


# ====================================================================== settings
@dataclass
class DataSection:
    """Training corpus and test set; empty = the embedded ones; 0 = no cap.

    ``languages`` (comma-separated codes, or a peer's name such as ``e5-small`` for the languages it
    covers) and ``min_pairs_per_lang`` select languages of a large corpus; with either set, the cap
    draws a seeded random sample of each language instead of its first pairs."""

    train: str = ""
    max_pairs_per_lang: int = 0
    languages: str = ""
    min_pairs_per_lang: int = 0
    test: str = ""
    test_pairs_per_lang: int = 0


@dataclass
class TeacherSection:
    """``spec``: ``default`` = the cached ems-small teacher shared with ``tinyglot distill``
    (``$TINYGLOT_HOME/teachers/ems-small-embedded``, trained once if missing); ``train`` = train
    ``preset`` with ``overrides`` (``{"train": {"max_steps": 100}}``) on the run's corpus into
    ``OUT/teacher``; anything else = an existing teacher (folder, ``pypi:``, ``python:``, ``tfhub:``)."""

    spec: str = "default"
    preset: str = "ems-small"
    overrides: dict[str, Any] = field(default_factory=dict)


@dataclass
class DistillSection:
    """The student preset; ``max_steps`` is the distillation budget (steps of ``train.batch_size``
    pairs); ``overrides`` changes any other preset setting (``{"loss": {"fd": false}}``)."""

    # fast-mini (2 layers x 128) and not the paper's lealla-small (24 x 128): the default teacher,
    # ems-small, has 3 layers x 192, so a 24-layer student would be slower than its own teacher.
    student: str = "fast-mini"
    max_steps: int = 600
    overrides: dict[str, Any] = field(default_factory=dict)
    vocab_size: int = 8000  # a new vocabulary's size, for teachers that bring none


@dataclass
class ExportSection:
    """Bundles as (format, quantization); ``threads`` for the runtimes during parity checks and eval.

    TFLite gets batch-1 signatures only (single-stream, as on a phone): measured on lealla-small, 4
    signatures convert in 1 minute with 1 GB of memory, the export CLI's 12 (batches 1, 8, 32) in 6
    minutes with 8 GB, for a 2x larger file and no faster evaluation."""

    # onnx-text / tflite-mediapipe: raw strings in (SentencePiece in the graph / in MediaPipe's metadata)
    formats: list[tuple[str, str]] = field(default_factory=lambda: [
        ("onnx", "dynamic"), ("tflite", "dynamic"), ("onnx-text", "dynamic"), ("tflite-mediapipe", "dynamic")])
    # The teacher as a bundle too (when it is a tinyglot model), evaluated and benchmarked beside the
    # student: the student must beat its own teacher's deployable form, not its PyTorch fp32 one.
    teacher_formats: list[tuple[str, str]] = field(default_factory=lambda: [("onnx", "dynamic")])
    threads: int = 1
    parity_sentences: int = 25  # test pairs per language of each bundle's parity check
    tflite_buckets: list[int] = field(default_factory=lambda: [16, 32, 64, 128])
    tflite_batch_sizes: list[int] = field(default_factory=lambda: [1])


@dataclass
class EvalSection:
    """``peers``: peers of :mod:`tinyglot.encoders.peers` (``use-m``, ``e5-small``, ``minilm``) evaluated beside the
    run's models, on the same test set (each with ``threads`` threads)."""

    batch_size: int = 64
    peers: list[str] = field(default_factory=list)
    threads: int = 1
    # where the PyTorch models (teacher, student) are evaluated: auto = the GPU when there is one
    device: str = "auto"


@dataclass
class BenchSection:
    """Sized so that the bench stage takes about half a minute on the default bundles (six
    measurements, each at least 200 queries after warm-up, in its own process)."""

    device: str = "host"
    torch: bool = True  # also measure the PyTorch student (the fp32 reference)
    threads: list[int] = field(default_factory=lambda: [1])
    batch: list[int] = field(default_factory=lambda: [1])
    seq: list[int] = field(default_factory=lambda: [16, 64])
    min_queries: int = 200
    min_seconds: float = 2.0
    warmup: int = 10


@dataclass
class ReportSection:
    html: bool = True
    model_cards: bool = True


@dataclass
class PipelineConfig:
    profile: str = "default"
    threads: int = 0  # torch intra-op threads for training and evaluation; 0 keeps torch's default
    data: DataSection = field(default_factory=DataSection)
    teacher: TeacherSection = field(default_factory=TeacherSection)
    distill: DistillSection = field(default_factory=DistillSection)
    export: ExportSection = field(default_factory=ExportSection)
    eval: EvalSection = field(default_factory=EvalSection)
    bench: BenchSection = field(default_factory=BenchSection)
    report: ReportSection = field(default_factory=ReportSection)

    def distill_overrides(self) -> dict[str, Any]:
        """The student preset's overrides with the ``max_steps`` budget applied."""
        return deep_merge(self.distill.overrides, {"train": {"max_steps": self.distill.max_steps}})

    def validate(self) -> PipelineConfig:
        from tinyglot.distill.config import get_preset as student_preset
        from tinyglot.export.cli import QUANTIZE_BY_FORMAT

        if self.threads < 0:
            raise TinyglotError(f"threads must be >= 0, got {self.threads}", "set threads = 0 for torch's default")
        for name in ("max_pairs_per_lang", "min_pairs_per_lang", "test_pairs_per_lang"):
            if getattr(self.data, name) < 0:
                raise TinyglotError(f"data.{name} must be >= 0 (0 = all), got {getattr(self.data, name)}")
        for name in ("train", "test"):
            if getattr(self.data, name) and not Path(getattr(self.data, name)).exists():
                raise TinyglotError(f"data.{name} not found: {getattr(self.data, name)}",
                                    f"check the path, or leave data.{name} empty for the embedded data")
        if not self.teacher.spec.strip():
            raise TinyglotError("teacher.spec is empty", "use default, train, or a teacher folder / pypi: / python: spec")
        if self.teacher.spec == "train":
            from tinyglot.teacher import get_preset as teacher_preset

            teacher_preset(self.teacher.preset, self.teacher.overrides)
        student_preset(self.distill.student, self.distill_overrides())
        validate_positive(self.distill, ("vocab_size",), "distill")
        if not self.export.formats:
            raise TinyglotError("export.formats is empty", "list at least one bundle, e.g. onnx-dynamic")
        for fmt, quant in [*self.export.formats, *self.export.teacher_formats]:
            if fmt not in QUANTIZE_BY_FORMAT:
                raise TinyglotError(f"unknown export format {fmt!r}", f"choose one of: {', '.join(QUANTIZE_BY_FORMAT)}")
            if quant not in QUANTIZE_BY_FORMAT[fmt]:
                raise TinyglotError(f"quantization {quant!r} is not available for {fmt}",
                                    f"choose one of: {', '.join(QUANTIZE_BY_FORMAT[fmt])}")
        if len(set(self.bundle_names())) != len(self.export.formats):
            raise TinyglotError("export.formats lists a bundle twice", "list each format-quantization once")
        validate_positive(self.export, ("threads", "parity_sentences"), "export")
        validate_positive(self.eval, ("batch_size", "threads"), "eval")
        from tinyglot.encoders.peers import PEERS, peer_files

        unknown = sorted(set(self.eval.peers) - set(PEERS))
        if unknown:
            raise TinyglotError(f"unknown peer(s) in eval.peers: {', '.join(unknown)}",
                                f"choose among: {', '.join(PEERS)}")
        missing = [name for name in self.eval.peers if peer_files(name) is None]
        if missing:
            raise TinyglotError(f"eval.peers names {', '.join(missing)}, whose package is not installed "
                                f"({', '.join(PEERS[n].package for n in missing)})",
                                'pip install "tinyglot[peers]", or leave the peers out: --set eval.peers=')
        validate_positive(self.bench, ("min_queries",), "bench")
        for name in ("tflite_buckets", "tflite_batch_sizes"):
            _check_ints(getattr(self.export, name), f"export.{name}")
        for name in ("threads", "batch", "seq"):
            _check_ints(getattr(self.bench, name), f"bench.{name}")
        if self.bench.min_seconds < 0 or self.bench.warmup < 0:
            raise TinyglotError("bench.min_seconds and bench.warmup must be >= 0")
        if any(fmt == "tflite" for fmt, _ in self.export.formats):
            missing = sorted(set(self.bench.seq) - set(self.export.tflite_buckets))
            batches = sorted(set(self.bench.batch) - set(self.export.tflite_batch_sizes))
            if missing or batches:
                raise TinyglotError(
                    f"the TFLite bundle has no signature for bench.seq {missing or ''} bench.batch {batches or ''}",
                    "add them to export.tflite_buckets / export.tflite_batch_sizes, or bench other shapes")
        return self

    def bundles(self) -> list[tuple[str, str, str]]:
        """``(format, quantization, folder name)`` of each bundle, e.g. ``("onnx", "dynamic", "onnx-dynamic")``."""
        return [(fmt, quant, f"{fmt}-{quant}") for fmt, quant in self.export.formats]

    def bundle_names(self) -> list[str]:
        return [name for _, _, name in self.bundles()]

    def teacher_bundles(self) -> list[tuple[str, str, str]]:
        """``(format, quantization, folder name)`` of each teacher bundle, e.g. ``teacher-onnx-dynamic``."""
        return [(fmt, quant, f"teacher-{fmt}-{quant}") for fmt, quant in self.export.teacher_formats]


def _check_ints(values: Sequence[int], name: str) -> None:
    if not values or min(values) < 1:
        raise TinyglotError(f"{name} must be a non-empty list of integers >= 1, got {list(values)}")


# ------------------------------------------------------------------ profiles and loading
# A profile is a set of overrides of the defaults, in the same shape as a TOML file.
PROFILES: dict[str, dict[str, Any]] = {
    # Dev evaluation on 100 pairs per language every 200 steps.
    # USE-multilingual (the fast peer) evaluated and benchmarked beside teacher and student.
    "default": {"distill": {"overrides": {"train": {"eval_every": 200, "save_every": 100, "dev_pairs_per_lang": 100}}},
                "eval": {"peers": ["use-m"]}},
    # Small enough for a test on 2 CPU cores: ems-tiny teacher trained into the run folder on 150
    # pairs per language, lealla-tiny student, few signatures, a few bench queries.
    "tiny": {
        "threads": 1,
        "data": {"max_pairs_per_lang": 150, "test_pairs_per_lang": 40},
        "teacher": {"spec": "train", "preset": "ems-tiny",
                    "overrides": {"train": {"max_steps": 30, "save_every": 10, "eval_every": 30,
                                            "batch_size": 16, "dev_fraction": 0.1, "dev_pairs_per_lang": 20,
                                            "vocab_sentences": 3000}, "model": {"vocab_size": 1000}}},
        "distill": {"student": "lealla-tiny", "max_steps": 20,
                    "overrides": {"train": {"save_every": 10, "eval_every": 20, "dev_fraction": 0.1,
                                              "dev_pairs_per_lang": 20}}},
        "export": {"parity_sentences": 20, "tflite_buckets": [48], "tflite_batch_sizes": [1]},
        "eval": {"batch_size": 32},
        "bench": {"seq": [48], "min_queries": 20, "min_seconds": 0.2, "warmup": 2},
    },
    # The strong-teacher path: multilingual-e5-small (its embeddings of the distinct English sentences
    # computed once, cached in chunks) into the fast-small student (2 layers x 256, 16k vocabulary), on
    # every pair of every language of the corpus that e5 covers with at least 1,500 pairs; the peers
    # evaluated beside it.  Give it a large corpus: `--set data.train=corpus.jsonl.gz` (the embedded
    # one has 10 languages).  Measured in the README (stage 2c).
    "e5": {
        "data": {"languages": "e5-small", "min_pairs_per_lang": 1500},
        "teacher": {"spec": "e5-small"},
        "distill": {"student": "fast-small", "max_steps": 2600, "vocab_size": 16000,
                    "overrides": {"train": {"warmup_steps": 200, "eval_every": 500, "save_every": 250,
                                            "dev_pairs_per_lang": 50}}},
        "eval": {"peers": ["use-m", "e5-small"]},
    },
}


def deep_merge(base: Mapping[str, Any], extra: Mapping[str, Any]) -> dict[str, Any]:
    """``base`` with ``extra`` merged in, nested tables merged key by key (``extra`` wins)."""
    out = dict(base)
    for key, value in extra.items():
        if isinstance(value, Mapping) and isinstance(out.get(key), Mapping):
            out[key] = deep_merge(out[key], value)
        else:
            out[key] = value
    return out


def _parse_format(item: Any) -> tuple[str, str]:
    """``"onnx-dynamic"``, ``"onnx:dynamic"`` or ``["onnx", "dynamic"]`` -> ``("onnx", "dynamic")``;
    ``"onnx-text-dynamic"`` -> ``("onnx-text", "dynamic")``."""
    if isinstance(item, (list, tuple)) and len(item) == 2:
        return str(item[0]).strip(), str(item[1]).strip()
    # format names may hold a "-" too: onnx-text-dynamic
    from tinyglot.export.cli import FORMATS

    text = str(item).strip()
    sep = ":" if ":" in text else "-"
    known = [f for f in sorted(FORMATS, key=len, reverse=True) if text.startswith(f + sep)]
    fmt, _, quant = (known[0], sep, text[len(known[0]) + 1:]) if known else text.partition(sep)
    if not fmt or not quant:
        raise TinyglotError(f"export.formats item {item!r} is not FORMAT-QUANTIZATION",
                            "write e.g. onnx-dynamic, tflite-dynamic, onnx-none, tflite-fp16")
    return fmt.strip(), quant.strip()


def _parse_list(name: str, value: Any, item_type: Any) -> list:
    """A list setting from TOML (a list) or ``--set`` (comma-separated text)."""
    items = [x for x in value.split(",") if x.strip()] if isinstance(value, str) else value
    if not isinstance(items, (list, tuple)):
        raise TinyglotError(f"{name} must be a list, got {value!r}", f"write e.g. {name}=1,2")
    if get_origin(item_type) is tuple:
        return [_parse_format(x) for x in items]
    caster = {int: int, float: float, str: str}.get(item_type, lambda x: x)
    try:
        return [caster(x.strip() if isinstance(x, str) else x) for x in items]
    except (TypeError, ValueError):
        raise TinyglotError(f"{name} must be a list of {item_type.__name__}, got {value!r}") from None


def _prepare_section(section: Any, name: str, values: Mapping[str, Any]) -> dict[str, Any]:
    """Turn list and table settings into their values (lists parsed, tables merged into the current
    ones); scalars and unknown keys go to :func:`tinyglot.config.replace`, which checks them."""
    hints = get_type_hints(type(section))
    out: dict[str, Any] = {}
    for key, value in values.items():
        hint = hints.get(key)
        origin = get_origin(hint)
        if origin is dict:
            if not isinstance(value, Mapping):
                raise TinyglotError(f"{name}.{key} is a table of settings, got {value!r}",
                                    f"write e.g. --set {name}.{key}.train.lr=1e-3")
            out[key] = deep_merge(getattr(section, key), value)
        elif origin is list:
            out[key] = _parse_list(f"{name}.{key}", value, get_args(hint)[0])
        else:
            out[key] = value
    return out


def apply_overrides(cfg: PipelineConfig, data: Mapping[str, Any]) -> PipelineConfig:
    """A copy of ``cfg`` with ``data`` (a profile, a TOML file, ``--set`` values) applied."""
    prepared: dict[str, Any] = {}
    for key, value in data.items():
        current = getattr(cfg, key, None)
        if dataclasses.is_dataclass(current) and isinstance(value, Mapping):
            prepared[key] = _prepare_section(current, key, value)
        else:
            prepared[key] = value
    return replace(cfg, prepared)


def load_config(profile: str | None = None, config_file: str | Path | None = None,
                sets: Sequence[str] | None = None) -> PipelineConfig:
    """The profile (``--profile``, else ``--set profile=``, else the file's ``profile``, else
    ``default``), then the TOML file, then ``--set`` values; validated."""
    from_file = read_toml(config_file) if config_file else {}
    from_sets = parse_sets(list(sets or []))
    name = profile or from_sets.pop("profile", None) or from_file.pop("profile", None) or "default"
    from_file.pop("profile", None)
    if name not in PROFILES:
        raise TinyglotError(f"unknown profile {name!r}", f"choose one of: {', '.join(PROFILES)}")
    cfg = PipelineConfig(profile=name)
    for layer in (PROFILES[name], from_file, from_sets):
        cfg = apply_overrides(cfg, layer)
    return cfg.validate()


# ------------------------------------------------------------------ TOML output
def _toml_key(key: str) -> str:
    return key if key and all(c.isalnum() or c in "_-" for c in key) else '"' + key.replace('"', '\\"') + '"'


def _toml_value(value: Any) -> str:
    import json

    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    if isinstance(value, Mapping):
        return "{ " + ", ".join(f"{_toml_key(str(k))} = {_toml_value(v)}" for k, v in value.items()) + " }" \
            if value else "{}"
    raise TinyglotError(f"cannot write {value!r} to TOML")


def to_toml(cfg: PipelineConfig) -> str:
    """The settings as a TOML file that ``--config`` reads back to the same config."""
    data = to_dict(cfg)
    lines = [f"{_toml_key(k)} = {_toml_value(v)}" for k, v in data.items() if not isinstance(v, dict)]
    for section, values in data.items():
        if isinstance(values, dict):
            lines += ["", f"[{section}]"] + [f"{_toml_key(k)} = {_toml_value(v)}" for k, v in values.items()]
    return "\n".join(lines) + "\n"


# ====================================================================== the run
@dataclass
class StageOutput:
    files: list[Path]
    info: dict[str, Any] = field(default_factory=dict)


@dataclass
class RunContext:
    """What the stages share: settings, the run folder, markers of the stages done so far."""

    cfg: PipelineConfig
    out: Path
    say: Say
    progress: bool
    store: StageStore
    markers: dict[str, Marker] = field(default_factory=dict)
    ran: dict[str, bool] = field(default_factory=dict)  # True: ran in this invocation; False: reused
    resume: bool = False  # set per stage: an interrupted attempt with the same inputs may be resumed
    _pairs: list | None = None
    _testset: dict | None = None

    # -------------------------------------------------------------- data
    def train_pairs(self) -> list:
        if self._pairs is None:
            from tinyglot.data.embedded import load_pairs

            d = self.cfg.data
            pairs = load_pairs(d.train or None)
            if d.languages or d.min_pairs_per_lang:
                from tinyglot.data import select_languages
                from tinyglot.languages import language_list

                self._pairs = select_languages(pairs, language_list(d.languages), d.min_pairs_per_lang,
                                               d.max_pairs_per_lang or None)[0]
            else:
                self._pairs = cap_per_lang(pairs, d.max_pairs_per_lang)
        return self._pairs

    def testset(self) -> dict:
        if self._testset is None:
            from tinyglot.data.embedded import load_testset

            testset = load_testset(self.cfg.data.test or None)
            n = self.cfg.data.test_pairs_per_lang
            self._testset = {lang: pairs[:n] if n else pairs for lang, pairs in testset.items()}
        return self._testset

    def testset_name(self) -> str:
        name = self.cfg.data.test or "embedded test set"
        n = self.cfg.data.test_pairs_per_lang
        return f"{name} (first {n} pairs per language)" if n else name

    # -------------------------------------------------------------- run folder
    @property
    def student_dir(self) -> Path:
        return self.out / "distill" / "student"

    def bundle_dir(self, name: str) -> Path:
        return self.out / "bundles" / name

    def teacher_info(self) -> dict[str, Any]:
        return json.loads((self.out / "teacher.json").read_text(encoding="utf-8"))

    def teacher_spec(self) -> str:
        spec = self.teacher_info()["spec"]
        return str(self.out / spec) if not Path(spec).is_absolute() and (self.out / spec).exists() else spec

    def output_hash(self, stage: str, prefix: str = "") -> str:
        """Hash of the files ``stage`` wrote under ``prefix`` (all of them by default)."""
        outputs = self.markers[stage].outputs
        return hash_json({k: v for k, v in outputs.items() if k.startswith(prefix)})


def cap_per_lang(pairs: list, n: int) -> list:
    """The first ``n`` pairs of each language, in corpus order (``n`` = 0: all)."""
    if not n:
        return pairs
    seen: dict[str, int] = {}
    out = []
    for p in pairs:
        if seen.get(p.lang, 0) < n:
            seen[p.lang] = seen.get(p.lang, 0) + 1
            out.append(p)
    return out


def corpus_path(path: str, test: bool = False) -> Path:
    """A data setting as a path; empty = the embedded corpus (or test set)."""
    from tinyglot.data.embedded import default_corpus_path, default_testset_path

    if path:
        return Path(path)
    return default_testset_path() if test else default_corpus_path()


def data_fingerprint(root: Path) -> dict[str, Any]:
    """sha256 of a corpus's files by content, each file hashed once per version (device, inode, size,
    mtime, ctime): a corpus replaced in place with the same size and mtime is not silently reused."""
    from tinyglot.integrity import content_fingerprint

    return content_fingerprint(root)


# ------------------------------------------------------------------ stage 1: teacher
def teacher_inputs(ctx: RunContext) -> dict[str, Any]:
    t = ctx.cfg.teacher
    if t.spec == "default":
        from tinyglot.distill.run import default_teacher_dir

        return {"spec": "default", "path": str(default_teacher_dir())}
    if t.spec == "train":
        from tinyglot.teacher import get_preset

        return {"spec": "train", "preset": t.preset, "settings": to_dict(get_preset(t.preset, t.overrides)),
                "data": train_data_inputs(ctx.cfg)}
    return {"spec": t.spec}


def train_data_inputs(cfg: PipelineConfig) -> dict[str, Any]:
    return {"train": cfg.data.train, "max_pairs_per_lang": cfg.data.max_pairs_per_lang,
            "languages": cfg.data.languages, "min_pairs_per_lang": cfg.data.min_pairs_per_lang,
            "files": data_fingerprint(corpus_path(cfg.data.train))}


def run_teacher(ctx: RunContext) -> StageOutput:
    t = ctx.cfg.teacher
    resumed = False
    if t.spec == "default":
        from tinyglot.distill.run import ensure_default_teacher

        path: Path | None = ensure_default_teacher(ctx.say, ctx.progress)
        spec = str(path)
    elif t.spec == "train":
        from tinyglot.teacher import TeacherTrainer, get_preset

        path = ctx.out / "teacher"
        resumed = ctx.resume and (path / "last.pt").exists()
        if not resumed:
            shutil.rmtree(path, ignore_errors=True)
        ctx.say(f"teacher: {'resuming the interrupted run from its last.pt' if resumed else 'training'} "
                f"{t.preset} on {len(ctx.train_pairs()):,} pairs -> {path}")
        TeacherTrainer(get_preset(t.preset, t.overrides), path, ctx.train_pairs(), None, t.preset, resumed,
                       ctx.progress).train()
        spec = "teacher"
    else:
        from tinyglot.distill.run import resolve_spec

        spec = resolve_spec(t.spec)
        path = Path(spec) if Path(spec).is_dir() else None
    info = {"spec": spec, **(describe_peer(spec) or describe_teacher(path))}
    atomic_write_json(ctx.out / "teacher.json", info)
    return StageOutput([ctx.out / "teacher.json", *teacher_files(path)], {**info, "resumed": resumed})


def teacher_files(path: Path | None) -> list[Path]:
    """The files that define a teacher: a tinyglot teacher's config, tokenizer and weights; any other
    folder whole; nothing for a ``pypi:``/``python:`` spec (the spec itself is hashed)."""
    if path is None:
        return []
    from tinyglot.export.bundle import SOURCE_KINDS, source_weight_files
    from tinyglot.models import read_model_config

    try:
        cfg = read_model_config(path)
    except TinyglotError:
        return [path]
    if cfg.get("kind") not in SOURCE_KINDS:
        return [path]
    return [path / "config.json", path / cfg.get("tokenizer", "tokenizer.model"), *source_weight_files(path, cfg)]


def describe_peer(spec: str) -> dict[str, Any] | None:
    """Kind, dimension and bytes of a peer teacher (``e5-small``, ``peer:use-m``); None for other specs."""
    from tinyglot.encoders.peers import PEERS, peer_files

    name = spec.removeprefix("peer:")
    if name not in PEERS or Path(spec).exists():
        return None
    files = peer_files(name)
    return {"kind": f"peer: {PEERS[name].model}", "dim": PEERS[name].dim,
            "bytes": folder_bytes(files) if files is not None else None}


def describe_teacher(path: Path | None) -> dict[str, Any]:
    """Kind, dimension, encoder parameter count and weight bytes of a tinyglot teacher folder."""
    if path is None:
        return {"kind": "external"}
    from tinyglot.export.bundle import source_size, source_weight_files
    from tinyglot.models import read_model_config

    try:
        cfg = read_model_config(path)
    except TinyglotError:
        return {"kind": "folder"}
    info = {"kind": cfg.get("kind"), "preset": cfg.get("preset"), "dim": cfg.get("dim"),
            "max_len": cfg.get("max_len"), "languages": cfg.get("languages"),
            "trained_steps": cfg.get("trained_steps"), "best_dev_p1": cfg.get("best_dev_p1"),
            "bytes": source_size(path, cfg)}
    weights = source_weight_files(path, cfg)
    if cfg.get("kind") == "ems-teacher" and weights:
        from tinyglot.training import load_checkpoint

        state = load_checkpoint(weights[0])["model"]
        info["parameters"] = sum(v.numel() for k, v in state.items() if k.startswith("encoder."))
    return info


# ------------------------------------------------------------------ stage 2: distill
def distill_inputs(ctx: RunContext) -> dict[str, Any]:
    from tinyglot.distill.config import get_preset

    d = ctx.cfg.distill
    return {"student": d.student, "settings": to_dict(get_preset(d.student, ctx.cfg.distill_overrides())),
            "vocab_size": d.vocab_size, "data": train_data_inputs(ctx.cfg)}


def run_distill(ctx: RunContext) -> StageOutput:
    from tinyglot.distill.config import get_preset
    from tinyglot.distill.run import lealla_trainer
    from tinyglot.models import read_model_config

    d = ctx.cfg.distill
    out = ctx.out / "distill"
    resumed = ctx.resume and (out / "last.pt").exists()
    if not resumed:
        shutil.rmtree(out, ignore_errors=True)
    spec = ctx.teacher_spec()
    ctx.say(f"distill: {'resuming the interrupted run from its last.pt: ' if resumed else ''}{d.student} "
            f"from {spec}, {d.max_steps} steps on {len(ctx.train_pairs()):,} pairs -> {out}")
    trainer = lealla_trainer(get_preset(d.student, ctx.cfg.distill_overrides()), d.student, spec, ctx.train_pairs(),
                             out, vocab_size=d.vocab_size, resume=resumed, progress=ctx.progress)
    result = trainer.train()
    cfg = read_model_config(result.student_dir)
    summary = {"student": d.student, "teacher": spec, "teacher_dim": trainer.teacher_dim, "dim": cfg["dim"],
               "parameters": cfg["parameters"], "bytes": folder_bytes(result.student_dir / "model"),
               "trained_steps": result.steps, "best_dev_p1": result.best_dev_p1,
               "train_pairs": len(ctx.train_pairs()), "languages": cfg["languages"], "max_len": cfg["max_len"],
               "settings": {"student": cfg["student"], "loss": cfg["loss"], "train": cfg["train"]}}
    atomic_write_json(out / "summary.json", summary)  # (no timings: its hash changes only with the student)
    return StageOutput([result.student_dir, out / "summary.json"],
                       {"resumed": resumed, "train_seconds": round(result.seconds, 1), "steps": result.steps})


# ------------------------------------------------------------------ stage 3: export
def export_inputs(ctx: RunContext) -> dict[str, Any]:
    inputs = {"export": to_dict(ctx.cfg.export), "test": testset_inputs(ctx.cfg)}
    if ctx.cfg.export.teacher_formats and "teacher" in ctx.markers:  # the teacher bundles depend on it
        inputs["teacher"] = ctx.output_hash("teacher")
    return inputs


def testset_inputs(cfg: PipelineConfig) -> dict[str, Any]:
    return {"test": cfg.data.test, "test_pairs_per_lang": cfg.data.test_pairs_per_lang,
            "files": data_fingerprint(corpus_path(cfg.data.test, test=True))}


def export_bundle(fmt: str, quant: str, student: Path, out: Path, section: ExportSection, testset: dict,
                  say: Say):
    """One bundle with the export stage's functions; returns its ``ExportResult``."""
    common = dict(threads=section.threads, max_sentences=section.parity_sentences, testset=testset, say=say)
    if fmt == "onnx":
        from tinyglot.export.onnx import export_onnx

        return export_onnx(student, out, quant, **common)
    if fmt == "tflite":
        from tinyglot.export.tflite import export_tflite

        return export_tflite(student, out, quant, buckets=section.tflite_buckets,
                             batch_sizes=section.tflite_batch_sizes, **common)
    if fmt in ("onnx-text", "tflite-mediapipe"):
        from tinyglot.export.formats import export_string_bundle

        return export_string_bundle(fmt, student, out, quant, card=False, **common)
    from tinyglot.export.savedmodel import export_savedmodel

    return export_savedmodel(student, out, quant, **common)


def run_export(ctx: RunContext) -> StageOutput:
    files: list[Path] = []
    info: dict[str, Any] = {}
    for fmt, quant, name in ctx.cfg.bundles():
        out = ctx.bundle_dir(name)
        shutil.rmtree(out, ignore_errors=True)  # never mix files of two exports
        ctx.say(f"export: {fmt} ({quant}) -> {out}")
        result = export_bundle(fmt, quant, ctx.student_dir, out, ctx.cfg.export, ctx.testset(), ctx.say)
        files.append(out)
        info[name] = {"format": fmt, "quantization": quant, "parity": result.config.get("parity"),
                      "files": result.sizes}
    teacher = exportable_teacher(ctx)
    for fmt, quant, name in ctx.cfg.teacher_bundles() if teacher is not None else []:
        out = ctx.bundle_dir(name)
        shutil.rmtree(out, ignore_errors=True)
        ctx.say(f"export: the teacher as {fmt} ({quant}) -> {out}")
        result = export_bundle(fmt, quant, teacher, out, ctx.cfg.export, ctx.testset(), ctx.say)
        files.append(out)
        info[name] = {"format": fmt, "quantization": quant, "parity": result.config.get("parity"),
                      "files": result.sizes}
    return StageOutput(files, info)


def exportable_teacher(ctx: RunContext) -> Path | None:
    """The teacher's folder when tinyglot can export it (an EMS run or a tinyglot student), else None."""
    from tinyglot.export.bundle import SOURCE_KINDS
    from tinyglot.models import read_model_config

    if not (ctx.out / "teacher.json").is_file():
        return None
    path = Path(ctx.teacher_spec())
    try:
        return path if path.is_dir() and read_model_config(path).get("kind") in SOURCE_KINDS else None
    except TinyglotError:
        return None


# ------------------------------------------------------------------ stage 4: eval
def eval_inputs(ctx: RunContext) -> dict[str, Any]:
    return {"eval": to_dict(ctx.cfg.eval), "test": testset_inputs(ctx.cfg), "tfidf": train_data_inputs(ctx.cfg)}


@dataclass
class EvalModel:
    name: str  # column name in the report
    kind: str  # tfidf | teacher | student | bundle
    path: str
    identity: str  # what the cached result depends on
    open: Callable[[], Any]


def eval_models(ctx: RunContext) -> list[EvalModel]:
    import tinyglot

    def tfidf():
        from tinyglot.evaluation.tfidf import TfidfEncoder

        pairs = ctx.train_pairs()
        return TfidfEncoder().fit([p.x for p in pairs] + [p.en for p in pairs])

    def teacher():
        from tinyglot.encoders import load_encoder

        return load_encoder(ctx.teacher_spec(), device=ctx.cfg.eval.device)

    student = ctx.student_dir
    models = [EvalModel("TF-IDF", "tfidf", "", hash_json(train_data_inputs(ctx.cfg)), tfidf),
              EvalModel("teacher", "teacher", ctx.teacher_spec(), ctx.output_hash("teacher"), teacher),
              EvalModel("student (PyTorch)", "student", str(student), ctx.output_hash("distill", "distill/student/"),
                        lambda: tinyglot.load(student, device=ctx.cfg.eval.device))]
    for name in ctx.cfg.bundle_names():
        path = ctx.bundle_dir(name)
        models.append(EvalModel(name, "bundle", str(path), ctx.output_hash("export", f"bundles/{name}/"),
                                lambda p=path: tinyglot.load(p)))
    for name in exported_teacher_bundles(ctx):
        path = ctx.bundle_dir(name)
        models.append(EvalModel(name, "teacher-bundle", str(path), ctx.output_hash("export", f"bundles/{name}/"),
                                lambda p=path: tinyglot.load(p)))
    for name in ctx.cfg.eval.peers:
        from tinyglot.encoders.peers import PEERS, load_peer

        models.append(EvalModel(f"peer {name}", "peer", PEERS[name].package, name,
                                lambda n=name: load_peer(n, threads=ctx.cfg.eval.threads)))
    return models


def run_eval(ctx: RunContext) -> StageOutput:
    from tinyglot.evaluation import BitextResult, evaluate_bitext

    cache = ctx.out / "eval" / "cache"
    test_key = hash_json({"test": testset_inputs(ctx.cfg), "eval": to_dict(ctx.cfg.eval)})
    rows = []
    for m in eval_models(ctx):
        path = cache / f"{hash_json([m.kind, m.identity, test_key])[:24]}.json"
        cached = path.is_file()
        if cached:
            result = BitextResult.read_json(path)
            ctx.say(f"eval: {m.name}: {100 * result.primary_metric:.1f} (cached)")
        else:
            result = evaluate_bitext(m.open(), ctx.testset(), batch_size=ctx.cfg.eval.batch_size,
                                     model_name=m.name, testset_name=ctx.testset_name())
            result.write_json(path)
            ctx.say(f"eval: {m.name}: {100 * result.primary_metric:.1f} ({result.seconds:.1f} s)")
        rows.append({"name": m.name, "kind": m.kind, "path": m.path, "cached": cached, "result": result.to_dict()})
    results = {"testset": ctx.testset_name(), "models": rows}
    atomic_write_json(ctx.out / "eval" / "results.json", results)
    return StageOutput([ctx.out / "eval" / "results.json"],
                       {r["name"]: round(100 * r["result"]["primary_metric"], 2) for r in rows})


# ------------------------------------------------------------------ stage 5: bench
def bench_inputs(ctx: RunContext) -> dict[str, Any]:
    return {"bench": to_dict(ctx.cfg.bench), "peers": ctx.cfg.eval.peers}


def bench_targets(ctx: RunContext) -> list[Path | str]:
    """The PyTorch student (if asked), every ONNX / TFLite bundle (string-in ones included) and the
    peers of ``eval.peers`` (``peer:NAME``, through their own Python API), so that the report's
    Pareto view puts them side by side."""
    targets: list[Path | str] = [ctx.student_dir] if ctx.cfg.bench.torch else []
    teacher = set(exported_teacher_bundles(ctx))
    targets += [ctx.bundle_dir(name) for fmt, _, name in [*ctx.cfg.bundles(), *ctx.cfg.teacher_bundles()]
                if fmt in ("onnx", "tflite", "onnx-text", "tflite-mediapipe")
                and (name in ctx.cfg.bundle_names() or name in teacher)]
    return targets + [f"peer:{name}" for name in ctx.cfg.eval.peers]


def exported_teacher_bundles(ctx: RunContext) -> list[str]:
    """Names of the teacher bundles the export stage wrote (none for teachers tinyglot cannot export)."""
    return [name for _, _, name in ctx.cfg.teacher_bundles() if name in ctx.markers["export"].info]


def run_bench_stage(ctx: RunContext) -> StageOutput:
    from tinyglot.devices.bench import run_bench
    from tinyglot.devices.report import build_report

    b = ctx.cfg.bench
    folder = ctx.out / "bench"
    db = folder / "results.sqlite"
    shutil.rmtree(folder, ignore_errors=True)  # the database holds exactly this run's measurements
    targets = bench_targets(ctx)
    if not targets:
        raise TinyglotError("nothing to benchmark", "set bench.torch = true or export an onnx / tflite bundle")
    run = run_bench(targets, b.device, threads=b.threads, batch=b.batch, seq=b.seq, min_queries=b.min_queries,
                    min_seconds=b.min_seconds, warmup=b.warmup, db_path=db, progress=ctx.progress, say=ctx.say)
    if run.failed:
        raise TinyglotError("benchmark failed: " + "; ".join(f"{label}: {why}" for label, why in run.failed),
                            "see the message; rerun `tinyglot run` to retry the bench stage")
    report = build_report(db, folder / "report", p1_from="files", say=ctx.say)
    return StageOutput([db, report.markdown, *report.plots],
                       {"device": run.device, "measurements": len(run.rows), "skipped": run.skipped})


# ------------------------------------------------------------------ stage 6: report
def report_inputs(ctx: RunContext) -> dict[str, Any]:
    return {"report": to_dict(ctx.cfg.report)}


def run_report(ctx: RunContext) -> StageOutput:
    from tinyglot.pipeline_report import write_report

    files = write_report(ctx)
    return StageOutput(files, {"report": "report.md"})


# ------------------------------------------------------------------ the stages in order
@dataclass(frozen=True)
class StageSpec:
    name: str
    depends: tuple[str, ...]  # stages whose outputs this one reads
    inputs: Callable[[RunContext], dict[str, Any]]
    run: Callable[[RunContext], StageOutput]


STAGES: tuple[StageSpec, ...] = (
    StageSpec("teacher", (), teacher_inputs, run_teacher),
    StageSpec("distill", ("teacher",), distill_inputs, run_distill),
    StageSpec("export", ("distill",), export_inputs, run_export),
    StageSpec("eval", ("teacher", "distill", "export"), eval_inputs, run_eval),
    StageSpec("bench", ("distill", "export"), bench_inputs, run_bench_stage),
    StageSpec("report", ("teacher", "distill", "export", "eval", "bench"), report_inputs, run_report),
)
STAGE_NAMES = tuple(s.name for s in STAGES)


def stage_inputs(spec: StageSpec, ctx: RunContext) -> dict[str, Any]:
    """Everything a stage's result depends on: its settings and its upstream stages' outputs."""
    return {"stage": spec.name, "version": STAGE_VERSION, "settings": spec.inputs(ctx),
            "upstream": {d: ctx.markers[d].output_hash for d in spec.depends}}


# ------------------------------------------------------------------ progress
class RunDisplay:
    """One display for the whole run: a line ``stage i/N name`` with a bar over the stages, and the
    stages' own bars (training, teacher embeddings, bench) below it.  Messages print above."""

    def __init__(self, total: int, enabled: bool) -> None:
        import rich
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

        self.console = rich.get_console()  # the console the stages' bars use: they nest under this one
        self.total = total
        nested = hasattr(self.console, "_live_stack")  # rich >= 14.1 renders nested live displays
        self._bar = Progress(TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
                             TextColumn("stages"), TimeElapsedColumn(), console=self.console) \
            if enabled and nested else None
        self._task = None

    def __enter__(self) -> RunDisplay:
        if self._bar is not None:
            self._bar.start()
            self._task = self._bar.add_task("pipeline", total=self.total)
        return self

    def __exit__(self, *exc) -> None:
        if self._bar is not None:
            self._bar.stop()

    def stage(self, index: int, name: str) -> None:
        if self._bar is not None:
            self._bar.update(self._task, description=f"stage {index}/{self.total} {name}", completed=index - 1)

    def done(self, index: int) -> None:
        if self._bar is not None:
            self._bar.update(self._task, completed=index)

    def say(self, message: str) -> None:
        from rich.markup import escape

        self.console.print(escape(message), soft_wrap=True, highlight=False)


def progress_enabled(flag: bool = True) -> bool:
    return flag and os.environ.get("TINYGLOT_NO_PROGRESS") != "1"


# ------------------------------------------------------------------ running
@dataclass
class RunSummary:
    out: Path
    seconds: float
    ran: dict[str, bool]
    markers: dict[str, Marker]

    @property
    def report(self) -> Path:
        return self.out / "report.md"


def run_pipeline(cfg: PipelineConfig, out: str | Path = DEFAULT_OUT, progress: bool = True,
                 say: Say | None = None) -> RunSummary:
    """Run every stage in order, reusing the ones whose markers are valid."""
    started = time.time()
    out = Path(out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    atomic_write_text(out / "config.toml", to_toml(cfg))
    if cfg.threads:
        import torch

        torch.set_num_threads(cfg.threads)
    enabled = progress_enabled(progress)
    with RunDisplay(len(STAGES), enabled) as display:
        ctx = RunContext(cfg, out, say or display.say, enabled, StageStore(out))
        for index, spec in enumerate(STAGES, 1):
            display.stage(index, spec.name)
            run_stage(ctx, spec, index)
            display.done(index)
    return RunSummary(out, time.time() - started, dict(ctx.ran), dict(ctx.markers))


def peak_rss_mb() -> float | None:
    """Peak resident memory of this process so far, in MB (the benchmark runner's measure; child
    processes are left out: the benchmark reports its own)."""
    from tinyglot.devices.runner import peak_rss_bytes

    peak = peak_rss_bytes()
    return None if peak is None else round(peak / 2**20, 1)


def run_stage(ctx: RunContext, spec: StageSpec, index: int) -> Marker:
    label = f"stage {index}/{len(STAGES)} {spec.name}"
    inputs = stage_inputs(spec, ctx)
    input_hash = hash_json(inputs)
    marker, why = ctx.store.check(spec.name, input_hash)
    if marker is not None:
        ctx.say(f"{label}: reused (done {marker.finished} in {marker.seconds:.1f} s; inputs and outputs unchanged)")
        ctx.ran[spec.name] = False
    else:
        ctx.say(f"{label}: running ({why})")
        ctx.resume = ctx.store.start(spec.name, input_hash)
        t0 = time.time()
        output = spec.run(ctx)
        info = {**output.info, "peak_rss_mb": peak_rss_mb()}
        marker = ctx.store.finish(spec.name, input_hash, output.files, time.time() - t0, inputs, info)
        ctx.ran[spec.name] = True
        ctx.say(f"{label}: done in {marker.seconds:.1f} s")
    ctx.markers[spec.name] = marker
    return marker


# ====================================================================== command line
def cmd_run(args: argparse.Namespace) -> int:
    cfg = load_config(args.profile, args.config, args.sets)
    previous = signal.signal(signal.SIGTERM, _sigterm_to_interrupt)
    try:
        with run_lock(args.out, "tinyglot run"):  # one run per folder
            summary = run_pipeline(cfg, args.out, progress=not args.no_progress)
    except KeyboardInterrupt:
        from rich.console import Console

        Console(stderr=True).print(f"interrupted: finished stages are kept in {args.out}; rerun the same command "
                                   "to continue (training resumes from its last checkpoint)", soft_wrap=True)
        return 130
    finally:
        signal.signal(signal.SIGTERM, previous)
    reused = [name for name, ran in summary.ran.items() if not ran]
    print(f"done in {summary.seconds:.1f} s ({len(reused)} of {len(STAGES)} stages reused"
          f"{': ' + ', '.join(reused) if reused else ''}); report: {summary.report}"
          + (f", {summary.out / 'report.html'}" if cfg.report.html else ""))
    return 0


def _sigterm_to_interrupt(signum, frame) -> None:
    raise KeyboardInterrupt


def register(sub) -> None:
    p = sub.add_parser(
        "run", help="the whole job in one command: teacher -> distill -> export -> eval -> bench -> report",
        description="Run the pipeline on the embedded defaults (or your settings): teacher (the cached default, "
                    "trained once if missing), LEALLA distillation, ONNX/TFLite export with parity checks, P@1 "
                    "evaluation, a latency benchmark on this machine, and report.md/report.html. Finished stages "
                    "are reused on the next run when their inputs and outputs are unchanged; an interrupted run "
                    "continues where it stopped.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--profile", default=None,
                   help=f"named settings: {', '.join(PROFILES)} (default: ems-small teacher, lealla-small; "
                        "tiny: a small run for tests); without it: the config file's profile, else default")
    p.add_argument("--config", type=Path, default=None,
                   help="TOML file with [data] [teacher] [distill] [export] [eval] [bench] [report] tables "
                        "(OUT/config.toml of a run is one)")
    p.add_argument("--set", dest="sets", action="append", metavar="SECTION.KEY=VALUE",
                   help="override one setting, e.g. --set distill.max_steps=300 --set export.formats=onnx-dynamic "
                        "--set distill.overrides.train.lr=1e-3")
    p.add_argument("--out", type=Path, default=DEFAULT_OUT, help="run folder")
    p.add_argument("--no-progress", action="store_true", help="no progress bars (also TINYGLOT_NO_PROGRESS=1)")
    p.set_defaults(func=cmd_run)


__all__ = ["DEFAULT_OUT", "PROFILES", "STAGES", "STAGE_NAMES", "PipelineConfig", "RunContext", "RunSummary",
           "apply_overrides", "load_config", "register", "run_pipeline", "to_toml"]
