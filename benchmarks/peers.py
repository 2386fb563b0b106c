"""tinyglot models against the peers of shared/PEERS.md, on this machine, in one run.

Every model runs in its own process (so its peak memory is its own) on the same sentences of the
test set, with the same thread count:

- p50 / p90 single-sentence latency: ``encode([s])`` of one sentence at a time, tokenisation
  included, after warm-up queries;
- sentences/s: ``encode`` of every test sentence in batches of ``--batch`` (tokenisation included),
  or of a seeded random ``--throughput-sentences`` of them;
- peak memory: the process's peak resident set size after the latency loop (``VmHWM``), and the
  part of it the model added (peak minus the resident size before loading);
- size: bytes on disk of what the model needs (bundle folder, torch weights + tokenizer, or the
  peer's package folder);
- P@1: bitext retrieval on the test set (mean of x->en and en->x, per language and averaged);
- call regimes (:mod:`tinyglot.devices.regimes`, in the same process): sentences/s of one sentence per
  call, arrival-order batches of 32 and one bulk call (``encode(all, batch_size=32)``) on two length
  profiles (``--regime-test NAME[@MIN_WORDS]=SOURCE``, repeatable; default: the shared libreoffice test
  and the prose set of ``--min-words`` 15+ words, ``--regime-sentences`` each), with each model's
  tokens per sentence; ``--no-regimes`` skips them.

Prints one Markdown table, the speed ratios of each tinyglot model against each peer, then the regimes
table (ratios to USE-m); writes everything to ``--json``.  Asserts nothing.

A peer's P@1 does not change between runs (same package version, same test pairs), and its pass
over the test sets is slow (multilingual-e5-small: ~16 sentences/s on one thread), so
``--p1-from OLD.json`` takes a peer's P@1 from an earlier run with the same test settings and
package version; its speed is still measured in this run.

    python benchmarks/peers.py --onnx B1 --tflite B2 --torch STUDENT --teacher TEACHER \\
        --peers use-m,e5-small,minilm --threads 1 --json peers.json
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict
from pathlib import Path

import numpy as np

from tinyglot.devices.regimes import PROSE_MIN_WORDS, SentenceSet, default_set_specs, load_set, measure, \
    regimes_table, sets_line, tokens_table

RESULT_TAG = "PEERS_RESULT "


def _rss(field: str) -> int | None:
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


def _torch_bytes(encoder, folder: Path) -> int:
    """Inference weights of a tinyglot torch model (the encoder only, no training heads) + tokenizer."""
    module = encoder.module
    params = module.encoder.parameters() if hasattr(module, "encoder") else module.parameters()
    tok = next(iter(folder.glob("tokenizer.model")), None)
    return sum(p.numel() * p.element_size() for p in params) + (tok.stat().st_size if tok else 0)


def model_kind(spec: str) -> str:
    """The ``kind`` :func:`load_model` takes for a bare spec: ``peer`` (a peer name or ``peer:NAME``),
    ``onnx`` (a tinyglot folder whose loader takes a thread count: the exported bundles), ``torch``
    (another tinyglot folder), else ``spec`` (anything :func:`tinyglot.load` opens)."""
    import inspect

    from tinyglot.encoders import PEERS
    from tinyglot.models import loader_function, read_model_config

    if spec.removeprefix("peer:") in PEERS:
        return "peer"
    folder = Path(spec).expanduser()
    if not (folder / "config.json").is_file():
        return "spec"
    loader = read_model_config(folder).get("loader")
    if not isinstance(loader, str):
        return "spec"
    return "onnx" if "threads" in inspect.signature(loader_function(loader, folder)).parameters else "torch"


def load_model(kind: str, spec: str, threads: int):
    """(encoder, size in bytes) of one model: a tinyglot bundle / folder, a peer by name, or (kind
    ``spec``) anything tinyglot's resolver opens; kind ``auto``: :func:`model_kind` decides."""
    if kind == "auto":
        kind = model_kind(spec)
    if kind == "peer":
        from tinyglot.encoders.peers import load_peer

        enc = load_peer(spec.removeprefix("peer:"), threads)
        return enc, enc.size_bytes()
    import torch

    import tinyglot
    from tinyglot.io import folder_bytes

    torch.set_num_threads(threads)
    folder = Path(spec)
    if kind == "spec":
        return tinyglot.load(spec), folder_bytes(folder) if folder.is_dir() else 0
    enc = tinyglot.load(folder, **({"threads": threads} if kind in ("onnx", "tflite") else {}))
    size = _torch_bytes(enc, folder) if kind in ("torch", "teacher") else folder_bytes(folder)
    return enc, size


