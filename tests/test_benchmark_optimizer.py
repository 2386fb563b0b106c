"""benchmarks/optimizer_step.py: a training step's time per vocabulary size and optimizer."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "optimizer_step.py"


def test_optimizer_benchmark_times_each_mode_at_each_vocabulary():
    proc = subprocess.run([sys.executable, str(SCRIPT), "--student", "fast-tiny", "--vocab-sizes", "500,2000",
                           "--batch", "4", "--tokens", "6", "--steps", "2", "--rounds", "1", "--threads", "1"],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    header = next(line for line in proc.stdout.splitlines() if line.strip().startswith("vocabulary"))
    assert [m in header for m in ("foreach", "fused", "sparse")] == [True] * 3
    for vocab in ("500", "2000"):
        row = next(line for line in proc.stdout.splitlines() if line.strip().startswith(vocab + " |"))
        times = [float(x) for x in re.findall(r"(\d+\.\d) /", row)]
        assert len(times) == 3 and all(t > 0 for t in times)


def test_optimizer_benchmark_times_each_dropout_in_turn():
    """``--modes fused --dropouts 0.1,0``: one column per dropout rate (the e5 profile's student trains without)."""
    proc = subprocess.run([sys.executable, str(SCRIPT), "--student", "fast-tiny", "--vocab-sizes", "500",
                           "--batch", "4", "--tokens", "6", "--steps", "2", "--rounds", "1", "--threads", "1",
                           "--modes", "fused", "--dropouts", "0.1,0"], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    header = next(line for line in proc.stdout.splitlines() if line.strip().startswith("vocabulary"))
    assert [c.strip() for c in header.split("(")[0].split("|")[1:]] == ["fused d0.1", "fused d0"]
    row = next(line for line in proc.stdout.splitlines() if line.strip().startswith("500 |"))
    assert len(re.findall(r"(\d+\.\d) /", row)) == 2


def test_optimizer_benchmark_refuses_bad_arguments_without_a_traceback():
    for args, message in ((["--vocab-sizes", "48k"], "comma-separated integers"),
                          (["--modes", "adam"], "expected modes of foreach, fused, sparse"),
                          (["--dropouts", "0.1,2"], "expected dropout rates from 0 to 0.9"),
                          (["--vocab-sizes", "3"], "above 5"),
                          (["--steps", "0"], "expected a whole number from 1"),
                          (["--student", "nope"], "unknown student preset")):
        proc = subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True, timeout=120)
        assert proc.returncode == 2 and message in proc.stderr and "Traceback" not in proc.stderr, proc.stderr
