"""Common Voice sentence text (CC0-1.0): general-domain monolingual sentences, read from a local folder.

Two layouts are read:

- ``DIR/LOCALE.txt`` or ``DIR/LOCALE.txt.gz``: one sentence a line (the layout of a prepared copy);
- the Common Voice repository (``mozilla/voice-web``): ``DIR/server/data/LOCALE/*.txt``, or that
  ``server/data`` folder itself (``DIR/LOCALE/*.txt``).

Locales are Common Voice's (``sv-SE``, ``zh-CN``, ``fy-NL``, ``rm-sursilv``...); each is mapped to
tinyglot's code (``sv``, ``zh``, ``fy``, ``rm``), and a locale tinyglot does not know is left out and
named in the record.  Lines are NFC-normalised with whitespace collapsed; blank lines are skipped; a
sentence repeated within a language is kept once.
"""

from __future__ import annotations

import gzip
import hashlib
import unicodedata
import zlib
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from tinyglot.errors import TinyglotError
from tinyglot.languages import UnknownLanguageError, normalize_lang

SOURCE = "commonvoice"  # the ``src`` of its rows
LICENSE = "CC0-1.0"
ATTRIBUTION = "Mozilla Common Voice sentence text (CC0-1.0)"
SUFFIXES = (".txt.gz", ".txt")
# the repository's sentence files live here
REPOSITORY_DATA = Path("server") / "data"
# what `tinyglot data general --commonvoice DIR` makes of it: monolingual training rows, and a held-out check
# (OUT/commonvoice-test/LANG.txt; the pipeline's data.tests commonvoice=auto) of teacher retrieval
CHECK_SENTENCES = 1_000  # held-out sentences per language that the check scores
FIT_SENTENCES = 300  # more held-out sentences per language, which fit the map from a model's space to its teacher's
FIT_FOLDER = "fit"  # OUT/commonvoice-test/fit/LANG.txt
CHECK_MIN = 3_000  # a language is checked when it has this many sentences (the rest still train)
MAX_PER_LANG = 10_000  # training sentences per language (a seeded sample: about what 8,000 steps draw)
MIN_WORDS = 2  # Common Voice holds many short everyday sentences ("She laughed.")


@dataclass
class CommonVoiceText:
    """Sentences per tinyglot language, and what was read to get them."""

    folder: Path
    layout: str  # "files" (LOCALE.txt[.gz]) or "repository" (LOCALE/*.txt)
    sentences: dict[str, list[str]]  # lang -> distinct sentences, in file order
    locales: dict[str, str]  # Common Voice locale -> tinyglot code
    unmapped: dict[str, int]  # locale tinyglot does not know -> its distinct sentences, left out
    files: dict[str, str] = field(default_factory=dict)  # path relative to folder -> sha256

    def counts(self) -> dict[str, int]:
        return {lang: len(s) for lang, s in sorted(self.sentences.items())}


def commonvoice_lang(locale: str) -> str | None:
    """tinyglot's code for a Common Voice locale (``sv-SE`` -> ``sv``, ``rm-vallader`` -> ``rm``,
    ``zh-HK`` -> ``zh``), or None for a locale it does not know (``bas``, ``cnh``, ``vot``)."""
    try:
        return normalize_lang(locale.replace("-", "_"))
    except UnknownLanguageError:
        return None


def locale_files(folder: str | Path) -> tuple[str, dict[str, list[Path]]]:
    """The layout of ``folder`` and its sentence files per Common Voice locale; a clear error when the
    folder is missing or holds neither layout."""
    folder = Path(folder)
    if not folder.is_dir():
        raise TinyglotError(f"--commonvoice {folder}: no such folder",
                            "pass the folder of Common Voice's LOCALE.txt(.gz) files, or a clone of its "
                            "repository (server/data/LOCALE/*.txt)")
    if (folder / REPOSITORY_DATA).is_dir():
        folder = folder / REPOSITORY_DATA
    files: dict[str, list[Path]] = {}
    for path in sorted(folder.iterdir()):
        if path.is_file():
            for suffix in SUFFIXES:
                if path.name.endswith(suffix) and len(path.name) > len(suffix):
                    files.setdefault(path.name[: -len(suffix)], []).append(path)
                    break
    if files:
        return "files", files
    for sub in sorted(p for p in folder.iterdir() if p.is_dir()):
        texts = sorted(p for p in sub.glob("*.txt") if p.is_file())
        if texts:
            files[sub.name] = texts
    if not files:
        raise TinyglotError(f"--commonvoice {folder}: no Common Voice sentence files in it",
                            "pass a folder of LOCALE.txt or LOCALE.txt.gz files (one sentence a line), or a "
                            "clone of the Common Voice repository (server/data/LOCALE/*.txt)")
    return "repository", files


def read_lines(path: Path) -> list[str]:
    """The sentences of one file (NFC, whitespace collapsed, blank lines skipped); a clear error for a
    file that is not UTF-8 text, a damaged gzip file, or one with no sentence."""
    raw = path.read_bytes()
    if path.name.endswith(".gz"):
        try:
            raw = gzip.decompress(raw)
        except (OSError, EOFError, zlib.error) as exc:
            raise TinyglotError(f"{path}: not a readable gzip file ({exc})",
                                "copy the file again, or remove it from the folder") from exc
    if b"\x00" in raw:
        raise TinyglotError(f"{path}: holds NUL bytes, so it is not a text file of sentences",
                            "pass Common Voice's sentence files (one UTF-8 sentence a line)")
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = raw[: exc.start].count(b"\n") + 1
        raise TinyglotError(f"{path}: line {line} is not UTF-8 ({exc.reason})",
                            "Common Voice's sentence files are UTF-8: copy the file again, or convert it") from exc
    lines = [" ".join(unicodedata.normalize("NFC", line).split()) for line in text.splitlines()]
    lines = [line for line in lines if line]
    if not lines:
        raise TinyglotError(f"{path}: holds no sentence", "remove the empty file from the folder, or copy it again")
    return lines


def read_commonvoice(folder: str | Path, languages: Iterable[str] | None = None) -> CommonVoiceText:
    """Every sentence of the Common Voice folder, per tinyglot language (only ``languages`` when given;
    the locales of one language, such as ``rm-sursilv`` and ``rm-vallader``, are merged in name order)."""
    layout, by_locale = locale_files(folder)
    root = Path(folder) / REPOSITORY_DATA if (Path(folder) / REPOSITORY_DATA).is_dir() else Path(folder)
    wanted = set(languages) if languages is not None else None
    sentences: dict[str, dict[str, None]] = {}
    locales: dict[str, str] = {}
    unmapped: dict[str, int] = {}
    digests: dict[str, str] = {}
    for locale, paths in by_locale.items():
        lang = commonvoice_lang(locale)
        if lang is not None and wanted is not None and lang not in wanted:
            continue
        lines = [line for path in paths for line in read_lines(path)]
        for path in paths:
            digests[path.relative_to(root).as_posix()] = hashlib.sha256(path.read_bytes()).hexdigest()
        if lang is None:
            unmapped[locale] = len(set(lines))
            continue
        locales[locale] = lang
        sentences.setdefault(lang, {}).update(dict.fromkeys(lines))
    return CommonVoiceText(Path(folder), layout, {lang: list(s) for lang, s in sorted(sentences.items())},
                           locales, unmapped, digests)
