"""Tests for tinyglot.data.readers on real files (fixtures and files written to tmp_path)."""

from __future__ import annotations

import gzip
import itertools
import logging
import shutil
from pathlib import Path

import pytest

from tinyglot.data import (
    Pair,
    ReadStats,
    detect_format,
    read_corpus,
    read_jsonl,
    read_moses,
    read_po,
    read_tatoeba,
    read_tmx,
    read_tsv,
)
from tinyglot.errors import DataError

FIXTURES = Path(__file__).parent / "fixtures" / "data"
SHARED_DATA = Path(__file__).resolve().parents[2] / "shared" / "data"


# --------------------------------------------------------------------------------- TSV


def test_read_tsv_infers_lang_and_skips_empty_sides() -> None:
    stats = ReadStats()
    pairs = list(read_tsv(FIXTURES / "pt-BR.tsv", stats=stats))
    assert pairs == [
        Pair("pt", "Bom dia.", "Good morning."),
        Pair("pt", "Muito obrigado.", "Thank you very much."),
        Pair("pt", "Até amanhã.", "See you tomorrow."),
    ]
    assert stats.pairs == 3 and stats.files == 1
    assert stats.skipped_empty == 1  # "Where is it?<TAB> "


def test_read_tsv_translation_first_and_explicit_lang(tmp_path: Path) -> None:
    path = tmp_path / "pairs.tsv"
    path.write_text("  Hallo Welt \tHello world\n", encoding="utf-8")
    assert list(read_tsv(path, lang="deu", english_first=False)) == [
        Pair("de", "Hallo Welt", "Hello world")
    ]


def test_read_tsv_gz(tmp_path: Path) -> None:
    path = tmp_path / "zh-CN.tsv.gz"
    with gzip.open(path, "wt", encoding="utf-8") as f:
        f.write("Open\t打开\r\nClose\t关闭\r\n")
    assert [(p.lang, p.x, p.en) for p in read_corpus(path)] == [
        ("zh", "打开", "Open"), ("zh", "关闭", "Close")
    ]


def test_tsv_wrong_column_count_names_file_and_line() -> None:
    path = FIXTURES / "malformed.de.tsv"
    with pytest.raises(DataError) as info:
        list(read_tsv(path))
    err = info.value
    assert err.line == 2 and err.path == str(path)
    assert f"{path}:2" in str(err)
    assert "expected 2 tab-separated columns, found 3" in str(err)
    assert "fix:" in str(err)


def test_tsv_without_language_asks_for_lang() -> None:
    with pytest.raises(DataError, match="--lang"):
        read_tsv(FIXTURES / "noname.tsv")
    assert len(list(read_tsv(FIXTURES / "noname.tsv", lang="es"))) == 1


def test_latin1_file_names_line_and_iconv() -> None:
    path = FIXTURES / "latin1.fr.tsv"
    with pytest.raises(DataError) as info:
        list(read_tsv(path))
    assert info.value.line == 2
    assert f"{path}:2" in str(info.value)
    assert "not valid UTF-8" in str(info.value)
    assert "iconv -f latin1 -t utf-8" in str(info.value)


def test_long_line_is_skipped_and_counted(tmp_path: Path) -> None:
    path = tmp_path / "de.tsv"
    long_line = "Long English " + "x" * 200_000 + "\tLanger deutscher Text\n"
    path.write_text("Hello\tHallo\n" + long_line + "Bye\tTschüss\n", encoding="utf-8")
    stats = ReadStats()
    pairs = list(read_tsv(path, stats=stats))
    assert [p.en for p in pairs] == ["Hello", "Bye"]
    assert stats.skipped_too_long == 1
    # the limit counts characters, not bytes: "Bye<TAB>Tschüss" is 11 characters, 12 bytes
    stats = ReadStats()
    assert [p.x for p in read_tsv(path, max_line_chars=11, stats=stats)] == ["Hallo", "Tschüss"]
    assert stats.skipped_too_long == 1
    with pytest.raises(DataError, match="all 3 entries were skipped"):
        list(read_tsv(path, max_line_chars=10))


