from __future__ import annotations

import time

import numpy as np
import pytest

from tinyglot.batching import train_vocabulary
from tinyglot.data import Pair
from tinyglot.data.clean import group_by_lang
from tinyglot.errors import TinyglotError
from tinyglot.tokenizer import PAD_ID, UNK_ID, Tokenizer, frequent_characters


def test_language_tokens_are_single_pieces(tokenizer):
    assert tokenizer.languages == ("de", "en", "fr", "ja", "ru")
    for lang in tokenizer.languages:
        tid = tokenizer.lang_token_id(lang)
        assert tokenizer.piece(tid) == f"<2{lang}>"
        # user-defined symbols are never split, even inside text
        assert tid in tokenizer.tokenize(f"hallo <2{lang}> welt")
    # locale variants resolve to the same token
    assert tokenizer.lang_token_id("de_DE") == tokenizer.lang_token_id("de")


def test_missing_language_token_is_a_clear_error(tokenizer):
    with pytest.raises(TinyglotError, match="no language token for 'zh'"):
        tokenizer.lang_token_id("zh-CN")


def test_round_trip_save_load(tokenizer, tmp_path):
    path = tokenizer.save(tmp_path / "tok.model")
    again = Tokenizer.load(path)
    assert again.sha256 == tokenizer.sha256
    assert again.vocab_size == tokenizer.vocab_size
    s = ["Der Drucker ist nicht bereit.", "Правка документа", "ファイルを開く"]
    assert np.array_equal(again.encode(s, 32).ids, tokenizer.encode(s, 32).ids)
    # lower-casing is part of the model file: decode gives the lower-cased text back
    assert tokenizer.decode(tokenizer.tokenize("Open The File")) == "open the file"


def test_padding_truncation_and_mask(tokenizer):
    batch = tokenizer.encode(["a", "open the file and save it as a new document please"], max_len=5)
    assert batch.ids.shape == (2, 5)
    assert batch.mask[0].sum() == len(tokenizer.tokenize("a"))
    assert (batch.ids[batch.mask == 0] == PAD_ID).all()
    assert batch.mask[1].sum() == 5
    fixed = tokenizer.encode(["a"], max_len=7, pad_to="max_len")
    assert fixed.ids.shape == (1, 7)


def test_empty_sentence_is_an_error(tokenizer):
    with pytest.raises(TinyglotError, match="sentence #1 is empty"):
        tokenizer.encode(["ok", "   "], 8)


def test_huge_input_is_cut_fast(tokenizer):
    start = time.perf_counter()
    batch = tokenizer.encode(["word " * 2_000_000], max_len=16)
    assert batch.ids.shape == (1, 16)
    assert time.perf_counter() - start < 5


def test_bpe_and_case_option(small_pairs):
    sentences = [s for p in small_pairs[:400] for s in (p.x, p.en)]
    tok = Tokenizer.train(sentences, ["de", "en"], vocab_size=600, model_type="bpe", lowercase=False)
    assert tok.decode(tok.tokenize("Open")) == "Open"
    with pytest.raises(TinyglotError, match="model_type"):
        Tokenizer.train(sentences, ["de"], model_type="wordpiece")


def test_cjk_corpus_fits_small_vocabulary(small_pairs):
    sentences = [p.x for p in small_pairs if p.lang == "ja"]
    tok = Tokenizer.train(sentences, ["ja"], vocab_size=400)
    assert tok.vocab_size <= 400 + 10


def test_frequent_characters_follow_the_normaliser_the_count_and_the_budget():
    sentences = ["ＡＡＡ aa", "很很很 说说", "说", "ﬁ once"]
    # full-width A folds to a (5 in all), 很 and 说 3 each (ties by code point); f, i, o... once
    assert frequent_characters(sentences, 100) == "a很说"
    assert frequent_characters(sentences, 2) == "a很"  # the most frequent max_chars
    assert frequent_characters(sentences, 0) == ""
    assert frequent_characters(sentences, 100, min_count=1).startswith("a很说")
    assert frequent_characters(sentences, 100, lowercase=False) == "A很说a"
    assert frequent_characters([], 100) == ""


