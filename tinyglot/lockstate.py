"""The locks this process holds (:mod:`tinyglot.locks` takes and gives them back) and the temporaries
named in their lock files; whether a recorded owner's pid is alive.  Below :mod:`tinyglot.io`, whose
atomic writes name their temporaries here, and :mod:`tinyglot.outputs`."""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

_held: dict[str, _Held] = {}


@dataclass
class _Held:
    fd: int
    count: int
    record: dict[str, Any] = field(default_factory=dict)
    temporaries: list[str] = field(default_factory=list)  # relative to the lock's folder

    def write(self) -> None:
        data = (json.dumps({**self.record, "temporaries": self.temporaries}) + "\n").encode("utf-8")
        os.ftruncate(self.fd, 0)
        os.pwrite(self.fd, data, 0)


def pid_alive(pid: int) -> bool:
    """Whether a process ``pid`` exists on this host."""
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # exists, owned by someone else
        return True
    except OSError:
        return False
    return True


def _holder(path: Path) -> tuple[_Held, Path] | None:
    """The held lock whose folder contains ``path`` (the innermost), and that folder."""
    best: tuple[_Held, Path] | None = None
    for key, held in _held.items():
        folder = Path(key).parent
        if path.is_relative_to(folder) and (best is None or len(folder.parts) > len(best[1].parts)):
            best = (held, folder)
    return best


@contextlib.contextmanager
def recorded_temporary(path: str | Path) -> Iterator[None]:
    """Name ``path`` (a temporary about to be created) in the lock file of the locked folder that holds it
    while the block runs, so that a run started after a kill removes exactly what was left, and
    nothing else.  Outside a locked folder this does nothing."""
    if not _held:
        yield
        return
    path = Path(os.path.abspath(path))
    real = Path(os.path.realpath(path.parent)) / path.name
    found = _holder(real)
    if found is None:
        yield
        return
    held, folder = found
    rel = os.path.relpath(real, folder)
    held.temporaries.append(rel)
    held.write()
    try:
        yield
    finally:
        with contextlib.suppress(ValueError):
            held.temporaries.remove(rel)
        with contextlib.suppress(OSError):
            held.write()
