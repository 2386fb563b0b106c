"""``tinyglot release``: a trained student becomes a released model, ``tinyglot/released/NAME/``.

:func:`release_student` exports the student as int8 bundles that stock runtimes open (``onnx-text``:
onnxruntime + onnxruntime-extensions; ``tflite-mediapipe``: MediaPipe's TextEmbedder) with the export
API, so every parity gate of the export runs (in process and in a process that imports only the
runtime); then it

- records the embeddings of a few sentences from each bundle (the guard of ``tests/test_released.py``),
- measures each bundle's speed on this machine (one thread, single sentences and a batch),
- reads the P@1 per test set of the student, its teacher and USE-m from a results JSON (a ``tinyglot run``'s
  ``eval/results.json``, the ``--json`` of ``benchmarks/peers.py``, per-model ``tinyglot eval --json``
  files, or the numbers themselves),
- counts the data attributions from the training corpus's rows (``src``/``license``) and refuses
  licences that the release's tier does not allow (``tinyglot.data.pairs.licence_tier``: ``permissive``,
  the weights under Apache-2.0; ``share-alike``, permissive and CC-BY-SA text, the weights under
  CC-BY-SA-4.0; GPL-family text never),
- writes ``MODEL_CARD.md``, ``LICENSES.md`` (the teacher's licence, the data attributions) and
  ``release.json`` (the manifest, with the sha256 of every file),

all in a staging folder beside ``NAME`` that replaces it in one atomic swap, and only when the whole
model is at most ``max_bytes`` (at most ``MAX_RELEASE_BYTES``, USE-m's 33 MB).  A ``NAME`` folder that
tinyglot did not write is never touched (:mod:`tinyglot.outputs`).

The card data (``--card-data FILE``, a JSON object; paths in it are relative to the file) says what the
student folder does not::

    {"description": "balanced multilingual student distilled from multilingual-e5-small",
     "teacher": "e5-small",
     "training": {"command": "tinyglot run --profile e5 ...", "steps": 10000, "data": "...", "preset": "fast-small"},
     "corpus": ["runs/e5/data/train.jsonl.gz"],
     "attributions": [{"src": "fortunes-de", "license": "public-domain", "rows": 1234, "by": "..."}],
     "results": "runs/peers.json",
     "student_spec": "runs/e5/export/onnx-text-dynamic",
     "test_sets": {"libreoffice": "shared/data/test/libreoffice: 10 languages, up to 1,000 pairs each"}}
"""

from __future__ import annotations

import contextlib
import datetime
import gzip
import importlib.metadata
import json
import os
import re
import shutil
import statistics
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from tinyglot.data.pairs import source_counts
from tinyglot.errors import TinyglotError
from tinyglot.released import (
    CARD,
    DEFAULT_FORMAT,
    FORMATS,
    LICENSES,
    MANIFEST,
    MANIFEST_VERSION,
    MAX_RELEASE_BYTES,
    RELEASED_KIND,
    check_name,
    released_root,
)

from tinyglot.data.pairs import TIERS, WEIGHTS_LICENCE, licence_tier, tier_allows

QUANTIZATION = "dynamic"  # int8: what a released bundle is
QUANTIZATIONS = (QUANTIZATION, "dynamic-int4-embeddings")  # the second for the ONNX bundles; others stay int8
COLUMNS = ("student", "teacher", "use-m")  # the P@1 columns of a release, per language and test set
# The sentences whose embeddings a release records (first RECORDED_DIMS values of each row, and the cosines
# between them): the guard that a runtime or a file still computes what was released.
RECORDED_SENTENCES = ("Where is the printer?", "Wo ist der Drucker?", "プリンターはどこですか？",
                      "Откройте файл, чтобы изменить настройки.")
RECORDED_DIMS = 16
# Tolerances of that guard: on a CPU with the int8 kernels of the release machine (the same
# runtime versions) the rows agree to float round-off; other kernels (AVX2 without VNNI, ARM) may
# round int8 products differently.
TOLERANCE = {"abs": 1e-3, "cosine": 1e-3, "other_kernels_abs": 3e-2, "other_kernels_cosine": 3e-2}
SPEED_SENTENCES = 128
SPEED_QUERIES = 60
SPEED_BATCH = 32

E5_SMALL = {
    "name": "multilingual-e5-small",
    "source": "https://huggingface.co/intfloat/multilingual-e5-small",
    "licence": "MIT",
    "copyright": "Copyright (c) Microsoft Corporation",
    "paper": "Liang Wang, Nan Yang, Xiaolong Huang, Linjun Yang, Rangan Majumder, Furu Wei: Multilingual E5 Text "
             "Embeddings: A Technical Report, arXiv:2402.05672 (2024)",
}
MIT_TEXT = """Permission is hereby granted, free of charge, to any person obtaining a copy of this software and
associated documentation files (the "Software"), to deal in the Software without restriction, including
without limitation the rights to use, copy, modify, merge, publish, distribute, sublicense, and/or sell copies
of the Software, and to permit persons to whom the Software is furnished to do so, subject to the following
conditions:

The above copyright notice and this permission notice shall be included in all copies or substantial portions
of the Software.

THE SOFTWARE IS PROVIDED "AS IS", WITHOUT WARRANTY OF ANY KIND, EXPRESS OR IMPLIED, INCLUDING BUT NOT LIMITED
TO THE WARRANTIES OF MERCHANTABILITY, FITNESS FOR A PARTICULAR PURPOSE AND NONINFRINGEMENT. IN NO EVENT SHALL
THE AUTHORS OR COPYRIGHT HOLDERS BE LIABLE FOR ANY CLAIM, DAMAGES OR OTHER LIABILITY, WHETHER IN AN ACTION OF
CONTRACT, TORT OR OTHERWISE, ARISING FROM, OUT OF OR IN CONNECTION WITH THE SOFTWARE OR THE USE OR OTHER
DEALINGS IN THE SOFTWARE."""
# Who holds the rights of the shared corpus's permissive sources (tinyglot/data/embedded/DATA.md).
KNOWN_SOURCES = {
    "libreoffice-help": "The Document Foundation and LibreOffice contributors and translators",
    "apache_superset": "The Apache Software Foundation and Superset translators",
    "wagtail": "Torchbox Ltd and Wagtail contributors and translators",
    "django": "Django Software Foundation and individual contributors",
    "sphinx": "the Sphinx team and translators",
    "django_cms": "Divio AG and django CMS contributors",
    "allauth": "Raymond Penners and contributors",
    # the permissive sources of `tinyglot data general` (data/README.md), from their packages' copyright files
    "debmake-doc": "Osamu Aoki, Stéphane Blondon and the debmake-doc translators",
    "fortunes-it": "the fortune-it collection (fortune-it.net): quotations credited in each entry",
    "cldr-annotations": "Unicode, Inc. (the Unicode Common Locale Data Repository)",
    "chatterbot": "Gunther Cox and the chatterbot-corpus contributors",
    "spacy-examples": "ExplosionAI GmbH, spaCy GmbH and Matthew Honnibal",
    "commonvoice": "Mozilla Common Voice sentence text (CC0-1.0): the Common Voice contributors",
    # the share-alike sources (CC-BY-SA: a model trained on them is released under CC-BY-SA-4.0)
    "cataclysm-dda": "the Cataclysm: Dark Days Ahead contributors and translators (CC-BY-SA-3.0)",
    "flare": "Clint Bellanger and the Flare contributors and translators (CC-BY-SA-3.0)",
    "supertux": "the SuperTux team and translators (under its CC-BY-SA-3.0 option)",
    "wordfreq": "Robyn Speer, Luminoso Technologies and wordfreq's sources (word lists, CC-BY-SA-4.0)",
}
CARD_KEYS = {"description", "teacher", "teacher_licence", "training", "corpus", "attributions", "results",
             "student_spec", "teacher_spec", "test_sets", "languages", "speed", "notes"}
