"""Where the time of ``tinyglot run`` goes on this machine: each stage's wall and CPU time, and the CPU-seconds
of a training step of the teacher and of the student.

By default it runs the default profile twice, as a new user does: the first run with an empty
``TINYGLOT_HOME`` (a temporary folder: the teacher is trained), then the cached run (a new run folder, the
same home: the teacher and the student are reused from it), and prints for each run its stages (wall seconds,
CPU seconds, peak RSS) and the whole wall time, then the training steps' CPU-seconds (from the ``cpu_s`` that
the training loop logs every ``train.log_every`` steps; the median over those intervals, so evaluations and
saves are left out). It prints numbers; it is not a test.

    python benchmarks/pipeline_time.py                       # the default profile, first and cached run
    python benchmarks/pipeline_time.py --profile tiny        # a quick look
    python benchmarks/pipeline_time.py --runs first --set distill.max_steps=300
    python benchmarks/pipeline_time.py --read runs/pipeline --home ~/.cache/tinyglot   # a run made before
    python benchmarks/pipeline_time.py --isa avx2            # torch limited to AVX2 kernels (see below)

``--isa avx2`` sets ``ATEN_CPU_CAPABILITY=avx2``, ``DNNL_MAX_CPU_ISA=AVX2`` and
``MKL_ENABLE_INSTRUCTIONS=AVX2``: torch's own kernels, oneDNN and MKL then use AVX2 code on a CPU that has
AVX-512.  It approximates an AVX2-only CPU for the training stages only (onnxruntime, LiteRT and USE-m
still pick their kernels by the CPU), and not its clock or caches: a measurement on such a CPU is the
real figure.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ISA_ENV = {"avx2": {"ATEN_CPU_CAPABILITY": "avx2", "DNNL_MAX_CPU_ISA": "AVX2", "MKL_ENABLE_INSTRUCTIONS": "AVX2"}}
STAGES = ("teacher", "distill", "export", "eval", "bench", "report")


def cpu_line() -> str:
    """The CPU's model name (``lscpu``) and the vector and int8 extensions that decide the speed here."""
    model, flags = "unknown CPU", set()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            key, _, value = line.partition(":")
            if key.strip() == "model name" and model == "unknown CPU":
                model = value.strip()
            elif key.strip() == "flags" and not flags:
                flags = set(value.split())
    except OSError:
        pass
    kind = ("AVX-512 VNNI" if "avx512_vnni" in flags else "AVX-512 (no VNNI)" if "avx512f" in flags
            else "AVX2 only" if "avx2" in flags else "no AVX2")
    extra = [name for name, flag in (("AVX-VNNI", "avx_vnni"), ("AVX-512 BF16", "avx512_bf16"),
                                     ("AMX", "amx_tile")) if flag in flags]
    return f"{model}, {kind}" + (f" (+ {', '.join(extra)})" if extra else "") + f", {os.cpu_count()} cores"


def run_pipeline(out: Path, home: Path, profile: str, sets: list[str], env: dict[str, str]) -> float:
    """``tinyglot run`` in a process of its own; its wall seconds."""
    command = [sys.executable, "-m", "tinyglot", "run", "--profile", profile, "--out", str(out)]
    for item in sets:
        command += ["--set", item]
    started = time.perf_counter()
    done = subprocess.run(command, env={**os.environ, **env, "TINYGLOT_HOME": str(home)})
    if done.returncode:
        raise SystemExit(f"tinyglot run failed (exit {done.returncode}): {' '.join(command)}")
    return time.perf_counter() - started


def stage_rows(out: Path) -> list[dict]:
    rows = []
    for name in STAGES:
        path = out / "stages" / f"{name}.json"
        if path.is_file():
            marker = json.loads(path.read_text(encoding="utf-8"))
            info = marker.get("info") or {}
            rows.append({"stage": name, "seconds": marker["seconds"], "cpu_seconds": info.get("cpu_seconds"),
                         "peak_rss_mb": info.get("peak_rss_mb"), "from_cache": info.get("from_cache")})
    return rows


