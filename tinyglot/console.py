"""The rich console every command and stage prints through."""

from __future__ import annotations

import sys

from rich.console import Console


def make_console(stderr: bool = False) -> Console:
    """The rich console of every command; wide when the output is a file or a pipe (logs, CI), so
    tables are not cut to 80 columns."""
    stream = sys.stderr if stderr else sys.stdout
    return Console(stderr=stderr, highlight=False, width=None if stream.isatty() else 200)


__all__ = ["make_console"]
