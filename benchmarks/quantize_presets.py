"""Parity and latency of every ONNX ``--quantize`` preset on one student.

Exports ``--model`` once per preset the way ``tinyglot export --format onnx --quantize PRESET`` does
(the export's own parity check against the PyTorch source on the embedded test pairs; a preset that
fails it is timed too, its row saying ``passed`` False), then times
``run_batch`` on onnxruntime with ``--threads`` threads: batch 1 x ``--seq`` tokens and batch
``--batch`` x ``--seq`` tokens.  Timing is interleaved: ``--rounds`` rounds, each running every
bundle ``--runs`` times in turn, and the median over all runs is reported, so that load from other
processes falls on every bundle alike.  ``--modules`` compares export code versions (each a module
with ``export_onnx``, e.g. a copy of an older ``export/onnx.py`` placed beside it).  Prints a
Markdown table; ``--json`` writes the figures.

    python benchmarks/quantize_presets.py --model runs/fm/pair/student --json presets.json
"""

from __future__ import annotations

import argparse
import importlib
import json
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np

PRESETS = ("none", "dynamic", "dynamic-per-channel", "avx2", "avx512-vnni", "arm64", "static", "fp16")


def cpu_model() -> str:
    from tinyglot.devices.profiles import detect_host

    return str(detect_host()["cpu_model"])


def export(module: str, model: Path, preset: str, out: Path, threads: int, max_sentences: int) -> dict:
    """Export one bundle (a finished bundle already in ``out`` is read back, not exported again)."""
    if not (out / "config.json").is_file():
        export_onnx = importlib.import_module(module).export_onnx
        export_onnx(model, out, preset, max_sentences=max_sentences, threads=threads, parity_gate=False)
    config = json.loads((out / "config.json").read_text())
    parity = json.loads((out / "parity.json").read_text())
    return {"module": module, "preset": preset, "path": str(out / "model.onnx"), "max_len": config["max_len"],
            **{k: parity[k] for k in ("mean_cosine", "min_cosine", "p1_drop", "passed")},
            "bytes": (out / "model.onnx").stat().st_size, "int8_ops": config["onnx"]["int8_ops"]}


def time_rows(rows: list[dict], threads: int, shapes: list[tuple[int, int]], rounds: int, runs: int) -> None:
    """Add ``b{B}xs{S}_ms`` (median) to each row, timing all bundles interleaved."""
    from tinyglot.export.onnx import OnnxEncoder

    encoders = [OnnxEncoder(r["path"], None, r["max_len"], threads=threads) for r in rows]
    rng = np.random.default_rng(0)
    for b, s in shapes:
        ids = rng.integers(5, 1000, (b, s)).astype(np.int64)  # below every student's vocabulary size
        mask = np.ones_like(ids)
        times: list[list[float]] = [[] for _ in rows]
        for enc in encoders:  # warm-up
            for _ in range(5):
                enc.run_batch(ids, mask)
        for _ in range(rounds):
            for i, enc in enumerate(encoders):
                for _ in range(runs):
                    start = time.perf_counter()
                    enc.run_batch(ids, mask)
                    times[i].append(time.perf_counter() - start)
        for row, t in zip(rows, times, strict=True):
            row[f"b{b}xs{s}_ms"] = 1000 * statistics.median(t)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", type=Path, required=True)
    ap.add_argument("--presets", default=",".join(PRESETS))
    ap.add_argument("--modules", default="tinyglot.export.onnx", help="comma-separated modules with export_onnx")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--seq", type=int, default=16)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--rounds", type=int, default=10)
    ap.add_argument("--runs", type=int, default=20)
    ap.add_argument("--max-sentences", type=int, default=100)
    ap.add_argument("--out", type=Path, help="keep the bundles here (default: a temporary folder); bundles "
                    "already there are timed again, not exported again")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args(argv)
    presets = [p.strip() for p in args.presets.split(",") if p.strip()]
    modules = [m.strip() for m in args.modules.split(",") if m.strip()]
    with tempfile.TemporaryDirectory() as tmp:
        out = args.out or Path(tmp)
        rows = [export(mod, args.model, preset, out / f"{i}-{preset}", args.threads, args.max_sentences)
                for preset in presets for i, mod in enumerate(modules)]
        time_rows(rows, args.threads, [(1, args.seq), (args.batch, args.seq)], args.rounds, args.runs)
    keys = [k for k in rows[0] if k.endswith("_ms")]
    print(f"CPU: {cpu_model()}; {args.threads} thread(s); median of {args.rounds * args.runs} runs, interleaved\n")
    print("| preset | module | mean cos | min cos | P@1 drop | passed | MB | int8 ops | " + " | ".join(keys) + " |")
    print("|---" * (8 + len(keys)) + "|")
    for r in rows:
        print(f"| {r['preset']} | {r['module']} | {r['mean_cosine']:.6f} | {r['min_cosine']:.5f} | "
              f"{r['p1_drop']:+.4f} | {r['passed']} | {r['bytes'] / 1e6:.3f} | {r['int8_ops']} | "
              + " | ".join(f"{r[k]:.3f}" for k in keys) + " |")
    if args.json:
        args.json.write_text(json.dumps({"cpu": cpu_model(), "threads": args.threads, "rows": rows}, indent=1))


if __name__ == "__main__":
    main()
