"""student.init=teacher for a teacher of any vocabulary: the student's token embeddings start as the
principal projection of the teacher's embeddings of its vocabulary pieces (distill/teacher_init.py)."""

from __future__ import annotations

import json

import numpy as np
import pytest
import sentencepiece as spm
import torch

from tinyglot.distill.config import StudentConfig, get_preset
from tinyglot.distill.lealla import LeallaTrainer
from tinyglot.distill.student import Student
from tinyglot.distill.teacher_init import (VOCAB_CACHE, VOCAB_INIT_RMS_FACTOR, init_from_vocabulary,
                                          vocabulary_embeddings)
from tinyglot.encoders import load_teacher
from tinyglot.errors import TinyglotError
from tinyglot.tokenizer import Tokenizer
from tinyglot.training import seed_everything


@pytest.fixture(scope="module")
def other_tokenizer(small_pairs):
    """A student vocabulary that is not the teacher's (the teachers below use the ``tokenizer`` fixture)."""
    return Tokenizer.train([s for p in small_pairs for s in (p.x, p.en)], ["de", "fr", "ja", "ru", "en"],
                           vocab_size=700, seed=3)


def _expected_projection(teacher, tokenizer: Tokenizer, dim: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Independently of tinyglot's code: the text pieces of the SentencePiece model (``▁`` dropped;
    pad, unk and the <2xx> language tokens left out), the teacher's embeddings of them rounded to
    float16 (the cache's format), centred and projected on their top ``dim`` right singular vectors.
    Returns (ids, projection, the special ids)."""
    sp = spm.SentencePieceProcessor(model_proto=tokenizer.proto)
    ids, texts, special = [], [], []
    for i in range(sp.get_piece_size()):
        piece = sp.id_to_piece(i)
        text = piece.replace("\u2581", " ").strip()
        if sp.is_control(i) or sp.is_unknown(i) or (piece.startswith("<2") and piece.endswith(">")) or not text:
            special.append(i)
            continue
        ids.append(i)
        texts.append(text)
    rows = np.asarray(teacher.encode(texts), dtype=np.float32).astype(np.float16).astype(np.float64)
    centred = rows - rows.mean(0)
    _, _, vt = np.linalg.svd(centred, full_matrices=False)
    return np.array(ids), centred @ vt[:dim].T, np.array(special)


def _same_up_to_column_signs(ours: np.ndarray, want: np.ndarray) -> None:
    signs = np.sign((ours * want).sum(0))
    assert np.all(signs != 0)
    np.testing.assert_allclose(ours, want * signs, rtol=1e-4, atol=1e-6 * np.abs(want).max())


def _student(tokenizer: Tokenizer, hidden: int) -> Student:
    seed_everything(0)
    return Student(StudentConfig(hidden_size=hidden, num_layers=1, num_heads=2, ffn_size=32, max_len=48,
                                 vocab_size=tokenizer.vocab_size))


@pytest.mark.parametrize("teacher_fixture, hidden", [("tiny_teacher_dir", 16), ("student_dir", 48)])
def test_word_embeddings_are_the_pca_of_the_teachers_piece_embeddings(request, teacher_fixture, hidden,
                                                                      other_tokenizer, tmp_path):
    """A 64-d EMS teacher into a 16-d student (the usual case) and a 32-d student model as the teacher of a
    wider 48-d student (the columns past the teacher's width keep the random init)."""
    folder = request.getfixturevalue(teacher_fixture)
    teacher = load_teacher(str(folder))
    assert Tokenizer.load(folder / "tokenizer.model").sha256 != other_tokenizer.sha256
    vocab = vocabulary_embeddings(teacher, other_tokenizer, tmp_path / "cache", teacher.identity(), progress=False)
    model = _student(other_tokenizer, hidden)
    before = model.encoder.embeddings.word_embeddings.weight.detach().clone().numpy()
    info = init_from_vocabulary(model, vocab)
    after = model.encoder.embeddings.word_embeddings.weight.detach().numpy()

    ids, projection, special = _expected_projection(teacher, other_tokenizer, hidden)
    np.testing.assert_array_equal(vocab.ids, ids)
    k = projection.shape[1]
    assert k == min(hidden, teacher.dim) and info["columns"] == k and info["pieces"] == len(ids)
    # rescaled to VOCAB_INIT_RMS_FACTOR x the RMS of BERT's random initialisation (initializer_range 0.02)
    rms = VOCAB_INIT_RMS_FACTOR * 0.02
    scale = rms / np.sqrt(np.mean(projection ** 2))
    assert info["scale"] == pytest.approx(scale, rel=1e-5)
    _same_up_to_column_signs(after[ids, :k].astype(np.float64), projection * scale)
    assert np.sqrt(np.mean(after[ids, :k].astype(np.float64) ** 2)) == pytest.approx(rms, rel=1e-4)
    # special pieces (padding: the zero row, <unk>, language tokens) and extra columns keep the default init
    np.testing.assert_array_equal(after[special], before[special])
    np.testing.assert_array_equal(after[:, k:], before[:, k:])
    assert not after[0].any()
    # the variance kept is that of the top k singular values
    rows = np.asarray(vocab.rows, dtype=np.float64)
    sv = np.linalg.svd(rows - rows.mean(0), compute_uv=False)
    assert info["variance_kept"] == pytest.approx((sv[:k] ** 2).sum() / (sv ** 2).sum(), rel=1e-6)


def test_piece_embeddings_are_cached(tiny_teacher_dir, other_tokenizer, tmp_path):
    teacher = load_teacher(str(tiny_teacher_dir))
    first = vocabulary_embeddings(teacher, other_tokenizer, tmp_path, teacher.identity(), progress=False)
    entries = sorted((tmp_path / VOCAB_CACHE).glob("*.npy"))
    assert entries and all(path.stat().st_size for path in entries)
    stamps = {path: path.stat().st_mtime_ns for path in entries}
    again = vocabulary_embeddings(teacher, other_tokenizer, tmp_path, teacher.identity(), progress=False)
    assert {path: path.stat().st_mtime_ns for path in sorted((tmp_path / VOCAB_CACHE).glob("*.npy"))} == stamps
    np.testing.assert_array_equal(first.rows, again.rows)
    # another teacher (identity) gets its own entry
    vocabulary_embeddings(teacher, other_tokenizer, tmp_path, teacher.identity() + "-other", progress=False)
    assert len(list((tmp_path / VOCAB_CACHE).glob("*.json"))) == 2


TINY = {"train": {"max_steps": 4, "eval_every": 2, "save_every": 2, "dev_fraction": 0.1, "dev_pairs_per_lang": 30}}


def _trainer(pairs, teacher_dir, out, init, resume=False, steps=4):
    teacher = load_teacher(str(teacher_dir))
    overrides = {"train": {**TINY["train"], "max_steps": steps}, "student": {"init": init}}
    # no tokenizer given: the student trains its own vocabulary, not the teacher's
    return LeallaTrainer(get_preset("fast-tiny", overrides), out, pairs, teacher, teacher.identity(), None,
                         "fast-tiny", out.parent / "cache", vocab_size=700, resume=resume, progress=False)


def test_trainer_teacher_init_of_a_teacher_with_another_vocabulary(small_pairs, tiny_teacher_dir, tmp_path):
    trainer = _trainer(small_pairs, tiny_teacher_dir, tmp_path / "t", "teacher")
    assert trainer.init_method == "teacher-vocabulary" and trainer.meta()["init"] == "teacher-vocabulary"
    assert trainer.init_tables is None and trainer.init_vocab is not None
    model, described = trainer.initial_model()
    assert described.startswith("teacher-vocabulary (the teacher's embeddings of")
    # what init_from_vocabulary gives a freshly seeded student, and not the random init
    seed_everything(trainer.preset.train.seed)
    fresh = Student(trainer.preset.student, trainer.teacher_dim)
    random_table = fresh.encoder.embeddings.word_embeddings.weight.detach().clone()
    init_from_vocabulary(fresh, trainer.init_vocab)
    assert torch.equal(model.encoder.embeddings.word_embeddings.weight, fresh.encoder.embeddings.word_embeddings.weight)
    assert not torch.equal(model.encoder.embeddings.word_embeddings.weight, random_table)
    # the position embeddings stay random
    assert torch.equal(model.encoder.embeddings.position_embeddings.weight,
                       fresh.encoder.embeddings.position_embeddings.weight)
    result = trainer.train()
    saved = json.loads((result.student_dir / "config.json").read_text())
    assert saved["init"].startswith("teacher-vocabulary")
    assert torch.load(tmp_path / "t" / "last.pt", weights_only=True)["meta"]["init"] == "teacher-vocabulary"


def test_init_random_leaves_the_default_init(small_pairs, tiny_teacher_dir, tmp_path):
    trainer = _trainer(small_pairs, tiny_teacher_dir, tmp_path / "r", "random")
    assert trainer.init_method == "random" and trainer.init_vocab is None and trainer.init_tables is None
    assert not (tmp_path / "cache" / VOCAB_CACHE).exists()  # no teacher pass over the vocabulary
    model, described = trainer.initial_model()
    assert described == "random"
    seed_everything(trainer.preset.train.seed)
    default = Student(trainer.preset.student, trainer.teacher_dim)
    ours, want = model.state_dict(), default.state_dict()
    assert ours.keys() == want.keys() and all(torch.equal(ours[k], want[k]) for k in ours)


def test_auto_keeps_its_meaning_for_older_configs(small_pairs, tiny_teacher_dir, tmp_path):
    """auto (older configs, the lealla presets' default): the teacher's own tables, else random;
    teacher-pca: the tables only."""
    assert _trainer(small_pairs, tiny_teacher_dir, tmp_path / "a", "auto").init_method == "random"
    with pytest.raises(TinyglotError, match="teacher-pca needs a tinyglot teacher"):
        _trainer(small_pairs, tiny_teacher_dir, tmp_path / "b", "teacher-pca")
    assert get_preset("lealla-small").student.init == "auto"


def test_unknown_init_is_a_clear_error(tmp_path, capsys):
    with pytest.raises(TinyglotError, match="unknown student.init 'pca'") as err:
        get_preset("fast-tiny", {"student": {"init": "pca"}})
    assert "teacher or random" in str(err.value.fix)
    from tinyglot.app.cli import main

    with pytest.raises(SystemExit):
        main(["distill", "--init", "pca"])
    assert "invalid choice: 'pca'" in capsys.readouterr().err
    assert main(["distill", "--recipe", "dimred", "--init", "teacher", "--out", str(tmp_path / "d")]) == 2
    assert "--init belongs to --recipe lealla" in capsys.readouterr().err


def test_resume_does_not_initialise_again(small_pairs, tiny_teacher_dir, tmp_path):
    _trainer(small_pairs, tiny_teacher_dir, tmp_path / "full", "teacher").train()

    def stop(step):
        if step == 2:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        _trainer(small_pairs, tiny_teacher_dir, tmp_path / "cut", "teacher").train(on_step=stop)
    # the piece embeddings are gone and the resume asks for another init: neither is used
    import shutil

    shutil.rmtree(tmp_path / "cache" / VOCAB_CACHE)
    resumed = _trainer(small_pairs, tiny_teacher_dir, tmp_path / "cut", "random", resume=True)
    assert resumed.init_method == "teacher-vocabulary" and resumed.init_vocab is None
    assert resumed.preset.student.init == "teacher"  # the run's own setting: its meta matches last.pt
    assert not (tmp_path / "cache" / VOCAB_CACHE).exists()
    resumed.train()
    assert not (tmp_path / "cache" / VOCAB_CACHE).exists()
    a = torch.load(tmp_path / "full" / "last.pt", weights_only=True)
    b = torch.load(tmp_path / "cut" / "last.pt", weights_only=True)
    assert a["step"] == b["step"] == 4 and a["meta"] == b["meta"]
    assert all(torch.equal(a["model"][k], b["model"][k]) for k in a["model"])
    saved = json.loads((tmp_path / "cut" / "student" / "config.json").read_text())
    assert saved["init"] == "teacher-vocabulary (at the start of the run; resumed from last.pt)"


def test_resume_of_a_run_from_before_the_init_record(small_pairs, tiny_teacher_dir, tmp_path):
    """Runs written before student.init=teacher recorded init as a bool (and auto in the config)."""
    from tinyglot.training import save_checkpoint

    _trainer(small_pairs, tiny_teacher_dir, tmp_path / "old", "auto", steps=2).train()
    ck = torch.load(tmp_path / "old" / "last.pt", weights_only=True)
    assert ck["meta"]["init"] == "random"
    for name in ("last.pt", "best.pt"):  # init as the older tinyglot wrote it
        ck = torch.load(tmp_path / "old" / name, weights_only=True)
        ck["meta"]["init"] = False
        save_checkpoint(tmp_path / "old" / name, ck)
    resumed = _trainer(small_pairs, tiny_teacher_dir, tmp_path / "old", "teacher", resume=True, steps=4)
    assert resumed.init_method is False and resumed.preset.student.init == "auto"
    assert resumed.train().steps == 4


def test_cli_init_is_recorded_in_the_report(small_pairs, small_corpus, tiny_teacher_dir, tmp_path, capsys):
    from tinyglot.app.cli import main
    from tinyglot.data.embedded import write_jsonl

    out, test = tmp_path / "run", tmp_path / "test.jsonl"
    write_jsonl(test, [p for lang in ("de", "ja") for p in [q for q in small_pairs if q.lang == lang][-30:]])
    code = main(["distill", "--student", "fast-tiny", "--teacher", str(tiny_teacher_dir), "--data", str(small_corpus),
                 "--test-data", str(test), "--out", str(out), "--no-progress", "--init", "random",
                 "--set", "train.max_steps=2",
                 "--set", "student.init=teacher", "--cache-dir", str(tmp_path / "cache")])
    assert code == 0, capsys.readouterr()
    report = json.loads((out / "report.json").read_text())
    assert report["init"] == "random"  # --init over --set student.init
    assert "| init | random |" in (out / "report.md").read_text()


def test_a_given_vocabulary_is_the_students(small_pairs, tiny_teacher_dir, other_tokenizer, tmp_path):
    """``lealla_trainer(tokenizer=FILE)`` (the pipeline's ``distill.tokenizer``): the student takes that
    vocabulary, where it would otherwise reuse its tinyglot teacher's own."""
    from tinyglot.distill.run import lealla_trainer

    given = other_tokenizer.save(tmp_path / "given.model")
    own = Tokenizer.load(tiny_teacher_dir / "tokenizer.model")
    assert own.sha256 != other_tokenizer.sha256
    for out, tokenizer, expected in ((tmp_path / "given", given, other_tokenizer), (tmp_path / "own", None, own)):
        trainer = lealla_trainer(get_preset("fast-tiny", TINY), "fast-tiny", str(tiny_teacher_dir), small_pairs, out,
                                 tmp_path / "cache", progress=False, tokenizer=tokenizer)
        assert trainer.tokenizer.sha256 == expected.sha256
        assert Tokenizer.load(out / "tokenizer.model").sha256 == expected.sha256
        assert trainer.preset.student.vocab_size == expected.vocab_size