class Precomputed:
    """An ``Encoder`` answering from embeddings computed once (P@1 without a second pass)."""

    def __init__(self, sentences: list[str], emb: np.ndarray) -> None:
        self.rows = {s: i for i, s in enumerate(sentences)}
        self.emb = emb

    def encode(self, sentences, batch_size: int = 64) -> np.ndarray:
        return self.emb[[self.rows[s] for s in sentences]]


def load_tests(tests: list[str], pairs_per_lang: int) -> dict[str, dict]:
    """``NAME=PATH`` test sets (``embedded`` alone: the embedded one), each cut to ``pairs_per_lang``."""
    from tinyglot.data.embedded import load_testset

    out = {}
    for item in tests or ["embedded"]:
        name, _, path = item.partition("=")
        full = load_testset(path or None) if name != "embedded" or path else load_testset()
        out[name] = {lang: pairs[:pairs_per_lang] for lang, pairs in full.items()}
    return out


def measure_one(kind: str, spec: str, threads: int, pairs_per_lang: int, queries: int, warmup: int,
                batch: int, seed: int, tests: list[str] | None = None, throughput_sentences: int = 0,
                known_p1: dict | None = None, regime_sets: list[SentenceSet] | None = None,
                regime_repeats: int = 3) -> dict:

    testsets = load_tests(tests or [], pairs_per_lang)
    testset = next(iter(testsets.values()))  # speed is measured on the first test set's sentences
    sentences = [s for pairs in testset.values() for p in pairs for s in (p.x, p.en)]
    rss_before = _rss("VmRSS")
    t0 = time.perf_counter()
    enc, size = load_model(kind, spec, threads)
    load_s = time.perf_counter() - t0
    rng = np.random.default_rng(seed)
    picks = rng.choice(len(sentences), size=warmup + queries, replace=True)
    lat = []
    for i, idx in enumerate(picks):
        t = time.perf_counter()
        enc.encode([sentences[idx]])
        if i >= warmup:
            lat.append(1000 * (time.perf_counter() - t))
    peak = _rss("VmHWM")
    lat = np.sort(np.array(lat))
    timed = sentences
    if 0 < throughput_sentences < len(sentences):
        timed = [sentences[i] for i in np.sort(rng.choice(len(sentences), throughput_sentences, replace=False))]
    t = time.perf_counter()
    emb = enc.encode(timed, batch_size=batch)
    throughput = len(timed) / (time.perf_counter() - t)
    identity = enc.identity() if kind == "peer" else None
    if known_p1 is not None and known_p1.get("identity") == identity:
        quality = {k: known_p1[k] for k in ("p1", "p1_per_lang", "p1_by_test")} | {"p1_from": known_p1["from"]}
    else:
        quality = p1_fields(enc, testsets, batch, spec, Precomputed(sentences, emb) if timed is sentences else enc)
    regimes = measure(enc, regime_sets, regime_repeats, folder=spec if Path(spec).is_dir() else None) \
        if regime_sets else None
    return {
        "kind": kind, "spec": spec, "threads": threads, "load_s": round(load_s, 2),
        "p50_ms": float(np.percentile(lat, 50, method="inverted_cdf")),
        "p90_ms": float(np.percentile(lat, 90, method="inverted_cdf")),
        "sentences_per_s": throughput, "peak_rss_mb": peak / 2**20 if peak else None,
        "model_rss_mb": (peak - rss_before) / 2**20 if peak and rss_before else None,
        "size_mb": size / 1e6, "sentences": len(timed), "queries": queries, "identity": identity, **quality,
        **({"regimes": regimes} if regimes is not None else {}),
    }


def p1_fields(enc, testsets: dict[str, dict], batch: int, spec: str, first) -> dict:
    """P@1 on every test set (``first``: the encoder for the first one, e.g. the timed pass's rows)."""
    from tinyglot.evaluation import evaluate_bitext

    by_test, result = {}, None
    for i, (name, testset) in enumerate(testsets.items()):
        res = evaluate_bitext(first if i == 0 else enc, testset, batch_size=batch, model_name=spec)
        result = result or res
        by_test[name] = {"p1": 100 * res.primary_metric,
                         "per_lang": {row.lang: round(100 * row.mean, 1) for row in res.rows}}
    assert result is not None
    per_lang = {row.lang: round(100 * row.mean, 1) for row in result.rows}
    return {"p1": 100 * result.primary_metric, "p1_per_lang": per_lang, "p1_by_test": by_test}


