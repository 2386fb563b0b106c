"""Empty and blank strings have one defined embedding, the zero vector, in every encoder and bundle (what
the raw-string bundles' graphs give in the stock runtimes); a strict check refuses them on request."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import tinyglot
from tinyglot.encoder import check_sentences
from tinyglot.errors import TinyglotError

FIXTURES = Path(__file__).parent / "fixtures"
MIXED = ["hallo welt", "", "   ", "\u3000\t\n", "guten tag, wie geht es dir heute?"]
BLANK = [1, 2, 3]


def _check(encoder) -> None:
    emb = encoder.encode(MIXED, batch_size=2)
    assert emb.dtype == np.float32 and emb.shape[0] == len(MIXED)
    assert np.abs(emb[BLANK]).max() == 0.0  # the zero vector, never NaN
    alone = encoder.encode([MIXED[0], MIXED[4]])
    np.testing.assert_allclose(emb[[0, 4]], alone, atol=1e-5)  # the others unchanged, in the caller's order
    only = encoder.encode(["", " "])
    assert only.shape == (2, emb.shape[1]) and np.abs(only).max() == 0.0


@pytest.fixture(scope="module")
def onnx_bundle(student_dir, tmp_path_factory) -> Path:
    from tinyglot.export.onnx import export_onnx

    return export_onnx(student_dir, tmp_path_factory.mktemp("blank") / "onnx", "none", max_sentences=10).out


@pytest.fixture(scope="module")
def onnx_text_bundle(student_dir, tmp_path_factory) -> Path:
    from tinyglot.export.formats import export_string_bundle

    return export_string_bundle("onnx-text", student_dir, tmp_path_factory.mktemp("blank") / "text", "none",
                                max_sentences=10, standalone=False).out


def test_student_and_its_bundles_embed_blank_sentences_as_zero(student_dir, onnx_bundle, onnx_text_bundle):
    for folder in (student_dir, onnx_bundle, onnx_text_bundle):
        _check(tinyglot.load(folder))


def test_adapters_embed_blank_sentences_as_zero(student_dir, monkeypatch):
    from tinyglot.encoders import load_encoder

    monkeypatch.syspath_prepend(str(FIXTURES))
    for spec in (str(student_dir), "python:py_teacher:char_bag"):
        _check(load_encoder(spec))


def test_the_stock_runtime_gives_the_same_zero_row(onnx_text_bundle):
    """onnxruntime with its extensions on the raw-string file, without tinyglot's encoder: the graph's row."""
    import onnxruntime as ort
    from onnxruntime_extensions import get_library_path

    so = ort.SessionOptions()
    so.register_custom_ops_library(get_library_path())
    session = ort.InferenceSession(str(onnx_text_bundle / "model.onnx"), so, providers=["CPUExecutionProvider"])
    stock = session.run(None, {session.get_inputs()[0].name: np.array(MIXED, dtype=object)})[0]
    np.testing.assert_allclose(tinyglot.load(onnx_text_bundle).encode(MIXED), stock, atol=1e-5)


def test_strict_check_refuses_blank_sentences():
    assert check_sentences(["a", " "]) == ["a", " "]
    with pytest.raises(TinyglotError, match="sentence #1 is empty"):
        check_sentences(["a", " "], strict=True)


@pytest.mark.slow
@pytest.mark.parametrize("fmt", ["tflite",
                                 pytest.param("tflite-mediapipe", marks=pytest.mark.xdist_group("mediapipe"))])
def test_phone_bundles_embed_blank_sentences_as_zero(fmt, student_dir, tmp_path, request):
    if fmt == "tflite":
        from tinyglot.export.tflite import export_tflite

        out = export_tflite(student_dir, tmp_path / fmt, "none", max_sentences=10).out
    else:  # the shared MediaPipe bundle (conftest): one conversion per session
        out = request.getfixturevalue("mediapipe_bundle")
    _check(tinyglot.load(out))
