"""Teacher-embedding cache: computed once, keyed by teacher and corpus, never silently stale."""

from __future__ import annotations

import json

import numpy as np
import pytest

from tinyglot.distill.cache import teacher_embeddings
from tinyglot.errors import TinyglotError


class CountingTeacher:
    """A real (deterministic) encoder: character-code histograms, counting its calls."""

    name = "counting"

    def __init__(self, dim=16, grow=False):
        self.dim, self.grow, self.calls = dim, grow, 0

    def identity(self):
        return f"counting-{self.dim}"

    def encode(self, sentences, batch_size=64):
        self.calls += 1
        dim = self.dim + (self.calls if self.grow else 0)
        out = np.zeros((len(sentences), dim), dtype=np.float32)
        for i, s in enumerate(sentences):
            for ch in s:
                out[i, ord(ch) % dim] += 1
        return out / np.maximum(np.linalg.norm(out, axis=1, keepdims=True), 1e-9)


SENTS = ["open the file", "Datei öffnen", "save as", "ファイルを保存"]


def test_computed_once_then_read_from_disk(tmp_path):
    t = CountingTeacher()
    first = teacher_embeddings(t, SENTS, tmp_path, chunk=2, progress=False)
    calls = t.calls
    again = teacher_embeddings(t, SENTS, tmp_path, progress=False)
    assert t.calls == calls  # no teacher call the second time
    assert again.dtype == np.float16 and again.shape == (4, 16)
    assert np.array_equal(np.asarray(first), np.asarray(again))
    assert np.allclose(np.asarray(again, dtype=np.float32), t.encode(SENTS), atol=1e-3)
    assert len(list(tmp_path.glob("*.npy"))) == 1


def test_other_corpus_or_teacher_gets_a_new_entry(tmp_path):
    teacher_embeddings(CountingTeacher(), SENTS, tmp_path, progress=False)
    teacher_embeddings(CountingTeacher(), SENTS[:3], tmp_path, progress=False)
    teacher_embeddings(CountingTeacher(dim=8), SENTS, tmp_path, progress=False)
    assert len(list(tmp_path.glob("*.npy"))) == 3


def test_tampered_empty_or_truncated_cache_is_an_error(tmp_path):
    t = CountingTeacher()
    teacher_embeddings(t, SENTS, tmp_path, progress=False)
    meta = next(tmp_path.glob("*.json"))
    npy = meta.with_suffix(".npy")
    data = json.loads(meta.read_text())
    meta.write_text(json.dumps({**data, "corpus": "0" * 64}))
    with pytest.raises(TinyglotError, match="another corpus"):
        teacher_embeddings(t, SENTS, tmp_path, progress=False)
    meta.write_text(json.dumps(data))
    npy.write_bytes(b"")
    with pytest.raises(TinyglotError, match="missing or empty"):
        teacher_embeddings(t, SENTS, tmp_path, progress=False)
    npy.write_bytes(b"\x93NUMPY garbage")
    with pytest.raises(TinyglotError, match="corrupted"):
        teacher_embeddings(t, SENTS, tmp_path, progress=False)


def test_interrupted_write_is_recomputed(tmp_path):
    t = CountingTeacher()
    teacher_embeddings(t, SENTS, tmp_path, progress=False)
    next(tmp_path.glob("*.json")).unlink()  # as if killed between the data and the metadata
    teacher_embeddings(t, SENTS, tmp_path, progress=False)
    assert len(list(tmp_path.glob("*.json"))) == 1


def test_teacher_whose_dimension_changes_is_refused(tmp_path):
    with pytest.raises(TinyglotError, match="dimension changed between calls"):
        teacher_embeddings(CountingTeacher(grow=True), SENTS, tmp_path, chunk=2, progress=False)
    assert not list(tmp_path.glob("*.npy")) and not list(tmp_path.glob("*.tmp"))
