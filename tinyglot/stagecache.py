"""Stage markers: skip a pipeline stage whose inputs did not change and whose outputs are intact.

A stage that finishes writes ``<stages>/<name>.json`` atomically::

    {"stage": "distill", "input_hash": "...", "inputs": {...}, "outputs": {"distill/student/config.json":
     {"sha256": "...", "bytes": 1234}, ...}, "output_hash": "...", "seconds": 12.3, "finished": "...",
     "info": {...}}

``input_hash`` hashes the stage's inputs (its config section and the ``output_hash`` of the stages
it reads); ``output_hash`` hashes the names, sizes and sha256 of the files it wrote.  A stage is
reused only if its marker exists, the input hash matches and every output file still has the
recorded size and sha256; anything else (no marker, changed inputs, a missing, altered or
truncated file, an unreadable marker) reruns it.  Because downstream inputs contain upstream
output hashes, a rerun that produces different files reruns everything after it.

``<stages>/<name>.started.json`` is written when a stage starts: a training stage whose marker is
missing resumes its own ``last.pt`` only when the interrupted attempt had the same input hash, and
otherwise starts from an empty folder.
"""

from __future__ import annotations

import datetime as _dt
import functools
import hashlib
import json
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from collections.abc import Iterable

from tinyglot.integrity import DigestCache, content_fingerprint
from tinyglot.integrity import sha256_file as _sha256_file
from tinyglot.io import atomic_folder, atomic_path, atomic_write_json, read_json_object
import contextlib


def sha256_file(path: str | Path) -> str:
    """sha256 of a file (cached per file version: see :mod:`tinyglot.integrity`)."""
    return _sha256_file(path)


def hash_json(obj: Any) -> str:
    """sha256 of a JSON-able object in canonical form (sorted keys, no whitespace)."""
    text = json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def files_under(folder: str | Path) -> list[Path]:
    """Every regular file below ``folder``, sorted, except hidden ones (temporary files, ``.old``)."""
    folder = Path(folder)
    return sorted(p for p in folder.rglob("*")
                  if p.is_file() and not any(part.startswith(".") for part in p.relative_to(folder).parts))


def _key(path: Path, root: Path) -> str:
    """A file's name in a marker: relative to the run folder when inside it, else absolute."""
    path = path.resolve()
    try:
        return path.relative_to(root.resolve()).as_posix()
    except ValueError:
        return str(path)


def describe_files(paths: Iterable[str | Path], root: str | Path) -> dict[str, dict[str, Any]]:
    """``{name: {"sha256", "bytes"}}`` of ``paths`` (folders are expanded to their files)."""
    root = Path(root)
    out: dict[str, dict[str, Any]] = {}
    for p in paths:
        p = Path(p)
        for f in (files_under(p) if p.is_dir() else [p]):
            out[_key(f, root)] = {"sha256": sha256_file(f), "bytes": f.stat().st_size}
    return dict(sorted(out.items()))


def resolve_key(name: str, root: str | Path) -> Path:
    path = Path(name)
    return path if path.is_absolute() else Path(root) / path


def outputs_intact(outputs: dict[str, dict[str, Any]], root: str | Path) -> str | None:
    """None if every recorded file still has its size and sha256, else why not (the first problem)."""
    for name, want in outputs.items():
        path = resolve_key(name, root)
        if not path.is_file():
            return f"{name} is missing"
        if path.stat().st_size != want.get("bytes"):
            return f"{name} changed size"
        if sha256_file(path) != want.get("sha256"):
            return f"{name} changed"
    return None


@dataclass
class Marker:
    """What a finished stage left in ``<stages>/<name>.json``."""

    stage: str
    input_hash: str
    outputs: dict[str, dict[str, Any]]
    seconds: float
    finished: str
    inputs: dict[str, Any] = field(default_factory=dict)
    info: dict[str, Any] = field(default_factory=dict)

    @property
    def output_hash(self) -> str:
        return hash_json(self.outputs)

    def to_dict(self) -> dict[str, Any]:
        return {"stage": self.stage, "input_hash": self.input_hash, "output_hash": self.output_hash,
                "seconds": self.seconds, "finished": self.finished, "inputs": self.inputs,
                "outputs": self.outputs, "info": self.info}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Marker:
        return cls(str(data["stage"]), str(data["input_hash"]), dict(data["outputs"]), float(data["seconds"]),
                   str(data["finished"]), dict(data.get("inputs") or {}), dict(data.get("info") or {}))


