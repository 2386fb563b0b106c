"""BatchPlan: deterministic, resumable, length-bucketed batches with temperature language sampling."""

from __future__ import annotations

import numpy as np
import pytest

from tinyglot.batching import SOURCE_CHUNK, BatchPlan, TokenizedPairs, pad_arrays, tokenize_pairs
from tinyglot.data.clean import group_by_lang, sampling_probs
from tinyglot.errors import TinyglotError
from tinyglot.tokenizer import PAD_ID

COUNTS = {"de": 300, "fr": 30}


def _pairs(counts: dict[str, int] = COUNTS, seed: int = 0, shared_english: bool = False) -> TokenizedPairs:
    """Token arrays of random lengths 1..40; English keys unique unless ``shared_english`` (then the
    i-th pair of every language has the same English side)."""
    rng = np.random.default_rng(seed)
    langs = sorted(counts)
    data = TokenizedPairs(langs=langs, x=[], en=[], en_key=[])
    for li, lang in enumerate(langs):
        n = counts[lang]
        data.x.append([rng.integers(10, 99, rng.integers(1, 41)).astype(np.int32) for _ in range(n)])
        data.en.append([rng.integers(10, 99, rng.integers(1, 41)).astype(np.int32) for _ in range(n)])
        keys = np.arange(n) if shared_english else np.arange(n) + 1000 * (li + 1)
        data.en_key.append(keys.astype(np.int64))
    return data


def _length(data: TokenizedPairs, row: np.ndarray) -> int:
    li, pi = row
    return max(len(data.x[li][pi]), len(data.en[li][pi]))


def test_batches_are_a_pure_function_of_seed_and_step():
    data = _pairs()
    steps = [0, 1, 49, 50, 51, 123, 7]
    first = BatchPlan(data, 16, 2.0, seed=3)
    want = {s: first.batch(s) for s in steps}
    resumed = BatchPlan(data, 16, 2.0, seed=3)  # a resumed run asks for later steps first
    for s in reversed(steps):
        assert np.array_equal(resumed.batch(s), want[s]), s
    other = BatchPlan(data, 16, 2.0, seed=4)
    assert not all(np.array_equal(other.batch(s), want[s]) for s in steps)
    assert not np.array_equal(want[0], want[1])


def test_rows_index_real_pairs_and_fill_the_batch():
    for counts in (COUNTS, {"de": 3000, "fr": 3000}):
        data = _pairs(counts)
        plan = BatchPlan(data, 16, 2.0, seed=0)
        sizes = []
        for step in range(120):
            rows = plan.batch(step)
            assert rows.ndim == 2 and rows.shape[1] == 2 and len(rows) <= 16 and rows.dtype.kind == "i"
            assert len({(int(li), int(pi)) for li, pi in rows}) == len(rows)  # a pair drawn twice is kept once
            for li, pi in rows:
                assert 0 <= li < len(data.langs) and 0 <= pi < data.count(li)
            sizes.append(len(rows))
    assert np.mean(sizes) > 15  # large corpus: repeated draws are rare


def test_each_chunk_is_sorted_by_length_into_batches():
    """The batches of one chunk cut one length-sorted draw: their length ranges do not overlap."""
    data = _pairs()
    plan = BatchPlan(data, 8, 2.0, seed=1, chunk=20)
    for chunk in range(3):
        ranges = sorted((min(lengths), max(lengths)) for lengths in
                        ([_length(data, r) for r in plan.batch(chunk * 20 + i)] for i in range(20)))
        for (_, hi), (lo, _) in zip(ranges, ranges[1:], strict=False):
            assert hi <= lo, ranges
        assert ranges[-1][1] - ranges[0][0] > 10  # the chunk itself spans short and long pairs
    # padding within a batch is small next to a random batch of the same pairs
    spread = np.mean([np.ptp([_length(data, r) for r in plan.batch(s)]) for s in range(60)])
    assert spread < 8


