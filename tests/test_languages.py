"""Tests for tinyglot.languages: canonical codes, names, and codes from file names."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from tinyglot.errors import TinyglotError, UnknownLanguageError
from tinyglot.languages import KNOWN_LANGUAGES, lang_from_filename, language_name, normalize_lang

SHARED_DATA = Path(__file__).resolve().parents[2] / "shared" / "data"

# Every language code of the shipped training data (131 languages).
TRAIN_CODES = [
    "ab", "af", "am", "ar", "ast", "awa", "az", "ba", "bar", "be", "ber", "bg", "bn", "bo", "br", "bs", "ca", "cak",
    "ckb", "crh", "cs", "cv", "cy", "da", "de", "dsb", "dv", "dz", "el", "eo", "es", "et", "eu", "fa", "fi", "fil",
    "fo", "fr", "fur", "fy", "ga", "gd", "gl", "gu", "gug", "he", "hi", "hr", "hsb", "ht", "hu", "hy", "ia", "id",
    "ie", "ig", "io", "is", "it", "ja", "ka", "kab", "kk", "km", "kmr", "kn", "ko", "ksh", "ku", "kw", "ky", "lb",
    "ln", "lo", "lt", "lv", "lzh", "mi", "mk", "ml", "mn", "mr", "mrh", "ms", "my", "nb", "ne", "nl", "nn", "no",
    "oc", "om", "os", "pa", "peo", "pl", "ps", "pt", "ro", "ru", "rw", "sc", "si", "sk", "skr", "sl", "sq", "sr",
    "sv", "sw", "ta", "te", "tet", "tg", "th", "tk", "tl", "tlh", "tok", "tr", "tt", "tzm", "udm", "ug", "uk", "ur",
    "uz", "vi", "yue", "zgh", "zh"
]


@pytest.mark.parametrize(
    ("code", "expected"),
    [
        ("de", "de"), ("DE", "de"), ("deu", "de"), ("ger", "de"), ("fre", "fr"), ("fra", "fr"),
        ("chi", "zh"), ("zho", "zh"), ("cze", "cs"), ("wel", "cy"),
        ("pt_BR", "pt"), ("pt-BR", "pt"), ("pt-br", "pt"), ("por", "pt"),
        ("zh-CN", "zh"), ("zh_Hans", "zh"), ("zh-TW", "zh"), ("zh-Hant-TW", "zh"),
        ("sr@latin", "sr"), ("en_US.UTF-8", "en"), ("ca@valencia", "ca"), ("es-419", "es"),
        ("nob", "nb"), ("nb", "nb"), ("no", "no"), ("nn", "nn"),
        ("cmn", "zh"), ("pes", "fa"), ("iw", "he"), ("  it ", "it"), ("German", "de"),
        ("fil", "fil"), ("tl", "tl"), ("tgl", "tl"), ("yue", "yue"), ("ckb", "ckb"),
    ],
)
def test_normalize_lang(code: str, expected: str) -> None:
    assert normalize_lang(code) == expected


def test_table_covers_iso_639_1() -> None:
    two_letter = {c for c in KNOWN_LANGUAGES if len(c) == 2}
    assert len(two_letter) >= 183
    assert all(normalize_lang(c) == c for c in KNOWN_LANGUAGES)


@pytest.mark.parametrize("code", TRAIN_CODES)
def test_train_codes_are_canonical(code: str) -> None:
    assert code in KNOWN_LANGUAGES
    assert normalize_lang(code) == code


def test_real_train_codes_are_canonical() -> None:
    """The codes actually in the shared training data (first 20,000 lines) are canonical."""
    path = SHARED_DATA / "train.jsonl.gz"
    if not path.exists():
        pytest.skip(f"{path} not present")
    with gzip.open(path, "rt", encoding="utf-8") as f:
        codes = {json.loads(line)["lang"] for _, line in zip(range(20_000), f, strict=False)}
    assert codes and all(normalize_lang(c) == c for c in codes)


def test_real_test_file_stems_normalise() -> None:
    files = sorted(SHARED_DATA.glob("test/*/*.tsv"))
    if not files:
        pytest.skip(f"{SHARED_DATA / 'test'} not present")
    for f in files:
        assert lang_from_filename(f) == normalize_lang(f.name.split(".")[0]) != "en"


@pytest.mark.parametrize("code", ["xx", "english-ish", "q", "123", "C"])
def test_unknown_code(code: str) -> None:
    with pytest.raises(UnknownLanguageError) as info:
        normalize_lang(code)
    message = str(info.value)
    assert repr(code) in message
    assert "languages)" in message and "de, deu, pt_BR" in message  # known codes, and the fix
    assert isinstance(info.value, TinyglotError)


@pytest.mark.parametrize("code", ["", "   "])
def test_empty_code(code: str) -> None:
    with pytest.raises(UnknownLanguageError, match="empty language code"):
        normalize_lang(code)


def test_language_name() -> None:
    assert language_name("de") == "German"
    assert language_name("pt_BR") == "Portuguese"
    assert language_name("ast") == "Asturian"
    assert language_name("nb") == "Norwegian Bokmål"


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("de.tsv", "de"), ("pt-BR.tsv", "pt"), ("pt_BR.tsv", "pt"), ("zh_Hans.tsv", "zh"),
        ("zh-CN.tsv.gz", "zh"), ("tatoeba.deu-eng.deu", "de"), ("tatoeba.deu-eng.eng", "de"),
        ("corpus.de-en.tsv", "de"), ("en-de.tsv", "de"), ("en-pt_BR.tsv", "pt"),
        ("corpus.de", "de"), ("data/test/pretix/ko.tsv", "ko"),
        ("locale/de/LC_MESSAGES/django.po", "de"), ("fr.po", "fr"),
        ("train.jsonl.gz", None), ("data.tsv", None), ("README", None),
    ],
)
def test_lang_from_filename(name: str, expected: str | None) -> None:
    assert lang_from_filename(name) == expected
