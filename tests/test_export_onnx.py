"""ONNX bundles: export, optimisation, quantization, loading back, parity gates, CLI."""

from __future__ import annotations

import argparse
import json

import numpy as np
import pytest

pytest.importorskip("onnxruntime")
pytest.importorskip("onnx")

import torch  # noqa: E402

import tinyglot  # noqa: E402
from tinyglot.errors import TinyglotError  # noqa: E402
from tinyglot.export.onnx import (  # noqa: E402
    OnnxEncoder,
    QuantizationConfig,
    export_module,
    export_onnx,
    graph_stats,
    verify_quantized,
)
from tinyglot.export.parity import Gates, check_parity  # noqa: E402
from tinyglot.models import TorchEncoder  # noqa: E402


N = 25  # test pairs per language for the parity checks (4 languages -> 200 sentences)


@pytest.fixture(scope="module")
def fp32_bundle(student_dir, tmp_path_factory):
    out = tmp_path_factory.mktemp("bundles") / "fp32"
    return export_onnx(student_dir, out, "none", max_sentences=N)


@pytest.fixture(scope="module")
def int8_bundle(student_dir, tmp_path_factory):
    out = tmp_path_factory.mktemp("bundles") / "int8"
    return export_onnx(student_dir, out, "dynamic", max_sentences=N)


def _torch_encoder(path):
    from tinyglot.export.bundle import load_source

    model, tok, cfg = load_source(path)
    return TorchEncoder(tok, model.embed, cfg["max_len"])


SENTENCES = ["Datei öffnen", "open the file", "Wählen Sie Format - Zeichen, um die Schriftart zu ändern.",
             "ファイルを開く", "Откройте диалоговое окно и выберите нужный параметр из списка."]


def test_fp32_bundle_records_the_graph_and_opens_as_onnx(fp32_bundle):
    """The bundle contract (layout, common config keys, parity, load) is tests/test_export_bundles.py's."""
    cfg = fp32_bundle.config
    assert cfg["onnx"]["opset"] == 17 and cfg["onnx"]["inputs"] == ["input_ids", "attention_mask"]
    assert cfg["onnx"]["output"] == "sentence_embedding" and cfg["onnx"]["int8_ops"] == 0
    assert fp32_bundle.sizes["model.onnx"] == (fp32_bundle.out / "model.onnx").stat().st_size
    assert isinstance(tinyglot.load(fp32_bundle.out), OnnxEncoder)


def test_graph_has_dynamic_axes_and_named_io(fp32_bundle):
    enc = tinyglot.load(fp32_bundle.out)
    sess = enc.session
    assert [i.name for i in sess.get_inputs()] == ["input_ids", "attention_mask"]
    assert [o.name for o in sess.get_outputs()] == ["sentence_embedding"]
    for batch, length in ((1, 3), (5, 11), (2, 48)):
        ids = np.random.default_rng(batch).integers(2, 1000, (batch, length)).astype(np.int64)
        out = enc.run_batch(ids, np.ones_like(ids))
        assert out.shape == (batch, 32)
        assert np.allclose(np.linalg.norm(out, axis=1), 1, atol=1e-5)  # normalised inside the graph


def test_padding_and_batch_invariance(fp32_bundle):
    enc = tinyglot.load(fp32_bundle.out)
    long = [s * 3 for s in SENTENCES[2:]]
    together = enc.encode(long + ["open the file"], batch_size=16)[-1]
    alone = enc.encode(["open the file"])[0]
    assert np.abs(together - alone).max() < 1e-5
    one_by_one = np.stack([enc.encode([s])[0] for s in SENTENCES])
    assert np.abs(one_by_one - enc.encode(SENTENCES, batch_size=64)).max() < 1e-5


