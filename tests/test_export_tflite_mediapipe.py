"""tflite-mediapipe bundles: MediaPipe's TextEmbedder embeds raw strings with the exported file."""

from __future__ import annotations

import importlib.util
import json

import numpy as np
import pytest

pytest.importorskip("litert_torch")
pytest.importorskip("mediapipe.tasks.python.text.text_embedder")

from tinyglot.export.tflite_mediapipe import (
    MediaPipeTextEncoder,
    export_tflite_mediapipe,
)
from tinyglot.export import tflite_mediapipe

import tinyglot
from tinyglot.errors import TinyglotError
from tinyglot.models import TorchEncoder

from .test_tokenizer import TRICKY

N = 25
SENTENCES = ["Datei öffnen", "OPEN THE FILE", "ファイルを開く 😀", "Откройте диалоговое окно\u00a0и\tвыберите",
             "ＦＵＬＬ　ｗｉｄｔｈ", "word " * 300]
# the default (input_shape="auto") builds the dynamic-shape file where TensorFlow and tf-keras are installed
DYNAMIC = all(importlib.util.find_spec(m) is not None for m in ("tensorflow", "tf_keras"))


@pytest.fixture(scope="module")
def mp_bundle(mediapipe_export):
    return mediapipe_export  # conftest: fp32, 25 parity sentences, shared with other tests


@pytest.fixture(scope="module")
def mp_int8_bundle(student_dir, tmp_path_factory):
    return export_tflite_mediapipe(student_dir, tmp_path_factory.mktemp("bundles") / "mp-int8", "dynamic",
                                   max_sentences=N)


def _reference(student_dir):
    from tinyglot.export.bundle import load_source

    model, tok, cfg = load_source(student_dir)
    return TorchEncoder(tok, model.embed, cfg["max_len"]), tok, cfg["max_len"]


def test_mediapipe_text_embedder_embeds_raw_strings(mp_bundle, student_dir):
    """MediaPipe's own Python API, no tinyglot code in between, matches the PyTorch student."""
    from mediapipe.tasks.python.core.base_options import BaseOptions
    from mediapipe.tasks.python.text import text_embedder

    ref, _, _ = _reference(student_dir)
    want = ref.encode(SENTENCES)
    options = text_embedder.TextEmbedderOptions(base_options=BaseOptions(
        model_asset_path=str(mp_bundle.out / "model.tflite")))
    with text_embedder.TextEmbedder.create_from_options(options) as embedder:
        got = np.stack([np.asarray(embedder.embed(s).embeddings[0].embedding) for s in SENTENCES])
        assert embedder.embed("x").embeddings[0].head_name == "sentence_embedding"
    cos = (got * want).sum(axis=1) / np.linalg.norm(got, axis=1) / np.linalg.norm(want, axis=1)
    assert cos.min() >= 0.99, cos


def test_token_ids_equal_the_python_tokenizer(mp_bundle, student_dir):
    _, tok, max_len = _reference(student_dir)
    enc = tinyglot.load(mp_bundle.out)
    assert isinstance(enc, MediaPipeTextEncoder)
    try:
        for text in [*TRICKY, *SENTENCES]:
            emb, ids = enc.run_text(text)
            want = tok.tokenize(text)[:max_len]
            # MediaPipe's Python binding passes a C string: text after a NUL character is not seen
            assert ids == want or ("\0" in text and ids == tok.tokenize(text.split("\0")[0])[:max_len]), text
            if not want:
                assert not np.abs(emb).any()  # no token: a zero vector
    finally:
        enc.close()


def test_bundle_config_card_and_standalone_parity(mp_bundle, mp_int8_bundle):
    for result, min_cos in ((mp_bundle, 0.999), (mp_int8_bundle, 0.99)):
        assert result.parity.passed, result.parity.failures
        cfg = json.loads((result.out / "config.json").read_text())
        assert cfg["format"] == "tflite-mediapipe" and cfg["tflite"]["input_shape"] == ([1, -1] if DYNAMIC else [1, 50])
        card = (result.out / "README.md").read_text()
        assert "TextEmbedder.createFromOptions" in card and '"model.tflite"' in card and "Swift" in card
        sa = json.loads((result.out / "parity.json").read_text())["standalone"]
        assert sa["runtime"].startswith("mediapipe") and sa["forbidden_modules"] == []
        assert sa["n_ids_equal"] == sa["n_sentences"] and sa["mean_cosine"] >= min_cos and sa["p1_drop"] <= 0.3
    assert mp_int8_bundle.sizes["model.tflite"] < mp_bundle.sizes["model.tflite"]
    assert mp_int8_bundle.graph["weights"].get("int8", 0) > 0