def test_language_sampling_follows_temperature():
    counts = {"de": 30000, "fr": 3000}  # large enough that few repeated draws are dropped
    data = _pairs(counts)
    plan = BatchPlan(data, 16, 2.0, seed=0)
    rows = np.concatenate([plan.batch(s) for s in range(200)])
    share = float(np.mean(rows[:, 0] == data.langs.index("fr")))
    want = sampling_probs(counts, 2.0)["fr"]  # sqrt(3000) / (sqrt(3000) + sqrt(30000)) = 0.240
    assert want == pytest.approx(0.240, abs=0.001)
    assert share == pytest.approx(want, abs=0.03)
    flat = BatchPlan(data, 16, 1.0, seed=0)  # T=1: proportional to size, 3000/33000
    rows = np.concatenate([flat.batch(s) for s in range(200)])
    assert float(np.mean(rows[:, 0] == 1)) == pytest.approx(3000 / 33000, abs=0.02)


def test_repeated_english_is_dropped_and_world_trims():
    data = _pairs({"de": 20, "fr": 20}, shared_english=True)  # pair i of de and fr: same English
    plan = BatchPlan(data, 16, 1.0, seed=0)
    shrunk = 0
    for step in range(50):
        rows = plan.batch(step)
        keys = [int(data.en_key[li][pi]) for li, pi in rows]
        assert len(keys) == len(set(keys))
        shrunk += len(rows) < 16
        for world in (2, 3):
            part = plan.batch(step, world=world)
            assert len(part) % world == 0 and len(rows) - len(part) < world
            assert np.array_equal(part, rows[: len(part)])
    assert shrunk > 25  # 40 pairs, 20 English sentences: most batches of 16 draws repeat one


def test_batch_size_below_two_is_refused():
    with pytest.raises(TinyglotError, match="at least 2"):
        BatchPlan(_pairs(), 1, 2.0, seed=0)


def test_tensors_keep_row_order_and_pad(tokenizer):
    data = _pairs()
    plan = BatchPlan(data, 16, 2.0, seed=0)
    rows = plan.batch(5)[::-1]  # any order the caller passes is the order it gets back
    lang_ids = [7, 9]
    xb, eb, x_lang = plan.tensors(rows, tokenizer, lang_ids, 48)
    assert x_lang.tolist() == [lang_ids[li] for li, _ in rows]
    for side, batch in ((data.x, xb), (data.en, eb)):
        assert batch.ids.shape[1] == max(len(side[li][pi]) for li, pi in rows)
        for i, (li, pi) in enumerate(rows):
            seq = side[li][pi]
            assert batch.ids[i, : len(seq)].tolist() == seq.tolist()
            assert (batch.ids[i, len(seq):] == PAD_ID).all()
            assert batch.mask[i].sum() == len(seq) and batch.mask[i, : len(seq)].all()


def test_pad_arrays_matches_the_tokenizer(tokenizer, small_pairs):
    data = tokenize_pairs(group_by_lang(small_pairs[:200]), tokenizer, max_len=24)
    seqs = data.x[0][:9]
    mine = pad_arrays(seqs, 24)
    theirs = tokenizer.pad([s.tolist() for s in seqs], 24)
    assert np.array_equal(mine.ids, theirs.ids) and np.array_equal(mine.mask, theirs.mask)
    assert mine.ids.dtype == np.int64 and mine.mask.dtype == np.int64
    assert data.truncated > 0 and max(len(s) for lang in data.x for s in lang) == 24


def _with_sources(data: TokenizedPairs, general: dict[str, int]) -> TokenizedPairs:
    """``data`` with its Pair rows: the last ``general[lang]`` rows of a language are general-domain."""
    from tinyglot.data.pairs import GENERAL_SRC_PREFIX, Pair

    data.pairs = []
    for li, lang in enumerate(data.langs):
        n, g = data.count(li), general.get(lang, 0)
        data.pairs.append([Pair(lang, f"x{i}", f"en{li}-{i}", GENERAL_SRC_PREFIX + "book" if i >= n - g else "ui")
                           for i in range(n)])
    return data


