"""Sentences/s of encoders in the three ways callers use them, on two length profiles, at one thread.

Each model runs in its own process (:mod:`tinyglot.devices.regimes`) on the same sentences, in the same
order, with the same thread count, through its ``encode``:

- single: ``encode([s])`` for every sentence, one call each (tokenisation included);
- arrival-32: ``encode(chunk, batch_size=32)`` for consecutive chunks of 32 in arrival order (a
  server's batches: mixed lengths);
- bulk: one ``encode(all, batch_size=32)`` call.

Sentence sets (``--test NAME[@MIN_WORDS]=SOURCE[+SOURCE..]``, repeatable; a source is a test set
folder or corpus file, ``PATH#SRC`` for the rows of one ``src``, ``embedded``, ``embedded-corpus`` or
``pydoc``): by default the shared libreoffice test (both columns) and a prose set of sentences of
``--min-words`` (15) words or more, half from Python's own reference manual (``pydoc_data.topics``,
English), half from the long LibreOffice help rows of the embedded corpus in ten languages.  Each set
is a seeded sample of ``--max-sentences``, shuffled (arrival order mixes languages and lengths).  Each
regime runs ``--repeats`` times after a warm-up; the fastest counts.  Tokens per sentence (mean, p90)
are each model's own tokenizer's (truncated to its ``max_len``), ``-`` for models without one.

The table gives sentences/s per model, regime and set, and the ratio to ``--baseline`` (USE-m) in the
same regime and set.  ``--padding-budget`` overrides :data:`tinyglot.encoder.PADDING_BUDGET` in the
measured processes (``inf``: no length bucketing within a call).  Prints numbers, asserts nothing.

    python benchmarks/regimes.py runs/student bundles/onnx-int8 bundles/mp-int8 use-m --json regimes.json
    python benchmarks/regimes.py B use-m --test general@15=/work/general/general-test --test lo=embedded
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from tinyglot.devices.isa import ISAS, NATIVE
from tinyglot.devices.regimes import BASELINE, PROSE_MIN_WORDS, default_set_specs, load_set, regimes_table, \
    run_regimes, sets_line, tokens_table
from tinyglot.errors import TinyglotError


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("models", nargs="+", help="model specs: a tinyglot folder or bundle, a peer name (use-m, "
                                             "e5-small, minilm), or anything `tinyglot eval --model` accepts")
    p.add_argument("--test", action="append", default=[], metavar="NAME[@MIN_WORDS]=SOURCE[+SOURCE..]",
                   help="a sentence set (repeatable); default: the shared libreoffice test and the prose set")
    p.add_argument("--min-words", type=int, default=PROSE_MIN_WORDS,
                   help="the prose set's minimum words per sentence (English side); a set spec's @N overrides it")
    p.add_argument("--max-sentences", type=int, default=2000, help="seeded sample of this many sentences per set")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--repeats", type=int, default=3, help="passes per regime; the fastest counts")
    p.add_argument("--rounds", type=int, default=1,
                   help="measure all models this many times, one after the other, and keep each figure's best "
                        "round (on a shared machine, the models then meet the same contention)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--baseline", default=BASELINE, help="the model the ratios are taken against")
    p.add_argument("--padding-budget", type=float, default=None,
                   help="override tinyglot.encoder.PADDING_BUDGET (inf: no length bucketing within a call)")
    p.add_argument("--isa", choices=sorted(ISAS), default=NATIVE,
                   help="avx2: the models' processes see an AVX2-only CPU (AVX-512 and VNNI hidden from CPUID; "
                        "Linux x86-64 with cpuid_fault), so they run the kernels such a CPU gets")
    p.add_argument("--json", type=Path, default=None, help="write all figures here")
    args = p.parse_args(argv)
    specs = args.test or default_set_specs(min_words=args.min_words)
    sets = [load_set(spec, args.max_sentences, args.seed) for spec in specs]
    rows = run_regimes(args.models, sets, args.threads, args.repeats, padding_budget=args.padding_budget,
                       rounds=args.rounds, isa=args.isa, say=lambda msg: print(msg, file=sys.stderr, flush=True))
    from tinyglot.devices.profiles import detect_host

    budget = next((r["padding_budget"] for r in rows if "padding_budget" in r), None)
    # a run under `taskset` (every model's process pinned to the same cores) says so: MediaPipe's worker threads
    # hop between cores otherwise, and pinned its files ran 1.3-1.5x faster in batches on a 2-core VM (docs/results.md)
    cpus = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else []
    pinned = f" (pinned to CPU {', '.join(map(str, cpus))})" if cpus and len(cpus) < (os.cpu_count() or 0) else ""
    print(f"{detect_host()['cpu_model']}, {os.cpu_count()} cores{pinned}, {args.threads} thread(s), fastest of "
          f"{args.repeats} passes x {args.rounds} round(s); padding budget {budget}; ISA: {ISAS[args.isa]}")
    print(sets_line(sets) + "\n")
    print(regimes_table(rows, sets, args.baseline))
    print()
    print(tokens_table(rows, sets))
    if args.json:
        sets_info = [{"name": s.name, "source": s.source, "min_words": s.min_words, "sentences": len(s.sentences),
                      "chars": s.chars()} for s in sets]
        args.json.write_text(json.dumps({"settings": vars(args) | {"sets": specs, "cpus": cpus}, "host": detect_host(),
                                         "sets": sets_info, "rows": rows}, indent=2, default=str))
    return 0


def run(argv: list[str] | None = None) -> int:
    """:func:`main`, with tinyglot's errors (a missing test set, an ISA this CPU cannot hide) said in two lines,
    the problem and its fix, and exit 2, as the tinyglot command says them, not as a traceback."""
    try:
        return main(argv)
    except TinyglotError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(run())
