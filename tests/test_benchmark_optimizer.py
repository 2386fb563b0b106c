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
