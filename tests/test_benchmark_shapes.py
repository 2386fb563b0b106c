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


@pytest.mark.slow
def test_shapes_benchmark_times_the_shapes_in_the_call_regimes_beside_use_m(tokenizer, tmp_path):
    tok = tmp_path / "tokenizer.model"
    tokenizer.save(tok)
    out = tmp_path / "shapes.json"
    proc = subprocess.run([sys.executable, str(SCRIPT), "--tokenizer", str(tok), "--shapes", "1x32,2x64:128",
                           "--max-len", "48", "--queries", "3", "--sentences", "40", "--rounds", "1",
                           "--quantize", "dynamic", "--regimes", "--regimes-sentences", "12",
                           "--regimes-test", "lo=embedded",
                           "--json", str(out)],
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    data = json.loads(out.read_text())
    assert data["isa"] == "native" and [r["hidden"] for r in data["rows"]] == [32, 64]
    regimes = data["regimes"]
    assert regimes[-1]["spec"] == "use-m"
    assert len(regimes) == 3 and all("error" not in r and r["isa"] == "native" for r in regimes)
    assert "| 2x64:128 | arrival-32 |" in proc.stdout and "| use-m | bulk |" in proc.stdout
    assert "| lo sent/s |" in proc.stdout and "prose" not in proc.stdout  # --regimes-test's set only
    bad = subprocess.run([sys.executable, str(SCRIPT), "--tokenizer", str(tok), "--shapes", "1x32", "--regimes",
                          "--isa", "sse2", "--queries", "1", "--sentences", "5", "--rounds", "1"],
                         capture_output=True, text=True, timeout=600)
    assert bad.returncode != 0 and "unknown --isa 'sse2'" in bad.stderr