def step_cpu(metrics: Path) -> dict | None:
    """Median CPU-seconds per step between the training loop's log lines, and the steps logged."""
    if not metrics.is_file():
        return None
    points = []
    for line in metrics.read_text(encoding="utf-8").splitlines():
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if "cpu_s" in record and "step" in record:
            points.append((int(record["step"]), float(record["cpu_s"]), float(record["time"])))
    # (a resumed run starts its process's CPU clock again: the interval across the resume is left out)
    pairs = [(a, b) for a, b in zip(points, points[1:], strict=False) if b[0] > a[0] and b[1] >= a[1]]
    per_step = [(c1 - c0) / (s1 - s0) for (s0, c0, _), (s1, c1, _) in pairs]
    wall = [(t1 - t0) / (s1 - s0) for (s0, _, t0), (s1, _, t1) in pairs]
    if not per_step:
        return None
    return {"steps": points[-1][0], "cpu_s_per_step": statistics.median(per_step),
            "wall_s_per_step": statistics.median(wall)}


def report(label: str, out: Path, home: Path, wall: float | None) -> None:
    print(f"\n{label}: {out}" + (f", {wall:.0f} s wall ({wall / 60:.1f} min)" if wall is not None else ""))
    print(f"{'stage':<10}{'wall s':>10}{'CPU s':>10}{'peak RSS MB':>14}")
    for row in stage_rows(out):
        cpu = "–" if row["cpu_seconds"] is None else f"{row['cpu_seconds']:.0f}"
        rss = "–" if row["peak_rss_mb"] is None else f"{row['peak_rss_mb']:.0f}"
        cached = f"  (copied from {row['from_cache']})" if row["from_cache"] else ""
        print(f"{row['stage']:<10}{row['seconds']:>10.1f}{cpu:>10}{rss:>14}{cached}")
    config = json.loads((out / "teacher.json").read_text(encoding="utf-8")) if (out / "teacher.json").is_file() else {}
    spec = Path(str(config.get("spec", "")))
    teacher = spec if spec.is_absolute() else out / spec
    for what, metrics in (("teacher", teacher / "metrics.jsonl"), ("student", out / "distill" / "metrics.jsonl")):
        got = step_cpu(metrics)
        if got is not None:
            print(f"{what} training: {got['steps']:,} steps, {got['cpu_s_per_step']:.3f} CPU-s a step, "
                  f"{got['wall_s_per_step']:.3f} s a step wall (median between log lines)")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--profile", default="default", help="tinyglot run's profile (default: default)")
    ap.add_argument("--runs", choices=("both", "first", "cached"), default="both",
                    help="first: an empty TINYGLOT_HOME; cached: the home of --home (or of the first run)")
    ap.add_argument("--home", type=Path, default=None, help="TINYGLOT_HOME to use (default: a new temporary folder)")
    ap.add_argument("--out", type=Path, default=None, help="folder for the run folders (default: temporary)")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="passed to tinyglot run")
    ap.add_argument("--isa", choices=sorted(ISA_ENV), default=None,
                    help="limit torch to these kernels (an approximation of such a CPU; see the docstring)")
    ap.add_argument("--read", type=Path, default=None, metavar="RUN",
                    help="only read a run folder made before (with --home, the home it used)")
    args = ap.parse_args()
    env = ISA_ENV.get(args.isa or "", {})
    print(f"CPU: {cpu_line()}" + (f"; torch limited to {args.isa} ({', '.join(env)})" if env else ""))
    if args.read is not None:
        report("run", args.read, args.home or Path.home() / ".cache" / "tinyglot", None)
        return
    with tempfile.TemporaryDirectory(prefix="tinyglot-time-") as tmp:
        home = args.home or Path(tmp) / "home"
        outs = args.out or Path(tmp) / "runs"
        if args.runs in ("both", "first"):
            if home.exists() and any(home.iterdir()):
                raise SystemExit(f"the first run needs an empty TINYGLOT_HOME, and {home} is not")
            wall = run_pipeline(outs / "first", home, args.profile, args.set, env)
            report("first run (empty TINYGLOT_HOME)", outs / "first", home, wall)
        if args.runs in ("both", "cached"):
            wall = run_pipeline(outs / "cached", home, args.profile, args.set, env)
            report("cached run (the same TINYGLOT_HOME, a new run folder)", outs / "cached", home, wall)


if __name__ == "__main__":
    main()
