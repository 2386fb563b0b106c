"""The six stages of ``tinyglot run``, each an adapter from the run's settings to a stage's library
functions: what its result depends on (``*_inputs``) and how it runs (``run_*``), in order in ``STAGES``."""

from __future__ import annotations

import contextlib
import shutil
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tinyglot.config import to_dict
from tinyglot.errors import TinyglotError
from tinyglot.io import atomic_write_json, folder_bytes, read_json_object
from tinyglot.stagecache import describe_files, hash_json, outputs_intact, sha256_file

from .context import RunContext, Say, StageOutput, corpus_path, data_fingerprint
from .settings import ExportSection, PipelineConfig

if TYPE_CHECKING:
    from tinyglot.evaluation import BitextResult

STAGE_VERSION = 1  # bump when a stage's outputs change meaning: every marker is then stale


# ------------------------------------------------------------------ stage 1: teacher
def teacher_inputs(ctx: RunContext) -> dict[str, Any]:
    t = ctx.cfg.teacher
    if t.spec == "default":
        from tinyglot.teacher.default import default_teacher_dir

        return {"spec": "default", "path": str(default_teacher_dir())}
    if t.spec == "train":
        from tinyglot.teacher import get_preset

        return {"spec": "train", "preset": t.preset, "settings": to_dict(get_preset(t.preset, t.overrides)),
                "data": train_data_inputs(ctx.cfg)}
    return {"spec": t.spec}


def train_data_inputs(cfg: PipelineConfig) -> dict[str, Any]:
    d = cfg.data
    inputs = {"train": d.train, "max_pairs_per_lang": d.max_pairs_per_lang, "languages": d.languages,
              "min_pairs_per_lang": d.min_pairs_per_lang, "files": data_fingerprint(corpus_path(d.train))}
    if d.tier:  # (absent when unset, like general: older runs keep their stage markers)
        inputs["tier"] = d.tier
    if d.general:  # (absent when unset: runs made before data.general keep their stage markers)
        from .settings import general_path

        general: dict[str, Any] = {"path": d.general, "max_per_lang": d.general_max_per_lang,
                                   "files": data_fingerprint(general_path(d.general))}
        if d.general_rows_count:  # (absent otherwise: the selection is the corpus's)
            general["counts"] = True
        inputs["general"] = general
    return inputs


def run_teacher(ctx: RunContext) -> StageOutput:
    t = ctx.cfg.teacher
    resumed = False
    if t.spec == "default":
        from tinyglot.teacher.default import ensure_default_teacher

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
    d = ctx.cfg.distill
    inputs = {"student": d.student, "settings": to_dict(ctx.cfg.student_preset()), "data": train_data_inputs(ctx.cfg)}
    if d.multistage:  # the assistant: a folder (its weights count), or empty: the teacher stage's output
        return {**inputs, "recipe": "multistage", "assistant": d.assistant, "assistant_sha": assistant_sha(d.assistant)}
    if d.tokenizer:  # (absent when unset: runs made before distill.tokenizer keep their stage markers)
        inputs["tokenizer_sha256"] = sha256_file(d.tokenizer)
    return {**inputs, "vocab_size": d.vocab_size}


def assistant_sha(spec: str) -> str | None:
    """sha256 of a given assistant folder's config, tokenizer and weights; None when none is given."""
    if not spec:
        return None
    from tinyglot.models import read_model_config
    from tinyglot.registry import source_sha

    return source_sha(spec, read_model_config(spec))


