"""onnx-text bundles: raw strings in, SentencePiece inside the ONNX graph (onnxruntime-extensions)."""

from __future__ import annotations

import json

import numpy as np
import pytest

pytest.importorskip("onnxruntime")
pytest.importorskip("onnx")
pytest.importorskip("onnxruntime_extensions")

from tinyglot.export.onnx_text import OnnxTextEncoder, add_tokenizer, export_onnx_text
from tinyglot.export.parity import (
    HARD_SENTENCES,
    STANDALONE_ONNX,
    Gates,
    check_standalone,
    run_standalone,
)

import tinyglot
from tinyglot.errors import TinyglotError
from tinyglot.models import TorchEncoder

from .test_tokenizer import TRICKY

N = 25  # test pairs per language in the parity checks
SENTENCES = ["Datei öffnen", "OPEN THE FILE", "ファイルを開く 😀", "Откройте диалоговое окно\u00a0и\tвыберите",
             "ＦＵＬＬ　ｗｉｄｔｈ", "word " * 300]


@pytest.fixture(scope="module")
def fp32_bundle(student_dir, tmp_path_factory):
    return export_onnx_text(student_dir, tmp_path_factory.mktemp("bundles") / "text-fp32", "none", max_sentences=N)


@pytest.fixture(scope="module")
def int8_bundle(student_dir, tmp_path_factory):
    return export_onnx_text(student_dir, tmp_path_factory.mktemp("bundles") / "text-int8", "dynamic",
                            max_sentences=N)


def _reference(student_dir):
    from tinyglot.export.bundle import load_source

    model, tok, cfg = load_source(student_dir)
    return TorchEncoder(tok, model.embed, cfg["max_len"]), tok, cfg["max_len"]


def test_bundle_layout_config_and_model_card(fp32_bundle):
    out = fp32_bundle.out
    assert {"model.onnx", "tokenizer.model", "config.json", "parity.json", "README.md"} <= set(fp32_bundle.sizes)
    cfg = json.loads((out / "config.json").read_text())
    assert cfg["format"] == "onnx-text" and cfg["loader"] == "tinyglot.export.onnx_text:load_onnx_text_bundle"
    assert cfg["files"] == ["model.onnx"] and cfg["tokenisation"] == "in the graph"
    assert cfg["onnx"]["inputs"] == ["text"] and cfg["parity"]["passed"]
    card = (out / "README.md").read_text()
    assert '"model.onnx"' in card and "register_custom_ops_library" in card and "dim" not in card.split("\n")[0]
    parity = json.loads((out / "parity.json").read_text())
    sa = parity["standalone"]
    assert sa["n_ids_equal"] == sa["n_sentences"] > 200 and sa["forbidden_modules"] == []
    assert sa["mean_cosine"] >= 0.999 and sa["p1_drop"] <= 0.3 and sa["max_empty_row"] == 0.0
    assert parity["gates"]["max_p1_drop"] == 0.3


def test_graph_ids_equal_the_python_tokenizer(fp32_bundle, student_dir):
    """The graph's ids are the Python tokenizer's, truncated to max_len, on tricky strings."""
    _, tok, max_len = _reference(student_dir)
    enc = tinyglot.load(fp32_bundle.out)
    texts = list(dict.fromkeys([*TRICKY, *HARD_SENTENCES, *SENTENCES]))
    emb, ids = enc.run_texts(texts)
    assert ids.shape[1] == max_len  # some sentences are longer than max_len: cut in the graph
    for text, row in zip(texts, ids, strict=True):
        # documented limit: onnxruntime string tensors end at a NUL character (U+0000)
        want = tok.tokenize(text.split("\0")[0])[:max_len]
        assert row[: len(want)].tolist() == want and not row[len(want):].any(), text
    assert any("\0" in t for t in texts)
    empty = [i for i, t in enumerate(texts) if not tok.tokenize(t)]
    assert empty and np.abs(emb[empty]).max() == 0.0  # no token: a zero row, never NaN
    assert np.isfinite(emb).all()


