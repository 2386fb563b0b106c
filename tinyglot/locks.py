"""One run per folder: a lock file that names its owner.

``tinyglot run``, ``teacher train``, ``distill`` and ``bench`` hold a lock on what they write
(the ``--out`` folder, the benchmark database) while they run.  The lock file holds the owner's
pid, host, start time and command.  A second run is refused with a message naming that process.
A lock left by a process that died (kill -9, power loss) is taken over: on POSIX the lock is an
``flock`` the kernel drops when its process ends; elsewhere, and for a lock file found without
a live owner on this host, the pid is checked.  Locks are re-entrant within one process.
"""

from __future__ import annotations

import contextlib
import logging
import os
import socket
import sys
import shutil
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from tinyglot.errors import TinyglotError
from tinyglot.io import read_json_object
from tinyglot.lockstate import _Held, _held, pid_alive, recorded_temporary
from tinyglot.outputs import LOCK

log = logging.getLogger("tinyglot.locks")
try:
    import fcntl
except ImportError:  # Windows: the pid check alone decides
    fcntl = None  # type: ignore[assignment]
LOCK_NAME = LOCK

class LockedError(TinyglotError):
    """Another live process holds the lock."""


def lock_info(path: str | Path) -> dict[str, Any] | None:
    """The owner recorded in a lock file (None when absent or unreadable)."""
    return read_json_object(path)


def _describe(info: dict[str, Any] | None) -> str:
    if not info:
        return "another process"
    started = info.get("started")
    when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(started)) if isinstance(started, (int, float)) else "?"
    return (f"pid {info.get('pid')} on {info.get('host')} (started {when}"
            + (f": {info.get('command')}" if info.get("command") else "") + ")")


def _try_flock(fd: int) -> bool:
    """Take an exclusive ``flock`` on ``fd`` without waiting; True where flock does not exist."""
    if fcntl is None:
        return True
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    except OSError:  # a file system without flock: the pid check alone decides
        return True
    return True


def _is_stale(info: dict[str, Any] | None, host: str) -> bool:
    """A recorded owner that cannot be running: this host and a dead pid (or no owner at all)."""
    if not info:
        return True
    pid = info.get("pid")
    return info.get("host") == host and isinstance(pid, int) and pid != os.getpid() and not pid_alive(pid)


def acquire(path: str | Path, what: str) -> None:
    """Take the lock file ``path`` for ``what`` (a command), or raise :class:`LockedError`."""
    path = Path(path)
    key = str(path.resolve())
    if key in _held:
        _held[key].count += 1
        return
    host = socket.gethostname()
    for _ in range(5):
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o666)
        except OSError as exc:
            raise TinyglotError(f"cannot write into {path.parent}: {exc.strerror or exc}",
                                "pass a folder you can write to") from None
        if not _try_flock(fd):
            os.close(fd)
            info = lock_info(path)
            raise LockedError(f"{path.parent} is in use by {_describe(info)}; two runs must not write "
                              "into one folder at once",
                              "wait for that run to finish (or stop it), or choose another --out folder")
        try:
            same = os.fstat(fd).st_ino == os.stat(path).st_ino
        except FileNotFoundError:
            same = False
        if not same:  # the previous owner removed the file between our open and flock: retry
            os.close(fd)
            continue
        info = lock_info(path) or {}
        # we hold the flock, so a live pid of this host is a reused pid; another host cannot be checked
        held_elsewhere = bool(info) and info.get("pid") != os.getpid() and not _is_stale(info, host)
        if held_elsewhere and (info.get("host") != host or fcntl is None):
            os.close(fd)
            raise LockedError(
                f"{path.parent} is in use by {_describe(info)}", "wait for that run to finish; if it is "
                f"dead (another host cannot be checked from here), delete {path} and start again")
        if info and info.get("pid") != os.getpid():
            log.warning("taking over the lock of %s left by %s, which is no longer running", path.parent,
                        _describe(info))
            _remove_temporaries(path.parent, info.get("temporaries"))
        record = {"pid": os.getpid(), "host": host, "started": round(time.time(), 3),
                  "command": what, "argv": sys.argv[:8]}
        held = _held[key] = _Held(fd, 1, record)
        held.write()
        return
    raise LockedError(f"cannot take the lock {path}: it keeps changing", "check what else runs in that folder")


def release(path: str | Path) -> None:
    """Give the lock back (the last release of a re-entrant lock removes the file)."""
    key = str(Path(path).resolve())
    held = _held.get(key)
    if held is None:
        return
    held.count -= 1
    if held.count:
        return
    del _held[key]
    with contextlib.suppress(OSError):
        if os.stat(path).st_ino == os.fstat(held.fd).st_ino:  # ours (a folder swapped in has none, or another's)
            Path(path).unlink()
    os.close(held.fd)


def _remove_temporaries(folder: Path, names: object) -> list[Path]:
    """Remove the temporaries a dead owner's lock file names: only those, only inside ``folder``."""
    removed: list[Path] = []
    if not isinstance(names, list):
        return removed
    root = folder.resolve()
    for name in names:
        if not isinstance(name, str) or not name or Path(name).is_absolute() or ".." in Path(name).parts:
            continue
        path = folder / name
        try:
            inside = path.parent.resolve().is_relative_to(root)
        except (OSError, RuntimeError):
            inside = False
        if not inside:
            continue
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path, ignore_errors=True)
        elif path.is_symlink() or path.exists():
            path.unlink(missing_ok=True)
        else:
            continue
        removed.append(path)
    if removed:
        log.info("removed %d temporary file(s)/folder(s) left in %s by an interrupted run", len(removed), folder)
    return removed


@contextlib.contextmanager
def file_lock(path: str | Path, what: str) -> Iterator[Path]:
    """Hold the lock file ``path`` while the block runs."""
    acquire(path, what)
    try:
        yield Path(path)
    finally:
        release(path)


@contextlib.contextmanager
def run_lock(folder: str | Path, what: str, kind: str | None = None, *,
             legacy: Callable[[Path], list[str] | None] | None = None,
             exclusive: bool = False) -> Iterator[Path]:
    """Hold ``folder/.tinyglot.lock`` while the block runs.

    ``kind``: the folder is first claimed as a tinyglot output of that kind
    (:func:`tinyglot.outputs.claim_output`: new, empty or of the same kind, else a clear error with
    nothing touched); it is created if missing and removed again if the block fails and leaves
    nothing of its own (a failed run leaves no empty folder).  The temporaries a killed run named in
    its lock file, and its staging folders beside ``folder``, are removed when the lock is taken over.

    In a data-parallel run (torchrun) only rank 0 takes the lock.
    """
    from tinyglot.outputs import claim_output, make_folder, release_claim, remove_dead_staging

    folder = Path(folder)
    if os.environ.get("RANK", "0") != "0":
        yield folder
        return
    created = not folder.exists()
    if kind:  # the checks first (nothing written), then the lock, then the record
        claim_output(folder, kind, legacy=legacy, exclusive=exclusive, write=False)
    ok = False
    try:
        make_folder(folder)
        acquire(folder / LOCK_NAME, what)
        try:
            if kind:
                claim_output(folder, kind, legacy=legacy, exclusive=exclusive)
            remove_dead_staging(folder)
            yield folder
            ok = True
        finally:
            release(folder / LOCK_NAME)
    finally:
        if created and not ok:
            release_claim(folder)


__all__ = ["LOCK_NAME", "LockedError", "acquire", "file_lock", "lock_info", "pid_alive", "recorded_temporary",
           "release", "run_lock"]
