"""Sentences/s of encoders in the three ways callers use them, on real sentences of two length profiles.

The regimes (:data:`REGIMES`), each through the encoder's own ``encode`` (tokenisation included):

- ``single``: ``encode([s])`` for every sentence, one call each (an interactive query);
- ``arrival-32``: ``encode(chunk, batch_size=32)`` for consecutive chunks of 32 in arrival order (a
  server's batches: mixed lengths);
- ``bulk``: one ``encode(all, batch_size=32)`` call (an offline job).

:func:`run_regime` returns the rows a regime's calls give, in the caller's order (what
``tests/test_regimes.py`` checks against one-by-one encoding); :func:`time_regime` times the same
calls.  Sentence sets (:class:`SentenceSet`) come from ``NAME[@MIN_WORDS]=SOURCE[+SOURCE..]`` specs
(:func:`parse_set`), where a source is a test set folder or corpus file (both columns of its pairs;
``PATH#SRC`` keeps the rows of one ``src``, e.g. ``train.jsonl.gz#libreoffice-help``), ``embedded``
(the embedded test set), ``embedded-corpus`` (the embedded training corpus) or ``pydoc`` (English
prose from Python's own ``pydoc_data.topics``: the reference manual's text, rebuilt by any Python).
``MIN_WORDS`` keeps the pairs whose English side has at least that many words (and pydoc sentences
that long); the prose set of :func:`default_set_specs` takes sentences of 15 words or more.

Each model runs in its own process (:func:`run_regimes`, ``python -m tinyglot.devices.regimes
--one``) at a fixed thread count, on the same sentences in the same order: warm-up, then each regime
``repeats`` times, the fastest pass counts.  Tokens per sentence (mean, p90) are the model's own
tokenizer's, truncated to its ``max_len``, where it has one.  ``benchmarks/regimes.py``,
``benchmarks/peers.py`` and the bench stage of ``tinyglot run`` use this module.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from tinyglot.devices.isa import NATIVE, isa_env, masked_isa
from tinyglot.errors import TinyglotError

REGIMES = ("single", "arrival-32", "bulk")
ARRIVAL_BATCH = 32
# 15+ words: a mean of ~44 tokens (p90 ~73) with tinyglot's 8k vocabulary, near a documentation set's
# (mean 40, p90 87); 25+ words gives ~60 tokens, with only 430 sentences of Python's manual
PROSE_MIN_WORDS = 15
RESULT_TAG = "REGIMES_RESULT "
SHARED_DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data"  # beside a source checkout
# the languages of the shared libreoffice test (and of the embedded corpus), English aside
TEST_LANGUAGES = ("de", "es", "fr", "it", "ja", "nl", "pt", "ru", "tr", "zh")
BASELINE = "use-m"  # the peer the ratios are taken against


# ------------------------------------------------------------------ the regimes
def regime_calls(n: int, regime: str, batch: int = ARRIVAL_BATCH) -> list[range]:
    """The index ranges of the ``encode`` calls of ``regime`` over ``n`` sentences."""
    if regime == "single":
        return [range(i, i + 1) for i in range(n)]
    if regime == "arrival-32":
        return [range(i, min(n, i + batch)) for i in range(0, n, batch)]
    if regime == "bulk":
        return [range(n)] if n else []
    raise TinyglotError(f"unknown regime {regime!r}", f"choose one of: {', '.join(REGIMES)}")


def run_regime(encoder: Any, sentences: Sequence[str], regime: str, batch: int = ARRIVAL_BATCH) -> np.ndarray:
    """The rows ``regime``'s calls of ``encoder.encode`` give, stacked in the caller's order."""
    sentences = list(sentences)
    parts = [np.asarray(encoder.encode([sentences[i] for i in call], batch_size=batch))
             for call in regime_calls(len(sentences), regime, batch)]
    return np.concatenate(parts) if parts else np.zeros((0, 0), dtype=np.float32)


def time_regime(encoder: Any, sentences: Sequence[str], regime: str, repeats: int = 3,
                batch: int = ARRIVAL_BATCH) -> float:
    """Sentences/s of the fastest of ``repeats`` passes of ``regime`` over ``sentences``."""
    sentences = list(sentences)
    calls = [[sentences[i] for i in call] for call in regime_calls(len(sentences), regime, batch)]
    best = fastest_pass(lambda: [encoder.encode(call, batch_size=batch) for call in calls], repeats)
    return len(sentences) / max(best, 1e-9)


def fastest_pass(run: Callable[[], object], repeats: int = 3) -> float:
    """Seconds of the fastest of ``repeats`` (at least one) calls of ``run``."""
    best = float("inf")
    for _ in range(max(1, repeats)):
        start = time.perf_counter()
        run()
        best = min(best, time.perf_counter() - start)
    return best


# ------------------------------------------------------------------ sentence sets
@dataclass
class SentenceSet:
    """Sentences in arrival order (a seeded shuffle: languages and lengths mixed) and where they came from."""

    name: str
    sentences: list[str]
    source: str
    min_words: int = 0

    def chars(self) -> dict:
        return profile([len(s) for s in self.sentences])


def words(text: str) -> int:
    return len(text.split())


def pydoc_sentences(min_words: int = PROSE_MIN_WORDS) -> list[str]:
    """Sentences of at least ``min_words`` words from the prose of Python's reference manual
    (``pydoc_data.topics``, in every CPython): paragraphs and list items, without grammar rules,
    code and tables, split after ``.``/``!``/``?`` before a capital letter; unique, in manual order."""
    try:
        from pydoc_data.topics import topics
    except ImportError:  # pragma: no cover - a Python built without its docs
        raise TinyglotError("this Python has no pydoc_data.topics (its reference manual text)",
                            "use a test set or corpus file as the source instead of pydoc") from None
    out: dict[str, None] = {}
    for text in topics.values():
        for para in re.split(r"\n\s*\n", text):
            lines = para.strip("\n").splitlines()
            if not lines or any(marker in para for marker in ("::=", ">>>", "+--", "====", "***", "---")):
                continue
            head = lines[0].lstrip()
            indents = {len(x) - len(x.lstrip()) for x in lines[1:] if x.strip()}
            if head[:2] in ("* ", "- ", "+ ") or re.match(r"\d+\. ", head):
                head = head.split(" ", 1)[1]
            elif lines[0][:1] == " " and len(indents | {len(lines[0]) - len(head)}) > 1:
                continue  # code: lines at several indents
            flat = " ".join([head, *(x.strip() for x in lines[1:])])
            for s in re.split(r"(?<=[.!?])\s+(?=[A-Z])", flat):
                s = s.strip()
                if words(s) >= min_words and s[-1:] in ".!?" and s[:1].isupper():
                    out.setdefault(s, None)
    return list(out)


def pair_sentences(source: str, min_words: int = 0, languages: Iterable[str] | None = None) -> list[str]:
    """Both sides of the pairs of ``source`` (a test set folder, corpus file, ``PATH#SRC``, ``embedded`` or
    ``embedded-corpus``) in ``languages`` (None: all) whose English has at least ``min_words`` words."""
    from tinyglot.data.embedded import load_pairs, load_testset

    path, _, src = source.partition("#")
    if path == "embedded":
        pairs = [p for ps in load_testset().values() for p in ps]
    elif path == "embedded-corpus":
        pairs = load_pairs(None)
    else:
        if not Path(path).exists():
            raise TinyglotError(f"no test set or corpus at {path}", "pass a folder of <lang>.tsv, a corpus file, "
                                                                    "embedded, embedded-corpus or pydoc")
        pairs = [p for ps in load_testset(path).values() for p in ps]
    wanted = None if languages is None else {*languages, "en"}
    out: dict[str, None] = {}
    for p in pairs:
        if (wanted is None or p.lang in wanted) and (not src or p.src == src) and words(p.en) >= min_words:
            out.setdefault(p.x, None)
            out.setdefault(p.en, None)
    return list(out)


def parse_set(spec: str, min_words: int = 0) -> tuple[str, list[str], int]:
    """``NAME[@MIN_WORDS]=SOURCE[+SOURCE..]`` -> (name, sources, min_words); a bare ``SOURCE`` is named
    after itself.  ``min_words`` is the default where the spec gives none."""
    name, sep, sources = spec.partition("=")
    if not sep:
        name, sources = Path(spec.split("#")[0]).name or spec, spec
    name, at, minimum = name.partition("@")
    if at:
        if not minimum.isdigit():
            raise TinyglotError(f"{spec!r}: the minimum word count after @ must be a whole number",
                                "write NAME@25=SOURCE, e.g. prose@25=pydoc+corpus.jsonl.gz")
        min_words = int(minimum)
    parts = [s for s in sources.split("+") if s]
    if not name or not parts:
        raise TinyglotError(f"{spec!r} is not a sentence set", "write NAME[@MIN_WORDS]=SOURCE[+SOURCE..]")
    return name, parts, min_words


def load_set(spec: str, limit: int = 2000, seed: int = 0, min_words: int = 0,
             languages: Iterable[str] | None = TEST_LANGUAGES) -> SentenceSet:
    """The sentence set of ``spec`` (:func:`parse_set`): every source gives an equal share of ``limit``
    sentences (a seeded sample; a source short of its share leaves the rest to the others), then the
    whole set is shuffled (arrival order)."""
    name, sources, min_words = parse_set(spec, min_words)
    pools = [pydoc_sentences(min_words or PROSE_MIN_WORDS) if s == "pydoc" else
             pair_sentences(s, min_words, languages) for s in sources]
    rng = np.random.default_rng(seed)
    pools = [[pool[i] for i in rng.permutation(len(pool))] for pool in pools]
    picked: list[str] = []
    left = [len(p) for p in pools]
    while len(picked) < limit and any(left):
        open_pools = [i for i, n in enumerate(left) if n]
        share = max(1, (limit - len(picked)) // len(open_pools))
        for i in open_pools:
            take = min(share, left[i], limit - len(picked))
            start = len(pools[i]) - left[i]
            picked += pools[i][start:start + take]
            left[i] -= take
    if not picked:
        raise TinyglotError(f"the sentence set {spec!r} is empty" + (f" (at least {min_words} words)" if min_words
                                                                        else ""), "lower --min-words or add a source")
    unique = list(dict.fromkeys(picked))
    order = rng.permutation(len(unique))
    return SentenceSet(name, [unique[i] for i in order], "+".join(sources), min_words)


def default_set_specs(shared: Path = SHARED_DATA, min_words: int = PROSE_MIN_WORDS) -> list[str]:
    """The two length profiles: the shared libreoffice test (both columns; else the embedded test drawn
    from it) and prose of ``min_words``+ words: Python's manual, and the long LibreOffice help rows of
    the embedded corpus (drawn from the shared corpus's, in the test languages; it reads in 2 s where
    the shared corpus file takes a minute)."""
    test = shared / "test" / "libreoffice"
    short = f"libreoffice={test}" if test.is_dir() else "libreoffice=embedded"
    return [short, f"prose@{min_words}=pydoc+embedded-corpus#libreoffice-help"]


# ------------------------------------------------------------------ measuring one model
def token_counts(encoder: Any, sentences: Sequence[str], folder: str | Path | None = None) -> list[int] | None:
    """Tokens the model runs per sentence (its tokenizer, truncated to its ``max_len``): the encoder's own
    tokenizer, else a string-in bundle's ``tokenizer.model``; None for models without one (peers)."""
    for obj in (encoder, getattr(encoder, "inner", None)):
        tok, max_len = getattr(obj, "tokenizer", None), getattr(obj, "max_len", None)
        if tok is not None and hasattr(tok, "encode_ids") and isinstance(max_len, int):
            return [len(x) for x in tok.encode_ids(list(sentences), max_len, allow_empty=True)]
    if folder is not None and (Path(folder) / "tokenizer.model").is_file() and (Path(folder) / "config.json").is_file():
        from tinyglot.io import read_json_object
        from tinyglot.tokenizer import Tokenizer

        max_len = (read_json_object(Path(folder) / "config.json") or {}).get("max_len")
        if isinstance(max_len, int):
            tok = Tokenizer.load(Path(folder) / "tokenizer.model")
            return [len(x) for x in tok.encode_ids(list(sentences), max_len, allow_empty=True)]
    return None


