"""``tinyglot export``: a student (or EMS teacher) to a bundle, with a parity check against it.

    tinyglot export --model STUDENT --format onnx --quantize dynamic
    tinyglot export --model STUDENT --format tflite --quantize dynamic --buckets 16,32,64,128
    tinyglot export --model STUDENT --format savedmodel
    tinyglot export --model STUDENT --format tflite --prune-vocab --languages de,fr,ja
    tinyglot export --model STUDENT --format onnx-text --quantize dynamic     # raw strings in
    tinyglot export --model STUDENT --format tflite-mediapipe --quantize dynamic  # MediaPipe TextEmbedder
"""

from __future__ import annotations

import argparse
from pathlib import Path

from tinyglot.console import make_console

from tinyglot.export.formats import BUNDLE_FORMATS, format_names, get_format, quantization_names


def default_out(model: Path, fmt: str, quantize: str) -> Path:
    model = Path(model)
    suffix = "" if quantize == "none" else f"-{quantize}"
    return model.resolve().parent / f"{model.resolve().name}-{fmt}{suffix}"


def _buckets(args: argparse.Namespace):
    from tinyglot.export.tflite import DEFAULT_BUCKETS, parse_ints

    return parse_ints(args.buckets) or DEFAULT_BUCKETS


def _batch_sizes(args: argparse.Namespace):
    from tinyglot.export.tflite import DEFAULT_BATCH_SIZES, parse_ints

    return parse_ints(args.batch_sizes, "batch-sizes") or DEFAULT_BATCH_SIZES


# the exporter keywords the command line sets (a BundleFormat's ``options``), from the parsed arguments; each
# format gets those its record lists
OPTION_ARGUMENTS = {
    "optimize": lambda args: args.optimize,
    "buckets": _buckets,
    "batch_sizes": _batch_sizes,
    "input_shape": lambda args: args.input_shape,
}


def _export(args: argparse.Namespace, out: Path, kwargs: dict, say):
    """``(ExportResult, PruneResult | None)`` of the export the arguments ask for."""
    if args.prune_vocab:
        from tinyglot.export.prune import prune_and_export

        languages = [x.strip() for x in args.languages.split(",") if x.strip()] if args.languages else None
        return prune_and_export(args.model, out, args.format, languages=languages, corpus=args.corpus,
                                student_out=args.pruned_student, say=say, **kwargs)
    q = kwargs.pop("quantization")
    return get_format(args.format).export(args.model, out, q, say=say, **kwargs), None


