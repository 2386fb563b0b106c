"""``tinyglot run``'s settings: one dataclass per section, the named profiles, loading (profile, then
TOML file, then ``--set``) with validation, and the effective settings written back as TOML."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, get_args, get_origin, get_type_hints

import tomli_w

from tinyglot.config import (MAX_BATCH, parse_sets, read_toml, replace, to_dict, validate_at_most,
                             validate_positive)
from tinyglot.data.pairs import check_tier, tier_allows
from tinyglot.errors import TinyglotError
from tinyglot.export.formats import BUNDLE_FORMATS, get_format


GENERAL_AUTO = "auto"
# held-out tests that `tinyglot data general` writes only when given their text (--commonvoice DIR): an
# ``auto`` item of one is left out of a run when the build has none
OPTIONAL_TESTS = ("commonvoice",)
E5_SPECS = ("e5-small", "e5-small-onnx")  # teachers whose layers student.init=teacher-layers copies
# onnxruntime quantizations with one int8 scale per weight tensor (LiteRT's dynamic range is per channel)
PER_TENSOR_INT8 = ("dynamic", "dynamic-int4-embeddings")
ONNX_FORMATS = ("onnx", "onnx-text")


def general_path(setting: str) -> Path:
    """The general-domain corpus that ``data.general`` names (``auto``: the one built into
    ``$TINYGLOT_HOME/general``); a clear error when it is not there."""
    from tinyglot.data.general import TRAIN_FILE, default_out

    auto = setting == GENERAL_AUTO
    path = default_out() / TRAIN_FILE if auto else Path(setting)
    if not path.exists():
        build = "tinyglot data general" + ("" if auto else f" --out {path.parent}")
        raise TinyglotError(f"data.general: no general-domain text at {path}",
                            f"build it once (from Debian and PyPI packages): {build}; "
                            f"or train without it: --set data.general=")
    return path


def general_words(setting: str) -> Path | None:
    """The word lists of the general build that ``data.general`` names, when it names one's file
    (``OUT/general-train.jsonl.gz`` beside ``OUT/words``): what ``train.vocab_words=auto`` reads then,
    so that a run's vocabulary takes the lists of the build it trains on (else $TINYGLOT_HOME/general's)."""
    from tinyglot.data.general import WORDS_FOLDER

    if setting in ("", GENERAL_AUTO):
        return None
    words = Path(setting).parent / WORDS_FOLDER
    return words if words.is_dir() else None


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
    # General-domain text mixed into training (``tinyglot data general --out DIR`` writes it):
    # translation pairs and monolingual rows (en == x) of the languages the corpus selection kept;
    # empty = none; ``auto`` = ``$TINYGLOT_HOME/general/general-train.jsonl.gz`` (the e5 profile's).
    # ``general_max_per_lang`` caps its rows per language (seeded sample; 0 = all).
    general: str = ""
    general_max_per_lang: int = 0
    # Whether a language's general-domain rows count towards min_pairs_per_lang (they join its corpus
    # rows in training): with the e5 profile's text, af, gd and ten more languages that e5 covers have
    # too few software strings alone (docs/results.md, "Languages kept by their general-domain text").
    # false: the corpus alone decides (the released students were made so).
    general_counts: bool = True
    # Train only on rows whose licence a shipped model of this tier may learn from (by each row's
    # `license`; tinyglot.data.pairs.licence_tier): "permissive" (the released students' tier) or
    # "share-alike" (permissive and CC-BY-SA text); empty: any licence (a model you keep).
    tier: str = ""
    # Further test sets, ``NAME=PATH`` (a folder of LANG.tsv files, as data.test): every model of the
    # run is evaluated on each, and the report shows them beside the main test set.  ``NAME=auto``:
    # the held-out test ``tinyglot data general`` built into $TINYGLOT_HOME/general (general, docs).
    tests: list[str] = field(default_factory=list)

    @property
    def general_rows_count(self) -> bool:
        """Whether the general-domain rows take part in choosing the languages: ``general_counts`` with
        general-domain text and a selection (``languages`` or ``min_pairs_per_lang``) to take part in.  The
        run's selection and its stage inputs both ask this, so they cannot disagree."""
        return self.general_counts and bool(self.general) and bool(self.languages or self.min_pairs_per_lang)

    def extra_tests(self) -> list[tuple[str, str]]:
        """``data.tests`` as ``(name, path)``, ``auto`` resolved; a clear error for an item that is not
        NAME=PATH."""
        return [(name, path) for name, path, _ in self.test_items()]

    def test_items(self) -> list[tuple[str, str, bool]]:
        """``data.tests`` as ``(name, path, auto)``: ``auto`` when the path was resolved from ``NAME=auto``.
        An ``auto`` test that ``tinyglot data general`` was built without is left out (:meth:`left_out`)."""
        return [item for item in self._test_items() if item not in self.left_out()]

    def left_out(self) -> list[tuple[str, str, bool]]:
        """The ``NAME=auto`` items of ``data.tests`` that the general-domain build holds no test of, because it
        was built without their text: ``commonvoice`` without ``--commonvoice DIR``."""
        from tinyglot.data.general import default_out

        sources = default_out() / "SOURCES.json"
        if not sources.is_file():
            return []
        return [(name, path, auto) for name, path, auto in self._test_items()
                if auto and name in OPTIONAL_TESTS and not Path(path).exists()]

    def _test_items(self) -> list[tuple[str, str, bool]]:
        from tinyglot.data.general import default_out, test_folder

        out = []
        for item in self.tests:
            name, sep, path = (part.strip() for part in item.partition("="))
            if not sep or not name or not path:
                raise TinyglotError(f"data.tests item {item!r} is not NAME=PATH",
                                    "write e.g. --set data.tests=general=runs/general/general-test")
            auto = path == GENERAL_AUTO
            out.append((name, str(default_out() / test_folder(name)) if auto else path, auto))
        names = [n for n, _, _ in out]
        if len(set(names)) != len(names):
            raise TinyglotError(f"data.tests names a test set twice: {', '.join(names)}", "give each a new name")
        return out

    def require_built(self) -> None:
        """Before a run: what ``auto`` names (``data.general``, ``data.tests`` items) exists; else a clear
        error naming ``tinyglot data general``."""
        if self.general:
            general_path(self.general)
        for name, path, auto in self.test_items():
            if auto and not Path(path).exists():
                raise TinyglotError(f"data.tests: no held-out test {name} at {path}",
                                    "build it once (from Debian and PyPI packages): "
                                    "tinyglot data general; or drop it from data.tests")


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
    pairs); ``overrides`` changes any other preset setting (``{"loss": {"fd": false}}``).

    ``student`` names a LEALLA preset (:data:`tinyglot.distill.config.PRESETS`) or a multi-stage
    (ALBERT-style, recurrent shared layers) preset (:data:`tinyglot.distill.ms_config.PRESETS`,
    ``ms-tiny``, ``ms-small``, ``ms-paper``).  A multi-stage student runs the four-stage recipe with the
    run's teacher as its teacher and ``assistant`` as its assistant (empty: the run's teacher when it
    is a tinyglot BERT model, else the cached default ems-small teacher); ``max_steps`` is then the
    budget of each student stage: it sets ``stage2.max_steps``, ``stage3.max_steps`` and
    ``stage4.max_steps`` (over the preset and ``overrides``), while stage 1 (the assistant learning the
    teacher's space) keeps the preset's ``train.max_steps`` (or ``overrides.stage1.max_steps``).
    ``vocab_size`` is unused there: the student keeps the assistant's vocabulary.

    ``tokenizer`` (LEALLA students): a SentencePiece ``tokenizer.model`` (``tinyglot data vocab``'s, a
    run's, or any that holds a language token ``<2xx>`` for each language of the corpus) for the student,
    instead of a new vocabulary of ``vocab_size`` pieces (or a tinyglot teacher's own)."""

    # fast-mini (2 layers x 128) and not the paper's lealla-small (24 x 128): the default teacher,
    # ems-small, has 3 layers x 192, so a 24-layer student would be slower than its own teacher.
    student: str = "fast-mini"
    max_steps: int = 600
    overrides: dict[str, Any] = field(default_factory=dict)
    vocab_size: int = 8000  # a new vocabulary's size, for teachers that bring none
    assistant: str = ""  # multi-stage students only (see above)
    tokenizer: str = ""  # LEALLA students only (see above)

    @property
    def multistage(self) -> bool:
        """True when ``student`` names a multi-stage preset; a clear error naming both preset lists
        when it names neither."""
        from tinyglot.distill.config import PRESETS as LEALLA_PRESETS
        from tinyglot.distill.ms_config import PRESETS as MS_PRESETS

        if self.student in MS_PRESETS:
            return True
        if self.student in LEALLA_PRESETS:
            return False
        raise TinyglotError(f"unknown student preset distill.student={self.student!r}",
                            f"choose a LEALLA preset ({', '.join(LEALLA_PRESETS)}) or a multi-stage "
                            f"preset ({', '.join(MS_PRESETS)})")


@dataclass
class ExportSection:
    """Bundles as (format, quantization); ``threads`` for the runtimes during parity checks and eval.

    TFLite gets batch-1 signatures only (single-stream, as on a phone): every extra batch size costs
    conversion time, memory and file size."""

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
    run's models, on the same test set (each with ``threads`` threads; 0: every core, since P@1 does not
    depend on it and the bench stage measures speed on its own threads)."""

    batch_size: int = 64
    peers: list[str] = field(default_factory=list)
    threads: int = 0
    # where the PyTorch models (teacher, student) are evaluated: auto = the GPU when there is one
    device: str = "auto"


@dataclass
class BenchSection:
    """Each measurement runs in its own process for at least ``min_queries`` queries and ``min_seconds``
    after warm-up: thousands of queries for a sub-millisecond bundle, so p50 and p90 are stable."""

    device: str = "host"
    torch: bool = True  # also measure the PyTorch student (the fp32 reference)
    threads: list[int] = field(default_factory=lambda: [1])
    batch: list[int] = field(default_factory=lambda: [1])
    seq: list[int] = field(default_factory=lambda: [16, 64])
    min_queries: int = 200
    min_seconds: float = 1.0
    warmup: int = 10
    # The call regimes (tinyglot.devices.regimes): sentences/s of one sentence per call, arrival-order
    # batches of 32 and one bulk call, on this many sentences of the test set and of long prose, each
    # model in its own process at bench.threads[0] threads; 0 skips them.
    regime_sentences: int = 300
    regime_repeats: int = 2


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
        """The student preset's overrides with the ``max_steps`` budget applied (LEALLA:
        ``train.max_steps``; multi-stage: the student stages' ``max_steps``, see :class:`DistillSection`)."""
        steps = {"max_steps": self.distill.max_steps}
        budget = ({f"stage{n}": steps for n in (2, 3, 4)} if self.distill.multistage else {"train": steps})
        return deep_merge(self.distill.overrides, budget)

    def student_preset(self) -> Any:
        """The student preset (LEALLA or multi-stage) with the overrides and budget applied."""
        if self.distill.multistage:
            from tinyglot.distill.ms_config import get_preset as ms_preset

            return ms_preset(self.distill.student, self.distill_overrides())
        from tinyglot.distill.config import get_preset

        preset = get_preset(self.distill.student, self.distill_overrides())
        words = general_words(self.data.general)
        if preset.train.vocab_words == GENERAL_AUTO and words is not None:
            return replace(preset, {"train": {"vocab_words": str(words)}})
        return preset

    def validate(self) -> PipelineConfig:
        if self.threads < 0:
            raise TinyglotError(f"threads must be >= 0, got {self.threads}", "set threads = 0 for torch's default")
        for name in ("max_pairs_per_lang", "min_pairs_per_lang", "test_pairs_per_lang"):
            if getattr(self.data, name) < 0:
                raise TinyglotError(f"data.{name} must be >= 0 (0 = all), got {getattr(self.data, name)}")
        for name in ("train", "test"):
            if getattr(self.data, name) and not Path(getattr(self.data, name)).exists():
                raise TinyglotError(f"data.{name} not found: {getattr(self.data, name)}",
                                    f"check the path, or leave data.{name} empty for the embedded data")
        if self.data.general not in ("", GENERAL_AUTO) and not Path(self.data.general).exists():
            raise TinyglotError(f"data.general not found: {self.data.general}",
                                "build it with `tinyglot data general --out DIR` and set data.general="
                                "DIR/general-train.jsonl.gz, or leave it empty")
        if self.data.general_max_per_lang < 0:
            raise TinyglotError("data.general_max_per_lang must be >= 0 (0 = all), got "
                                f"{self.data.general_max_per_lang}")
        for name, path, auto in self.data.test_items():
            if not auto and not Path(path).exists():  # auto: checked when a run starts
                raise TinyglotError(f"data.tests: test set {name} not found: {path}",
                                    "check the path (a folder of LANG.tsv files), or drop it from data.tests")
        if not self.teacher.spec.strip():
            raise TinyglotError("teacher.spec is empty",
                                "use default, train, or a teacher folder / pypi: / python: spec")
        if self.teacher.spec == "train":
            from tinyglot.teacher import get_preset as teacher_preset

            teacher_preset(self.teacher.preset, self.teacher.overrides)
        student = self.student_preset()
        from tinyglot.data.general import WORDLIST_LICENSE

        check_tier(self.data.tier, "data.tier")
        if (getattr(student.train, "vocab_words", None) and not self.distill.tokenizer
                and not tier_allows(self.data.tier, WORDLIST_LICENSE)):
            raise TinyglotError(f"data.tier={self.data.tier}, but the new vocabulary's sample takes word lists "
                                f"(distill.overrides.train.vocab_words): wordfreq's, {WORDLIST_LICENSE}",
                                "--set distill.overrides.train.vocab_words= (as release/make.sh does for the "
                                "permissive tier), set data.tier=share-alike, or give distill.tokenizer")
        self._check_student_file("assistant", True, Path.is_dir,
                                 "LEALLA preset (only multi-stage students have an assistant)",
                                 "leave distill.assistant empty, or pick a multi-stage student (ms-...)",
                                 "pass a tinyglot BERT model folder (an EMS teacher run or a LEALLA student), "
                                 "or leave it empty for the run's teacher / the default teacher")
        self._check_student_file("tokenizer", False, Path.is_file,
                                 "multi-stage student (it keeps its assistant's vocabulary)",
                                 "leave distill.tokenizer empty, or pick a LEALLA student (fast-..., lealla-...)",
                                 "pass a SentencePiece tokenizer.model (tinyglot data vocab writes one), or "
                                 "leave it empty for a new vocabulary of distill.vocab_size pieces")
        if self.distill.tokenizer and not self.distill.multistage:  # read now, not after the teacher stage
            from tinyglot.tokenizer import Tokenizer

            try:
                Tokenizer.load(self.distill.tokenizer)
            except TinyglotError as exc:
                raise TinyglotError(f"distill.tokenizer {self.distill.tokenizer}: {exc.problem}", exc.fix) from None
        validate_positive(self.distill, ("vocab_size",), "distill")
        if not self.export.formats:
            raise TinyglotError("export.formats is empty", "list at least one bundle, e.g. onnx-dynamic")
        for fmt, quant in [*self.export.formats, *self.export.teacher_formats]:
            allowed = get_format(fmt).quantizations
            if quant not in allowed:
                raise TinyglotError(f"quantization {quant!r} is not available for {fmt}",
                                    f"choose one of: {', '.join(allowed)}")
        if not self.distill.multistage and student.student.init == "teacher-layers":
            self._check_teacher_layers()
        if len(set(self.bundle_names())) != len(self.export.formats):
            raise TinyglotError("export.formats lists a bundle twice", "list each format-quantization once")
        validate_positive(self.export, ("threads", "parity_sentences"), "export")
        validate_positive(self.eval, ("batch_size",), "eval")
        validate_at_most(self.eval, {"batch_size": MAX_BATCH}, "eval")
        if self.eval.threads < 0:
            raise TinyglotError(f"eval.threads must be >= 0, got {self.eval.threads}", "0 uses every core")
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
        from tinyglot.devices.bench import MAX_BATCH as BENCH_BATCH
        from tinyglot.config import MAX_THREADS
        from tinyglot.devices.bench import MAX_SEQ

        limits = {"tflite_buckets": MAX_SEQ, "tflite_batch_sizes": BENCH_BATCH, "threads": MAX_THREADS,
                  "batch": BENCH_BATCH, "seq": MAX_SEQ}
        for name in ("tflite_buckets", "tflite_batch_sizes"):
            _check_ints(getattr(self.export, name), f"export.{name}", limits[name])
        for name in ("threads", "batch", "seq"):
            _check_ints(getattr(self.bench, name), f"bench.{name}", limits[name])
        if self.export.threads > MAX_THREADS or self.eval.threads > MAX_THREADS or self.threads > MAX_THREADS:
            raise TinyglotError(f"threads, export.threads and eval.threads must be at most {MAX_THREADS}")
        if self.bench.min_seconds < 0 or self.bench.warmup < 0:
            raise TinyglotError("bench.min_seconds and bench.warmup must be >= 0")
        if self.bench.regime_sentences < 0 or self.bench.regime_repeats < 1:
            raise TinyglotError("bench.regime_sentences must be >= 0 (0 skips the call regimes) and "
                                "bench.regime_repeats >= 1")
        if any("buckets" in get_format(fmt).options for fmt, _ in self.export.formats):  # fixed-shape signatures
            seqs = sorted(set(self.bench.seq) - set(self.export.tflite_buckets))
            batches = sorted(set(self.bench.batch) - set(self.export.tflite_batch_sizes))
            if seqs or batches:
                raise TinyglotError(
                    f"the TFLite bundle has no signature for bench.seq {seqs or ''} bench.batch {batches or ''}",
                    "add them to export.tflite_buckets / export.tflite_batch_sizes, or bench other shapes")
        return self

    def _check_teacher_layers(self) -> None:
        """A student started as e5-small's layers (student.init=teacher-layers, the fast-e5 presets): the
        teacher is e5-small, and the ONNX bundles quantize per channel (per tensor, e5-small's weights fail
        the parity gate: mean cosine 0.90-0.98), checked before any stage runs."""
        if self.teacher.spec.removeprefix("peer:") not in E5_SPECS:
            raise TinyglotError(f"distill.student {self.distill.student} starts as multilingual-e5-small's layers "
                                f"(student.init=teacher-layers), but teacher.spec is {self.teacher.spec}",
                                "use --set teacher.spec=e5-small-onnx (the e5 profile's), or another student")
        per_tensor = [f"{fmt}-{quant}" for fmt, quant in self.export.formats
                      if fmt in ONNX_FORMATS and quant in PER_TENSOR_INT8]
        if per_tensor:
            raise TinyglotError(f"export.formats {', '.join(per_tensor)}: ONNX int8 per tensor loses too much of a "
                                f"student started as e5-small's layers (distill.student {self.distill.student}; "
                                "parity mean cosine 0.90-0.98 < 0.99)",
                                "quantize per channel: --set export.formats=onnx-dynamic-per-channel,"
                                "onnx-text-dynamic-per-channel (portable; avx512-vnni, avx2 or arm64 for those CPUs)")

    def _check_student_file(self, key: str, multistage: bool, exists: Callable[[Path], bool], kind: str,
                            kind_fix: str, missing_fix: str) -> None:
        """``distill.KEY``, when set: allowed for one kind of student only (``kind``: what the student is
        when it is the other kind), and found (``exists``)."""
        value = getattr(self.distill, key)
        if not value:
            return
        if self.distill.multistage != multistage:
            raise TinyglotError(f"distill.{key} is set but distill.student={self.distill.student!r} is a {kind}",
                                kind_fix)
        if not exists(Path(value)):
            raise TinyglotError(f"distill.{key} not found: {value}", missing_fix)

    def bundles(self) -> list[tuple[str, str, str]]:
        """``(format, quantization, folder name)`` of each bundle, e.g. ``("onnx", "dynamic", "onnx-dynamic")``."""
        return [(fmt, quant, f"{fmt}-{quant}") for fmt, quant in self.export.formats]

    def bundle_names(self) -> list[str]:
        return [name for _, _, name in self.bundles()]

    def teacher_bundles(self) -> list[tuple[str, str, str]]:
        """``(format, quantization, folder name)`` of each teacher bundle, e.g. ``teacher-onnx-dynamic``."""
        return [(fmt, quant, f"teacher-{fmt}-{quant}") for fmt, quant in self.export.teacher_formats]


def _check_ints(values: Sequence[int], name: str, limit: int) -> None:
    if not values or min(values) < 1 or max(values) > limit:
        raise TinyglotError(f"{name} must be a non-empty list of integers from 1 to {limit:,}, got {list(values)}")


# ------------------------------------------------------------------ profiles and loading
# A profile is a set of overrides of the defaults, in the same shape as a TOML file.
PROFILES: dict[str, dict[str, Any]] = {
    # Dev evaluation on 100 pairs per language every 200 steps.
    # The student as the two raw-string bundles a user ships (onnx-text for servers and desktops, the
    # MediaPipe file for phones and the web) and as int8 ONNX beside the teacher's int8 ONNX (the report
    # compares the two), evaluated and benchmarked beside USE-multilingual (the fast peer); the PyTorch
    # student's P@1 is measured, its speed not, and each call regime once: a cached run in minutes on 2
    # cores (docs/pipeline.md#times).
    "default": {"distill": {"overrides": {"train": {"eval_every": 200, "save_every": 100, "dev_pairs_per_lang": 100}}},
                "export": {"formats": ["onnx-dynamic", "onnx-text-dynamic", "tflite-mediapipe-dynamic"]},
                "eval": {"peers": ["use-m"]}, "bench": {"torch": False, "regime_repeats": 1}},
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
        "bench": {"seq": [48], "min_queries": 20, "min_seconds": 0.2, "warmup": 2, "regime_sentences": 40,
                  "regime_repeats": 1},
    },
    # The strong-teacher path: multilingual-e5-small on onnxruntime (the peer e5-small-onnx, the wheel's
    # weights) embeds every distinct English sentence and every monolingual sentence once (cached) for a
    # fast-small student (2 layers x 256), on every language e5 covers with 1,500 rows of the corpus and the
    # general-domain text together (data.general = auto: `tinyglot data general`'s text, Common Voice's
    # among it when it was built with --commonvoice), evaluated on that command's held-out tests
    # (narrative, documentation prose, the Common Voice check). Give it a large corpus:
    # `--set data.train=corpus.jsonl.gz` (the embedded one has 10 languages). Why each setting is what it
    # is (each measured against the alternatives in docs/results.md, "Ablations"):
    # - 288k pieces learnt from 600,000 sentences drawn as the batches draw (70 % general-domain), every
    #   character the text holds twice (vocab_char_share) and 3,500 lines of each language's common words
    #   (vocab_words: whole words start from e5-small's embedding of them): the largest gains on narrative
    #   text; the table is 4-bit in the bundle (onnx-text-dynamic-int4-embeddings, P@1 within 0.1 of int8);
    # - sparse_embeddings: the token table steps in the batch's rows, caught up to AdamW's weights before a
    #   batch reads them (the same P@1 as AdamW over the whole table, 38 % less time a step);
    # - batches of one source (batch_grouping), 70 % of each language's draws from its general-domain rows
    #   (general_share), no dropout (8,000 steps see each row about once);
    # - beta 50 (e5-small's rows differ little from one another: at 10 the student kept half their spread),
    #   lr 1.5e-3, 8,000 steps, evaluations every 500 and checkpoints every 1,000 steps;
    # - bf16 steps where the CPU runs them faster (cpu_bf16 auto: both timed before the first step).
    "e5": {
        "data": {"languages": "e5-small", "min_pairs_per_lang": 1500, "general": "auto",
                 "tests": ["general=auto", "docs=auto", "commonvoice=auto"]},
        "teacher": {"spec": "e5-small-onnx"},
        "distill": {"student": "fast-small", "max_steps": 8000, "vocab_size": 288000,
                    "overrides": {"student": {"dropout": 0.0}, "loss": {"beta": 50.0},
                                  "train": {"lr": 1.5e-3, "warmup_steps": 100, "eval_every": 500,
                                            "save_every": 1000,
                                            "dev_pairs_per_lang": 50, "batch_grouping": "source",
                                            "general_share": 0.7, "vocab_char_share": 0.125,
                                            "vocab_sentences": 600_000, "vocab_general_share": 0.7,
                                            "vocab_words": "auto", "sparse_embeddings": True,
                                            "cpu_bf16": "auto"}}},
        "export": {"formats": ["onnx-dynamic", "onnx-text-dynamic-int4-embeddings"]},
        "eval": {"peers": ["use-m"]},
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
    text = str(item).strip()
    sep = ":" if ":" in text else "-"
    known = [f for f in sorted(BUNDLE_FORMATS, key=len, reverse=True) if text.startswith(f + sep)]
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


def profile_config(name: str) -> PipelineConfig:
    """The settings of profile ``name`` alone (no file, no ``--set``), not validated: what ``tinyglot run
    --help`` states about each profile."""
    return apply_overrides(PipelineConfig(profile=name), PROFILES[name])


def to_toml(cfg: PipelineConfig) -> str:
    """The settings as a TOML file that ``--config`` reads back to the same config."""
    return tomli_w.dumps(to_dict(cfg))
