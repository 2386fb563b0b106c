"""Teacher embeddings computed once per (teacher, corpus) and kept on disk.

A cache entry is ``<key>.npy`` (float16, memory-mapped on read) plus ``<key>.json`` (teacher
identity, corpus fingerprint, row count, dimension) and ``<key>.keys.npy`` (a 16-byte digest of each
row's sentence); while it is computed, finished chunks wait in ``<key>.chunks/`` so that an
interrupted pass resumes.  The key hashes the teacher identity and the corpus fingerprint, so a new
corpus or teacher gets a new entry; an entry whose metadata does not match, or whose file is empty
or truncated, is an error, never silently reused.

A new entry takes every sentence that an earlier entry of the same teacher already embedded from
that entry (matched by digest), so growing or re-sampling a corpus costs a teacher pass over the new
sentences only.
"""

from __future__ import annotations

import hashlib
import json
import logging
import shutil
from pathlib import Path
from collections.abc import Sequence

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


def sentence_keys(sentences: Sequence[str]) -> np.ndarray:
    """One 16-byte digest per sentence (dtype ``S16``): how rows are matched across cache entries."""
    return np.array([hashlib.blake2b(s.encode("utf-8"), digest_size=16).digest() for s in sentences], dtype="S16")


def _keys_file(npy: Path) -> Path:
    return npy.with_name(npy.name[:-len(".npy")] + ".keys.npy")


def _earlier_rows(cache_dir: Path, identity: str, keys: np.ndarray, skip: Path
                  ) -> tuple[np.ndarray, np.ndarray | None]:
    """``(found, emb)``: which of ``keys`` earlier entries of this teacher hold, and those rows
    (float16, in the order of ``keys[found]``); ``emb`` is None when none is found."""
    found = np.zeros(len(keys), dtype=bool)
    rows = np.zeros((len(keys), 0), dtype=np.float16)
    for meta_path in sorted(cache_dir.glob("*.json")):
        npy = meta_path.with_suffix(".npy")
        if npy == skip or not _keys_file(npy).is_file():
            continue
        try:
            meta = json.loads(meta_path.read_text(encoding="utf-8"))
            if meta.get("teacher") != identity:
                continue
            donor_keys = np.load(_keys_file(npy))
            emb = np.load(npy, mmap_mode="r")
        except (OSError, ValueError):
            continue  # an unreadable earlier entry is only a missed saving
        if donor_keys.dtype != np.dtype("S16") or emb.ndim != 2 or len(emb) != len(donor_keys):
            continue
        if rows.shape[1] == 0:
            rows = np.zeros((len(keys), emb.shape[1]), dtype=np.float16)
        elif emb.shape[1] != rows.shape[1]:
            continue
        order = np.argsort(donor_keys)
        sorted_keys = donor_keys[order]
        pos = np.minimum(np.searchsorted(sorted_keys, keys), len(sorted_keys) - 1)
        hit = ~found & (sorted_keys[pos] == keys)
        rows[hit] = emb[order[pos[hit]]]
        found |= hit
    return found, (rows if found.any() else None)


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


# the first estimate of a teacher pass times this many chunks after the first, spread over the lengths (the
# first few run slower while the runtime's memory warms up: timed over 4, a pass of 66 min on an Intel Xeon said 87);
# a shorter pass times a quarter of itself, so that it still gets its estimate
PROBE_CHUNKS = 8


def spread_order(n: int) -> list[int]:
    """0..n-1 in bit-reversed order (0, n/2, n/4, 3n/4, ...): every prefix samples the range evenly, so the
    pace of a pass's first chunks (sorted shortest to longest) is the pace of the whole."""
    bits = max(1, (n - 1).bit_length())
    return [r for r in (int(format(i, f"0{bits}b")[::-1], 2) for i in range(1 << bits)) if r < n]


