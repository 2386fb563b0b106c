"""Streaming readers for parallel data: every reader yields :class:`Pair` with a canonical lang.

Formats: TSV (``en<TAB>x``), Moses line-aligned pairs (``corpus.de`` + ``corpus.en``), JSON lines
(``{"lang", "x", "en", "src", "license"}``), LASER's Tatoeba files (``tatoeba.deu-eng.deu`` +
``.eng``), gettext catalogues (``.po``) and OPUS TMX.  :func:`read_corpus` picks the reader
from the file name, and reads every recognised file of a directory.

Readers never hold a whole file in memory: files are read line by line (``.gz`` is opened
transparently), a line longer than ``max_line_chars`` is skipped without being loaded whole,
and TMX is parsed incrementally.  Pairs with an empty side and over-long lines are skipped and
counted in a :class:`ReadStats`; the counts are logged on the ``tinyglot.data`` logger.
Problems the user must fix (missing file, bad encoding, wrong column count, unknown format)
raise :class:`~tinyglot.errors.DataError`, naming the file and line.

Public readers check what they can (file exists, language known) when called, and return a
lazy iterator.
"""

from __future__ import annotations

import gzip
import json
import logging
import re
import xml.etree.ElementTree as ET
import zlib
from dataclasses import dataclass, fields
from pathlib import Path
from typing import BinaryIO
from collections.abc import Iterable, Iterator, Mapping

from tinyglot.data.pairs import Pair
from tinyglot.errors import DataError, UnknownLanguageError
from tinyglot.languages import lang_from_filename, normalize_lang

logger = logging.getLogger("tinyglot.data")

MAX_LINE_CHARS = 100_000
"""Default longest line (in characters) a reader accepts; longer lines are skipped."""

SUPPORTED_FORMATS = (
    "TSV (*.tsv, *.tsv.gz: english<TAB>translation)",
    "JSON lines (*.jsonl, *.jsonl.gz: lang, x, en)",
    "gettext (*.po)",
    "TMX (*.tmx, *.tmx.gz)",
    "Tatoeba (tatoeba.deu-eng.deu + tatoeba.deu-eng.eng)",
    "Moses (corpus.de + corpus.en, given the non-English file)",
)

_ICONV_FIX = "convert the file to UTF-8, e.g. iconv -f latin1 -t utf-8 FILE > FILE.utf8"
_LANG_FIX = "pass the language explicitly (--lang de), or name the file after it (de.tsv)"
_ENGLISH_SUFFIXES = ("en", "eng")


# --------------------------------------------------------------------------------------------
# statistics


@dataclass
class ReadStats:
    """Counts of what readers produced and skipped; share one across readers to add up."""

    files: int = 0
    pairs: int = 0
    skipped_empty: int = 0
    skipped_too_long: int = 0
    skipped_fuzzy: int = 0
    skipped_untranslated: int = 0
    skipped_no_english: int = 0
    skipped_other_lang: int = 0
    skipped_header: int = 0

    @property
    def skipped(self) -> int:
        """Total number of skipped pairs or lines."""
        return sum(getattr(self, f.name) for f in fields(self) if f.name.startswith("skipped_"))

    def summary(self) -> str:
        """One line: pairs read, files, and each non-zero skip reason."""
        parts = [
            f"{getattr(self, f.name)} {f.name.removeprefix('skipped_').replace('_', ' ')}"
            for f in fields(self)
            if f.name.startswith("skipped_") and getattr(self, f.name)
        ]
        skipped = f"; skipped {', '.join(parts)}" if parts else ""
        return f"read {self.pairs} pairs from {self.files} file(s){skipped}"

    def log(self, source: str | Path = "") -> None:
        """Log :meth:`summary` on the ``tinyglot.data`` logger."""
        prefix = f"{source}: " if source else ""
        logger.info("%s%s", prefix, self.summary())


# --------------------------------------------------------------------------------------------
# low-level line access


def _open_binary(path: Path) -> BinaryIO:
    """Open ``path`` for binary reading, decompressing ``.gz`` transparently."""
    if path.suffix == ".gz":
        return gzip.open(path, "rb")  # type: ignore[return-value]
    return open(path, "rb")


def _check_file(path: str | Path) -> Path:
    """Return ``path`` as a Path, or raise DataError when it is not an existing file."""
    p = Path(path)
    if not p.exists():
        raise DataError(p, "file not found", "check the path (relative paths start in the "
                        "current directory)")
    if not p.is_file():
        raise DataError(p, "not a regular file", "pass a data file, or a directory to read_corpus")
    return p