def profile(values: Sequence[int] | None) -> dict:
    if not values:
        return {"mean": None, "p90": None}
    return {"mean": float(np.mean(values)), "p90": float(np.percentile(values, 90, method="inverted_cdf"))}


def open_target(spec: str, threads: int = 1) -> Any:
    """An encoder for a bench target: ``peer:NAME`` (or a peer's name), or anything :func:`tinyglot.load`
    opens; bundles whose loader takes a thread count get ``threads``, torch models run at ``threads``.
    Only a model that needs torch imports it: a bundle's process measures its runtime alone (torch's
    import took 1.8 s of an ONNX bundle's 2.2 s load on an AMD EPYC)."""
    import inspect

    import tinyglot
    from tinyglot.encoders import PEERS

    if spec.removeprefix("peer:") in PEERS and not Path(spec).exists():
        from tinyglot.encoders.peers import load_peer

        return load_peer(spec.removeprefix("peer:"), threads)
    folder = Path(spec)
    kwargs: dict[str, Any] = {}
    if (folder / "config.json").is_file():
        from tinyglot.models import loader_function, read_model_config

        loader = read_model_config(folder).get("loader")
        if isinstance(loader, str) and "threads" in inspect.signature(loader_function(loader, folder)).parameters:
            kwargs["threads"] = threads
    encoder = tinyglot.load(spec, **kwargs)
    torch = sys.modules.get("torch")
    if torch is not None:  # a torch model: it runs at ``threads`` too
        torch.set_num_threads(threads)
    return encoder


