"""The small corpus and test set shipped inside the package, so every command works offline.

``embedded/train.jsonl.gz``: a few thousand pairs per language for ten languages, drawn from the
permissively licensed sources of the project's shared corpus (attribution in ``embedded/DATA.md``).
``embedded/test.tsv.gz``: a disjoint Tatoeba-style test set (``lang<TAB>english<TAB>translation``).
Both are rebuilt bit for bit by :func:`build_embedded` (``tinyglot data build-embedded``).
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import re
from collections import defaultdict
from importlib import resources
from pathlib import Path
from collections.abc import Iterable

import numpy as np

from tinyglot.data.pairs import PERMISSIVE, Pair
from tinyglot.errors import DataError, TinyglotError
from tinyglot.io import atomic_write_bytes
from tinyglot.languages import normalize_lang

EMBEDDED_LANGS = ("de", "es", "fr", "it", "ja", "nl", "pt", "ru", "tr", "zh")
TRAIN_PER_LANG = 4000
TEST_PER_LANG = 500


def embedded_dir() -> Path:
    return Path(str(resources.files("tinyglot.data").joinpath("embedded")))


def default_corpus_path() -> Path:
    return embedded_dir() / "train.jsonl.gz"


def default_testset_path() -> Path:
    return embedded_dir() / "test.tsv.gz"


def load_pairs(path: str | Path | None = None, lang: str | None = None, header: bool | None = None) -> list[Pair]:
    """All pairs of a corpus file or folder (any supported format); the embedded corpus if None.
    ``header``: whether TSV files start with a row of column names (None: detect it)."""
    from tinyglot.data.readers import read_corpus

    pairs = list(read_corpus(default_corpus_path() if path is None else Path(path), lang=lang, header=header))
    if not pairs:
        raise DataError(path or default_corpus_path(), "no usable pairs", "check the file's format")
    return pairs


def read_testset_tsv(path: str | Path) -> dict[str, list[Pair]]:
    """Read a ``lang<TAB>english<TAB>translation`` file (the embedded test set format)."""
    from tinyglot.data.readers import MAX_LINE_CHARS, iter_lines

    path = Path(path)
    if not path.is_file():
        raise DataError(path, "file not found", "check the path given to --data")
    out: dict[str, list[Pair]] = defaultdict(list)
    for n, line in iter_lines(path, MAX_LINE_CHARS):
        if line is None or not line.strip():
            continue
        cols = [c.strip() for c in line.split("\t")]
        if len(cols) != 3:
            raise DataError(path, f"expected 3 tab-separated columns, found {len(cols)}",
                            "write lines as lang<TAB>english<TAB>translation", line=n)
        if cols[1] and cols[2]:
            lang = normalize_lang(cols[0])
            out[lang].append(Pair(lang, cols[2], cols[1]))
    if not out:
        raise DataError(path, "no test pairs", "write lines as lang<TAB>english<TAB>translation")
    return dict(out)


def load_testset(path: str | Path | None = None, lang: str | None = None) -> dict[str, list[Pair]]:
    """A test set grouped by language: the embedded one if ``path`` is None.

    ``path`` may be the embedded 3-column format, a folder of ``<lang>.tsv`` files
    (``english<TAB>translation``, as in ``shared/data/test/libreoffice``) or any corpus format.
    """
    if path is None:
        return read_testset_tsv(default_testset_path())
    path = Path(path)
    if path.is_file() and ".tsv" in path.suffixes and _is_three_column(path):
        return read_testset_tsv(path)
    grouped: dict[str, list[Pair]] = defaultdict(list)
    for pair in load_pairs(path, lang=lang):
        grouped[pair.lang].append(pair)
    return dict(grouped)


def _is_three_column(path: Path) -> bool:
    """A ``lang<TAB>english<TAB>translation`` file: 3 columns and a language code first."""
    from tinyglot.data.readers import MAX_LINE_CHARS, iter_lines

    for _, line in iter_lines(path, MAX_LINE_CHARS):
        if line and line.strip():
            cols = line.split("\t")
            return len(cols) == 3 and len(cols[0].strip()) <= 12 and " " not in cols[0].strip()
    return False


# ------------------------------------------------------------------ building the embedded files
_PUNCT = re.compile(r"[\W_]+", re.UNICODE)


def _norm_en(text: str) -> str:
    return _PUNCT.sub(" ", text.casefold()).strip()


def _take_test(test_dir: Path, per_lang: int, langs: Iterable[str], seed: int) -> list[Pair]:
    """Up to ``per_lang`` pairs per language from ``<test_dir>/<lang-variant>.tsv`` files."""
    files = {normalize_lang(p.stem): p for p in sorted(test_dir.glob("*.tsv"))}
    out: list[Pair] = []
    for lang in langs:
        if lang not in files:
            raise TinyglotError(f"no test file for {lang!r} in {test_dir}")
        rows = [ln.rstrip("\n").split("\t") for ln in files[lang].read_text(encoding="utf-8").splitlines()]
        rows = [r for r in rows if len(r) == 2 and r[0].strip() and r[1].strip()]
        pick = np.random.default_rng([seed, len(out)]).permutation(len(rows))[:per_lang]
        out += [Pair(lang, rows[i][1], rows[i][0], "libreoffice-help", "MPL-2.0") for i in sorted(pick)]
    return out


def build_embedded(
    shared_data: str | Path,
    out_dir: str | Path | None = None,
    langs: Iterable[str] = EMBEDDED_LANGS,
    train_per_lang: int = TRAIN_PER_LANG,
    test_per_lang: int = TEST_PER_LANG,
    seed: int = 0,
) -> dict[str, str]:
    """Rebuild the embedded corpus and test set from the shared data folder.

    Training pairs: only permissive licences; sentences of 3+ words preferred (half the sample),
    the rest uniform; no English sentence of the test set (after lower-casing and stripping
    punctuation).  Returns the sha256 of each written file.
    """
    from tinyglot.data.readers import read_jsonl

    shared = Path(shared_data)
    out = Path(out_dir) if out_dir else embedded_dir()
    langs = tuple(normalize_lang(x) for x in langs)
    test = _take_test(shared / "test" / "libreoffice", test_per_lang, langs, seed)
    banned = {_norm_en(p.en) for p in test}
    pool: dict[str, list[Pair]] = defaultdict(list)
    for pair in read_jsonl(shared / "train.jsonl.gz"):
        if pair.lang in langs and pair.license in PERMISSIVE and _norm_en(pair.en) not in banned:
            pool[pair.lang].append(pair)
    train: list[Pair] = []
    for i, lang in enumerate(langs):
        ps = pool[lang]
        rng = np.random.default_rng([seed, 1000 + i])
        long_idx = [j for j, p in enumerate(ps) if len(p.en.split()) >= 3]
        first = rng.permutation(long_idx)[: train_per_lang // 2].tolist()
        chosen = set(first)
        rest = [j for j in rng.permutation(len(ps)).tolist() if j not in chosen][: train_per_lang - len(first)]
        train += [ps[j] for j in sorted(first + rest)]
    buf = io.BytesIO()
    with gzip.GzipFile(fileobj=buf, mode="wb", mtime=0) as gz:
        for p in test:
            gz.write(f"{p.lang}\t{p.en}\t{p.x}\n".encode())
    atomic_write_bytes(out / "test.tsv.gz", buf.getvalue())
    write_jsonl(out / "train.jsonl.gz", train)
    return {name: hashlib.sha256((out / name).read_bytes()).hexdigest()
            for name in ("train.jsonl.gz", "test.tsv.gz")}


def write_jsonl(path: str | Path, pairs: Iterable[Pair]) -> None:
    """Write pairs as (gzipped, by suffix) JSONL, atomically and reproducibly (no gzip mtime)."""
    data = "".join(json.dumps(p.to_dict(), ensure_ascii=False) + "\n" for p in pairs).encode("utf-8")
    if str(path).endswith(".gz"):
        buf = io.BytesIO()
        with gzip.GzipFile(fileobj=buf, mode="wb", mtime=0) as gz:
            gz.write(data)
        data = buf.getvalue()
    atomic_write_bytes(path, data)
