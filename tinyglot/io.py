"""Atomic file writes: outputs and checkpoints are never left half-written.

Everything tinyglot writes goes to a temporary file in the destination folder, is flushed to
disk, then renamed over the destination (``os.replace`` is atomic on POSIX and Windows).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any, Iterator


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


@contextlib.contextmanager
def atomic_folder(out: str | Path) -> Iterator[Path]:
    """Yield a temporary folder beside ``out`` that replaces ``out`` when the block succeeds (a kill
    leaves the old folder or a hidden ``.old`` copy, never a half-written ``out``)."""
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=out.parent))
    try:
        yield tmp
        old = out.with_name(f".{out.name}.old")
        shutil.rmtree(old, ignore_errors=True)
        if out.exists():
            out.rename(old)
        tmp.rename(out)
        shutil.rmtree(old, ignore_errors=True)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def folder_bytes(path: str | Path) -> int:
    """Bytes of every file under ``path`` (or of ``path`` itself when it is a file)."""
    path = Path(path)
    if not path.is_dir():
        return path.stat().st_size
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())
