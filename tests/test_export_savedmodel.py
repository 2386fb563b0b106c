"""SavedModel bundles: raw strings in (SentencePiece inside the graph), loaded with the real
tensorflow_hub.KerasLayer, same embeddings as PyTorch, token check, parity gates."""

from __future__ import annotations

import json

import numpy as np
import pytest

pytest.importorskip("tensorflow")
pytest.importorskip("tensorflow_hub")
pytest.importorskip("tensorflow_text")
pytest.importorskip("tf_keras")

import torch  # noqa: E402

import tinyglot  # noqa: E402
from tinyglot.errors import TinyglotError  # noqa: E402
from tinyglot.export.savedmodel import SavedModelEncoder, export_savedmodel  # noqa: E402
from tinyglot.models import TorchEncoder  # noqa: E402


pytestmark = pytest.mark.slow  # every export builds the SavedModel in a TensorFlow subprocess

N = 25


@pytest.fixture(scope="module")
def student_dir(tokenizer, tmp_path_factory):
    """A lealla-tiny-shaped student with random weights (as in test_export_onnx)."""
    from tinyglot.distill.config import StudentConfig
    from tinyglot.distill.student import Student, save_student

    torch.manual_seed(0)
    cfg = StudentConfig(hidden_size=32, num_layers=2, num_heads=2, ffn_size=64, max_len=48, dropout=0.0,
                        vocab_size=tokenizer.vocab_size)
    return save_student(Student(cfg), tokenizer, tmp_path_factory.mktemp("student") / "student")


@pytest.fixture(scope="module")
def bundle(student_dir, tmp_path_factory):
    return export_savedmodel(student_dir, tmp_path_factory.mktemp("sm") / "bundle", max_sentences=N)


def _torch_encoder(path):
    from tinyglot.export.bundle import load_source

    model, tok, cfg = load_source(path)
    return TorchEncoder(tok, model.embed, cfg["max_len"])


SENTENCES = ["Datei öffnen", "open the file", "Wählen Sie Format - Zeichen, um die Schriftart zu ändern.",
             "ファイルを開く", "Откройте диалоговое окно и выберите нужный параметр из списка."]


def test_bundle_layout_config_and_parity(bundle):
    out = bundle.out
    assert (out / "saved_model.pb").is_file() and (out / "variables").is_dir()
    cfg = json.loads((out / "config.json").read_text())  # the common keys: tests/test_export_bundles.py
    assert "saved_model.pb" in cfg["files"] and any(f.startswith("variables/") for f in cfg["files"])
    assert cfg["savedmodel"]["tokenization_checked"] > 4 * N
    assert bundle.graph["files"] == cfg["files"] and bundle.graph["bytes"] > 0


def test_raw_strings_through_hub_keraslayer_match_torch(bundle, student_dir):
    import tensorflow as tf
    import tensorflow_hub as hub
    import tensorflow_text  # noqa: F401

    layer = hub.KerasLayer(str(bundle.out))  # the bundle folder IS the TF Hub model
    got = np.asarray(layer(tf.constant(SENTENCES)))
    ref = _torch_encoder(student_dir).encode(SENTENCES)
    assert got.shape == (5, 32) and np.abs(got - ref).max() < 1e-4
    assert np.allclose(np.linalg.norm(got, axis=1), 1, atol=1e-5)
    # upper-case input: the graph lower-cases (nmt_nfkc_cf) exactly as the Python tokenizer does
    upper = [s.upper() for s in SENTENCES]
    got_upper = np.asarray(layer(tf.constant(upper)))
    assert np.abs(got_upper - ref).max() < 1e-4
    assert np.abs(got_upper - _torch_encoder(student_dir).encode(upper)).max() < 1e-4
    # a sentence alone vs in a padded batch; longer than max_len: truncated like the source
    long = " ".join(SENTENCES * 6)
    alone = np.asarray(layer(tf.constant(["open the file"])))[0]
    assert np.abs(alone - ref[1]).max() < 1e-5
    got_long = np.asarray(layer(tf.constant([long])))[0]
    assert np.abs(got_long - _torch_encoder(student_dir).encode([long])[0]).max() < 1e-4


