"""Tests of tinyglot.evaluation: knn, P@1, margin mining, Spearman, evaluate_bitext and its reports.

Expected numbers are computed by hand in the comments.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence

import numpy as np
import pytest
from rich.console import Console

from tinyglot.data.pairs import Pair
from tinyglot.encoder import Encoder, l2_normalize
from tinyglot.errors import TinyglotError
from tinyglot.evaluation import (
    BitextResult,
    LangResult,
    bitext_p_at_1,
    bucc_mining,
    choose_threshold,
    compare,
    evaluate_bitext,
    faiss_available,
    knn,
    margin_denominators,
    margin_scores,
    mine,
    mining_prf,
    p_at_1,
    spearman,
)

# --- knn -------------------------------------------------------------------------------------


def brute_force_topk(q: np.ndarray, keys: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Reference: sort every row by (-score, index) in plain Python."""
    sims = q @ keys.T
    idx = np.array([sorted(range(len(keys)), key=lambda j: (-sims[r, j], j))[:k] for r in range(len(q))])
    return np.take_along_axis(sims, idx, axis=1), idx


@pytest.mark.parametrize("k", [1, 5, 40])  # 40 > 32 takes the partition path, <= 32 the argmax path
def test_knn_blocked_equals_brute_force_with_ties(k: int) -> None:
    # Small integers: every dot product is exact in float32, so many exact ties occur.
    rng = np.random.default_rng(0)
    q = rng.integers(-2, 3, size=(50, 6)).astype(np.float32)
    keys = rng.integers(-2, 3, size=(70, 6)).astype(np.float32)
    scores, indices = knn(q, keys, k, block_size=7, use_faiss=False)
    ref_scores, ref_indices = brute_force_topk(q, keys, k)
    assert indices.dtype == np.int64 and scores.dtype == np.float32
    np.testing.assert_array_equal(indices, ref_indices)
    np.testing.assert_array_equal(scores, ref_scores)


def test_knn_block_size_does_not_change_result() -> None:
    rng = np.random.default_rng(1)
    q, keys = l2_normalize(rng.normal(size=(33, 8))), l2_normalize(rng.normal(size=(20, 8)))
    full = knn(q, keys, 3, block_size=4096, use_faiss=False)
    blocked = knn(q, keys, 3, block_size=1, use_faiss=False)
    np.testing.assert_array_equal(full[1], blocked[1])
    np.testing.assert_allclose(full[0], blocked[0], rtol=1e-6)


def test_knn_all_tied_keys_go_to_lowest_indices() -> None:
    scores, indices = knn(np.ones((2, 3)), np.ones((6, 3)), 4, use_faiss=False)
    np.testing.assert_array_equal(indices, [[0, 1, 2, 3]] * 2)
    np.testing.assert_array_equal(scores, np.full((2, 4), 3.0))


@pytest.mark.skipif(not faiss_available(), reason="faiss not installed")
def test_knn_faiss_matches_numpy() -> None:
    rng = np.random.default_rng(2)
    q = rng.integers(-2, 3, size=(40, 6)).astype(np.float32)
    keys = rng.integers(-2, 3, size=(60, 6)).astype(np.float32)
    np.testing.assert_array_equal(
        knn(q, keys, 5, block_size=9, use_faiss=True)[1], knn(q, keys, 5, use_faiss=False)[1]
    )


def test_without_faiss_knn_falls_back_to_numpy_or_says_what_to_install(monkeypatch) -> None:
    import sys

    monkeypatch.setitem(sys.modules, "faiss", None)  # faiss hidden: `import faiss` raises ImportError
    assert not faiss_available()
    with pytest.raises(TinyglotError, match=r"tinyglot\[faiss\]"):
        knn(np.eye(2), np.eye(2), 1, use_faiss=True)
    rng = np.random.default_rng(3)
    q, keys = l2_normalize(rng.normal(size=(9, 4))), l2_normalize(rng.normal(size=(12, 4)))
    np.testing.assert_array_equal(knn(q, keys, 3)[1], brute_force_topk(q, keys, 3)[1])  # use_faiss=None: numpy


def test_knn_validates_shapes_and_k() -> None:
    with pytest.raises(TinyglotError, match=r"dimension 3.*dimension 5"):
        knn(np.ones((2, 3)), np.ones((4, 5)), 1)
    with pytest.raises(TinyglotError, match="2-D"):
        knn(np.ones(3), np.ones((4, 3)), 1)
    with pytest.raises(TinyglotError, match="between 1 and the number of keys"):
        knn(np.ones((2, 3)), np.ones((4, 3)), 5)
    with pytest.raises(TinyglotError, match="NaN"):
        knn(np.full((2, 3), np.nan), np.ones((4, 3)), 1)


