"""Teacher embeddings computed once per (teacher, corpus) and kept on disk.

A cache entry is ``<key>.npy`` (float16, memory-mapped on read) plus ``<key>.json`` (teacher
identity, corpus fingerprint, row count, dimension); while it is computed, finished chunks wait in
``<key>.chunks/`` so that an interrupted pass resumes.  The key hashes the teacher identity and the
corpus fingerprint, so a new corpus or teacher gets a new entry; an entry whose metadata does not
match, or whose file is empty or truncated, is an error, never silently reused.
"""

from __future__ import annotations

import hashlib
import json
import logging
import shutil
from pathlib import Path
from typing import Sequence

import numpy as np

from tinyglot.errors import TinyglotError
from tinyglot.io import atomic_path, atomic_write_json
from tinyglot.training import Progress

log = logging.getLogger("tinyglot.distill")


def corpus_fingerprint(sentences: Sequence[str]) -> str:
    h = hashlib.sha256()
    for s in sentences:
        h.update(s.encode("utf-8"))
        h.update(b"\n")
    return h.hexdigest()


def cache_key(teacher_identity: str, fingerprint: str) -> str:
    return hashlib.sha256(f"{teacher_identity}\n{fingerprint}".encode()).hexdigest()[:20]


def _check_rows(emb: np.ndarray, n: int, dim: int | None, name: str) -> np.ndarray:
    if emb.ndim != 2 or emb.shape[0] != n:
        raise TinyglotError(f"teacher {name} returned shape {emb.shape} for {n} sentences",
                            "the teacher must return one embedding row per sentence")
    if dim is not None and emb.shape[1] != dim:
        raise TinyglotError(f"teacher {name} output dimension changed between calls: {dim} then {emb.shape[1]}",
                            "use a teacher with a fixed output dimension")
    if not np.isfinite(emb).all():
        raise TinyglotError(f"teacher {name} returned NaN or infinite values")
    return emb


def load_cached(npy: Path, meta_path: Path, identity: str, fingerprint: str, n: int) -> np.ndarray:
    """Open a cache entry read-only after checking that it belongs to this teacher and corpus."""
    try:
        meta = json.loads(meta_path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as exc:
        raise TinyglotError(f"teacher cache metadata {meta_path} is unreadable ({exc})",
                            f"delete {meta_path} and {npy} to recompute") from None
    for key, want in (("teacher", identity), ("corpus", fingerprint), ("rows", n)):
        if meta.get(key) != want:
            raise TinyglotError(f"teacher cache {npy} was made for another {key} "
                                f"({str(meta.get(key))[:40]} != {str(want)[:40]})",
                                f"delete {npy} and {meta_path} (or use another --cache-dir) to recompute")
    if not npy.exists() or npy.stat().st_size == 0:
        raise TinyglotError(f"teacher cache file {npy} is missing or empty",
                            f"delete {meta_path} to recompute the cache")
    try:
        emb = np.load(npy, mmap_mode="r")
    except (ValueError, OSError) as exc:
        raise TinyglotError(f"teacher cache file {npy} is corrupted ({exc})",
                            f"delete {npy} and {meta_path} to recompute") from None
    if emb.shape != (n, meta.get("dim")):
        raise TinyglotError(f"teacher cache file {npy} has shape {emb.shape}, expected ({n}, {meta.get('dim')})",
                            f"delete {npy} and {meta_path} to recompute")
    return emb


def _chunk_file(folder: Path, index: int) -> Path:
    return folder / f"chunk-{index:06d}.npy"


def _read_chunk(path: Path, rows: int, dim: int) -> np.ndarray | None:
    """A finished chunk's rows, or None when it is missing or unreadable (then it is recomputed)."""
    if not path.is_file():
        return None
    try:
        emb = np.load(path)
    except (ValueError, OSError):
        return None
    return emb if emb.shape == (rows, dim) and emb.dtype == np.float16 else None


def teacher_embeddings(
    teacher, sentences: Sequence[str], cache_dir: str | Path, identity: str | None = None,
    batch_size: int = 64, chunk: int = 2048, progress: bool = True,
) -> np.ndarray:
    """Embeddings of ``sentences`` by ``teacher`` (float16 rows), from the cache or computed once.

    The pass runs over the sentences sorted by length in chunks of ``chunk`` sentences; each
    finished chunk is written to ``<key>.chunks/`` at once, so a killed pass loses at most one chunk
    and the next call continues where it stopped.  When every chunk is there they are assembled into
    ``<key>.npy`` (memory-mapped on read) and the chunk folder is removed.
    """
    identity = identity or getattr(teacher, "identity", lambda: getattr(teacher, "name", type(teacher).__name__))()
    if not sentences:
        raise TinyglotError("no sentences to embed with the teacher", "check the corpus")
    if chunk <= 0:
        raise TinyglotError(f"chunk must be positive, got {chunk}")
    fingerprint = corpus_fingerprint(sentences)
    key = cache_key(identity, fingerprint)
    cache_dir = Path(cache_dir)
    npy, meta_path, parts = cache_dir / f"{key}.npy", cache_dir / f"{key}.json", cache_dir / f"{key}.chunks"
    if meta_path.exists():
        log.info("teacher embeddings from cache %s", npy)
        return load_cached(npy, meta_path, identity, fingerprint, len(sentences))
    # (an .npy without metadata is an interrupted write: it is recomputed, never trusted)
    name = getattr(teacher, "name", type(teacher).__name__)
    first = _check_rows(np.asarray(teacher.encode(list(sentences[:1]), batch_size=1)), 1, None, name)
    dim = first.shape[1]
    # Sort by length so each teacher batch has similar lengths; rows go back to their place at the end.
    order = np.argsort([len(s) for s in sentences], kind="stable")
    starts = range(0, len(order), chunk)
    done = {i for i, start in enumerate(starts)
            if _read_chunk(_chunk_file(parts, i), len(order[start:start + chunk]), dim) is not None}
    if done:
        log.info("teacher embeddings: continuing %s (%d of %d chunks done)", parts, len(done), len(starts))
    parts.mkdir(parents=True, exist_ok=True)
    bar = Progress(len(sentences), f"teacher embeddings ({name})", progress)
    finished = sum(len(order[starts[i]:starts[i] + chunk]) for i in done)
    with bar.run(start=finished):
        for i, start in enumerate(starts):
            if i in done:
                continue
            rows = order[start:start + chunk]
            emb = np.asarray(teacher.encode([sentences[j] for j in rows], batch_size=batch_size), dtype=np.float32)
            part = _check_rows(emb, len(rows), dim, name).astype(np.float16)
            with atomic_path(_chunk_file(parts, i)) as tmp, open(tmp, "wb") as fh:
                np.save(fh, part)
            finished += len(rows)
            bar.update(finished)
    with atomic_path(npy) as tmp:
        out = np.lib.format.open_memmap(tmp, mode="w+", dtype=np.float16, shape=(len(sentences), dim))
        for i, start in enumerate(starts):
            rows = order[start:start + chunk]
            out[rows] = np.load(_chunk_file(parts, i))
        out.flush()
        del out
    atomic_write_json(meta_path, {"teacher": identity, "corpus": fingerprint, "rows": len(sentences), "dim": dim})
    shutil.rmtree(parts, ignore_errors=True)
    return np.load(npy, mmap_mode="r")
