"""TFLite bundles: litert-torch conversion with one signature per (batch, seq) bucket, the real LiteRT
interpreter, quantization (dynamic int8, fp16), bucket selection, parity gates, CLI."""

from __future__ import annotations

import argparse
import json

import numpy as np
import pytest

pytest.importorskip("ai_edge_litert.interpreter")
pytest.importorskip("litert_torch")

import torch  # noqa: E402

import tinyglot  # noqa: E402
from tinyglot.errors import TinyglotError  # noqa: E402
from tinyglot.export.tflite import (  # noqa: E402
    TFLiteEncoder,
    export_tflite,
    parse_ints,
    resolve_buckets,
    tflite_stats,
    verify_quantized,
)
from tinyglot.models import TorchEncoder  # noqa: E402


pytestmark = pytest.mark.slow  # every test here converts with litert-torch (tens of seconds each)

N = 25  # test pairs per language for the parity checks
BUCKETS = (16, 32)  # + max_len 48
BATCHES = (1, 4)


@pytest.fixture(scope="module")
def fp32_bundle(student_dir, tmp_path_factory):
    out = tmp_path_factory.mktemp("tflite") / "fp32"
    return export_tflite(student_dir, out, "none", buckets=BUCKETS, batch_sizes=BATCHES, max_sentences=N)


@pytest.fixture(scope="module")
def int8_bundle(student_dir, tmp_path_factory):
    out = tmp_path_factory.mktemp("tflite") / "int8"
    return export_tflite(student_dir, out, "dynamic", buckets=BUCKETS, batch_sizes=BATCHES, max_sentences=N)


def _torch_encoder(path):
    from tinyglot.export.bundle import load_source

    model, tok, cfg = load_source(path)
    return TorchEncoder(tok, model.embed, cfg["max_len"])


SENTENCES = ["Datei öffnen", "open the file", "Wählen Sie Format - Zeichen, um die Schriftart zu ändern.",
             "ファイルを開く", "Откройте диалоговое окно и выберите нужный параметр из списка."]


def _spy(enc):
    """Record the signatures ``enc`` runs."""
    calls = []
    runner = enc._runner

    def spying(name):
        calls.append(name)
        return runner(name)

    enc._runner = spying
    return calls


def test_fp32_bundle_records_its_signatures_and_opens_as_tflite(fp32_bundle):
    """The bundle contract (layout, common config keys, parity, load) is tests/test_export_bundles.py's."""
    cfg = fp32_bundle.config
    assert cfg["tflite"]["buckets"] == [16, 32, 48] and cfg["tflite"]["batch_sizes"] == [1, 4]
    assert len(cfg["tflite"]["signatures"]) == 6 and cfg["tflite"]["input_dtype"] == "int32"
    assert isinstance(tinyglot.load(fp32_bundle.out), TFLiteEncoder)


def test_signatures_take_named_int32_inputs(fp32_bundle):
    enc = tinyglot.load(fp32_bundle.out)
    sigs = enc.interpreter.get_signature_list()
    assert set(sigs) == {f"b{b}_s{s}" for b in (1, 4) for s in (16, 32, 48)}
    for name, io in sigs.items():
        assert set(io["inputs"]) == {"input_ids", "attention_mask"}
        details = enc._runner(name).get_input_details()
        assert details["input_ids"]["dtype"] == np.int32 and details["attention_mask"]["dtype"] == np.int32
    # the shapes come from the file: b4_s32 is (4, 32)
    assert tuple(enc._runner("b4_s32").get_input_details()["input_ids"]["shape"]) == (4, 32)
    # names were shortened, the file still runs: outputs are normalised inside the graph
    ids = np.random.default_rng(0).integers(2, 1000, (3, 20)).astype(np.int32)
    out = enc.run_batch(ids, np.ones_like(ids))
    assert out.shape == (3, 32) and np.allclose(np.linalg.norm(out, axis=1), 1, atol=1e-5)


def test_bucket_selection_and_batch_chunking(fp32_bundle, student_dir):
    enc = tinyglot.load(fp32_bundle.out)
    assert enc.buckets == (16, 32, 48) and enc.max_len == 48
    assert [enc.bucket_for(n) for n in (1, 16, 17, 33, 48, 500)] == [16, 16, 32, 48, 48, 48]
    ref = _torch_encoder(student_dir)
    tok = enc.tokenizer
    short, long = "open the file", " ".join(["Wählen Sie Format - Zeichen, um die Schriftart zu ändern."] * 3)
    assert len(tok.tokenize(short)) <= 16 and len(tok.tokenize(long)) > 32
    calls = _spy(enc)
    enc.encode([short])
    assert calls == ["b1_s16"]  # the smallest bucket that holds it
    calls.clear()
    got = enc.encode([long])
    assert calls == ["b1_s48"]  # a long sentence uses a bigger bucket
    # longer than the largest bucket: truncated to max_len, like the source
    very_long = " ".join([long] * 4)
    assert len(tok.tokenize(very_long)) > 48
    assert np.abs(enc.encode([very_long]) - ref.encode([very_long])).max() < 1e-4
    assert np.abs(got - ref.encode([long])).max() < 1e-4
    # a batch larger than any signature's batch (4): chunked 4 + 4 + 2 (padded rows dropped)
    ten = [f"{s} {i}" for i, s in enumerate(SENTENCES * 2)]
    calls.clear()
    together = enc.encode(ten, batch_size=64)
    assert len(calls) == 3 and all(c.startswith("b4_") for c in calls)
    one_by_one = np.stack([enc.encode([s])[0] for s in ten])
    assert np.abs(together - one_by_one).max() < 1e-5
    assert np.abs(together - ref.encode(ten)).max() < 1e-4
    # fewer rows than the batch: padded with copies of the first row
    calls.clear()
    two = enc.encode(ten[:2], batch_size=64)
    assert calls[-1].startswith("b4_") and two.shape == (2, 32)
    assert np.abs(two - one_by_one[:2]).max() < 1e-5
    # 1 row never pads to 4 (b1 exists); rows -> signature batches
    assert [enc.signature_for(n, 16).batch for n in (1, 2, 3, 4, 5, 9)] == [1, 4, 4, 4, 4, 4]