def run_distill(ctx: RunContext) -> StageOutput:
    if ctx.cfg.distill.multistage:
        return run_multistage_distill(ctx)
    from tinyglot.distill.run import lealla_trainer
    from tinyglot.models import read_model_config

    d = ctx.cfg.distill
    out = ctx.out / "distill"
    resumed = ctx.resume and (out / "last.pt").exists()
    if not resumed:
        shutil.rmtree(out, ignore_errors=True)
    spec = ctx.teacher_spec()
    general = sum(p.general for p in ctx.train_pairs())
    share = ctx.cfg.student_preset().train.general_share
    drawn = f", {share:.0%} of the draws in each language that has both" if share else ""
    mix = f" ({general:,} general-domain{drawn})" if general else ""
    ctx.say(f"distill: {'resuming the interrupted run from its last.pt: ' if resumed else ''}{d.student} "
            f"from {spec}, {d.max_steps} steps on {len(ctx.train_pairs()):,} pairs{mix} -> {out}")
    trainer = lealla_trainer(ctx.cfg.student_preset(), d.student, spec, ctx.train_pairs(), out,
                             vocab_size=d.vocab_size, resume=resumed, progress=ctx.progress,
                             tokenizer=d.tokenizer or None)
    result = trainer.train()
    cfg = read_model_config(result.student_dir)
    summary = {"student": d.student, "recipe": "LEALLA", "teacher": spec, "teacher_dim": trainer.teacher_dim,
               "dim": cfg["dim"], "parameters": cfg["parameters"], "bytes": folder_bytes(result.student_dir / "model"),
               "trained_steps": result.steps, "best_dev_p1": result.best_dev_p1,
               "train_pairs": len(ctx.train_pairs()), "languages": cfg["languages"], "max_len": cfg["max_len"],
               "settings": {"student": cfg["student"], "loss": cfg["loss"], "train": cfg["train"]},
               "sources": ctx.train_sources()}
    atomic_write_json(out / "summary.json", summary)  # (no timings: its hash changes only with the student)
    return StageOutput([result.student_dir, out / "summary.json"],
                       {"resumed": resumed, "train_seconds": round(result.seconds, 1), "steps": result.steps})


def assistant_spec(ctx: RunContext) -> str:
    """The multi-stage assistant: ``distill.assistant``, else the run's teacher when it is a tinyglot
    BERT model (an EMS teacher or a LEALLA student), else the cached default ems-small teacher."""
    from tinyglot.distill.multistage.io import ASSISTANT_KINDS
    from tinyglot.models import read_model_config
    from tinyglot.teacher.default import ensure_default_teacher

    if ctx.cfg.distill.assistant:
        return str(Path(ctx.cfg.distill.assistant).resolve())
    teacher = Path(ctx.teacher_spec())
    try:
        if teacher.is_dir() and read_model_config(teacher).get("kind") in ASSISTANT_KINDS:
            return str(teacher)
    except TinyglotError:
        pass
    return str(ensure_default_teacher(ctx.say, ctx.progress))


def run_multistage_distill(ctx: RunContext) -> StageOutput:
    """The multi-stage recipe's four stages in ``distill/stageN``; the last stage's student is copied to
    ``distill/student`` (the folder export, eval and bench read)."""
    from tinyglot.distill.multistage import STAGES, multistage_trainer
    from tinyglot.models import read_model_config

    d = ctx.cfg.distill
    out = ctx.out / "distill"
    resumed = ctx.resume and any((out / f"stage{n}").exists() for n in STAGES)
    if not resumed:
        shutil.rmtree(out, ignore_errors=True)
    spec, assistant = ctx.teacher_spec(), assistant_spec(ctx)
    ctx.say(f"distill: {'resuming the interrupted run: ' if resumed else ''}multi-stage {d.student} from teacher "
            f"{spec} through assistant {assistant}, {d.max_steps} steps per student stage on "
            f"{len(ctx.train_pairs()):,} pairs -> {out}")
    trainer = multistage_trainer(ctx.cfg.student_preset(), d.student, spec, assistant, ctx.train_pairs(), out,
                                 progress=ctx.progress, say=ctx.say)
    results = trainer.run(STAGES)
    final = results[-1]
    student = ctx.student_dir
    shutil.rmtree(student, ignore_errors=True)
    shutil.copytree(final.output, student)
    cfg = read_model_config(student)
    summary = {"student": d.student, "recipe": "multi-stage", "teacher": spec, "assistant": assistant,
               "teacher_dim": cfg["teacher_dim"], "dim": cfg["dim"], "parameters": cfg["parameters"],
               "bytes": folder_bytes(student / "model"), "trained_steps": sum(r.steps for r in results),
               "best_dev_p1": final.best_dev_p1, "train_pairs": len(ctx.train_pairs()),
               "languages": cfg["languages"], "max_len": cfg["max_len"],
               "stages": [{k: v for k, v in r.to_dict().items() if k not in ("output", "wall_seconds", "skipped")}
                          for r in results],
               "settings": to_dict(ctx.cfg.student_preset()), "sources": ctx.train_sources()}
    atomic_write_json(out / "summary.json", summary)  # (no timings: its hash changes only with the student)
    return StageOutput([student, out / "summary.json"],
                       {"resumed": resumed, "train_seconds": round(sum(r.wall_seconds for r in results), 1),
                        "steps": summary["trained_steps"]})


