"""``tinyglot distill``'s recipes: a LEALLA distillation run, the dimension-reduction reference, and the
report they write (the default teacher they fall back on is :mod:`tinyglot.teacher.default`)."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from pathlib import Path

from tinyglot.config import tinyglot_home
from tinyglot.data.embedded import load_pairs, load_testset
from tinyglot.evaluation import BitextResult, evaluate_all
from tinyglot.io import atomic_write_json, atomic_write_text, folder_bytes
from tinyglot.models import read_model_config
from tinyglot.teacher.default import ensure_default_teacher
from tinyglot.tokenizer import Tokenizer

from .config import get_preset

log = logging.getLogger(__name__)

__all__ = ["lealla_trainer", "resolve_spec", "run_dimred", "run_distill", "teacher_tokenizer", "write_report"]


def resolve_spec(spec: str) -> str:
    """A folder spec as an absolute path, so saved configs that name it work from anywhere."""
    return str(Path(spec).resolve()) if Path(spec).exists() else spec


def teacher_tokenizer(spec: str) -> Tokenizer | None:
    """A tinyglot teacher's own vocabulary (the student reuses it); None for other teachers."""
    path = Path(spec)
    return Tokenizer.load(path / "tokenizer.model") if (path / "tokenizer.model").is_file() else None


def write_report(out: Path, results: list[BitextResult], info: dict, reference: str = "teacher") -> dict:
    """``report.json`` and ``report.md``: P@1 per language for each model, sizes, times; retention
    is the student's P@1 over the ``reference`` model's (the teacher, or a multi-stage assistant)."""
    by_name = {r.model: r for r in results}
    student, ref = by_name.get("student"), by_name.get(reference)
    retention = None
    if student and ref and ref.primary_metric > 0:
        retention = student.primary_metric / ref.primary_metric
    report = {**info, "retention": retention, "retention_reference": reference,
              "results": [r.to_dict() for r in results]}
    atomic_write_json(out / "report.json", report)
    langs = [row.lang for row in results[0].rows]
    lines = [f"# Distillation report: {info.get('preset')}", "",
             f"Test set: {results[0].testset}. P@1 (mean of x->en and en->x), cosine retrieval.", "",
             "| lang | " + " | ".join(r.model for r in results) + " |",
             "|---|" + "---:|" * len(results)]
    for i, lang in enumerate(langs):
        lines.append(f"| {lang} | " + " | ".join(f"{100 * r.rows[i].mean:.1f}" for r in results) + " |")
    lines.append("| **average** | " + " | ".join(f"**{100 * r.primary_metric:.1f}**" for r in results) + " |")
    lines += ["", f"Retention (student / {reference} average P@1): "
              + ("n/a" if retention is None else f"{100 * retention:.1f} %"), "",
              "| | value |", "|---|---|"]
    for key in ("teacher", "student_dim", "teacher_dim", "student_parameters", "student_bytes",
                "trained_steps", "wall_seconds", "init"):
        if key != "init" or "init" in info:  # (how the student started: LEALLA runs)
            lines.append(f"| {key} | {info.get(key)} |")
    atomic_write_text(out / "report.md", "\n".join(lines) + "\n")
    return report


def run_dimred(dim: int, teacher: str | None = None, data: str | Path | None = None,
               out: str | Path | None = None, progress: bool = True, cache_dir: str | Path | None = None,
               test_data: str | Path | None = None, steps: int = 2000, say: Callable[[str], None] = log.info) -> dict:
    """LEALLA section 3.2 reference: a dense layer to ``dim`` on the frozen teacher, evaluated."""
    from tinyglot.encoders import load_teacher as load_teacher_encoder
    from tinyglot.encoders import tfidf_baseline

    from .dimred import load_dimred, train_dimred

    started = time.time()
    teacher_spec = resolve_spec(teacher) if teacher else str(ensure_default_teacher(say, progress))
    teacher_enc = load_teacher_encoder(teacher_spec)
    out = Path(out or Path("runs") / "distill" / f"dimred-{dim}")
    say(f"distill: dimension reduction of {teacher_spec} to {dim} -> {out}")
    folder = train_dimred(teacher_enc, teacher_spec, load_pairs(data), out / "model", dim,
                          cache_dir or tinyglot_home() / "teacher-cache", steps=steps, progress=progress)
    testset = load_testset(test_data)
    name = str(test_data or "embedded test set")
    results = evaluate_all([("student", load_dimred(folder)), ("teacher", teacher_enc), ("tfidf", tfidf_baseline())],
                              testset, name, progress=progress, say=say)
    info = {"preset": f"dimred-{dim}", "teacher": teacher_spec, "student_dim": dim,
            "teacher_dim": teacher_enc.dim, "student_parameters": {"dense": teacher_enc.dim * dim + dim},
            "student_bytes": (folder / "dense.pt").stat().st_size, "trained_steps": steps,
            "wall_seconds": round(time.time() - started, 1), "student_dir": str(folder)}
    return write_report(out, results, info)


