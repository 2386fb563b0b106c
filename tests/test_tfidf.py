"""Tests of the character n-gram TF-IDF baseline encoder."""

from __future__ import annotations

import numpy as np
import pytest

from tinyglot.encoder import Encoder
from tinyglot.errors import TinyglotError
from tinyglot.evaluation import bitext_p_at_1
from tinyglot.evaluation.tfidf import TfidfEncoder

# Real German/English pairs from the LibreOffice help test set (MPL-2.0).
DE_EN = [
    ("foldername: Der Pfad, mit dem name kombiniert wird. Der angegebene Pfad muss kein vorhandener Ordner sein.",
     "foldername: The path with which name will be combined. "
     "The specified path does not need to be an existing folder."),
    ("Verteilen von XML-Filtern als Package", "Distributing An XML Filter As Package"),
    ("Suchen und ersetzen in Writer", "Finding and Replacing in Writer"),
    ("Wählen Sie Format – Achse – X-Achse… / Sekundäre X-Achse… / Z-Achse… / Alle Achsen… (Diagramme)",
     "Choose Format - Axis - X Axis/Secondary X Axis/Z Axis/All Axes (Charts)"),
    ("RENDITEDIS(Abrechnung; Fälligkeit; Kurs; Rückzahlung [; Basis])",
     "YIELDDISC(Settlement; Maturity; Price; Redemption [; Basis])"),
    ('Ermöglicht den Zugriff auf die Beschreibungseigenschaft des Dokuments (auch bekannt als "Kommentare").',
     'Gives access to the Description property of the document (also known as "Comments")'),
    ('Um eine Liste aller unterstützten Präfixe in einer bestimmten Sprache zu erhalten, rufen Sie Number2Text '
     'mit dem speziellen Argument "help" auf, wie im folgenden Beispiel gezeigt:',
     'To get a list of all supported prefixes in a given language, call Number2Text with the special "help" '
     'argument, as shown in the example below:'),
    ("Sie können Filter verwenden, um unerwünschte Daten aus der Pivot-Tabelle zu entfernen.",
     "You can use filters to remove unwanted data from a pivot table."),
]


@pytest.fixture
def de_en() -> tuple[list[str], list[str]]:
    return [de for de, _ in DE_EN], [en for _, en in DE_EN]


def test_is_an_encoder_with_unit_float32_rows(de_en) -> None:
    enc = TfidfEncoder()
    assert isinstance(enc, Encoder) and enc.name == "tfidf"
    out = enc.encode(de_en[0])
    assert out.shape == (len(DE_EN), 2**14) and out.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(out, axis=1), 1.0, rtol=1e-5)


def test_identical_sentences_have_cosine_one() -> None:
    enc = TfidfEncoder().fit(["a first sentence", "another one"])
    a, b, c = enc.encode(["Open the Tools menu.", "Open the Tools menu.", "Something else entirely"])
    assert float(a @ b) == pytest.approx(1.0, abs=1e-6)
    assert float(a @ c) < 0.9


def test_lowercasing() -> None:
    a, b = TfidfEncoder().encode(["PIVOT TABLE", "pivot table"])
    assert float(a @ b) == pytest.approx(1.0, abs=1e-6)


def test_p_at_1_on_real_german_pairs(de_en) -> None:
    # Shared names, numbers and cognates (Writer, XML, Number2Text, Basis...) carry the baseline.
    de, en = de_en
    enc = TfidfEncoder().fit(de + en)
    de2en, en2de = bitext_p_at_1(enc.encode(de), enc.encode(en))
    assert de2en >= 0.75 and en2de >= 0.75


def test_deterministic_and_batch_independent(de_en) -> None:
    de, en = de_en
    a = TfidfEncoder().fit(en).encode(de, batch_size=3)
    b = TfidfEncoder().fit(en).encode(de, batch_size=64)
    np.testing.assert_array_equal(a, b)


def test_fit_changes_weights_unfitted_is_plain_tf() -> None:
    sents = ["the cat sat", "the dog ran", "the bird flew"]
    plain = TfidfEncoder()
    fitted = TfidfEncoder().fit(sents)
    assert not plain.fitted and fitted.fitted
    x = plain.encode(["the cat sat"])
    y = fitted.encode(["the cat sat"])
    assert not np.allclose(x, y)  # IDF down-weights the n-grams of "the" shared by all sentences
    assert float(x[0] @ y[0]) > 0.5


def test_unfitted_weights_by_hand() -> None:
    # "ab" with char_wb n-grams (1, 4) on " ab ": " ", "a", "b", " " again ... count them:
    # 1-grams: " " x2, "a", "b"; 2-grams: " a", "ab", "b "; 3-grams: " ab", "ab "; 4-grams: " ab ".
    # Sublinear TF: " " -> 1 + ln 2, the other 8 n-grams -> 1.
    row = TfidfEncoder(n_features=2**20).encode(["ab"])[0]
    values = np.sort(row[row > 0])
    expected = np.sort(np.array([1 + np.log(2)] + [1.0] * 8))
    np.testing.assert_allclose(values, expected / np.linalg.norm(expected), rtol=1e-6)


def test_empty_sentence_is_a_zero_row() -> None:
    out = TfidfEncoder().encode(["", "text"])
    assert not out[0].any() and out[1].any()
    assert TfidfEncoder().encode([]).shape == (0, 2**14)


def test_bad_input_raises() -> None:
    with pytest.raises(TinyglotError):
        TfidfEncoder().fit([])
    with pytest.raises(TinyglotError, match="position 1"):
        TfidfEncoder().encode(["ok", None])  # type: ignore[list-item]
    with pytest.raises(TinyglotError):
        TfidfEncoder(ngram_range=(3, 2))
