"""Student shapes on the CPU: int8 ONNX speed and size per depth x width x output dimension.

Latency and throughput do not depend on the weights, so every shape is an untrained student (random
weights) with the same tokenizer, exported the way `tinyglot export --quantize` does (graph fusion,
dynamic int8), and run by onnxruntime on this machine with ``--threads`` threads:

- p50 single-sentence latency of ``encode([s])`` (tokenisation included) over real test sentences
  that tokenise to about 16 and about 64 tokens;
- sentences/s of ``encode`` over every test sentence in batches of ``--batch`` (tokenisation included);
- bundle size (int8 ONNX + tokenizer) and parameter counts.

``--regimes`` also times every bundle in the three call regimes beside ``--regimes-with`` (USE-m), each
in its own process at 1 thread, natively or on AVX2 kernels (``--isa avx2``, :mod:`tinyglot.devices.isa`).

Quality needs training: pass trained students with ``--trained NAME=FOLDER`` to add their P@1 (and
the same speed figures, measured in the same run), and ``--peers peers.json`` (from
``benchmarks/peers.py``) to put the peers on the plot.  Prints a Markdown table, writes ``--json`` and,
with ``--plot``, sentences/s vs P@1 (trained shapes and peers) beside sentences/s vs size.

    python benchmarks/shapes.py --tokenizer runs/e5/fast-small/student/tokenizer.model \\
        --shapes 2x256,4x256,6x256,4x384/256,12x128,24x128 --json shapes.json --plot shapes.png

A shape is ``LAYERSxHIDDEN`` with optional ``/OUTPUT`` (a final projection) and ``:FFN`` (default
4 x hidden); heads are hidden / 64 (at least 2).
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

SHAPE = re.compile(r"^(\d+)x(\d+)(?:/(\d+))?(?::(\d+))?$")
DEFAULT_SHAPES = "1x256,2x256,3x256,4x256,6x256,2x384/256,4x384/256,3x192,4x192,12x128,24x128"


@dataclass(frozen=True)
class Shape:
    layers: int
    hidden: int
    output: int = 0
    ffn: int = 0

    @classmethod
    def parse(cls, text: str) -> Shape:
        m = SHAPE.match(text.strip())
        if not m:
            raise SystemExit(f"bad shape {text!r}: write LAYERSxHIDDEN[/OUTPUT][:FFN], e.g. 4x384/256")
        layers, hidden, output, ffn = (int(g) if g else 0 for g in m.groups())
        return cls(layers, hidden, output, ffn or 4 * hidden)

    @property
    def name(self) -> str:
        return f"{self.layers}x{self.hidden}" + (f"/{self.output}" if self.output else "") + \
            (f":{self.ffn}" if self.ffn != 4 * self.hidden else "")

    @property
    def heads(self) -> int:
        return max(2, self.hidden // 64)


def cpu_model() -> str:
    from tinyglot.devices.profiles import detect_host

    return str(detect_host()["cpu_model"])


def random_student(shape: Shape, tokenizer, max_len: int, folder: Path) -> Path:
    import torch
    from tinyglot.distill.config import StudentConfig
    from tinyglot.distill.student import Student, save_student

    torch.manual_seed(0)
    cfg = StudentConfig(hidden_size=shape.hidden, num_layers=shape.layers, num_heads=shape.heads,
                        ffn_size=shape.ffn, max_len=max_len, output_dim=shape.output,
                        vocab_size=tokenizer.vocab_size)
    return save_student(Student(cfg).eval(), tokenizer, folder, {"preset": f"shape {shape.name}"})


def sentences_near(encoder, sentences: list[str], tokens: int, limit: int = 200) -> list[str]:
    """Test sentences whose token count is closest to ``tokens`` (at most ``limit``)."""
    lengths = np.array([len(x) for x in encoder.tokenizer.encode_ids(sentences, encoder.max_len)])
    order = np.argsort(np.abs(lengths - tokens), kind="stable")[:limit]
    return [sentences[i] for i in order]


def measure(encoder, sentences: list[str], batch: int, queries: int) -> dict:
    """Single-sentence p50 at ~16 and ~64 tokens and batch throughput, tokenisation included."""
    out: dict = {}
    for tokens in (16, 64):
        pool = sentences_near(encoder, sentences, tokens)
        for s in pool[:20]:  # warm-up
            encoder.encode([s])
        lat = []
        for i in range(queries):
            t = time.perf_counter()
            encoder.encode([pool[i % len(pool)]])
            lat.append(1000 * (time.perf_counter() - t))
        out[f"p50_ms_{tokens}"] = float(np.median(lat))
    encoder.encode(sentences[:256], batch_size=batch)
    t = time.perf_counter()
    encoder.encode(sentences, batch_size=batch)
    out["sentences_per_s"] = len(sentences) / (time.perf_counter() - t)
    return out


def best_of(rounds: list[dict]) -> dict:
    """The fastest figures of several rounds: background load only ever slows a round down."""
    return {"p50_ms_16": min(r["p50_ms_16"] for r in rounds), "p50_ms_64": min(r["p50_ms_64"] for r in rounds),
            "sentences_per_s": max(r["sentences_per_s"] for r in rounds)}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tokenizer", help="tokenizer.model every shape uses (default: train one of 16,000 pieces "
                                        "on the embedded corpus)")
    ap.add_argument("--shapes", default=DEFAULT_SHAPES, help=f"comma-separated shapes (default: {DEFAULT_SHAPES})")
    ap.add_argument("--trained", action="append", default=[], metavar="NAME=FOLDER",
                    help="a trained student folder: its shape is measured too, with its P@1")
    ap.add_argument("--peers", type=Path, help="peers.json of benchmarks/peers.py, for the plot (its speed and its "
                                               "first test set's P@1; run both on one machine, one thread)")
    ap.add_argument("--quantize", default="avx512-vnni", help="ONNX quantization preset (default: avx512-vnni)")
    ap.add_argument("--max-len", type=int, default=128)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--queries", type=int, default=300, help="single-sentence queries per length")
    ap.add_argument("--sentences", type=int, default=4000, help="test sentences for the throughput pass")
    ap.add_argument("--rounds", type=int, default=3,
                    help="measure every shape this many times, round-robin, and keep the fastest round")
    ap.add_argument("--regimes", action="store_true",
                    help="also time every bundle in the three call regimes (tinyglot.devices.regimes: a process "
                         "each, 1 thread) beside --regimes-with, on the --regimes-test sets")
    ap.add_argument("--regimes-with", default="use-m",
                    help="comma-separated specs timed beside the shapes (a released name, a peer, a folder)")
    ap.add_argument("--regimes-test", action="append", default=[], metavar="NAME[@MIN_WORDS]=SOURCE[+SOURCE..]",
                    help="a sentence set of the regimes (repeatable, as benchmarks/regimes.py --test); default: the "
                         "shared libreoffice test and the prose set")
    ap.add_argument("--regimes-sentences", type=int, default=500, help="seeded sample of each set")
    ap.add_argument("--isa", default="native", help="the regimes' kernels: native, or avx2 (AVX-512 and VNNI "
                                                    "hidden from CPUID; Linux x86-64 with cpuid_fault)")
    ap.add_argument("--json", type=Path)
    ap.add_argument("--plot", type=Path)
    args = ap.parse_args(argv)
    from tinyglot.devices.isa import ISAS

    if args.isa not in ISAS:  # before any export: the regimes come last
        raise SystemExit(f"unknown --isa {args.isa!r}; choose from {', '.join(sorted(ISAS))}")

    import logging

    import torch

    from tinyglot.app.cli import quiet_third_party_import_noise

    quiet_third_party_import_noise()
    logging.getLogger().setLevel(logging.ERROR)  # onnxruntime's quantizer logs advice on the root logger
    from tinyglot.export.onnx import export_onnx, load_onnx_bundle

    from tinyglot.data.embedded import load_pairs, load_testset
    from tinyglot.evaluation import evaluate_bitext
    from tinyglot.io import folder_bytes
    from tinyglot.models import read_model_config
    from tinyglot.tokenizer import Tokenizer

    torch.set_num_threads(args.threads)
    testset = load_testset()
    sentences = [s for pairs in testset.values() for p in pairs for s in (p.x, p.en)][: args.sentences]
    with tempfile.TemporaryDirectory(prefix="tinyglot-shapes-") as tmp:
        tmp_dir = Path(tmp)
        if args.tokenizer:
            tokenizer = Tokenizer.load(args.tokenizer)
        else:
            from tinyglot.batching import train_vocabulary
            from tinyglot.data import group_by_lang

            tokenizer = train_vocabulary(group_by_lang(load_pairs()), 16000, 200_000, seed=0)
        rows, encoders = [], []
        jobs = [(s.name, None, s) for s in map(Shape.parse, args.shapes.split(","))]
        for item in args.trained:
            name, _, folder = item.partition("=")
            jobs.append((name, Path(folder), None))
        for name, folder, shape in jobs:
            source = folder if folder is not None else random_student(shape, tokenizer, args.max_len,
                                                                      tmp_dir / f"s-{len(rows)}")
            cfg = read_model_config(source)
            bundle = tmp_dir / f"b-{len(rows)}"
            t0 = time.perf_counter()
            export_onnx(source, bundle, args.quantize, parity_gate=False, max_sentences=5, threads=args.threads)
            export_s = time.perf_counter() - t0
            enc = load_onnx_bundle(bundle, threads=args.threads)
            row = {"name": name, "trained": folder is not None, "dim": cfg["dim"],
                   "layers": cfg["student"]["num_layers"], "hidden": cfg["student"]["hidden_size"],
                   "vocab": cfg["student"]["vocab_size"], "parameters": cfg["parameters"]["total"],
                   "bundle_mb": folder_bytes(bundle) / 1e6, "export_s": round(export_s, 1)}
            if folder is not None:
                row["p1"] = 100 * evaluate_bitext(enc, testset, batch_size=args.batch).primary_metric
            rows.append(row)
            encoders.append(enc)
        for k in range(args.rounds):
            for row, enc in zip(rows, encoders, strict=True):
                row.setdefault("rounds", []).append(measure(enc, sentences, args.batch, args.queries))
                print(f"round {k + 1}/{args.rounds} {row['name']}: {row['rounds'][-1]}", file=sys.stderr, flush=True)
        for row in rows:
            row.update(best_of(row["rounds"]))
        regimes = call_regimes(rows, [tmp_dir / f"b-{i}" for i in range(len(rows))], args) if args.regimes else None
    head = ["shape", "dim", "params (M)", "int8 MB", "p50 ms 16 tok", "p50 ms 64 tok", "sent/s batch 32", "P@1"]
    print(f"\nint8 ONNX ({args.quantize}), {args.threads} thread(s), {cpu_model()}, tokenisation included\n")
    print("| " + " | ".join(head) + " |\n|---|" + "---:|" * (len(head) - 1))
    for r in rows:
        print(f"| {r['name']} | {r['dim']} | {r['parameters'] / 1e6:.2f} | {r['bundle_mb']:.1f} | "
              f"{r['p50_ms_16']:.2f} | {r['p50_ms_64']:.2f} | {r['sentences_per_s']:.0f} | "
              f"{r['p1']:.1f} |" if "p1" in r else
              f"| {r['name']} | {r['dim']} | {r['parameters'] / 1e6:.2f} | {r['bundle_mb']:.1f} | "
              f"{r['p50_ms_16']:.2f} | {r['p50_ms_64']:.2f} | {r['sentences_per_s']:.0f} | - |")
    result = {"cpu": cpu_model(), "threads": args.threads, "quantize": args.quantize, "batch": args.batch,
              "rows": rows}
    if regimes is not None:
        result["regimes"], result["isa"] = regimes, args.isa
    if args.json:
        args.json.write_text(json.dumps(result, indent=2))
    if args.plot:
        plot(rows, json.loads(args.peers.read_text())["rows"] if args.peers else [], args.plot)
    return 0


def call_regimes(rows: list[dict], bundles: list[Path], args: argparse.Namespace) -> list[dict]:
    """Each shape's bundle and each ``--regimes-with`` spec in the three call regimes, in their own
    processes (``--isa``'s kernels); prints the table against USE-m, returns the rows."""
    from tinyglot.devices.isa import ISAS
    from tinyglot.devices.regimes import default_set_specs, load_set, regimes_table, run_regimes, sets_line

    sets = [load_set(spec, args.regimes_sentences) for spec in args.regimes_test or default_set_specs()]
    extra = [x for x in args.regimes_with.split(",") if x]
    out = run_regimes([*map(str, bundles), *extra], sets, 1, rounds=args.rounds, isa=args.isa,
                      say=lambda msg: print(msg, file=sys.stderr, flush=True))
    print(f"\nCall regimes, 1 thread, {cpu_model()}, ISA: {ISAS[args.isa]}; {sets_line(sets)}\n")
    print(regimes_table(out, sets, names={str(b): r["name"] for b, r in zip(bundles, rows, strict=True)}))
    return out


def plot(rows: list[dict], peers: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(12, 4.5))
    for r in rows:
        right.scatter(r["sentences_per_s"], r["bundle_mb"], color="tab:blue" if r["trained"] else "tab:gray")
        right.annotate(r["name"], (r["sentences_per_s"], r["bundle_mb"]), fontsize=7)
        if "p1" in r:
            left.scatter(r["sentences_per_s"], r["p1"], color="tab:blue")
            left.annotate(r["name"], (r["sentences_per_s"], r["p1"]), fontsize=7)
    for p in (p for p in peers if p.get("kind") == "peer" and "error" not in p):
        left.scatter(p["sentences_per_s"], p["p1"], color="tab:red", marker="s")
        left.annotate(f"{p['spec']} (peers.py)", (p["sentences_per_s"], p["p1"]), fontsize=7)
    left.set(xscale="log", xlabel="sentences/s (batch 32, 1 thread)", ylabel="P@1", title="quality vs speed")
    right.set(xscale="log", xlabel="sentences/s (batch 32, 1 thread)", ylabel="int8 bundle MB",
              title="size vs speed (gray: untrained shapes)")
    fig.tight_layout()
    fig.savefig(path, dpi=120)


if __name__ == "__main__":
    sys.exit(main())