def test_dynamic_int8_is_smaller_quantized_and_passes_parity(int8_bundle, fp32_bundle):
    assert int8_bundle.parity.passed, int8_bundle.parity.failures
    assert int8_bundle.parity.mean_cosine >= 0.99
    assert int8_bundle.sizes["model.onnx"] < 0.5 * fp32_bundle.sizes["model.onnx"]
    stats = graph_stats(int8_bundle.out / "model.onnx")
    assert stats["ops"].get("MatMulInteger", 0) + stats["ops"].get("QAttention", 0) > 0
    assert graph_stats(fp32_bundle.out / "model.onnx")["int8_ops"] == 0
    for bundle in (int8_bundle, fp32_bundle):  # fused for attention, but not the slower SkipLayerNormalization
        ops = graph_stats(bundle.out / "model.onnx")["ops"]
        assert "SkipLayerNormalization" not in ops and ops["LayerNormalization"] >= 2 and ops["Sum"] >= 2, ops
    enc = tinyglot.load(int8_bundle.out)
    emb = enc.encode(SENTENCES)
    assert np.allclose(np.linalg.norm(emb, axis=1), 1, atol=1e-3)
    cfg = json.loads((int8_bundle.out / "config.json").read_text())
    assert cfg["quantization"]["mode"] == "dynamic" and cfg["quantization"]["weight_type"] == "qint8"
    assert cfg["quantization"]["reduce_range"]


def _int8_weights(bundle_dir) -> list[np.ndarray]:
    import onnx
    from onnx import numpy_helper

    model = onnx.load(str(bundle_dir / "model.onnx"))
    return [numpy_helper.to_array(t) for t in model.graph.initializer if t.data_type == onnx.TensorProto.INT8]


def _peak(weights: list[np.ndarray]) -> int:
    return max(int(np.abs(w.astype(np.int16)).max()) for w in weights)


def test_the_portable_int8_bundle_cannot_saturate_avx2_kernels(int8_bundle):
    # onnxruntime's u8s8 kernels on x86 without VNNI add two u8 x s8 products in int16: 255 x 64 x 2 fits,
    # 255 x 127 x 2 does not.  The dynamic preset's weights must stay within 7 bits on every machine, so a
    # bundle made on a VNNI machine gives the same embeddings on an AVX2 one.
    weights = _int8_weights(int8_bundle.out)
    assert sum(w.size for w in weights) > 10_000
    assert _peak(weights) <= 64


def _weight_scale_shapes(bundle_dir) -> list[tuple[tuple[int, ...], tuple[int, ...]]]:
    """(scale shape, output width) of each int8 matrix that a MatMulInteger or QAttention multiplies by."""
    import onnx

    model = onnx.load(str(bundle_dir / "model.onnx"))
    init = {t.name: t for t in model.graph.initializer}
    matrices = [n.input[1] for n in model.graph.node if n.op_type in ("MatMulInteger", "QAttention")]
    return [(tuple(init[m.removesuffix("_quantized") + "_scale"].dims), (init[m].dims[-1],)) for m in matrices]


def test_the_portable_per_channel_preset_scales_each_output_channel_in_7_bits(student_dir, tmp_path, int8_bundle):
    # what a student started as e5-small's layers needs (per tensor its parity fell to a mean cosine of
    # 0.90), as portable as dynamic: 7-bit weights
    result = export_onnx(student_dir, tmp_path / "pc", "dynamic-per-channel", max_sentences=N)
    assert result.parity.passed, result.parity.failures
    assert json.loads((result.out / "config.json").read_text())["quantization"]["name"] == "dynamic-per-channel"
    shapes = _weight_scale_shapes(result.out)
    assert len(shapes) >= 4 and all(scale == width for scale, width in shapes)
    assert all(scale == () for scale, _ in _weight_scale_shapes(int8_bundle.out))  # dynamic: one per tensor
    assert _peak(_int8_weights(result.out)) <= 64