@pytest.mark.slow
@pytest.mark.skipif(not DYNAMIC, reason="the 4-bit table is made on the dynamic-shape path (TensorFlow)")
def test_a_4_bit_token_table_halves_the_table_and_keeps_parity(mp_int8_bundle, student_dir, tmp_path):
    result = export_tflite_mediapipe(student_dir, tmp_path / "mp-int4", "dynamic-int4-embeddings", max_sentences=N)
    assert result.parity.passed, result.parity.failures
    cfg = json.loads((result.out / "config.json").read_text())
    assert cfg["quantization"]["mode"] == "dynamic" and cfg["quantization"]["name"] == "dynamic-int4-embeddings"
    assert "4-bit blocks" in cfg["quantization"]["recipe"]
    weights = result.graph["weights"]
    vocab, width = tinyglot.load(str(student_dir)).tokenizer.vocab_size, cfg["dim"]
    assert weights.get("int4", 0) >= vocab * width  # the token table (the position table stays int8)
    table_int8 = vocab * width  # bytes of the int8 table the dynamic file holds
    saved = mp_int8_bundle.sizes["model.tflite"] - result.sizes["model.tflite"]
    assert saved > 0.4 * table_int8, (saved, table_int8)
    sa = json.loads((result.out / "parity.json").read_text())["standalone"]
    assert sa["n_ids_equal"] == sa["n_sentences"] and sa["mean_cosine"] >= 0.99  # in a mediapipe-only process
    assert "int8, the token table in 4-bit blocks" in (result.out / "README.md").read_text()
    enc = tinyglot.load(str(result.out))
    try:
        emb = enc.encode(["Datei öffnen", "Open the file"])
        assert emb.shape == (2, width) and np.allclose(np.linalg.norm(emb, axis=1), 1, atol=1e-3)
    finally:
        enc.close()
    with pytest.raises(TinyglotError, match="dynamic-shape path"):
        export_tflite_mediapipe(student_dir, tmp_path / "mp-int4-fixed", "dynamic-int4-embeddings", max_sentences=N,
                                input_shape="fixed")


def test_bad_input_same_errors_as_the_torch_student(mp_bundle, student_dir):
    torch_enc = tinyglot.load(student_dir)
    enc = tinyglot.load(mp_bundle.out)
    try:
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
        big = enc.encode(["long " * 200_000])  # 1 MB: truncated by MediaPipe, not a crash
        assert big.shape == (1, 32) and np.isfinite(big).all()
    finally:
        enc.close()


def test_case_sensitive_vocabulary_is_refused(small_pairs, tmp_path):
    import torch
    from tinyglot.distill.config import StudentConfig
    from tinyglot.distill.student import Student, save_student

    from tinyglot.tokenizer import Tokenizer

    tok = Tokenizer.train([s for p in small_pairs[:400] for s in (p.x, p.en)], ["de", "en"], vocab_size=600,
                          lowercase=False)
    torch.manual_seed(0)
    cfg = StudentConfig(hidden_size=32, num_layers=1, num_heads=2, ffn_size=64, max_len=16, dropout=0.0,
                        vocab_size=tok.vocab_size)
    student = save_student(Student(cfg), tok, tmp_path / "cased")
    with pytest.raises(TinyglotError, match="case-sensitive"):
        export_tflite_mediapipe(student, tmp_path / "out")