# ------------------------------------------------------------------ stage 3: export
def export_inputs(ctx: RunContext) -> dict[str, Any]:
    inputs: dict[str, Any] = {"export": to_dict(ctx.cfg.export), "test": testset_inputs(ctx.cfg)}
    if ctx.cfg.export.teacher_formats and "teacher" in ctx.markers:  # the teacher bundles depend on it
        inputs["teacher"] = ctx.output_hash("teacher")
    return inputs


def testset_inputs(cfg: PipelineConfig) -> dict[str, Any]:
    return {"test": cfg.data.test, "test_pairs_per_lang": cfg.data.test_pairs_per_lang,
            "files": data_fingerprint(corpus_path(cfg.data.test, test=True))}


def extra_testset_inputs(cfg: PipelineConfig, name: str, path: str) -> dict[str, Any]:
    return {"test": path, "name": name, "test_pairs_per_lang": cfg.data.test_pairs_per_lang,
            "files": data_fingerprint(Path(path))}


def test_content_key(root: Path, pairs_per_lang: int, name: str = "") -> dict[str, Any]:
    """What an evaluation on a test set is cached by: its files' content under their names within the set, not
    its path, so that the same set in another folder (each tier's general build writes the same held-out
    tests) reuses e5-small's results and its rows of a check; and the pairs a language it takes."""
    base = root if root.is_dir() else root.parent
    names = {str(Path(f).relative_to(base)): d for f, d in data_fingerprint(root).items()}
    return {"name": name, "test_pairs_per_lang": pairs_per_lang, "files": names}


def export_bundle(fmt: str, quant: str, student: Path, out: Path, section: ExportSection, testset: dict,
                  say: Say):
    """One bundle with the export stage's functions; returns its ``ExportResult``.  Each format's exporter
    gets the stage options its record lists (``card=False``: the run writes its own README.md)."""
    from tinyglot.export.formats import get_format

    record = get_format(fmt)
    options = record.takes({"buckets": section.tflite_buckets, "batch_sizes": section.tflite_batch_sizes,
                            "card": False})
    return record.export(student, out, quant, threads=section.threads, max_sentences=section.parity_sentences,
                         testset=testset, say=say, **options)


def bundle_info(fmt: str, quant: str, result: Any) -> dict[str, Any]:
    """What the export stage's marker records of one bundle."""
    return {"format": fmt, "quantization": quant, "parity": result.config.get("parity"), "files": result.sizes}


def run_export(ctx: RunContext) -> StageOutput:
    files: list[Path] = []
    info: dict[str, Any] = {}
    for fmt, quant, name in ctx.cfg.bundles():
        out = ctx.bundle_dir(name)
        shutil.rmtree(out, ignore_errors=True)  # never mix files of two exports
        ctx.say(f"export: {fmt} ({quant}) -> {out}")
        result = export_bundle(fmt, quant, ctx.student_dir, out, ctx.cfg.export, ctx.testset(), ctx.say)
        files.append(out)
        info[name] = bundle_info(fmt, quant, result)
    teacher = exportable_teacher(ctx)
    for fmt, quant, name in ctx.cfg.teacher_bundles():
        if teacher is None:
            break
        out = ctx.bundle_dir(name)
        files.append(out)
        # a teacher bundle depends on the teacher, its format and the export settings only (not on the
        # lists of bundles to make): a rerun for a new student or format keeps it when its record says so
        # and its files are intact
        record_path = out.parent / f".{name}.record.json"
        settings = {k: v for k, v in to_dict(ctx.cfg.export).items() if k not in ("formats", "teacher_formats")}
        key = hash_json({"teacher": ctx.output_hash("teacher"), "format": [fmt, quant], "export": settings,
                         "test": testset_inputs(ctx.cfg)})
        record = read_json_object(record_path) or {}
        kept = record.get("outputs")
        if record.get("key") == key and kept and outputs_intact(kept, ctx.out) is None:
            ctx.say(f"export: the teacher's {name} bundle is reused (same teacher and export settings)")
            info[name] = record["info"]
            continue
        shutil.rmtree(out, ignore_errors=True)
        record_path.unlink(missing_ok=True)
        ctx.say(f"export: the teacher as {fmt} ({quant}) -> {out}")
        result = export_bundle(fmt, quant, teacher, out, ctx.cfg.export, ctx.testset(), ctx.say)
        info[name] = bundle_info(fmt, quant, result)
        atomic_write_json(record_path, {"key": key, "outputs": describe_files([out], ctx.out), "info": info[name]})
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
    inputs: dict[str, Any] = {"eval": to_dict(ctx.cfg.eval), "test": testset_inputs(ctx.cfg),
                              "tfidf": train_data_inputs(ctx.cfg)}
    if ctx.cfg.data.tests:
        inputs["tests"] = [extra_testset_inputs(ctx.cfg, name, path) for name, path in ctx.cfg.data.extra_tests()]
    return inputs


