"""Output folders are tinyglot's alone: a command writes only into a folder that is new, empty, or
already a tinyglot output of the same kind, and replaces a bundle folder as one atomic swap.

Every folder a command writes (``--out`` of ``run``, ``teacher train``, ``distill``, ``export``)
holds an ownership record, :data:`RECORD` (``{"tinyglot": 1, "kind": ..., "files": [...]}``).
:func:`claim_output` checks a folder *before* anything is written there: a folder holding anything
tinyglot did not write (no record, or a record of another kind) is refused with a clear error and
left untouched.  Clean-up never goes by name patterns: a killed run's temporaries are named in its
lock file (:mod:`tinyglot.locks`), a staging folder by the record inside it.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any, NoReturn

from tinyglot.errors import TinyglotError
from tinyglot.io import apply_umask, atomic_write_json, read_json_object, swap_into
from tinyglot.lockstate import pid_alive

RECORD = ".tinyglot-output.json"
LOCK = ".tinyglot.lock"  # a folder's lock file (tinyglot.locks.LOCK_NAME)
STAGING_KIND = "staging"
_SHOWN = 5  # foreign entries named in an error


def read_record(folder: str | Path) -> dict[str, Any] | None:
    """The ownership record of ``folder`` (None when there is none, or it is not a record)."""
    path = Path(folder) / RECORD
    if path.is_symlink():
        return None
    record = read_json_object(path)
    return record if record is not None and record.get("tinyglot") == 1 and isinstance(record.get("kind"), str) \
        else None


def write_record(folder: str | Path, kind: str, files: Iterable[str] = (), **extra: Any) -> None:
    """Record ``folder`` as a tinyglot output of ``kind`` that holds ``files`` (top-level names)."""
    atomic_write_json(Path(folder) / RECORD, {"tinyglot": 1, "kind": kind, "files": sorted(set(files)), **extra})


def _entries(folder: Path) -> list[str]:
    return sorted(os.listdir(folder))


def _names(items: list[str]) -> str:
    shown = ", ".join(items[:_SHOWN])
    return shown + (f" and {len(items) - _SHOWN} more" if len(items) > _SHOWN else "")


def foreign_entries(folder: str | Path, record: dict[str, Any] | None) -> list[str]:
    """Top-level entries of ``folder`` that its record does not name as tinyglot's (a record without a
    ``files`` list, as a run folder's, owns the whole folder)."""
    if record is None:
        return [n for n in _entries(Path(folder)) if n not in (RECORD, LOCK)]
    files = record.get("files")
    if not isinstance(files, list) or not record.get("exclusive", False):
        return []
    owned = {f for f in files if isinstance(f, str)} | {RECORD, LOCK}
    return [n for n in _entries(Path(folder)) if n not in owned]


def claim_output(folder: str | Path, kind: str, *, what: str = "--out",
                 legacy: Callable[[Path], list[str] | None] | None = None, exclusive: bool = False,
                 write: bool = True) -> bool:
    """Make ``folder`` a tinyglot output of ``kind`` before anything is written there, or refuse it.

    Accepted: a new folder (created), an empty one, one whose record says ``kind``, or one an earlier
    tinyglot wrote before records existed (``legacy(folder)``: the names it owns there, else None).
    ``exclusive``: the folder is replaced as a whole (a bundle), so it must hold nothing but the files
    its record names.  Anything else is a :class:`TinyglotError` and nothing is touched.  Returns
    True when the folder was created (not ``write``: only the checks, nothing created or written)."""
    folder = Path(folder)
    if folder.exists() and not folder.is_dir():
        raise TinyglotError(f"{what} {folder} is a file, not a folder", f"pass a folder path as {what}")
    created = not folder.exists()
    if created and not write:
        return True
    if created:
        make_folder(folder, what)
        _write_or_fail(folder, kind, what, exclusive)
        return True
    if not os.access(folder, os.W_OK | os.X_OK):
        raise TinyglotError(f"{what} folder {folder} is not writable (read-only or not yours)",
                            f"pass a folder you can write to as {what}")
    record = read_record(folder)
    if record is not None:
        if record["kind"] != kind:
            raise TinyglotError(f"{what} {folder} holds a tinyglot {record['kind']} output, not a {kind}; nothing "
                                "was changed", f"pass a new or empty folder as {what}")
        foreign = foreign_entries(folder, record)
        if foreign:
            _refuse_foreign(folder, foreign, kind, what)
        return False
    others = foreign_entries(folder, None)
    owned = legacy(folder) if others and legacy is not None else None
    if others and owned is None:
        raise TinyglotError(
            f"{what} {folder} is not empty and was not written by tinyglot (it holds {_names(others)}); "
            "nothing was changed", f"pass a new or empty folder as {what}")
    foreign = [n for n in others if owned is not None and n not in owned] if exclusive else []
    if foreign:
        _refuse_foreign(folder, foreign, kind, what)
    if write:
        _write_or_fail(folder, kind, what, exclusive, files=others if exclusive else ())
    return False