def test_long_line_in_moses_keeps_alignment(tmp_path: Path) -> None:
    (tmp_path / "c.de").write_text("eins\n" + "ä" * 5000 + "\ndrei\n", encoding="utf-8")
    (tmp_path / "c.en").write_text("one\ntwo\nthree\n", encoding="utf-8")
    stats = ReadStats()
    pairs = list(read_corpus(tmp_path / "c.de", max_line_chars=1000, stats=stats))
    assert [(p.x, p.en) for p in pairs] == [("eins", "one"), ("drei", "three")]
    assert stats.skipped_too_long == 1


def test_empty_file_is_an_error() -> None:
    path = FIXTURES / "empty.de.tsv"
    with pytest.raises(DataError, match="no pairs"):
        list(read_corpus(path))


def test_file_of_only_skipped_pairs_is_an_error(tmp_path: Path) -> None:
    path = tmp_path / "de.tsv"
    path.write_text("Hello\t \n\tHallo\n", encoding="utf-8")
    with pytest.raises(DataError, match="all 2 entries were skipped"):
        list(read_tsv(path))


def test_missing_file() -> None:
    with pytest.raises(DataError, match="file not found") as info:
        read_corpus(FIXTURES / "does-not-exist.de.tsv")
    assert "fix:" in str(info.value)
    with pytest.raises(DataError, match="file not found"):
        read_tsv(FIXTURES / "nope.de.tsv")


# ------------------------------------------------------------------------ Moses, Tatoeba


def test_read_moses() -> None:
    pairs = list(read_moses(FIXTURES / "corpus.de", FIXTURES / "corpus.en"))
    assert pairs[0] == Pair("de", "Guten Morgen!", "Good morning!")
    assert len(pairs) == 3
    assert list(read_corpus(FIXTURES / "corpus.de")) == pairs


def test_moses_different_lengths() -> None:
    with pytest.raises(DataError) as info:
        list(read_moses(FIXTURES / "short.de", FIXTURES / "short.en"))
    message = str(info.value)
    assert "short.en" in message and "short.de" in message
    assert info.value.line == 3 and "has 2 lines" in message


def test_moses_english_side_is_refused() -> None:
    with pytest.raises(DataError, match="non-English file"):
        read_corpus(FIXTURES / "corpus.en")


@pytest.mark.parametrize("name", ["tatoeba.deu-eng.deu", "tatoeba.deu-eng.eng", "tatoeba.deu-eng"])
def test_read_tatoeba(name: str) -> None:
    expected = [
        Pair("de", "Ich habe Hunger.", "I am hungry.", "tatoeba"),
        Pair("de", "Das Wetter ist schön.", "The weather is nice.", "tatoeba"),
    ]
    assert list(read_tatoeba(FIXTURES / name)) == expected
    assert list(read_corpus(FIXTURES / name)) == expected


# -------------------------------------------------------------------------------- JSONL


def test_read_jsonl() -> None:
    pairs = list(read_jsonl(FIXTURES / "pairs.jsonl"))
    assert pairs[0] == Pair("de", "Text suchen", "Find Text", "libreoffice-help", "MPL-2.0")
    assert [p.lang for p in pairs] == ["de", "pt", "zh"]
    assert pairs[1].src == "" and pairs[1].license == ""
    stats = ReadStats()
    assert [p.x for p in read_jsonl(FIXTURES / "pairs.jsonl", lang="zh_Hans", stats=stats)] == [
        "打开"
    ]
    assert stats.skipped_other_lang == 2


def test_jsonl_malformed_json_names_line() -> None:
    with pytest.raises(DataError) as info:
        list(read_jsonl(FIXTURES / "broken.jsonl"))
    assert info.value.line == 2 and "malformed JSON" in str(info.value)
    assert "broken.jsonl:2" in str(info.value)


def test_jsonl_missing_key_names_line() -> None:
    with pytest.raises(DataError) as info:
        list(read_jsonl(FIXTURES / "missing_key.jsonl"))
    assert info.value.line == 2 and "missing key(s) en" in str(info.value)