def test_encode_matches_torch_and_batches_do_not_matter(fp32_bundle, student_dir):
    ref, _, _ = _reference(student_dir)
    enc = tinyglot.load(fp32_bundle.out)
    assert isinstance(enc, OnnxTextEncoder)
    emb = enc.encode(SENTENCES, batch_size=2)
    assert emb.dtype == np.float32 and emb.shape == (len(SENTENCES), 32)
    assert np.allclose(np.linalg.norm(emb, axis=1), 1, atol=1e-5)
    assert np.abs(emb - ref.encode(SENTENCES)).max() < 1e-4
    one_by_one = np.stack([enc.encode([s])[0] for s in SENTENCES])
    assert np.abs(one_by_one - enc.encode(SENTENCES, batch_size=64)).max() < 1e-5


def test_bad_input_same_errors_as_the_torch_student(fp32_bundle, student_dir):
    torch_enc = tinyglot.load(student_dir)
    enc = tinyglot.load(fp32_bundle.out)
    for bad in ([], ["ok", 3], "one string", ["ok", "a\0b"], ["\ud800"]):
        with pytest.raises(TinyglotError) as want:
            torch_enc.encode(bad)
        with pytest.raises(TinyglotError) as got:
            enc.encode(bad)
        assert got.value.problem == want.value.problem
    # no tokens (blank, or only a zero-width space): the zero vector in both, the other rows unchanged
    for encoder in (torch_enc, enc):
        rows = encoder.encode(["ok", "  \u200b ", ""])
        assert np.abs(rows[1:]).max() == 0.0 and np.abs(rows[0]).max() > 0
    # in the graph: an empty batch gives (0, dim); a 1 MB sentence is truncated, not a crash
    emb, _ = enc.run_texts([])
    assert emb.shape == (0, 32)
    big = enc.encode(["long " * 200_000])
    assert big.shape == (1, 32) and np.isfinite(big).all()


def test_int8_quantizes_the_encoder_part_and_passes_parity(int8_bundle, fp32_bundle):
    from tinyglot.export.quantize import graph_stats

    assert int8_bundle.parity.passed, int8_bundle.parity.failures
    sp = fp32_bundle.sizes["tokenizer.model"]  # embedded in both graphs
    assert int8_bundle.sizes["model.onnx"] - sp < 0.6 * (fp32_bundle.sizes["model.onnx"] - sp)
    stats = graph_stats(int8_bundle.out / "model.onnx")
    assert stats["ops"].get("MatMulInteger", 0) + stats["ops"].get("DynamicQuantizeMatMul", 0) > 0
    assert stats["ops"]["SentencepieceTokenizer"] == 1
    sa = int8_bundle.parity.standalone
    assert sa.n_ids_equal == sa.n_sentences and sa.mean_cosine >= 0.99 and sa.p1_drop <= 0.3


def test_standalone_process_imports_neither_tinyglot_nor_sentencepiece(fp32_bundle):
    answer = run_standalone(STANDALONE_ONNX, fp32_bundle.out / "model.onnx", ["Hallo Welt", ""])
    top = {m.split(".")[0] for m in answer["modules"]}
    assert "onnxruntime" in top and not top & {"tinyglot", "sentencepiece", "torch", "transformers"}
    assert len(answer["embeddings"]) == 2 and answer["ids"][1] == []


def test_standalone_gate_catches_another_tokenizer(student_dir, small_pairs, tmp_path):
    """A graph built with another vocabulary (case-sensitive) fails the id check of the gate."""
    from tinyglot.export.bundle import load_source
    from tinyglot.export.onnx import EmbeddingModule, export_module

    from tinyglot.tokenizer import Tokenizer

    ref, tok, max_len = _reference(student_dir)
    encoder = export_module(EmbeddingModule(load_source(student_dir)[0]), tmp_path / "enc.onnx", tok.vocab_size,
                            max_len)
    other = Tokenizer.train([s for p in small_pairs for s in (p.x, p.en)], ["de", "fr", "ja", "ru", "en"],
                            vocab_size=1500, lowercase=False)
    wrong = add_tokenizer(encoder, tmp_path / "wrong.onnx", other.proto, max_len)
    report = check_standalone(STANDALONE_ONNX, wrong, ref, tok, max_len, None, Gates(),
                              languages=tok.languages, max_sentences=5)
    assert report.n_ids_equal < report.n_sentences
    assert any("token ids differ" in f for f in report.failures(Gates()))