# --- P@1 -------------------------------------------------------------------------------------

# English side: the unit vectors e0, e1, e2, so cos(x_i, en_j) = X[i, j].
#   x0 = (0.8, 0.6, 0)     row argmax 0 -> correct
#   x1 = (0, 0.8, 0.6)     row argmax 1 -> correct
#   x2 = (0.96, 0, 0.28)   row argmax 0 -> wrong             => x -> en P@1 = 2/3
# Columns: en0 (0.8, 0, 0.96) -> x2 wrong; en1 (0.6, 0.8, 0) -> x1 right;
#          en2 (0, 0.6, 0.28) -> x1 wrong                     => en -> x P@1 = 1/3
ASYM_X = np.array([[0.8, 0.6, 0.0], [0.0, 0.8, 0.6], [0.96, 0.0, 0.28]], dtype=np.float32)
ASYM_EN = np.eye(3, dtype=np.float32)


def test_p_at_1_directions_are_not_swapped() -> None:
    assert p_at_1(ASYM_X, ASYM_EN) == pytest.approx(2 / 3)
    assert p_at_1(ASYM_EN, ASYM_X) == pytest.approx(1 / 3)
    assert bitext_p_at_1(ASYM_X, ASYM_EN) == pytest.approx((2 / 3, 1 / 3))


def test_p_at_1_tie_goes_to_lower_index() -> None:
    # Both sources equal both targets: source 0 finds target 0 (right), source 1 also target 0.
    same = np.ones((2, 2), dtype=np.float32) / np.sqrt(2)
    assert p_at_1(same, same) == 0.5


def test_p_at_1_needs_aligned_rows() -> None:
    with pytest.raises(TinyglotError, match="aligned"):
        p_at_1(np.eye(3), np.eye(2, 3))


# Hub example. Targets e0, e1, e2 (4-D unit vectors); e2 is a hub close to every source.
#   x0 = (0.6, 0, 0.64, 0.48)   cos to targets (0.6, 0,   0.64)  -> cosine picks e2 (wrong)
#   x1 = (0, 0.6, 0.64, 0.48)   cos to targets (0,   0.6, 0.64)  -> cosine picks e2 (wrong)
#   x2 = (0, 0, 1, 0)           cos to targets (0,   0,   1)     -> e2 (right)   cosine P@1 = 1/3
# Margin with k=1: a_i = (best cos of x_i)/2 = (0.32, 0.32, 0.5);
#                  b_j = (best cos of e_j among sources)/2 = (0.3, 0.3, 0.5).
#   score(x0, e0) = 0.6 / (0.32 + 0.3) = 0.9677   >   score(x0, e2) = 0.64 / (0.32 + 0.5) = 0.7805
#   likewise x1 -> e1 (0.9677), and x2 -> e2 with 1 / (0.5 + 0.5) = 1.0      margin P@1 = 1
HUB_X = np.array([[0.6, 0, 0.64, 0.48], [0, 0.6, 0.64, 0.48], [0, 0, 1, 0]], dtype=np.float32)
HUB_EN = np.eye(3, 4, dtype=np.float32)


def test_margin_fixes_the_hub() -> None:
    assert p_at_1(HUB_X, HUB_EN) == pytest.approx(1 / 3)
    assert p_at_1(HUB_X, HUB_EN, margin=True, k=1) == 1.0
    best, score = margin_scores(HUB_X, HUB_EN, k=1)
    np.testing.assert_array_equal(best, [0, 1, 2])
    np.testing.assert_allclose(score, [0.6 / 0.62, 0.6 / 0.62, 1.0], rtol=1e-6)


def test_margin_denominators_k2() -> None:
    # a_i = (two best cos of x_i) / 4: x0, x1: (0.64 + 0.6) / 4 = 0.31; x2: (1 + 0) / 4 = 0.25.
    # b_j = (two best cos of e_j among sources) / 4: e0, e1: (0.6 + 0) / 4 = 0.15; e2: (1 + 0.64) / 4 = 0.41.
    a, b = margin_denominators(HUB_X, HUB_EN, k=2)
    np.testing.assert_allclose(a, [0.31, 0.31, 0.25], rtol=1e-6)
    np.testing.assert_allclose(b, [0.15, 0.15, 0.41], rtol=1e-6)


