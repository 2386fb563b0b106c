"""tinyglot.onnx_graph: fused SkipLayerNormalization split into standard ops, and kept apart by onnxruntime."""

from __future__ import annotations

import collections

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")

from onnx import TensorProto, helper, numpy_helper  # noqa: E402

from tinyglot.onnx_graph import SKIP_LAYER_NORM, inference_session, unfuse_file, unfuse_skip_layer_norm  # noqa: E402

H = 16


def _fused_model(bias: bool = True, read_sum: bool = False, opset: int = 17):
    """x, skip -> SkipLayerNormalization -> MatMul -> SkipLayerNormalization (the second without bias)."""
    rng = np.random.default_rng(0)
    inits = [numpy_helper.from_array(rng.normal(size=H).astype(np.float32), n) for n in ("g1", "b1", "g2", "b2")]
    inits.append(numpy_helper.from_array(rng.normal(size=H).astype(np.float32), "bias"))
    inits.append(numpy_helper.from_array(rng.normal(size=(H, H)).astype(np.float32), "w"))
    first_out = ["y1", "", "", "sum1"] if read_sum else ["y1"]
    nodes = [
        helper.make_node(SKIP_LAYER_NORM, ["x", "skip", "g1", "b1"] + (["bias"] if bias else []), first_out,
                         domain="com.microsoft", epsilon=1e-6, name="sln1"),
        helper.make_node("MatMul", ["y1", "w"], ["h"]),
        helper.make_node(SKIP_LAYER_NORM, ["h", "y1", "g2", "b2"], ["y"], domain="com.microsoft", epsilon=1e-5,
                         name="sln2"),
    ]
    outputs = [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["b", "s", H])]
    if read_sum:
        outputs.append(helper.make_tensor_value_info("sum1", TensorProto.FLOAT, ["b", "s", H]))
    inputs = [helper.make_tensor_value_info(n, TensorProto.FLOAT, ["b", "s", H]) for n in ("x", "skip")]
    graph = helper.make_graph(nodes, "sln", inputs, outputs, inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset),
                                                    helper.make_opsetid("com.microsoft", 1)])
    model.ir_version = 8
    return model


def _feeds(batch: int = 3, seq: int = 7) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(1)
    return {n: rng.normal(size=(batch, seq, H)).astype(np.float32) for n in ("x", "skip")}


def _ops(model) -> collections.Counter:
    return collections.Counter(n.op_type for n in model.graph.node)


def _run(model_or_bytes, feeds):
    data = model_or_bytes if isinstance(model_or_bytes, bytes) else model_or_bytes.SerializeToString()
    return ort.InferenceSession(data, providers=["CPUExecutionProvider"]).run(None, feeds)


@pytest.mark.parametrize("bias", [True, False])
def test_unfused_graph_computes_the_same_function(bias):
    fused = _fused_model(bias=bias)
    expected = _run(fused, _feeds())[0]
    model = _fused_model(bias=bias)
    assert unfuse_skip_layer_norm(model) == 2
    ops = _ops(model)
    assert SKIP_LAYER_NORM not in ops and ops["LayerNormalization"] == 2 and ops["Sum"] == 2
    assert ops["Add"] == (1 if bias else 0)  # the bias, added before the residual
    onnx.checker.check_model(model)
    assert np.abs(_run(model, _feeds())[0] - expected).max() < 1e-5


def test_onnxruntime_does_not_fuse_the_rewritten_graph_again(tmp_path):
    """A stock session (default, extended optimisations) keeps Sum + LayerNormalization: with Add in its
    place, onnxruntime's SkipLayerNormFusion would bring back the slow kernel in every user's session."""
    model = _fused_model()
    unfuse_skip_layer_norm(model)
    so = ort.SessionOptions()
    so.optimized_model_filepath = str(tmp_path / "optimized.onnx")
    ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
    optimized = _ops(onnx.load(str(tmp_path / "optimized.onnx")))
    assert SKIP_LAYER_NORM not in optimized and optimized["LayerNormalization"] == 2


def test_a_node_whose_extra_output_is_read_is_kept():
    model = _fused_model(read_sum=True)
    assert unfuse_skip_layer_norm(model) == 1  # only the second node
    assert [n.name for n in model.graph.node if n.op_type == SKIP_LAYER_NORM] == ["sln1"]


def test_graphs_below_opset_17_are_left_alone():
    model = _fused_model(opset=16)
    assert unfuse_skip_layer_norm(model) == 0 and _ops(model)[SKIP_LAYER_NORM] == 2


def test_inference_session_rewrites_in_memory_and_never_touches_the_file(tmp_path):
    path = tmp_path / "model.onnx"
    onnx.save(_fused_model(), str(path))
    before = path.read_bytes()
    expected = _run(before, _feeds())[0]
    so = ort.SessionOptions()
    so.optimized_model_filepath = str(tmp_path / "optimized.onnx")
    session = inference_session(path, so)
    assert np.abs(session.run(None, _feeds())[0] - expected).max() < 1e-5
    assert path.read_bytes() == before
    assert SKIP_LAYER_NORM not in _ops(onnx.load(str(tmp_path / "optimized.onnx")))


def test_unfuse_file_rewrites_once(tmp_path):
    path = tmp_path / "model.onnx"
    onnx.save(_fused_model(), str(path))
    assert unfuse_file(path) == 2
    mtime = path.stat().st_mtime_ns
    assert unfuse_file(path) == 0 and path.stat().st_mtime_ns == mtime
    assert SKIP_LAYER_NORM not in _ops(onnx.load(str(path)))
