"""``tinyglot distill`` (and the bare ``distill`` command)."""

from __future__ import annotations

import argparse
from pathlib import Path

from .config import PRESETS


def cmd_distill(args: argparse.Namespace) -> int:
    from rich.console import Console
    from rich.markup import escape

    from tinyglot.cli import config_overrides

    from .run import run_distill

    console = Console()
    say = lambda msg: console.print(escape(msg))  # noqa: E731
    if args.recipe == "dimred":
        from .run import run_dimred

        report = run_dimred(args.dim, teacher=args.teacher, data=args.data, out=args.out,
                            progress=not args.no_progress, cache_dir=args.cache_dir, test_data=args.test_data,
                            say=say)
    else:
        report = run_distill(student=args.student, teacher=args.teacher, data=args.data, out=args.out,
                             overrides=config_overrides(args), resume=args.resume,
                             progress=not args.no_progress, cache_dir=args.cache_dir, test_data=args.test_data,
                             vocab_size=args.vocab_size,
                             say=say)
    out = Path(report["student_dir"]).parent
    console.print((out / "report.md").read_text(encoding="utf-8"))
    console.print(f"student: {report['student_dir']}  report: {out / 'report.md'}, {out / 'report.json'}")
    return 0


def add_arguments(p: argparse.ArgumentParser) -> None:
    from tinyglot.cli import add_config_options

    p.add_argument("--recipe", choices=["lealla", "dimred"], default="lealla",
                   help="lealla: train a thin-deep student; dimred: the LEALLA 3.2 reference, a dense layer "
                        "to --dim on the frozen teacher")
    p.add_argument("--dim", type=int, default=128, help="target dimension of --recipe dimred")
    p.add_argument("--student", choices=sorted(PRESETS), default="lealla-small",
                   help="student preset (24-layer thin-deep BERT: small 128-d, base 192-d, large 256-d)")
    p.add_argument("--teacher", default=None,
                   help="a tinyglot teacher run, a TF Hub SavedModel folder, a sentence-transformers or "
                        "transformers folder, or python:module:callable (default: the cached ems-small "
                        "teacher, trained on the embedded corpus first if missing)")
    p.add_argument("--data", type=Path, default=None, help="parallel corpus (default: the embedded corpus)")
    p.add_argument("--test-data", type=Path, default=None, help="test set for the report (default: embedded)")
    p.add_argument("--out", type=Path, default=None, help="run folder (default: runs/distill/STUDENT)")
    p.add_argument("--resume", action="store_true", help="continue from OUT/last.pt")
    p.add_argument("--cache-dir", type=Path, default=None,
                   help="teacher-embedding cache (default: $TINYGLOT_HOME/teacher-cache, ~/.cache/tinyglot)")
    p.add_argument("--vocab-size", type=int, default=8000,
                   help="size of a new SentencePiece vocabulary when the teacher brings none")
    p.add_argument("--no-progress", action="store_true")
    add_config_options(p)
    p.set_defaults(func=cmd_distill)


def register(sub) -> None:
    p = sub.add_parser(
        "distill", help="compress a teacher into a small LEALLA student",
        description="LEALLA distillation: AMS + feature + logit distillation into a thin-deep student. "
                    "With no arguments: the cached ems-small teacher, the embedded corpus, lealla-small.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    add_arguments(p)