def cmd_export(args: argparse.Namespace) -> int:
    from rich.markup import escape
    from rich.table import Table

    from tinyglot.errors import TinyglotError

    from tinyglot.export.bundle import human_size

    from tinyglot.config import MAX_THREADS

    if not 1 <= args.threads <= MAX_THREADS:
        raise TinyglotError(f"--threads must be from 1 to {MAX_THREADS}, got {args.threads}")
    if args.max_sentences < 1:
        raise TinyglotError(f"--max-sentences must be >= 1, got {args.max_sentences}")
    console = make_console()
    say = lambda msg: console.print(escape(msg))  # noqa: E731
    fmt = get_format(args.format)
    allowed = fmt.quantizations
    if args.quantize not in allowed:
        raise TinyglotError(f"--quantize {args.quantize} is not available for --format {args.format}",
                            f"choose one of: {', '.join(allowed)}")
    if (args.languages or args.corpus) and not args.prune_vocab:
        raise TinyglotError("--languages and --corpus choose what --prune-vocab keeps",
                            "add --prune-vocab (or drop --languages/--corpus)")
    if args.prune_vocab and not (args.languages or args.corpus):
        raise TinyglotError("--prune-vocab needs --languages (e.g. de,fr,ja) or --corpus FILE")
    if (args.buckets or args.batch_sizes) and "buckets" not in fmt.options:
        takers = [f.name for f in BUNDLE_FORMATS.values() if "buckets" in f.options]
        raise TinyglotError("--buckets and --batch-sizes are TFLite options", f"add --format {' or '.join(takers)}")
    out = args.out or default_out(args.model, args.format, args.quantize)
    try:
        import torch

        torch.set_num_threads(args.threads)
    except ImportError:  # pragma: no cover
        pass
    common = dict(threads=args.threads, max_sentences=args.max_sentences, parity_gate=not args.no_parity_gate)
    kwargs = dict(common, quantization=args.quantize,
                  **{name: value(args) for name, value in OPTION_ARGUMENTS.items() if name in fmt.options})
    from tinyglot.export.bundle import BUNDLE_KIND, legacy_bundle_files
    from tinyglot.locks import run_lock

    # a new, empty or bundle folder only (checked before anything is written); one export at a time
    with run_lock(out, "tinyglot export", BUNDLE_KIND, legacy=legacy_bundle_files, exclusive=True):
        result, pruning = _export(args, out, kwargs, say)
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
    if pruning is not None:
        p = pruning
        table = Table(title=f"vocabulary pruning to {', '.join(p.languages)} ({p.corpus})")
        for name in ("", "before", "after"):
            table.add_column(name, justify="right" if name else "left")
        table.add_row("pieces", str(p.vocab_before), str(p.vocab_after))
        table.add_row("parameters", f"{p.params_before:,}", f"{p.params_after:,}")
        table.add_row("weights", human_size(p.weights_bytes_before), human_size(p.weights_bytes_after))
        for lang in p.p1_before:
            table.add_row(f"P@1 {lang}", f"{p.p1_before[lang]:.1f}", f"{p.p1_after[lang]:.1f}")
        console.print(table)
        say(f"pruned student: {p.out}")
    if not result.parity.passed:
        console.print("[yellow]parity gate failed; bundle kept because of --no-parity-gate[/]")
    say(f"bundle: {result.out}  (load with tinyglot.load, evaluate with tinyglot eval --model {result.out})")
    return 0


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--model", required=True, type=Path,
                   help="a student folder (tinyglot distill) or an EMS teacher run (tinyglot teacher train)")
    formats = BUNDLE_FORMATS.values()
    p.add_argument("--format", choices=format_names(), default="onnx",
                   help="; ".join(f"{f.name} ({f.summary})" if f.summary else f.name for f in formats))
    p.add_argument("--quantize", choices=quantization_names(), default="none",
                   help=". ".join(f"{f.name}: {f.quantize_help or ', '.join(f.quantizations)}" for f in formats))
    p.add_argument("--buckets", default=None,
                   help="tflite: sequence-length buckets, e.g. 16,32,64,128 (clipped to the model's max_len, "
                        "which is always the largest)")
    p.add_argument("--batch-sizes", default=None,
                   help="tflite: the batch of each signature (one signature per batch x bucket); default 1, add 8,32 "
                        "for batched serving")
    p.add_argument("--input-shape", choices=["auto", "dynamic", "fixed"], default="auto",
                   help="tflite-mediapipe: dynamic ([1, n]: MediaPipe runs each string at its own length, short "
                        "ones cost less; converted with TensorFlow, needs tinyglot[tf] and a student), fixed ([1, "
                        "max_len + 2]: every string costs max_len tokens; litert-torch, any model), auto (default: "
                        "dynamic where it can be built)")
    p.add_argument("--prune-vocab", action="store_true",
                   help="first cut the student's vocabulary to the pieces of --languages (or --corpus), "
                        "then export the pruned student")
    p.add_argument("--languages", default=None,
                   help="with --prune-vocab: languages to keep, e.g. de,fr,ja (English is kept for X-en pairs)")
    p.add_argument("--corpus", type=Path, default=None,
                   help="with --prune-vocab: sentences to keep the pieces of (any corpus format or plain text; "
                        "default: the embedded corpus of --languages)")
    p.add_argument("--pruned-student", type=Path, default=None,
                   help="with --prune-vocab: folder of the pruned student (default: OUT-student beside the bundle)")
    p.add_argument("--out", type=Path, default=None,
                   help="bundle folder (default: MODEL-FORMAT[-QUANTIZE] beside MODEL)")
    p.add_argument("--optimize", choices=["transformers", "ort", "none"], default="transformers",
                   help="onnx: onnxruntime graph optimisation saved in the file")
    p.add_argument("--threads", type=int, default=1,
                   help="threads for torch and the exported runtime (onnxruntime, LiteRT, TensorFlow) during the check")
    p.add_argument("--max-sentences", type=int, default=100,
                   help="test pairs per language for the parity check (two sentences each)")
    p.add_argument("--no-parity-gate", action="store_true",
                   help="keep the bundle even if the parity check fails (the report still says so)")
    p.set_defaults(func=cmd_export)


def register(sub) -> None:
    p = sub.add_parser(
        "export", help="export a student or teacher to an ONNX, TFLite or SavedModel bundle with a parity check",
        description="Export a tinyglot student (or EMS teacher) with pooling and L2 normalisation inside "
                    "the graph, optimise and optionally quantize it, and check parity against the source. "
                    "--prune-vocab first cuts the vocabulary to the pieces some languages use.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    add_arguments(p)