def test_characters_the_whole_corpus_holds_are_pieces_not_unknown(small_pairs):
    """The vocabulary's sample is a few sentences per language; a character that only the rest of
    the corpus holds (here 鰻, in 3 Japanese pairs of 303) is still a piece, not <unk>, while one
    seen once is left to SentencePiece's own coverage (it is <unk>)."""
    rare = [Pair("ja", f"{p.x}鰻", p.en) for p in small_pairs if p.lang == "ja"][:3]
    once = Pair("ja", "鱧を食べる。", "I eat pike conger.")
    train = group_by_lang([*small_pairs, *rare, once])
    tok = train_vocabulary(train, vocab_size=8000, max_sentences=80, seed=0, char_share=0.125)  # 10 a language
    assert UNK_ID not in tok.tokenize("鰻")
    assert UNK_ID in tok.tokenize("鱧")
    # train.vocab_char_share = 0 (the default): the sample's characters only, as before
    assert UNK_ID in train_vocabulary(train, vocab_size=8000, max_sentences=80, seed=0).tokenize("鰻")


def test_vocab_general_share_draws_the_sample_from_general_rows(small_pairs):
    """train.vocab_general_share: in a language with both kinds of rows, that share of the vocabulary's
    sample comes from its general-domain rows; a character that only the general rows hold (竜, in 3
    of 303 Japanese rows) then enters the vocabulary, where the uniform sample leaves it out (<unk>)."""
    from tinyglot.batching import _vocabulary_rows
    from tinyglot.data.pairs import GENERAL_SRC_PREFIX

    ja = [p for p in small_pairs if p.lang == "ja"]
    general = [Pair("ja", f"竜が城へ来た{'。' * i}", f"the dragon came to the castle{'!' * i}",
                    src=f"{GENERAL_SRC_PREFIX}saga") for i in range(1, 4)]
    rows = [*ja, *general]
    rng = np.random.default_rng(0)
    picked = _vocabulary_rows(rows, 6, 0.5, rng)
    assert len(set(picked.tolist())) == 6
    assert sum(rows[i].general for i in picked) == 3
    # too few general rows: all of them, the others fill in; no general rows: uniform
    assert sum(rows[i].general for i in _vocabulary_rows(rows, 10, 0.9, rng)) == 3
    assert len(_vocabulary_rows(ja, 20, 0.5, rng)) == 20
    train = group_by_lang([*small_pairs, *general])
    with_general = train_vocabulary(train, vocab_size=8000, max_sentences=80, seed=0, general_share=0.5)
    uniform = train_vocabulary(train, vocab_size=8000, max_sentences=80, seed=0)
    assert UNK_ID not in with_general.tokenize("竜")
    assert UNK_ID in uniform.tokenize("竜")


def test_word_lists_put_a_languages_common_words_into_the_vocabulary(small_pairs):
    """train.vocab_words: lines of each language's listed words, drawn by frequency, join the sample, so
    that words the corpus never shows (German words of a story, not of software) become whole pieces;
    a language without a list, or English, is sampled as before."""
    from tinyglot.batching import WORDS_SALT, word_lines

    story = ["drache", "schwert", "königin", "wanderte", "gebirge", "zauberin"]
    words = {"de": [(w, 300 + 10 * i) for i, w in enumerate(story)] + [("selten", 900)],
             "en": [("dragon", 300)], "xx": [("nirgends", 300)]}
    lines = word_lines(words["de"], 4000, np.random.default_rng(0))
    counts = {w: sum(line.split().count(w) for line in lines) for w in (*story, "selten")}
    assert len(lines) == 4000 and all(len(line.split()) == 12 for line in lines)
    assert counts["drache"] > counts["schwert"] > counts["zauberin"] > 20 * counts["selten"]  # by frequency
    train = group_by_lang(small_pairs)
    kw = {"vocab_size": 2000, "max_sentences": 400, "seed": 0}
    listed = train_vocabulary(train, **kw, words=words, word_sentences=300)
    plain = train_vocabulary(train, **kw)
    assert all(len(listed.tokenize(w)) == 1 for w in story[:4])
    assert sum(len(plain.tokenize(w)) for w in story[:4]) > 4
    assert len(listed.tokenize("dragon")) == len(plain.tokenize("dragon"))  # no list for English
    assert train_vocabulary(train, **kw, words=words, word_sentences=0).sha256 == plain.sha256
    again = train_vocabulary(train, **kw, words=words, word_sentences=300)
    assert again.sha256 == listed.sha256 and WORDS_SALT != 0  # seeded, apart from the sample's draws