def _skip_rest_of_line(f: BinaryIO, chunk: bytes, limit: int) -> None:
    """Read and discard what is left of a line whose first ``chunk`` hit the size limit."""
    while chunk and not chunk.endswith(b"\n"):
        chunk = f.readline(limit)


def _decode(raw: bytes, path: Path, lineno: int) -> str:
    """Decode one line as UTF-8, or raise DataError naming the line."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        bad = raw[exc.start : exc.start + 1].hex()
        raise DataError(
            path, f"line is not valid UTF-8 (byte 0x{bad} at byte {exc.start}); the file mixes "
            "encodings or is not UTF-8", _ICONV_FIX, line=lineno,
        ) from None
    if lineno == 1 and text.startswith("\ufeff"):
        text = text[1:]
    return text.rstrip("\r\n")


def iter_lines(path: Path, max_line_chars: int) -> Iterator[tuple[int, str | None]]:
    """Yield ``(line_number, text)`` for each line, without the line break.

    ``text`` is None for a line longer than ``max_line_chars``: such a line is read in bounded
    chunks and discarded, never held whole.  The line numbers stay aligned, so line-aligned
    readers (Moses) keep their alignment.
    """
    limit = 4 * max_line_chars + 2  # UTF-8 needs at most 4 bytes a character, plus \r\n
    try:
        with _open_binary(path) as f:
            lineno = 0
            while True:
                raw = f.readline(limit)
                if not raw:
                    return
                lineno += 1
                if len(raw) >= limit and not raw.endswith(b"\n"):
                    _skip_rest_of_line(f, raw, limit)
                    yield lineno, None
                    continue
                text = _decode(raw, path, lineno)
                yield lineno, (text if len(text) <= max_line_chars else None)
    except (gzip.BadGzipFile, EOFError, zlib.error) as exc:
        raise DataError(path, f"cannot decompress: {exc}", "check that the download is "
                        "complete, or re-create the .gz file") from None


def _make_pair(lang: str, x: str, en: str, src: str, license: str,
               stats: ReadStats) -> Pair | None:
    """A stripped Pair, or None (counted) when a side is empty."""
    x, en = x.strip(), en.strip()
    if not x or not en:
        stats.skipped_empty += 1
        return None
    return Pair(lang, x, en, src, license)


def _canonical(lang: str, path: Path, line: int | None = None) -> str:
    """normalize_lang, re-raised as a DataError that names the file (and line)."""
    try:
        return normalize_lang(lang)
    except UnknownLanguageError as exc:
        raise DataError(path, exc.problem, exc.fix, line=line) from None


def _resolve_lang(lang: str | None, path: Path) -> str:
    """The given language (normalised), else the one in the file name, else DataError."""
    if lang is not None:
        return _canonical(lang, path)
    inferred = lang_from_filename(path)
    if inferred is None:
        raise DataError(path, "cannot tell the language of this file from its name", _LANG_FIX)
    return inferred


def _counted(path: Path, pairs: Iterable[Pair], stats: ReadStats,
             what: str = "no pairs found") -> Iterator[Pair]:
    """Pass pairs through, count them, and raise DataError if the file gave none."""
    n, skipped_before = 0, stats.skipped
    for pair in pairs:
        n += 1
        stats.pairs += 1
        yield pair
    stats.files += 1
    if n == 0:
        skipped = stats.skipped - skipped_before
        why = f"all {skipped} entries were skipped" if skipped else "the file holds no pairs"
        raise DataError(path, f"{what}: {why}",
                        "check the file's format and content, or leave the file out")


def _logged(pairs: Iterable[Pair], stats: ReadStats, source: Path) -> Iterator[Pair]:
    """Pass pairs through and log the statistics once they are exhausted."""
    yield from pairs
    stats.log(source)


# --------------------------------------------------------------------------------------------
# TSV


_HEADER_WORDS = frozenset({"en", "eng", "english", "source", "target", "src", "tgt", "text", "sentence",
                           "sentences", "translation", "x", "lang", "language", "original"})
_ENGLISH_HEADERS = frozenset({"en", "eng", "english", "source", "src", "text", "sentence", "original"})


def _header_word(col: str) -> bool:
    """Whether a TSV cell reads as a column name: a header word or a language code/name."""
    word = col.strip().strip("#").strip().lower()
    if word in _HEADER_WORDS:
        return True
    if not word or len(word) > 20 or " " in word:
        return False
    try:
        normalize_lang(word)
    except UnknownLanguageError:
        return False
    return True


def looks_like_header(cols: list[str]) -> bool:
    """Whether the first row of a TSV file names its columns (``en<TAB>de``, ``english<TAB>german``,
    ``source<TAB>target``) instead of holding a pair."""
    return (len(cols) == 2 and all(_header_word(c) for c in cols)
            and any(c.strip().strip("#").strip().lower() in _ENGLISH_HEADERS for c in cols))


def _tsv(path: Path, lang: str, english_first: bool, max_line_chars: int,
         stats: ReadStats, header: bool | None = None) -> Iterator[Pair]:
    """Pairs from a two-column TSV file (internal: no count check, no logging).

    ``header``: True skips the first non-blank line, False reads it as a pair, None skips it when
    it reads as column names (:func:`looks_like_header`)."""
    first = True
    for lineno, line in iter_lines(path, max_line_chars):
        if line is None:
            stats.skipped_too_long += 1
            first = False
            continue
        if not line.strip():
            continue
        cols = line.split("\t")
        if first:
            first = False
            if header or (header is None and looks_like_header(cols)):
                stats.skipped_header += 1
                logger.info("%s:%d: skipped the header row %r (pass --no-header to read it as a pair)",
                            path, lineno, line[:80])
                continue
        if len(cols) != 2:
            raise DataError(
                path, f"expected 2 tab-separated columns, found {len(cols)}",
                "write one pair per line as english<TAB>translation, with no tab inside a "
                "sentence" if english_first else
                "write one pair per line as translation<TAB>english, with no tab inside a "
                "sentence", line=lineno,
            )
        en, x = cols if english_first else reversed(cols)
        pair = _make_pair(lang, x, en, "", "", stats)
        if pair is not None:
            yield pair


def read_tsv(path: str | Path, lang: str | None = None, english_first: bool = True, *,
             max_line_chars: int = MAX_LINE_CHARS,
             stats: ReadStats | None = None, header: bool | None = None) -> Iterator[Pair]:
    """Read ``english<TAB>x`` lines (``x<TAB>english`` when ``english_first`` is False).

    ``lang`` defaults to the language in the file name (``de.tsv``, ``pt-BR.tsv``).  Blank lines
    are skipped; a line without exactly two columns raises DataError.  A first row of column names
    is skipped (``header``: True always skips the first row, False never, None detects it).
    """
    p = _check_file(path)
    code = _resolve_lang(lang, p)
    st = stats if stats is not None else ReadStats()
    return _logged(_counted(p, _tsv(p, code, english_first, max_line_chars, st, header), st), st, p)


# --------------------------------------------------------------------------------------------
# Moses and Tatoeba (two line-aligned files)


def _aligned(x_path: Path, en_path: Path, lang: str, src: str, max_line_chars: int,
             stats: ReadStats) -> Iterator[Pair]:
    """Pairs from two line-aligned files; DataError when one ends before the other."""
    x_lines = iter_lines(x_path, max_line_chars)
    en_lines = iter_lines(en_path, max_line_chars)
    lineno = 0
    for lineno, x in x_lines:
        en_item = next(en_lines, None)
        if en_item is None:
            raise _length_mismatch(en_path, x_path, lineno - 1)
        en = en_item[1]
        if x is None or en is None:
            stats.skipped_too_long += 1
            continue
        pair = _make_pair(lang, x, en, src, "", stats)
        if pair is not None:
            yield pair
    if next(en_lines, None) is not None:
        raise _length_mismatch(x_path, en_path, lineno)


def _length_mismatch(short: Path, long: Path, n: int) -> DataError:
    """The error for line-aligned files of different lengths."""
    return DataError(
        short, f"has {n} lines but its twin {long} has more; line-aligned files must have the "
        "same number of lines", "re-export the pair so that line i of one file translates "
        "line i of the other", line=n + 1,
    )


def read_moses(x_path: str | Path, en_path: str | Path, lang: str | None = None, *,
               max_line_chars: int = MAX_LINE_CHARS,
               stats: ReadStats | None = None) -> Iterator[Pair]:
    """Read a Moses pair: ``x_path`` (e.g. ``corpus.de``) and ``en_path`` (``corpus.en``).

    ``lang`` defaults to the language in ``x_path``'s name.  Files of different lengths raise
    DataError as soon as one runs out.
    """
    xp, ep = _check_file(x_path), _check_file(en_path)
    code = _resolve_lang(lang, xp)
    st = stats if stats is not None else ReadStats()
    pairs = _aligned(xp, ep, code, "", max_line_chars, st)
    return _logged(_counted(xp, pairs, st), st, xp)


_TATOEBA = re.compile(r"^(?P<prefix>(?:.*\.)?tatoeba\.(?P<a>[a-z]{2,3})-(?P<b>[a-z]{2,3}))"
                      r"(?:\.(?P<side>[a-z]{2,3}))?$")


def _tatoeba_files(path: Path, lang: str | None) -> tuple[Path, Path, str]:
    """(x file, English file, lang) for a Tatoeba file or prefix."""
    m = _TATOEBA.match(path.name)
    if m is None:
        raise DataError(path, "not a Tatoeba file name (expected tatoeba.deu-eng.deu, "
                        "tatoeba.deu-eng.eng or the prefix tatoeba.deu-eng)",
                        "rename the files as in LASER's Tatoeba data, or use read_moses")
    a, b = m["a"], m["b"]
    en_code = b if b in _ENGLISH_SUFFIXES else a
    x_code = a if en_code == b else b
    prefix = path.with_name(m["prefix"])
    x_file = _check_file(f"{prefix}.{x_code}")
    en_file = _check_file(f"{prefix}.{en_code}")
    code = _canonical(lang if lang is not None else x_code, path)
    return x_file, en_file, code


def read_tatoeba(path_or_prefix: str | Path, lang: str | None = None, *,
                 max_line_chars: int = MAX_LINE_CHARS,
                 stats: ReadStats | None = None) -> Iterator[Pair]:
    """Read LASER's Tatoeba pair ``tatoeba.deu-eng.deu`` + ``tatoeba.deu-eng.eng``.

    Accepts either file or the common prefix ``tatoeba.deu-eng``; the language comes from the
    name unless ``lang`` is given.
    """
    x_file, en_file, code = _tatoeba_files(Path(path_or_prefix), lang)
    st = stats if stats is not None else ReadStats()
    pairs = _aligned(x_file, en_file, code, "tatoeba", max_line_chars, st)
    return _logged(_counted(x_file, pairs, st), st, x_file)


# --------------------------------------------------------------------------------------------
# JSON lines

_JSONL_FIX = 'write one JSON object per line: {"lang": "de", "x": "...", "en": "..."}'


def _json_pair(line: str, path: Path, lineno: int) -> tuple[str, str, str, str, str]:
    """Parse one JSONL line into (lang, x, en, src, license) strings, or raise DataError."""
    try:
        obj = json.loads(line)
    except json.JSONDecodeError as exc:
        raise DataError(path, f"malformed JSON: {exc.msg} (column {exc.colno})", _JSONL_FIX,
                        line=lineno) from None
    except RecursionError:
        raise DataError(path, "JSON nested too deeply to read", _JSONL_FIX, line=lineno) from None
    except ValueError as exc:  # e.g. an integer of more than 4300 digits
        raise DataError(path, f"unreadable JSON value ({exc})", _JSONL_FIX, line=lineno) from None
    if not isinstance(obj, dict):
        raise DataError(path, f"expected a JSON object, found {type(obj).__name__}",
                        _JSONL_FIX, line=lineno)
    missing = [k for k in ("lang", "x", "en") if k not in obj]
    if missing:
        raise DataError(path, f"missing key(s) {', '.join(missing)}", _JSONL_FIX, line=lineno)
    values = [obj["lang"], obj["x"], obj["en"], obj.get("src", ""), obj.get("license", "")]
    if not all(isinstance(v, str) for v in values):
        raise DataError(path, "lang, x, en, src and license must be strings", _JSONL_FIX,
                        line=lineno)
    for key, value in zip(("lang", "x", "en", "src", "license"), values, strict=True):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError as exc:
            raise DataError(path, f"{key} holds a lone surrogate {value[exc.start]!r} (an escape such as "
                            "\\ud800 without its pair), which is not text",
                            "fix or drop the line; write the character itself or both halves of the "
                            "surrogate pair", line=lineno) from None
    return values[0], values[1], values[2], values[3], values[4]


def _jsonl(path: Path, only_lang: str | None, max_line_chars: int,
           stats: ReadStats) -> Iterator[Pair]:
    """Pairs from a JSONL file (internal)."""
    for lineno, line in iter_lines(path, max_line_chars):
        if line is None:
            stats.skipped_too_long += 1
            continue
        if not line.strip():
            continue
        lang, x, en, src, lic = _json_pair(line, path, lineno)
        code = _canonical(lang, path, lineno)
        if only_lang is not None and code != only_lang:
            stats.skipped_other_lang += 1
            continue
        pair = _make_pair(code, x, en, src, lic, stats)
        if pair is not None:
            yield pair


def read_jsonl(path: str | Path, lang: str | None = None, *,
               max_line_chars: int = MAX_LINE_CHARS,
               stats: ReadStats | None = None) -> Iterator[Pair]:
    """Read JSON lines with keys ``lang``, ``x``, ``en`` (optional ``src``, ``license``).

    Each pair's language comes from its own ``lang``; a given ``lang`` keeps only that
    language's pairs.  Malformed JSON or missing keys raise DataError with the line.
    """
    p = _check_file(path)
    only = _canonical(lang, p) if lang is not None else None
    st = stats if stats is not None else ReadStats()
    what = "no pairs found" if only is None else f"no pairs of language {only!r} found"
    return _logged(_counted(p, _jsonl(p, only, max_line_chars, st), st, what), st, p)


# --------------------------------------------------------------------------------------------
# gettext .po

_PO_ESCAPES = {"n": "\n", "t": "\t", "r": "\r", '"': '"', "\\": "\\", "a": "\a", "b": "\b",
               "f": "\f", "v": "\v"}
_PO_ESCAPE = re.compile(r"\\(.)")
_PO_KEYWORD = re.compile(r"^(msgctxt|msgid_plural|msgid|msgstr(?:\[\d+\])?)\s+(\".*)$")
_PO_FIX = "check the catalogue with msgfmt --check FILE"


def _po_string(token: str, path: str | Path, lineno: int, strict: bool = True,
               escapes: Mapping[str, str] = _PO_ESCAPES) -> str:
    """Unquote and unescape one PO string literal such as ``"a \\"b\\"\\n"``; a malformed one is an error
    (``strict``) or the empty string."""
    token = token.strip()
    if len(token) < 2 or not (token.startswith('"') and token.endswith('"')):
        if not strict:
            return ""
        raise DataError(path, f"malformed string {token[:40]!r}", _PO_FIX, line=lineno)
    return _PO_ESCAPE.sub(lambda m: escapes.get(m[1], m[1]), token[1:-1])


@dataclass
class PoEntry:
    """One catalogue entry while it is being parsed."""

    line: int = 0
    fuzzy: bool = False
    too_long: bool = False
    field: str | None = None
    msgctxt: str | None = None
    msgid: str | None = None
    msgstr0: str | None = None
    plural: bool = False  # it has a msgid_plural

    @property
    def started(self) -> bool:
        """Whether a keyword line has been seen."""
        return self.msgid is not None or self.msgctxt is not None

    def add(self, field: str, text: str) -> None:
        """Append ``text`` to ``field`` (a keyword or a continuation line)."""
        self.field = field
        if field == "msgctxt":
            self.msgctxt = (self.msgctxt or "") + text
        elif field == "msgid":
            self.msgid = (self.msgid or "") + text
        elif field == "msgid_plural":
            self.plural = True
        elif field in ("msgstr", "msgstr[0]"):
            self.msgstr0 = (self.msgstr0 or "") + text


def _po_header_lang(header: str) -> str | None:
    """The ``Language:`` value of a PO header, or None."""
    for line in header.split("\n"):
        key, _, value = line.partition(":")
        if key.strip().lower() == "language" and value.strip():
            return value.strip()
    return None


def po_entries(lines: Iterable[tuple[int, str | None]], path: str | Path, *, strict: bool = True,
               escapes: Mapping[str, str] = _PO_ESCAPES) -> Iterator[PoEntry]:
    """Parse the ``(line number, text)`` lines of a PO file into finished entries, the header and fuzzy,
    untranslated and plural ones included (obsolete ``#~`` lines are ignored; a line given as None is
    too long, and marks its entry).  ``strict``: a malformed line is a :class:`DataError` naming ``path``
    and the line; else it is skipped (a malformed string reads as empty), for catalogues taken from
    packages as they are."""
    entry = PoEntry()
    for lineno, line in lines:
        if line is None:
            entry.too_long = True
            continue
        s = line.strip()
        if not s or s.startswith("#"):
            if entry.started:
                yield entry
            if entry.started or not s:  # a blank line also drops flags of obsolete entries
                entry = PoEntry()
            if s.startswith("#,") and "fuzzy" in s[2:].replace(",", " ").split():
                entry.fuzzy = True
            continue
        if s.startswith('"'):
            if entry.field is None:
                if not strict:
                    continue
                raise DataError(path, "string continuation outside an entry", _PO_FIX,
                                line=lineno)
            entry.add(entry.field, _po_string(s, path, lineno, strict, escapes))
            continue
        m = _PO_KEYWORD.match(s)
        if m is None:
            if not strict:
                continue
            raise DataError(path, f"unrecognised line {s[:40]!r}", _PO_FIX, line=lineno)
        keyword = m[1]
        if entry.msgstr0 is not None and keyword in ("msgctxt", "msgid") or (
            keyword == "msgid" and entry.msgid is not None
        ):
            yield entry
            entry = PoEntry()
        if not entry.line:
            entry.line = lineno
        entry.add(keyword, _po_string(m[2], path, lineno, strict, escapes))
    if entry.started:
        yield entry


def _po_entries(path: Path, max_line_chars: int, stats: ReadStats) -> Iterator[PoEntry]:
    """Parse a PO file into finished entries (obsolete ``#~`` lines are ignored)."""
    return po_entries(iter_lines(path, max_line_chars), path)


def _po(path: Path, lang: str | None, max_line_chars: int, stats: ReadStats) -> Iterator[Pair]:
    """Pairs from a PO catalogue (internal); lang from arg, header, or file name."""
    code = lang
    for entry in _po_entries(path, max_line_chars, stats):
        if entry.msgid == "" and entry.msgctxt is None:
            header_lang = _po_header_lang(entry.msgstr0 or "")
            if code is None and header_lang is not None:
                code = _canonical(header_lang, path, entry.line)
            continue
        if entry.too_long:
            stats.skipped_too_long += 1
        elif entry.fuzzy:
            stats.skipped_fuzzy += 1
        elif not entry.msgstr0 or not entry.msgstr0.strip():
            stats.skipped_untranslated += 1
        else:
            if code is None:
                code = _resolve_lang(None, path)
            pair = _make_pair(code, entry.msgstr0, entry.msgid or "", "", "", stats)
            if pair is not None:
                yield pair


def read_po(path: str | Path, lang: str | None = None, *,
            max_line_chars: int = MAX_LINE_CHARS,
            stats: ReadStats | None = None) -> Iterator[Pair]:
    """Read a gettext catalogue: ``msgid`` (English) and ``msgstr`` (``msgstr[0]`` for plurals).

    Skips the header, fuzzy entries (counted), obsolete ``#~`` entries and untranslated ones
    (counted).  The language is ``lang``, else the header's ``Language:``, else the file name
    (``de.po``, ``de/LC_MESSAGES/app.po``).
    """
    p = _check_file(path)
    code = _canonical(lang, p) if lang is not None else None
    st = stats if stats is not None else ReadStats()
    return _logged(_counted(p, _po(p, code, max_line_chars, st), st), st, p)


# --------------------------------------------------------------------------------------------
# TMX

_XML_LANG = "{http://www.w3.org/XML/1998/namespace}lang"
_TMX_TEXT_TAGS = frozenset({"hi", "sub"})  # inline elements whose text belongs to the segment


def _local(tag: str) -> str:
    """Tag name without its namespace."""
    return tag.rsplit("}", 1)[-1]


def _seg_text(seg: ET.Element) -> str:
    """Text of a ``<seg>``, leaving out native codes (``<bpt>``, ``<ph>`` ...)."""
    parts = [seg.text or ""]
    for child in seg:
        if _local(child.tag) in _TMX_TEXT_TAGS:
            parts.append(_seg_text(child))
        parts.append(child.tail or "")
    return "".join(parts)


def _tu_variants(tu: ET.Element, path: Path, index: int) -> list[tuple[str, str]]:
    """``(canonical lang, text)`` for each ``<tuv>`` of a ``<tu>``."""
    out = []
    for tuv in tu:
        if _local(tuv.tag) != "tuv":
            continue
        raw = tuv.get(_XML_LANG) or tuv.get("lang")
        if raw is None:
            raise DataError(path, f"<tuv> without xml:lang in translation unit #{index}",
                            "give every <tuv> an xml:lang attribute")
        seg = next((c for c in tuv if _local(c.tag) == "seg"), None)
        try:
            code = normalize_lang(raw)
        except UnknownLanguageError as exc:
            raise DataError(path, f"translation unit #{index}: {exc.problem}", exc.fix) from None
        out.append((code, _seg_text(seg) if seg is not None else ""))
    return out


def _tu_pairs(variants: list[tuple[str, str]], only: str | None, max_line_chars: int,
              stats: ReadStats) -> Iterator[Pair]:
    """Pairs (English + each other variant, or only ``only``) from one translation unit."""
    en = next((text for code, text in variants if code == "en"), None)
    if en is None:
        stats.skipped_no_english += 1
        return
    for code, text in variants:
        if code == "en" or (only is not None and code != only):
            continue
        if max(len(text), len(en)) > max_line_chars:
            stats.skipped_too_long += 1
            continue
        pair = _make_pair(code, text, en, "", "", stats)
        if pair is not None:
            yield pair


MAX_XML_DEPTH = 100
"""Deepest element nesting a TMX file may have (real files nest 5-8 deep)."""
_TMX_CHUNK = 1 << 16


def _xml_events(f: BinaryIO) -> Iterator[tuple[str, ET.Element, int]]:
    """``(event, element, line)`` of an XML stream, fed line by line (at most 64 KiB at a time) so
    that each event knows its line."""
    parser: ET.XMLPullParser[ET.Element] = ET.XMLPullParser(events=("start", "end"))
    line = 1
    while chunk := f.readline(_TMX_CHUNK):
        parser.feed(chunk)
        yield from _elements(parser, line)
        line += chunk.count(b"\n")
    parser.close()
    yield from _elements(parser, line)


def _elements(parser: ET.XMLPullParser[ET.Element], line: int) -> Iterator[tuple[str, ET.Element, int]]:
    """The pending start/end events of ``parser`` (other event kinds carry no element)."""
    for event in parser.read_events():
        if len(event) == 2 and isinstance(event[1], ET.Element):
            yield event[0], event[1], line


def _tmx(path: Path, only: str | None, max_line_chars: int, stats: ReadStats) -> Iterator[Pair]:
    """Pairs from a TMX file, parsed incrementally; finished ``<tu>`` are dropped."""
    stack: list[ET.Element] = []
    index = 0
    line = 1
    try:
        with _open_binary(path) as f:
            for event, elem, line in _xml_events(f):
                if event == "start":
                    stack.append(elem)
                    if len(stack) > MAX_XML_DEPTH:
                        raise DataError(path, f"elements nested more than {MAX_XML_DEPTH} deep "
                                        f"(<{_local(elem.tag)[:40]}>)", "check the TMX file (xmllint --noout "
                                        "FILE); a translation memory never nests that deep", line=line)
                    continue
                stack.pop()
                if _local(elem.tag) != "tu":
                    continue
                index += 1
                yield from _tu_pairs(_tu_variants(elem, path, index), only, max_line_chars,
                                     stats)
                elem.clear()
                if stack:
                    stack[-1].remove(elem)
    except ET.ParseError as exc:
        where = exc.position[0] if exc.position else None
        raise DataError(path, f"malformed XML: {exc}", "check the TMX file (xmllint --noout "
                        "FILE); re-download it if it is truncated", line=where) from None
    except (LookupError, ValueError) as exc:  # an XML declaration naming an unknown encoding
        raise DataError(path, f"cannot read the XML: {exc}",
                        'convert the file to UTF-8 and declare <?xml version="1.0" encoding="UTF-8"?>',
                        line=line) from None
    except (gzip.BadGzipFile, EOFError, zlib.error) as exc:
        raise DataError(path, f"cannot decompress: {exc}", "re-download the file") from None


def read_tmx(path: str | Path, lang: str | None = None, *,
             max_line_chars: int = MAX_LINE_CHARS,
             stats: ReadStats | None = None) -> Iterator[Pair]:
    """Read an (OPUS) TMX file: the English ``<tuv>`` of each ``<tu>`` against the other.

    ``lang`` picks one language when units hold several; without it every non-English variant
    gives a pair.  Units without English are skipped and counted.
    """
    p = _check_file(path)
    only = _canonical(lang, p) if lang is not None else None
    st = stats if stats is not None else ReadStats()
    return _logged(_counted(p, _tmx(p, only, max_line_chars, st), st), st, p)


# --------------------------------------------------------------------------------------------
# dispatch


def _base_name(path: Path) -> str:
    """Lower-cased file name without a ``.gz`` suffix."""
    name = path.name.lower()
    return name[:-3] if name.endswith(".gz") else name


def _moses_twin(path: Path) -> Path | None:
    """For ``corpus.de``: the English twin ``corpus.en`` (or ``.eng``) if it exists."""
    stem, dot, suffix = path.name.rpartition(".")
    if not dot or not stem or suffix.lower() in _ENGLISH_SUFFIXES:
        return None
    try:
        if normalize_lang(suffix) == "en" or len(suffix) not in (2, 3):
            return None
    except UnknownLanguageError:
        return None
    for en_suffix in _ENGLISH_SUFFIXES:
        twin = path.with_name(f"{stem}.{en_suffix}")
        if twin.is_file():
            return twin
    return None


def detect_format(path: str | Path) -> str | None:
    """The format of a file from its name: tsv, jsonl, po, tmx, tatoeba, moses, or None.

    The English file of a Moses pair (``corpus.en``) is None: pass the other file.
    """
    p = Path(path)
    name = _base_name(p)
    for fmt in ("tsv", "jsonl", "po", "tmx"):
        if name.endswith(f".{fmt}"):
            return fmt
    m = _TATOEBA.match(p.name)
    if m is not None:
        return "tatoeba"
    return "moses" if _moses_twin(p) is not None else None


def _is_english_side(path: Path) -> bool:
    """Whether ``path`` is the English file of a Tatoeba pair (read through its twin)."""
    m = _TATOEBA.match(path.name)
    return m is not None and m["side"] in _ENGLISH_SUFFIXES and m["side"] in (m["a"], m["b"])


def _unknown_format(p: Path) -> DataError:
    """The error for a file whose format is not recognised."""
    hint = ""
    if p.suffix.lstrip(".").lower() in _ENGLISH_SUFFIXES:
        hint = " (for a Moses pair, pass the non-English file, e.g. corpus.de)"
    return DataError(p, f"unrecognised data format{hint}; supported: "
                     + "; ".join(SUPPORTED_FORMATS),
                     "rename the file with one of these suffixes, or convert it to TSV")


def _read_file(p: Path, lang: str | None, max_line_chars: int, st: ReadStats,
               header: bool | None = None) -> Iterator[Pair]:
    """Counted pairs of one file, dispatched on its format (internal, no logging)."""
    fmt = detect_format(p)
    if fmt == "tsv":
        pairs: Iterable[Pair] = _tsv(p, _resolve_lang(lang, p), True, max_line_chars, st, header)
    elif fmt == "jsonl":
        pairs = _jsonl(p, _canonical(lang, p) if lang else None, max_line_chars, st)
    elif fmt == "po":
        pairs = _po(p, _canonical(lang, p) if lang else None, max_line_chars, st)
    elif fmt == "tmx":
        pairs = _tmx(p, _canonical(lang, p) if lang else None, max_line_chars, st)
    elif fmt == "tatoeba":
        x_file, en_file, code = _tatoeba_files(p, lang)
        pairs = _aligned(x_file, en_file, code, "tatoeba", max_line_chars, st)
    elif fmt == "moses":
        twin = _moses_twin(p)
        assert twin is not None
        pairs = _aligned(p, twin, _resolve_lang(lang, p), "", max_line_chars, st)
    else:
        raise _unknown_format(p)
    return _counted(p, pairs, st)


def _corpus_files(directory: Path) -> list[Path]:
    """Recognised data files of a directory, sorted by name."""
    files = [
        f for f in sorted(directory.iterdir())
        if f.is_file() and detect_format(f) and not _is_english_side(f)
    ]
    if not files:
        raise DataError(directory, "no recognised data files in this directory; supported: "
                        + "; ".join(SUPPORTED_FORMATS), "point to a file, or put data files "
                        "in the directory")
    return files


def _read_many(files: list[Path], lang: str | None, max_line_chars: int,
               st: ReadStats, header: bool | None = None) -> Iterator[Pair]:
    """Pairs of several files in order."""
    for f in files:
        yield from _read_file(f, lang, max_line_chars, st, header)


def read_corpus(path: str | Path, lang: str | None = None, *,
                max_line_chars: int = MAX_LINE_CHARS,
                stats: ReadStats | None = None, header: bool | None = None) -> Iterator[Pair]:
    """Read any supported file, or every recognised file of a directory in sorted order.

    Dispatches on the name: ``*.tsv[.gz]``, ``*.jsonl[.gz]``, ``*.po``, ``*.tmx[.gz]``,
    ``tatoeba.*``, or a Moses file (``corpus.de`` next to ``corpus.en``).  ``lang`` is passed to
    each reader (for JSONL and TMX it selects that language).  Missing files, unknown formats
    and files without any pair raise DataError.  ``header`` is passed to TSV files (see
    :func:`read_tsv`).
    """
    p = Path(path)
    st = stats if stats is not None else ReadStats()
    if p.is_dir():
        return _logged(_read_many(_corpus_files(p), lang, max_line_chars, st, header), st, p)
    fmt = detect_format(p)
    if fmt is None:
        _check_file(p)
        raise _unknown_format(p)
    if fmt != "tatoeba":  # a Tatoeba prefix names no file itself
        _check_file(p)
    return _logged(_read_file(p, lang, max_line_chars, st, header), st, p)