def measure(encoder: Any, sets: Sequence[SentenceSet], repeats: int = 3, batch: int = ARRIVAL_BATCH,
            folder: str | Path | None = None) -> dict:
    """``{set name: {"sentences_per_s": {regime: ...}, "tokens": {"mean", "p90"}}}`` of one encoder."""
    out = {}
    for s in sets:
        for text in s.sentences[:20]:  # warm-up: first-call allocations, lazy graph optimisation
            encoder.encode([text])
        encoder.encode(s.sentences[:batch], batch_size=batch)
        speed = {regime: time_regime(encoder, s.sentences, regime, repeats, batch) for regime in REGIMES}
        out[s.name] = {"sentences_per_s": speed, "tokens": profile(token_counts(encoder, s.sentences, folder))}
    return out


def measure_target(spec: str, sets: Sequence[SentenceSet], threads: int = 1, repeats: int = 3,
                   batch: int = ARRIVAL_BATCH) -> dict:
    """One model's row (in this process): its name, load time and :func:`measure`'s figures."""
    start = time.perf_counter()
    encoder = open_target(spec, threads)
    load_s = time.perf_counter() - start
    try:
        sets_out = measure(encoder, sets, repeats, batch, spec if Path(spec).is_dir() else None)
    finally:
        close = getattr(encoder, "close", None)
        if callable(close):
            close()
    return {"spec": spec, "name": getattr(encoder, "name", "") or spec, "threads": threads, "load_s": load_s,
            "repeats": repeats, "sets": sets_out}


