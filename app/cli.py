"""The ``tinyglot`` command line: ``tinyglot data|teacher|eval|distill|export|bench|run|release|models ...``.

Each command lives in :mod:`tinyglot.app.commands`; this module builds the parser, runs a command and
holds the options several commands share.

User errors (:class:`~tinyglot.errors.TinyglotError`) print one message and exit with status 2,
without a traceback.  Commands import their stage's heavy modules (torch, transformers) only when they
run, so ``--help`` stays fast.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Callable, Sequence

from tinyglot.console import make_console
from tinyglot.errors import TinyglotError
from tinyglot.quiet import configure, is_verbose, set_verbose

EXIT_USER_ERROR = 2
EXIT_INTERRUPTED = 130


# ------------------------------------------------------------------ parser
class HelpFormatter(argparse.ArgumentDefaultsHelpFormatter):
    """The formatter of every ``tinyglot`` parser: an option's default is appended to its help, unless the
    help already states it (it says "default") or there is nothing to state (None, a flag's False, an
    empty list).  A list default is shown as the comma-separated text the option takes."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        default = action.default
        if (not action.help or "default" in action.help.lower() or default is None or default is False
                or default is argparse.SUPPRESS or (isinstance(default, (list, tuple)) and not default)
                or not (action.option_strings or action.nargs in (argparse.OPTIONAL, argparse.ZERO_OR_MORE))):
            return action.help
        shown = ",".join(map(str, default)) if isinstance(default, (list, tuple)) else str(default)
        return f"{action.help} (default: {shown.replace('%', '%%')})"


def _parsers(parser: argparse.ArgumentParser):
    """``parser`` and every subcommand's parser below it."""
    yield parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                yield from _parsers(sub)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="tinyglot",
        description="Turn a multilingual sentence encoder into a small, fast on-device model.",
    )
    parser.add_argument("-v", "--verbose", action="store_true",
                        help="log more detail, and show third-party warnings and output (converters, quantizers, "
                             "runtimes) as they come; also TINYGLOT_VERBOSE=1")
    parser.add_argument("--allow-unverified", action="store_true",
                        help="open exported bundles that lack their integrity record (sha256 of files and config), "
                             "with a warning; by default they are refused")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    from tinyglot.app.commands import bench, data, distill, export, models, release, run, teacher
    from tinyglot.app.commands import eval as evaluate

    for command in (data, evaluate, teacher, distill, export, bench, run, release, models):
        command.register(sub)
    # one formatter for every command, whatever its register() chose: defaults stated once, never "None"
    for p in _parsers(parser):
        p.formatter_class = HelpFormatter
    return parser


def quiet_third_party_import_noise(verbose: bool = False) -> None:
    """The quiet terminal of :mod:`tinyglot.quiet` (``import tinyglot`` applies it already), or with
    ``verbose`` every third-party warning, log line and output, live."""
    configure(True if verbose else None)


def run(argv: Sequence[str] | None, parser_factory: Callable[[], argparse.ArgumentParser],
        entry: bool = False) -> int:
    """Parse ``argv`` (None: ``sys.argv``) and run its command.  ``entry``: this call is the process's own
    command line (the console scripts, ``python -m tinyglot``), so a command that trains may restart
    the process under its memory allocator (:func:`tinyglot.allocator.reexec_with_mimalloc`); an
    in-process caller (a test, a notebook) is never replaced."""
    from tinyglot import allocator

    allocator.restore_environment()
    parser = parser_factory()
    args = parser.parse_args(argv)
    if entry and getattr(args, "trains", False):
        try:
            allocator.reexec_with_mimalloc(list(sys.argv[1:] if argv is None else argv))
        except TinyglotError as exc:
            from rich.markup import escape

            make_console(stderr=True).print(f"[bold red]error:[/] {escape(str(exc))}", soft_wrap=True)
            return EXIT_USER_ERROR
    verbose = bool(getattr(args, "verbose", False))
    logging.basicConfig(level=logging.INFO if verbose else logging.WARNING,
                        format="%(levelname)s %(name)s: %(message)s")
    was_verbose = is_verbose()
    quiet_third_party_import_noise(verbose)
    if getattr(args, "allow_unverified", False):
        from tinyglot.export.bundle import ALLOW_UNVERIFIED

        os.environ[ALLOW_UNVERIFIED] = "1"
    try:
        return int(args.func(args) or 0)
    except MemoryError:
        make_console(stderr=True).print("[bold red]error:[/] out of memory: the input, a batch size or a model folder "
                                        "asks for more memory than this machine has\n  fix: use smaller inputs or "
                                        "batches, or check the model folder's config.json", soft_wrap=True)
        return EXIT_USER_ERROR
    except TinyglotError as exc:
        from rich.markup import escape

        make_console(stderr=True).print(f"[bold red]error:[/] {escape(str(exc))}", soft_wrap=True)
        return EXIT_USER_ERROR
    except KeyboardInterrupt:
        make_console(stderr=True).print("interrupted: checkpoints are intact; rerun with --resume to continue")
        return EXIT_INTERRUPTED
    finally:
        if verbose and not was_verbose:  # an in-process caller (a test) gets its quiet terminal back
            set_verbose(False)


def main(argv: Sequence[str] | None = None) -> int:
    """``tinyglot ARGV``; with no ``argv``, the process's command line (see :func:`run`'s ``entry``)."""
    return run(argv, build_parser, entry=argv is None)


def distill_main(argv: Sequence[str] | None = None) -> int:
    """The bare ``distill`` command: ``distill --student lealla-small`` == ``tinyglot distill ...``."""
    args = list(sys.argv[1:] if argv is None else argv)
    return run(["distill", *args], build_parser, entry=argv is None)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