def test_jsonl_unknown_language_names_line(tmp_path: Path) -> None:
    path = tmp_path / "x.jsonl"
    path.write_text('{"lang": "de", "x": "Ja", "en": "Yes"}\n{"lang": "zz", "x": "a", "en": "b"}\n')
    with pytest.raises(DataError) as info:
        list(read_jsonl(path))
    assert info.value.line == 2 and "'zz'" in str(info.value)


def test_real_train_data_first_1000_lines() -> None:
    path = SHARED_DATA / "train.jsonl.gz"
    if not path.exists():
        pytest.skip(f"{path} not present")
    pairs = list(itertools.islice(read_corpus(path), 1000))
    assert len(pairs) == 1000
    assert all(p.x and p.en and p.src and p.license for p in pairs)
    assert all(p.lang == p.lang.lower() and 2 <= len(p.lang) <= 3 for p in pairs)


def test_real_test_sets_read() -> None:
    folder = SHARED_DATA / "test" / "pretix"
    if not folder.is_dir():
        pytest.skip(f"{folder} not present")
    langs = {p.lang for p in itertools.islice(read_corpus(folder), 5000)}
    assert {"de", "es", "fr"} <= langs


# ----------------------------------------------------------------------------------- PO


def test_read_po() -> None:
    stats = ReadStats()
    pairs = list(read_po(FIXTURES / "de.po", stats=stats))
    by_en = {p.en: p.x for p in pairs}
    assert all(p.lang == "de" for p in pairs)
    assert by_en["Open a file"] == "Datei öffnen"
    assert by_en["Save"] == "Speichern"  # msgctxt entry
    assert by_en[
        "The document has unsaved changes. Do you want to save them before closing?"
    ] == (
        "Das Dokument enthält ungespeicherte Änderungen. "
        "Möchten Sie sie vor dem Schließen speichern?"
    )
    assert by_en['Press "Continue" to go on.'] == "Drücken Sie „Weiter“, um fortzufahren."
    assert by_en["Path:\t%s\\n"] == "Pfad:\t%s\\n"  # \t is a tab, \\n a backslash and n
    assert by_en["First line\nSecond line"] == "Erste Zeile\nZweite Zeile"
    assert by_en["%d file was deleted"] == "%d Datei wurde gelöscht"  # msgstr[0]
    assert "Delete all files" not in by_en  # fuzzy
    assert "Empty the trash" not in by_en  # untranslated
    assert not any("bsolete" in en for en in by_en)  # #~ entries
    assert "" not in by_en  # header
    assert len(pairs) == 7
    assert stats.skipped_fuzzy == 1 and stats.skipped_untranslated == 1


def test_po_lang_from_header_beats_file_name(tmp_path: Path) -> None:
    path = tmp_path / "de.po"
    text = (FIXTURES / "de.po").read_text(encoding="utf-8")
    text = text.replace('"Language: de\\n"', '"Language: pt_BR\\n"')
    path.write_text(text, encoding="utf-8")
    assert {p.lang for p in read_po(path)} == {"pt"}
    assert {p.lang for p in read_po(path, lang="fr")} == {"fr"}


def test_po_lang_from_lc_messages_path(tmp_path: Path) -> None:
    folder = tmp_path / "locale" / "nb" / "LC_MESSAGES"
    folder.mkdir(parents=True)
    (folder / "app.po").write_text(
        'msgid ""\nmsgstr "Content-Type: text/plain; charset=UTF-8\\n"\n\n'
        'msgid "Yes"\nmsgstr "Ja"\n', encoding="utf-8",
    )
    assert list(read_corpus(folder / "app.po")) == [Pair("nb", "Ja", "Yes")]


def test_po_malformed_line(tmp_path: Path) -> None:
    path = tmp_path / "de.po"
    path.write_text('msgid "Yes"\nmsgstr "Ja"\n\nmsgid "No\nmsgstr "Nein"\n', encoding="utf-8")
    with pytest.raises(DataError) as info:
        list(read_po(path))
    assert info.value.line == 4 and "malformed string" in str(info.value)