def run_regimes(targets: Sequence[str | Path], sets: Sequence[SentenceSet], threads: int = 1, repeats: int = 3,
                batch: int = ARRIVAL_BATCH, say: Callable[[str], None] = lambda msg: None,
                timeout: float = 3600, padding_budget: float | None = None, rounds: int = 1,
                isa: str = NATIVE) -> list[dict]:
    """:func:`measure_target` of each target in its own process (``python -m tinyglot.devices.regimes``),
    at ``threads`` threads (``OMP_NUM_THREADS`` too); a target that fails gives ``{"spec", "error"}``.
    ``padding_budget`` overrides :data:`tinyglot.encoder.PADDING_BUDGET` there (``inf``: no length
    bucketing within a call, to compare with).  ``rounds`` > 1 measures every target again that many
    times, one target after the other, and keeps each figure's best round: on a shared machine the
    models then meet the same spells of contention.  ``isa`` other than ``native`` runs them where the CPU
    shows only that instruction set (:func:`tinyglot.devices.isa.isa_env`: ``avx2``, an AVX2-only CPU's
    kernels); every row records the ``isa`` its process saw."""
    env = isa_env(isa)
    best: dict[str, dict] = {}
    for _ in range(max(1, rounds)):
        for row in _run_round(targets, sets, threads, repeats, batch, say, timeout, padding_budget, env):
            if "error" not in row and row.get("isa") != isa:  # a runtime that loaded unmasked: not this ISA
                row = {"spec": row["spec"], "error": f"its process saw the ISA {row.get('isa')}, not {isa}"}
            best[row["spec"]] = _better(best.get(row["spec"]), row)
    return [best[str(t)] for t in targets]


