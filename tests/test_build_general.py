"""tinyglot.data.general, ``tinyglot data general``: extraction, cleaning, language codes, the
test/train split, the permissive filter and a deterministic build, on small packages made here (no network)."""

from __future__ import annotations

import gzip
import io
import json
import struct
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest

import tinyglot.data.general as bg
from tinyglot.app.cli import main
from tinyglot.data import PERMISSIVE
from tinyglot.errors import TinyglotError

ROOT = Path(__file__).resolve().parents[1]


# ------------------------------------------------------------------------------------ fixture makers


def mo_bytes(entries: dict[str, str]) -> bytes:
    """A compiled gettext catalog (little-endian, no hash table)."""
    items = sorted(entries.items())
    n = len(items)
    data_start = 28 + 16 * n
    blob, orig, trans = b"", [], []
    for table, index in ((orig, 0), (trans, 1)):
        for item in items:
            text = item[index].encode("utf-8")
            table.append((len(text), data_start + len(blob)))
            blob += text + b"\0"
    head = struct.pack("<7I", 0x950412DE, 0, n, 28, 28 + 8 * n, 0, 0)
    return head + b"".join(struct.pack("<2I", *e) for e in orig + trans) + blob


def deb_bytes(files: dict[str, bytes]) -> bytes:
    """A Debian package: an ar archive holding debian-binary and data.tar.xz."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:xz") as tar:
        for name, content in sorted(files.items()):
            info = tarfile.TarInfo("./" + name)
            info.size = len(content)
            tar.addfile(info, io.BytesIO(content))
    out = b"!<arch>\n"
    for name, body in (("debian-binary", b"2.0\n"), ("data.tar.xz", buf.getvalue())):
        out += f"{name + '/':<16}{0:<12}{0:<6}{0:<6}{100644:<8}{len(body):<10}`\n".encode() + body
        out += b"\n" if len(body) % 2 else b""
    return out


STORY = {  # the test package: narrative lines
    "de": {
        "The old king rode north at dawn with his last knights.":
            "Der alte König ritt im Morgengrauen mit seinen letzten Rittern nach Norden.",
        "We must cross the river before the orcs find us.":
            "Wir müssen den Fluss überqueren, bevor die Orks uns finden.",
        "My brother is alive! He was hiding in the hills all winter.":
            "Mein Bruder lebt! Er hat sich den ganzen Winter in den Hügeln versteckt.",
        "Save game": "Spiel speichern",
        "The bridge is broken, so we walk along the shore.":
            "Die Brücke ist kaputt, also gehen wir am Ufer entlang.",
    },
    "fr": {
        "The old king rode north at dawn with his last knights.":
            "Le vieux roi partit vers le nord à l'aube avec ses derniers chevaliers.",
        "We must cross the river before the orcs find us.":
            "Nous devons traverser la rivière avant que les orques nous trouvent.",
        "The bridge is broken, so we walk along the shore.":
            "Le pont est cassé, alors nous longeons la rive.",
    },
}
GAME = {  # a training package: descriptions, one line also in the story, UI strings and placeholders
    "de": {
        "A sturdy wooden chair with a cushioned seat.": "Ein stabiler Holzstuhl mit gepolstertem Sitz.",
        "The bridge is broken, so we walk along the shore.": "Die Brücke ist kaputt; wir gehen am Ufer entlang.",
        "You found %s coins in the chest.": "Du hast %s Münzen in der Truhe gefunden.",
        "Visit <b>our site</b> for more news.": "Besuche <b>unsere Seite</b> für mehr Neuigkeiten.",
        "Open file": "Datei öffnen",
        "A small red apple from the garden.": "A small red apple from the garden.",
        "Backups should be kept on another machine, far from the original.":  # also in the manual (docs test)
            "Sicherungen sollten auf einem anderen Rechner liegen, fern vom Original.",
    },
    "pt_BR": {"A sturdy wooden chair with a cushioned seat.": "Uma cadeira de madeira robusta com assento acolchoado."},
    "ru": {"A small red apple from the garden.": "Маленькое красное яблоко из сада.",
           "A sturdy wooden chair with a cushioned seat.": "Sturdy chair latin letters only here."},
    "racv": {"A sturdy wooden chair with a cushioned seat.": "Una cadira de fusta."},
}
FORTUNES = (
    "Wer andern eine Grube gräbt, fällt selbst hinein.\n%\n"
    "Der frühe Vogel fängt den Wurm. Aber die zweite Maus bekommt den Käse.\n"
    "\t\t-- Unbekannt\n%\n"
    "Gott sprach: Es werde Licht.\n\t\t-- Genesis 1,3\n%\n"
    "Kurz.\n%\n"
)

def docbook_page(*paras: str) -> bytes:
    """A Publican/DocBook HTML page: a title, then ``<div class="para">`` paragraphs."""
    body = "".join(f'<div class="para">\n\t\t\t{p}\n\t\t</div>' for p in paras)
    return f'<html><body><h2 class="title">1.2. Title</h2>{body}</body></html>'.encode()


MANUAL = {  # the docs test package: a paragraph-parallel manual
    "en-US": ("The system keeps a <code>journal</code> of every change. It can be read at any time.",
              'Run these commands:<div class="itemizedlist"><ul><li>one</li></ul></div>',
              "Backups should be kept on another machine, far from the original.",
              "A disk that fails loses everything that was written on it since the last backup."),
    "de-DE": ("Das System führt ein <code>Journal</code> jeder Änderung. Es kann jederzeit gelesen werden.",
              'Führen Sie diese Befehle aus:<div class="itemizedlist"><ul><li>eins</li></ul></div>',
              "Sicherungen sollten auf einem anderen Rechner liegen, fern vom Original.",
              "Eine Platte, die ausfällt, verliert alles, was seit der letzten Sicherung darauf geschrieben wurde."),
    "fr-FR": ("Le système tient un journal de chaque modification.",),  # another page shape: skipped
}
CHATTER = (
    "categories:\n- greetings\nconversations:\n- - Guten Morgen, wie geht es dir?\n"
    "  - Mir geht es sehr gut, danke.\n- - 'Was machst du heute Abend?'\n  - Ich lese ein Buch.\n"
)


def story_source(**kw: object) -> bg.Source:
    return bg.Source("story", ("story-data",), "narrative", "GPL-2.0+", bg.extract_catalogs,
                     r"\.po$", role="test", **kw)  # type: ignore[arg-type]


def sources() -> tuple[bg.Source, ...]:
    return (
        story_source(),
        bg.Source("manual", ("manual-data",), "documentation", "GPL-2.0+", bg.extract_docbook_html,
                  r"/html/[^/]+/[^/]+\.html$", role="test", test="docs"),
        bg.Source("game", ("game-data",), "descriptions", "CC-BY-SA-3.0", bg.extract_catalogs,
                  r"/LC_MESSAGES/game\.mo$"),
        bg.Source("fortunes-de", ("fortunes-de",), "sayings", "GPL-2.0+", bg.extract_fortunes,
                  r"^usr/share/games/fortunes/", lang="de"),
        bg.Source("chatterbot", ("chatterbot-corpus==1.3.3",), "conversation", "BSD-3-Clause",
                  bg.extract_chatterbot, r"\.yml$", registry="pypi", end_punct=False),
    )


def po_text(entries: dict[str, str]) -> str:
    body = "".join(f'msgid "{en}"\nmsgstr "{x}"\n\n' for en, x in entries.items())
    return 'msgid ""\nmsgstr "Content-Type: text/plain; charset=UTF-8\\n"\n\n' + body


def wordfreq_list(*buckets: list[str]) -> bytes:
    """A wordfreq 'cB' list: a header, then bucket 1, 2, ... (the words of frequency 10 ** (-b / 100))."""
    import msgpack

    return gzip.compress(msgpack.packb([{"format": "cB", "version": 1}, *buckets]))


@pytest.fixture
def cache(tmp_path: Path) -> Path:
    cache = tmp_path / "cache"
    (cache / "debian").mkdir(parents=True)
    (cache / "pypi").mkdir()
    story = {f"usr/share/games/story/{lang}.po": po_text(e).encode() for lang, e in STORY.items()}
    (cache / "debian" / "story-data_1%3a1.0-1_all.deb").write_bytes(deb_bytes(story))
    game = {f"usr/share/locale/{loc}/LC_MESSAGES/game.mo": mo_bytes(e) for loc, e in GAME.items()}
    (cache / "debian" / "game-data_2.0-3_all.deb").write_bytes(deb_bytes(game))
    manual = {f"usr/share/doc/manual/html/{loc}/intro.html": docbook_page(*p) for loc, p in MANUAL.items()}
    (cache / "debian" / "manual-data_3.1_all.deb").write_bytes(deb_bytes(manual))
    fortunes = {"usr/share/games/fortunes/de/sprueche": FORTUNES.encode(),
                "usr/share/games/fortunes/de/sprueche.dat": b"\0\1binary",
                "usr/share/games/fortunes/de/off/witze": "Ein sehr böser Witz über jemanden.\n%\n".encode()}
    (cache / "debian" / "fortunes-de_0.35-1_all.deb").write_bytes(deb_bytes(fortunes))
    with zipfile.ZipFile(cache / "pypi" / "chatterbot_corpus-1.3.3-py2.py3-none-any.whl", "w") as whl:
        whl.writestr("chatterbot_corpus/data/german/greetings.yml", CHATTER)
        whl.writestr("chatterbot_corpus/data/hinglish/greetings.yml", CHATTER)
    lists = {"de": wordfreq_list(["der", "1999", "..."], [], ["haus", "katze"]),
             "el": wordfreq_list(["της", "τησ"], ["κόσμοσ"]), "en": wordfreq_list(["the"]),
             "ja": wordfreq_list(["の"]), "ko": wordfreq_list(["그"])}
    with zipfile.ZipFile(cache / "pypi" / "wordfreq-3.1.1-py3-none-any.whl", "w") as whl:
        for lang, data in lists.items():
            whl.writestr(f"wordfreq/data/small_{lang}.msgpack.gz", data)
        whl.writestr("wordfreq/data/large_de.msgpack.gz", wordfreq_list(["nicht", "gelesen"]))
        whl.writestr("wordfreq-3.1.1.dist-info/METADATA",
                     "Metadata-Version: 2.1\nName: wordfreq\nLicense: Apache-2.0\n")
    return cache


def run(out: Path, cache: Path, **kw: object) -> dict[str, object]:
    options: dict[str, object] = {"sources": sources(), "offline": True, "min_test": 2, "log": lambda _: None}
    options.update(kw)
    return bg.build(out, cache, **options)  # type: ignore[arg-type]


def train_rows(out: Path) -> list[dict[str, str]]:
    with gzip.open(out / "general-train.jsonl.gz", "rt", encoding="utf-8") as fh:
        return [json.loads(line) for line in fh]


# ------------------------------------------------------------------------------------------- parsing


def test_po_parser_skips_header_fuzzy_plural_and_obsolete_entries():
    po = (
        'msgid ""\nmsgstr "Language: de\\n"\n\n'
        'msgctxt "menu"\nmsgid "The long road "\n"home."\nmsgstr "Der lange Weg "\n"nach \\"Hause\\"."\n\n'
        '#, fuzzy\nmsgid "A fuzzy line here."\nmsgstr "Eine unsichere Zeile."\n\n'
        'msgid "One apple."\nmsgid_plural "%d apples."\nmsgstr[0] "Ein Apfel."\nmsgstr[1] "%d Äpfel."\n\n'
        '#~ msgid "Old line."\n#~ msgstr "Alte Zeile."\n\n'
        'msgid "Untranslated line."\nmsgstr ""\n\n'
        'msgid "Last line."\nmsgstr "Letzte Zeile."\n'
    )
    assert list(bg.parse_po(po)) == [("The long road home.", 'Der lange Weg nach "Hause".'),
                                     ("Last line.", "Letzte Zeile.")]


def test_po_parser_is_the_readers_parser_tolerant_of_what_read_po_refuses(tmp_path):
    from tinyglot.data import read_po
    from tinyglot.errors import DataError

    po = ('msgid "Broken string\nmsgstr "x"\nfoo bar\n"stray continuation"\n\n'
          'msgid "Kept line."\nmsgstr "Behaltene\\a Zeile.\\r"\n')
    assert list(bg.parse_po(po)) == [("Kept line.", "Behaltene Zeile.")]  # \a, \r read as nothing here
    path = tmp_path / "de.po"
    path.write_text(po, encoding="utf-8")
    with pytest.raises(DataError, match="malformed string"):
        list(read_po(path))


def test_mo_parser_reads_entries_and_drops_context_header_and_plurals():
    data = mo_bytes({"": "Content-Type: text/plain; charset=UTF-8\n", "ctx\x04Hello there.": "Hallo da.",
                     "One file.\x00%d files.": "Eine Datei.\x00%d Dateien.", "Good night.": "Gute Nacht."})
    assert sorted(bg.parse_mo(data)) == [("Good night.", "Gute Nacht."), ("Hello there.", "Hallo da.")]


@pytest.mark.parametrize(("path", "locale", "code"), [
    ("usr/share/locale/de/LC_MESSAGES/x.mo", "de", "de"),
    ("usr/share/locale/pt_BR/LC_MESSAGES/x.mo", "pt_BR", "pt"),
    ("usr/share/locale/sr@latin/LC_MESSAGES/x.mo", "sr@latin", "sr"),
    ("levels/world1/zh_TW.po", "zh_TW", "zh"),
    ("mods/campaign/languages/data.nb_NO.po", "nb_NO", "nb"),
    ("usr/share/locale/ca@valencia/LC_MESSAGES/x.mo", "ca@valencia", "ca"),
    ("usr/share/locale/racv/LC_MESSAGES/x.mo", "racv", None),
])
def test_locales_map_to_canonical_codes(path, locale, code):
    assert bg.locale_of(path) == locale
    assert bg.canonical(locale) == code
    assert bg.canonical("zh-cn") == "zh"  # debian-reference's file names


def test_sentence_splitting_respects_abbreviations_numbers_and_cjk():
    assert bg.split_sentences("Dr. Smith came home. He was tired!  Then he slept.") == [
        "Dr. Smith came home.", "He was tired!", "Then he slept."]
    assert bg.split_sentences("Am 3. Mai kam er. Sie blieb.") == ["Am 3. Mai kam er.", "Sie blieb."]
    assert bg.split_sentences("J. R. R. Tolkien wrote it. e.g. this one.") == [
        "J. R. R. Tolkien wrote it. e.g. this one."]
    assert bg.split_sentences("他来了。她走了！") == ["他来了。", "她走了！"]


def test_entries_split_only_where_the_sentence_counts_agree():
    assert bg.sentence_pairs("One is here. Two is there.", "Eins ist hier. Zwei ist da.", True) == [
        ("One is here.", "Eins ist hier."), ("Two is there.", "Zwei ist da.")]
    assert bg.sentence_pairs("One is here. Two is there.", "Eins hier, zwei da.", False) == [
        ("One is here. Two is there.", "Eins hier, zwei da.")]
    assert bg.sentence_pairs("One is here. Two is there.", "Eins hier, zwei da.", True) == []


# ------------------------------------------------------------------------------------------ cleaning


@pytest.mark.parametrize(("en", "x", "lang", "kept"), [
    ("The river runs to the sea.", "Der Fluss fließt ins Meer.", "de", True),
    ("The river runs to the sea.", "Река течёт в море.", "ru", True),
    ("The river runs to the sea.", "河流一直流向大海，从不停止。", "zh", True),
    ("The river runs to the sea.", "The river runs to the sea.", "de", False),  # an untranslated copy
    ("The river runs to the sea.", "The river runs to that sea, and you know.", "de", False),  # English
    ("The river runs to the sea.", "Der Fluss fließt ins Meer.", "ru", False),  # the wrong script
    ("The river runs to the sea.", "河流一直流向大海，从不停止。", "ja", False),  # Chinese, not Japanese
    ("You found %s coins here.", "Du hast %s Münzen gefunden.", "de", False),  # a format string
    ("You found {count} coins here.", "Du hast {count} Münzen gefunden.", "de", False),
    ("See <b>the map</b> for more.", "Siehe <b>die Karte</b> für mehr.", "de", False),  # markup
    ("See https://example.org for more.", "Siehe https://example.org für mehr.", "de", False),  # a URL
    ("Save the file", "Datei speichern", "de", False),  # a UI string: no end punctuation
    ("Go home.", "Geh nach Hause.", "de", False),  # too short
    ("The river runs to the sea.", "Fluss.", "de", False),  # an implausible length ratio
])
def test_pairs_are_cleaned(en, x, lang, kept):
    assert bg.clean_pair(en, x, lang, bg.Limits(), end_punct=True) is kept


def test_monolingual_cleaning_checks_length_script_and_language():
    limits = bg.Limits()
    assert bg.clean_mono("Der frühe Vogel fängt den Wurm.", "de", limits)
    assert not bg.clean_mono("Kurz.", "de", limits)
    assert not bg.clean_mono("This is what you would have said there.", "de", limits)  # English in de
    assert not bg.clean_mono("(Jezulin de Ubrique)", "es", limits)  # an attribution
    assert bg.clean_mono("少壮不努力，老大徒悲伤。", "zh", limits)
    assert not bg.clean_mono(" ".join(["Wort"] * 61) + ".", "de", limits)


def test_fortunes_drop_attributions_the_bible_offensive_files_and_binary_index():
    files = {"usr/share/games/fortunes/de/sprueche": FORTUNES.encode(),
             "usr/share/games/fortunes/de/sprueche.dat": b"\xff\xfe",
             "usr/share/games/fortunes/de/off/witze": b"Ein sehr boeser Witz.\n%\n",
             "usr/share/games/fortunes/de/leer.u8": b"",
             "usr/share/games/fortunes/de/leer": b"Ein Satz im Original.\n"}
    source = bg.Source("f", ("fortunes-de",), "", "GPL-2.0+", bg.extract_fortunes, "", lang="de")
    texts = [m.text for m in bg.extract_fortunes(files, source)]
    assert texts == ["Ein Satz im Original.", "Wer andern eine Grube gräbt, fällt selbst hinein.",
                     "Der frühe Vogel fängt den Wurm. Aber die zweite Maus bekommt den Käse.", "Kurz."]


def test_chatterbot_lines_take_the_language_of_their_folder():
    files = {"chatterbot_corpus/data/german/greetings.yml": CHATTER.encode(),
             "chatterbot_corpus/data/traditionalchinese/a.yml": "conversations:\n- - 你好嗎？\n".encode()}
    items = list(bg.extract_chatterbot(files, sources()[3]))
    assert [(bg.canonical(m.locale), m.text) for m in items] == [
        ("de", "Guten Morgen, wie geht es dir?"), ("de", "Mir geht es sehr gut, danke."),
        ("de", "Was machst du heute Abend?"), ("de", "Ich lese ein Buch."), ("zh", "你好嗎？")]


def test_html_books_pair_paragraphs_only_when_the_pages_agree():
    en = b"<p>First <b>one</b> here.</p><p>Second one.</p>"
    files = {"b/ch01.en.html": en, "b/ch01.de.html": b"<p>Erster hier.</p><p>Zweiter.</p>",
             "b/ch01.fr.html": b"<p>Premier.</p>"}
    assert list(bg.extract_html_parallel(files, sources()[0])) == [
        bg.Pair("de", "First one here.", "Erster hier."), bg.Pair("de", "Second one.", "Zweiter.")]


def test_docbook_books_pair_paragraphs_by_position_and_skip_blocks_and_other_shapes():
    files = {f"usr/share/doc/m/html/{loc}/intro.html": docbook_page(*p) for loc, p in MANUAL.items()}
    files["usr/share/doc/m/html/Common_Content/css/x.html"] = b"<div class='para'>not a page</div>"
    got = list(bg.extract_docbook_html(files, sources()[1]))
    assert got == [bg.Pair("de-DE", "The system keeps a journal of every change. It can be read at any time.",
                           "Das System führt ein Journal jeder Änderung. Es kann jederzeit gelesen werden."),
                   bg.Pair("de-DE", MANUAL["en-US"][2], MANUAL["de-DE"][2]),
                   bg.Pair("de-DE", MANUAL["en-US"][3], MANUAL["de-DE"][3])]  # the paragraph with a list: dropped
    assert bg.canonical("de-DE") == "de" and bg.canonical("zh-TW") == "zh"


def test_water_fill_shares_fairly():
    assert bg.water_fill({"a": 10, "b": 100, "c": 100}, 110) == {"a": 10, "b": 50, "c": 50}
    assert bg.water_fill({"a": 10, "b": 20}, 100) == {"a": 10, "b": 20}


# --------------------------------------------------------------------------------------------- build


def test_build_writes_train_test_and_sources(tmp_path, cache):
    out = tmp_path / "out"
    record = run(out, cache)
    rows = train_rows(out)
    assert {tuple(sorted(r)) for r in rows} == {("en", "lang", "license", "src", "x")}
    pairs = {(r["lang"], r["en"], r["x"]) for r in rows if r["en"] != r["x"]}
    assert pairs == {
        ("de", "A sturdy wooden chair with a cushioned seat.", "Ein stabiler Holzstuhl mit gepolstertem Sitz."),
        ("pt", "A sturdy wooden chair with a cushioned seat.",
         "Uma cadeira de madeira robusta com assento acolchoado."),
        ("ru", "A small red apple from the garden.", "Маленькое красное яблоко из сада."),
    }  # no format string, markup, UI label, copy, wrong script, unknown locale (racv) or test sentence
    mono = sorted((r["lang"], r["x"], r["src"], r["license"]) for r in rows if r["en"] == r["x"])
    assert mono == [
        ("de", "Aber die zweite Maus bekommt den Käse.", "fortunes-de", "GPL-2.0+"),
        ("de", "Der frühe Vogel fängt den Wurm.", "fortunes-de", "GPL-2.0+"),
        ("de", "Guten Morgen, wie geht es dir?", "chatterbot", "BSD-3-Clause"),
        ("de", "Ich lese ein Buch.", "chatterbot", "BSD-3-Clause"),
        ("de", "Mir geht es sehr gut, danke.", "chatterbot", "BSD-3-Clause"),
        ("de", "Was machst du heute Abend?", "chatterbot", "BSD-3-Clause"),
        ("de", "Wer andern eine Grube gräbt, fällt selbst hinein.", "fortunes-de", "GPL-2.0+"),
    ]
    de = (out / "general-test" / "de.tsv").read_text(encoding="utf-8").splitlines()
    assert sorted(de) == sorted([
        "The old king rode north at dawn with his last knights.\t"
        "Der alte König ritt im Morgengrauen mit seinen letzten Rittern nach Norden.",
        "We must cross the river before the orcs find us.\tWir müssen den Fluss überqueren, bevor die Orks uns finden.",
        "My brother is alive!\tMein Bruder lebt!",
        "He was hiding in the hills all winter.\tEr hat sich den ganzen Winter in den Hügeln versteckt.",
        "The bridge is broken, so we walk along the shore.\tDie Brücke ist kaputt, also gehen wir am Ufer entlang.",
    ])
    assert sorted(p.name for p in (out / "general-test").iterdir()) == ["de.tsv", "fr.tsv"]
    test_english = {bg.key(line.split("\t")[0]) for p in (out / "general-test").iterdir()
                    for line in p.read_text(encoding="utf-8").splitlines()}
    assert not test_english & {bg.key(r["en"]) for r in rows}  # the story's line in the game was dropped
    saved = json.loads((out / "SOURCES.json").read_text(encoding="utf-8"))
    assert saved == json.loads(json.dumps(record))
    story = saved["sources"][0]
    assert story["role"] == "test" and story["downloads"][0]["version"] == "1:1.0-1"
    assert len(story["downloads"][0]["sha256"]) == 64
    assert saved["train"]["monolingual"] == 7 and saved["train"]["distinct_english"] == 2
    assert saved["tests"]["general"] == {"folder": "general-test", "pairs_per_language": {"de": 5, "fr": 3},
                                         "mean_english_words": 9.25}
    docs = sorted((out / "docs-test" / "de.tsv").read_text(encoding="utf-8").splitlines())
    assert docs == sorted(f"{en}\t{x}" for en, x in [
        ("The system keeps a journal of every change.", "Das System führt ein Journal jeder Änderung."),
        ("It can be read at any time.", "Es kann jederzeit gelesen werden."),
        (MANUAL["en-US"][2], MANUAL["de-DE"][2]), (MANUAL["en-US"][3], MANUAL["de-DE"][3])])
    assert sorted(p.name for p in (out / "docs-test").iterdir()) == ["de.tsv"]  # fr's page has another shape
    assert saved["tests"]["docs"]["pairs_per_language"] == {"de": 4}
    assert saved["sources"][1]["rows_per_language"] == {"de": 4}


def test_build_is_deterministic(tmp_path, cache):
    a, b = tmp_path / "a", tmp_path / "b"
    run(a, cache, min_test=1, max_test=2)
    run(b, cache, min_test=1, max_test=2)
    for name in ("general-train.jsonl.gz", "general-test/de.tsv", "general-test/fr.tsv", "docs-test/de.tsv"):
        assert (a / name).read_bytes() == (b / name).read_bytes(), name
    assert len((a / "general-test/de.tsv").read_text(encoding="utf-8").splitlines()) == 2


def test_caps_limit_english_and_monolingual(tmp_path, cache):
    out = tmp_path / "out"
    record = run(out, cache, max_english=1, max_mono=3)
    rows = train_rows(out)
    assert len({r["en"] for r in rows if r["en"] != r["x"]}) == 1
    assert sum(r["en"] == r["x"] for r in rows) == 3
    assert record["command"]["max_mono"] == 3  # type: ignore[index]
    run(out, cache, max_source_rows=1)
    assert sum(r["src"] == "game" for r in train_rows(out)) == 1


def test_a_tier_keeps_the_training_rows_a_shipped_model_of_it_may_learn_from(tmp_path, cache):
    out = tmp_path / "out"
    record = run(out, cache, tier="permissive")
    rows = train_rows(out)
    assert rows and {r["license"] for r in rows} == {"BSD-3-Clause"}
    assert (out / "general-test" / "de.tsv").is_file()  # the test is not shipped: it stays
    assert record["command"]["tier"] == "permissive"  # type: ignore[index]
    run(out, cache, tier="share-alike")  # and the CC-BY-SA game text, but not the GPL fortunes
    assert {r["license"] for r in train_rows(out)} == {"BSD-3-Clause", "CC-BY-SA-3.0"}
    assert {s["name"]: s["tier"] for s in json.loads((out / "SOURCES.json").read_text())["sources"]}["game"] \
        == "share-alike"
    with pytest.raises(TinyglotError, match="--tier='gpl' is not a licence tier"):
        run(out, cache, tier="gpl")


def test_language_selection_and_test_train_disjoint_packages(tmp_path, cache):
    out = tmp_path / "out"
    run(out, cache, languages=frozenset({"en", "ru", "fr"}))
    assert {r["lang"] for r in train_rows(out)} == {"ru"}
    assert sorted(p.name for p in (out / "general-test").iterdir()) == ["fr.tsv"]
    clash = (*sources(), bg.Source("again", ("story-data",), "", "GPL-2.0+", bg.extract_catalogs, r"\.po$"))
    with pytest.raises(TinyglotError, match="both training and the test"):
        run(tmp_path / "x", cache, sources=clash)


def test_holdout_sentences_stay_out_of_training(tmp_path, cache):
    held = tmp_path / "held" / "de.tsv"
    held.parent.mkdir()
    held.write_text("A sturdy wooden chair with a cushioned seat!\tIrgendwas.\n", encoding="utf-8")
    out = tmp_path / "out"
    run(out, cache, holdout=[held.parent])
    assert "A sturdy wooden chair with a cushioned seat." not in {r["en"] for r in train_rows(out)}


def test_missing_package_in_an_offline_cache_is_a_clear_error(tmp_path, cache):
    (cache / "debian" / "game-data_2.0-3_all.deb").unlink()
    with pytest.raises(TinyglotError, match="game-data") as info:
        run(tmp_path / "out", cache)
    assert "without --offline" in str(info.value)
    assert not (tmp_path / "out" / "general-train.jsonl.gz").exists()


def test_unknown_skip_is_an_error_and_the_command_reports_it(tmp_path, cache, capsys):
    code = main(["data", "general", "--out", str(tmp_path / "o"), "--cache", str(cache), "--offline",
                 "--skip", "nope"])
    assert code == 2
    assert "--skip names no source: nope" in capsys.readouterr().err


def test_a_missing_or_empty_holdout_is_an_error_before_any_download(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("TINYGLOT_HOME", str(tmp_path / "home"))
    (tmp_path / "empty").mkdir()
    for holdout, problem in ((tmp_path / "nope", "not found"), (tmp_path / "empty", "holds no .tsv file")):
        assert main(["data", "general", "--out", str(tmp_path / "o"), "--holdout", str(holdout)]) == 2
        printed = " ".join(capsys.readouterr().err.split())
        assert f"--holdout {holdout} {problem}" in printed and "fix:" in printed and "Traceback" not in printed
    assert not (tmp_path / "o").exists() and not (tmp_path / "home").exists()  # nothing fetched or written


# ------------------------------------------------------------------------------------ the command


def test_data_general_help_names_its_options_and_defaults():
    got = subprocess.run([sys.executable, "-m", "tinyglot", "data", "general", "--help"], capture_output=True,
                         text=True, timeout=300, cwd=ROOT)
    assert got.returncode == 0, got.stderr
    assert got.stdout.startswith("usage: tinyglot data general")
    text = " ".join(got.stdout.split())
    for option in ("--out", "--cache", "--holdout", "--tier", "--commonvoice", "--skip", "--offline", "--languages"):
        assert option in text
    assert "$TINYGLOT_HOME/general," in text and "$TINYGLOT_HOME/general-cache" in text


def test_the_old_script_runs_the_command():
    got = subprocess.run([sys.executable, str(ROOT / "data" / "build_general.py"), "--help"], capture_output=True,
                         text=True, timeout=300)
    assert got.returncode == 0, got.stderr
    assert got.stdout.startswith("usage: tinyglot data general")


def test_offline_with_an_empty_cache_names_the_missing_download_and_the_fix(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("TINYGLOT_HOME", str(tmp_path / "home"))
    assert bg.default_out() == tmp_path / "home" / "general"
    assert bg.default_cache() == tmp_path / "home" / "general-cache"
    first = bg.SOURCES[0].packages[0]  # the test source is read first
    with pytest.raises(TinyglotError) as err:
        bg.build_general(offline=True, log=lambda _: None)
    assert f"no {first}_*.deb in {tmp_path / 'home' / 'general-cache' / 'debian'}" in err.value.problem
    assert err.value.fix and "run once without --offline" in err.value.fix
    assert main(["data", "general", "--offline"]) == 2  # the command: one message, no traceback
    printed = " ".join(capsys.readouterr().err.split())
    assert f"--offline, and no {first}_*.deb" in printed and "fix: run once without --offline" in printed
    assert "Traceback" not in printed
    assert not (tmp_path / "home" / "general").exists()


def test_the_command_builds_into_out_and_reports_what_it_wrote(tmp_path, cache, capsys, monkeypatch):
    monkeypatch.setattr(bg, "SOURCES", sources())
    out = tmp_path / "out"
    assert main(["data", "general", "--out", str(out), "--cache", str(cache), "--offline", "--min-test", "2"]) == 0
    printed = capsys.readouterr().out
    assert "[1/5] story (story-data 1:1.0-1)" in printed
    assert f"wrote {out / 'docs-test'}: 4 pairs in 1 languages" in " ".join(printed.split())
    assert f"wrote {out / 'general-train.jsonl.gz'}" in " ".join(printed.split())
    assert f"wrote {out / 'words'}: word lists of 3 languages" in " ".join(printed.split())  # de, el, ko
    assert train_rows(out) and (out / "general-test" / "de.tsv").exists()
    record = bg.build_general(tmp_path / "again", cache, offline=True, min_test=2, log=lambda _: None)
    assert record["command"]["languages"] == sorted(record["command"]["languages"])  # type: ignore[index]
    for name in ("general-train.jsonl.gz", "general-test/de.tsv"):
        assert (tmp_path / "again" / name).read_bytes() == (out / name).read_bytes()


def test_the_real_sources_keep_test_and_reserved_text_out_of_training():
    test_packages = {p for s in bg.SOURCES if s.role == "test" for p in s.packages}
    train_packages = {p for s in bg.SOURCES if s.role == "train" for p in s.packages}
    assert test_packages and not test_packages & train_packages
    assert not any(word in p for p in train_packages | test_packages for word in ("gnome", "bible", "biblia"))
    assert len({s.name for s in bg.SOURCES}) == len(bg.SOURCES)
    assert all(s.permissive == (s.license in PERMISSIVE) for s in bg.SOURCES)
    assert {"mimesis", "spacy-examples", "chatterbot"} <= {s.name for s in bg.SOURCES if s.permissive}
    assert not any(s.permissive for s in bg.SOURCES if "SA" in s.license or "GPL" in s.license)
    assert not any("wesnoth" in p for s in bg.SOURCES if s.role == "train" for p in s.packages)


def test_permissive_uses_the_shared_list():
    assert bg.Source("x", ("x",), "", "MIT", bg.extract_catalogs, "").permissive
    assert not bg.Source("y", ("y",), "", "CC-BY-SA-3.0", bg.extract_catalogs, "").permissive
    assert all(bg.Source("z", ("z",), "", name, bg.extract_catalogs, "").permissive for name in PERMISSIVE)


# ------------------------------------------------------------------------------ mimesis, spaCy, licences

MIMESIS_DE = {"alphabet": {"lowercase": ["a", "b"]}, "answers": ["Ja", "Nein"], "color": ["Blau"],
              "words": ["ab", "abend"], "quotes": ["Aller Anfang ist schwer."],
              "text": ["Der Hund schläft im Garten. Die Katze sitzt auf dem warmen Dach.", 7],
              "questions": ["Wie alt ist dein Bruder heute?"]}
SPACY_DE = (
    '"""\nExample sentences.\n\n>>> from spacy.lang.de.examples import sentences\n"""\n\n'
    'sentences = [\n    "Die ganze Stadt ist ein Startup.",\n    "Wo bist du heute Abend?",\n    f"x{1}",\n]\n'
    'other = ["Das hier ist kein Beispielsatz."]\n'
)


def test_mimesis_reads_text_and_quotes_not_word_lists():
    files = {"mimesis/datasets/de/text.json": json.dumps(MIMESIS_DE).encode(),
             "mimesis/datasets/de-at/text.json": b"{}",
             "mimesis/datasets/fr/text.json": b"not json"}
    got = list(bg.extract_mimesis(files, bg.SOURCES[0]))
    assert got == [bg.Mono("de", "Der Hund schläft im Garten. Die Katze sitzt auf dem warmen Dach."),
                   bg.Mono("de", "Aller Anfang ist schwer.")]


def test_spacy_examples_are_parsed_not_imported():
    files = {"spacy/lang/de/examples.py": SPACY_DE.encode(),
             "spacy/lang/xx/examples.py": b'sentences = ["Where are you going now?"]\n',
             "spacy/lang/ja/examples.py": b"import os; os.system('false')\nsentences = [\n"}
    got = list(bg.extract_spacy_examples(files, bg.SOURCES[0]))
    assert got == [bg.Mono("de", "Die ganze Stadt ist ein Startup."), bg.Mono("de", "Wo bist du heute Abend?")]


def test_declared_licences_of_wheels_and_debian_packages():
    meta = (b"Metadata-Version: 2.4\nName: m\nLicense-Expression: MIT\n"
            b"Classifier: License :: OSI Approved :: MIT License\n\nbody\nLicense: no")
    assert bg.wheel_license(meta) == "MIT"
    assert bg.wheel_license(b"Name: p\nLicense: BSD-3-Clause\n") == "BSD-3-Clause"
    assert bg.wheel_license(b"Name: p\nLicense: UNKNOWN\nClassifier: License :: OSI Approved :: MIT License\n") \
        == "MIT License"
    copyright_file = b"Files: *\nLicense: GPL-2+\n\nFiles: data/*\nLicense: CC-BY-SA-3.0\n text\n\nLicense: GPL-2+\n"
    assert bg.debian_license(copyright_file) == "GPL-2+; CC-BY-SA-3.0"


def test_new_permissive_sources_build_and_record_their_licence(tmp_path, cache):
    with zipfile.ZipFile(cache / "pypi" / "mimesis-22.2.0-py3-none-any.whl", "w") as whl:
        whl.writestr("mimesis/datasets/de/text.json", json.dumps(MIMESIS_DE))
        whl.writestr("mimesis-22.2.0.dist-info/METADATA", "Name: mimesis\nLicense-Expression: MIT\n")
    with zipfile.ZipFile(cache / "pypi" / "spacy-3.8.18-cp311-cp311-linux_x86_64.whl", "w") as whl:
        whl.writestr("spacy/lang/de/examples.py", SPACY_DE)
        whl.writestr("spacy-3.8.18.dist-info/METADATA", "Name: spacy\nLicense: MIT\n")
    extra = tuple(s for s in bg.SOURCES if s.name in ("mimesis", "spacy-examples"))
    out = tmp_path / "out"
    record = run(out, cache, sources=(*sources(), *extra), tier="permissive")
    rows = train_rows(out)
    assert {r["src"] for r in rows} == {"chatterbot", "mimesis", "spacy-examples"}
    assert {r["license"] for r in rows} == {"BSD-3-Clause", "MIT"}
    texts = {r["x"] for r in rows if r["src"] != "chatterbot"}
    assert texts == {"Der Hund schläft im Garten.", "Die Katze sitzt auf dem warmen Dach.",
                     "Aller Anfang ist schwer.", "Die ganze Stadt ist ein Startup.", "Wo bist du heute Abend?"}
    assert all(r["en"] == r["x"] and r["lang"] == "de" for r in rows)
    declared = {s["name"]: s["downloads"][0]["declared_license"] for s in record["sources"]}  # type: ignore[index]
    assert declared["mimesis"] == declared["spacy-examples"] == "MIT"


def cldr_xml(lang: str, names: dict[str, str]) -> bytes:
    rows = "".join(f'<annotation cp="{cp}">kw | {name}</annotation><annotation cp="{cp}" type="tts">{name}</annotation>'
                   for cp, name in names.items())
    return (f'<?xml version="1.0" encoding="UTF-8" ?><ldml><identity><language type="{lang}"/></identity>'
            f"<annotations>{rows}</annotations></ldml>").encode()


CLDR = {
    "en": {"🐕": "dog", "🏰": "castle", "⚔": "crossed swords", "🌧": "cloud with rain", "#️⃣": "keycap: #"},
    "de": {"🐕": "Hund", "🏰": "Schloss", "⚔": "gekreuzte Schwerter", "🌧": "Wolke mit Regen", "#️⃣": "Taste: #"},
    "de_CH": {"🏰": "↑↑↑"},  # CLDR's "inherited from the parent locale"
    "ja": {"🐕": "犬", "⚔": "交差した剣", "🐈": "猫"},  # a code point English does not name is skipped
}


def test_cldr_annotations_pair_names_by_code_point_and_keep_short_phrases(tmp_path, cache):
    files = {f"usr/share/unicode/cldr/common/annotations/{lang}.xml": cldr_xml(lang.split("_")[0], names)
             for lang, names in CLDR.items()}
    files["usr/share/unicode/cldr/common/annotations/broken.xml"] = b"<ldml"
    source = next(s for s in bg.SOURCES if s.name == "cldr-annotations")
    got = set(bg.extract_cldr_annotations(files, source))
    assert got == {bg.Pair("de", "dog", "Hund"), bg.Pair("de", "castle", "Schloss"),
                   bg.Pair("de", "crossed swords", "gekreuzte Schwerter"),
                   bg.Pair("de", "cloud with rain", "Wolke mit Regen"), bg.Pair("de", "keycap: #", "Taste: #"),
                   bg.Pair("ja", "dog", "犬"), bg.Pair("ja", "crossed swords", "交差した剣")}
    assert source.permissive and source.min_words == 1 and not source.end_punct
    package = {**files, "usr/share/doc/unicode-cldr-core/copyright": b"Files: *\nLicense: Unicode-DFS-2016\n"}
    (cache / "debian" / "unicode-cldr-core_41-0.1_all.deb").write_bytes(deb_bytes(package))
    out = tmp_path / "out"
    record = run(out, cache, sources=(*sources(), source), tier="permissive")
    cldr = {(r["lang"], r["en"], r["x"]) for r in train_rows(out) if r["src"] == "cldr-annotations"}
    # one-word names pass this source's word limit (the build's is 3), the placeholder "#" is still dropped
    assert cldr == {("de", "dog", "Hund"), ("de", "castle", "Schloss"), ("de", "crossed swords", "gekreuzte Schwerter"),
                    ("de", "cloud with rain", "Wolke mit Regen"), ("ja", "dog", "犬"),
                    ("ja", "crossed swords", "交差した剣")}
    assert {r["license"] for r in train_rows(out) if r["src"] == "cldr-annotations"} == {"Unicode-DFS-2016"}
    declared = {s["name"]: s["downloads"][0]["declared_license"] for s in record["sources"]}  # type: ignore[index]
    assert declared["cldr-annotations"] == "Unicode-DFS-2016"
    everything = tmp_path / "everything"
    run(everything, cache, sources=(source, *sources()))
    rows = train_rows(everything)
    assert {(r["lang"], r["en"], r["x"]) for r in rows if r["src"] == "cldr-annotations"} == cldr
    assert any(r["src"] == "fortunes-de" for r in rows)
    assert not any(r["x"] == "Kurz." for r in rows)  # the sources after it keep the build's word limit


# ------------------------------------------------------------------------- word lists (train.vocab_words)


def test_word_lists_are_written_cleaned_and_recorded(tmp_path, cache):
    out = tmp_path / "out"
    record = run(out, cache, words=bg.WORDLIST, languages=frozenset({"de", "el", "en", "ja", "fr"}))
    # no list for English (the pivot), Japanese (no spaces between words) or a language not asked for (ko)
    assert sorted(p.name for p in (out / bg.WORDS_FOLDER).iterdir()) == ["de.tsv", "el.tsv"]
    # numbers and punctuation dropped, the order and buckets kept; Greek with its final sigma again
    assert (out / "words" / "de.tsv").read_text(encoding="utf-8") == "der\t1\nhaus\t3\nkatze\t3\n"
    assert bg.read_words(out / "words", ["de", "el", "fr"]) == {
        "de": [("der", 1), ("haus", 3), ("katze", 3)], "el": [("της", 1), ("της", 1), ("κόσμος", 2)]}
    words = record["words"]
    assert words["license"] == "CC-BY-SA-4.0" and words["permissive"] is False  # type: ignore[index]
    assert words["words_per_language"] == {"de": 3, "el": 3}  # type: ignore[index]
    assert words["downloads"][0]["declared_license"] == "Apache-2.0"  # type: ignore[index]
    assert json.loads((out / "SOURCES.json").read_text())["words"] == words
    assert bg.clean_words([("a", 1), ("b", 2), ("c", 3)], "de", top=2) == [("a", 1), ("b", 2)]


def test_no_word_lists_for_a_shipped_model_or_when_skipped(tmp_path, cache):
    for kw in ({"tier": "permissive"}, {"skip": ["wordfreq"]}, {}):
        out = tmp_path / str(len(kw) and next(iter(kw)))
        record = run(out, cache, **({"words": bg.WORDLIST} if kw else {}), **kw)
        assert "words" not in record and not (out / bg.WORDS_FOLDER).exists()


def test_word_list_errors_name_the_fix(tmp_path, cache, monkeypatch):
    with pytest.raises(TinyglotError, match="(?s)no word lists at .*tinyglot data general"):
        bg.read_words(tmp_path / "none", ["de"])
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "de.tsv").write_text("haus\tsehr\n", encoding="utf-8")
    with pytest.raises(TinyglotError, match="not a word list"):
        bg.read_words(bad, ["de"])
    with pytest.raises(TinyglotError, match="not a wordfreq"):
        bg.read_wordfreq(gzip.compress(b"\x93\x01\x02\x03"))
    assert bg.vocabulary_words("", ["de"]) is None
    home = tmp_path / "home"
    monkeypatch.setenv("TINYGLOT_HOME", str(home))
    with pytest.raises(TinyglotError, match=f"no word lists at {home / 'general' / 'words'}"):
        bg.vocabulary_words("auto", ["de"])
    run(home / "general", cache, words=bg.WORDLIST)  # what `tinyglot data general` writes there
    assert bg.vocabulary_words("auto", ["de", "fr"]) == {"de": [("der", 1), ("haus", 3), ("katze", 3)]}
    (cache / "pypi" / "wordfreq-3.1.1-py3-none-any.whl").unlink()
    with pytest.raises(TinyglotError, match="wordfreq"):
        run(tmp_path / "out", cache, words=bg.WORDLIST)


# ---------------------------------------------------------------------------- Qt catalogues, supplements

QT = ROOT / "tests" / "fixtures" / "data" / "qt"  # gcompris_de.qm: `pyside6-lrelease gcompris_de.ts` (Qt 6.11.2)


def test_qm_parser_reads_what_lrelease_writes():
    got = list(bg.parse_qm((QT / "gcompris_de.qm").read_bytes()))
    assert sorted(got) == sorted([
        ("The giraffe is the tallest animal on Earth.", "Die Giraffe ist das größte Tier der Erde."),  # a comment
        ("&Open the door before you leave.", "Öffne die &Tür, bevor du gehst."),
        ("Tom & Jerry run through the house.", "Tom & Jerry rennen durch das Haus."),
        ("You found %n apples.", "Du hast %n Apfel gefunden."),  # plural forms: the first
        ("The tower was built in 1889 for a world fair.", "Der Turm wurde 1889 für eine Weltausstellung gebaut."),
        ("Ancient ruins 🏛 by the sea.", "Antike Ruinen 🏛 am Meer."),  # outside the BMP: a UTF-16 pair
    ])  # the untranslated message is not there
    data = (QT / "gcompris_de.qm").read_bytes()
    assert list(bg.parse_qm(data[:16])) == [] and list(bg.parse_qm(b"\x1f\x8b not a catalogue")) == []
    assert len(list(bg.parse_qm(data[:-40]))) <= len(got)  # a cut file ends early, no error


def test_qm_catalogues_take_the_locale_of_their_name_and_drop_accelerators():
    source = bg.Source("gcompris", ("gcompris-qt-data",), "", "GPL-3.0+", bg.extract_qm, r"\.qm$")
    data = (QT / "gcompris_de.qm").read_bytes()
    pairs = list(bg.extract_qm({"usr/share/gcompris-qt/translations/gcompris_pt_BR.qm": data}, source))
    assert {p.locale for p in pairs} == {"pt_BR"}
    assert bg.Pair("pt_BR", "Open the door before you leave.", "Öffne die Tür, bevor du gehst.") in pairs
    assert bg.Pair("pt_BR", "Tom & Jerry run through the house.", "Tom & Jerry rennen durch das Haus.") in pairs


EXTRA = {  # a supplement's catalogues: de has rows enough, pt and ru do not
    "de": {"The fox hides its food under the snow.": "Der Fuchs versteckt sein Futter unter dem Schnee."},
    "pt": {"The fox hides its food under the snow.": "A raposa esconde a comida debaixo da neve.",
           "Owls can turn their heads very far.": "As corujas conseguem virar muito a cabeça.",
           "A sturdy wooden chair with a cushioned seat.":  # the game's row: not twice
               "Uma cadeira de madeira robusta com assento acolchoado.",
           "Bees dance to show where the flowers are.": "As abelhas dançam para mostrar onde estão as flores."},
    "ru": {"We must cross the river before the orcs find us.":  # the story's (test) sentence: never
               "Мы должны перейти реку, пока орки нас не нашли.",
           "Owls can turn their heads very far.": "Совы могут далеко поворачивать голову."},
    "fr": {"Owls can turn their heads very far.": "Les hiboux peuvent tourner la tête très loin."},
}


def test_a_supplement_fills_thin_languages_and_displaces_nothing(tmp_path, cache):
    extra = {f"usr/share/locale/{lang}/LC_MESSAGES/extra.mo": mo_bytes(e) for lang, e in EXTRA.items()}
    (cache / "debian" / "extra-data_1.0-1_all.deb").write_bytes(deb_bytes(extra))
    supplement = bg.Source("extra", ("extra-data",), "animal facts", "GPL-2.0+", bg.extract_catalogs,
                           r"/LC_MESSAGES/extra\.mo$", fill_to=3)
    plain, filled = tmp_path / "plain", tmp_path / "filled"
    run(plain, cache)
    record = run(filled, cache, sources=(*sources(), supplement))
    before, after = train_rows(plain), train_rows(filled)
    added = [r for r in after if r not in before]
    assert len(after) == len(before) + len(added)  # every row of the build without it is still there
    assert all(r["src"] == "extra" and r["license"] == "GPL-2.0+" for r in added)
    by_lang = {lang: {r["en"] for r in added if r["lang"] == lang} for lang in ("de", "pt", "ru", "fr")}
    assert by_lang["de"] == set()  # 9 rows already
    assert len(by_lang["pt"]) == 2 and "A sturdy wooden chair with a cushioned seat." not in by_lang["pt"]
    assert by_lang["ru"] == {"Owls can turn their heads very far."}  # up to 3 would be 2, but one is a test line
    assert by_lang["fr"] == {"Owls can turn their heads very far."}  # no row before: the supplement's one
    saved = {s["name"]: s for s in record["sources"]}  # type: ignore[index]
    assert saved["extra"]["rows_per_language"] == {"fr": 1, "pt": 2, "ru": 1}
    run(tmp_path / "again", cache, sources=(*sources(), supplement))
    assert (tmp_path / "again" / bg.TRAIN_FILE).read_bytes() == (filled / bg.TRAIN_FILE).read_bytes()


def test_fill_rows_share_the_room_among_supplements():
    def got(name: str, fill_to: int, pairs: list[tuple[str, str, str]]) -> bg.Collected:
        source = bg.Source(name, (name,), "", "GPL-2.0+", bg.extract_catalogs, "", fill_to=fill_to)
        return bg.Collected(source, [], {p: p[0] for p in pairs}, set())

    a = got("a", 4, [("et", f"Sentence {i} of a.", f"Lause {i} a.") for i in range(5)])
    b = got("b", 4, [("et", f"Sentence {i} of b.", f"Lause {i} b.") for i in range(1)]
            + [("et", "Sentence 0 of a.", "Lause 0 a.")])  # a's pair again: taken once
    rows = [{"lang": "et", "en": "One row.", "x": "Üks rida.", "src": "x", "license": "MIT"}]
    added = bg.fill_rows([a, b], rows, set(), seed=13)
    assert [r["src"] for r in added].count("b") == 1 and len(added) == 3  # 4 - 1: b's one, a the other two
    assert len({(r["en"], r["x"]) for r in added}) == 3
    assert bg.fill_rows([a, b], rows * 4, set(), seed=13) == []
