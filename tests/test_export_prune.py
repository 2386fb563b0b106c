"""Vocabulary pruning: a new SentencePiece model with the kept pieces (same segmentation), sliced
embeddings, P@1 before/after, and export of the pruned student (ONNX through the CLI, TFLite)."""

from __future__ import annotations

import argparse
import json

import numpy as np
import pytest

import torch

import tinyglot
from tinyglot.errors import TinyglotError
from tinyglot.export.prune import char_script, prune_student, prune_tokenizer, pruning_sentences

N = 20


@pytest.fixture(scope="module")
def pruned(student_dir, tmp_path_factory):
    return prune_student(student_dir, tmp_path_factory.mktemp("pruned") / "de-fr", ["de", "fr"])


def test_pruning_shrinks_the_embedding_table_and_keeps_p1(pruned, student_dir, tokenizer):
    from tinyglot.distill.student import load_student_model

    assert pruned.languages == ["de", "en", "fr"] and pruned.scripts == ["LATIN"]
    assert pruned.vocab_after < 0.7 * pruned.vocab_before
    assert pruned.embedding_params_after == pruned.vocab_after * 32
    assert pruned.weights_bytes_after < 0.8 * pruned.weights_bytes_before
    assert set(pruned.p1_before) == {"de", "fr"} and pruned.passed
    for lang in pruned.p1_before:
        assert pruned.p1_before[lang] - pruned.p1_after[lang] <= 0.5
    model, tok, cfg = load_student_model(pruned.out)
    assert tok.vocab_size == pruned.vocab_after == model.encoder.config.vocab_size == cfg["student"]["vocab_size"]
    assert model.encoder.get_input_embeddings().weight.shape == (pruned.vocab_after, 32)
    assert cfg["pruning"]["vocab_after"] == pruned.vocab_after
    assert tok.languages == ("de", "en", "fr") and tok.pad_id == 0 and tok.piece(1) == tokenizer.piece(1)
    # rows follow their pieces
    old, _, _ = load_student_model(student_dir)
    old_w, new_w = old.encoder.get_input_embeddings().weight, model.encoder.get_input_embeddings().weight
    for piece in ("▁the", "▁die", "▁le", tok.piece(5), "<2de>"):
        assert torch.equal(new_w[tok.token_id(piece)], old_w[tokenizer.token_id(piece)])


def test_pruned_student_segments_and_embeds_like_the_original(pruned, student_dir, tokenizer):
    from tinyglot.data.embedded import load_pairs

    sentences = [s for p in load_pairs(None) if p.lang in ("de", "fr") for s in (p.x, p.en)][:400]
    new = tinyglot.load(pruned.out)
    old = tinyglot.load(student_dir)
    for s in sentences[:200]:
        assert [tokenizer.piece(i) for i in tokenizer.tokenize(s)] == \
            [new.tokenizer.piece(i) for i in new.tokenizer.tokenize(s)]
    assert np.abs(new.encode(sentences[:64]) - old.encode(sentences[:64])).max() < 1e-5
    # a dropped language: Japanese has no pieces left but stays encodable (unknowns/single chars)
    assert "ja" not in new.tokenizer.languages
    assert new.encode(["ファイルを開く"]).shape == (1, 32)


def test_a_p1_drop_beyond_the_limit_fails_loudly(student_dir, tmp_path):
    out = tmp_path / "strict"
    with pytest.raises(TinyglotError, match="P@1"):
        prune_student(student_dir, out, ["fr"], max_p1_drop=-1.0)  # any result "drops" > -1 point
    assert not (out / "config.json").exists()


