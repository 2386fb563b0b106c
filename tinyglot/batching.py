"""Tokenised parallel corpora and a deterministic, resumable, length-bucketed batch plan.

The batch of optimizer step ``s`` is a pure function of (seed, s): resuming at step ``s`` needs
no iterator state, and every process of a data-parallel run derives the same global batch and
takes its own slice of it.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Sequence

import numpy as np

from tinyglot.data import Pair
from tinyglot.data.clean import sampling_probs
from tinyglot.errors import TinyglotError
from tinyglot.tokenizer import Tokenizer


@dataclass
class TokenizedPairs:
    """Token ids of both sides of every pair, grouped by language."""

    langs: list[str]
    x: list[list[np.ndarray]]  # x[lang_index][pair_index] -> int32 ids
    en: list[list[np.ndarray]]
    en_key: list[np.ndarray]  # 64-bit hash of the English side, to keep duplicates out of a batch
    truncated: int = 0
    fingerprint: str = ""

    def count(self, lang_index: int) -> int:
        return len(self.x[lang_index])


def tokenize_pairs(
    grouped: dict[str, list[Pair]], tokenizer: Tokenizer, max_len: int
) -> TokenizedPairs:
    """Tokenise every pair (truncating to ``max_len``); pairs with an empty side are dropped."""
    langs = sorted(grouped)
    h = hashlib.sha256()
    out = TokenizedPairs(langs=langs, x=[], en=[], en_key=[])
    for lang in langs:
        xs, ens, keys = [], [], []
        for pair in grouped[lang]:
            xi, ei = tokenizer.tokenize(pair.x), tokenizer.tokenize(pair.en)
            if not xi or not ei:
                continue
            out.truncated += int(len(xi) > max_len) + int(len(ei) > max_len)
            xs.append(np.asarray(xi[:max_len], dtype=np.int32))
            ens.append(np.asarray(ei[:max_len], dtype=np.int32))
            digest = hashlib.blake2b(pair.en.casefold().encode("utf-8"), digest_size=8).digest()
            keys.append(int.from_bytes(digest, "little") & 0x7FFF_FFFF_FFFF_FFFF)
            h.update(f"{lang}\t{pair.x}\t{pair.en}\n".encode("utf-8"))
        if xs:
            out.x.append(xs)
            out.en.append(ens)
            out.en_key.append(np.asarray(keys, dtype=np.int64))
        else:
            out.langs = [lang_ for lang_ in out.langs if lang_ != lang]
    h.update(f"max_len={max_len};tok={tokenizer.sha256}".encode())
    out.fingerprint = h.hexdigest()
    if not out.langs:
        raise TinyglotError(
            "no pairs left after tokenisation (every sentence was empty)",
            "check the corpus: it must hold non-empty sentence pairs",
        )
    return out


class BatchPlan:
    """Length-bucketed batches drawn with temperature-based language sampling.

    Steps are grouped in chunks of ``chunk`` batches: a chunk draws ``chunk * batch_size`` pairs
    (language by temperature sampling, then a pair uniformly), sorts them by length so each batch
    holds sentences of similar length (little padding), and shuffles the batch order.  Within a
    batch a repeated English sentence (the same English translated into two languages) is dropped,
    since it would be a false in-batch negative.
    """

    def __init__(
        self, data: TokenizedPairs, batch_size: int, temperature: float, seed: int, chunk: int = 50
    ) -> None:
        if batch_size < 2:
            raise TinyglotError(f"batch_size must be at least 2 for in-batch negatives, got {batch_size}")
        self.data = data
        self.batch_size = batch_size
        self.seed = seed
        self.chunk = chunk
        counts = {lang: data.count(i) for i, lang in enumerate(data.langs)}
        probs = sampling_probs(counts, temperature)
        self.probs = np.array([probs[lang] for lang in data.langs], dtype=np.float64)
        self._cache: tuple[int, list[np.ndarray]] | None = None

    def _chunk(self, c: int) -> list[np.ndarray]:
        if self._cache is not None and self._cache[0] == c:
            return self._cache[1]
        rng = np.random.default_rng([self.seed, c])
        n = self.chunk * self.batch_size
        lang = rng.choice(len(self.probs), size=n, p=self.probs)
        counts = np.array([self.data.count(i) for i in range(len(self.probs))])
        idx = np.floor(rng.random(n) * counts[lang]).astype(np.int64)
        length = np.array(
            [max(len(self.data.x[li][pi]), len(self.data.en[li][pi])) for li, pi in zip(lang, idx)]
        )
        order = np.lexsort((rng.random(n), length))
        draws = np.stack([lang[order], idx[order]], axis=1)
        batches = [draws[i : i + self.batch_size] for i in range(0, n, self.batch_size)]
        batches = [batches[i] for i in rng.permutation(len(batches))]
        self._cache = (c, batches)
        return batches

    def batch(self, step: int, world: int = 1) -> np.ndarray:
        """Rows (lang_index, pair_index) of the global batch of ``step``, English duplicates removed.

        The row count is trimmed to a multiple of ``world`` so every process gets the same size.
        """
        rows = self._chunk(step // self.chunk)[step % self.chunk]
        keys = np.array([self.data.en_key[li][pi] for li, pi in rows])
        _, first = np.unique(keys, return_index=True)
        rows = rows[np.sort(first)]
        return rows[: len(rows) - len(rows) % world]

    def tensors(self, rows: np.ndarray, tokenizer: Tokenizer, lang_ids: Sequence[int], max_len: int):
        """Padded (x_ids, x_mask, en_ids, en_mask, x_lang, en_lang) numpy arrays for ``rows``."""
        xb = tokenizer.pad([self.data.x[li][pi] for li, pi in rows], max_len)
        eb = tokenizer.pad([self.data.en[li][pi] for li, pi in rows], max_len)
        x_lang = np.array([lang_ids[li] for li, _ in rows], dtype=np.int64)
        return xb, eb, x_lang
