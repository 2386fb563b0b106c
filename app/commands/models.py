"""``tinyglot models``: the released students (``tinyglot/released``), their size, languages, P@1 and speed."""

from __future__ import annotations

import argparse
import json

from tinyglot.console import make_console


def _p1(summary: dict) -> str:
    parts = []
    for test, cols in summary.get("p1", {}).items():
        vals = " / ".join("–" if cols.get(c) is None else f"{cols[c]:.1f}" for c in ("student", "teacher", "use-m"))
        parts.append(f"{test}: {vals}")
    return "; ".join(parts) or "–"


def cmd_models(args: argparse.Namespace) -> int:
    from rich.markup import escape
    from rich.table import Table

    from tinyglot.released import list_released, released_root

    models = list_released(args.root)
    if args.json:
        print(json.dumps(models, indent=2, ensure_ascii=False))
        return 0
    console = make_console()
    if not models:
        console.print(escape(f"no released models in {released_root(args.root)}"), soft_wrap=True)
        return 0
    teacher = next((m.get("teacher") for m in models if m.get("teacher")), "teacher")
    table = Table(title=f"released models ({released_root(args.root)})")
    for col in ("name", "size MB", "languages", "dim", "tier (licence)", f"P@1 student / {teacher} / USE-m",
                "speed (1 thread)", "formats"):
        table.add_column(col, justify="right" if col in ("size MB", "languages", "dim") else "left",
                         overflow="fold")
    machines = set()  # of the speeds shown
    for m in models:
        if "error" in m:
            table.add_row(escape(m["name"]), "", "", "", "", escape(f"error: {m['error']}"), "", "")
            continue
        speed = m.get("speed") or {}
        speed_text = "–"
        if speed.get("sentences_per_s") is not None:
            machines.add(speed.get("machine"))
            speed_text = (f"{speed['sentences_per_s']:,.0f} sent/s, p50 {speed['p50_ms']:.2f} ms ({speed['format']}; "
                          f"{speed.get('machine') or 'machine not recorded'})")
        table.add_row(escape(m["name"]), f"{m['size_mb']:.2f}", str(m["languages"]), str(m["dim"]),
                      escape(f"{m['tier']} ({m['licence'] or '–'})"), escape(_p1(m)), escape(speed_text),
                      escape(", ".join(m["formats"])))
    console.print(table)
    if len(machines) > 1:  # a faster row may only be a faster machine
        console.print("speeds are as measured at release, on the machine each row names: compare models on one "
                      "machine with tinyglot bench --model NAME --model NAME ...", soft_wrap=True)
    console.print("load one with tinyglot.load(NAME); NAME?format=tflite-mediapipe for its MediaPipe bundle; "
                  "its card: MODEL_CARD.md in its folder", soft_wrap=True)
    return 0


def register(sub) -> None:
    from pathlib import Path

    from tinyglot.released import ROOT_ENV

    p = sub.add_parser("models", help="the released students: size, languages, P@1 on the shared tests, speed",
                       description="List the students released with tinyglot (tinyglot.load(NAME) opens one): "
                                   "size, languages, dimension, P@1 on the shared test sets beside e5-small and "
                                   "USE-m, and speed measured at release.")
    p.add_argument("--json", action="store_true", help="print the list as JSON instead of a table")
    p.add_argument("--root", type=Path, default=None,
                   help=f"folder of the released models (default: tinyglot's package folder, or ${ROOT_ENV})")
    p.set_defaults(func=cmd_models)