def test_corpus_file_and_errors(student_dir, small_corpus, tmp_path, tokenizer):
    result = prune_student(student_dir, tmp_path / "ja", ["ja"], corpus=small_corpus, max_p1_drop=100)
    assert result.languages == ["en", "ja"] and result.corpus == str(small_corpus)
    assert {"CJK", "HIRAGANA", "KATAKANA"} <= set(result.scripts)
    text = tmp_path / "de.txt"
    text.write_text("Datei öffnen\nDas ist ein Satz.\n\n", encoding="utf-8")
    sentences, langs, _ = pruning_sentences(["de"], text)
    assert sentences == ["Datei öffnen", "Das ist ein Satz."] and langs == ["de"]
    with pytest.raises(TinyglotError, match="needs --languages"):
        pruning_sentences(None, None)
    with pytest.raises(TinyglotError, match="no xx|has no"):
        prune_student(student_dir, tmp_path / "x", ["nl"])
    assert char_script("a") == "LATIN" and char_script("ж") == "CYRILLIC" and char_script("7") == "COMMON"


def test_bpe_vocabularies_are_refused(small_pairs):
    from tinyglot.tokenizer import Tokenizer

    bpe = Tokenizer.train([p.x for p in small_pairs[:300]], ["de"], vocab_size=300, model_type="bpe")
    with pytest.raises(TinyglotError, match="unigram"):
        prune_tokenizer(bpe, ["Hallo Welt"], ["de"])


def _cli(argv):
    from tinyglot.app.cli import run
    from tinyglot.app.commands.export import register

    def factory():
        parser = argparse.ArgumentParser(prog="tinyglot")
        register(parser.add_subparsers(dest="command", required=True))
        return parser

    return run(argv, factory)


def test_cli_prune_and_export_onnx(student_dir, tmp_path, capsys):
    pytest.importorskip("onnxruntime")
    from tinyglot.export.onnx import OnnxEncoder

    out = tmp_path / "onnx-de-fr"
    assert _cli(["export", "--model", str(student_dir), "--format", "onnx", "--prune-vocab", "--languages", "de,fr",
                 "--out", str(out), "--max-sentences", str(N)]) == 0
    printed = capsys.readouterr().out
    assert "vocabulary pruning" in printed and "P@1 de" in printed
    cfg = json.loads((out / "config.json").read_text())
    parity = json.loads((out / "parity.json").read_text())
    assert cfg["pruning"]["vocab_after"] < cfg["pruning"]["vocab_before"] == 1500
    assert parity["pruning"]["passed"] and parity["passed"]
    assert cfg["languages"] == ["de", "en", "fr"] and {r["lang"] for r in parity["languages"]} == {"de", "fr"}
    assert (tmp_path / "onnx-de-fr-student" / "config.json").exists()
    enc = tinyglot.load(out)
    assert isinstance(enc, OnnxEncoder) and enc.encode(["Datei öffnen"]).shape == (1, 32)
    # --languages without --prune-vocab, --prune-vocab without languages
    assert _cli(["export", "--model", str(student_dir), "--languages", "de", "--out", str(tmp_path / "o1")]) == 2
    assert "add --prune-vocab" in capsys.readouterr().err
    assert _cli(["export", "--model", str(student_dir), "--prune-vocab", "--out", str(tmp_path / "o2")]) == 2
    assert "needs --languages" in capsys.readouterr().err


@pytest.mark.slow
def test_prune_and_export_tflite(student_dir, tmp_path):
    pytest.importorskip("litert_torch")
    pytest.importorskip("ai_edge_litert.interpreter")
    from tinyglot.export.prune import prune_and_export

    exported, result = prune_and_export(student_dir, tmp_path / "tfl", "tflite", languages=["de"],
                                        quantization="dynamic", buckets=(48,), batch_sizes=(4,), max_sentences=N)
    assert exported.parity.passed and result.vocab_after < result.vocab_before
    cfg = json.loads((tmp_path / "tfl" / "config.json").read_text())
    assert cfg["pruning"]["languages"] == ["de", "en"] and cfg["format"] == "tflite"
    assert "pruning" in json.loads((tmp_path / "tfl" / "parity.json").read_text())
    assert tinyglot.load(tmp_path / "tfl").encode(["Hallo Welt"]).shape == (1, 32)