# licences no shipped model is trained on, whatever --allow-licence says
NEVER_SHIPPED = re.compile(r"\b(A|L)?GPL\b")


# ====================================================================== inputs
def read_card_data(card_data: str | os.PathLike[str] | dict | None) -> tuple[dict[str, Any], Path]:
    """The card data (a dict, or a JSON file) and the folder its relative paths start from."""
    if card_data is None:
        return {}, Path.cwd()
    if isinstance(card_data, dict):
        data, base = dict(card_data), Path.cwd()
    else:
        path = Path(card_data)
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise TinyglotError(f"cannot read the card data {path} ({type(exc).__name__}: {exc})",
                                "pass a JSON object (see `tinyglot release --help`)") from None
        base = path.resolve().parent
    if not isinstance(data, dict):
        raise TinyglotError("the card data is not a JSON object", "pass {\"description\": ..., \"results\": ...}")
    unknown = sorted(set(data) - CARD_KEYS)
    if unknown:
        raise TinyglotError(f"the card data has unknown keys: {', '.join(unknown)}",
                            f"use only: {', '.join(sorted(CARD_KEYS))}")
    return data, base


NOTE_FIELD = re.compile(r"\{([A-Za-z0-9_.-]+)(?::(student|teacher|use-m|share))?\}")


def fill_notes(notes: Any, results: dict[str, Any]) -> str | None:
    """The card data's ``notes`` with each ``{TEST}`` replaced by the student's mean P@1 on TEST from the
    release's results (``{TEST:teacher}``, ``{TEST:use-m}``: theirs; ``{TEST:share}``: the student's as a
    percentage of the teacher's), so that a note cannot keep the numbers of an earlier run.  A field that
    names no test, or a model the results do not hold, is refused."""
    if notes is None:
        return None
    tests = results.get("tests") or {}

    def value(match: re.Match) -> str:
        test, column = match.group(1), match.group(2) or "student"
        means = (tests.get(test) or {}).get("mean") or {}
        needed = ("student", "teacher") if column == "share" else (column,)
        # a share needs a non-zero teacher P@1 to divide by
        if any(means.get(k) is None for k in needed) or (column == "share" and not means["teacher"]):
            raise TinyglotError(f"the card data's notes name {match.group(0)}, but the results hold no "
                                f"{' and '.join(needed)} P@1 on {test!r}",
                                f"name one of: {', '.join(sorted(tests)) or 'no test (pass --card-data results)'}")
        if column == "share":
            return f"{100 * float(means['student']) / float(means['teacher']):.1f} %"
        return f"{float(means[column]):.1f}"

    return NOTE_FIELD.sub(value, str(notes))


def _path(value: Any, base: Path, what: str) -> Path:
    if not isinstance(value, str) or not value:
        raise TinyglotError(f"the card data's {what} is {value!r}, not a path")
    path = Path(value).expanduser()
    return path if path.is_absolute() else base / path