@dataclass
class EvalModel:
    name: str  # column name in the report
    kind: str  # tfidf | teacher | student | bundle
    path: str
    identity: str  # what the cached result depends on
    open: Callable[[], Any]
    shared: bool = False  # a fixed model (a peer from its wheel): its results are kept for every run folder


def eval_models(ctx: RunContext) -> list[EvalModel]:
    import tinyglot

    def tfidf():
        from tinyglot.evaluation.tfidf import fit_on_pairs

        return fit_on_pairs(ctx.train_pairs())

    def teacher():
        return tinyglot.load(ctx.teacher_spec(), device=ctx.cfg.eval.device)

    student = ctx.student_dir
    from tinyglot.evaluation.tfidf import FIT_PAIRS

    from tinyglot.encoders.peers import PEERS, load_peer, peer_identity

    tfidf_identity = hash_json({**train_data_inputs(ctx.cfg), "fit_pairs": FIT_PAIRS})
    spec = ctx.teacher_spec()
    teacher_row = (EvalModel("teacher", "teacher", spec, peer_identity(spec), teacher, shared=True) if spec in PEERS
                   else EvalModel("teacher", "teacher", spec, ctx.output_hash("teacher"), teacher))
    models = [EvalModel("TF-IDF", "tfidf", "", tfidf_identity, tfidf), teacher_row,
              EvalModel("student (PyTorch)", "student", str(student), ctx.output_hash("distill", "distill/student/"),
                        partial(tinyglot.load, student, device=ctx.cfg.eval.device))]
    for name in ctx.cfg.bundle_names():
        path = ctx.bundle_dir(name)
        models.append(EvalModel(name, "bundle", str(path), ctx.output_hash("export", f"bundles/{name}/"),
                                partial(tinyglot.load, path)))
    for name in exported_teacher_bundles(ctx):
        path = ctx.bundle_dir(name)
        models.append(EvalModel(name, "teacher-bundle", str(path), ctx.output_hash("export", f"bundles/{name}/"),
                                partial(tinyglot.load, path)))
    for name in ctx.cfg.eval.peers:
        models.append(EvalModel(f"peer {name}", "peer", PEERS[name].package, peer_identity(name),
                                partial(load_peer, name, threads=ctx.cfg.eval.threads), shared=True))
    return models


def eval_cache(ctx: RunContext, model: EvalModel) -> Path:
    """Where an evaluation's result is kept: a fixed model's (a peer from its wheel, or a teacher that is
    one, such as e5-small-onnx) in ``$TINYGLOT_HOME/eval-cache``, shared by every run folder, so
    e5-small's slow pass over a test set is paid once; the run's own models in the run folder."""
    from tinyglot.config import tinyglot_home

    return tinyglot_home() / "eval-cache" if model.shared else ctx.out / "eval" / "cache"


def read_cached_result(path: Path) -> BitextResult | None:
    """The evaluation kept at ``path``, or None when there is none or it cannot be read (then it is redone)."""
    from tinyglot.evaluation import BitextResult

    if not path.is_file():
        return None
    try:
        return BitextResult.read_json(path)
    except (OSError, ValueError, KeyError, TypeError):
        return None