def _refuse_foreign(folder: Path, foreign: list[str], kind: str, what: str) -> NoReturn:
    raise TinyglotError(f"{what} {folder} holds files tinyglot did not write ({_names(foreign)}); a new {kind} "
                        "replaces the whole folder, so nothing was changed",
                        f"move those files out of {folder}, or pass another folder as {what}")


def make_folder(folder: Path, what: str = "--out") -> None:
    """Create ``folder`` (and its parents), or a clear error saying it cannot be created."""
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise TinyglotError(f"cannot create {what} folder {folder}: {exc.strerror or exc}",
                            f"pass a folder you can write to as {what}") from None


def _write_or_fail(folder: Path, kind: str, what: str, exclusive: bool, files: Iterable[str] = ()) -> None:
    try:
        write_record(folder, kind, files, exclusive=exclusive)
    except OSError as exc:
        raise TinyglotError(f"cannot write into {what} folder {folder}: {exc.strerror or exc}",
                            f"pass a folder you can write to as {what}") from None


def legacy_if(*markers: str, any_of: bool = False) -> Callable[[Path], list[str] | None]:
    """A ``legacy`` test for :func:`claim_output`: a folder holding all (``any_of``: one) of ``markers``
    (paths inside it) is a run folder an earlier tinyglot wrote, and everything in it is tinyglot's."""
    def test(folder: Path) -> list[str] | None:
        found = [(folder / m).exists() for m in markers]
        return _entries(folder) if (any(found) if any_of else all(found)) else None

    return test


def release_claim(folder: str | Path) -> None:
    """Undo :func:`claim_output` on a folder it created, when the command failed before writing anything
    else there: the record and the folder go.  A folder the run already wrote into (a checkpoint to
    resume from, the log of a loss that diverged) keeps its record, so the same command can take it."""
    folder = Path(folder)
    if not folder.is_dir() or foreign_entries(folder, None):
        return
    (folder / RECORD).unlink(missing_ok=True)
    with contextlib.suppress(OSError):
        folder.rmdir()


# ====================================================================== staging folders and the swap
def _owner() -> dict[str, Any]:
    return {"pid": os.getpid(), "host": socket.gethostname()}


def staging_folder(out: str | Path) -> Path:
    """A new hidden folder beside ``out`` to build its replacement in, marked by a record naming its owner
    (pid, host) and ``out``, so that :func:`remove_dead_staging` can tell it from anything else."""
    import tempfile

    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.tinyglot-", dir=out.parent))
    write_record(tmp, STAGING_KIND, (), target=out.name, **_owner())
    return tmp


def remove_dead_staging(out: str | Path) -> list[Path]:
    """Staging folders of ``out`` left by a killed process of this host: hidden folders beside ``out``
    whose record names ``out`` as their target and a dead owner (never by name alone).  Call it while
    holding ``out``'s lock."""
    out = Path(out)
    removed: list[Path] = []
    prefix = f".{out.name}.tinyglot-"
    if not out.parent.is_dir():
        return removed
    for entry in out.parent.iterdir():
        if not entry.name.startswith(prefix) or entry.is_symlink() or not entry.is_dir():
            continue
        record = read_record(entry)
        if (record is None or record.get("target") != out.name or record.get("host") != socket.gethostname()
                or not isinstance(record.get("pid"), int)):
            continue
        if record["pid"] != os.getpid() and pid_alive(record["pid"]):
            continue
        shutil.rmtree(entry, ignore_errors=True)
        removed.append(entry)
    return removed


def replace_folder(staged: str | Path, out: str | Path, kind: str) -> None:
    """Put the finished folder ``staged`` in the place of ``out`` (new or existing) as a tinyglot output of
    ``kind`` that owns every file in it: one atomic swap where the system has it, so that a kill at any
    point leaves the old folder or the new one at ``out``; the old one is then removed.  Both records
    name ``out`` and this process while they swap, so a folder a kill leaves beside ``out`` is removed
    by the next :func:`remove_dead_staging`."""
    staged, out = Path(staged), Path(out)
    apply_umask(staged)  # the staging folder was made 0700: the usual permissions
    files = [n for n in _entries(staged) if n not in (RECORD, LOCK)]
    write_record(staged, kind, files, exclusive=True, target=out.name, **_owner())
    old = read_record(out) if out.exists() else None
    if old is not None:
        atomic_write_json(out / RECORD, {**old, "target": out.name, **_owner()})
    swap_into(staged, out, staged.with_name(staged.name + "-old"))


__all__ = ["RECORD", "STAGING_KIND", "claim_output", "foreign_entries", "legacy_if", "make_folder",
           "read_record", "release_claim", "remove_dead_staging", "replace_folder", "staging_folder", "write_record"]