@pytest.mark.parametrize("preset", ["static", "fp16", "avx2", "arm64", "avx512-vnni"])
def test_other_quantization_modes(student_dir, tmp_path, preset, fp32_bundle):
    result = export_onnx(student_dir, tmp_path / preset, preset, max_sentences=N)
    assert result.parity.passed, result.parity.failures
    assert result.sizes["model.onnx"] < 0.7 * fp32_bundle.sizes["model.onnx"]
    weights = graph_stats(result.out / "model.onnx")["weights"]
    assert weights.get("float16" if preset == "fp16" else "int8", 0) + weights.get("uint8", 0) > 0
    assert tinyglot.load(result.out).encode(["hallo"]).shape == (1, 32)


def test_static_uses_given_calibration_sentences(student_dir, tmp_path, small_pairs):
    q = QuantizationConfig.static([p.x for p in small_pairs[:40]])
    result = export_onnx(student_dir, tmp_path / "s", q, max_sentences=10)
    assert result.config["quantization"]["calibration_sentences"] == 40


def test_quantization_presets():
    assert QuantizationConfig.avx2().weight_type == "quint8" and QuantizationConfig.avx2().mode == "dynamic"
    assert QuantizationConfig.avx512_vnni().per_channel and not QuantizationConfig.avx512_vnni().reduce_range
    assert QuantizationConfig.arm64().weight_type == "qint8"
    assert QuantizationConfig.static(["a b"]).calibration_sentences == ["a b"]
    assert QuantizationConfig.fp16().mode == "fp16"
    assert QuantizationConfig.from_name("avx512-vnni").name == "avx512-vnni"
    with pytest.raises(TinyglotError, match="unknown quantization"):
        QuantizationConfig.from_name("int4")
    with pytest.raises(TinyglotError, match="mode"):
        QuantizationConfig(mode="int4").validate()


def test_fp32_file_claimed_as_int8_fails_loudly(fp32_bundle):
    path = fp32_bundle.out / "model.onnx"
    with pytest.raises(TinyglotError, match="not really quantized"):
        verify_quantized(path, path.stat().st_size, "dynamic")


class _FirstToken(torch.nn.Module):
    """A broken export: first token's hidden state instead of mean pooling."""

    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, input_ids, attention_mask):
        hidden = self.model.encoder(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state
        return torch.nn.functional.normalize(hidden[:, 0], dim=-1)


class _NoNorm(torch.nn.Module):
    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, input_ids, attention_mask):
        return self.model.embed(input_ids, attention_mask)


def test_broken_export_is_caught_by_the_parity_gate(student_dir, tmp_path):
    out = tmp_path / "broken"
    with pytest.raises(TinyglotError, match="parity check failed.*mean cosine") as failed:
        export_onnx(student_dir, out, "none", max_sentences=10, module_factory=_FirstToken)
    assert (out / "parity.json").exists() and not (out / "config.json").exists()
    assert not json.loads((out / "parity.json").read_text())["passed"]
    assert f"inspect {out / 'parity.json'};" in str(failed.value)  # where it is kept, not its staging folder
    # without normalisation in the graph: caught too; --no-parity-gate keeps the bundle
    result = export_onnx(student_dir, tmp_path / "nonorm", "none", max_sentences=10, module_factory=_NoNorm,
                         parity_gate=False)
    assert not result.parity.passed and any("normalised" in f for f in result.parity.failures)
    assert (tmp_path / "nonorm" / "config.json").exists()
    # a failure over a finished bundle replaces nothing, and says so
    before = (tmp_path / "nonorm" / "config.json").read_bytes()
    with pytest.raises(TinyglotError, match=f"{tmp_path / 'nonorm'} keeps its earlier bundle"):
        export_onnx(student_dir, tmp_path / "nonorm", "none", max_sentences=10, module_factory=_FirstToken)
    assert (tmp_path / "nonorm" / "config.json").read_bytes() == before


