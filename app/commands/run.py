"""``tinyglot run``: the whole job in one command (see :mod:`tinyglot.app.pipeline`)."""

from __future__ import annotations

import argparse
import signal
from pathlib import Path

from tinyglot.app.pipeline.runner import DEFAULT_OUT, run_pipeline
from tinyglot.app.pipeline.settings import PROFILES, load_config, profile_config
from tinyglot.app.pipeline.stages import STAGES
from tinyglot.locks import run_lock
from tinyglot.outputs import legacy_if


def cmd_run(args: argparse.Namespace) -> int:
    cfg = load_config(args.profile, args.config, args.sets)
    previous = signal.signal(signal.SIGTERM, _sigterm_to_interrupt)
    try:
        # a new, empty or pipeline run folder only; one run at a time
        with run_lock(args.out, "tinyglot run", "pipeline-run", legacy=legacy_if("config.toml", "stages")):
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


def profiles_help() -> str:
    """Each profile with its teacher, student and step budget, read from the settings (never restated)."""
    from tinyglot.teacher.default import DEFAULT_TEACHER_PRESET

    parts = []
    for name in PROFILES:
        cfg = profile_config(name)
        teacher = {"default": f"the cached {DEFAULT_TEACHER_PRESET} teacher",
                   "train": f"{cfg.teacher.preset} teacher trained in the run"}.get(cfg.teacher.spec,
                                                                                     f"{cfg.teacher.spec} teacher")
        parts.append(f"{name} ({teacher} -> {cfg.distill.student} student, {cfg.distill.max_steps} steps"
                     + (": a small run for tests" if name == "tiny" else "") + ")")
    return ", ".join(parts)


def register(sub) -> None:
    p = sub.add_parser(
        "run", help="the whole job in one command: teacher -> distill -> export -> eval -> bench -> report",
        description="Run the pipeline on the embedded defaults (or your settings): teacher (the cached default, "
                    "trained once if missing), LEALLA distillation, ONNX/TFLite export with parity checks, P@1 "
                    "evaluation, a latency benchmark on this machine, and report.md/report.html. Finished stages "
                    "are reused on the next run when their inputs and outputs are unchanged; an interrupted run "
                    "continues where it stopped.")
    p.add_argument("--profile", default=None,
                   help=f"named settings: {profiles_help()}; without it: the config file's profile, else default")
    p.add_argument("--config", type=Path, default=None,
                   help="TOML file with [data] [teacher] [distill] [export] [eval] [bench] [report] tables "
                        "(OUT/config.toml of a run is one)")
    p.add_argument("--set", dest="sets", action="append", metavar="SECTION.KEY=VALUE",
                   help="override one setting, e.g. --set distill.max_steps=300 --set export.formats=onnx-dynamic "
                        "--set distill.overrides.train.lr=1e-3")
    p.add_argument("--out", type=Path, default=DEFAULT_OUT, help="run folder")
    p.add_argument("--no-progress", action="store_true", help="no progress bars (also TINYGLOT_NO_PROGRESS=1)")
    p.set_defaults(func=cmd_run, trains=True)
