"""benchmarks/gpu_throughput.py: says so and exits 0 without a GPU; measures on --device cpu."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "gpu_throughput.py"


@pytest.mark.skipif(torch.cuda.is_available(), reason="a CUDA GPU is visible: the benchmark would measure it")
def test_without_a_gpu_it_says_so_and_exits_0():
    proc = subprocess.run([sys.executable, str(SCRIPT)], capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "no CUDA GPU is visible on this machine, nothing measured" in proc.stdout


def test_cpu_measurement_of_tiny_presets(tmp_path):
    out = tmp_path / "gpu.json"
    proc = subprocess.run([sys.executable, str(SCRIPT), "--device", "cpu", "--threads", "1", "--teachers", "ems-tiny",
                           "--students", "lealla-tiny", "--batches", "4,8", "--steps", "1", "--warmup", "0",
                           "--max-len", "12", "--student-vocab", "500", "--teacher-dim", "64", "--json", str(out)],
                          capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = json.loads(out.read_text())["results"]
    assert [(r["kind"], r["preset"], r["batch"]) for r in rows] == [
        ("teacher", "ems-tiny", 4), ("teacher-pass", "ems-tiny", 4), ("teacher", "ems-tiny", 8),
        ("teacher-pass", "ems-tiny", 8), ("student", "lealla-tiny", 4), ("student", "lealla-tiny", 8)]
    assert all(r["pairs_per_s"] > 0 and r["peak_gb"] is None for r in rows)
    assert "teacher-pass" in proc.stdout and "sentences/s" in proc.stdout
