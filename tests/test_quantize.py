"""export/quantize.py: optimum's presets and optimisation configs applied to a real exported student graph."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("onnxruntime")
pytest.importorskip("optimum.onnxruntime")

from optimum.onnxruntime import AutoQuantizationConfig  # noqa: E402

from tinyglot.errors import TinyglotError  # noqa: E402
from tinyglot.export.quantize import (  # noqa: E402
    QuantizationConfig,
    graph_stats,
    optimization_config,
    optimize_graph,
    quantize_graph,
    verify_quantized,
)

COMPARED = ("is_static", "format", "mode", "activations_dtype", "activations_symmetric", "weights_dtype",
            "weights_symmetric", "per_channel", "reduce_range", "operators_to_quantize")


@pytest.mark.parametrize(("preset", "auto"), [
    ("avx2", AutoQuantizationConfig.avx2(is_static=False)),
    ("avx512-vnni", AutoQuantizationConfig.avx512_vnni(is_static=False)),
    ("arm64", AutoQuantizationConfig.arm64(is_static=False)),
    ("dynamic", AutoQuantizationConfig.avx512(is_static=False, per_channel=False, reduce_range=True)),
    ("dynamic-per-channel", AutoQuantizationConfig.avx512(is_static=False, per_channel=True, reduce_range=True)),
])
def test_presets_are_optimums_targets(preset, auto):
    ours = QuantizationConfig.from_name(preset)
    assert ours.mode == "dynamic" and ours.name == preset
    mine = ours.to_optimum()
    for key in COMPARED:
        assert getattr(mine, key) == getattr(auto, key), key


def test_static_preset_is_symmetric_s8_qdq():
    q = QuantizationConfig.static(["a b"], per_channel=False).to_optimum()
    assert q.is_static and q.format.name == "QDQ" and not q.per_channel
    assert q.activations_dtype.name == q.weights_dtype.name == "QInt8" and q.activations_symmetric
    with pytest.raises(TinyglotError, match="no optimum configuration"):
        QuantizationConfig.fp16().to_optimum()


def test_optimization_configs():
    fused = optimization_config("transformers")
    assert fused.enable_transformers_specific_optimizations and not fused.disable_embed_layer_norm_fusion
    assert not fused.enable_gelu_approximation and not fused.fp16  # exact graph: parity stays at fp32 level
    assert not optimization_config("ort").enable_transformers_specific_optimizations
    with pytest.raises(TinyglotError, match="unknown optimisation"):
        optimization_config("O9")


@pytest.fixture(scope="module")
def raw_graph(student_dir, tmp_path_factory):
    from tinyglot.export.bundle import load_source
    from tinyglot.export.onnx import EmbeddingModule, export_module

    model, tok, cfg = load_source(student_dir)
    path = tmp_path_factory.mktemp("graphs") / "raw.onnx"
    export_module(EmbeddingModule(model), path, tok.vocab_size, cfg["max_len"])
    return path


def _run(path, ids):
    import onnxruntime as ort

    sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    return sess.run(None, {"input_ids": ids, "attention_mask": np.ones_like(ids)})[0]


def test_optimize_and_quantize_a_student_graph(raw_graph, tmp_path):
    ids = np.random.default_rng(0).integers(5, 1000, (3, 11)).astype(np.int64)
    want = _run(raw_graph, ids)
    fused = tmp_path / "fused.onnx"
    assert optimize_graph(raw_graph, fused, "transformers", 2, 32) == "transformers"
    ops = graph_stats(fused)["ops"]
    assert ops.get("Attention", 0) == 2 and ops.get("EmbedLayerNormalization", 0) == 1
    assert ops.get("SkipLayerNormalization", 0) > 0 and "Softmax" not in ops
    assert np.abs(_run(fused, ids) - want).max() < 1e-5
    plain = tmp_path / "ort.onnx"
    assert optimize_graph(raw_graph, plain, "ort") == "ort"
    assert "Attention" not in graph_stats(plain)["ops"] and np.abs(_run(plain, ids) - want).max() < 1e-5
    with pytest.raises(TinyglotError, match="unknown optimisation"):
        optimize_graph(raw_graph, tmp_path / "x.onnx", "fast")

    q = tmp_path / "q.onnx"
    quantize_graph(fused, q, QuantizationConfig.avx2())
    stats = verify_quantized(q, fused.stat().st_size, "dynamic")
    assert stats["ops"].get("MatMulInteger", 0) + stats["ops"].get("DynamicQuantizeMatMul", 0) > 0
    assert stats["weights"].get("uint8", 0) > stats["weights"].get("int8", 0)  # avx2: unsigned weights
    got = _run(q, ids)
    cos = (got * want).sum(1) / np.linalg.norm(got, axis=1) / np.linalg.norm(want, axis=1)
    assert cos.min() > 0.98
    with pytest.raises(TinyglotError, match="not really quantized"):
        verify_quantized(fused, fused.stat().st_size, "dynamic")


def test_int4_token_table_keeps_the_other_tables_and_the_opset(raw_graph, tmp_path):
    import onnx

    ids = np.random.default_rng(1).integers(5, 1000, (3, 11)).astype(np.int64)
    want = _run(raw_graph, ids)
    unfused = tmp_path / "unfused.onnx"
    assert optimize_graph(raw_graph, unfused, "transformers", 2, 32, embed_layer_norm=False) == "transformers"
    ops = graph_stats(unfused)["ops"]
    assert ops.get("Attention", 0) == 2 and "EmbedLayerNormalization" not in ops and ops["Gather"] >= 3

    qcfg = QuantizationConfig.from_name("dynamic-int4-embeddings")
    assert (qcfg.mode, qcfg.embedding_bits, qcfg.label) == ("dynamic", 4, "dynamic-int4-embeddings")
    assert qcfg.to_dict()["embedding_block_size"] == 128 and "embedding_block_size" not in \
        QuantizationConfig.dynamic().to_dict()
    q4, q8 = tmp_path / "q4.onnx", tmp_path / "q8.onnx"
    users = tmp_path / "q4.int4-table.onnx"  # a file the quantizer did not write: never touched
    users.write_bytes(b"mine")
    before = {p.name for p in tmp_path.iterdir()}
    quantize_graph(unfused, q4, qcfg)
    quantize_graph(unfused, q8, QuantizationConfig.dynamic())
    assert {p.name for p in tmp_path.iterdir()} == before | {"q4.onnx", "q8.onnx"}  # no intermediate left
    assert users.read_bytes() == b"mine"
    model = onnx.load(str(q4))
    table = [n for n in model.graph.node if n.op_type == "GatherBlockQuantized"]
    assert len(table) == 1 and "word_embeddings" in table[0].input[0]  # only the token table
    attrs = {a.name: a.i for a in table[0].attribute}
    assert attrs["block_size"] == 32 and attrs["quantize_axis"] == 1  # clipped to the row width (hidden 32)
    stats = verify_quantized(q4, unfused.stat().st_size, "dynamic")
    vocab = next(int(i.dims[0]) for i in model.graph.initializer if i.name == table[0].input[0])
    assert stats["weights"]["int4"] == vocab * 32 and stats["int8_ops"] > 1
    assert {o.domain: o.version for o in model.opset_import}[""] == \
        {o.domain: o.version for o in onnx.load(str(unfused)).opset_import}[""]
    assert q4.stat().st_size < q8.stat().st_size
    got, ref = _run(q4, ids), _run(q8, ids)
    for out in (got, ref):
        cos = (out * want).sum(1) / np.linalg.norm(out, axis=1) / np.linalg.norm(want, axis=1)
        assert cos.min() > 0.98

    fused = tmp_path / "fused.onnx"
    optimize_graph(raw_graph, fused, "transformers", 2, 32)
    with pytest.raises(TinyglotError, match="0 Gathers read a word_embeddings table"):
        quantize_graph(fused, tmp_path / "no.onnx", qcfg)
    bad = QuantizationConfig.static(["a b"])
    bad.embedding_bits = 4
    with pytest.raises(TinyglotError, match="4-bit embeddings go with dynamic"):
        bad.validate()
