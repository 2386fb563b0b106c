"""Atomic file writes: outputs and checkpoints are never left half-written.

Everything tinyglot writes goes to a temporary file in the destination folder, is flushed to
disk, then renamed over the destination (``os.replace`` is atomic on POSIX and Windows).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import tempfile
from pathlib import Path
from typing import Any
from collections.abc import Iterator


@contextlib.contextmanager
def atomic_path(path: str | Path) -> Iterator[Path]:
    """Yield a temporary path beside ``path``; rename it over ``path`` if the block succeeds."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    tmp_path = Path(tmp)
    try:
        yield tmp_path
        with open(tmp_path, "rb+") as fh:
            os.fsync(fh.fileno())
        os.chmod(tmp_path, 0o666 & ~_umask())  # mkstemp creates 0600; give the usual permissions
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
    """Yield a temporary folder beside ``out`` that replaces ``out`` when the block succeeds (a kill
    leaves the old folder or a hidden ``.old`` copy, never a half-written ``out``)."""
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=out.parent))
    try:
        yield tmp
        apply_umask(tmp)  # mkdtemp made it 0700 (and some writers make 0600 files): the usual permissions
        old = out.with_name(f".{out.name}.old")
        shutil.rmtree(old, ignore_errors=True)
        if out.exists():
            out.rename(old)
        tmp.rename(out)
        shutil.rmtree(old, ignore_errors=True)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


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


# The temporaries this module and the exporters create: ``.NAME.XXXXXXXX.tmp`` files (atomic_path),
# ``.NAME.XXXXXXXX`` and ``.NAME.old`` folders (atomic_folder), ``.export-XXXXXXXX`` folders (export).
_STALE_FILE = re.compile(r"^\..+\.[a-z0-9_]{8}\.tmp$")
_STALE_DIR = re.compile(r"^\.(export-[a-z0-9_]{8}|.+\.[a-z0-9_]{8}|.+\.old)$")


def remove_stale_temporaries(folder: str | Path, depth: int = 3) -> list[Path]:
    """Remove the temporary files and folders a killed run left in ``folder`` and its sub-folders
    (``depth`` levels, hidden ones skipped); the removed paths.

    Call it only while holding the folder's lock (:func:`tinyglot.locks.run_lock`): a running
    writer's temporaries look the same."""
    removed: list[Path] = []
    top = len(Path(folder).parts)
    for root, dirs, files in os.walk(folder):
        if len(Path(root).parts) - top >= depth:
            dirs[:] = []
        for name in files:
            if _STALE_FILE.match(name):
                path = Path(root) / name
                path.unlink(missing_ok=True)
                removed.append(path)
        keep = []
        for name in dirs:
            path = Path(root) / name
            if _STALE_DIR.match(name) and not path.is_symlink():
                shutil.rmtree(path, ignore_errors=True)
                removed.append(path)
            elif not name.startswith("."):
                keep.append(name)
        dirs[:] = keep
    return removed


def folder_bytes(path: str | Path) -> int:
    """Bytes of every file under ``path`` (or of ``path`` itself when it is a file)."""
    path = Path(path)
    if not path.is_dir():
        return path.stat().st_size
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())
