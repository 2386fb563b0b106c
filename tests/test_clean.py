"""Tests for tinyglot.data.clean: filters, sampling probabilities, sampler, train/dev split."""

from __future__ import annotations

import collections
import itertools
import random
from pathlib import Path

import pytest

from tinyglot.data import (
    CleanConfig,
    CleanStats,
    LanguageSampler,
    Pair,
    clean_pairs,
    group_by_lang,
    read_corpus,
    require_languages,
    sampling_probs,
    train_dev_split,
)
from tinyglot.errors import TinyglotError

SHARED_DATA = Path(__file__).resolve().parents[2] / "shared" / "data"


# ------------------------------------------------------------------------------ cleaning


def test_clean_pairs_counts_each_reason() -> None:
    pairs = [
        Pair("de", "Hallo Welt", "Hello world"),
        Pair("de", "hallo welt", "HELLO WORLD"),  # duplicate after case folding
        Pair("de", "Hallo Welt", "Hello world", src="other"),  # duplicate
        Pair("de", "OK", " ok "),  # copy
        Pair("de", "x" * 1001, "Long"),  # too long
        Pair("de", "", "Empty"),  # too short
        Pair("de", "Kurzer Satz.", "A far longer English sentence than the German one"),
        Pair("fr", "Bonjour le monde", "Hello world"),
    ]
    stats = CleanStats()
    kept = list(clean_pairs(pairs, CleanConfig(), stats))
    assert kept == [pairs[0], pairs[-1]]
    assert (stats.seen, stats.kept, stats.duplicate, stats.copy, stats.too_long,
            stats.too_short, stats.bad_ratio) == (8, 2, 2, 1, 1, 1, 1)
    assert stats.dropped == 6
    assert stats.summary().startswith("kept 2 of 8 pairs; dropped")
    assert "2 duplicate" in stats.summary()


def test_clean_ratio_ignores_short_sides_and_weights_cjk() -> None:
    config = CleanConfig()
    short = Pair("de", "OK", "Apply the changes")  # one side under 10 chars: no ratio test
    chinese = Pair("zh", "在数据媒体中创建新目录。", "Creates a new directory on a data medium.")
    assert len(chinese.en) / len(chinese.x) > 3  # a plain character ratio would drop it
    assert list(clean_pairs([short, chinese], config)) == [short, chinese]
    strict = CleanConfig(wide_char_weight=1.0)
    assert list(clean_pairs([chinese], strict)) == []


def test_clean_switches_and_cap() -> None:
    pairs = [Pair("de", f"Satz {i}", f"Sentence {i}") for i in range(5)] + [
        Pair("fr", "Phrase", "Sentence"), Pair("fr", "Same", "same"), Pair("fr", "Same", "same")
    ]
    config = CleanConfig(drop_copies=False, dedup=False, per_lang_cap=2)
    stats = CleanStats()
    kept = list(clean_pairs(pairs, config, stats))
    assert [p.x for p in kept] == ["Satz 0", "Satz 1", "Phrase", "Same"]
    assert stats.over_cap == 4


def test_clean_is_streaming() -> None:
    endless = (Pair("de", f"Satz {i}", f"Sentence {i}") for i in itertools.count())
    first = list(itertools.islice(clean_pairs(endless), 3))
    assert [p.x for p in first] == ["Satz 0", "Satz 1", "Satz 2"]


@pytest.mark.parametrize(
    "kwargs", [{"min_chars": 5, "max_chars": 4}, {"max_len_ratio": 0.5}, {"per_lang_cap": 0}]
)
def test_clean_config_validation(kwargs: dict) -> None:
    with pytest.raises(TinyglotError):
        CleanConfig(**kwargs)


def test_clean_real_data_sample() -> None:
    path = SHARED_DATA / "train.jsonl.gz"
    if not path.exists():
        pytest.skip(f"{path} not present")
    stats = CleanStats()
    kept = list(clean_pairs(itertools.islice(read_corpus(path), 2000), stats=stats))
    assert stats.seen == 2000
    assert len(kept) >= 1900  # the shipped data is already clean


# ------------------------------------------------------------------------------ sampling


def test_sampling_probs_hand_computed() -> None:
    assert sampling_probs({"a": 90, "b": 10}, 1.0) == pytest.approx({"a": 0.9, "b": 0.1})
    # T=2: sqrt(0.9) : sqrt(0.1) = 3 : 1
    assert sampling_probs({"a": 90, "b": 10}, 2.0) == pytest.approx({"a": 0.75, "b": 0.25})
    flat = sampling_probs({"a": 900, "b": 10, "c": 1}, 1e6)
    assert flat == pytest.approx({"a": 1 / 3, "b": 1 / 3, "c": 1 / 3}, abs=1e-4)
    assert sampling_probs({"a": 5, "b": 0}, 1.0) == {"a": 1.0, "b": 0.0}