def eval_on(ctx: RunContext, models: list[EvalModel], testset: Any, name: str, inputs: dict[str, Any],
            label: str = "") -> list[dict[str, Any]]:
    """Every model of ``models`` evaluated on ``testset`` (each result cached by model and the set's
    :func:`test_content_key`, ``inputs``): bitext
    P@1 on a ``{lang: pairs}`` test, teacher retrieval on a monolingual check (``MonoCheck``: TF-IDF, whose
    sparse space no linear map is fitted from, is left out)."""
    from tinyglot.evaluation import evaluate_bitext
    from tinyglot.evaluation.teacher_check import KnownRows, MonoCheck, evaluate_teacher_retrieval

    mono = isinstance(testset, MonoCheck)
    teacher_rows = check_teacher_rows(ctx, models, testset, inputs, label) if mono else {}
    test_key = hash_json({"test": inputs, "batch_size": ctx.cfg.eval.batch_size, "device": ctx.cfg.eval.device})
    rows: list[dict[str, Any]] = []
    for m in models:
        if mono and m.kind == "tfidf":
            continue
        path = eval_cache(ctx, m) / f"{hash_json([m.kind, m.identity, test_key])[:24]}.json"
        result = read_cached_result(path)
        cached = result is not None
        if result is not None:
            ctx.say(f"eval{label}: {m.name}: {100 * result.primary_metric:.1f} (cached)")
        else:
            with language_progress(ctx, testset, f"eval{label} {m.name}") as on_language:
                if mono:
                    encoder = KnownRows(testset, teacher_rows, m.name) if m.kind == "teacher" else m.open()
                    result = evaluate_teacher_retrieval(encoder, testset, teacher_rows,
                                                        batch_size=ctx.cfg.eval.batch_size, model_name=m.name,
                                                        testset_name=name, on_language=on_language)
                else:
                    result = evaluate_bitext(m.open(), testset, batch_size=ctx.cfg.eval.batch_size,
                                             model_name=m.name, testset_name=name, on_language=on_language)
            result.write_json(path)
            ctx.say(f"eval{label}: {m.name}: {100 * result.primary_metric:.1f} ({result.seconds:.1f} s)")
        rows.append({"name": m.name, "kind": m.kind, "path": m.path, "cached": cached, "result": result.to_dict()})
    return rows


@contextlib.contextmanager
def language_progress(ctx: RunContext, testset: Any, description: str) -> Iterator[Callable[[str], None]]:
    """A progress bar over a test set's languages (their sentences the cost: the estimate and ETA follow
    them), and the ``on_language`` callback that moves it."""
    from tinyglot.evaluation.teacher_check import MonoCheck
    from tinyglot.training import Progress

    sizes = ({lang: len(s) + len(testset.fit[lang]) for lang, s in testset.check.items()}
             if isinstance(testset, MonoCheck) else {lang: 2 * len(pairs) for lang, pairs in testset.items()})
    bar = Progress(len(sizes), description, ctx.progress, unit="languages", cost_total=float(sum(sizes.values())))
    done: list[str] = []
    with bar.run():
        def on_language(lang: str) -> None:
            done.append(lang)
            bar.update(len(done), lang, cost=float(sum(sizes[x] for x in done)))

        yield on_language


def check_teacher_rows(ctx: RunContext, models: list[EvalModel], check: Any, inputs: dict[str, Any],
                       label: str = "") -> dict[str, Any]:
    """The teacher's embeddings of a monolingual check's sentences, kept beside its evaluations (shared by every
    run folder when the teacher is a fixed model such as e5-small-onnx)."""
    import numpy as np

    from tinyglot.evaluation.teacher_check import teacher_embeddings
    from tinyglot.io import atomic_path

    teacher = next(m for m in models if m.kind == "teacher")
    path = eval_cache(ctx, teacher) / f"check-rows-{hash_json([teacher.identity, inputs])[:24]}.npz"
    if path.is_file():
        try:
            with np.load(path) as stored:
                rows = {lang: stored[lang] for lang in check.check}
            ctx.say(f"eval{label}: the teacher's embeddings of the check (cached)")
            return rows
        except (OSError, ValueError, KeyError):
            pass  # unreadable: embed again
    ctx.say(f"eval{label}: the teacher embeds the check's {len(check.sentences()):,} sentences "
            f"({len(check.check)} languages)")
    with language_progress(ctx, check, f"eval{label} the teacher's rows") as on_language:
        rows = teacher_embeddings(teacher.open(), check, ctx.cfg.eval.batch_size, on_language)
    with atomic_path(path) as tmp, open(tmp, "wb") as fh:
        np.savez(fh, **rows)  # type: ignore[arg-type]
    return rows


def run_eval(ctx: RunContext) -> StageOutput:
    models = eval_models(ctx)
    pairs = ctx.cfg.data.test_pairs_per_lang
    rows = eval_on(ctx, models, ctx.testset(), ctx.testset_name(),
                   test_content_key(corpus_path(ctx.cfg.data.test, test=True), pairs, ctx.testset_name()))
    extra: list[dict[str, Any]] = []
    for (name, testset), (_, path) in zip(ctx.extra_testsets(), ctx.cfg.data.extra_tests(), strict=True):
        extra.append({"name": name, "testset": path, "kind": test_kind(testset),
                      "models": eval_on(ctx, models, testset, name, test_content_key(Path(path), pairs, name),
                                        f" [{name}]")})
    results = {"testset": ctx.testset_name(), "models": rows, "extra": extra}
    atomic_write_json(ctx.out / "eval" / "results.json", results)
    info = {r["name"]: round(100 * r["result"]["primary_metric"], 2) for r in rows}
    for test in extra:
        info.update({f"{r['name']} [{test['name']}]": round(100 * r["result"]["primary_metric"], 2)
                     for r in test["models"]})
    return StageOutput([ctx.out / "eval" / "results.json"], info)


