"""``tinyglot export``: a student (or EMS teacher) to a bundle, with a parity check against it."""

from __future__ import annotations

import argparse
from pathlib import Path

FORMATS = ("onnx",)  # tflite and savedmodel are added by their own modules
QUANTIZE = ("none", "dynamic", "avx2", "avx512-vnni", "arm64", "static", "fp16")


def default_out(model: Path, fmt: str, quantize: str) -> Path:
    model = Path(model)
    suffix = "" if quantize == "none" else f"-{quantize}"
    return model.resolve().parent / f"{model.resolve().name}-{fmt}{suffix}"


def cmd_export(args: argparse.Namespace) -> int:
    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table

    from tinyglot.errors import TinyglotError

    from .bundle import human_size

    if args.threads < 1:
        raise TinyglotError(f"--threads must be >= 1, got {args.threads}")
    if args.max_sentences < 1:
        raise TinyglotError(f"--max-sentences must be >= 1, got {args.max_sentences}")
    console = Console(highlight=False)
    say = lambda msg: console.print(escape(msg))  # noqa: E731
    out = args.out or default_out(args.model, args.format, args.quantize)
    if args.format == "onnx":
        from .onnx import export_onnx

        try:
            import torch

            torch.set_num_threads(args.threads)
        except ImportError:  # pragma: no cover
            pass
        result = export_onnx(args.model, out, args.quantize, optimize=args.optimize, threads=args.threads,
                             max_sentences=args.max_sentences, parity_gate=not args.no_parity_gate, say=say)
    else:  # pragma: no cover - argparse restricts the choices
        raise TinyglotError(f"unknown format {args.format!r}", f"choose one of: {', '.join(FORMATS)}")
    console.print(result.parity.to_table())
    table = Table(title=f"bundle {result.out}")
    table.add_column("file")
    table.add_column("size", justify="right")
    for name, size in result.sizes.items():
        table.add_row(name, human_size(size))
    model_bytes = sum(size for name, size in result.sizes.items() if name in result.config["files"])
    if result.source_bytes:
        table.add_row("source weights", human_size(result.source_bytes), end_section=True)
        table.add_row("model / source", f"{model_bytes / result.source_bytes:.2f}x")
    console.print(table)
    if not result.parity.passed:
        console.print("[yellow]parity gate failed; bundle kept because of --no-parity-gate[/]")
    say(f"bundle: {result.out}  (load with tinyglot.load, evaluate with tinyglot eval --model {result.out})")
    return 0


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--model", required=True, type=Path,
                   help="a student folder (tinyglot distill) or an EMS teacher run (tinyglot teacher train)")
    p.add_argument("--format", choices=FORMATS, default="onnx")
    p.add_argument("--quantize", choices=QUANTIZE, default="none",
                   help="none (fp32); dynamic int8 (TOOLCHAIN recipe); avx2 / avx512-vnni / arm64 "
                        "(dynamic int8 presets per CPU); static int8 calibrated on the embedded corpus; fp16")
    p.add_argument("--out", type=Path, default=None, help="bundle folder (default: MODEL-FORMAT[-QUANTIZE] beside MODEL)")
    p.add_argument("--optimize", choices=["transformers", "ort", "none"], default="transformers",
                   help="onnxruntime graph optimisation saved in the file")
    p.add_argument("--threads", type=int, default=1, help="threads for torch and onnxruntime during the check")
    p.add_argument("--max-sentences", type=int, default=100,
                   help="test pairs per language for the parity check (two sentences each)")
    p.add_argument("--no-parity-gate", action="store_true",
                   help="keep the bundle even if the parity check fails (the report still says so)")
    p.set_defaults(func=cmd_export)


def register(sub) -> None:
    p = sub.add_parser(
        "export", help="export a student or teacher to an ONNX bundle with a parity check",
        description="Export a tinyglot student (or EMS teacher) with pooling and L2 normalisation inside "
                    "the graph, optimise and optionally quantize it, and check parity against the source.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    add_arguments(p)
