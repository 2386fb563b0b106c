"""The tokenised corpus, cached: tokenised once, then memory-mapped.

A cache entry is a folder ``<key>/`` holding flat numpy arrays (token ids of each side and their
offsets, the pair each row came from, the English-side hash) and ``meta.json``.  The key hashes the
tokenizer's sha256, the corpus fingerprint (every pair's text, per language) and ``max_len``, so a
new tokenizer or a changed corpus gets a new entry.  An entry is written into a temporary folder and
renamed (a kill never leaves half an entry); one whose metadata or arrays do not match is never
used: it is tokenised again and replaced.

The arrays are opened with ``mmap_mode="r"``: the rows of :class:`~tinyglot.batching.TokenizedPairs`
are views into them, so a large corpus costs page cache, not process memory, and the processes of
a data-parallel run share one copy.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
from pathlib import Path
from typing import Any

import numpy as np

from tinyglot.batching import TokenizedPairs, tokenize_pairs
from tinyglot.data import Pair
from tinyglot.io import atomic_folder, atomic_write_json
from tinyglot.tokenizer import Tokenizer

log = logging.getLogger("tinyglot.data")
VERSION = 1
ARRAYS = ("x_ids", "x_offsets", "en_ids", "en_offsets", "lang", "source", "en_key")


def corpus_fingerprint(grouped: dict[str, list[Pair]]) -> str:
    """sha256 of every pair's text, language by language (the order of the pairs counts)."""
    h = hashlib.sha256()
    for lang in sorted(grouped):
        for pair in grouped[lang]:
            h.update(f"{lang}\t{pair.x}\t{pair.en}\n".encode())
    return h.hexdigest()


def cache_key(tokenizer_sha256: str, fingerprint: str, max_len: int) -> str:
    return hashlib.sha256(f"v{VERSION}\n{tokenizer_sha256}\n{fingerprint}\n{max_len}".encode()).hexdigest()[:24]


def default_cache_dir() -> Path:
    home = os.environ.get("TINYGLOT_HOME", str(Path.home() / ".cache" / "tinyglot"))
    return Path(home).expanduser() / "token-cache"