class StageStore:
    """The markers of one run folder (``root``), kept in ``root/stages``."""

    def __init__(self, root: str | Path) -> None:
        self.root = Path(root)
        self.folder = self.root / "stages"
        self.digests = DigestCache(self.folder / ".digests.json")

    def fingerprint(self, path: str | Path) -> dict[str, str]:
        """Content hashes of a stage input (a corpus file or folder), hashed once per file version
        across runs (the digests are kept in ``stages/.digests.json``)."""
        result = content_fingerprint(path, self.digests)
        self.digests.save()
        return result

    def marker_path(self, stage: str) -> Path:
        return self.folder / f"{stage}.json"

    def started_path(self, stage: str) -> Path:
        return self.folder / f"{stage}.started.json"

    def read(self, stage: str) -> Marker | None:
        """The stage's marker, or None if there is none or it cannot be read."""
        try:
            return Marker.from_dict(json.loads(self.marker_path(stage).read_text(encoding="utf-8")))
        except (OSError, ValueError, KeyError, TypeError):
            return None

    def check(self, stage: str, input_hash: str) -> tuple[Marker | None, str]:
        """``(marker, "")`` if the stage can be reused, else ``(None, why it reruns)``."""
        marker = self.read(stage)
        if marker is None:
            return None, "not done yet" if not self.marker_path(stage).exists() else "its marker is unreadable"
        if marker.input_hash != input_hash:
            return None, "its inputs changed"
        problem = outputs_intact(marker.outputs, self.root)
        if problem:
            return None, f"an output changed ({problem})"
        return marker, ""

    def start(self, stage: str, input_hash: str) -> bool:
        """Record that ``stage`` starts with ``input_hash``; True if an interrupted attempt had the same
        inputs (its partial work, e.g. ``last.pt``, may be resumed)."""
        same = False
        with contextlib.suppress(OSError, ValueError, AttributeError):
            same = json.loads(self.started_path(stage).read_text(encoding="utf-8")).get("input_hash") == input_hash
        self.marker_path(stage).unlink(missing_ok=True)
        atomic_write_json(self.started_path(stage), {"stage": stage, "input_hash": input_hash, "started": now()})
        return same

    def finish(self, stage: str, input_hash: str, outputs: Iterable[str | Path], seconds: float,
               inputs: dict[str, Any] | None = None, info: dict[str, Any] | None = None) -> Marker:
        marker = Marker(stage, input_hash, describe_files(outputs, self.root), round(seconds, 2), now(),
                        inputs or {}, info or {})
        atomic_write_json(self.marker_path(stage), marker.to_dict())
        return marker


def now() -> str:
    return _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds")




# ------------------------------------------------------------------ the home's cache of finished stages
# A stage's result depends on its inputs (hashed as above) and on the code that made it: the cache keys
# both, so a run in a new folder reuses a student trained before with the same settings, data and teacher,
# and an upgraded (or edited) tinyglot trains it again.
STAGE_CACHE = "stage-cache"
STAGE_CACHE_MAX_BYTES = 64 * 2**20  # a result above this is not kept (the e5 profile's student is 0.3 GB)
CODE_PACKAGES = ("tinyglot", "tinyglot.app", "tinyglot.teacher", "tinyglot.distill", "tinyglot.export",
                 "tinyglot.devices")


@functools.cache
def code_fingerprint() -> str:
    """sha256 over the names and contents of the installed tinyglot's Python files (every stage's code)."""
    import importlib.util

    digest = hashlib.sha256()
    for name in CODE_PACKAGES:
        spec = importlib.util.find_spec(name)
        for folder in sorted(spec.submodule_search_locations or []) if spec else []:
            for path in sorted(Path(folder).rglob("*.py")):
                digest.update(path.relative_to(folder).as_posix().encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()


class HomeStageCache:
    """Finished stages' files under ``root`` (``$TINYGLOT_HOME/stage-cache``), one folder per stage and key:
    ``files/`` (the outputs, by their names in the run folder) and ``marker.json`` (their sizes and sha256)."""

    def __init__(self, root: str | Path) -> None:
        self.root = Path(root)

    def folder(self, stage: str, input_hash: str) -> Path:
        return self.root / f"{stage}-{hash_json({'input': input_hash, 'code': code_fingerprint()})[:24]}"

    def entry(self, stage: str, input_hash: str) -> dict[str, Any] | None:
        """The entry's marker when every file it lists is intact, else None."""
        folder = self.folder(stage, input_hash)
        entry = read_json_object(folder / "marker.json")
        if entry is None or not isinstance(entry.get("outputs"), dict) or outputs_intact(entry["outputs"],
                                                                                          folder / "files"):
            return None
        return entry

    def restore(self, stage: str, input_hash: str, run_root: str | Path) -> list[Path] | None:
        """Copy the cached outputs of ``stage`` into ``run_root`` and return their paths; None (and nothing
        copied) when there is no intact entry."""
        folder, entry = self.folder(stage, input_hash), self.entry(stage, input_hash)
        if entry is None:
            return None
        run_root = Path(run_root)
        paths = []
        for name in entry["outputs"]:
            target = run_root / name
            with atomic_path(target) as tmp:
                shutil.copyfile(folder / "files" / name, tmp)
            paths.append(target)
        return paths

    def store(self, stage: str, input_hash: str, marker: Marker, run_root: str | Path) -> Path | None:
        """Keep ``marker``'s outputs (all inside ``run_root``, at most :data:`STAGE_CACHE_MAX_BYTES`); the
        entry's folder, or None when they are not kept."""
        outputs = marker.outputs
        if (not outputs or any(Path(name).is_absolute() for name in outputs)
                or sum(int(o.get("bytes", 0)) for o in outputs.values()) > STAGE_CACHE_MAX_BYTES):
            return None
        folder = self.folder(stage, input_hash)
        with atomic_folder(folder) as tmp:
            for name in outputs:
                (tmp / "files" / name).parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(Path(run_root) / name, tmp / "files" / name)
            if outputs_intact(outputs, tmp / "files"):  # changed while copied: keep nothing
                raise OSError(f"the outputs of {stage} changed while they were copied into the cache")
            (tmp / "marker.json").write_text(json.dumps({"stage": stage, "input_hash": input_hash,
                                                         "outputs": outputs}, indent=1), encoding="utf-8")
        return folder


__all__ = ["STAGE_CACHE", "HomeStageCache", "Marker", "StageStore", "code_fingerprint", "describe_files",
           "files_under", "hash_json", "outputs_intact", "sha256_file"]
