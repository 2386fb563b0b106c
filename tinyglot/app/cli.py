"""The ``tinyglot`` command line: ``tinyglot data|teacher|eval|distill|export|bench|run ...``.

Each command lives in :mod:`tinyglot.app.commands`; this module builds the parser, runs a command and
holds the options several commands share.

User errors (:class:`~tinyglot.errors.TinyglotError`) print one message and exit with status 2,
without a traceback.  Commands import their stage's heavy modules (torch, transformers) only when they
run, so ``--help`` stays fast.
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

from tinyglot.console import make_console
from tinyglot.errors import TinyglotError

EXIT_USER_ERROR = 2
EXIT_INTERRUPTED = 130


# ------------------------------------------------------------------ shared options
def add_config_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--config", type=Path, help="TOML file with [model] and [train] tables overriding the preset")
    p.add_argument("--set", dest="sets", action="append", metavar="KEY=VALUE",
                   help="override one setting, e.g. --set train.max_steps=500 --set model.num_layers=2")


def config_overrides(args: argparse.Namespace) -> dict:
    from tinyglot.config import parse_sets, read_toml

    merged: dict = read_toml(args.config) if getattr(args, "config", None) else {}
    for section, values in parse_sets(getattr(args, "sets", None)).items():
        if isinstance(values, dict):
            merged.setdefault(section, {}).update(values)
        else:
            merged[section] = values
    return merged


def add_header_option(p: argparse.ArgumentParser) -> None:
    p.add_argument("--header", action=argparse.BooleanOptionalAction, default=None,
                   help="TSV files start with a row of column names (--no-header: they do not; "
                        "default: detect rows such as en<TAB>de or source<TAB>target)")


def print_and_save_result(result, json_path: Path | None) -> None:
    console = make_console()
    console.print(result.to_table())
    if json_path is not None:
        result.write_json(json_path)
        console.print(f"wrote {json_path}")


# ------------------------------------------------------------------ parser
def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="tinyglot",
        description="Turn a multilingual sentence encoder into a small, fast on-device model.",
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="log more detail")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    from tinyglot.app.commands import bench, data, distill, export, run, teacher
    from tinyglot.app.commands import eval as evaluate

    for command in (data, evaluate, teacher, distill, export, bench, run):
        command.register(sub)
    return parser


# Loggers that print import-time noise a user cannot act on: torchao (pulled in by transformers when
# litert-torch installed it) warns that there is no triton, and registers enums with torch's pytree,
# which logs a deprecation warning per enum.
NOISY_LOGGERS = ("torchao", "torch.utils._pytree")


def quiet_third_party_import_noise() -> None:
    for name in NOISY_LOGGERS:
        logging.getLogger(name).setLevel(logging.ERROR)


def run(argv: Sequence[str] | None, parser_factory: Callable[[], argparse.ArgumentParser]) -> int:
    parser = parser_factory()
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO if getattr(args, "verbose", False) else logging.WARNING,
                        format="%(levelname)s %(name)s: %(message)s")
    quiet_third_party_import_noise()
    try:
        return int(args.func(args) or 0)
    except TinyglotError as exc:
        from rich.markup import escape

        make_console(stderr=True).print(f"[bold red]error:[/] {escape(str(exc))}", soft_wrap=True)
        return EXIT_USER_ERROR
    except KeyboardInterrupt:
        make_console(stderr=True).print("interrupted: checkpoints are intact; rerun with --resume to continue")
        return EXIT_INTERRUPTED


def main(argv: Sequence[str] | None = None) -> int:
    return run(argv, build_parser)


def distill_main(argv: Sequence[str] | None = None) -> int:
    """The bare ``distill`` command: ``distill --student lealla-small`` == ``tinyglot distill ...``."""
    args = list(sys.argv[1:] if argv is None else argv)
    return main(["distill", *args])


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