def _better(old: dict | None, new: dict) -> dict:
    """``new`` with each sentences/s figure the higher of the two rows' (a failed row loses)."""
    if old is None or "error" in old:
        return new
    if "error" in new:
        return old
    for name, figures in new["sets"].items():
        for regime, speed in figures["sentences_per_s"].items():
            figures["sentences_per_s"][regime] = max(speed, old["sets"][name]["sentences_per_s"][regime])
    new["rounds"] = old.get("rounds", 1) + 1
    return new


def _run_round(targets: Sequence[str | Path], sets: Sequence[SentenceSet], threads: int, repeats: int, batch: int,
               say: Callable[[str], None], timeout: float, padding_budget: float | None,
               extra_env: Mapping[str, str]) -> list[dict]:
    rows = []
    with tempfile.TemporaryDirectory(prefix="tinyglot-regimes-") as tmp:
        sets_file = Path(tmp) / "sets.json"
        sets_file.write_text(json.dumps([asdict(s) for s in sets]), encoding="utf-8")
        env = {**os.environ, **extra_env, "OMP_NUM_THREADS": str(threads), "TINYGLOT_NO_PROGRESS": "1"}
        for target in targets:
            spec = str(target)
            say(f"regimes: {spec}")
            cmd = [sys.executable, "-m", "tinyglot.devices.regimes", "--one", spec, "--sets", str(sets_file),
                   "--threads", str(threads), "--repeats", str(repeats), "--batch", str(batch)]
            cmd += ["--padding-budget", str(padding_budget)] if padding_budget is not None else []
            try:
                proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=timeout)
            except subprocess.TimeoutExpired:
                rows.append({"spec": spec, "error": f"timed out after {timeout:.0f} s"})
                continue
            line = next((x for x in reversed(proc.stdout.splitlines()) if x.startswith(RESULT_TAG)), None)
            if proc.returncode or line is None:
                tail = (proc.stderr or proc.stdout).strip().splitlines()[-3:]
                rows.append({"spec": spec, "error": " | ".join(tail) or f"exit {proc.returncode}"})
            else:
                rows.append(json.loads(line[len(RESULT_TAG):]))
    return rows


# ------------------------------------------------------------------ tables
def is_baseline(row: dict, baseline: str = BASELINE) -> bool:
    return row.get("spec", "").removeprefix("peer:") == baseline


def _set_names(sets: Sequence[SentenceSet | str]) -> list[str]:
    return [s if isinstance(s, str) else s.name for s in sets]


def row_label(row: dict, names: dict[str, str] | None = None) -> str:
    """A model's name in the tables: ``names[spec]``, else the spec when it is a name (a released model, a
    peer: ``tinyglot-mini?format=tflite-mediapipe``), else the encoder's own name (a folder's bundle kind)."""
    spec = str(row["spec"])
    if names and spec in names:
        return names[spec]
    if not Path(spec.split("?")[0]).exists():
        return spec
    return row.get("name") or spec


def row_labels(rows: Sequence[dict], names: dict[str, str] | None = None) -> list[str]:
    """:func:`row_label` of each row; rows whose labels collide (two folders' bundles of the same kind,
    ``runs/a/bundles/onnx-dynamic`` and ``runs/b/bundles/onnx-dynamic``) are labelled by their spec."""
    labels = [row_label(r, names) for r in rows]
    return [str(r["spec"]) if labels.count(label) > 1 else label for r, label in zip(rows, labels, strict=True)]


