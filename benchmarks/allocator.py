"""User and system time, peak RSS and minor page faults of a training run per allocator setting.

Each setting runs the command in a fresh process (mimalloc preloaded as the command line does it, or
glibc with the settings of ``tinyglot.training`` and ``tinyglot.batching`` patched before it starts) and
reads the child's resource usage.  Prints numbers; asserts nothing.

    python benchmarks/allocator.py --steps 200 --settings mimalloc,glibc-128k -- \\
        teacher train --preset ems-small --set train.threads=1
    python benchmarks/allocator.py --steps 300 -- distill --student fast-mini --teacher runs/teacher \\
        --set train.threads=1

A setting is a name below or ``key=value`` pairs joined by ``,``: ``alloc`` (``mimalloc``, the training
commands' allocator, or ``glibc``), ``purge`` (mimalloc's purge delay in ms; default
:data:`tinyglot.allocator.PURGE_DELAY_MS`), ``mmap``/``trim`` (glibc thresholds,
e.g. 128k, 16m), ``every`` (steps between two trims), ``growth`` (resident growth that triggers a trim,
e.g. 256m; ``inf``: never), ``pad`` (``longest`` or ``buckets``: :data:`tinyglot.batching.BUCKET_WIDTHS`),
``arenas`` (M_ARENA_MAX, 0 = glibc's default).  ``--steps``, ``eval_every``, ``save_every`` and an
``--out`` under a temporary folder are added to the command.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

NAMED = {
    # the training commands' allocator (tinyglot/allocator.py)
    "mimalloc": "alloc=mimalloc",
    "mimalloc-10ms": "alloc=mimalloc,purge=10",  # mimalloc's own default purge delay
    # glibc's setting (TINYGLOT_ALLOCATOR=system, in-process training): every block above 128 KiB mapped and
    # unmapped, trim every 50 steps
    "glibc-128k": "alloc=glibc,mmap=128k,trim=128k,every=50,growth=inf,pad=longest",
    "8m": "mmap=8m,trim=8m,every=50,growth=inf,pad=longest",
    "8m-buckets": "mmap=8m,trim=8m,every=50,growth=inf,pad=buckets",
    "16m-growth": "mmap=16m,trim=16m,every=50,growth=256m,pad=longest",
    "16m-growth-buckets": "mmap=16m,trim=16m,every=50,growth=256m,pad=buckets",
}

CHILD = r"""
import json, os, resource, sys, time
spec, trace = json.loads(sys.argv[1]), sys.argv[2]
from tinyglot import allocator, batching, training, trainloop
training.MMAP_THRESHOLD, training.TRIM_THRESHOLD = spec["mmap"], spec["trim"]
training.TRIM_EVERY, training.TRIM_GROWTH = spec["every"], spec["growth"]
batching.PAD_WIDTHS = batching.BUCKET_WIDTHS if spec["pad"] == "buckets" else ()
if spec["arenas"] and training._glibc() is not None and allocator.active() == "glibc":
    training._glibc().mallopt(-8, spec["arenas"])  # M_ARENA_MAX
one_step, rows = trainloop.TrainLoop._one_step, []
def recorded(self, net, micro_loss):
    out = one_step(self, net, micro_loss)
    if not rows:
        rows.append({"first_step_maxrss": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss << 10,
                     "t0": time.time(), "ru0": list(resource.getrusage(resource.RUSAGE_SELF))[:2],
                     "flt0": resource.getrusage(resource.RUSAGE_SELF).ru_minflt})
    rows.append([self.step + 1, training.resident_bytes()])
    return out
trainloop.TrainLoop._one_step = recorded
from tinyglot.app.cli import main
try:
    main(sys.argv[3:])
finally:
    ru = resource.getrusage(resource.RUSAGE_SELF)
    json.dump({"allocator": allocator.active(), "rows": rows, "trims": None,
               "end": [ru.ru_utime, ru.ru_stime, ru.ru_minflt, time.time()]},
              open(trace, "w"))
