"""Length bucketing inside one ``encode`` call: the sub-batches :func:`length_batches` forms, and
real encoders returning the same rows, in the caller's order, as one-by-one calls."""

from __future__ import annotations

import numpy as np
import pytest

import tinyglot
from tinyglot.encoder import PADDING_BUDGET, encode_by_length, length_batches


def _split(lengths, batch_size=32, budget=None) -> list[list[int]]:
    return [b.tolist() for b in length_batches(lengths, batch_size, budget)]


def test_length_batches_cut_where_padding_would_exceed_the_budget():
    # sorted: 3 3 4 | 11 12 | 30  (adding 11 to [3, 3, 4]: 11 x 4 = 44 > 1.3 x 21)
    assert _split([12, 3, 4, 30, 11, 3]) == [[1, 5, 2], [4, 0], [3]]
    assert _split([5] * 10, batch_size=4) == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9]]  # ties: input order
    assert _split([7, 2, 9], batch_size=1) == [[1], [0], [2]]
    assert _split([0, 0, 1]) == [[0, 1, 2]]  # no tokens (a blank string) counts as one
    assert _split([]) == []
    # a fixed-shape model's sequence buckets: one sub-batch per bucket
    assert _split([16, 16, 32, 16, 64, 32]) == [[0, 1, 3], [2, 5], [4]]
    # one row of bucket 32 beside three of 48 is within the budget; budget 1 (the TFLite encoder's) keeps it apart
    assert _split([16, 32, 48, 48, 48]) == [[0], [1, 2, 3, 4]]
    assert _split([16, 32, 48, 48, 48], budget=1.0) == [[0], [1], [2, 3, 4]]
    assert _split([48, 32, 48], batch_size=2, budget=1.0) == [[1], [0, 2]]
    # no budget: the old behaviour, one length-sorted run per batch_size rows
    assert _split([12, 3, 4, 30, 11, 3], budget=float("inf")) == [[1, 5, 2, 4, 0, 3]]
    assert _split([12, 3, 4, 30, 11, 3], batch_size=4, budget=float("inf")) == [[1, 5, 2, 4], [0, 3]]


def test_length_batches_bound_padding_and_cover_every_row_once():
    lengths = np.random.default_rng(0).integers(1, 130, 500).tolist()
    batches = length_batches(lengths, 32)
    assert sorted(i for b in batches for i in b.tolist()) == list(range(500))
    flat = [lengths[i] for b in batches for i in b.tolist()]
    assert flat == sorted(lengths)
    for b in batches:
        sizes = [lengths[i] for i in b.tolist()]
        assert 1 <= len(sizes) <= 32
        assert max(sizes) * len(sizes) <= PADDING_BUDGET * sum(sizes)
    # nearly every one of 500 lengths in 1..129 shares its sub-batch: few runs, not one per row
    assert len(batches) < 40


def test_encode_by_length_returns_float32_rows_in_the_callers_order():
    lengths = [40, 3, 17, 3, 90, 5, 41]
    runs = []

    def run(rows: np.ndarray) -> np.ndarray:
        runs.append(rows.tolist())
        return np.array([[i, lengths[i]] for i in rows], dtype=np.float64)

    out = encode_by_length(lengths, 32, run)
    assert out.dtype == np.float32
    assert out.tolist() == [[i, n] for i, n in enumerate(lengths)]
    assert runs == _split(lengths)


# a mixed-length batch, as a server gets it: one word to long help sentences, several languages
def _mixed(small_pairs, n: int = 32) -> list[str]:
    pool = sorted({s for p in small_pairs for s in (p.x, p.en)}, key=len)
    picks = np.linspace(0, len(pool) - 1, n).round().astype(int)
    batch = [pool[i] for i in picks]
    np.random.default_rng(0).shuffle(batch)
    return batch


def _same_as_one_by_one(enc, sentences: list[str], lengths: list[int]) -> None:
    assert len(length_batches(lengths, 32)) > 2  # the call really is split into several runs
    got = enc.encode(sentences, batch_size=32)
    want = np.concatenate([enc.encode([s]) for s in sentences])
    assert got.dtype == np.float32 and got.shape == want.shape
    np.testing.assert_allclose(got, want, atol=1e-5, rtol=0)
    # and a one-row-per-run call agrees too
    np.testing.assert_allclose(enc.encode(sentences, batch_size=1), want, atol=1e-5, rtol=0)


def test_torch_student_bucketed_rows_equal_one_by_one(student_dir, small_pairs):
    enc = tinyglot.load(student_dir)
    sentences = _mixed(small_pairs)
    _same_as_one_by_one(enc, sentences, [len(x) for x in enc.tokenizer.encode_ids(sentences, enc.max_len)])


