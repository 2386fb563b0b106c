"""``tinyglot release``: a trained student becomes a released model (``tinyglot/released/NAME/``).

    tinyglot release --model runs/e5/distill/student --name NAME --card-data card.json
    tinyglot release --refresh NAME      # its ONNX graphs in today's export form, no student needed
"""

from __future__ import annotations

import argparse
import shlex
from pathlib import Path

from tinyglot.console import make_console


def _command(args: argparse.Namespace) -> str:
    """The command line as the manifest records it (the options given, in a fixed order)."""
    from tinyglot.data.pairs import TIERS
    from tinyglot.released import MAX_RELEASE_BYTES

    parts = ["tinyglot", "release", "--model", str(args.model), "--name", args.name]
    if args.card_data is not None:
        parts += ["--card-data", str(args.card_data)]
    for corpus in args.corpus:
        parts += ["--corpus", str(corpus)]
    for licence in args.allow_licence:
        parts += ["--allow-licence", licence]
    if args.formats != ",".join(_formats()):
        parts += ["--formats", args.formats]
    if args.max_sentences != 100:
        parts += ["--max-sentences", str(args.max_sentences)]
    if args.quantize != "dynamic":
        parts += ["--quantize", args.quantize]
    if args.tier != TIERS[0]:
        parts += ["--tier", args.tier]
    if args.max_mb != MAX_RELEASE_BYTES / 1e6:
        parts += ["--max-mb", f"{args.max_mb:g}"]
    return shlex.join(parts)


def _formats() -> tuple[str, ...]:
    from tinyglot.released import FORMATS

    return FORMATS


def cmd_release(args: argparse.Namespace) -> int:
    from rich.markup import escape

    from tinyglot.app.release import release_student
    from tinyglot.errors import TinyglotError

    console = make_console()

    def say(message: str) -> None:
        console.print(escape(message), soft_wrap=True)

    if args.refresh is not None:
        if args.model is not None or args.name is not None:
            raise TinyglotError("--refresh rewrites a released model in place: it takes no --model or --name",
                                f"run `tinyglot release --refresh {args.refresh}` alone")
        from tinyglot.app.release import refresh_release

        refresh_release(args.refresh, root=args.root, say=say)
        return 0
    if args.model is None or args.name is None:
        raise TinyglotError("tinyglot release needs --model and --name (or --refresh NAME)",
                            "pass the student folder and the released name, e.g. "
                            "--model runs/e5/distill/student --name my-student")
    if args.max_sentences < 1:
        raise TinyglotError(f"--max-sentences must be >= 1, got {args.max_sentences}")
    try:
        import torch

        torch.set_num_threads(1)
    except ImportError:  # pragma: no cover
        pass
    manifest = release_student(args.model, args.name, args.card_data, root=args.root, corpus=args.corpus,
                               formats=[f.strip() for f in args.formats.split(",") if f.strip()],
                               allowed_licences=args.allow_licence, tier=args.tier,
                               max_bytes=round(args.max_mb * 1e6), max_sentences=args.max_sentences,
                               quantize=args.quantize, command=_command(args), say=say)
    from tinyglot.released import CARD, released_root

    console.print(escape(f"load it with tinyglot.load({manifest['name']!r}); its card: "
                         f"{released_root(args.root) / manifest['name'] / CARD}"), soft_wrap=True)
    return 0


def register(sub) -> None:
    from tinyglot.app.release import QUANTIZATIONS
    from tinyglot.data.pairs import TIERS
    from tinyglot.released import MAX_RELEASE_BYTES, ROOT_ENV

    p = sub.add_parser(
        "release", help="release a trained student: int8 bundles, model card and manifest in tinyglot/released/NAME",
        description="Export a trained student as the int8 bundles that stock runtimes open (onnx-text, "
                    "tflite-mediapipe) with their parity gates, record embeddings of a few sentences and the "
                    "speed on this machine, write MODEL_CARD.md, LICENSES.md and release.json (sha256 of every "
                    "file) and put the folder in place in one atomic swap. Refused when the model takes more "
                    "than --max-mb or was trained on data that its licence tier does not allow.")
    p.add_argument("--model", type=Path, default=None, help="the student folder (tinyglot distill / tinyglot run)")
    p.add_argument("--name", default=None,
                   help="the released name, e.g. fast-small: lower-case words joined by '-', not a peer's name")
    p.add_argument("--card-data", type=Path, default=None,
                   help="JSON object for the model card: description, teacher, training {command, steps, data, "
                        "preset}, corpus [files], attributions, results (benchmarks/peers.py --json, or "
                        "{test: {student, teacher, use-m}}), student_spec, test_sets, licence (see docs/released.md)")
    p.add_argument("--corpus", action="append", type=Path, default=[],
                   help="the training corpus (JSONL with src and license per row): the data attributions are "
                        "counted from it (repeatable; also the card data's corpus)")
    p.add_argument("--tier", choices=TIERS, default=TIERS[0],
                   help="the licence tier: permissive (permissive and CC0 text; the weights under Apache-2.0) or "
                        "share-alike (and CC-BY-SA text; the weights under CC-BY-SA-4.0); GPL text is never allowed")
    p.add_argument("--allow-licence", action="append", default=[], metavar="LICENCE",
                   help="accept training data under this licence too (one you checked is permissive; never GPL)")
    p.add_argument("--max-mb", type=float, default=MAX_RELEASE_BYTES / 1e6, metavar="MB",
                   help=f"refuse a release larger than this (at most {MAX_RELEASE_BYTES / 1e6:.0f}, USE-m's size)")
    p.add_argument("--formats", default=",".join(_formats()), help="the bundles of the release, comma-separated")
    p.add_argument("--max-sentences", type=int, default=100,
                   help="test pairs per language for the parity gates of each bundle")
    p.add_argument("--quantize", choices=QUANTIZATIONS, default=QUANTIZATIONS[0],
                   help="dynamic: int8 weights; dynamic-int4-embeddings: the ONNX bundles' token table as 4-bit "
                        "blocks as well (about half the bytes of a large vocabulary; tflite-mediapipe stays int8)")
    p.add_argument("--root", type=Path, default=None,
                   help=f"folder of the released models (default: tinyglot's package folder tinyglot/released, "
                        f"or ${ROOT_ENV})")
    p.add_argument("--refresh", metavar="NAME", default=None,
                   help="instead of a new release: rewrite the ONNX graphs of the released model NAME in the form "
                        "tinyglot exports today (checked against the released rows; hashes, card and manifest "
                        "follow)")
    p.set_defaults(func=cmd_release)