def _flat(rows: list[list[np.ndarray]]) -> tuple[np.ndarray, np.ndarray]:
    seqs = [seq for lang in rows for seq in lang]
    lengths = np.fromiter((len(s) for s in seqs), dtype=np.int64, count=len(seqs))
    offsets = np.zeros(len(seqs) + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    ids = np.concatenate(seqs).astype(np.int32) if seqs else np.zeros(0, dtype=np.int32)
    return ids, offsets


def save_tokenized(folder: Path, data: TokenizedPairs, grouped: dict[str, list[Pair]], meta: dict[str, Any]) -> None:
    """Write ``data`` (tokenised from ``grouped``) as cache entry ``folder``, atomically."""
    x_ids, x_offsets = _flat(data.x)
    en_ids, en_offsets = _flat(data.en)
    lang = np.concatenate([np.full(data.count(i), i, dtype=np.int32) for i in range(len(data.langs))])
    # the index in grouped[lang] of each kept pair (tokenize_pairs drops pairs with an empty side)
    source = []
    for li, name in enumerate(data.langs):
        where = {id(p): i for i, p in enumerate(grouped[name])}
        source.append(np.array([where[id(p)] for p in data.pairs[li]], dtype=np.int64))
    arrays = {"x_ids": x_ids, "x_offsets": x_offsets, "en_ids": en_ids, "en_offsets": en_offsets, "lang": lang,
              "source": np.concatenate(source), "en_key": np.concatenate(data.en_key)}
    with atomic_folder(folder) as tmp:
        for name, array in arrays.items():
            np.save(tmp / f"{name}.npy", array)
        atomic_write_json(tmp / "meta.json", {**meta, "langs": data.langs, "truncated": data.truncated,
                                              "fingerprint": data.fingerprint, "pairs": len(lang)})


def _rows(ids: np.ndarray, offsets: np.ndarray, lo: int, hi: int) -> list[np.ndarray]:
    """Rows ``lo``..``hi`` of a flat id array as views (one ``np.split``, no copy)."""
    if hi <= lo:
        return []
    start = int(offsets[lo])
    return np.split(ids[start:int(offsets[hi])], offsets[lo + 1:hi] - start)


def load_tokenized(folder: Path, grouped: dict[str, list[Pair]], meta: dict[str, Any]) -> TokenizedPairs | None:
    """Cache entry ``folder`` as :class:`TokenizedPairs` (rows are views into memory-mapped arrays),
    or None when it is missing, unreadable or made for other inputs (``meta``)."""
    try:
        have = json.loads((folder / "meta.json").read_text(encoding="utf-8"))
        arrays = {name: np.load(folder / f"{name}.npy", mmap_mode="r") for name in ARRAYS}
    except (OSError, ValueError):
        return None
    if not isinstance(have, dict) or any(have.get(k) != v for k, v in meta.items()):
        log.warning("token cache %s was made for other inputs: tokenising again", folder)
        return None
    n, langs = int(have.get("pairs", -1)), have.get("langs")
    if not isinstance(langs, list):
        log.warning("token cache %s is damaged: tokenising again", folder)
        return None
    ok = (set(langs) <= set(grouped)
          and all(len(arrays[k]) == n for k in ("lang", "source", "en_key"))
          and all(len(arrays[k]) == n + 1 for k in ("x_offsets", "en_offsets"))
          and n > 0 and int(arrays["x_offsets"][-1]) == len(arrays["x_ids"])
          and int(arrays["en_offsets"][-1]) == len(arrays["en_ids"]))
    if not ok:
        log.warning("token cache %s is damaged: tokenising again", folder)
        return None
    lang, source = np.asarray(arrays["lang"]), np.asarray(arrays["source"])
    x_off, en_off = np.asarray(arrays["x_offsets"]), np.asarray(arrays["en_offsets"])
    # plain (read-only) ndarray views of the maps: slicing a np.memmap runs Python code per row
    x_ids, en_ids = np.asarray(arrays["x_ids"]), np.asarray(arrays["en_ids"])
    out = TokenizedPairs(langs=list(langs), x=[], en=[], en_key=[], pairs=[], truncated=int(have["truncated"]),
                         fingerprint=str(have["fingerprint"]))
    bounds = np.searchsorted(lang, np.arange(len(langs) + 1))
    for li, name in enumerate(langs):
        lo, hi = int(bounds[li]), int(bounds[li + 1])
        src = source[lo:hi]
        if len(src) and int(src.max()) >= len(grouped[name]):
            return None
        out.x.append(_rows(x_ids, x_off, lo, hi))
        out.en.append(_rows(en_ids, en_off, lo, hi))
        out.en_key.append(np.asarray(arrays["en_key"][lo:hi]))
        out.pairs.append([grouped[name][int(i)] for i in src])
    return out


def cached_tokenize_pairs(grouped: dict[str, list[Pair]], tokenizer: Tokenizer, max_len: int,
                          cache_dir: str | Path, write: bool = True) -> TokenizedPairs:
    """:func:`~tinyglot.batching.tokenize_pairs` through the cache in ``cache_dir``: the entry of
    (tokenizer, corpus, max_len) when it is there and sound, else tokenised (and, with ``write``,
    stored)."""
    fingerprint = corpus_fingerprint(grouped)
    meta = {"version": VERSION, "tokenizer": tokenizer.sha256, "corpus": fingerprint, "max_len": int(max_len)}
    folder = Path(cache_dir) / cache_key(tokenizer.sha256, fingerprint, max_len)
    data = load_tokenized(folder, grouped, meta) if folder.is_dir() else None
    if data is not None:
        log.info("tokenised corpus from cache %s", folder)
        return data
    data = tokenize_pairs(grouped, tokenizer, max_len)
    if write:
        save_tokenized(folder, data, grouped, meta)
        reread = load_tokenized(folder, grouped, meta)
        if reread is not None:
            return reread
    return data


def tokenized_corpus(grouped: dict[str, list[Pair]], tokenizer: Tokenizer, max_len: int, settings, device,
                     ctx) -> TokenizedPairs:
    """The training corpus of a recipe: tokenised in memory as before, or through the cache when
    ``settings.token_cache`` asks for it (``auto``: on CUDA).  Under torchrun rank 0 tokenises and
    writes the entry, the others wait and read it."""
    if not settings.wants_token_cache(device.type):
        return tokenize_pairs(grouped, tokenizer, max_len)
    cache_dir = Path(settings.token_cache_dir).expanduser() if settings.token_cache_dir else default_cache_dir()
    if ctx.is_main:
        data = cached_tokenize_pairs(grouped, tokenizer, max_len, cache_dir)
        ctx.barrier()
        return data
    ctx.barrier()
    return cached_tokenize_pairs(grouped, tokenizer, max_len, cache_dir, write=False)
