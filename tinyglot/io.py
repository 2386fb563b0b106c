"""Atomic file writes: outputs and checkpoints are never left half-written.

Everything tinyglot writes goes to a temporary file in the destination folder, is flushed to
disk, then renamed over the destination (``os.replace`` is atomic on POSIX and Windows).
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import functools
import json
import os
import secrets
import shutil
import sys
from pathlib import Path
from typing import Any

from tinyglot.errors import TinyglotError
from tinyglot.lockstate import recorded_temporary
from collections.abc import Iterator


def _temporary_name(path: Path, suffix: str = "") -> Path:
    return path.with_name(f".{path.name}.{secrets.token_hex(4)}{suffix}")


@contextlib.contextmanager
def _recorded(tmp: Path) -> Iterator[None]:
    """While the block runs, ``tmp`` is named in the lock file of the locked run folder holding it (see
    :func:`tinyglot.locks.recorded_temporary`): a kill leaves it listed for the next run to remove."""
    with recorded_temporary(tmp):
        yield


@contextlib.contextmanager
def atomic_path(path: str | Path) -> Iterator[Path]:
    """Yield a temporary path beside ``path``; rename it over ``path`` if the block succeeds."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp_path = _temporary_name(path, ".tmp")
    with _recorded(tmp_path):
        fd = os.open(tmp_path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
        os.close(fd)
        try:
            yield tmp_path
            with open(tmp_path, "rb+") as fh:
                os.fsync(fh.fileno())
            os.chmod(tmp_path, 0o666 & ~_umask())  # created 0600; give the usual permissions
            os.replace(tmp_path, path)
        finally:
            tmp_path.unlink(missing_ok=True)


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def atomic_write_bytes(path: str | Path, data: bytes) -> None:
    with atomic_path(path) as tmp:
        tmp.write_bytes(data)


def atomic_write_text(path: str | Path, text: str) -> None:
    atomic_write_bytes(path, text.encode("utf-8"))


def atomic_write_json(path: str | Path, obj: Any) -> None:
    atomic_write_text(path, json.dumps(obj, indent=2, ensure_ascii=False, sort_keys=False) + "\n")


def read_json_object(path: str | Path) -> dict[str, Any] | None:
    """The JSON object in ``path``, or None when the file is missing, unreadable, not JSON or not an
    object (a record, marker or lock that is then treated as absent)."""
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


@contextlib.contextmanager
def atomic_folder(out: str | Path) -> Iterator[Path]:
    """Yield a temporary folder beside ``out`` that replaces ``out`` when the block succeeds: one atomic
    swap where the system has it (a kill leaves the old folder or the new one), the old one removed."""
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = _temporary_name(out)
    with _recorded(tmp):
        tmp.mkdir()
        try:
            yield tmp
            apply_umask(tmp)  # made 0700 by some writers (and 0600 files): the usual permissions
            aside = _temporary_name(out, ".old")
            with _recorded(aside):
                swap_into(tmp, out, aside)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)


_RENAME_EXCHANGE = 2


@functools.cache
def _renameat2() -> Any:
    if not sys.platform.startswith("linux"):
        return None
    libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
    return getattr(libc, "renameat2", None)


def exchange(a: str | Path, b: str | Path) -> bool:
    """Swap two existing paths in one atomic step (Linux ``renameat2(RENAME_EXCHANGE)``); False where the
    system or file system cannot."""
    func = _renameat2()
    if func is None:
        return False
    at_fdcwd = -100
    return func(at_fdcwd, os.fsencode(str(a)), at_fdcwd, os.fsencode(str(b)), _RENAME_EXCHANGE) == 0


def swap_into(new: Path, out: Path, aside: Path) -> None:
    """Put the folder ``new`` at ``out`` (new or existing) and remove the old ``out``: one atomic exchange
    where the system has it (a kill leaves the old folder or the new one at ``out``), else ``out`` is
    renamed to ``aside`` first (two renames, a short gap)."""
    if not out.exists():
        new.rename(out)
    elif exchange(new, out):
        shutil.rmtree(new, ignore_errors=True)  # the old folder, now at ``new``
    else:
        out.rename(aside)
        new.rename(out)
        shutil.rmtree(aside, ignore_errors=True)


def apply_umask(folder: str | Path) -> None:
    """Give ``folder`` and everything under it the permissions of a plain write under the umask
    (folders 0777, files 0666, executables 0777, each less the umask)."""
    mask = _umask()
    for root, dirs, files in os.walk(folder):
        os.chmod(root, 0o777 & ~mask)
        for name in files:
            path = os.path.join(root, name)
            if not os.path.islink(path):
                executable = os.stat(path).st_mode & 0o100
                os.chmod(path, (0o777 if executable else 0o666) & ~mask)
        dirs[:] = [d for d in dirs if not os.path.islink(os.path.join(root, d))]


def check_file_size(path: Path, limit: int, what: str) -> None:
    """Refuse a file larger than ``limit`` bytes before it is read (clear error naming both sizes)."""
    try:
        size = path.stat().st_size
    except OSError:
        return  # a missing file is reported by the reader
    if size > limit:
        raise TinyglotError(f"{path} is {size / 1e6:,.1f} MB; a {what} is at most {limit / 1e6:,.0f} MB, so it was "
                            "not read", f"pass the {what} tinyglot wrote (this one is damaged or not a {what})")


def folder_bytes(path: str | Path) -> int:
    """Bytes of every file under ``path`` (or of ``path`` itself when it is a file)."""
    path = Path(path)
    if not path.is_dir():
        return path.stat().st_size
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())