@pytest.fixture(scope="module")
def onnx_bundle(student_dir, tmp_path_factory):
    pytest.importorskip("onnxruntime")
    from tinyglot.export.onnx import export_onnx

    return export_onnx(student_dir, tmp_path_factory.mktemp("buckets") / "onnx", "none", max_sentences=20).out


def test_onnx_bundle_bucketed_rows_equal_one_by_one(onnx_bundle, small_pairs):
    enc = tinyglot.load(onnx_bundle)
    sentences = _mixed(small_pairs)
    _same_as_one_by_one(enc, sentences, [len(x) for x in enc.tokenizer.encode_ids(sentences, enc.max_len)])


@pytest.mark.slow  # converts with litert-torch (about 20 s)
def test_tflite_bundle_sub_batches_by_sequence_bucket(student_dir, small_pairs, tmp_path):
    """A fixed-shape model: rows are grouped by their own bucket (one run per bucket and batch
    signature), none runs in a larger bucket than its own, and rows equal one-by-one calls."""
    pytest.importorskip("ai_edge_litert")
    pytest.importorskip("litert_torch")
    from tinyglot.export.tflite import export_tflite

    out = export_tflite(student_dir, tmp_path / "tflite", "none", buckets=(16, 32), batch_sizes=(1, 4),
                        max_sentences=10).out
    enc = tinyglot.load(out)
    sentences = _mixed(small_pairs)
    buckets = [enc.bucket_for(len(x)) for x in enc.tokenizer.encode_ids(sentences, enc.max_len)]
    assert len(set(buckets)) == 3  # 16, 32 and 48 (max_len)
    calls = []
    runner = enc._runner
    enc._runner = lambda name: calls.append(name) or runner(name)
    got = enc.encode(sentences, batch_size=32)
    # bucket 16 then 32 then 48, each in chunks of 4 rows (b4) and the rest (b1 or a padded b4)
    seqs = [int(c.split("_s")[1]) for c in calls]
    assert seqs == sorted(seqs) and set(seqs) == {16, 32, 48}
    assert len(calls) == sum(-(-buckets.count(b) // 4) for b in (16, 32, 48))
    want = np.concatenate([enc.encode([s]) for s in sentences])
    np.testing.assert_allclose(got, want, atol=1e-5, rtol=0)


def test_onnx_text_bundle_sub_batches_by_token_counts(student_dir, small_pairs, tmp_path):
    """A string-in graph pads each run to its longest sentence: the bundle's own SentencePiece model
    sorts the call by tokens (characters mislead across scripts: 8 CJK characters can be more tokens
    than 40 Latin ones), so every run keeps padding within the budget, and rows equal one-by-one calls."""
    pytest.importorskip("onnxruntime_extensions")
    from tinyglot.encoder import PADDING_BUDGET, text_lengths
    from tinyglot.export.onnx_text import export_onnx_text

    out = export_onnx_text(student_dir, tmp_path / "text", "none", max_sentences=5, standalone=False).out
    enc = tinyglot.load(out)
    sentences = _mixed(small_pairs) + [" ", "ファイルを開く", "Öffnen"]
    tokens = {s: len(x) for s, x in zip(sentences, enc.tokenizer.encode_ids(sentences, enc.max_len,
                                                                         allow_empty=True), strict=True)}
    assert text_lengths(sentences, enc.tokenizer, enc.max_len) == [0 if not s.strip() else tokens[s]
                                                                   for s in sentences]
    by_chars = length_batches(text_lengths(sentences), 32)  # what the bundle did before
    assert any(max(tokens[sentences[i]] for i in b) * len(b) > PADDING_BUDGET * sum(tokens[sentences[i]] for i in b)
               for b in by_chars)  # the character order wastes padding on this call
    runs: list[list[str]] = []
    run_texts = enc.run_texts
    enc.run_texts = lambda texts: runs.append(list(texts)) or run_texts(texts)
    got = enc.encode(sentences, batch_size=32)
    assert sorted(s for r in runs for s in r) == sorted(s for s in sentences if s.strip())  # blank: not run
    for r in runs:  # padded size within the budget (a single row is always within it)
        assert len(r) == 1 or max(tokens[s] for s in r) * len(r) <= PADDING_BUDGET * sum(tokens[s] for s in r)
    enc.run_texts = run_texts
    want = np.concatenate([enc.encode([s]) for s in sentences])
    np.testing.assert_allclose(got, want, atol=1e-5, rtol=0)
