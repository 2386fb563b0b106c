"""Teacher embeddings computed once per (teacher, corpus) and kept on disk.

A cache entry is ``<key>.npy`` (float16, memory-mapped on read) plus ``<key>.json`` (teacher
identity, corpus fingerprint, row count, dimension).  The key hashes the teacher identity and the
corpus fingerprint, so a new corpus or teacher gets a new entry; an entry whose metadata does not
match, or whose file is empty or truncated, is an error, never silently reused.
"""

from __future__ import annotations

import hashlib
import json
import logging
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


def teacher_embeddings(
    teacher, sentences: Sequence[str], cache_dir: str | Path, identity: str | None = None,
    batch_size: int = 64, chunk: int = 2048, progress: bool = True,
) -> np.ndarray:
    """Embeddings of ``sentences`` by ``teacher`` (float16 rows), from the cache or computed once."""
    identity = identity or getattr(teacher, "identity", lambda: getattr(teacher, "name", type(teacher).__name__))()
    if not sentences:
        raise TinyglotError("no sentences to embed with the teacher", "check the corpus")
    fingerprint = corpus_fingerprint(sentences)
    key = cache_key(identity, fingerprint)
    cache_dir = Path(cache_dir)
    npy, meta_path = cache_dir / f"{key}.npy", cache_dir / f"{key}.json"
    if meta_path.exists():
        log.info("teacher embeddings from cache %s", npy)
        return load_cached(npy, meta_path, identity, fingerprint, len(sentences))
    # (an .npy without metadata is an interrupted write: it is recomputed, never trusted)
    name = getattr(teacher, "name", type(teacher).__name__)
    first = _check_rows(np.asarray(teacher.encode(list(sentences[:1]), batch_size=1)), 1, None, name)
    dim = first.shape[1]
    # Sort by length so each teacher batch has similar lengths; write rows back in place.
    order = np.argsort([len(s) for s in sentences], kind="stable")
    bar = Progress(len(sentences), f"teacher embeddings ({name})", progress)
    with atomic_path(npy) as tmp:
        out = np.lib.format.open_memmap(tmp, mode="w+", dtype=np.float16, shape=(len(sentences), dim))
        with bar.run():
            for start in range(0, len(order), chunk):
                rows = order[start : start + chunk]
                emb = np.asarray(teacher.encode([sentences[i] for i in rows], batch_size=batch_size), dtype=np.float32)
                out[rows] = _check_rows(emb, len(rows), dim, name).astype(np.float16)
                bar.update(min(start + chunk, len(order)))
        out.flush()
        del out
    atomic_write_json(meta_path, {"teacher": identity, "corpus": fingerprint, "rows": len(sentences), "dim": dim})
    return np.load(npy, mmap_mode="r")