def test_margin_k_is_capped_at_set_size() -> None:
    # k=4 > 3 targets: the whole set is the neighbourhood, which equals k=3.
    np.testing.assert_array_equal(margin_denominators(HUB_X, HUB_EN, k=4)[0],
                                  margin_denominators(HUB_X, HUB_EN, k=3)[0])


# --- mining ----------------------------------------------------------------------------------


def test_mine_keeps_candidates_above_threshold() -> None:
    # Forward candidates from the hub example: (0, 0, 0.9677), (1, 1, 0.9677), (2, 2, 1.0).
    mined = mine(HUB_X, HUB_EN, threshold=0.9, k=1)
    assert [(i, j) for i, j, _ in mined] == [(0, 0), (1, 1), (2, 2)]
    assert mined[0][2] == pytest.approx(0.6 / 0.62, rel=1e-6)
    assert [(i, j) for i, j, _ in mine(HUB_X, HUB_EN, threshold=0.97, k=1)] == [(2, 2)]


def test_mining_prf_by_hand() -> None:
    # tp = 1 of 3 predicted and 2 gold: P = 1/3, R = 1/2, F1 = 2 * (1/6) / (5/6) = 0.4.
    p, r, f = mining_prf([(0, 0, 0.9), (1, 2, 0.8), (2, 2, 0.7)], [(0, 0), (1, 1)])
    assert (p, r, f) == pytest.approx((1 / 3, 1 / 2, 0.4))
    assert mining_prf([], [(0, 0)]) == (0.0, 0.0, 0.0)


def test_choose_threshold_by_hand() -> None:
    # Cut at 0.9: P 1, R 1/2, F1 2/3; at 0.8: P 1/2, R 1/2, F1 1/2;
    # at 0.7: P 2/3, R 1, F1 0.8 (best); at 0.6: P 1/2, R 1, F1 2/3.
    # The threshold lies midway between 0.7 (kept) and 0.6 (dropped): 0.65.
    assert choose_threshold([0.6, 0.9, 0.7, 0.8], [False, True, True, False]) == pytest.approx((0.65, 0.8))
    # With a third gold pair never proposed (n_gold=3): at 0.7, P 2/3, R 2/3, F1 2/3 is still best.
    assert choose_threshold([0.9, 0.8, 0.7, 0.6], [True, False, True, False], n_gold=3) == pytest.approx((0.65, 2 / 3))
    # Keeping everything is best: the threshold is the lowest score itself.
    assert choose_threshold([0.5, 0.4], [True, True]) == pytest.approx((0.4, 1.0))


def test_choose_threshold_never_splits_tied_scores() -> None:
    # Cutting between the two 0.8s would give P 1/2, R 1 (F1 2/3), but a threshold keeps both:
    # at 0.8, P 1/3, R 1, F1 0.5; at 0.9, F1 0.  All are kept, so the threshold is 0.8.
    assert choose_threshold([0.9, 0.8, 0.8], [False, True, False]) == pytest.approx((0.8, 0.5))
    # Next score down after the tied run is 0.2: threshold midway, 0.5.
    assert choose_threshold([0.9, 0.8, 0.8, 0.2], [False, True, False, False]) == pytest.approx((0.5, 0.5))


def test_bucc_mining_end_to_end() -> None:
    # 30 sources with a near-duplicate target, 10 noise sources; 50 targets (20 unmatched).
    rng = np.random.default_rng(3)
    tgt = l2_normalize(rng.normal(size=(50, 64)))
    perm = rng.permutation(50)[:30]
    src = l2_normalize(np.vstack([tgt[perm] + 0.05 * rng.normal(size=(30, 64)), rng.normal(size=(10, 64))]))
    gold = [(i, int(j)) for i, j in enumerate(perm)]
    res = bucc_mining(src, tgt, gold, dev_fraction=0.5, seed=0)
    assert (res.precision, res.recall, res.f1, res.dev_f1) == (1.0, 1.0, 1.0, 1.0)
    assert res.n_test_sources == 20 and 0 < res.n_test_gold < 30
    assert res == bucc_mining(src, tgt, gold, dev_fraction=0.5, seed=0)  # deterministic


def test_bucc_mining_rejects_bad_gold() -> None:
    with pytest.raises(TinyglotError, match="out of range"):
        bucc_mining(HUB_X, HUB_EN, [(0, 7)])
    with pytest.raises(TinyglotError, match="empty"):
        bucc_mining(HUB_X, HUB_EN, [])


# --- Spearman --------------------------------------------------------------------------------