def known_peer_p1(path: Path | None, args: argparse.Namespace) -> dict[str, dict]:
    """Peers' P@1 from an earlier run of this script with the same test sets and pairs per language."""
    if path is None:
        return {}
    old = json.loads(path.read_text(encoding="utf-8"))
    same = all(old["settings"].get(k) == getattr(args, k) for k in ("pairs_per_lang", "test"))
    if not same:
        print(f"--p1-from {path}: other test settings, P@1 recomputed", file=sys.stderr)
        return {}
    return {r["spec"]: r | {"from": str(path)} for r in old["rows"]
            if r.get("kind") == "peer" and "error" not in r and r.get("identity")}


def run_isolated(kind: str, spec: str, args: argparse.Namespace, known: dict | None = None,
                 regime_file: Path | None = None) -> dict:
    cmd = [sys.executable, __file__, "--one", f"{kind}={spec}", "--threads", str(args.threads),
           "--pairs-per-lang", str(args.pairs_per_lang), "--queries", str(args.queries),
           "--warmup", str(args.warmup), "--batch", str(args.batch)]
    for test in args.test:
        cmd += ["--test", test]
    cmd += ["--throughput-sentences", str(args.throughput_sentences)]
    if known is not None:
        cmd += ["--known-p1", json.dumps(known)]
    if regime_file is not None:
        cmd += ["--regime-sets", str(regime_file), "--regime-repeats", str(args.regime_repeats)]
    return run_child(cmd, args.threads, {"kind": kind, "spec": spec})


def run_child(cmd: list[str], threads: int, label: dict) -> dict:
    """Run one model's ``--one`` job of a benchmark script in its own process at ``threads`` threads:
    the dict its ``RESULT_TAG`` line prints, else ``label`` with the ``error`` it printed last."""
    env = {**os.environ, "OMP_NUM_THREADS": str(threads), "TINYGLOT_NO_PROGRESS": "1"}
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env)
    line = next((x for x in reversed(proc.stdout.splitlines()) if x.startswith(RESULT_TAG)), None)
    if proc.returncode or line is None:
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-3:]
        return label | {"error": " | ".join(tail)}
    return json.loads(line[len(RESULT_TAG):])


def table(rows: list[dict], names: dict[str, str]) -> str:
    tests = next((list(r["p1_by_test"]) for r in rows if "p1_by_test" in r), ["test"])
    out = ["| model | size MB | peak RSS MB | load s | p50 ms | p90 ms | sentences/s | "
           + " | ".join(f"P@1 {t}" for t in tests) + " |", "|---|---:|---:|---:|---:|---:|---:|" + "---:|" * len(tests)]
    for r in rows:
        if "error" in r:
            out.append(f"| {names[r['spec']]} | error: {r['error'][:80]} |" + " |" * (5 + len(tests)))
            continue
        out.append(f"| {names[r['spec']]} | {r['size_mb']:.1f} | {r['peak_rss_mb']:.0f} | {r['load_s']:.1f} | "
                   f"{r['p50_ms']:.2f} | {r['p90_ms']:.2f} | {r['sentences_per_s']:.0f} | "
                   + " | ".join(f"{r['p1_by_test'][t]['p1']:.1f}" for t in tests) + " |")
    return "\n".join(out)