def test_signatures_strings_and_ids(bundle, student_dir):
    import tensorflow as tf
    import tensorflow_text  # noqa: F401

    loaded = tf.saved_model.load(str(bundle.out))
    assert set(loaded.signatures) == {"serving_default", "encode_ids"}
    ref = _torch_encoder(student_dir)
    out = loaded.signatures["serving_default"](sentences=tf.constant(SENTENCES))["sentence_embedding"].numpy()
    assert np.abs(out - ref.encode(SENTENCES)).max() < 1e-4
    batch = ref.tokenizer.encode(SENTENCES, 48)
    out = loaded.signatures["encode_ids"](input_ids=tf.constant(batch.ids.astype(np.int32)),
                                          attention_mask=tf.constant(batch.mask.astype(np.int32)))
    assert np.abs(out["sentence_embedding"].numpy() - ref.encode(SENTENCES)).max() < 1e-4


def test_tfhub_teacher_opens_tinyglots_own_savedmodel(bundle, student_dir):
    """The TF Hub teacher adapter registers tensorflow-text's SentencePiece op before loading, so a
    SavedModel with the tokenizer in its graph (tinyglot's, LaBSE's, USE-m's) can teach."""
    from tinyglot.encoders import load_encoder as load_teacher_encoder

    teacher = load_teacher_encoder(f"tfhub:{bundle.out}")
    emb = teacher.encode(SENTENCES)
    assert np.abs(emb - _torch_encoder(student_dir).encode(SENTENCES)).max() < 1e-4


def test_a_savedmodel_with_an_unregistered_op_is_a_clear_error(tmp_path):
    from tinyglot.encoders.tfhub import load_saved_model as _load_saved_model

    def load(path):
        raise RuntimeError("Op type not registered 'SentencepieceOp' in binary running on host")

    with pytest.raises(TinyglotError, match="SentencepieceOp.*tensorflow-text") as info:
        _load_saved_model(load, tmp_path)
    assert "tinyglot[tf]" in info.value.fix


def test_tinyglot_load_gives_an_encoder(bundle, student_dir):
    enc = tinyglot.load(bundle.out)
    assert isinstance(enc, SavedModelEncoder)
    emb = enc.encode(SENTENCES, batch_size=2)
    assert emb.dtype == np.float32 and emb.shape == (5, 32)
    assert np.abs(emb - _torch_encoder(student_dir).encode(SENTENCES)).max() < 1e-4
    ids = enc.run_batch(*(lambda b: (b.ids, b.mask))(_torch_encoder(student_dir).tokenizer.encode(SENTENCES, 48)))
    assert np.abs(ids - emb).max() < 1e-4
    blank = enc.encode(["ok", "  "])  # a blank sentence: the zero vector, as in every format
    assert np.abs(blank[1]).max() == 0.0 and np.abs(blank[0] - enc.encode(["ok"])[0]).max() < 1e-5
    with pytest.raises(TinyglotError, match="one string"):
        enc.encode("just a string")


def test_graph_tokenizer_without_lowercasing_is_caught(student_dir, tokenizer, tmp_path):
    """A graph whose SentencePiece model does not lower-case: the token check fails loudly."""
    from sentencepiece import sentencepiece_model_pb2 as pb

    proto = pb.ModelProto()
    proto.ParseFromString(tokenizer.proto)
    assert proto.normalizer_spec.name == "nmt_nfkc_cf"
    proto.normalizer_spec.name = "identity"
    proto.normalizer_spec.precompiled_charsmap = b""
    out = tmp_path / "broken"
    with pytest.raises(TinyglotError, match="tokenisation inside the SavedModel differs"):
        export_savedmodel(student_dir, out, max_sentences=5, graph_tokenizer=proto.SerializeToString())
    assert not (out / "config.json").exists()


def test_quantization_and_teacher_are_refused(student_dir, tmp_path):
    with pytest.raises(TinyglotError, match="no quantization"):
        export_savedmodel(student_dir, tmp_path / "q", "dynamic")