"""


def parse_size(text: str) -> int:
    text = text.strip().lower()
    if text == "inf":
        return 1 << 62
    scale = {"k": 1 << 10, "m": 1 << 20, "g": 1 << 30}.get(text[-1:], 1)
    return int(float(text.rstrip("kmg")) * scale)


def parse_setting(text: str) -> dict:
    from tinyglot import allocator, batching, training

    spec = {"alloc": "mimalloc", "purge": allocator.PURGE_DELAY_MS,
            "mmap": training.MMAP_THRESHOLD, "trim": training.TRIM_THRESHOLD, "every": training.TRIM_EVERY,
            "growth": training.TRIM_GROWTH, "pad": "buckets" if batching.PAD_WIDTHS else "longest", "arenas": 0}
    if text == "default":
        return spec
    for item in NAMED.get(text, text).split(","):
        key, value = item.split("=")
        if key in ("mmap", "trim", "growth"):
            spec[key] = parse_size(value)
        elif key in ("every", "arenas", "purge"):
            spec[key] = int(value)
        elif key in ("pad", "alloc"):
            spec[key] = value
        else:
            raise SystemExit(f"unknown key {key!r} in {text!r}")
    return spec


def run(setting: str, command: list[str], steps: int, folder: Path) -> dict:
    spec = parse_setting(setting)
    trace = folder / "trace.json"
    args = [*command, "--out", str(folder / "run"), "--set", f"train.max_steps={steps}",
            "--set", "train.eval_every=1000000", "--set", "train.save_every=1000000"]
    from tinyglot import allocator

    env = {**os.environ, "TINYGLOT_NO_PROGRESS": "1", "USE_TF": "0", "TINYGLOT_ALLOCATOR": spec["alloc"]}
    env.pop("LD_PRELOAD", None)
    if spec["alloc"] == "mimalloc":
        library = allocator.mimalloc_library()
        if library is None:
            raise SystemExit("alloc=mimalloc: the cmeel-mimalloc wheel is not installed (pip install -e .)")
        env = {**allocator.preload_environment(env, library), "MIMALLOC_PURGE_DELAY": str(spec["purge"])}
    start = time.time()
    with open(folder / "stderr.txt", "w") as err:
        proc = subprocess.Popen([sys.executable, "-c", CHILD, json.dumps(spec), str(trace), *args], env=env,
                                stdout=subprocess.DEVNULL, stderr=err)
        _, status, ru = os.wait4(proc.pid, 0)
    wall = time.time() - start
    if status != 0:
        raise SystemExit(f"{setting}: exit status {status}; see {folder / 'stderr.txt'}")
    data = json.loads(trace.read_text())
    first, steps_rss = data["rows"][0], data["rows"][1:]
    utime, stime, minflt, t_end = data["end"]
    loop_user, loop_sys = utime - first["ru0"][0], stime - first["ru0"][1]
    rss = [r for _, r in steps_rss]
    n = len(rss)
    return {"setting": setting, "allocator": data["allocator"], "wall_s": round(wall, 1),
            "user_s": round(ru.ru_utime, 1),
            "sys_s": round(ru.ru_stime, 1), "sys_pct": round(100 * ru.ru_stime / ru.ru_utime, 1),
            "minflt_M": round(ru.ru_minflt / 1e6, 2), "peak_rss_GB": round(ru.ru_maxrss * 1024 / 1e9, 2),
            "peak_before_step1_GB": round(first["first_step_maxrss"] / 1e9, 2),
            "loop_user_s": round(loop_user, 1), "loop_sys_s": round(loop_sys, 1),
            "loop_sys_pct": round(100 * loop_sys / max(loop_user, 1e-9), 1),
            "loop_minflt_M": round((minflt - first["flt0"]) / 1e6, 2),
            "loop_peak_rss_GB": round(max(rss) / 1e9, 2),
            "rss_quarters_GB": [round(max(rss[i * n // 4:(i + 1) * n // 4] or [0]) / 1e9, 2) for i in range(4)]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--settings", default="mimalloc,glibc-128k",
                        help="names split by ',' or settings split by ';' (see the module docstring)")
    parser.add_argument("--json", help="also write the rows here")
    parser.add_argument("command", nargs=argparse.REMAINDER, help="-- then the tinyglot command")
    args = parser.parse_args()
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        command = ["teacher", "train", "--preset", "ems-small", "--set", "train.threads=1"]
    settings = [s for s in (args.settings.split(";") if ";" in args.settings or "=" in args.settings
                            else args.settings.split(",")) if s]
    rows = []
    for setting in settings:
        with tempfile.TemporaryDirectory(prefix="tinyglot-alloc-") as tmp:
            row = run(setting, command, args.steps, Path(tmp))
        rows.append(row)
        print(json.dumps(row), flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))
    keys = ["setting", "allocator", "user_s", "sys_s", "sys_pct", "minflt_M", "peak_rss_GB", "peak_before_step1_GB",
            "loop_sys_pct", "loop_peak_rss_GB", "rss_quarters_GB"]
    print("\n| " + " | ".join(keys) + " |\n|" + "---|" * len(keys))
    for row in rows:
        print("| " + " | ".join(str(row[k]) for k in keys) + " |")


if __name__ == "__main__":
    main()