def ratios(rows: list[dict], names: dict[str, str]) -> str:
    ours = [r for r in rows if r["kind"] != "peer" and "error" not in r]
    peers = [r for r in rows if r["kind"] == "peer" and "error" not in r]
    if not ours or not peers:
        return ""
    head = "| ours vs peer | " + " | ".join(names[p["spec"]] for p in peers) + " |"
    out = ["Speed ratios (sentences/s ours / peer; p50 latency peer / ours; > 1 means ours is faster):", "",
           head, "|---|" + "---:|" * len(peers)]
    for r in ours:
        cells = [f"{r['sentences_per_s'] / p['sentences_per_s']:.2f}x / {p['p50_ms'] / r['p50_ms']:.2f}x"
                 for p in peers]
        out.append(f"| {names[r['spec']]} | " + " | ".join(cells) + " |")
    return "\n".join(out)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--onnx", action="append", default=[], help="ONNX bundle folder (repeatable)")
    p.add_argument("--tflite", action="append", default=[], help="TFLite bundle folder (repeatable)")
    p.add_argument("--torch", action="append", default=[], help="student folder, PyTorch fp32 (repeatable)")
    p.add_argument("--teacher", action="append", default=[], help="EMS teacher run (repeatable)")
    p.add_argument("--peers", default="use-m,e5-small,minilm", help="peers (tinyglot.encoders.peers), comma-separated")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--pairs-per-lang", type=int, default=500, help="test pairs per language")
    p.add_argument("--test", action="append", default=[], metavar="NAME=PATH",
                   help="a test set (folder of <lang>.tsv, or any corpus file), repeatable; speed is measured on "
                        "the first; default: the embedded test set")
    p.add_argument("--queries", type=int, default=300, help="measured single-sentence queries")
    p.add_argument("--warmup", type=int, default=20)
    p.add_argument("--batch", type=int, default=32, help="batch size of the throughput pass")
    p.add_argument("--json", type=Path, default=None, help="write all figures here")
    p.add_argument("--throughput-sentences", type=int, default=0,
                   help="time the batch pass on this many test sentences (seeded sample; default: all)")
    p.add_argument("--p1-from", type=Path, default=None,
                   help="an earlier --json of this script: peers' P@1 taken from it (same test settings and "
                        "package version), their speed measured again")
    p.add_argument("--no-regimes", action="store_true", help="skip the call regimes (single, arrival-32, bulk)")
    p.add_argument("--regime-test", action="append", default=[], metavar="NAME[@MIN_WORDS]=SOURCE[+SOURCE..]",
                   help="a sentence set of the regimes (repeatable): a test folder or corpus file (PATH#SRC: one "
                        "src), embedded, embedded-corpus or pydoc; default: the shared libreoffice test and prose")
    p.add_argument("--min-words", type=int, default=PROSE_MIN_WORDS,
                   help="the default prose set's minimum words per sentence (English side)")
    p.add_argument("--regime-sentences", type=int, default=1000, help="seeded sample of each regime set")
    p.add_argument("--regime-repeats", type=int, default=3, help="passes per regime; the fastest counts")
    p.add_argument("--regime-sets", type=Path, default=None, help=argparse.SUPPRESS)
    p.add_argument("--known-p1", default=None, help=argparse.SUPPRESS)
    p.add_argument("--one", default=None, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.one:
        kind, spec = args.one.split("=", 1)
        regime_sets = [SentenceSet(**x) for x in json.loads(args.regime_sets.read_text(encoding="utf-8"))] \
            if args.regime_sets else None
        res = measure_one(kind, spec, args.threads, args.pairs_per_lang, args.queries, args.warmup,
                          args.batch, seed=0, tests=args.test, throughput_sentences=args.throughput_sentences,
                          known_p1=json.loads(args.known_p1) if args.known_p1 else None,
                          regime_sets=regime_sets, regime_repeats=args.regime_repeats)
        print(RESULT_TAG + json.dumps(res))
        return 0
    jobs = ([("onnx", s) for s in args.onnx] + [("tflite", s) for s in args.tflite]
            + [("torch", s) for s in args.torch] + [("teacher", s) for s in args.teacher]
            + [("peer", s) for s in args.peers.split(",") if s])
    names = {spec: (spec if kind == "peer" else f"{kind}: {Path(spec).name}") for kind, spec in jobs}
    known = known_peer_p1(args.p1_from, args)
    regime_sets = [] if args.no_regimes else [load_set(x, args.regime_sentences) for x in
                                              args.regime_test or default_set_specs(min_words=args.min_words)]
    rows = []
    with tempfile.TemporaryDirectory(prefix="peers-regimes-") as tmp:
        regime_file = Path(tmp) / "sets.json" if regime_sets else None
        if regime_file is not None:
            regime_file.write_text(json.dumps([asdict(x) for x in regime_sets]), encoding="utf-8")
        for kind, spec in jobs:
            print(f"measuring {names[spec]} ...", file=sys.stderr, flush=True)
            rows.append(run_isolated(kind, spec, args, known.get(spec) if kind == "peer" else None, regime_file))
    from tinyglot.devices.profiles import detect_host

    print(f"{detect_host()['cpu_model']}, {os.cpu_count()} cores, {args.threads} thread(s), "
          f"{args.pairs_per_lang} test pairs per language, {args.queries} single-sentence queries"
          + "".join(f"; P@1 of {r['spec']} from {r['p1_from']}" for r in rows if r.get("p1_from")) + "\n")
    print(table(rows, names))
    print()
    print(ratios(rows, names))
    if regime_sets:
        timed = [{"spec": r["spec"], "sets": r["regimes"]} if "regimes" in r else
                 {"spec": r["spec"], "error": r.get("error", "no regimes")} for r in rows]
        print(f"\nCall regimes, sentences/s ({args.regime_repeats} passes each, the fastest counts): "
              + sets_line(regime_sets) + "\n")
        print(regimes_table(timed, regime_sets, names=names))
        print()
        print(tokens_table(timed, regime_sets, names=names))
    if args.json:
        sets_info = [{"name": x.name, "source": x.source, "min_words": x.min_words, "sentences": len(x.sentences),
                      "chars": x.chars()} for x in regime_sets]
        args.json.write_text(json.dumps({"settings": vars(args) | {"json": str(args.json)}, "rows": rows,
                                         "regime_sets": sets_info}, indent=2, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
