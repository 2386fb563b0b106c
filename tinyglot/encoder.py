"""The one interface every model in tinyglot answers: sentences in, embeddings out."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Protocol, runtime_checkable

import numpy as np

from tinyglot.errors import TinyglotError

if TYPE_CHECKING:
    from tinyglot.tokenizer import Tokenizer


@runtime_checkable
class Encoder(Protocol):
    """Anything that turns sentences into L2-normalised float32 rows.

    ``encode(sentences)`` returns an array of shape ``(len(sentences), dim)``, dtype float32,
    each row of unit L2 norm.  Teachers, students, exported bundles and baselines all answer it,
    so evaluation and benchmarks treat them alike.
    """

    def encode(self, sentences: Sequence[str], batch_size: int = 64) -> np.ndarray: ...


class TeacherEncoder(Encoder, Protocol):
    """An encoder that can teach: its output width and a stable ``identity()`` that keys the embedding cache."""

    @property
    def dim(self) -> int: ...

    def identity(self) -> str: ...


class TokenBatchRunner(Protocol):
    """A model fed padded token ids: ``tokenizer`` (encode_ids, pad), ``max_len`` and ``run_batch``."""

    tokenizer: Tokenizer
    max_len: int

    def run_batch(self, ids: np.ndarray, mask: np.ndarray) -> np.ndarray: ...


def check_sentences(sentences: Sequence[str], blank_ok: bool = False) -> list[str]:
    """The input check of every ``encode``: a non-empty list of non-blank strings, else a clear error.
    ``blank_ok``: blank strings pass (a tokenizer inside the graph reports a sentence without tokens)."""
    if isinstance(sentences, str):
        raise TinyglotError("encode() takes a list of sentences, got one string", "wrap it: [sentence]")
    sentences = list(sentences)
    if not sentences:
        raise TinyglotError("encode() got no sentences", "pass at least one sentence")
    for i, sentence in enumerate(sentences):
        if not isinstance(sentence, str):
            raise TinyglotError(f"sentence #{i} is a {type(sentence).__name__}, not a string", "pass a list of str")
        if not blank_ok and not sentence.strip():
            raise TinyglotError(f"sentence #{i} is empty (or only whitespace): {sentence!r}",
                                "drop empty strings before encoding")
    return sentences


def encode_by_length(lengths: Sequence[int], batch_size: int,
                     run: Callable[[np.ndarray], np.ndarray]) -> np.ndarray:
    """Run ``run(rows)`` on batches of item indices sorted by length (little padding) and return
    the float32 outputs in the original order.  Shared by every encoder implementation."""
    order = np.argsort(np.asarray(lengths), kind="stable")
    out: np.ndarray | None = None
    step = max(1, int(batch_size))
    for start in range(0, len(order), step):
        rows = order[start:start + step]
        emb = np.asarray(run(rows), dtype=np.float32)
        if out is None:
            out = np.zeros((len(order), emb.shape[1]), dtype=np.float32)
        out[rows] = emb
    if out is None:
        raise TinyglotError("encode() got no sentences", "pass at least one sentence")
    return out


def encode_texts(sentences: Sequence[str], batch_size: int, run: Callable[[list[str]], np.ndarray]) -> np.ndarray:
    """``encode`` for models fed strings: the input check, then ``run(batch_of_texts)`` on
    length-sorted batches; rows come back in input order as float32."""
    texts = check_sentences(sentences)
    return encode_by_length([len(s) for s in texts], batch_size, lambda rows: run([texts[i] for i in rows]))


def encode_token_batches(encoder: TokenBatchRunner, sentences: Sequence[str], batch_size: int) -> np.ndarray:
    """``encode`` for models fed token ids (``encoder.run_batch(ids, mask)``): the input check, the
    tokenizer's ids truncated to ``max_len``, length-sorted batches, rows in input order."""
    texts = check_sentences(sentences)
    tokenizer = encoder.tokenizer
    ids = tokenizer.encode_ids(texts, encoder.max_len)

    def run(rows: np.ndarray) -> np.ndarray:
        batch = tokenizer.pad([ids[i] for i in rows], encoder.max_len)
        return encoder.run_batch(batch.ids, batch.mask)

    return encode_by_length([len(x) for x in ids], batch_size, run)


def l2_normalize(x: np.ndarray, eps: float = 1e-12) -> np.ndarray:
    """Return float32 rows of unit L2 norm (zero rows stay zero)."""
    x = np.asarray(x, dtype=np.float32)
    norms = np.linalg.norm(x, axis=-1, keepdims=True)
    return (x / np.maximum(norms, eps)).astype(np.float32, copy=False)
