"""benchmarks/pipeline_time.py: each stage's wall and CPU time and the CPU-seconds of a training step, read from
a run (the tiny pipeline of conftest)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "pipeline_time.py"


@pytest.mark.slow
def test_it_reads_every_stage_and_the_steps_of_a_run(tiny_run):
    proc = subprocess.run([sys.executable, str(SCRIPT), "--read", str(tiny_run.out)], capture_output=True, text=True,
                          timeout=300, env=tiny_run.env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = proc.stdout
    assert out.startswith("CPU: ") and " cores" in out.splitlines()[0]
    for stage in ("teacher", "distill", "export", "eval", "bench", "report"):
        assert re.search(rf"^{stage}\s+\d+\.\d\s+\d+\s+\d+$", out, re.MULTILINE), (stage, out)
    # the tiny profile trains its teacher in the run folder; both loops log their CPU time every 10 steps
    teacher = re.search(r"teacher training: (\d+) steps, (\d+\.\d+) CPU-s a step", out)
    student = re.search(r"student training: (\d+) steps, (\d+\.\d+) CPU-s a step", out)
    assert teacher and student, out
    assert int(teacher.group(1)) == 30 and int(student.group(1)) == 20
    assert float(teacher.group(2)) > 0 and float(student.group(2)) > 0