def test_spearman_with_ties_by_hand() -> None:
    # ranks a = (1, 2.5, 2.5, 4), b = (1, 3, 2, 4); centred: (-1.5, 0, 0, 1.5), (-1.5, .5, -.5, 1.5)
    # rho = 4.5 / sqrt(4.5 * 5) = 3 / sqrt(10)
    assert spearman([1, 2, 2, 3], [1, 3, 2, 4]) == pytest.approx(3 / math.sqrt(10))
    assert spearman([1, 2, 3], [30, 20, 10]) == pytest.approx(-1.0)
    # the textbook example (IQ against hours of TV a week, 10 people): rho = -29/165
    iq = [106, 100, 86, 101, 99, 103, 97, 113, 112, 110]
    tv = [7, 27, 2, 50, 28, 29, 20, 12, 6, 17]
    assert spearman(iq, tv) == pytest.approx(-29 / 165)
    assert math.isnan(spearman([1, 1, 1], [1, 2, 3]))
    with pytest.raises(TinyglotError):
        spearman([1, 2], [1, 2, 3])


# --- evaluate_bitext -------------------------------------------------------------------------


class LetterBagEncoder:
    """A real (tiny) Encoder: normalised counts of the letters a-z, case-folded."""

    name = "letters"

    def encode(self, sentences: Sequence[str], batch_size: int = 64) -> np.ndarray:
        out = np.zeros((len(sentences), 26), dtype=np.float32)
        for i, s in enumerate(sentences):
            for ch in s.lower():
                if "a" <= ch <= "z":
                    out[i, ord(ch) - ord("a")] += 1
        return l2_normalize(out)


def pairs(lang: str, xs: list[str], ens: list[str]) -> list[Pair]:
    return [Pair(lang, x, en) for x, en in zip(xs, ens, strict=True)]


# "rev": x is en reversed -> identical letter bags, distinct across pairs: P@1 = 1 both ways.
# "ana": "listen" and "silent" are anagrams, so x0 = x1 = en0 = en1 as vectors; ties go to
#        index 0, so row 1 is wrong in both directions: P@1 = 2/3 both ways.
TESTSET = {
    "rev": pairs("rev", ["olleh", "dlrow", "yks"], ["hello", "world", "sky"]),
    "ana": pairs("ana", ["netsil", "tnelis", "elppa"], ["listen", "silent", "apple"]),
}


def test_our_encoders_answer_the_encoder_protocol(student_dir, monkeypatch) -> None:
    """A tiny tinyglot model, the TF-IDF baseline and two adapters: each is an ``Encoder`` and keeps
    its contract (float32 rows of unit norm, one per sentence, in input order)."""
    from pathlib import Path

    import tinyglot
    from tinyglot.encoders import load_encoder

    monkeypatch.syspath_prepend(str(Path(__file__).resolve().parent / "fixtures"))
    sentences = ["hallo welt", "guten morgen", "hallo", "ein langer satz mit vielen worten"]
    encoders = {"student": tinyglot.load(student_dir), "tfidf": load_encoder("tfidf"),
                "tinyglot adapter": load_encoder(str(student_dir)),
                "python adapter": load_encoder("python:py_teacher:char_bag")}
    for name, enc in encoders.items():
        assert isinstance(enc, Encoder), name
        emb = enc.encode(sentences, batch_size=3)
        assert emb.dtype == np.float32 and emb.shape[0] == len(sentences), name
        np.testing.assert_allclose(np.linalg.norm(emb, axis=1), 1.0, atol=1e-5, err_msg=name)
        np.testing.assert_allclose(enc.encode(sentences[::-1], batch_size=2), emb[::-1], atol=1e-5, err_msg=name)
    assert not isinstance(object(), Encoder)


def test_evaluate_bitext_by_hand() -> None:
    res = evaluate_bitext(LetterBagEncoder(), TESTSET, testset_name="toy")
    assert [r.lang for r in res.rows] == ["rev", "ana"]
    assert (res.rows[0].x2en, res.rows[0].en2x) == (1.0, 1.0)
    assert (res.rows[1].x2en, res.rows[1].en2x) == pytest.approx((2 / 3, 2 / 3))
    assert res.model == "letters" and res.testset == "toy" and res.margin is False
    # mean over languages of (1 + 2/3) / 2 = 5/6
    assert res.primary_metric == pytest.approx(5 / 6)
    assert res.average == LangResult("average", 6, pytest.approx(5 / 6), pytest.approx(5 / 6))
    assert res.seconds >= 0


