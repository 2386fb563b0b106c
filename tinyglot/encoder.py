"""The one interface every model in tinyglot answers: sentences in, embeddings out."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

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


def is_blank(sentence: str) -> bool:
    """A sentence without text: empty, or only whitespace.  Every tinyglot encoder embeds it (and any
    sentence its tokenizer turns into no tokens) as the zero vector, as the raw-string bundles' graphs
    do in the stock runtimes: a row that is no nearer to anything than anything else."""
    return not sentence.strip()


def check_sentences(sentences: Sequence[str], strict: bool = False) -> list[str]:
    """The input check of every ``encode``: a non-empty list of strings, without NUL characters or lone
    surrogates, else a clear error.  Blank strings pass (they embed as the zero vector, see
    :func:`is_blank`); ``strict``: a blank string is an error too (call it before ``encode`` to refuse
    them: ``check_sentences(batch, strict=True)``)."""
    if isinstance(sentences, str):
        raise TinyglotError("encode() takes a list of sentences, got one string", "wrap it: [sentence]")
    sentences = list(sentences)
    if not sentences:
        raise TinyglotError("encode() got no sentences", "pass at least one sentence")
    for i, sentence in enumerate(sentences):
        if not isinstance(sentence, str):
            raise TinyglotError(f"sentence #{i} is a {type(sentence).__name__}, not a string", "pass a list of str")
        if strict and not sentence.strip():
            raise TinyglotError(f"sentence #{i} is empty (or only whitespace): {sentence!r}",
                                "drop empty strings before encoding, or encode without strict checks (a blank "
                                "sentence embeds as the zero vector)")
        if "\0" in sentence:
            _refuse_nul(i, sentence)
        if not sentence.isascii():
            _refuse_surrogates(i, sentence)
    return sentences


def _refuse_nul(i: int, sentence: str) -> None:
    # a C runtime (onnxruntime-extensions' tokenizer, MediaPipe) ends a string at NUL: refused in every format
    raise TinyglotError(f"sentence #{i} contains a NUL character (\\x00) at position {sentence.index(chr(0))}: "
                        f"{sentence[:60]!r}", "remove NUL characters before encoding, e.g. s.replace('\\x00', ' ')")


def _refuse_surrogates(i: int, sentence: str) -> None:
    try:
        sentence.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise TinyglotError(f"sentence #{i} is not valid Unicode text: it holds a lone surrogate "
                            f"{sentence[exc.start]!r} at position {exc.start}",
                            "decode the text with errors='replace' (or drop the sentence) before encoding") from None


# A sub-batch may cost at most this many times its real size: padded cells (rows x its longest row)
# <= PADDING_BUDGET x real cells (the sum of its row lengths).  1.3 keeps padding waste under 30 %
# while sentences of near-equal length (the bulk of any sorted call) still share one run.
PADDING_BUDGET = 1.3


def length_batches(lengths: Sequence[int], batch_size: int, budget: float | None = None) -> list[np.ndarray]:
    """Item indices sorted by length (stable: ties keep input order), cut into the sub-batches
    :func:`encode_by_length` runs.  Walking the sorted items, the next one starts a new sub-batch
    when the current one already holds ``batch_size`` items, or when adding it (the new longest
    row, length ``L``) would make the padded size (rows x ``L``) exceed ``budget`` (default
    :data:`PADDING_BUDGET`; ``inf``: cut at ``batch_size`` only) times the real size (the sum of the
    lengths, ``L`` included).  Lengths are whatever a row costs the model: tokens, characters for
    string-fed graphs, or a fixed-shape model's sequence bucket; below 1 counts as 1.

    >>> [b.tolist() for b in length_batches([12, 3, 4, 30, 11, 3], 32)]
    [[1, 5, 2], [4, 0], [3]]
    """
    sizes = [max(1, int(n)) for n in lengths]
    order = np.argsort(np.asarray(sizes, dtype=np.int64), kind="stable")
    step = max(1, int(batch_size))
    limit = PADDING_BUDGET if budget is None else budget
    batches: list[np.ndarray] = []
    start, real = 0, 0
    for pos, item in enumerate(order.tolist()):
        n, size = pos - start, sizes[item]
        if n and (n >= step or size * (n + 1) > limit * (real + size)):
            batches.append(order[start:pos])
            start, real = pos, 0
        real += size
    if start < len(order):
        batches.append(order[start:])
    return batches


def encode_by_length(lengths: Sequence[int], batch_size: int,
                     run: Callable[[np.ndarray], np.ndarray], budget: float | None = None) -> np.ndarray:
    """Run ``run(rows)`` on sub-batches of item indices of similar length (:func:`length_batches`:
    at most ``batch_size`` rows, padding bounded by :data:`PADDING_BUDGET`, so a call of mixed
    lengths costs about what its sentences cost one by one; ``budget`` overrides it) and return the
    float32 outputs in the original order.  Shared by every encoder implementation.

    An item of length 0 (a blank sentence, or one without tokens) is not run: its row is the zero
    vector.  When every item is blank, ``run`` sees the first one once, for the width."""
    if not len(lengths):
        raise TinyglotError("encode() got no sentences", "pass at least one sentence")
    kept = np.asarray([i for i, n in enumerate(lengths) if n > 0], dtype=np.int64)
    out: np.ndarray | None = None
    if len(kept):
        for part in length_batches([lengths[i] for i in kept], batch_size, budget):
            rows = kept[part]
            emb = np.asarray(run(rows), dtype=np.float32)
            if out is None:
                out = np.zeros((len(lengths), emb.shape[1]), dtype=np.float32)
            out[rows] = emb
    else:
        width = np.asarray(run(np.zeros(1, dtype=np.int64)), dtype=np.float32).shape[1]
        out = np.zeros((len(lengths), width), dtype=np.float32)
    assert out is not None
    return out


def encode_texts(sentences: Sequence[str], batch_size: int, run: Callable[[list[str]], np.ndarray]) -> np.ndarray:
    """``encode`` for models fed strings: the input check, then ``run(batch_of_texts)`` on
    length-sorted batches; rows come back in input order as float32 (blank sentences: zero rows)."""
    texts = check_sentences(sentences)
    return encode_by_length(text_lengths(texts), batch_size, lambda rows: run([texts[i] for i in rows]))


def text_lengths(texts: Sequence[str], tokenizer: Any = None, max_len: int = 0) -> list[int]:
    """What a string-fed model's row costs: its tokens (at most ``max_len``) when the graph's own
    SentencePiece model is at hand as a :class:`~tinyglot.tokenizer.Tokenizer`, else its characters (a
    poor measure across scripts: sorted by characters, a batch of Latin and CJK sentences still mixes
    short and long rows); 0 for a blank sentence (a zero row).  Only the batching depends on it: the
    graph tokenises the strings itself."""
    if tokenizer is None:
        return [0 if is_blank(s) else len(s) for s in texts]
    ids = tokenizer.encode_ids(texts, max(1, max_len or 10**9), allow_empty=True)
    return [0 if is_blank(s) else max(1, len(x)) for s, x in zip(texts, ids, strict=True)]


def encode_token_batches(encoder: TokenBatchRunner, sentences: Sequence[str], batch_size: int) -> np.ndarray:
    """``encode`` for models fed token ids (``encoder.run_batch(ids, mask)``): the input check, the
    tokenizer's ids truncated to ``max_len``, length-sorted batches, rows in input order (a sentence
    without tokens: a zero row)."""
    texts = check_sentences(sentences)
    tokenizer = encoder.tokenizer
    ids = tokenizer.encode_ids(texts, encoder.max_len, allow_empty=True)
    return encode_by_length([len(x) for x in ids], batch_size, token_batch_runner(encoder, ids))


def token_batch_runner(encoder: TokenBatchRunner, ids: Sequence[Sequence[int]]) -> Callable[[np.ndarray], np.ndarray]:
    """``run(rows)`` for :func:`encode_by_length`: the rows' ids padded and fed to ``encoder.run_batch``
    (a row without ids, run only for the width when every sentence is blank, gets the unknown piece)."""
    from tinyglot.tokenizer import UNK_ID

    def run(rows: np.ndarray) -> np.ndarray:
        batch = encoder.tokenizer.pad([list(ids[i]) or [UNK_ID] for i in rows], encoder.max_len)
        return encoder.run_batch(batch.ids, batch.mask)

    return run


def l2_normalize(x: np.ndarray, eps: float = 1e-12) -> np.ndarray:
    """Return float32 rows of unit L2 norm (zero rows stay zero)."""
    x = np.asarray(x, dtype=np.float32)
    norms = np.linalg.norm(x, axis=-1, keepdims=True)
    return (x / np.maximum(norms, eps)).astype(np.float32, copy=False)
