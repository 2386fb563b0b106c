"""Every registered model kind through every command: the ALBERT-style multi-stage student (a
transformers AlbertModel) is pruned, exported as ONNX, TFLite and a raw-string SavedModel (its
TFAlbertModel twin, loaded with the real tensorflow_hub.KerasLayer) and benchmarked on the torch
runtime, with parity against PyTorch, like the LEALLA student (a BertModel)."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

import tinyglot
from tinyglot.errors import TinyglotError
from tinyglot.models import TorchEncoder
from tinyglot.registry import KINDS, ModelKind, kind_of, load_source, register_kind, source_sha, source_weight_files

N = 20
SENTENCES = ["Datei öffnen", "open the file", "Wählen Sie Format - Zeichen, um die Schriftart zu ändern.",
             "Le fichier est ouvert.", "Откройте диалоговое окно."]


@pytest.fixture(scope="module")
def albert_dir(tokenizer, tmp_path_factory):
    """A tiny multi-stage student (recurrent ALBERT, bottleneck 16 -> hidden 32) with random weights and
    a teacher projection head (saved, not exported)."""
    from tinyglot.distill.ms_config import MSStudentConfig
    from tinyglot.distill.multistage import KIND_STUDENT, build_student, save_ms_model

    torch.manual_seed(0)
    cfg = MSStudentConfig(embedding_size=16, unit_layers=1, passes=2, hidden_size=32, num_heads=2, ffn_size=64,
                          max_len=48, dropout=0.0, vocab_size=tokenizer.vocab_size)
    model = build_student(cfg, {"teacher": (32, 64)})
    return save_ms_model(model.eval(), tokenizer, tmp_path_factory.mktemp("albert") / "student", KIND_STUDENT, 48,
                         {"stage": 4, "teacher_dim": 64})


def _torch_encoder(path) -> TorchEncoder:
    model, tok, cfg = load_source(path)
    return TorchEncoder(tok, model.embed, cfg["max_len"])


# ---------------------------------------------------------------- the registry
def test_every_kind_is_registered_and_opens(albert_dir, student_dir, tiny_teacher_dir):
    assert set(KINDS) >= {"lealla-student", "ems-teacher", "multistage-student", "multistage-assistant"}
    for path, kind, weights in ((albert_dir, "multistage-student", "model/model.safetensors"),
                                (student_dir, "lealla-student", "model/model.safetensors"),
                                (tiny_teacher_dir, "ems-teacher", None)):
        model, tok, cfg = load_source(path)
        assert cfg["kind"] == kind and not model.training and hasattr(model, "embed")
        files = [f.relative_to(path).as_posix() for f in source_weight_files(path, cfg)]
        assert files and (weights is None or weights in files)
        assert len(source_sha(path, cfg)) == 64
    assert KINDS["multistage-student"].can_prune and not KINDS["ems-teacher"].can_prune
    assert type(load_source(albert_dir)[0].encoder).__name__ == "AlbertModel"


def test_unknown_kinds_and_bundles_are_refused_with_the_registered_kinds(tmp_path):
    folder = tmp_path / "m"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({"kind": "mystery"}))
    with pytest.raises(TinyglotError, match="kind='mystery'") as err:
        load_source(folder)
    assert "multistage-student" in err.value.fix and "ems-teacher" in err.value.fix
    with pytest.raises(TinyglotError, match="already an exported bundle"):
        kind_of(folder, {"kind": "bundle", "format": "onnx"})


def test_a_registered_kind_is_accepted_by_load_source(albert_dir, tmp_path):
    """A package adds a kind by registering it: load_source then opens its folders."""
    import shutil

    copy = tmp_path / "plugin"
    shutil.copytree(albert_dir, copy)
    cfg = json.loads((copy / "config.json").read_text())
    (copy / "config.json").write_text(json.dumps({**cfg, "kind": "plugin-student"}))
    with pytest.raises(TinyglotError, match="plugin-student"):
        load_source(copy)
    register_kind(ModelKind("plugin-student", "tinyglot.distill.multistage.io:load_ms_model"))
    try:
        with pytest.raises(TinyglotError, match="not a multi-stage student"):  # the loader's own check runs
            load_source(copy)
    finally:
        del KINDS["plugin-student"]


# ---------------------------------------------------------------- pruning
def test_pruning_an_albert_student_keeps_its_kind_records_and_embeddings(albert_dir, tokenizer, tmp_path):
    from tinyglot.data.embedded import load_pairs
    from tinyglot.export.prune import prune_student

    result = prune_student(albert_dir, tmp_path / "pruned", ["de", "fr"])
    assert result.passed and result.vocab_after < 0.7 * result.vocab_before
    assert result.embedding_params_after == result.vocab_after * 16  # the ALBERT bottleneck width
    assert result.weights_bytes_after < result.weights_bytes_before
    model, tok, cfg = load_source(result.out)
    assert cfg["kind"] == "multistage-student" and cfg["stage"] == 4 and cfg["teacher_dim"] == 64
    assert cfg["heads"] == {"teacher": [32, 64]} and cfg["pruning"]["vocab_after"] == result.vocab_after
    assert tok.vocab_size == model.encoder.config.vocab_size == result.vocab_after
    before = json.loads((albert_dir / "config.json").read_text())["parameters"]
    assert cfg["parameters"]["embedding"] < before["embedding"] and cfg["parameters"]["encoder"] == before["encoder"]
    sentences = [s for p in load_pairs(None) if p.lang in ("de", "fr") for s in (p.x, p.en)][:64]
    new, old = tinyglot.load(result.out), tinyglot.load(albert_dir)
    assert np.abs(new.encode(sentences) - old.encode(sentences)).max() < 1e-5


def test_pruning_refuses_a_teacher_checkpoint(tiny_teacher_dir, tmp_path):
    from tinyglot.export.prune import prune_student

    with pytest.raises(TinyglotError, match="ems-teacher is a torch checkpoint"):
        prune_student(tiny_teacher_dir, tmp_path / "p", ["de"])


# ---------------------------------------------------------------- export, every format
@pytest.mark.slow
@pytest.mark.parametrize("fmt", ["onnx", "tflite"])  # savedmodel: the KerasLayer test below
def test_albert_student_exports_with_parity(albert_dir, tmp_path, fmt):
    from tinyglot.export.onnx import export_onnx
    from tinyglot.export.tflite import export_tflite

    if fmt == "tflite":
        pytest.importorskip("litert_torch")
    export = {"onnx": export_onnx, "tflite": export_tflite}[fmt]
    result = export(albert_dir, tmp_path / fmt, "none", max_sentences=N)
    assert result.parity.passed and result.parity.mean_cosine >= 0.9999
    cfg = json.loads((result.out / "config.json").read_text())
    assert cfg["format"] == fmt and cfg["source_kind"] == "multistage-student" and cfg["dim"] == 32
    got = tinyglot.load(result.out).encode(SENTENCES)
    assert np.abs(got - _torch_encoder(albert_dir).encode(SENTENCES)).max() < 1e-4


@pytest.mark.slow
def test_albert_savedmodel_takes_raw_strings_through_hub_keraslayer(albert_dir, tmp_path):
    pytest.importorskip("tensorflow_hub")
    pytest.importorskip("tensorflow_text")
    import tensorflow as tf
    import tensorflow_hub as hub
    import tensorflow_text  # noqa: F401

    from tinyglot.export.savedmodel import export_savedmodel

    bundle = export_savedmodel(albert_dir, tmp_path / "sm", max_sentences=N)
    assert bundle.parity.passed and bundle.parity.mean_cosine >= 0.9999
    cfg = json.loads((bundle.out / "config.json").read_text())
    assert cfg["format"] == "savedmodel" and cfg["source_kind"] == "multistage-student" and cfg["dim"] == 32
    assert np.abs(tinyglot.load(bundle.out).encode(SENTENCES)
                  - _torch_encoder(albert_dir).encode(SENTENCES)).max() < 1e-4
    layer = hub.KerasLayer(str(bundle.out))
    got = np.asarray(layer(tf.constant(SENTENCES)))
    assert got.shape == (len(SENTENCES), 32)
    assert np.abs(got - _torch_encoder(albert_dir).encode(SENTENCES)).max() < 1e-4


def test_savedmodel_refuses_a_teacher_checkpoint_before_building(tiny_teacher_dir, tmp_path):
    pytest.importorskip("tensorflow")
    from tinyglot.export.savedmodel import export_savedmodel

    with pytest.raises(TinyglotError, match="torch checkpoint"):
        export_savedmodel(tiny_teacher_dir, tmp_path / "sm")
    assert not (tmp_path / "sm" / "config.json").exists()


# ---------------------------------------------------------------- the torch bench
@pytest.mark.slow
def test_torch_bench_runs_the_albert_student(albert_dir, tmp_path):
    from tinyglot.devices.bench import resolve_model, run_bench

    target = resolve_model(albert_dir)
    assert target.runtime == "torch" and target.fmt == "torch" and target.file_bytes > 0
    run = run_bench([albert_dir], "host-1thread", batch=[2], seq=[16], db_path=tmp_path / "t.sqlite",
                    min_queries=5, min_seconds=0, warmup=2, warmup_seconds=0, progress=False)
    assert not run.failed, run.failed
    (row,) = run.rows
    assert row["runtime"] == "torch" and row["extra"]["source_kind"] == "multistage-student" and row["p50_ms"] > 0
