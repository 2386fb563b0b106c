"""``tinyglot teacher train|eval``."""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

from tinyglot.app.commands.common import add_config_options, config_overrides
from tinyglot.console import make_console
from tinyglot.teacher.config import PRESETS


def cmd_train(args: argparse.Namespace) -> int:
    from tinyglot.config import to_dict

    from tinyglot.teacher.config import get_preset

    preset = get_preset(args.preset, config_overrides(args))  # a bad setting fails before transformers loads
    if args.print_config:
        make_console().print_json(json.dumps(to_dict(preset)))
    from tinyglot.locks import run_lock
    from tinyglot.outputs import legacy_if
    from tinyglot.teacher.train import train_teacher

    # a new, empty or teacher run folder only; one run at a time; a failed run leaves no empty folder
    legacy = legacy_if("tokenizer.model", "metrics.jsonl")
    with run_lock(args.out, "tinyglot teacher train", "teacher-run", legacy=legacy):
        result = train_teacher(preset, args.out, data=args.data, tokenizer=args.tokenizer,
                               preset_name=args.preset, resume=args.resume, progress=not args.no_progress)
    if os.environ.get("RANK", "0") != "0":
        return 0
    best = "n/a" if result.best_dev_p1 is None else f"{100 * result.best_dev_p1:.1f}"
    make_console().print(f"trained {result.steps} steps in {result.seconds:.0f}s; best dev P@1 {best}; "
                    f"teacher in {result.out_dir} (evaluate: tinyglot teacher eval --model {result.out_dir})")
    return 0


def cmd_eval(args: argparse.Namespace) -> int:
    from tinyglot.encoders import tfidf_baseline
    from tinyglot.data.embedded import load_testset
    from tinyglot.evaluation import compare, evaluate_bitext
    from tinyglot.io import atomic_write_json

    from tinyglot.teacher.encoder import load_teacher

    testset = load_testset(args.data)
    name = str(args.data or "embedded test set")
    teacher = load_teacher(args.model, which=args.which, device=args.device)
    results = [
        evaluate_bitext(teacher, testset, margin=args.margin, model_name=f"teacher ({args.which})",
                        testset_name=name),
        evaluate_bitext(tfidf_baseline(), testset, margin=args.margin, model_name="tfidf",
                        testset_name=name),
    ]
    console = make_console()
    console.print(compare(results))
    out = args.json or Path(args.model) / "eval.json"
    atomic_write_json(out, {"results": [r.to_dict() for r in results]})
    console.print(f"wrote {out}")
    return 0


def register(sub) -> None:
    teacher = sub.add_parser(
        "teacher", help="train or evaluate an EMS teacher",
        description="EMS teacher: a dual encoder trained from scratch on parallel sentences with "
                    "cross-lingual token reconstruction (XTR) and a contrastive loss.")
    tsub = teacher.add_subparsers(dest="teacher_command", metavar="ACTION", required=True)
    p = tsub.add_parser(
        "train", help="train a teacher (vocabulary first if no --tokenizer)",
        description="Train an EMS teacher. Presets: " + ", ".join(PRESETS) + ". Data-parallel: "
                    "torchrun --nproc_per_node K -m tinyglot teacher train ...")
    p.add_argument("--preset", choices=sorted(PRESETS), default="ems-small", help="model size and training recipe")
    p.add_argument("--data", type=Path, default=None, help="corpus file or folder (default: embedded corpus)")
    p.add_argument("--tokenizer", type=Path, default=None, help="existing tokenizer.model (default: train one)")
    p.add_argument("--out", type=Path, default=Path("runs/teacher"), help="run folder")
    p.add_argument("--resume", action="store_true", help="continue from OUT/last.pt")
    p.add_argument("--no-progress", action="store_true", help="no progress bar (logs still go to metrics.jsonl)")
    p.add_argument("--print-config", action="store_true", help="print the resolved config first")
    add_config_options(p)
    p.set_defaults(func=cmd_train, trains=True)
    p = tsub.add_parser("eval", help="P@1 per language of a trained teacher next to the TF-IDF baseline")
    p.add_argument("--model", type=Path, default=Path("runs/teacher"), help="teacher run folder")
    p.add_argument("--data", type=Path, default=None, help="test set (default: embedded test set)")
    p.add_argument("--which", choices=["best", "last"], default="best",
                   help="checkpoint: best dev P@1 (best.pt) or the last saved (last.pt)")
    p.add_argument("--margin", action="store_true", help="ratio-margin scoring (k=4)")
    p.add_argument("--device", default="cpu", help="cpu, cuda or auto")
    p.add_argument("--json", type=Path, default=None, help="JSON output (default: MODEL/eval.json)")
    p.set_defaults(func=cmd_eval)