def test_general_share_sets_the_share_of_general_rows_per_language():
    counts = {"de": 20000, "fr": 3000, "ja": 2000}
    data = _with_sources(_pairs(counts), {"de": 1000, "ja": 2000})  # fr: none; ja: only general rows
    de, fr, ja = (data.langs.index(x) for x in ("de", "fr", "ja"))

    def general_share_of(plan: BatchPlan, lang: int) -> float:
        rows = np.concatenate([plan.batch(s) for s in range(300)])
        rows = rows[rows[:, 0] == lang]
        return float(np.mean([data.pairs[lang][pi].general for _, pi in rows]))

    plain = BatchPlan(data, 32, 2.0, seed=0)  # 0: rows in proportion to their number, as before
    assert general_share_of(plain, de) == pytest.approx(1000 / 20000, abs=0.02)
    unmarked = _pairs(counts)  # the same token arrays without Pair rows: the very same batches
    assert all(np.array_equal(plain.batch(s), BatchPlan(unmarked, 32, 2.0, seed=0).batch(s)) for s in range(60))
    half = BatchPlan(data, 32, 2.0, seed=0, general_share=0.5)
    assert general_share_of(half, de) == pytest.approx(0.5, abs=0.04)
    assert general_share_of(half, fr) == 0.0 and general_share_of(half, ja) == 1.0
    probs = sampling_probs(counts, 2.0)  # languages are drawn as before
    assert half.general_fraction() == pytest.approx(0.5 * probs["de"] + probs["ja"])
    assert plain.general_fraction() == pytest.approx(1000 / 20000 * probs["de"] + probs["ja"])
    again = BatchPlan(data, 32, 2.0, seed=0, general_share=0.5)  # seeded and resumable like every plan
    assert all(np.array_equal(half.batch(s), again.batch(s)) for s in (70, 3, 0))
    for s in range(20):  # every row a real pair, drawn once
        rows = half.batch(s)
        assert all(0 <= pi < data.count(li) for li, pi in rows) and len({tuple(r) for r in rows}) == len(rows)


@pytest.mark.parametrize("share", [-0.1, 1.0])
def test_general_share_out_of_range_is_refused(share):
    from tinyglot.trainloop import TrainSettings

    with pytest.raises(TinyglotError, match="general_share"):
        TrainSettings(general_share=share).validate()


def test_source_grouping_cuts_the_same_draws_into_batches_of_one_source():
    counts = {"de": 4000, "fr": 3000, "ja": 2000}
    data = _with_sources(_pairs(counts), {"de": 1000, "fr": 1500, "ja": 2000})  # two sources: ui, general:book
    by_length = BatchPlan(data, 32, 2.0, seed=0, chunk=20)
    by_source = BatchPlan(data, 32, 2.0, seed=0, chunk=20, grouping="source")

    def draws(plan: BatchPlan, chunk: int) -> list[tuple[int, int]]:
        return sorted(tuple(r) for s in range(chunk * 20, chunk * 20 + 20) for r in plan._chunk(chunk)[s % 20])

    assert draws(by_length, 0) == draws(by_source, 0) and draws(by_length, 3) == draws(by_source, 3)

    def mixed(plan: BatchPlan) -> int:  # batches holding rows of both sources
        return sum(len({data.pairs[li][pi].src for li, pi in plan.batch(s)}) > 1 for s in range(100))

    assert mixed(by_source) <= 5  # one batch per chunk at most straddles the two sources
    assert mixed(by_length) >= 80  # by length alone nearly every batch mixes them
    langs = {len({li for li, _ in by_source.batch(s)}) for s in range(100)}
    assert max(langs) > 1  # one source's batch still mixes its languages
    for s in range(40):  # within a source, still sorted by length
        rows = by_source._chunk(0)[s % 20]
        srcs = [data.pairs[li][pi].src for li, pi in rows]
        lengths = [_length(data, r) for r in rows]
        for a, b in zip(range(len(rows)), range(1, len(rows)), strict=False):
            assert srcs[a] != srcs[b] or lengths[a] <= lengths[b]
    with pytest.raises(TinyglotError, match="grouping"):
        BatchPlan(data, 32, 2.0, seed=0, grouping="topic")
    # long chunks by default, so that each source's share still sorts into batches of similar length
    assert BatchPlan(data, 32, 2.0, seed=0, grouping="source").chunk == SOURCE_CHUNK
    assert BatchPlan(data, 32, 2.0, seed=0).chunk == 50


def test_batch_grouping_setting_is_checked():
    from tinyglot.trainloop import TrainSettings

    TrainSettings(batch_grouping="source").validate()
    with pytest.raises(TinyglotError, match="batch_grouping"):
        TrainSettings(batch_grouping="random").validate()