def teacher_embeddings(
    teacher, sentences: Sequence[str], cache_dir: str | Path, identity: str | None = None,
    batch_size: int = 64, chunk: int = 2048, progress: bool = True, description: str | None = None,
) -> np.ndarray:
    """Embeddings of ``sentences`` by ``teacher`` (float16 rows), from the cache or computed once.

    The pass runs over the sentences sorted by length in chunks of ``chunk`` sentences; each
    finished chunk is written to ``<key>.chunks/`` at once, so a killed pass loses at most one chunk
    and the next call continues where it stopped.  When every chunk is there they are assembled into
    ``<key>.npy`` (memory-mapped on read) and the chunk folder is removed.  ``description`` names
    the pass on its progress bar (default: "teacher embeddings (NAME)").
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
        emb = load_cached(npy, meta_path, identity, fingerprint, len(sentences))
        if not _keys_file(npy).is_file():  # an entry from before row digests: add them
            _save(_keys_file(npy), sentence_keys(sentences))
        return emb
    # (an .npy without metadata is an interrupted write: it is recomputed, never trusted)
    name = getattr(teacher, "name", type(teacher).__name__)
    keys = sentence_keys(sentences)
    cache_dir.mkdir(parents=True, exist_ok=True)
    found, earlier = _earlier_rows(cache_dir, identity, keys, skip=npy)
    missing = np.flatnonzero(~found)
    if earlier is not None:
        log.info("teacher embeddings: %d of %d sentences from earlier cache entries of %s, %d to compute",
                 len(sentences) - len(missing), len(sentences), identity, len(missing))
        dim = earlier.shape[1]
    else:
        dim = _check_rows(np.asarray(teacher.encode(list(sentences[:1]), batch_size=1)), 1, None, name).shape[1]
    # Sort by length so each teacher batch has similar lengths; rows go back to their place at the end.
    order = missing[np.argsort([len(sentences[int(i)]) for i in missing], kind="stable")]
    starts = range(0, len(order), chunk)
    _start_chunks(parts, order, chunk)
    done = {i for i, start in enumerate(starts)
            if _read_chunk(_chunk_file(parts, i), len(order[start:start + chunk]), dim) is not None}
    if done:
        log.info("teacher embeddings: continuing %s (%d of %d chunks done)", parts, len(done), len(starts))
    # the estimate follows the sentences' characters (and 8 for a sentence's own tokens and padding), not
    # their count; the chunks run in spread_order, so the first few timed ones span short to long
    chars = np.array([len(sentences[int(i)]) + 8 for i in order], dtype=np.float64)
    bar = Progress(len(order), description or f"teacher embeddings ({name})", progress, unit="sentences",
                   cost_total=float(chars.sum()), probe_items=min(PROBE_CHUNKS * chunk, len(order) // 4))
    finished = sum(len(order[starts[i]:starts[i] + chunk]) for i in done)
    cost = sum(float(chars[starts[i]:starts[i] + chunk].sum()) for i in done)
    with bar.run(start=finished, start_cost=cost):
        for i in spread_order(len(starts)):
            if i in done:
                continue
            start = starts[i]
            rows = order[start:start + chunk]
            emb = np.asarray(teacher.encode([sentences[j] for j in rows], batch_size=batch_size), dtype=np.float32)
            _save(_chunk_file(parts, i), _check_rows(emb, len(rows), dim, name).astype(np.float16))
            finished += len(rows)
            cost += float(chars[start:start + chunk].sum())
            bar.update(finished, cost=cost)
    with atomic_path(npy) as tmp:
        out = np.lib.format.open_memmap(tmp, mode="w+", dtype=np.float16, shape=(len(sentences), dim))
        if earlier is not None:
            out[found] = earlier[found]
        for i, start in enumerate(starts):
            out[order[start:start + chunk]] = np.load(_chunk_file(parts, i))
        out.flush()
        del out
    _save(_keys_file(npy), keys)
    atomic_write_json(meta_path, {"teacher": identity, "corpus": fingerprint, "rows": len(sentences), "dim": dim})
    shutil.rmtree(parts, ignore_errors=True)
    return np.load(npy, mmap_mode="r")


def shared_teacher_embeddings(ctx, teacher, sentences: Sequence[str], cache_dir: str | Path, **kwargs) -> np.ndarray:
    """:func:`teacher_embeddings` computed once in a data-parallel run: rank 0 runs the teacher pass
    (or finds the cache), the other processes wait at a barrier and then read the cache it wrote.
    ``ctx`` is a :class:`tinyglot.distributed.DistContext`; in one process this is
    :func:`teacher_embeddings`."""
    if not ctx.enabled:
        return teacher_embeddings(teacher, sentences, cache_dir, **kwargs)
    if ctx.is_main:
        emb = teacher_embeddings(teacher, sentences, cache_dir, **kwargs)
        ctx.barrier()
        return emb
    ctx.barrier()
    return teacher_embeddings(teacher, sentences, cache_dir, **{**kwargs, "progress": False})


def _save(path: Path, array: np.ndarray) -> None:
    with atomic_path(path) as tmp, open(tmp, "wb") as fh:
        np.save(fh, array)


def _start_chunks(parts: Path, order: np.ndarray, chunk: int) -> None:
    """Make the chunk folder of a pass over the rows ``order``; chunks left by a pass over other rows
    (the earlier entries changed in between) are removed, so a chunk is only ever read back by the
    pass that wrote it."""
    plan = hashlib.sha256(order.astype(np.int64).tobytes() + str(chunk).encode()).hexdigest()
    plan_file = parts / "plan.txt"
    if parts.is_dir() and (not plan_file.is_file() or plan_file.read_text().strip() != plan):
        shutil.rmtree(parts)
    parts.mkdir(parents=True, exist_ok=True)
    if not plan_file.is_file():
        plan_file.write_text(plan + "\n")