def test_check_parity_directly(student_dir, tmp_path, tokenizer):
    from tinyglot.data.embedded import load_testset
    from tinyglot.export.bundle import load_source

    model, tok, cfg = load_source(student_dir)
    path = export_module(_FirstToken(model), tmp_path / "ft.onnx", tok.vocab_size, cfg["max_len"])
    broken = OnnxEncoder(path, tok, cfg["max_len"])
    ref = _torch_encoder(student_dir)
    report = check_parity(ref, broken, load_testset(), Gates(), languages=["de", "ru"], max_sentences=10)
    assert not report.passed and [r.lang for r in report.rows] == ["de", "ru"]
    with pytest.raises(TinyglotError, match="mean cosine"):
        report.raise_if_failed()
    same = check_parity(ref, ref, load_testset(), languages=["de"], max_sentences=10)
    assert same.passed and same.to_dict()["n_sentences"] == 20
    from rich.console import Console

    with open(tmp_path / "t.txt", "w") as fh:
        Console(file=fh).print(report.to_table())  # renders
    assert "de" in (tmp_path / "t.txt").read_text()


@pytest.mark.slow
def test_export_of_the_ems_teacher(tiny_teacher_dir, tmp_path):
    result = export_onnx(tiny_teacher_dir, tmp_path / "teacher", "dynamic", max_sentences=N)
    assert result.parity.passed, result.parity.failures
    assert result.config["source_kind"] == "ems-teacher" and result.config["dim"] == 64
    assert tinyglot.load(tmp_path / "teacher").encode(["Hallo"]).shape == (1, 64)


def _cli(argv):
    from tinyglot.app.cli import run
    from tinyglot.app.commands.export import register

    def factory():
        parser = argparse.ArgumentParser(prog="tinyglot")
        register(parser.add_subparsers(dest="command", required=True))
        return parser

    return run(argv, factory)


def test_cli_export_and_bad_inputs(student_dir, tmp_path, capsys, fp32_bundle):
    out = tmp_path / "cli"
    assert _cli(["export", "--model", str(student_dir), "--quantize", "dynamic", "--out", str(out),
                 "--max-sentences", "10"]) == 0
    printed = capsys.readouterr().out
    assert "Parity" in printed and "model.onnx" in printed and "passed" in printed
    assert tinyglot.load(out).encode(["x"]).shape == (1, 32)
    # not a student: a folder without config.json, a bundle, a foreign config
    assert _cli(["export", "--model", str(tmp_path / "nothing"), "--out", str(tmp_path / "o1")]) == 2
    assert "model not found" in capsys.readouterr().err
    assert _cli(["export", "--model", str(fp32_bundle.out), "--out", str(tmp_path / "o2")]) == 2
    assert "already an exported bundle" in capsys.readouterr().err
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "config.json").write_text('{"kind": "something"}')
    assert _cli(["export", "--model", str(tmp_path / "other"), "--out", str(tmp_path / "o3")]) == 2
    assert "not a model tinyglot can export" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        _cli(["export", "--model", str(student_dir), "--format", "coreml"])


def test_student_with_an_output_projection_exports_with_it(tokenizer, tmp_path):
    """A fast-* student (wide layers, then a linear map to a smaller embedding) keeps its projection
    inside the ONNX graph: same dimension and embeddings as PyTorch, fp32 and int8."""
    from tinyglot.distill.config import StudentConfig
    from tinyglot.distill.student import Student, save_student

    torch.manual_seed(1)
    cfg = StudentConfig(hidden_size=48, num_layers=1, num_heads=2, ffn_size=96, max_len=48, dropout=0.0,
                        output_dim=24, vocab_size=tokenizer.vocab_size)
    src = save_student(Student(cfg), tokenizer, tmp_path / "student")
    reference = _torch_encoder(src).encode(SENTENCES)
    assert reference.shape == (5, 24)
    for quant, tol in (("none", 1e-4), ("dynamic", 0.05)):
        result = export_onnx(src, tmp_path / quant, quant, max_sentences=N)
        assert result.config["dim"] == 24
        got = tinyglot.load(tmp_path / quant).encode(SENTENCES)
        assert np.abs(got - reference).max() < tol