def regimes_table(rows: Sequence[dict], sets: Sequence[SentenceSet | str], baseline: str = BASELINE,
                  names: dict[str, str] | None = None) -> str:
    """Markdown: one row per model and regime, per set (or set name) its sentences/s and the ratio to
    ``baseline``'s in the same regime and set (> 1: faster)."""
    names, sets = names or {}, _set_names(sets)
    base = next((r for r in rows if is_baseline(r, baseline) and "error" not in r), None)
    head = ["model", "regime"] + [x for s in sets for x in (f"{s} sent/s", f"× {baseline}")]
    out = ["| " + " | ".join(head) + " |", "|---|---|" + "---:|" * (2 * len(sets))]
    for r, label in zip(rows, row_labels(rows, names), strict=True):
        if "error" in r:
            out.append(f"| {label} | error: {r['error'][:120]} |" + " |" * (2 * len(sets)))
            continue
        for regime in REGIMES:
            cells = []
            for s in sets:
                speed = r["sets"].get(s, {}).get("sentences_per_s", {}).get(regime)
                ref = base["sets"].get(s, {}).get("sentences_per_s", {}).get(regime) if base else None
                cells += ["–" if speed is None else f"{speed:,.0f}",
                          f"{speed / ref:.2f}×" if speed and ref else "–"]
            out.append(f"| {label} | {regime} | " + " | ".join(cells) + " |")
    return "\n".join(out)


def tokens_table(rows: Sequence[dict], sets: Sequence[SentenceSet | str], names: dict[str, str] | None = None) -> str:
    """Markdown: each model's tokens per sentence (mean / p90) of each set (its own tokenizer)."""
    names, sets = names or {}, _set_names(sets)
    head = ["model"] + [f"{s} tokens/sentence (mean / p90)" for s in sets]
    out = ["| " + " | ".join(head) + " |", "|---|" + "---:|" * len(sets)]
    for r, label in zip(rows, row_labels(rows, names), strict=True):
        if "error" in r:
            continue
        cells = []
        for s in sets:
            tok = r["sets"].get(s, {}).get("tokens") or {}
            cells.append("–" if tok.get("mean") is None else f"{tok['mean']:.1f} / {tok['p90']:.0f}")
        out.append(f"| {label} | " + " | ".join(cells) + " |")
    return "\n".join(out)


def sets_line(sets: Sequence[SentenceSet]) -> str:
    """One sentence per set: its size, source and length in characters."""
    parts = []
    for s in sets:
        c = s.chars()
        parts.append(f"{s.name}: {len(s.sentences)} sentences from {s.source}"
                     + (f" (English side >= {s.min_words} words)" if s.min_words else "")
                     + f", {c['mean']:.0f} characters on average (p90 {c['p90']:.0f})")
    return "; ".join(parts)


def mean_tokens(rows: Sequence[dict], set_name: str) -> float | None:
    """Tokens per sentence of a set by the first model that reports them (the student's tokenizer)."""
    for r in rows:
        tok = (r.get("sets") or {}).get(set_name, {}).get("tokens") or {}
        if tok.get("mean") is not None:
            return float(tok["mean"])
    return None


def tinyglot_padding_budget() -> float:
    import tinyglot.encoder

    return float(tinyglot.encoder.PADDING_BUDGET)


# ------------------------------------------------------------------ the child process
def _main(argv: Sequence[str] | None = None) -> int:
    import argparse

    p = argparse.ArgumentParser(description="(internal) one model's regimes, printed as a RESULT line")
    p.add_argument("--one", required=True)
    p.add_argument("--sets", type=Path, required=True)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--batch", type=int, default=ARRIVAL_BATCH)
    p.add_argument("--padding-budget", type=float, default=None)
    args = p.parse_args(argv)
    if args.padding_budget is not None:  # tinyglot.encoder's sub-batching, overridden for a comparison
        import tinyglot.encoder

        tinyglot.encoder.PADDING_BUDGET = args.padding_budget
    sets = [SentenceSet(**s) for s in json.loads(args.sets.read_text(encoding="utf-8"))]
    row = measure_target(args.one, sets, args.threads, args.repeats, args.batch)
    row["padding_budget"] = tinyglot_padding_budget()
    row["isa"] = masked_isa()
    print(RESULT_TAG + json.dumps(row), flush=True)
    return 0


__all__ = ["ARRIVAL_BATCH", "BASELINE", "PROSE_MIN_WORDS", "REGIMES", "SentenceSet", "default_set_specs",
           "fastest_pass", "load_set", "measure", "measure_target", "open_target", "pair_sentences", "parse_set",
           "pydoc_sentences", "regime_calls", "regimes_table", "run_regime", "run_regimes", "sets_line",
           "time_regime", "token_counts", "tokens_table"]


if __name__ == "__main__":
    sys.exit(_main())