def lealla_trainer(preset, preset_name: str, teacher_spec: str, pairs: list, out: Path,
                   cache_dir: str | Path | None = None, vocab_size: int = 8000, resume: bool = False,
                   progress: bool = True, tokenizer: str | Path | None = None):
    """A ``LeallaTrainer`` from the teacher ``teacher_spec``, teacher embeddings cached in ``cache_dir``
    (default ``$TINYGLOT_HOME/teacher-cache``).  The student's vocabulary: the SentencePiece model
    ``tokenizer``; without one, a tinyglot teacher's own, else a new one of ``vocab_size`` pieces."""
    from tinyglot.training import training_device

    from tinyglot.encoders import load_teacher as load_teacher_encoder

    from .lealla import LeallaTrainer

    # the teacher pass runs on the training device (under torchrun: this process's GPU)
    teacher = load_teacher_encoder(teacher_spec, device=str(training_device(preset.train)))
    vocabulary = Tokenizer.load(tokenizer) if tokenizer else teacher_tokenizer(teacher_spec)
    return LeallaTrainer(preset, out, pairs, teacher, teacher.identity(), vocabulary,
                         preset_name, cache_dir or tinyglot_home() / "teacher-cache", vocab_size, resume, progress)


def run_distill(student: str = "lealla-small", teacher: str | None = None, data: str | Path | None = None,
                out: str | Path | None = None, overrides: dict | None = None, resume: bool = False,
                progress: bool = True, cache_dir: str | Path | None = None, test_data: str | Path | None = None,
                vocab_size: int = 8000, say: Callable[[str], None] = log.info) -> dict:
    """Distill ``teacher`` (default: the cached ems-small teacher) into a ``student`` preset."""
    started = time.time()
    preset = get_preset(student, overrides)
    teacher_spec = resolve_spec(teacher) if teacher else str(ensure_default_teacher(say, progress))
    out = Path(out or Path("runs") / "distill" / student)
    say(f"distill: {student} from {teacher_spec} -> {out}")
    trainer = lealla_trainer(preset, student, teacher_spec, load_pairs(data), out, cache_dir, vocab_size, resume,
                             progress)
    teacher_enc = trainer.teacher
    result = trainer.train()
    from tinyglot.distributed import shutdown_distributed

    shutdown_distributed()
    if not trainer.ctx.is_main:  # data-parallel: rank 0 evaluates and writes the report
        return {}
    from .student import load_student

    testset = load_testset(test_data)
    name = str(test_data or "embedded test set")
    from tinyglot.encoders import tfidf_baseline

    results = evaluate_all([("student", load_student(result.student_dir, device=str(trainer.device))),
                               ("teacher", teacher_enc), ("tfidf", tfidf_baseline())], testset, name,
                              progress=progress, say=say)
    cfg = read_model_config(result.student_dir)
    info = {"preset": student, "teacher": teacher_spec, "student_dim": cfg["dim"],
            "teacher_dim": trainer.teacher_dim, "student_parameters": cfg["parameters"],
            "student_bytes": folder_bytes(result.student_dir / "model"), "trained_steps": result.steps,
            "best_dev_p1": result.best_dev_p1, "init": cfg.get("init"), "train_seconds": round(result.seconds, 1),
            "wall_seconds": round(time.time() - started, 1), "student_dir": str(result.student_dir),
            "settings": {"loss": cfg["loss"], "train": cfg["train"], "student": cfg["student"]}}
    return write_report(out, results, info)