def test_kind(testset: Any) -> str:
    """``bitext`` (pairs) or ``teacher-retrieval`` (a monolingual check), as results.json records it."""
    from tinyglot.evaluation.teacher_check import MonoCheck

    return "teacher-retrieval" if isinstance(testset, MonoCheck) else "bitext"


# ------------------------------------------------------------------ stage 5: bench
def bench_inputs(ctx: RunContext) -> dict[str, Any]:
    inputs = {"bench": to_dict(ctx.cfg.bench), "peers": ctx.cfg.eval.peers}
    if ctx.cfg.bench.regime_sentences:  # the call regimes time sentences of the test set
        inputs["regimes_test"] = testset_inputs(ctx.cfg)
    return inputs


def bench_targets(ctx: RunContext) -> list[Path | str]:
    """The PyTorch student (if asked), every ONNX / TFLite bundle (string-in ones included) and the
    peers of ``eval.peers`` (``peer:NAME``, through their own Python API), so that the report's
    Pareto view puts them side by side."""
    from tinyglot.export.formats import bundle_runtimes

    targets: list[Path | str] = [ctx.student_dir] if ctx.cfg.bench.torch else []
    teacher = set(exported_teacher_bundles(ctx))
    runtimes = bundle_runtimes()
    targets += [ctx.bundle_dir(name) for fmt, _, name in [*ctx.cfg.bundles(), *ctx.cfg.teacher_bundles()]
                if fmt in runtimes
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
    regimes = run_regimes_stage(ctx, targets)
    return StageOutput([db, report.markdown, *report.plots, *regimes],
                       {"device": run.device, "measurements": len(run.rows), "skipped": run.skipped})


REGIMES_FILE = "regimes.json"


def run_regimes_stage(ctx: RunContext, targets: list[Path | str]) -> list[Path]:
    """The call regimes of every bench target (``bench.regime_sentences`` sentences of the test set and of
    prose, each target in its own process at ``bench.threads[0]`` threads, shown the bench device's ``isa``) in
    ``bench/regimes.json``; none when ``bench.regime_sentences`` is 0 or the bench device is not this host."""
    from dataclasses import asdict

    from tinyglot.devices.profiles import detect_host, load_profile
    from tinyglot.devices.regimes import PROSE_MIN_WORDS, load_set, run_regimes, sets_line

    b = ctx.cfg.bench
    profile = load_profile(b.device)
    if not b.regime_sentences or profile.kind != "local":
        return []
    student = read_json_object(ctx.student_dir / "config.json") or {}
    langs = [x for x in student.get("languages") or [] if x != "en"] or None
    sets = [load_set(f"test={ctx.cfg.data.test or 'embedded'}", b.regime_sentences, languages=langs),
            load_set(f"prose@{PROSE_MIN_WORDS}=pydoc+embedded-corpus#libreoffice-help", b.regime_sentences,
                     languages=langs)]
    threads = b.threads[0]
    ctx.say(f"call regimes (single, arrival-32, bulk) of {len(targets)} models at {threads} thread(s): "
            + sets_line(sets))
    rows = run_regimes([str(t) for t in targets], sets, threads=threads, repeats=b.regime_repeats, say=ctx.say,
                       isa=profile.isa)  # host-avx2: AVX-512 and VNNI hidden, as in the bench stage's runner
    path = ctx.out / "bench" / REGIMES_FILE
    atomic_write_json(path, {"cpu": detect_host().get("cpu_model"), "isa": profile.isa, "threads": threads,
                             "repeats": b.regime_repeats,
                             "sets": [{k: v for k, v in asdict(s).items() if k != "sentences"}
                                      | {"n": len(s.sentences), "chars": s.chars()} for s in sets],
                             "description": sets_line(sets), "rows": rows})
    return [path]


# ------------------------------------------------------------------ stage 6: report
def report_inputs(ctx: RunContext) -> dict[str, Any]:
    return {"report": to_dict(ctx.cfg.report)}


def run_report(ctx: RunContext) -> StageOutput:
    from .report import write_report

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