def test_vocab_word_sentences_below_zero_is_refused():
    from tinyglot.distill.config import DistillTrainConfig
    with pytest.raises(TinyglotError, match="vocab_word_sentences"):
        DistillTrainConfig(vocab_word_sentences=-1).validate()


@pytest.mark.slow
def test_a_sample_past_300k_sentences_keeps_its_last_languages():
    """train_vocabulary's language-balanced sample goes whole to SentencePiece: Tokenizer.train once cut
    every sample to its first 300,000 sentences, so a 400k sample (the languages in alphabetical order)
    lost its last languages (measured: vi, tr, sv, sl segmented into characters).  Here de and es fill
    the first 300,006 sentences and zh's 150,006 come after them."""
    n = 75_001
    words = ["alpha beta gamma delta", "one two three four five", "red green blue"]
    train = {"de": [Pair("de", words[i % 3], words[(i + 1) % 3]) for i in range(n)],
             "es": [Pair("es", words[i % 3], words[(i + 2) % 3]) for i in range(n)],
             "zh": [Pair("zh", "竜が来た", "the dragon came") for _ in range(n)]}
    tok = train_vocabulary(train, vocab_size=300, max_sentences=6 * n, seed=0)
    assert UNK_ID not in tok.tokenize("竜が来た")


@pytest.mark.parametrize("share", [-0.1, 1.5])
def test_vocab_general_share_out_of_range_is_refused(share):
    from tinyglot.distill.config import DistillTrainConfig
    with pytest.raises(TinyglotError, match="vocab_general_share"):
        DistillTrainConfig(vocab_general_share=share).validate()


@pytest.mark.parametrize("share", [-0.1, 1.5])
def test_vocab_char_share_out_of_range_is_refused(share):
    from tinyglot.trainloop import TrainSettings

    with pytest.raises(TinyglotError, match="vocab_char_share"):
        TrainSettings(vocab_char_share=share).validate()


def test_not_a_model_file(tmp_path):
    bad = tmp_path / "tokenizer.model"
    bad.write_bytes(b"garbage")
    with pytest.raises(TinyglotError, match="not a SentencePiece model"):
        Tokenizer.load(bad)
    with pytest.raises(TinyglotError, match="not found"):
        Tokenizer.load(tmp_path / "missing.model")


# Strings whose ids a stock SentencePiece runtime must reproduce with no Python pre-processing:
# case folding (Turkish dotted/dotless i, German ß and ẞ, Greek final sigma), full-width forms,
# emoji with modifiers and ZWJ, mixed scripts, tabs, NBSP, zero-width and ideographic spaces,
# language tokens inside the text, control characters, empty and whitespace-only strings.
TRICKY = [
    "", " ", "\t\n", "\u200b", "\u3000\u00a0",
    "HELLO World", "İSTANBUL ıstanbul Iİıi", "STRASSE Straße GROẞ", "ΟΔΥΣΣΕΥΣ Οδυσσεύς",
    "ＦＵＬＬ　ｗｉｄｔｈ　１２３", "ｶﾀｶﾅ ﾊﾝｶｸ", "emoji 😀👍🏽 👨‍👩‍👧 ok", "日本語とEnglishとРусский混在",
    "tab\there\u00a0nbsp\u200bzero\u2009thin  double   spaces", "line\r\nbreak\u2028sep",
    "<2de> Hallo <2fr>Bonjour", "ﬁ ligature ℌ ① ㍻", "e\u0301 vs é", "ctrl\x00\x07chars",
    "a" * 500, "word " * 300, " " * 2000 + "tail after many spaces",
]


