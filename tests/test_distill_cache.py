"""Teacher-embedding cache: computed once, keyed by teacher and corpus, never silently stale."""

from __future__ import annotations

import json

import numpy as np
import pytest

from tinyglot.distill.cache import spread_order, teacher_embeddings
from tinyglot.errors import TinyglotError


class CountingTeacher:
    """A real (deterministic) encoder: character-code histograms, counting its calls."""

    name = "counting"

    def __init__(self, dim=16, grow=False):
        self.dim, self.grow, self.calls, self.seen = dim, grow, 0, []

    def identity(self):
        return f"counting-{self.dim}"

    def encode(self, sentences, batch_size=64):
        self.calls += 1
        self.seen += list(sentences)
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
    assert len(list(tmp_path.glob("*.json"))) == 1


def test_other_corpus_or_teacher_gets_a_new_entry(tmp_path):
    teacher_embeddings(CountingTeacher(), SENTS, tmp_path, progress=False)
    teacher_embeddings(CountingTeacher(), SENTS[:3], tmp_path, progress=False)
    other = CountingTeacher(dim=8)
    teacher_embeddings(other, SENTS, tmp_path, progress=False)
    assert len(list(tmp_path.glob("*.json"))) == 3
    assert set(other.seen) == set(SENTS)  # another teacher's rows are never borrowed


def _direct(sents):
    return CountingTeacher().encode(sents).astype(np.float16)


def test_a_grown_corpus_embeds_only_its_new_sentences(tmp_path):
    sents = [f"sentence {i} " + "y" * (i % 5) for i in range(60)]
    teacher_embeddings(CountingTeacher(), sents[:30], tmp_path, chunk=8, progress=False)
    grown = sents[50:] + sents[5:40][::-1]  # 10 + 10 new sentences, 25 known ones, another order
    t = CountingTeacher()
    emb = teacher_embeddings(t, grown, tmp_path, chunk=8, progress=False)
    assert sorted(t.seen) == sorted(sents[30:40] + sents[50:])
    assert np.array_equal(np.asarray(emb), _direct(grown))
    # every sentence known now: the teacher is not called at all
    t = CountingTeacher()
    known = sents[52:] + sents[:40:3]
    emb = teacher_embeddings(t, known, tmp_path, progress=False)
    assert t.calls == 0 and np.array_equal(np.asarray(emb), _direct(known))


def test_an_entry_from_before_row_digests_gets_them_on_its_next_use(tmp_path):
    teacher_embeddings(CountingTeacher(), SENTS, tmp_path, progress=False)
    (keys,) = tmp_path.glob("*.keys.npy")
    keys.unlink()
    t = CountingTeacher()
    teacher_embeddings(t, SENTS[1:], tmp_path, progress=False)
    assert sorted(t.seen[1:]) == sorted(SENTS[1:])  # without digests nothing could be borrowed
    teacher_embeddings(CountingTeacher(), SENTS, tmp_path, progress=False)  # a hit: digests written
    assert keys.is_file()
    t = CountingTeacher()
    teacher_embeddings(t, SENTS[:2] + ["new one"], tmp_path, progress=False)
    assert t.seen == ["new one"]


def test_chunks_of_a_pass_over_other_rows_are_not_read_back(tmp_path):
    sents = [f"s{i}" for i in range(24)]
    with pytest.raises(KeyboardInterrupt):  # chunks 0 and 1 of a pass over all 24 are left behind
        teacher_embeddings(InterruptedTeacher(stop_at=4), sents, tmp_path, chunk=8, progress=False)
    teacher_embeddings(CountingTeacher(), sents[::2], tmp_path, chunk=8, progress=False)  # half known now
    t = CountingTeacher()
    emb = teacher_embeddings(t, sents, tmp_path, chunk=8, progress=False)
    assert sorted(t.seen) == sorted(sents[1::2])  # the 12 unknown ones, not the stale chunks
    assert np.array_equal(np.asarray(emb), _direct(sents))


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


class InterruptedTeacher(CountingTeacher):
    """Stops (as a Ctrl-C would) on its ``stop_at``-th call."""

    def __init__(self, stop_at):
        super().__init__()
        self.stop_at = stop_at

    def encode(self, sentences, batch_size=64):
        if self.calls + 1 == self.stop_at:
            self.calls += 1
            raise KeyboardInterrupt
        return super().encode(sentences, batch_size)


