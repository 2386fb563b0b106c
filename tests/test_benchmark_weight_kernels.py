"""benchmarks/weight_kernels.py: a shipped int8 bundle's layers on fp32 and MatMulNBits kernels."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")

import tinyglot  # noqa: E402
from tinyglot.released import released_folder  # noqa: E402

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "weight_kernels.py"
SENTENCES = ["The cat sleeps on the warm windowsill.", "Der Zug nach Berlin hat zwanzig Minuten Verspätung.",
             "¿Dónde está la estación de autobuses?", "今日はとても寒いですね。", "Откройте файл и сохраните его."]


def _script():
    spec = importlib.util.spec_from_file_location("weight_kernels", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _ops(folder: Path) -> Counter:
    return Counter(n.op_type for n in onnx.load(str(folder / "model.onnx")).graph.node)


def test_variants_swap_only_the_int8_matrices_and_keep_the_embeddings(tmp_path):
    bundle = released_folder("tinyglot-mini") / "onnx-text"
    shipped = _ops(bundle)
    assert shipped["MatMulInteger"] > 0
    folders = _script().write_variants(bundle, ["fp32", "nbits8-a4", "nbits4-a0"], tmp_path)
    fp32, n8, n4 = (_ops(folders[v]) for v in ("fp32", "nbits8-a4", "nbits4-a0"))
    assert fp32["MatMulInteger"] == 0 and fp32["MatMul"] == shipped["MatMulInteger"]
    assert fp32["QAttention"] == shipped["QAttention"] and fp32["GatherBlockQuantized"] == 1
    for ops in (n8, n4):
        assert ops["MatMulNBits"] == shipped["MatMulInteger"] and ops["MatMul"] == 0
    def kernels(v: str) -> set[tuple[int, int]]:  # (bits, accuracy_level; 0 when left at its default)
        nodes = [n for n in onnx.load(str(folders[v] / "model.onnx")).graph.node if n.op_type == "MatMulNBits"]
        return {(a["bits"], a.get("accuracy_level", 0))
                for a in ({x.name: x.i for x in n.attribute} for n in nodes)}

    assert kernels("nbits8-a4") == {(8, 4)} and kernels("nbits4-a0") == {(4, 0)}
    ref = tinyglot.load(bundle).encode(SENTENCES)
    floors = {"fp32": 0.999, "nbits8-a4": 0.999, "nbits4-a0": 0.99}
    for v, folder in folders.items():  # sealed: the loader's integrity check accepts the new graph
        emb = tinyglot.load(folder).encode(SENTENCES)
        assert np.min(np.sum(emb * ref, axis=1)) > floors[v], v
    # a graph without int8 matrices is refused by name
    with pytest.raises(SystemExit, match="no MatMulInteger"):
        _script().write_variants(folders["fp32"], ["fp32"], tmp_path / "again")


@pytest.mark.slow
def test_the_benchmark_times_each_variant_beside_the_shipped_bundle_and_use_m(tmp_path):
    out = tmp_path / "kernels.json"
    proc = subprocess.run([sys.executable, str(SCRIPT), "tinyglot-mini", "--variants", "fp32,nbits4-a4",
                           "--test", "lo=embedded", "--max-sentences", "20", "--repeats", "1", "--rounds", "1",
                           "--json", str(out)], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    data = json.loads(out.read_text())
    labels = [data["names"].get(r["spec"], r["spec"]) for r in data["rows"]]
    assert labels == ["shipped int8", "fp32", "nbits4-a4", "use-m"]
    assert all("error" not in r for r in data["rows"])
    assert set(data["cosines"]) == {"fp32", "nbits4-a4"} and min(data["cosines"].values()) > 0.99
    assert "| shipped int8 | arrival-32 |" in proc.stdout and "| nbits4-a4 | " in proc.stdout
    assert not any(Path(r["spec"]).exists() for r in data["rows"][1:3])  # the variants' folders are gone