def test_cli_exports_onnx_text(student_dir, tmp_path, capsys):
    from .test_export_onnx import _cli

    out = tmp_path / "cli"
    assert _cli(["export", "--model", str(student_dir), "--format", "onnx-text", "--out", str(out),
                 "--max-sentences", "5"]) == 0
    printed = capsys.readouterr().out
    assert "passed" in printed and "separate process" in printed
    assert tinyglot.load(out).encode(["x"]).shape == (1, 32)
    assert _cli(["export", "--model", str(student_dir), "--format", "onnx-text", "--quantize", "fp16",
                 "--out", str(tmp_path / "o")]) == 2
    assert "not available for --format onnx-text" in capsys.readouterr().err


def test_tensorflow_imported_first_is_a_clear_error_not_a_crash(fp32_bundle):
    """onnxruntime-extensions crashes a process that imported TensorFlow first: say so instead."""
    import subprocess
    import sys

    pytest.importorskip("tensorflow")
    code = ("import sys, tensorflow, tinyglot\n"
            "try:\n    tinyglot.load(sys.argv[1])\n"
            "except tinyglot.TinyglotError as exc:\n    print('TinyglotError:', exc.problem)\n")
    proc = subprocess.run([sys.executable, "-c", code, str(fp32_bundle.out)], capture_output=True, text=True,
                          timeout=600, check=False)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "already imported TensorFlow" in proc.stdout


def test_int4_token_table_bundle_passes_the_same_gates(student_dir, fp32_bundle, tmp_path):
    from tinyglot.export.quantize import graph_stats

    got = export_onnx_text(student_dir, tmp_path / "text-int4", "dynamic-int4-embeddings", max_sentences=N)
    assert got.parity.passed, got.parity.failures
    sa = got.parity.standalone  # a process with onnxruntime + onnxruntime-extensions only
    assert sa.n_ids_equal == sa.n_sentences and sa.mean_cosine >= 0.99 and sa.p1_drop <= 0.3
    stats = graph_stats(got.out / "model.onnx")
    assert stats["ops"]["GatherBlockQuantized"] == 1 and stats["ops"]["SentencepieceTokenizer"] == 1
    assert "EmbedLayerNormalization" not in stats["ops"] and stats["weights"]["int4"] > 0
    cfg = json.loads((got.out / "config.json").read_text())
    assert cfg["quantization"]["name"] == "dynamic-int4-embeddings" and cfg["quantization"]["embedding_bits"] == 4
    assert "int8, 4-bit token table" in (got.out / "README.md").read_text()
    enc = tinyglot.load(got.out)
    ref = tinyglot.load(fp32_bundle.out).encode(SENTENCES[:4])
    assert np.min(np.sum(enc.encode(SENTENCES[:4]) * ref, axis=1)) > 0.98


def test_per_channel_int8_bundle_passes_the_same_gates(student_dir, fp32_bundle, int8_bundle, tmp_path):
    """onnx-text with the portable per-channel int8 preset (what students started as e5-small's layers
    need): weight scales per output channel where ``dynamic`` has one per tensor, and the same gates."""
    import onnx
    from onnx import numpy_helper

    def weight_scales(bundle) -> list[int]:
        graph = onnx.load(str(bundle.out / "model.onnx")).graph
        return [numpy_helper.to_array(t).size for t in graph.initializer if t.name.endswith("_scale")]

    got = export_onnx_text(student_dir, tmp_path / "text-pc", "dynamic-per-channel", max_sentences=N)
    assert got.parity.passed, got.parity.failures
    assert got.parity.standalone.n_ids_equal == got.parity.standalone.n_sentences
    cfg = json.loads((got.out / "config.json").read_text())
    assert cfg["quantization"]["name"] == "dynamic-per-channel" and cfg["quantization"]["per_channel"] is True
    assert cfg["quantization"]["reduce_range"] is True
    assert max(weight_scales(got)) > 1 and max(weight_scales(int8_bundle)) == 1
    enc = tinyglot.load(got.out)
    ref = tinyglot.load(fp32_bundle.out).encode(SENTENCES[:4])
    assert np.min(np.sum(enc.encode(SENTENCES[:4]) * ref, axis=1)) > 0.98