# ---------------------------------------------------------------------------------- TMX


def test_read_tmx() -> None:
    pairs = list(read_tmx(FIXTURES / "sample.tmx"))
    assert pairs == [
        Pair("fr", "Le chat dort sur le canapé.", "The cat sleeps on the sofa."),
        Pair("fr", "Il pleut depuis trois jours.", "It has been raining for three days."),
        Pair("fr", "Où est la gare ?", "Where is the station?"),
    ]
    with pytest.raises(DataError, match="no pairs"):
        list(read_tmx(FIXTURES / "sample.tmx", lang="de"))


def test_tmx_picks_requested_language(tmp_path: Path) -> None:
    path = tmp_path / "multi.tmx.gz"
    with gzip.open(path, "wt", encoding="utf-8") as f:
        f.write(
            '<tmx version="1.4"><header/><body>'
            '<tu><tuv xml:lang="de"><seg>Hallo</seg></tuv><tuv xml:lang="en"><seg>Hello</seg>'
            '</tuv><tuv xml:lang="es"><seg>Hola</seg></tuv></tu>'
            '<tu><tuv xml:lang="de"><seg>Nur Deutsch</seg></tuv>'
            '<tuv xml:lang="es"><seg>Solo español</seg></tuv></tu>'
            "</body></tmx>"
        )
    stats = ReadStats()
    assert list(read_corpus(path, lang="es", stats=stats)) == [Pair("es", "Hola", "Hello")]
    assert stats.skipped_no_english == 1
    assert [p.lang for p in read_tmx(path)] == ["de", "es"]


def test_tmx_malformed_xml(tmp_path: Path) -> None:
    path = tmp_path / "bad.tmx"
    path.write_text('<tmx><body>\n<tu><tuv xml:lang="en"><seg>Hi</seg></tuv>\n</body></tmx>\n')
    with pytest.raises(DataError, match="malformed XML") as info:
        list(read_tmx(path))
    assert info.value.line == 3


# ----------------------------------------------------------------------------- dispatch


@pytest.mark.parametrize(
    ("name", "fmt"),
    [
        ("de.tsv", "tsv"), ("x.tsv.gz", "tsv"), ("train.jsonl.gz", "jsonl"), ("de.po", "po"),
        ("opus.tmx.gz", "tmx"), ("tatoeba.deu-eng.deu", "tatoeba"), ("corpus.de", "moses"),
        ("corpus.en", None), ("notes.txt", None),
    ],
)
def test_detect_format(name: str, fmt: str | None) -> None:
    assert detect_format(FIXTURES / name) == fmt


def test_unknown_format_lists_supported(tmp_path: Path) -> None:
    path = tmp_path / "notes.csv"
    path.write_text("a,b\n")
    with pytest.raises(DataError) as info:
        read_corpus(path)
    for fmt in ("TSV", "JSON lines", "gettext", "TMX", "Tatoeba", "Moses"):
        assert fmt in str(info.value)


def test_read_corpus_directory(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    for name in ("pt-BR.tsv", "corpus.de", "corpus.en", "tatoeba.deu-eng.deu",
                 "tatoeba.deu-eng.eng", "de.po", "sample.tmx", "pairs.jsonl"):
        shutil.copy(FIXTURES / name, tmp_path / name)
    (tmp_path / "README.md").write_text("not data\n")
    stats = ReadStats()
    with caplog.at_level(logging.INFO, logger="tinyglot.data"):
        pairs = list(read_corpus(tmp_path, stats=stats))
    assert stats.files == 6
    assert len(pairs) == 3 + 7 + 3 + 3 + 3 + 2 == stats.pairs
    assert pairs[0].x == "Guten Morgen!"  # corpus.de sorts first
    assert "read 21 pairs from 6 file(s)" in caplog.text


def test_read_corpus_empty_directory(tmp_path: Path) -> None:
    with pytest.raises(DataError, match="no recognised data files"):
        read_corpus(tmp_path)