def _corpus_rows(path: Path) -> Iterator[tuple[str, str, str]]:
    """``(src, license, lang)`` of each row of a JSONL corpus file (plain or .gz)."""
    if not path.is_file():
        raise TinyglotError(f"corpus {path} not found", "pass the training corpus (JSONL rows with src, license)")
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt", encoding="utf-8") as fh:
        for n, line in enumerate(fh, 1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except ValueError:
                raise TinyglotError(f"{path}:{n} is not a JSON row",
                                    "pass a JSONL corpus whose rows name their src and license") from None
            if isinstance(row, dict):
                yield (str(row.get("src") or ""), str(row.get("license") or row.get("licence") or ""),
                       str(row.get("lang") or ""))


def _attributed(counts: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{**entry, "by": KNOWN_SOURCES.get(entry["src"], "")} for entry in counts]


def corpus_attributions(paths: Iterable[Path]) -> list[dict[str, Any]]:
    """Rows, languages and licence per source (``src``) of JSONL corpus files (plain or .gz), from their rows'
    ``src`` and ``license`` fields; a row without them counts as source ``unknown``."""
    return _attributed(source_counts(row for path in paths for row in _corpus_rows(path)))


def run_attributions(student: Path) -> list[dict[str, Any]] | None:
    """The data attributions a ``tinyglot run`` recorded beside its student (``distill/summary.json``: the
    sources of the pairs it trained on); None when there is no such record."""
    try:
        summary = json.loads((student.parent / "summary.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    sources = summary.get("sources") if isinstance(summary, dict) else None
    return _attributed(sources) if isinstance(sources, list) else None


def check_tier(tier: str) -> str:
    """``tier`` when it is one a release takes (:data:`~tinyglot.data.pairs.TIERS`), else a clear error."""
    if tier not in TIERS:
        raise TinyglotError(f"a release is of the tier {' or '.join(TIERS)}, not {tier!r}",
                            "permissive: the weights under Apache-2.0; share-alike: under CC-BY-SA-4.0")
    return tier


def check_licences(attributions: Sequence[dict], tier: str = "permissive", allowed: Iterable[str] = ()) -> None:
    """Refuse training data under a licence a release of ``tier`` may not carry: above the tier (copyleft, or
    CC-BY-SA in a permissive release), unknown, or GPL-family text, which no shipped model carries even when
    ``allowed`` names it (``--allow-licence`` is for a licence you checked to be permissive)."""
    allowed = set(allowed)
    never = [a for a in attributions if NEVER_SHIPPED.search(str(a.get("license", "")))
             and licence_tier(a.get("license", "")) not in TIERS]
    bad = [a for a in attributions
           if not tier_allows(tier, a.get("license", "")) and (a.get("license") not in allowed or a in never)]
    if bad:
        listed = ", ".join(f"{a.get('src')} ({a.get('license')}, {a.get('rows', '?')} rows)" for a in bad[:8])
        gpl = any(a in never for a in bad)
        raise TinyglotError(f"the student was trained on data that a {tier} release may not carry: {listed}",
                            ("GPL-family text never goes into a shipped model: train it " if gpl else "train it ")
                            + f"on the {tier} rows only (data.tier={tier}, tinyglot data general --tier {tier})"
                            + ("" if gpl else "; after checking a licence yourself, pass --allow-licence LICENCE"))


def _pct(value: Any) -> float | None:
    return None if value is None else round(float(value), 2)


def _eval_json_p1(data: Any, where: str) -> dict[str, float]:
    """Per-language P@1 (percent, unrounded: the card's means are taken before rounding) of a ``tinyglot eval
    --json`` result (fractions) or a ``{lang: percent}`` map."""
    if isinstance(data, dict) and isinstance(data.get("languages"), list):
        return {str(r["lang"]): 100 * float(r["mean"]) for r in data["languages"]}
    if isinstance(data, dict) and all(isinstance(v, (int, float)) for v in data.values()):
        return {str(k): float(v) for k, v in data.items()}
    raise TinyglotError(f"{where} is neither a `tinyglot eval --json` result nor a {{language: P@1}} map")


def _column(value: Any, base: Path, where: str) -> dict[str, float]:
    if isinstance(value, str):
        path = _path(value, base, where)
        try:
            value = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise TinyglotError(f"cannot read {path} ({where}): {exc}") from None
    return _eval_json_p1(value, where)


def _peers_rows(data: dict, source: str, student_spec: str | None, teacher_spec: str, name: str
                ) -> tuple[dict[str, dict[str, dict[str, float]]], list[dict]]:
    """Per test set, the columns of a ``benchmarks/peers.py --json`` file; and its speed rows."""
    rows = [r for r in data.get("rows", []) if isinstance(r, dict) and "error" not in r]
    ours = [r for r in rows if r.get("kind") != "peer"]
    if student_spec is not None:
        student = next((r for r in ours if r.get("spec") == student_spec), None)
        if student is None:
            raise TinyglotError(f"{source} has no row for the student_spec {student_spec!r} "
                                f"(its rows: {', '.join(str(r.get('spec')) for r in ours) or 'none'})")
    elif len(ours) == 1:
        student = ours[0]
    else:
        raise TinyglotError(f"{source} has {len(ours)} rows of tinyglot models: the card data must say which is the "
                            "released student", "add \"student_spec\": \"<its spec in that file>\"")
    picks = {"student": student, "teacher": next((r for r in rows if r.get("spec") == teacher_spec), None),
             "use-m": next((r for r in rows if r.get("spec") == "use-m"), None)}
    tests: dict[str, dict[str, dict[str, float]]] = {}
    for column, row in picks.items():
        for test, block in ((row or {}).get("p1_by_test") or {}).items():
            tests.setdefault(test, {})[column] = {str(k): float(v) for k, v in (block.get("per_lang") or {}).items()}
    threads = data.get("settings", {}).get("threads")
    batch = data.get("settings", {}).get("batch")
    speed = []
    for row in rows:
        if row.get("kind") == "peer" and row.get("spec") not in (teacher_spec, "use-m"):
            continue
        label = f"{name} ({row.get('kind')})" if row is student else (
            str(row.get("spec")) if row.get("kind") == "peer" else f"{row.get('kind')}: {Path(str(row['spec'])).name}")
        speed.append({"model": label, "format": None,
                      "threads": row.get("threads", threads), "p50_ms": row.get("p50_ms"),
                      "p90_ms": row.get("p90_ms"), "sentences_per_s": row.get("sentences_per_s"), "batch": batch,
                      "size_mb": row.get("size_mb"), "machine": data.get("settings", {}).get("machine"),
                      "source": source})
    return tests, speed


def _run_columns(data: dict) -> dict[str, dict[str, dict[str, float]]]:
    """Per test set, the columns of a ``tinyglot run`` evaluation (``RUN/eval/results.json``): the student is
    its int8 ``onnx-text`` bundle (what a release ships), else its other bundle or the PyTorch student; the
    teacher and USE-m are its ``teacher`` and ``peer use-m`` rows. The main test is named by its folder."""
    def columns(models: list[dict]) -> dict[str, dict[str, float]]:
        bundles = [m for m in models if m.get("kind") == "bundle"]
        ours = ([m for m in bundles if str(m.get("name")).startswith("onnx-text")] or bundles
                or [m for m in models if m.get("kind") == "student"])
        picks = {"student": ours[0] if ours else None,
                 "teacher": next((m for m in models if m.get("kind") == "teacher"), None),
                 "use-m": next((m for m in models if m.get("name") == "peer use-m"), None)}
        return {col: _eval_json_p1(m["result"], f"the {col} row") for col, m in picks.items()
                if m is not None and isinstance(m.get("result"), dict)}

    main = Path(str(data.get("testset", "test")).split(" (")[0]).name or "test"
    tests = {main: columns(data.get("models", []))}
    for block in data.get("extra", []):
        tests[str(block["name"])] = columns(block.get("models", []))
    if not all("student" in cols for cols in tests.values()):
        raise TinyglotError("the run's results hold no student row", "pass RUN/eval/results.json of a finished run")
    return tests


def read_results(card: dict, base: Path, name: str, teacher_spec: str) -> tuple[dict[str, Any], list[dict]]:
    """``(results, speed rows)``: P@1 per language of the student, the teacher and USE-m per test set (percent),
    with the mean of each column over the languages all three have."""
    value = card.get("results")
    if value is None:
        return {"source": None, "teacher": teacher_spec, "tests": {}}, []
    source = "card data"
    if isinstance(value, str):
        path = _path(value, base, "results")
        source = str(value)
        try:
            value = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise TinyglotError(f"cannot read the results {path}: {exc}",
                                "pass the --json of benchmarks/peers.py, or {test: {student, teacher, use-m}}"
                                ) from None
    if not isinstance(value, dict):
        raise TinyglotError("the card data's results are not a JSON object")
    speed: list[dict] = []
    if "rows" in value:
        columns, speed = _peers_rows(value, source, card.get("student_spec"), teacher_spec, name)
    elif "models" in value and "testset" in value:
        columns = _run_columns(value)
    else:
        columns = {}
        for test, block in value.items():
            if not isinstance(block, dict) or not set(block) <= set(COLUMNS) or "student" not in block:
                raise TinyglotError(f"results[{test!r}] must be {{\"student\": ..., \"teacher\": ..., \"use-m\": ...}}")
            columns[test] = {col: _column(v, base, f"results[{test!r}][{col!r}]") for col, v in block.items()}
    tests = {}
    for test, cols in columns.items():
        langs = sorted(set().union(*(set(c) for c in cols.values()))) if cols else []
        table = {lang: {col: _pct(cols.get(col, {}).get(lang)) for col in COLUMNS} for lang in langs}
        shared = [lang for lang in langs if all(cols.get(c, {}).get(lang) is not None for c in cols)]
        # three decimals, so that the card's one-decimal figure is the run report's (no rounding twice)
        mean = {col: (round(statistics.fmean(cols[col][lang] for lang in shared), 3)
                      if col in cols and shared else None) for col in COLUMNS}
        tests[test] = {"languages": table, "mean": mean, "mean_over": shared}
    return {"source": source, "teacher": teacher_spec, "tests": tests}, speed


# ====================================================================== measuring the bundles
def _int8_kernels() -> str:
    """The int8 kernel family of this CPU (the export preset tinyglot picks for it)."""
    try:
        from tinyglot.devices.profiles import detect_host

        return str(detect_host().get("int8_preset") or "unknown")
    except Exception:  # noqa: BLE001 - a description only
        return "unknown"


def _machine() -> str:
    try:
        from tinyglot.devices.profiles import detect_host

        host = detect_host()
        return f"{host.get('cpu_model', '?')} ({host.get('cores_logical', '?')} cores)"
    except Exception:  # noqa: BLE001 - a description only
        return "unknown"


def _runtime_versions() -> dict[str, str]:
    out = {}
    for dist in ("onnxruntime", "onnxruntime-extensions", "mediapipe", "torch", "tinyglot"):
        with contextlib.suppress(importlib.metadata.PackageNotFoundError):
            out[dist] = importlib.metadata.version(dist)
    return out


def record_embeddings(encoder: Any) -> dict[str, Any]:
    """What the release records of one bundle: the first dims of the rows of :data:`RECORDED_SENTENCES`,
    each encoded in a call of its own (dynamic int8 quantises activations per call, so a row depends on
    the other rows of its batch), and the cosines between the rows."""
    emb = np.concatenate([np.asarray(encoder.encode([s]), dtype=np.float64) for s in RECORDED_SENTENCES])
    return {"rows": [[round(float(v), 6) for v in row[:RECORDED_DIMS]] for row in emb],
            "cosines": [[round(float(v), 6) for v in row] for row in emb @ emb.T],
            "call": "one sentence at a time"}


def measure_speed(encoder: Any, fmt: str, sentences: Sequence[str], name: str,
                  quantization: str | None = None) -> dict[str, Any]:
    """A quick figure of one bundle on this machine, one thread: p50/p90 of single sentences (after warm-up)
    and sentences/s of batches of :data:`SPEED_BATCH` (MediaPipe embeds one sentence per call).
    ``quantization``: the bundle's label (:func:`_quantization_label`), shown in the row's model name."""
    for s in sentences[:5]:
        encoder.encode([s])
    lat = []
    for i in range(SPEED_QUERIES):
        t = time.perf_counter()
        encoder.encode([sentences[i % len(sentences)]])
        lat.append(1000 * (time.perf_counter() - t))
    t = time.perf_counter()
    encoder.encode(list(sentences), batch_size=SPEED_BATCH)
    throughput = len(sentences) / (time.perf_counter() - t)
    lat.sort()
    precision = "int8" if quantization in (None, QUANTIZATION) else quantization
    return {"model": f"{name} ({fmt} {precision})", "format": fmt, "threads": 1,
            "p50_ms": round(float(np.percentile(lat, 50)), 3), "p90_ms": round(float(np.percentile(lat, 90)), 3),
            "sentences_per_s": round(throughput, 1), "batch": SPEED_BATCH if fmt == "onnx-text" else 1,
            "machine": _machine(), "source": f"measured at release ({SPEED_QUERIES} single-sentence queries, "
                                              f"{len(sentences)} sentences of the embedded test set)"}


# ====================================================================== the card and the licences
def _fmt(value: Any, digits: int = 1) -> str:
    return "–" if value is None else f"{value:,.{digits}f}"


def _mb(n: int) -> str:
    return f"{n / 1e6:.2f} MB"


def quality_section(manifest: dict) -> str:
    results = manifest["results"]
    teacher = results.get("teacher") or "teacher"
    if not results.get("tests"):
        return "No P@1 was recorded with this release (the card data named no results).\n"
    out = [f"Bitext retrieval P@1 (%, mean of x→en and en→x) on each test set, the student beside its "
           f"teacher ({teacher}) and USE-m, from {results.get('source')}.", ""]
    described = manifest.get("test_sets") or {}
    for test, block in results["tests"].items():
        out += [f"### {test}", ""]
        if described.get(test):
            out += [str(described[test]), ""]
        out += [f"| language | {manifest['name']} | {teacher} | USE-m | {manifest['name']} / {teacher} |",
                "|---|---:|---:|---:|---:|"]
        for lang, row in block["languages"].items():
            ratio = (f"{100 * row['student'] / row['teacher']:.0f} %" if row.get("student") is not None
                     and row.get("teacher") else "–")
            out.append(f"| {lang} | {_fmt(row.get('student'))} | {_fmt(row.get('teacher'))} | "
                       f"{_fmt(row.get('use-m'))} | {ratio} |")
        mean = block["mean"]
        ratio = (f"{100 * mean['student'] / mean['teacher']:.0f} %" if mean.get("student") is not None
                 and mean.get("teacher") else "–")
        out.append(f"| **mean** ({len(block['mean_over'])} languages) | **{_fmt(mean.get('student'))}** | "
                   f"{_fmt(mean.get('teacher'))} | {_fmt(mean.get('use-m'))} | {ratio} |")
        out.append("")
    return "\n".join(out)


def speed_section(manifest: dict) -> str:
    rows = manifest.get("speed") or []
    if not rows:
        return "No speed was recorded.\n"
    out = ["| model | threads | batch | p50 ms (1 sentence) | p90 ms | sentences/s | machine | source |",
           "|---|---:|---:|---:|---:|---:|---|---|"]
    for r in rows:
        out.append(f"| {r.get('model')} | {r.get('threads') or '–'} | {r.get('batch') or '–'} | "
                   f"{_fmt(r.get('p50_ms'), 2)} | {_fmt(r.get('p90_ms'), 2)} | {_fmt(r.get('sentences_per_s'), 0)} | "
                   f"{r.get('machine') or '–'} | {r.get('source') or '–'} |")
    return "\n".join(out) + "\n"


def licences_text(manifest: dict) -> str:
    lic = manifest["licences"]
    teacher = lic["teacher"]
    out = [f"# Licences and attributions: {manifest['name']}", "",
           f"The released model ({manifest['name']}) is distributed under **{lic['model']}**; tinyglot's code is "
           "Apache-2.0. It was distilled from the teacher below and trained on the data below: their notices "
           "travel with it.", "", tier_text(manifest.get("tier", "permissive")), "", "## The teacher", ""]
    if teacher.get("licence") == "MIT" and teacher.get("copyright"):
        out += [f"{teacher['name']} ({teacher.get('source', '')}), licence MIT:", "", "```",
                "MIT License", "", teacher["copyright"], "", MIT_TEXT, "```", ""]
        if teacher.get("paper"):
            out += [f"Cite: {teacher['paper']}.", ""]
    else:
        out += [f"{teacher.get('name')}: {teacher.get('licence')}" + (f" ({teacher['source']})"
                                                                        if teacher.get("source") else ""), ""]
        if teacher.get("text"):
            out += ["```", str(teacher["text"]), "```", ""]
    out += ["## The training data", "", "| source | licence | rows | languages | rights holders / attribution |",
            "|---|---|---:|---:|---|"]
    for a in lic["data"]:
        rows = f"{a['rows']:,}" if isinstance(a.get("rows"), int) else str(a.get("rows") or "–")
        out.append(f"| {a.get('src')} | {a.get('license')} | {rows} | {a.get('languages') or '–'} | "
                   f"{a.get('by') or ''} |")
    if not lic["data"]:
        out.append("| (no corpus was named at release) | | | | |")
    out += ["", "Licence texts: MPL-2.0 https://mozilla.org/MPL/2.0/, Apache-2.0 "
            "https://www.apache.org/licenses/LICENSE-2.0, BSD-2-Clause / BSD-3-Clause / MIT "
            "https://opensource.org/licenses. The segments were extracted from the projects' translation files and "
            "used to train the model; no text of them is stored in the model files.", ""]
    return "\n".join(out)


def tier_text(tier: str) -> str:
    """What a release's licence tier means, in a sentence or two."""
    if tier == "share-alike":
        return ("Tier: **share-alike**. It learnt from CC-BY-SA text (marked below) as well as permissive text, so "
                "its weights are released under CC-BY-SA-4.0: a model made from them carries the same licence and "
                "the attributions below. No GPL-family text went into it.")
    return ("Tier: **permissive**. It learnt only from permissively licensed or public-domain text (CC0, MIT, BSD, "
            "MPL, Apache, Unicode), so its weights are released under Apache-2.0. No share-alike or GPL-family "
            "text went into it.")


def no_mediapipe_usage() -> str:
    return """### Android, iOS and the browser

This release holds no `tflite-mediapipe` bundle (with it the model would exceed the size limit of a release).
`tinyglot export --model STUDENT --format tflite-mediapipe` makes one from the student that the training
command below writes (`RUN/distill/student`); the Kotlin and browser code of a release that has one applies
to it unchanged.
"""


def mediapipe_usage(name: str) -> str:
    from tinyglot.export.tflite_mediapipe import kotlin_snippet

    return f"""### Android (Kotlin, MediaPipe TextEmbedder)

Copy `tflite-mediapipe/model.tflite` into `app/src/main/assets/{name}.tflite`; add
`implementation("com.google.mediapipe:tasks-text:0.10.21")` (0.10.15 or newer: older versions read the
int8 file's embedding table wrongly):

{kotlin_snippet(name + ".tflite", "Wo ist der Drucker?", "Where is the printer?")}

The first embedding head (`sentence_embedding`) is the sentence embedding; the second (`token_ids`)
only serves checks.

### The browser (MediaPipe tasks-text)

The demo in `examples/web` (`npm install` there, serve the repository root with any static server) opens
this model with `examples/web/index.html?model=../../tinyglot/released/{name}/tflite-mediapipe/model.tflite`.
In your own page:

```js
import {{ FilesetResolver, TextEmbedder }} from "@mediapipe/tasks-text";
const fileset = await FilesetResolver.forTextTasks("node_modules/@mediapipe/tasks-text/wasm");
const embedder = await TextEmbedder.createFromOptions(fileset,
  {{ baseOptions: {{ modelAssetPath: "{name}/tflite-mediapipe/model.tflite" }} }});
const a = embedder.embed("Wo ist der Drucker?").embeddings[0];
const b = embedder.embed("Where is the printer?").embeddings[0];
console.log(TextEmbedder.cosineSimilarity(a, b));
```
"""


def model_card(manifest: dict) -> str:
    m = manifest
    name = m["name"]
    made = m["made"]
    formats = m["formats"]
    sizes = "; ".join(f"`{fmt}/` {_mb(f['bytes'])} (model file {_mb(f['model_file_bytes'])})"
                      for fmt, f in formats.items())
    parity = "\n".join(
        f"- `{fmt}`: mean cosine {f['parity'].get('mean_cosine', float('nan')):.4f} to the PyTorch student, "
        f"P@1 drop {f['parity'].get('p1_drop', float('nan')):.2f} points; checked again in a process with "
        f"{'onnxruntime + onnxruntime-extensions' if fmt == 'onnx-text' else 'mediapipe'} only"
        for fmt, f in formats.items())
    steps = made.get("steps")
    training = [f"- teacher: {made.get('teacher') or '–'}",
                f"- student: {made.get('student_shape') or '–'} ({made.get('preset') or 'preset not recorded'})",
                f"- steps: {steps:,}" if isinstance(steps, int) else f"- steps: {steps or '–'}",
                f"- data: {made.get('data') or '–'} (rows per source: [LICENSES.md](LICENSES.md))",
                f"- training command: `{made.get('training_command') or 'not recorded'}`",
                f"- release command: `{made.get('release_command')}`",
                f"- released with tinyglot {made.get('tinyglot')} on {made.get('date')}; runtimes: "
                + ", ".join(f"{k} {v}" for k, v in made.get("runtimes", {}).items() if k != "tinyglot")]
    training += [f"- refreshed on {r.get('date')} (`{r.get('command')}`, tinyglot {r.get('tinyglot')}): "
                 + "; ".join(r.get("graphs", [])) + " (the same rows, checked against the released file)"
                 for r in made.get("refreshed", []) if isinstance(r, dict)]
    langs = m["languages"]
    mp = "tflite-mediapipe" in formats
    teacher = m["licences"]["teacher"]
    precision = ("int8, the ONNX token table in 4-bit blocks" if made.get("quantization") == "dynamic-int4-embeddings"
                 else "int8")
    return f"""# {name}: {m['description']}

A released tinyglot student: {m['dim']}-dimensional sentence embeddings for {len(langs)} languages
({', '.join(langs)}), {precision}, {_mb(m['bytes'])} in all. Bundles that stock runtimes open, each taking raw
strings (the SentencePiece tokenizer is inside): {sizes}.

- `onnx-text/model.onnx`: onnxruntime + onnxruntime-extensions (Python, C++, Java, C#, mobile)
{"- `tflite-mediapipe/model.tflite`: MediaPipe's TextEmbedder (Android, iOS, the browser, Python)" if mp else ""}

Licence: {m['licences']['model']} (the {m.get('tier', 'permissive')} tier); the teacher's licence
({teacher.get('name')}, {teacher.get('licence')}) and the data attributions are in [LICENSES.md](LICENSES.md).
The sha256 of every file is in `{MANIFEST}`.

## Quality

{quality_section(m)}
## Speed

{speed_section(m)}
## Use it

### Python, with tinyglot

```python
import tinyglot

enc = tinyglot.load("{name}")                               # the onnx-text bundle (onnxruntime)
emb = enc.encode(["Wo ist der Drucker?", "Where is the printer?"])
print(emb.shape, float(emb[0] @ emb[1]))                      # unit rows: the dot product is the cosine
{'mp = tinyglot.load("' + name + '?format=tflite-mediapipe")        # the same model in MediaPipe' if mp else ''}
```

From the command line: `tinyglot eval --model {name}`, `tinyglot bench --model {name}`, `tinyglot models`.
Where the files are: `python -c "import tinyglot.released as r; print(r.released_folder('{name}'))"`.

### Python, onnxruntime only (no tinyglot, no torch)

```python
# pip install onnxruntime onnxruntime-extensions
import numpy as np, onnxruntime as ort, onnxruntime_extensions as ortx

so = ort.SessionOptions()
so.register_custom_ops_library(ortx.get_library_path())
session = ort.InferenceSession("{name}/onnx-text/model.onnx", so, providers=["CPUExecutionProvider"])
emb, ids = session.run(None, {{"text": np.array(["Wo ist der Drucker?", "Where is the printer?"], dtype=object)}})
```

{mediapipe_usage(name) if mp else no_mediapipe_usage()}
## How it was made

{chr(10).join(training)}

Parity of each quantized bundle with the PyTorch student (the export's gates, all passed):

{parity}

Only the first {m['max_len']} tokens of a sentence count. A release records the embeddings of
{len(RECORDED_SENTENCES)} sentences from each bundle in `{MANIFEST}`; `tests/test_released.py` checks them,
the file hashes, and that the ONNX file runs in a process that imports onnxruntime only.
{(chr(10) + str(m['notes']) + chr(10)) if m.get('notes') else ''}"""


# ====================================================================== the release
def _student_info(student: Path) -> dict[str, Any]:
    from tinyglot.models import read_model_config

    cfg = read_model_config(student)
    shape: dict[str, Any] = cfg["student"] if isinstance(cfg.get("student"), dict) else {}
    # embedding_size: the token table's width when it is factorised (0, not shown, when it is hidden_size wide)
    shape_text = ", ".join(f"{k} {shape[k]}" for k in ("num_layers", "hidden_size", "num_heads", "ffn_size",
                                                       "vocab_size", "embedding_size", "embedding_dim")
                           if k in shape and (k != "embedding_size" or shape[k]))
    params = cfg.get("parameters", {})
    if isinstance(params, dict) and params.get("total"):
        shape_text += f"; {params['total']:,} parameters"
    # the settings it was trained with, as the student recorded them: release/make.sh's recipe is checked against them
    settings = {k: cfg[k] for k in ("student", "loss", "train") if isinstance(cfg.get(k), dict)}
    return {"kind": cfg.get("kind"), "preset": cfg.get("preset"), "teacher": cfg.get("teacher"),
            "steps": cfg.get("trained_steps"), "shape": shape_text or None, "best_dev_p1": cfg.get("best_dev_p1"),
            "settings": settings or None}


def _teacher_licence(card: dict, teacher: str) -> dict[str, Any]:
    given = card.get("teacher_licence")
    if isinstance(given, dict):
        return {"name": teacher, **given}
    if "e5" in teacher.lower():
        return dict(E5_SMALL)
    return {"name": teacher, "licence": "trained by tinyglot on the data below (no third-party model)"}


def _release_command(student: str | Path, name: str, card_path: Any, extra: Sequence[str]) -> str:
    parts = ["tinyglot", "release", "--model", str(student), "--name", name]
    if isinstance(card_path, (str, os.PathLike)):
        parts += ["--card-data", str(card_path)]
    import shlex

    return shlex.join([*parts, *extra])


def _strip_records(folder: Path) -> None:
    from tinyglot.outputs import RECORD

    for record in folder.rglob(RECORD):
        if record.parent != folder:  # the bundles' own records: the release folder owns them as a whole
            record.unlink()


def release_student(
    student: str | os.PathLike[str],
    name: str,
    card_data: str | os.PathLike[str] | dict | None = None,
    *,
    root: str | os.PathLike[str] | None = None,
    corpus: Sequence[str | os.PathLike[str]] = (),
    formats: Sequence[str] = FORMATS,
    allowed_licences: Iterable[str] = (),
    tier: str = "permissive",
    max_bytes: int = MAX_RELEASE_BYTES,
    testset: Any = None,
    max_sentences: int = 100,
    quantize: str = QUANTIZATION,
    command: str | None = None,
    say: Callable[[str], None] = lambda msg: None,
) -> dict[str, Any]:
    """Release the student at ``student`` as ``root/NAME`` (default root: the package's
    ``tinyglot/released``); returns the manifest.  See the module docstring.  ``quantize``: the
    bundles' quantization, one of :data:`QUANTIZATIONS` (``dynamic-int4-embeddings``: the ONNX
    bundles' token table as 4-bit blocks; a format without it takes ``dynamic``); ``tier``: the licence tier
    (:data:`~tinyglot.data.pairs.TIERS`), which decides the data it may have learnt from and the licence of
    its weights; ``max_bytes``: the size it may take (at most :data:`MAX_RELEASE_BYTES`)."""
    from tinyglot.export.formats import get_format

    check_tier(tier)
    if not 0 < max_bytes <= MAX_RELEASE_BYTES:
        raise TinyglotError(f"a release takes at most {MAX_RELEASE_BYTES / 1e6:.0f} MB, not {max_bytes / 1e6:g} MB",
                            "pass a --max-mb up to that")
    if quantize not in QUANTIZATIONS:
        raise TinyglotError(f"a release is quantized {' or '.join(QUANTIZATIONS)}, not {quantize!r}")
    name = check_name(name)
    student = Path(student)
    formats = list(dict.fromkeys(formats))
    if not formats or not set(formats) <= set(FORMATS):
        raise TinyglotError(f"a release holds {', '.join(FORMATS)} bundles, not {', '.join(formats) or 'none'}")
    card, base = read_card_data(card_data)
    info = _student_info(student)
    if info["kind"] == "bundle":
        raise TinyglotError(f"{student} is an exported bundle, not a student",
                            "pass the student folder that `tinyglot distill` or `tinyglot run` wrote: the release "
                            "exports it itself")
    teacher = str(card.get("teacher") or info["teacher"] or "unknown")
    corpus_paths = [Path(p) for p in corpus] + [_path(p, base, "corpus") for p in card.get("corpus", [])]
    attributions = corpus_attributions(corpus_paths) if corpus_paths else (run_attributions(student) or [])
    for extra in card.get("attributions", []):
        if not isinstance(extra, dict) or not extra.get("src") or not extra.get("license"):
            raise TinyglotError(f"an attribution of the card data lacks src or license: {extra!r}")
        attributions.append({"src": extra["src"], "license": extra["license"], "rows": extra.get("rows", "–"),
                             "languages": extra.get("languages"),
                             "by": extra.get("by") or KNOWN_SOURCES.get(extra["src"], "")})
    if not attributions:
        say("no record of the training data (no --corpus, no card attributions, no tinyglot run summary beside "
            "the student): its licences are not checked and LICENSES.md lists no data source")
    check_licences(attributions, tier, allowed_licences)
    results, bench_speed = read_results(card, base, name, str(card.get("teacher_spec") or "e5-small"))
    # the note's fields filled once, here: one naming a test the results lack stops before any export
    card = {**card, "notes": fill_notes(card.get("notes"), results)}
    out = released_root(root) / name
    say(f"releasing {student} as {name} into {out}")
    with _staged(out, "tinyglot release") as stage:
        manifest = _build(student, name, stage, formats, card, info, teacher, attributions, results, bench_speed,
                          max_bytes, testset, max_sentences, command or _release_command(student, name, card_data, []),
                          say, get_format, quantize, tier)
    from tinyglot.released import verify

    verify(out)
    say(f"released {name}: {_mb(manifest['bytes'])}, {', '.join(manifest['formats'])} ({out})")
    return manifest


@contextlib.contextmanager
def _staged(out: Path, what: str) -> Iterator[Path]:
    """A staging folder beside the released model's folder ``out``, under its run lock: when the block ends
    without an error it replaces ``out`` in one atomic swap, else it is removed and ``out`` is untouched."""
    from tinyglot.locks import LOCK_NAME, run_lock
    from tinyglot.outputs import RECORD, replace_folder, staging_folder, write_record

    with run_lock(out, what, RELEASED_KIND, exclusive=True):
        stage = staging_folder(out)
        try:
            yield stage
        except BaseException:
            shutil.rmtree(stage, ignore_errors=True)
            raise
        replace_folder(stage, out, RELEASED_KIND)
        # the record as git keeps it: without the pid and host of the swap (the swap is over)
        write_record(out, RELEASED_KIND, [n for n in os.listdir(out) if n not in (RECORD, LOCK_NAME)],
                     exclusive=True)


@contextlib.contextmanager
def _loaded(bundle: Path) -> Iterator[Any]:
    """``tinyglot.load(bundle)``, closed on the way out (MediaPipe's embedder holds a native graph)."""
    import tinyglot

    enc = tinyglot.load(bundle)
    try:
        yield enc
    finally:
        close = getattr(enc, "close", None)
        if callable(close):
            close()


def _build(student: Path, name: str, stage: Path, formats: list[str], card: dict, info: dict, teacher: str,
           attributions: list[dict], results: dict, bench_speed: list[dict], max_bytes: int, testset: Any,
           max_sentences: int, command: str, say: Callable[[str], None], get_format: Callable,
           quantize: str, tier: str) -> dict[str, Any]:
    import tinyglot
    from tinyglot.io import atomic_write_text, folder_bytes

    bundles: dict[str, dict[str, Any]] = {}
    for fmt in formats:
        bundle_format = get_format(fmt)
        q = quantize if quantize in bundle_format.quantizations else QUANTIZATION
        say(f"exporting {fmt} ({q}) with its parity gates")
        result = bundle_format.export(student, stage / fmt, q, threads=1, max_sentences=max_sentences,
                                      testset=testset, parity_gate=True, say=say)
        bundles[fmt] = {"config": result.config, "parity": result.config.get("parity", {}),
                        "quantization": _quantization_label(result.config)}
        _strip_records(stage)
        used = folder_bytes(stage)
        if used > max_bytes:  # refused as soon as it is known
            raise too_big(name, stage, used, max_bytes)
    configs = [b["config"] for b in bundles.values()]
    cfg0 = configs[0]
    from tinyglot.data.embedded import load_testset

    speed_sentences = [s for pairs in load_testset().values() for p in pairs[:8] for s in (p.x, p.en)]
    speed_sentences = speed_sentences[:SPEED_SENTENCES]
    recorded: dict[str, Any] = {}
    speed: list[dict] = []
    for fmt in formats:
        with _loaded(stage / fmt) as enc:
            recorded[fmt] = record_embeddings(enc)
            say(f"measuring {fmt} on this machine (one thread)")
            speed.append(measure_speed(enc, fmt, speed_sentences, name, bundles[fmt]["quantization"]))
    training: dict[str, Any] = card["training"] if isinstance(card.get("training"), dict) else {}
    languages = list(card.get("languages") or cfg0.get("languages") or [])
    licence = WEIGHTS_LICENCE[tier]
    manifest: dict[str, Any] = {
        "tinyglot_release": MANIFEST_VERSION,
        "name": name,
        "description": str(card.get("description") or f"tinyglot student {name}"),
        "languages": languages,
        "dim": int(cfg0["dim"]),
        "max_len": int(cfg0["max_len"]),
        "default_format": DEFAULT_FORMAT if DEFAULT_FORMAT in formats else formats[0],
        "formats": {},
        "bytes": 0,
        "results": results,
        "test_sets": card.get("test_sets") or {},
        "speed": speed + bench_speed + [r for r in card.get("speed", []) if isinstance(r, dict)],
        "tier": tier,
        "licences": {"model": licence, "code": "Apache-2.0 (tinyglot)", "teacher": _teacher_licence(card, teacher),
                     "data": attributions},
        "made": {
            "teacher": teacher,
            "preset": training.get("preset") or info["preset"],
            "steps": training["steps"] if training.get("steps") is not None else info["steps"],
            "student_shape": info["shape"],
            "settings": info["settings"],
            "data": training.get("data") or (", ".join(sorted({a["src"] for a in attributions})) or None),
            "training_command": training.get("command"),
            "training_time": training.get("time"),
            "release_command": command,
            "tinyglot": tinyglot.__version__,
            "date": datetime.date.today().isoformat(),
            "runtimes": _runtime_versions(),
            "quantization": quantize,
        },
        "recorded": {"sentences": list(RECORDED_SENTENCES), "dims": RECORDED_DIMS, "int8_kernels": _int8_kernels(),
                     "tolerance": dict(TOLERANCE), "formats": recorded},
        "notes": card.get("notes"),
        "files": {},
    }
    for fmt, bundle in bundles.items():
        files = sorted(p for p in (stage / fmt).rglob("*") if p.is_file())
        model_file = stage / fmt / bundle["config"]["files"][0]
        manifest["formats"][fmt] = {"folder": fmt, "bytes": sum(p.stat().st_size for p in files),
                                    "model_file": f"{fmt}/{bundle['config']['files'][0]}",
                                    "model_file_bytes": model_file.stat().st_size,
                                    "quantization": bundle["quantization"],
                                    "parity": bundle["parity"]}
    atomic_write_text(stage / LICENSES, licences_text(manifest))
    write_card_and_manifest(stage, manifest)
    used = folder_bytes(stage)
    if used > max_bytes:
        raise too_big(name, stage, used, max_bytes)
    return manifest


def _quantization_label(cfg: dict) -> str | None:
    """A bundle's quantization as its config records it: the preset's name, else the mode."""
    quantization = cfg.get("quantization", {})
    return quantization.get("name") or quantization.get("mode")


def refresh_release(name: str, *, root: str | os.PathLike[str] | None = None,
                    say: Callable[[str], None] = lambda msg: None) -> dict[str, Any]:
    """Rewrite the ONNX graphs of the released model ``NAME`` in the form tinyglot exports today, without
    the student: onnxruntime's fused ``SkipLayerNormalization`` nodes become ``Add`` + ``Sum`` +
    ``LayerNormalization`` (:func:`tinyglot.onnx_graph.unfuse_file`; a stock session then runs the graph
    about 25 % faster on the CPU, as ``tinyglot.load`` already did in memory).

    Each rewritten bundle must give the released rows again: the new file against the old one, both in
    plain onnxruntime sessions, on :data:`RECORDED_SENTENCES` and the embedded test set's sentences
    (cosine >= 1 - ``TOLERANCE["cosine"]``, absolute difference <= ``TOLERANCE["abs"]``).  Then the
    bundle's ``config.json`` digests, the recorded embeddings, the sizes, ``MODEL_CARD.md`` and
    ``release.json`` (with a ``made.refreshed`` entry) follow, in a staging folder swapped in atomically.
    The speed rows are kept: they were measured through ``tinyglot.load``, which ran the rewritten
    graph already.  Returns the new manifest; a model with nothing to rewrite is left as it is."""
    import tinyglot
    from tinyglot.export.bundle import CONFIG, seal_bundle_config
    from tinyglot.locks import LOCK_NAME
    from tinyglot.onnx_graph import skip_layer_norm_count, unfuse_file
    from tinyglot.outputs import RECORD
    from tinyglot.released import released_folder, verify

    out = released_folder(check_name(name), root)
    manifest = verify(out)
    stale = [fmt for fmt, block in manifest["formats"].items()
             if str(block["model_file"]).endswith(".onnx") and skip_layer_norm_count(out / block["model_file"])]
    if not stale:
        say(f"{name}: no graph to rewrite")
        return manifest
    with _staged(out, "tinyglot release --refresh") as stage:
        shutil.copytree(out, stage, dirs_exist_ok=True, ignore=shutil.ignore_patterns(RECORD, LOCK_NAME))
        rewrites = []
        for fmt in stale:
            folder, model_file = stage / fmt, stage / manifest["formats"][fmt]["model_file"]
            count = unfuse_file(model_file)
            say(f"{fmt}: {count} SkipLayerNormalization nodes rewritten; checking the rows against the "
                "released file")
            _check_rewrite(out / manifest["formats"][fmt]["model_file"], model_file)
            # its hash was checked by verify() above; read as it is (read_bundle would refuse the new graph)
            seal_bundle_config(folder, json.loads((folder / CONFIG).read_text(encoding="utf-8")))
            with _loaded(folder) as enc:
                manifest["recorded"]["formats"][fmt] = record_embeddings(enc)
            files = [p for p in folder.rglob("*") if p.is_file()]
            manifest["formats"][fmt].update(bytes=sum(p.stat().st_size for p in files),
                                            model_file_bytes=model_file.stat().st_size)
            rewrites.append(f"{fmt}: {count} fused SkipLayerNormalization -> Add + Sum + LayerNormalization")
        manifest["made"].setdefault("refreshed", []).append({
            "date": datetime.date.today().isoformat(), "tinyglot": tinyglot.__version__,
            "command": f"tinyglot release --refresh {name}", "graphs": rewrites,
            "runtimes": _runtime_versions()})
        write_card_and_manifest(stage, manifest)
    verify(out)
    say(f"refreshed {name}: {', '.join(rewrites)}")
    return manifest


def _check_rewrite(before: Path, after: Path) -> None:
    """The rewritten graph ``after`` gives the rows of ``before`` (plain onnxruntime sessions, raw strings in)."""
    import onnxruntime as ort

    from tinyglot.data.embedded import load_testset
    from tinyglot.export.onnx_text import session_options

    sentences = list(RECORDED_SENTENCES) + [s for pairs in load_testset().values() for p in pairs[:25]
                                            for s in (p.x, p.en)]
    rows = []
    for path in (before, after):
        session = ort.InferenceSession(str(path), session_options(threads=1), providers=["CPUExecutionProvider"])
        name = session.get_inputs()[0].name
        rows.append(np.concatenate([session.run(None, {name: np.array([s], dtype=object)})[0] for s in sentences]))
    cosine = float(np.min(np.sum(rows[0] * rows[1], axis=1) /
                          (np.linalg.norm(rows[0], axis=1) * np.linalg.norm(rows[1], axis=1))))
    worst = float(np.max(np.abs(rows[0] - rows[1])))
    if cosine < 1 - TOLERANCE["cosine"] or worst > TOLERANCE["abs"]:
        raise TinyglotError(f"the rewritten graph of {after.parent.name} does not give the released rows "
                            f"(lowest cosine {cosine:.6f}, largest difference {worst:.2e}); nothing was changed",
                            "report it: the release stays as it was")


def write_card_and_manifest(stage: Path, manifest: dict[str, Any]) -> None:
    """``MODEL_CARD.md`` and ``release.json`` of the release being built in ``stage``: the total size, then
    the sha256 of every file.  The card names the total size, so it is written twice (the second time
    with a card of the same length counted)."""
    from tinyglot.integrity import sha256_file
    from tinyglot.io import atomic_write_json, atomic_write_text
    from tinyglot.outputs import RECORD

    for _ in range(2):
        manifest["bytes"] = sum(p.stat().st_size for p in stage.rglob("*")
                                if p.is_file() and p.name not in (RECORD, MANIFEST))
        atomic_write_text(stage / CARD, model_card(manifest))
    manifest["files"] = {p.relative_to(stage).as_posix(): sha256_file(p) for p in sorted(stage.rglob("*"))
                         if p.is_file() and p.name not in (RECORD, MANIFEST)}
    manifest["bytes"] = sum((stage / f).stat().st_size for f in manifest["files"])
    atomic_write_json(stage / MANIFEST, manifest)


def too_big(name: str, stage: Path, used: int, max_bytes: int) -> TinyglotError:
    from tinyglot.outputs import RECORD

    files = sorted(((p.stat().st_size, p.relative_to(stage).as_posix()) for p in stage.rglob("*")
                    if p.is_file() and p.name != RECORD), reverse=True)
    biggest = ", ".join(f"{rel} {_mb(size)}" for size, rel in files[:4])
    return TinyglotError(f"{name} would take {_mb(used)}, more than the {_mb(max_bytes)} a released model may take "
                         f"(biggest files: {biggest}); nothing was released",
                         "release a smaller student (fewer layers, a narrower width or a pruned vocabulary: "
                         "tinyglot export --prune-vocab writes the pruned student)")


__all__ = ["COLUMNS", "RECORDED_SENTENCES", "TOLERANCE", "check_licences", "corpus_attributions",
           "fill_notes", "model_card", "read_card_data", "read_results", "refresh_release",
           "release_student"]
