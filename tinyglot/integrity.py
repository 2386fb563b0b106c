"""Content hashes of files, computed once per file version, and checks against recorded ones.

:func:`sha256_file` caches each digest by the file's (device, inode, size, mtime_ns, ctime_ns): a
big corpus or model file is read once per process (once at all with a :class:`DigestCache` file),
and again only when it changes.  A file rewritten in place with its old size and mtime restored
still gets a new ctime (which no user call can set back), so it is hashed again.  :func:`check_sha256`
compares a folder's files with the digests its ``config.json`` recorded (an export bundle).
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

from tinyglot.errors import TinyglotError
from tinyglot.io import atomic_write_json, read_json_object

_CACHE: dict[str, str] = {}


def _stamp(path: Path) -> str:
    st = os.stat(path)
    return f"{path.resolve()}|{st.st_dev}|{st.st_ino}|{st.st_size}|{st.st_mtime_ns}|{st.st_ctime_ns}"


def sha256_file(path: str | Path, cache: DigestCache | None = None) -> str:
    """sha256 of a file's bytes; cached by (path, device, inode, size, mtime_ns, ctime_ns) in memory
    and, when given, in ``cache``."""
    path = Path(path)
    key = _stamp(path)
    digest = _CACHE.get(key) or (cache.get(key) if cache is not None else None)
    if digest is None:
        h = hashlib.sha256()
        with open(path, "rb") as fh:
            for chunk in iter(lambda: fh.read(1 << 20), b""):
                h.update(chunk)
        digest = h.hexdigest()
    _CACHE[key] = digest
    if cache is not None:
        cache.put(key, digest)
    return digest


class DigestCache:
    """Digests of file versions kept in a small JSON file (a run folder's ``stages/.digests.json``),
    so that a big corpus is hashed once, not at every run."""

    def __init__(self, path: str | Path, limit: int = 10_000) -> None:
        self.path = Path(path)
        self.limit = limit
        self._dirty = False
        data = read_json_object(self.path) or {}
        self._digests = {k: v for k, v in data.items() if isinstance(k, str) and isinstance(v, str)}

    def get(self, key: str) -> str | None:
        return self._digests.get(key)

    def put(self, key: str, digest: str) -> None:
        if self._digests.get(key) != digest:
            self._digests[key] = digest
            self._dirty = True

    def save(self) -> None:
        if self._dirty:
            keep = dict(list(self._digests.items())[-self.limit:])
            atomic_write_json(self.path, keep)
            self._dirty = False


def content_fingerprint(root: str | Path, cache: DigestCache | None = None) -> dict[str, str]:
    """``{file: sha256}`` of a file or of every file under a folder (a corpus, a teacher folder): the
    key of a cached stage that must change when any byte changes, not only size or mtime."""
    root = Path(root)
    files = sorted(p for p in root.rglob("*") if p.is_file()) if root.is_dir() else [root]
    return {str(f): sha256_file(f, cache) for f in files if f.is_file()}


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
            raise TinyglotError(f"{folder} lacks {name}",
                                f"re-create the {what} (tinyglot export) or download it again")
        if sha256_file(path) != want:
            raise TinyglotError(
                f"{path} is not the file this {what} was exported with (its sha256 differs from the one in "
                "config.json): it was replaced or damaged",
                f"re-export the {what} with `tinyglot export`, or download it again")


__all__ = ["DigestCache", "check_sha256", "content_fingerprint", "file_digests", "sha256_file"]