@pytest.mark.parametrize("temperature", [0, -1.0, float("nan"), float("inf")])
def test_sampling_probs_rejects_bad_temperature(temperature: float) -> None:
    with pytest.raises(TinyglotError, match="temperature"):
        sampling_probs({"a": 1}, temperature)


@pytest.mark.parametrize("counts", [{}, {"a": 0}, {"a": -1, "b": 3}])
def test_sampling_probs_rejects_bad_counts(counts: dict[str, int]) -> None:
    with pytest.raises(TinyglotError):
        sampling_probs(counts, 1.0)


def test_language_sampler_deterministic_and_follows_probs() -> None:
    grouped = {"a": list(range(90)), "b": list(range(10)), "empty": []}
    sampler = LanguageSampler(grouped, temperature=2.0, seed=7)
    draws = sampler.draw(20_000)
    assert draws == LanguageSampler(grouped, temperature=2.0, seed=7).draw(20_000)
    assert draws != LanguageSampler(grouped, temperature=2.0, seed=8).draw(20_000)
    assert draws[:100] == list(itertools.islice(iter(sampler), 100))
    freq = collections.Counter(lang for lang, _ in draws)
    assert freq["empty"] == 0
    assert freq["a"] / len(draws) == pytest.approx(0.75, abs=0.02)
    assert all(0 <= i < len(grouped[lang]) for lang, i in draws)


def test_language_sampler_covers_each_language_before_repeating() -> None:
    sampler = LanguageSampler({"a": 7, "b": 5}, temperature=1.0, seed=0)
    b_indices = [i for lang, i in sampler.draw(500) if lang == "b"]
    assert sorted(b_indices[:5]) == list(range(5))
    assert sorted(b_indices[5:10]) == list(range(5))


# ---------------------------------------------------------------------- group and require


def test_group_by_lang_and_require_languages() -> None:
    pairs = [Pair("fr", "Oui", "Yes"), Pair("de", "Ja", "Yes"), Pair("fr", "Non", "No")]
    grouped = group_by_lang(pairs)
    assert list(grouped) == ["de", "fr"]
    assert [p.x for p in grouped["fr"]] == ["Oui", "Non"]
    assert require_languages(grouped, ["deu", "fr_FR"]) == ["de", "fr"]
    with pytest.raises(TinyglotError, match="no pairs for language.*ja, ko") as info:
        require_languages(grouped, ["de", "ja", "ko"])
    assert "languages with pairs: de, fr" in str(info.value)


# -------------------------------------------------------------------------------- split


def _multilingual_pairs(n_english: int = 2000) -> list[Pair]:
    """The same English sentences, in several languages and spellings, shuffled."""
    pairs = []
    for i in range(n_english):
        en = f"Sentence number {i} about the document."
        pairs.append(Pair("de", f"Satz {i}", en))
        pairs.append(Pair("fr", f"Phrase {i}", en.upper()))
        pairs.append(Pair("es", f"Frase {i}", en.rstrip(".") + " !"))
    random.Random(0).shuffle(pairs)
    return pairs


def _english_keys(pairs: list[Pair]) -> set[str]:
    return {"".join(c for c in p.en.casefold() if c.isalnum()) for p in pairs}


def test_split_keeps_each_english_on_one_side() -> None:
    pairs = _multilingual_pairs()
    train, dev = train_dev_split(pairs, dev_fraction=0.1, seed=3)
    assert len(train) + len(dev) == len(pairs)
    assert not _english_keys(train) & _english_keys(dev)
    assert len(dev) % 3 == 0  # each English goes with all three of its languages
    assert 0.07 < len(dev) / len(pairs) < 0.13


def test_split_is_deterministic_and_order_independent() -> None:
    pairs = _multilingual_pairs(500)
    train, dev = train_dev_split(pairs, seed=1)
    assert (train, dev) == train_dev_split(pairs, seed=1)
    train_r, dev_r = train_dev_split(list(reversed(pairs)), seed=1)
    assert set(dev_r) == set(dev) and set(train_r) == set(train)
    assert set(train_dev_split(pairs, seed=2)[1]) != set(dev)


def test_split_edge_fractions() -> None:
    pairs = _multilingual_pairs(50)
    assert train_dev_split(pairs, dev_fraction=0.0) == (pairs, [])
    assert train_dev_split(pairs, dev_fraction=1.0) == ([], pairs)
    with pytest.raises(TinyglotError, match="dev_fraction"):
        train_dev_split(pairs, dev_fraction=1.5)