def test_spread_order_visits_every_chunk_with_each_prefix_spanning_the_range():
    assert spread_order(1) == [0] and spread_order(7) == [0, 4, 2, 6, 1, 5, 3]
    for n in (4, 10, 433):
        order = spread_order(n)
        assert sorted(order) == list(range(n))
        assert {i * 4 // n for i in order[:8]} == {0, 1, 2, 3}  # the first eight span all four quarters


class ClockedTeacher(CountingTeacher):
    """Takes (on the test's clock) a fixed time per sentence plus a little per character, as a real encoder
    does: short sentences cost more per character than the pass's cost model (characters + 8) says."""

    def __init__(self, clock):
        super().__init__()
        self.clock = clock

    def encode(self, sentences, batch_size=64):
        self.clock[0] += sum(0.1 + 0.002 * len(s) for s in sentences)
        return super().encode(sentences, batch_size)


def test_the_first_estimate_of_a_pass_is_near_its_real_duration(tmp_path, clock, capsys):
    # the chunks run spread over the lengths, so the estimate timed on the first few holds for the whole;
    # timed on the shortest chunks first (sorted order) this pass's estimate came out 1.3 times too long
    rng = np.random.default_rng(0)
    sents = [f"{i} " + "word " * int(rng.integers(1, 80)) for i in range(400)]
    teacher = ClockedTeacher(clock)
    teacher_embeddings(teacher, sents, tmp_path, chunk=20, progress=True, description="pass")
    took = clock[0] - (0.1 + 0.002 * len(sents[0]))  # less the dimension probe, before the bar
    (line,) = [x for x in capsys.readouterr().out.splitlines() if x.startswith("pass: expected ")]
    minutes, seconds = line.removeprefix("pass: expected ").split()[0].split(":")
    assert abs(60 * int(minutes) + int(seconds) - took) < 0.1 * took, (line, took)


def test_a_pass_of_a_few_chunks_still_prints_its_estimate(tmp_path, clock, capsys):
    # 5 chunks: fewer than the 8 a long pass times first, so it times a quarter of itself
    sents = [f"{i} " + "word " * (1 + i % 40) for i in range(100)]
    teacher_embeddings(ClockedTeacher(clock), sents, tmp_path, chunk=20, progress=True, description="pass")
    assert [x for x in capsys.readouterr().out.splitlines() if x.startswith("pass: expected ")]


def test_interrupted_pass_resumes_from_its_finished_chunks(tmp_path):
    sents = [f"sentence number {i} " + "x" * (i % 7) for i in range(50)]
    reference = np.asarray(teacher_embeddings(CountingTeacher(), sents, tmp_path / "ref", chunk=8, progress=False))
    broken = InterruptedTeacher(stop_at=4)  # call 1 probes the dimension, calls 2-3 finish chunks 0-1
    with pytest.raises(KeyboardInterrupt):
        teacher_embeddings(broken, sents, tmp_path / "c", chunk=8, progress=False)
    chunks = sorted(p.name for p in (tmp_path / "c").glob("*.chunks/chunk-*.npy"))
    assert chunks == ["chunk-000000.npy", "chunk-000004.npy"]  # the spread order: 0, 4, 2, 6, 1, 5, 3
    assert not list((tmp_path / "c").glob("*.json"))  # unfinished: no metadata, never read as a cache
    again = CountingTeacher()
    emb = teacher_embeddings(again, sents, tmp_path / "c", chunk=8, progress=False)
    assert again.calls == 1 + 5  # the probe, then only the 5 missing chunks of 7
    assert np.array_equal(np.asarray(emb), reference)
    assert not list((tmp_path / "c").glob("*.chunks"))  # chunks assembled and removed


def test_a_corrupt_chunk_is_recomputed(tmp_path):
    sents = [f"s{i}" for i in range(20)]
    with pytest.raises(KeyboardInterrupt):
        teacher_embeddings(InterruptedTeacher(stop_at=3), sents, tmp_path, chunk=8, progress=False)
    (chunk,) = tmp_path.glob("*.chunks/chunk-000000.npy")
    chunk.write_bytes(b"garbage")
    t = CountingTeacher()
    emb = teacher_embeddings(t, sents, tmp_path, chunk=8, progress=False)
    assert t.calls == 1 + 3
    assert np.allclose(np.asarray(emb, dtype=np.float32), t.encode(sents), atol=1e-3)
