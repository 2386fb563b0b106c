"""LEALLA students with a factorised token table (student.embedding_size): ALBERT's vocabulary ->
embedding_size -> hidden_size, each layer its own weights; trained, saved, loaded and exported like a
BertModel student."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

import tinyglot
from tinyglot.distill.config import StudentConfig
from tinyglot.distill.student import Student, load_student_model
from tinyglot.distill.teacher_init import VocabularyEmbeddings, init_from_vocabulary
from tinyglot.errors import TinyglotError

SENTENCES = ["Datei öffnen", "open file", "Der Hund schläft im Garten.", "Le chien dort dans le jardin.",
             "Сохранить документ", "", "ok"]


def _cfg(vocab_size: int, **extra) -> StudentConfig:
    return StudentConfig(hidden_size=32, num_layers=2, num_heads=2, ffn_size=64, max_len=48, dropout=0.0,
                         vocab_size=vocab_size, embedding_size=16, **extra)


@pytest.fixture(scope="module")
def factorised_run(small_pairs, tiny_teacher_dir, tmp_path_factory):
    """lealla-tiny with a 16-wide table, distilled for 40 steps from the tiny EMS teacher (which shares its
    vocabulary, so the table starts as the teacher's own tables on their top 16 principal directions)."""
    from tinyglot.distill.config import get_preset
    from tinyglot.distill.lealla import LeallaTrainer
    from tinyglot.distill.run import teacher_tokenizer
    from tinyglot.encoders import load_encoder

    teacher = load_encoder(str(tiny_teacher_dir))
    out = tmp_path_factory.mktemp("fs") / "run"
    preset = get_preset("lealla-tiny", {"student": {"embedding_size": 16, "dropout": 0.0},
                                        "train": {"max_steps": 40, "eval_every": 20, "save_every": 20,
                                                  "dev_fraction": 0.1, "dev_pairs_per_lang": 30}})
    trainer = LeallaTrainer(preset, out, small_pairs, teacher, teacher.identity(),
                            teacher_tokenizer(str(tiny_teacher_dir)), "lealla-tiny", out / "cache", progress=False)
    untrained = trainer.evaluate(trainer.initial_model()[0]).primary_metric
    return trainer.train(), untrained


@pytest.fixture(scope="module")
def factorised_dir(factorised_run):
    return factorised_run[0].student_dir


def test_a_factorised_student_learns_from_the_teachers_tables(factorised_run):
    result, untrained = factorised_run
    assert result.best_dev_p1 > untrained, (untrained, result.best_dev_p1)
    cfg = json.loads((result.student_dir / "config.json").read_text())
    assert cfg["student"]["embedding_size"] == 16 and "teacher" in cfg["init"]


def test_the_table_is_narrow_and_no_layer_is_shared(factorised_dir):
    model, tok, cfg = load_student_model(factorised_dir)
    enc = model.encoder
    assert type(enc).__name__ == "AlbertModel"
    assert tuple(enc.embeddings.word_embeddings.weight.shape) == (tok.vocab_size, 16)
    assert tuple(enc.encoder.embedding_hidden_mapping_in.weight.shape) == (32, 16)
    groups = enc.encoder.albert_layer_groups
    assert len(groups) == 2 and not torch.equal(groups[0].albert_layers[0].ffn.weight,
                                                groups[1].albert_layers[0].ffn.weight)
    # the same shape of BertModel holds 16 more columns of every piece, position, the type and LayerNorm
    bert = Student(StudentConfig(**{**cfg["student"], "embedding_size": 0}))
    counts, bert_counts = cfg["parameters"], bert.parameter_counts()
    assert counts["total"] == sum(p.numel() for p in enc.parameters())
    assert bert_counts["embedding"] - counts["embedding"] == (tok.vocab_size + 48 + 1 + 2) * 16
    assert counts["encoder"] - bert_counts["encoder"] == 32 * 16 + 32  # the map to the hidden size
    # a saved student encodes as the module it was saved from
    fresh = tinyglot.load(factorised_dir).encode(SENTENCES)
    said = [i for i, s in enumerate(SENTENCES) if s]
    assert fresh.shape == (len(SENTENCES), 32) and np.allclose(np.linalg.norm(fresh[said], axis=1), 1, atol=1e-5)
    again = tinyglot.load(factorised_dir).encode(SENTENCES[::-1])[::-1]
    assert np.allclose(fresh, again, atol=1e-5)


def test_an_edited_config_is_a_clear_error(factorised_dir, tmp_path):
    import shutil

    bad = tmp_path / "edited"
    shutil.copytree(factorised_dir, bad)
    cfg = json.loads((bad / "config.json").read_text())
    cfg["student"]["embedding_size"] = 8
    (bad / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(TinyglotError, match="embedding_size is 16, but the model's config.json says 8"):
        load_student_model(bad)
    cfg["student"]["embedding_size"] = 0  # a BertModel config over ALBERT's weights
    (bad / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(TinyglotError, match="model_type is 'albert', but the model's config.json says 'bert'"):
        load_student_model(bad)


@pytest.mark.parametrize("extra, message", [({"embedding_size": 64}, "embedding_size must be from 0 to hidden_size"),
                                            ({"embedding_size": -1}, "embedding_size must be from 0 to hidden_size"),
                                            ({"init": "teacher-layers"}, "cannot start a factorised one")])
def test_bad_shapes_are_refused(extra, message):
    cfg = _cfg(100)
    for key, value in extra.items():
        setattr(cfg, key, value)
    with pytest.raises(TinyglotError, match=message):
        Student(cfg)


def test_teacher_start_keeps_the_teachers_geometry_through_the_map(tokenizer):
    """The table starts as the teacher's piece embeddings on their top embedding_size principal directions;
    the map to the hidden size is a scaled isometry, so the first layer sees the same geometry."""
    torch.manual_seed(0)
    model = Student(_cfg(tokenizer.vocab_size))
    rng = np.random.default_rng(0)
    ids = np.arange(5, 405)
    rows = rng.standard_normal((len(ids), 24)).astype(np.float32) * np.linspace(3, 0.1, 24, dtype=np.float32)
    info = init_from_vocabulary(model, VocabularyEmbeddings(ids, [str(i) for i in ids], rows))
    assert info["columns"] == 16 and 0.9 < info["variance_kept"] < 1
    table = model.encoder.embeddings.word_embeddings.weight.detach()[torch.from_numpy(ids)]
    mapping = model.encoder.encoder.embedding_hidden_mapping_in
    mapped = mapping(table).detach()
    assert torch.allclose(mapped @ mapped.T, 2 * table @ table.T, rtol=1e-4, atol=1e-6)
    assert float(mapping.bias.detach().abs().max()) == 0


def test_onnx_text_bundle_with_a_four_bit_table_matches_torch(factorised_dir, tmp_path):
    """The release's format: the narrow table as GatherBlockQuantized, the map int8 beside the layers,
    parity gated against the torch student."""
    from tinyglot.export.onnx_text import export_onnx_text
    from tinyglot.export.quantize import graph_stats

    got = export_onnx_text(factorised_dir, tmp_path / "text-int4", "dynamic-int4-embeddings", max_sentences=40)
    assert got.parity.passed, got.parity.failures
    stats = graph_stats(got.out / "model.onnx")
    assert stats["ops"]["GatherBlockQuantized"] == 1 and stats["weights"]["int4"] > 0
    ref = tinyglot.load(factorised_dir).encode(SENTENCES)
    ours = tinyglot.load(got.out).encode(SENTENCES)
    said = [i for i, s in enumerate(SENTENCES) if s]  # the empty string: the zero vector in both
    assert np.min(np.sum(ref[said] * ours[said], axis=1)) > 0.98 and not ours[SENTENCES.index("")].any()


def test_onnx_fp32_export_equals_torch(factorised_dir, tmp_path):
    from tinyglot.export.onnx import export_onnx

    got = export_onnx(factorised_dir, tmp_path / "onnx", "none", max_sentences=40)
    assert got.parity.passed and got.parity.mean_cosine > 0.99999
    ref = tinyglot.load(factorised_dir).encode(SENTENCES)
    assert np.allclose(tinyglot.load(got.out).encode(SENTENCES), ref, atol=1e-5)


@pytest.mark.slow
@pytest.mark.parametrize("fmt", ["tflite", "savedmodel"])
def test_phone_and_tf_hub_exports_equal_torch(factorised_dir, tmp_path, fmt):
    """TFLite (litert-torch) and the TF-Hub SavedModel (TFAlbertModel from the torch weights)."""
    if fmt == "tflite":
        pytest.importorskip("litert_torch")
        from tinyglot.export.tflite import export_tflite as export
    else:
        pytest.importorskip("tensorflow_hub")
        from tinyglot.export.savedmodel import export_savedmodel as export
    got = export(factorised_dir, tmp_path / fmt, "none", max_sentences=40)
    assert got.parity.passed and got.parity.mean_cosine > 0.9999
    said = [i for i, s in enumerate(SENTENCES) if s]
    ref = tinyglot.load(factorised_dir).encode(SENTENCES)[said]
    assert np.min(np.sum(tinyglot.load(got.out).encode([SENTENCES[i] for i in said]) * ref, axis=1)) > 0.9999
