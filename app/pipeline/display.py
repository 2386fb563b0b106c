"""The progress display of ``tinyglot run``: one bar over the stages, the stages' own bars below it."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from rich.progress import TaskID


class RunDisplay:
    """One display for the whole run: a line ``stage i/N name`` with a bar over the stages, and the
    stages' own bars (training, teacher embeddings, bench) below it.  Messages print above."""

    def __init__(self, total: int, enabled: bool) -> None:
        import rich
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

        self.console = rich.get_console()  # the console the stages' bars use: they nest under this one
        self.total = total
        nested = hasattr(self.console, "_live_stack")  # rich >= 14.1 renders nested live displays
        self._bar = Progress(TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
                             TextColumn("stages"), TimeElapsedColumn(), console=self.console) \
            if enabled and nested else None
        self._task: TaskID | None = None

    def __enter__(self) -> RunDisplay:
        if self._bar is not None:
            self._bar.start()
            self._task = self._bar.add_task("pipeline", total=self.total)
        return self

    def __exit__(self, *exc) -> None:
        if self._bar is not None:
            self._bar.stop()

    def stage(self, index: int, name: str) -> None:
        if self._bar is not None and self._task is not None:
            self._bar.update(self._task, description=f"stage {index}/{self.total} {name}", completed=index - 1)

    def done(self, index: int) -> None:
        if self._bar is not None and self._task is not None:
            self._bar.update(self._task, completed=index)

    def say(self, message: str) -> None:
        from rich.markup import escape

        self.console.print(escape(message), soft_wrap=True, highlight=False)


def progress_enabled(flag: bool = True) -> bool:
    return flag and os.environ.get("TINYGLOT_NO_PROGRESS") != "1"