def test_onnx_text_bundles_still_open_after_a_mediapipe_bundle(mp_bundle, student_dir, tmp_path):
    """MediaPipe imports TensorFlow; tinyglot loads onnxruntime-extensions before it, so both kinds of
    bundle work in one process (in a fresh one: this test process preloaded it already)."""
    import subprocess
    import sys

    pytest.importorskip("onnxruntime_extensions")
    from tinyglot.export.onnx_text import export_onnx_text

    text = export_onnx_text(student_dir, tmp_path / "text", "none", max_sentences=5, standalone=False).out
    code = ("import sys, tinyglot\n"
            "a = tinyglot.load(sys.argv[1]).encode(['Hallo Welt'])\n"
            "b = tinyglot.load(sys.argv[2]).encode(['Hallo Welt'])\n"
            "print('cosine', float(a[0] @ b[0]))\n")
    proc = subprocess.run([sys.executable, "-c", code, str(mp_bundle.out), str(text)], capture_output=True,
                          text=True, timeout=600, check=False)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert float(proc.stdout.split("cosine")[-1]) > 0.999


def _input_shapes(path) -> list[list[int]]:
    from ai_edge_litert.interpreter import Interpreter

    return [d["shape_signature"].tolist() for d in Interpreter(model_path=str(path)).get_input_details()]


@pytest.mark.skipif(not DYNAMIC, reason="the dynamic-shape file is converted with TensorFlow and tf-keras")
def test_dynamic_input_runs_each_string_at_its_own_length(mp_bundle, student_dir):
    """[1, n] inputs: MediaPipe sizes them to the string (no padding to max_len), the graph keeps the first
    max_len tokens; the rows equal the PyTorch student's at every length, none to 1 MB."""
    assert _input_shapes(mp_bundle.out / "model.tflite") == [[1, -1]] * 3
    cfg = json.loads((mp_bundle.out / "config.json").read_text())
    assert "dynamic" in cfg["tflite"]["sequence"] and "(inside the graph)" in cfg["tflite"]["truncation"]
    assert "dynamic `n`" in (mp_bundle.out / "README.md").read_text()
    ref, tok, max_len = _reference(student_dir)
    words = ["Откройте", "диалоговое", "окно", "и", "выберите", "нужный", "параметр", "из", "списка"]
    texts = [" ".join(words[: n % len(words) + 1] * (n // len(words) + 1)) for n in range(0, 70, 3)]
    enc = tinyglot.load(mp_bundle.out)
    try:
        lengths = set()
        for text in texts:
            emb, ids = enc.run_text(text)
            assert ids == tok.tokenize(text)[:max_len]
            lengths.add(len(ids))
            want = ref.encode([text])[0]
            assert float(emb @ want) >= 0.999
        assert min(lengths) < 10 and max(lengths) == max_len  # short, long and truncated strings
    finally:
        enc.close()


def test_fixed_shape_when_the_dynamic_file_cannot_be_built(student_dir, tmp_path, monkeypatch):
    """``auto`` falls back to the fixed [1, max_len + 2] file (litert-torch) and says why; such a bundle, like
    every bundle written before dynamic shapes, loads and matches the student; ``dynamic`` refuses instead."""
    monkeypatch.setattr(tflite_mediapipe, "dynamic_unavailable", lambda source: "no TensorFlow here (test)")
    said: list[str] = []
    result = export_tflite_mediapipe(student_dir, tmp_path / "fixed", "none", max_sentences=5, standalone=False,
                                     say=said.append)
    assert result.parity.passed, result.parity.failures
    cfg = result.config
    assert cfg["tflite"]["input_shape"] == [1, 50] and cfg["tflite"]["fixed_because"] == "no TensorFlow here (test)"
    assert cfg["tflite"]["converter"] == "litert-torch" and any("no TensorFlow here" in m for m in said)
    assert _input_shapes(result.out / "model.tflite") == [[1, 50]] * 3
    assert "`[1, 50]` int32" in (result.out / "README.md").read_text()
    ref, _, _ = _reference(student_dir)
    enc = tinyglot.load(result.out)
    try:
        got = enc.encode(SENTENCES)
    finally:
        enc.close()
    assert float(((got * ref.encode(SENTENCES)).sum(axis=1)).min()) >= 0.999
    with pytest.raises(TinyglotError, match="no TensorFlow here"):
        export_tflite_mediapipe(student_dir, tmp_path / "dyn", "none", input_shape="dynamic", standalone=False)
    with pytest.raises(TinyglotError, match="input_shape"):
        export_tflite_mediapipe(student_dir, tmp_path / "bad", "none", input_shape="ragged")
