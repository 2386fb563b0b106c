"""Content hashes of files, computed once per file version, and checks against recorded ones.

:func:`sha256_file` caches each digest by the file's (device, inode, size, mtime_ns): a big corpus
or model file is read once per process, and again only when it changes.  :func:`check_sha256`
compares a folder's files with the digests its ``config.json`` recorded (an export bundle).
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

from tinyglot.errors import TinyglotError

_CACHE: dict[tuple[str, int, int, int, int], str] = {}


def _stamp(path: Path) -> tuple[str, int, int, int, int]:
    st = os.stat(path)
    return str(path.resolve()), st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns


def sha256_file(path: str | Path) -> str:
    """sha256 of a file's bytes; cached by (path, device, inode, size, mtime_ns)."""
    path = Path(path)
    key = _stamp(path)
    digest = _CACHE.get(key)
    if digest is None:
        h = hashlib.sha256()
        with open(path, "rb") as fh:
            for chunk in iter(lambda: fh.read(1 << 20), b""):
                h.update(chunk)
        digest = _CACHE[key] = h.hexdigest()
    return digest


def file_digests(folder: str | Path, names: list[str]) -> dict[str, str]:
    """``{name: sha256}`` of files of ``folder`` (names relative to it)."""
    folder = Path(folder)
    return {name: sha256_file(folder / name) for name in sorted(set(names))}


def check_sha256(folder: str | Path, recorded: object, what: str = "bundle") -> None:
    """Every file named in ``recorded`` (``{name: sha256}`` from the folder's config.json) still has
    its digest; else a :class:`TinyglotError` naming the file.  Names are confined to the folder."""
    from tinyglot.models import folder_file

    folder = Path(folder)
    if not isinstance(recorded, dict) or not all(isinstance(v, str) for v in recorded.values()):
        raise TinyglotError(f"{folder}/config.json: 'sha256' is not a map of file names to digests",
                            f"re-create the {what} (tinyglot export)")
    for name, want in recorded.items():
        path = folder_file(folder, name, "'sha256'")
        if not path.is_file():
            raise TinyglotError(f"{folder} lacks {name}", f"re-create the {what} (tinyglot export) or download it again")
        if sha256_file(path) != want:
            raise TinyglotError(
                f"{path} is not the file this {what} was exported with (its sha256 differs from the one in "
                "config.json): it was replaced or damaged",
                f"re-export the {what} with `tinyglot export`, or download it again")


__all__ = ["check_sha256", "file_digests", "sha256_file"]
