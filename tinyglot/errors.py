"""User-facing errors.

Every error a user can cause (bad file, unknown language, wrong checkpoint...) is a
:class:`TinyglotError`.  The CLI prints its message and exits with status 2, without a
traceback.  A message says what is wrong, where, and how to fix it.
"""

from __future__ import annotations

from pathlib import Path


class TinyglotError(Exception):
    """An error caused by the user's input, reported without a traceback."""

    def __init__(self, problem: str, fix: str | None = None) -> None:
        self.problem = problem
        self.fix = fix
        super().__init__(problem if fix is None else f"{problem}\n  fix: {fix}")


class DataError(TinyglotError):
    """A problem in a data file: names the file and, where known, the line."""

    def __init__(
        self, path: str | Path, problem: str, fix: str | None = None, line: int | None = None
    ) -> None:
        self.path = str(path)
        self.line = line
        where = self.path if line is None else f"{self.path}:{line}"
        super().__init__(f"{where}: {problem}", fix)


class UnknownLanguageError(TinyglotError):
    """A language code that tinyglot cannot map to a canonical code."""


class CheckpointError(TinyglotError):
    """A checkpoint that is missing, corrupted, or from another configuration."""
