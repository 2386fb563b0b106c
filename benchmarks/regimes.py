"""Sentences/s of encoders in the three ways callers use them, on real sentences, at one thread.

Each model runs in its own process (``benchmarks/peers.py``'s loading and isolation) on the same
sentences, in the same order, with the same thread count, through its ``encode``:

- single: ``encode([s])`` for every sentence, one call each (tokenisation included);
- arrival-32: ``encode(chunk, batch_size=32)`` for consecutive chunks of 32 in arrival order (a
  server's batches: mixed lengths);
- bulk: one ``encode(all, batch_size=32)`` call.

Sentences: a plain text file (``--sentences FILE``, one sentence per line), or both sides of a test
set (``--test PATH``: a folder of ``<lang>.tsv`` or any corpus file; default: the shared libreoffice
test, ``../shared/data/test/libreoffice``, else the embedded one), shuffled with a seed (arrival
order mixes languages and lengths) and cut to ``--max-sentences``.  Each regime runs ``--repeats``
times after a warm-up; the fastest counts.  Tokens per sentence (mean, p90) are the model's own
tokenizer's where it has one (truncated to its ``max_len``), else ``-``; characters are given for all.

``--padding-budget`` overrides :data:`tinyglot.encoder.PADDING_BUDGET` in the measured processes
(``inf``: sub-batches cut at ``batch_size`` only, i.e. one padded run per call of up to 32), to
compare length bucketing with the old behaviour on the same machine.  Prints numbers, asserts nothing.

    python benchmarks/regimes.py runs/student bundles/onnx-int8 use-m --threads 1 --json regimes.json
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import numpy as np

from peers import RESULT_TAG, load_model, load_tests, run_child

SHARED_TEST = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "test" / "libreoffice"
REGIMES = ("single", "arrival-32", "bulk")
ARRIVAL_BATCH = 32


def read_sentences(path: Path | None, test: str | None, limit: int, seed: int) -> tuple[list[str], str]:
    """(sentences in arrival order, where they came from)."""
    if path is not None:
        lines = [x.strip() for x in path.read_text(encoding="utf-8").splitlines()]
        sentences, source = [x for x in lines if x], str(path)
    else:
        test = test or (str(SHARED_TEST) if SHARED_TEST.is_dir() else "")
        testset = load_tests([f"test={test}" if test else "embedded"], 10**9)
        sentences = [s for pairs in next(iter(testset.values())).values() for p in pairs for s in (p.x, p.en)]
        source = test or "embedded test set"
    order = np.random.default_rng(seed).permutation(len(sentences))[:limit]
    return [sentences[i] for i in order], source


def token_counts(enc, sentences: list[str]) -> list[int] | None:
    """Tokens the model runs per sentence (its tokenizer, truncated to its max_len), when it has one."""
    for obj in (enc, getattr(enc, "inner", None)):
        tok, max_len = getattr(obj, "tokenizer", None), getattr(obj, "max_len", None)
        if tok is not None and hasattr(tok, "encode_ids") and isinstance(max_len, int):
            return [len(x) for x in tok.encode_ids(sentences, max_len)]
    return None


def _profile(values: list[int] | None) -> dict:
    if not values:
        return {"mean": None, "p90": None}
    return {"mean": float(np.mean(values)), "p90": float(np.percentile(values, 90, method="inverted_cdf"))}


def time_regime(enc, regime: str, sentences: list[str], repeats: int) -> float:
    """Sentences/s of the fastest of ``repeats`` passes over ``sentences`` in ``regime``."""
    calls = {"single": [[s] for s in sentences],
             "arrival-32": [sentences[i:i + ARRIVAL_BATCH] for i in range(0, len(sentences), ARRIVAL_BATCH)],
             "bulk": [sentences]}[regime]
    best = float("inf")
    for _ in range(max(1, repeats)):
        t = time.perf_counter()
        for call in calls:
            enc.encode(call, batch_size=ARRIVAL_BATCH)
        best = min(best, time.perf_counter() - t)
    return len(sentences) / best


def measure_one(spec: str, threads: int, sentences: list[str], repeats: int, budget: float | None) -> dict:
    import tinyglot.encoder

    if budget is not None:
        tinyglot.encoder.PADDING_BUDGET = budget
    t0 = time.perf_counter()
    enc, size = load_model("auto", spec, threads)
    load_s = time.perf_counter() - t0
    for s in sentences[:20]:  # warm-up: first-call allocations, lazy graph optimisation
        enc.encode([s])
    enc.encode(sentences[:ARRIVAL_BATCH], batch_size=ARRIVAL_BATCH)
    speed = {regime: time_regime(enc, regime, sentences, repeats) for regime in REGIMES}
    return {"spec": spec, "name": getattr(enc, "name", "") or spec, "threads": threads, "load_s": load_s,
            "size_mb": size / 1e6, "padding_budget": tinyglot.encoder.PADDING_BUDGET,
            "tokens": _profile(token_counts(enc, sentences)), "sentences_per_s": speed}


def table(rows: list[dict]) -> str:
    out = ["| model | tokens/sent mean | p90 | single sent/s | arrival-32 sent/s | bulk sent/s | arrival-32 / single |",
           "|---|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        if "error" in r:
            out.append(f"| {r['spec']} | error: {r['error'][:100]} | | | | | |")
            continue
        tok, speed = r["tokens"], r["sentences_per_s"]
        cells = ["-" if tok[k] is None else f"{tok[k]:.1f}" for k in ("mean", "p90")]
        cells += [f"{speed[k]:.0f}" for k in REGIMES] + [f"{speed['arrival-32'] / speed['single']:.2f}x"]
        out.append(f"| {r['spec']} | " + " | ".join(cells) + " |")
    return "\n".join(out)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("models", nargs="+", help="model specs: a tinyglot folder or bundle, a peer name (use-m, "
                                             "e5-small, minilm), or anything `tinyglot eval --model` accepts")
    src = p.add_mutually_exclusive_group()
    src.add_argument("--sentences", type=Path, default=None, help="a text file, one sentence per line")
    src.add_argument("--test", default=None, help="a test set folder (<lang>.tsv) or corpus file; default: "
                                                  "the shared libreoffice test")
    p.add_argument("--max-sentences", type=int, default=2000, help="seeded sample of this many sentences")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--repeats", type=int, default=3, help="passes per regime; the fastest counts")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--padding-budget", type=float, default=None,
                   help="override tinyglot.encoder.PADDING_BUDGET (inf: no length bucketing within a call)")
    p.add_argument("--json", type=Path, default=None, help="write all figures here")
    p.add_argument("--one", default=None, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    sentences, source = read_sentences(args.sentences, args.test, args.max_sentences, args.seed)
    if args.one:
        res = measure_one(args.one, args.threads, sentences, args.repeats, args.padding_budget)
        print(RESULT_TAG + json.dumps(res))
        return 0
    rows = []
    for spec in args.models:
        print(f"measuring {spec} ...", file=sys.stderr, flush=True)
        cmd = [sys.executable, __file__, spec, "--one", spec, "--max-sentences", str(args.max_sentences),
               "--threads", str(args.threads), "--repeats", str(args.repeats), "--seed", str(args.seed)]
        cmd += ["--sentences", str(args.sentences)] if args.sentences else ["--test", args.test] if args.test else []
        if args.padding_budget is not None:
            cmd += ["--padding-budget", str(args.padding_budget)]
        rows.append(run_child(cmd, args.threads, {"spec": spec}))
    from tinyglot.devices.profiles import detect_host

    chars = _profile([len(s) for s in sentences])
    budget = next((r["padding_budget"] for r in rows if "padding_budget" in r), None)
    print(f"{detect_host()['cpu_model']}, {os.cpu_count()} cores, {args.threads} thread(s); {len(sentences)} "
          f"sentences from {source} (characters: mean {chars['mean']:.1f}, p90 {chars['p90']:.0f}); "
          f"padding budget {budget}; fastest of {args.repeats}\n")
    print(table(rows))
    if args.json:
        args.json.write_text(json.dumps({"settings": vars(args) | {"source": source}, "rows": rows},
                                        indent=2, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
