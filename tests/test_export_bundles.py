"""The bundle contract every export format keeps (one test body, the formats as parameters): the
layout, config.json's common keys, parity.json, the source's tokenizer byte for byte, the recorded
sha256 of every file (a damaged copy is refused), and ``tinyglot.load`` matching the PyTorch student.
Format-specific checks stay in tests/test_export_<format>.py."""

from __future__ import annotations

import importlib.util
import json
import shutil

import numpy as np
import pytest

import tinyglot
from tinyglot.errors import TinyglotError
from tinyglot.export.bundle import read_bundle
from tinyglot.models import TorchEncoder, read_model_config
from tinyglot.registry import load_source, source_sha, source_size

from .conftest import TEST_LANGS

N = 20
SENTENCES = ["Datei öffnen", "open the file", "Wählen Sie Format - Zeichen, um die Schriftart zu ändern.",
             "ファイルを開く", "Откройте диалоговое окно и выберите нужный параметр из списка."]


def _needs(*modules: str) -> list:
    missing = [m for m in modules if importlib.util.find_spec(m) is None]
    return [pytest.mark.skip(reason=f"{', '.join(missing)} not installed")] if missing else []


FORMATS = [
    pytest.param("onnx", "tinyglot.export.onnx:load_onnx_bundle", marks=_needs("onnx", "onnxruntime")),
    pytest.param("tflite", "tinyglot.export.tflite:load_tflite_bundle", marks=_needs("litert_torch")),
    pytest.param("onnx-text", "tinyglot.export.onnx_text:load_onnx_text_bundle",
                 marks=_needs("onnxruntime_extensions")),
    pytest.param("tflite-mediapipe", "tinyglot.export.tflite_mediapipe:load_tflite_mediapipe_bundle",
                 marks=_needs("litert_torch", "mediapipe")),
    pytest.param("savedmodel", "tinyglot.export.savedmodel:load_savedmodel_bundle",
                 marks=[pytest.mark.slow, *_needs("tensorflow", "tensorflow_hub", "tensorflow_text")]),
]


def _export(fmt: str, student, out):
    if fmt == "onnx":
        from tinyglot.export.onnx import export_onnx

        return export_onnx(student, out, "none", max_sentences=N)
    if fmt == "tflite":
        from tinyglot.export.tflite import export_tflite

        return export_tflite(student, out, "none", buckets=[16, 48], batch_sizes=[1, 4], max_sentences=N)
    if fmt == "savedmodel":
        from tinyglot.export.savedmodel import export_savedmodel

        return export_savedmodel(student, out, max_sentences=N)
    from tinyglot.export.formats import export_string_bundle

    return export_string_bundle(fmt, student, out, "none", max_sentences=N, standalone=False)


@pytest.mark.parametrize(("fmt", "loader"), FORMATS)
def test_every_format_keeps_the_bundle_contract(fmt, loader, student_dir, tmp_path):
    result = _export(fmt, student_dir, tmp_path / fmt)
    out = result.out
    cfg = json.loads((out / "config.json").read_text())
    # layout and config.json's common keys
    assert {"config.json", "parity.json", "tokenizer.model"} <= set(result.sizes)
    assert cfg["loader"] == loader and cfg["kind"] == "bundle" and cfg["format"] == fmt
    assert cfg["files"] and all((out / f).is_file() for f in cfg["files"])
    assert cfg["dim"] == 32 and cfg["max_len"] == 48 and cfg["pooling"] == "mean" and cfg["normalize"] is True
    assert set(TEST_LANGS) <= set(cfg["languages"]) and cfg["quantization"]["mode"] == "none"
    scfg = read_model_config(student_dir)
    assert cfg["source_kind"] == "lealla-student" and cfg["source_sha"] == source_sha(student_dir, scfg)
    assert result.source_bytes == source_size(student_dir, scfg) > 0
    assert (out / "tokenizer.model").read_bytes() == (student_dir / "tokenizer.model").read_bytes()
    assert set(cfg["sha256"]) == {*cfg["files"], "tokenizer.model"}
    # parity: recorded in parity.json and summarised in config.json
    parity = json.loads((out / "parity.json").read_text())
    assert parity["passed"] and parity["mean_cosine"] >= 0.999 and cfg["parity"]["passed"]
    assert {r["lang"] for r in parity["languages"]} == set(TEST_LANGS)
    # tinyglot.load follows the loader; the embeddings are the PyTorch student's
    enc = tinyglot.load(out)
    emb = enc.encode(SENTENCES, batch_size=2)
    assert emb.dtype == np.float32 and emb.shape == (5, 32)
    assert np.allclose(np.linalg.norm(emb, axis=1), 1, atol=1e-5)
    model, tok, scfg = load_source(student_dir)
    ref = TorchEncoder(tok, model.embed, scfg["max_len"]).encode(SENTENCES)
    assert (emb * ref).sum(axis=1).min() >= 0.999
    close = getattr(enc, "close", None)
    if callable(close):
        close()
    # a damaged model file is refused (the sha256 config.json recorded)
    damaged = tmp_path / "damaged"
    shutil.copytree(out, damaged)
    victim = damaged / max(cfg["files"], key=lambda f: (damaged / f).stat().st_size)
    victim.write_bytes(victim.read_bytes()[:-1] + bytes([victim.read_bytes()[-1] ^ 1]))
    with pytest.raises(TinyglotError):
        read_bundle(damaged)
    # the source folder is never the bundle folder
    with pytest.raises(TinyglotError, match="source folder"):
        _export(fmt, student_dir, student_dir)