def test_evaluate_bitext_margin_flag_is_recorded() -> None:
    res = evaluate_bitext(LetterBagEncoder(), TESTSET, margin=True, model_name="bag")
    assert res.margin is True and res.model == "bag"
    assert res.rows[0].mean == 1.0


def test_result_json_roundtrip(tmp_path) -> None:
    res = evaluate_bitext(LetterBagEncoder(), TESTSET, testset_name="toy")
    path = res.write_json(tmp_path / "out" / "result.json")
    data = json.loads(path.read_text(encoding="utf-8"))
    assert data["primary_metric"] == pytest.approx(5 / 6)
    assert data["languages"][1] == {"lang": "ana", "n": 3, "x2en": pytest.approx(2 / 3),
                                    "en2x": pytest.approx(2 / 3), "mean": pytest.approx(2 / 3)}
    assert BitextResult.read_json(path) == res
    assert [p.name for p in path.parent.iterdir()] == ["result.json"]  # no temporary file left


def test_reports_show_percentages() -> None:
    res = evaluate_bitext(LetterBagEncoder(), TESTSET, model_name="letters", testset_name="toy")
    console = Console(record=True, width=120)
    console.print(res.to_table())
    text = console.export_text()
    assert "66.7" in text and "100.0" in text and "83.3" in text and "average" in text
    md = res.to_markdown()
    assert "| ana | 3 | 66.7 | 66.7 | 66.7 |" in md
    assert "| **average** | 6 | 83.3 | 83.3 | **83.3** |" in md


def test_compare_one_column_per_model() -> None:
    a = evaluate_bitext(LetterBagEncoder(), TESTSET, model_name="letters")
    b = BitextResult("other", "", False, [LangResult("rev", 3, 0.0, 1.0)], 0.0)
    console = Console(record=True, width=120)
    console.print(compare([a, b]))
    text = console.export_text()
    assert "letters" in text and "other" in text
    assert "average (1 common)" in text  # only "rev" is shared: letters 100.0, other 50.0
    assert "50.0" in text and "—" in text
    with pytest.raises(TinyglotError):
        compare([])


class BrokenEncoder:
    """Encoders that break the protocol in one chosen way."""

    def __init__(self, how: str) -> None:
        self.how = how
        self.calls = 0

    def encode(self, sentences: Sequence[str], batch_size: int = 64) -> np.ndarray:
        self.calls += 1
        n = len(sentences)
        if self.how == "rows":
            return np.ones((n + 1, 4), dtype=np.float32)
        if self.how == "1d":
            return np.ones(n, dtype=np.float32)
        if self.how == "nan":
            return np.full((n, 4), np.nan, dtype=np.float32)
        if self.how == "int":
            return np.ones((n, 4), dtype=np.int64)
        if self.how == "dim":
            return np.ones((n, 4 + self.calls), dtype=np.float32)
        raise AssertionError(self.how)


@pytest.mark.parametrize(
    ("how", "message"),
    [("rows", "shape"), ("1d", "shape"), ("nan", "NaN"), ("int", "dtype"), ("dim", "dimension")],
)
def test_protocol_violations_name_the_encoder(how: str, message: str) -> None:
    with pytest.raises(TinyglotError, match=f"encoder 'broken' broke the Encoder protocol.*{message}"):
        evaluate_bitext(BrokenEncoder(how), TESTSET, model_name="broken")


def test_empty_testset_and_empty_language_raise() -> None:
    with pytest.raises(TinyglotError, match="empty"):
        evaluate_bitext(LetterBagEncoder(), {}, testset_name="toy")
    with pytest.raises(TinyglotError, match="'xx'"):
        evaluate_bitext(LetterBagEncoder(), {**TESTSET, "xx": []})


def test_evaluate_all_says_what_it_evaluates_and_shows_progress(student_dir, capsys, monkeypatch):
    """Evaluating several models is never silent: a line per model and a progress line per language."""
    import tinyglot
    from tinyglot.data.embedded import load_testset
    from tinyglot.evaluation import evaluate_all

    monkeypatch.delenv("TINYGLOT_NO_PROGRESS", raising=False)
    testset = {lang: pairs[:20] for lang, pairs in list(load_testset().items())[:3]}
    said: list[str] = []
    results = evaluate_all([("student", tinyglot.load(student_dir))], testset, "tiny test", say=said.append)
    assert [r.model for r in results] == ["student"] and len(results[0].rows) == 3
    assert said == ["evaluating the student on tiny test (3 languages, 120 sentences)"]
    assert "eval student: 3/3" in capsys.readouterr().out  # off a terminal: the plain progress line at the end
