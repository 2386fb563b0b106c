"""benchmarks/mediapipe_calls.py: a MediaPipe file's calls through MediaPipe and through LiteRT."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("mediapipe")
pytest.importorskip("ai_edge_litert")

from tinyglot.export.tflite_mediapipe import HEADS, SIGNATURE, MediaPipeTextEncoder  # noqa: E402
from tinyglot.released import released_folder  # noqa: E402

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "mediapipe_calls.py"
MODEL = released_folder("tinyglot-mini") / "tflite-mediapipe" / "model.tflite"
SENTENCES = ["The cat sleeps on the warm windowsill.", "Der Zug nach Berlin hat zwanzig Minuten Verspätung.",
             "今日はとても寒いですね。", "a"]


def _script():
    spec = importlib.util.spec_from_file_location("mediapipe_calls", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_litert_on_the_ids_mediapipe_fed_gives_mediapipes_embedding():
    from ai_edge_litert.interpreter import Interpreter

    enc = MediaPipeTextEncoder(MODEL, max_len=128)
    runner = Interpreter(model_path=str(MODEL), num_threads=1).get_signature_runner(SIGNATURE)
    for text in SENTENCES:
        emb, ids = enc.run_text(text)
        out = runner(**_script().fed_inputs(enc, text))  # [CLS] pieces [SEP]: a wrong feed moves every position
        assert ids and np.asarray(out[HEADS[0]])[0] @ emb > 0.9999, text
    enc.close()


def test_the_benchmark_prints_both_runtimes_per_set():
    proc = subprocess.run([sys.executable, str(SCRIPT), "tinyglot-mini", "--test", "lo=embedded",
                           "--max-sentences", "10", "--repeats", "1"], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    row = next(line for line in proc.stdout.splitlines() if line.startswith("| lo |"))
    cells = [float(c.replace(",", "")) for c in row.strip("|").split("|")[1:]]
    assert len(cells) == 6 and all(c > 0 for c in cells), row
    assert "XNNPACK" not in proc.stdout + proc.stderr  # LiteRT's delegate line is kept off the terminal
    bad = subprocess.run([sys.executable, str(SCRIPT), "tinyglot-base"], capture_output=True, text=True, timeout=120)
    assert bad.returncode != 0 and "no MediaPipe file" in bad.stderr