def test_ids_equal_a_bare_sentencepiece_runtime(tokenizer):
    """tinyglot's ids are exactly a stock SentencePieceProcessor's, cut to max_len."""
    import sentencepiece as spm

    bare = spm.SentencePieceProcessor()
    bare.LoadFromSerializedProto(tokenizer.proto)
    for max_len in (8, 48, 4096):
        for s in TRICKY:
            want = bare.EncodeAsIds(s)[:max_len]
            assert tokenizer.tokenize(s)[:max_len] == want, s
            if want:
                assert tokenizer.encode_ids([s], max_len)[0] == want, s
                batch = tokenizer.encode([s, "x"], max_len)
                assert batch.ids[0, : len(want)].tolist() == want and batch.mask[0].sum() == len(want)
            else:
                with pytest.raises(TinyglotError, match="empty"):
                    tokenizer.encode_ids([s], max_len)
    # case folding lives in the model file: upper-case text gives the lower-case ids
    assert tokenizer.folds_case
    assert tokenizer.tokenize("STRASSE") == tokenizer.tokenize("strasse")
    assert tokenizer.tokenize("GROẞ") == tokenizer.tokenize("groß")  # capital sharp s folds to ß, not ss


def test_no_character_cut_before_sentencepiece(tokenizer):
    # many spaces fold to one in the normaliser: a character cut would lose the words after them
    s = " " * 5000 + "open the file"
    assert tokenizer.encode_ids([s], 8)[0] == tokenizer.tokenize("open the file")[:8]


def test_case_sensitive_vocabulary_does_not_fold(small_pairs):
    sentences = [s for p in small_pairs[:400] for s in (p.x, p.en)]
    tok = Tokenizer.train(sentences, ["de", "en"], vocab_size=600, lowercase=False)
    assert not tok.folds_case


def test_equally_likely_segmentations_are_a_viterbi_tie_not_a_mismatch():
    """onnxruntime-extensions' SentencePiece breaks a tie of equal-score segmentations differently from
    the sentencepiece library ("edit...." -> "." "..." or "..." "."); the parity gates accept exactly that."""
    from tinyglot.released import released_folder

    tok = Tokenizer.load(released_folder("tinyglot-small") / "onnx-text" / "tokenizer.model")
    ours = tok.tokenize("choose edit....")
    dot, dots = tok.token_id("."), tok.token_id("...")
    assert sorted(ours[-2:]) == sorted([dot, dots])  # "." + "..." in one order or the other
    theirs = ours[:-2] + ours[-2:][::-1]
    assert tok.score(ours) == pytest.approx(tok.score(theirs)) and tok.equally_likely(ours, theirs)
    assert not tok.equally_likely(ours, ours[:-1])  # another text
    four_dots = ours[:-2] + [dot] * 4  # the same text, a less likely segmentation: a real mismatch
    assert tok.decode(four_dots) == tok.decode(ours) and not tok.equally_likely(ours, four_dots)


def test_a_vocabulary_is_learnt_once_for_a_sample_and_reused(small_pairs, tmp_path, monkeypatch):
    """train_vocabulary with a cache folder: the second run on the same sample and settings loads the
    model the first one kept (SentencePiece is not called; the same pieces); another seed, which draws
    another sample, learns its own; a damaged cache file is learnt again and replaced."""
    import sentencepiece

    train = group_by_lang(small_pairs)
    kw = {"vocab_size": 2000, "max_sentences": 400, "char_share": 0.125}
    first = train_vocabulary(train, **kw, seed=0, cache_dir=tmp_path)
    kept = list(tmp_path.glob("vocabulary-*.model"))
    assert len(kept) == 1 and Tokenizer.load(kept[0]).sha256 == first.sha256
    assert first.sha256 == train_vocabulary(train, **kw, seed=0).sha256  # the cache changes nothing learnt

    trained = []
    real = sentencepiece.SentencePieceTrainer.train
    monkeypatch.setattr(sentencepiece.SentencePieceTrainer, "train",
                        lambda *a, **k: trained.append(1) or real(*a, **k))
    assert train_vocabulary(train, **kw, seed=0, cache_dir=tmp_path).sha256 == first.sha256
    assert trained == []
    other = train_vocabulary(train, **kw, seed=1, cache_dir=tmp_path)
    assert trained == [1] and len(list(tmp_path.glob("vocabulary-*.model"))) == 2
    assert other.sha256 != first.sha256

    kept[0].write_bytes(b"not a model")
    assert train_vocabulary(train, **kw, seed=0, cache_dir=tmp_path).sha256 == first.sha256
    assert trained == [1, 1] and Tokenizer.load(kept[0]).sha256 == first.sha256
