"""benchmarks/shapes.py: int8 ONNX speed and size of student shapes, measured round-robin."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("onnxruntime")

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "shapes.py"


@pytest.mark.slow
def test_shapes_benchmark_measures_each_shape_and_a_trained_student(tokenizer, student_dir, tmp_path):
    tok = tmp_path / "tokenizer.model"
    tokenizer.save(tok)
    out = tmp_path / "shapes.json"
    proc = subprocess.run([sys.executable, str(SCRIPT), "--tokenizer", str(tok), "--shapes", "1x32,2x64/32",
                           "--trained", f"tiny={student_dir}", "--max-len", "48", "--queries", "3",
                           "--sentences", "60", "--rounds", "2", "--quantize", "dynamic", "--json", str(out),
                           "--plot", str(tmp_path / "shapes.png")],
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = {r["name"]: r for r in json.loads(out.read_text())["rows"]}
    assert set(rows) == {"1x32", "2x64/32", "tiny"}
    assert rows["2x64/32"]["dim"] == 32 and rows["2x64/32"]["layers"] == 2 and rows["2x64/32"]["hidden"] == 64
    for r in rows.values():
        assert len(r["rounds"]) == 2 and r["sentences_per_s"] == max(x["sentences_per_s"] for x in r["rounds"])
        assert r["p50_ms_16"] > 0 and r["bundle_mb"] > 0
    assert "p1" in rows["tiny"] and "p1" not in rows["1x32"]
    assert "| 2x64/32 | 32 |" in proc.stdout and (tmp_path / "shapes.png").stat().st_size > 0