def test_dynamic_int8_really_shrinks_and_passes_parity(int8_bundle, fp32_bundle):
    assert int8_bundle.parity.passed, int8_bundle.parity.failures
    assert int8_bundle.parity.mean_cosine >= 0.99
    assert int8_bundle.sizes["model.tflite"] < 0.95 * fp32_bundle.sizes["model.tflite"]
    q, f = tflite_stats(int8_bundle.out / "model.tflite"), tflite_stats(fp32_bundle.out / "model.tflite")
    assert q["weights"].get("int8", 0) > 0.5 * sum(q["weights"].values())
    assert "int8" not in f["weights"]
    assert sum(q["weight_bytes"].values()) < 0.6 * sum(f["weight_bytes"].values())
    cfg = json.loads((int8_bundle.out / "config.json").read_text())
    assert cfg["quantization"]["mode"] == "dynamic"
    assert cfg["quantization"]["recipe"] == "quant_recipes.full_dynamic_recipe"
    emb = tinyglot.load(int8_bundle.out).encode(SENTENCES)
    assert np.allclose(np.linalg.norm(emb, axis=1), 1, atol=1e-3)


def test_fp16(student_dir, tmp_path, fp32_bundle):
    result = export_tflite(student_dir, tmp_path / "fp16", "fp16", buckets=BUCKETS, batch_sizes=BATCHES,
                           max_sentences=N)
    assert result.parity.passed, result.parity.failures
    stats = tflite_stats(result.out / "model.tflite")
    assert stats["weights"].get("float16", 0) > 0.5 * sum(stats["weights"].values())
    assert result.sizes["model.tflite"] < 0.9 * fp32_bundle.sizes["model.tflite"]
    assert tinyglot.load(result.out).encode(["hallo"]).shape == (1, 32)


def test_fp32_file_claimed_as_quantized_fails_loudly(fp32_bundle):
    path = fp32_bundle.out / "model.tflite"
    with pytest.raises(TinyglotError, match="not really quantized"):
        verify_quantized(path, "dynamic")
    with pytest.raises(TinyglotError, match="fp16"):
        verify_quantized(path, "fp16")


class _FirstToken(torch.nn.Module):
    """A broken export: first token's hidden state instead of mean pooling."""

    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, input_ids, attention_mask):
        hidden = self.model.encoder(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state
        return torch.nn.functional.normalize(hidden[:, 0], dim=-1)


def test_broken_export_is_caught_by_the_parity_gate(student_dir, tmp_path):
    out = tmp_path / "broken"
    with pytest.raises(TinyglotError, match="parity check failed.*mean cosine"):
        export_tflite(student_dir, out, "none", buckets=(48,), batch_sizes=(4,), max_sentences=10,
                      module_factory=_FirstToken)
    assert (out / "parity.json").exists() and not (out / "config.json").exists()
    assert not json.loads((out / "parity.json").read_text())["passed"]


def test_bucket_parsing():
    assert parse_ints("32,16, 64") == (16, 32, 64) and parse_ints(None) is None
    assert resolve_buckets((16, 32, 64, 128), 48) == (16, 32, 48)
    assert resolve_buckets((16, 32), 128) == (16, 32, 128)  # max_len is always the largest bucket
    with pytest.raises(TinyglotError, match="integers"):
        parse_ints("16,x")
    with pytest.raises(TinyglotError, match="positive"):
        parse_ints("0,16")


def _cli(argv):
    from tinyglot.app.cli import run
    from tinyglot.app.commands.export import register

    def factory():
        parser = argparse.ArgumentParser(prog="tinyglot")
        register(parser.add_subparsers(dest="command", required=True))
        return parser

    return run(argv, factory)


def test_cli_tflite(student_dir, tmp_path, capsys):
    out = tmp_path / "cli"
    assert _cli(["export", "--model", str(student_dir), "--format", "tflite", "--quantize", "dynamic",
                 "--buckets", "16,48", "--batch-sizes", "1,4", "--out", str(out), "--max-sentences", "10"]) == 0
    printed = capsys.readouterr().out
    assert "Parity" in printed and "model.tflite" in printed and "passed" in printed
    assert "LiteRT-Torch" not in printed and "[START]" not in printed  # the converter's own progress lines
    enc = tinyglot.load(out)
    assert isinstance(enc, TFLiteEncoder) and enc.buckets == (16, 48)
    assert enc.encode(["x"]).shape == (1, 32)
    # --quantize values are checked per format
    assert _cli(["export", "--model", str(student_dir), "--format", "tflite", "--quantize", "static",
                 "--out", str(tmp_path / "o1")]) == 2
    assert "not available for --format tflite" in capsys.readouterr().err
    assert _cli(["export", "--model", str(student_dir), "--format", "savedmodel", "--quantize", "dynamic",
                 "--out", str(tmp_path / "o2")]) == 2
    assert "choose one of: none" in capsys.readouterr().err
    assert _cli(["export", "--model", str(student_dir), "--format", "onnx", "--buckets", "16",
                 "--out", str(tmp_path / "o3")]) == 2
    assert "TFLite options" in capsys.readouterr().err
    assert _cli(["export", "--model", str(student_dir), "--format", "tflite", "--buckets", "a,b",
                 "--out", str(tmp_path / "o4")]) == 2
    assert "integers" in capsys.readouterr().err
