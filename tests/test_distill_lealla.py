"""A tiny LEALLA distillation end to end, from a real tinyglot teacher."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest
import torch

import tinyglot
from tinyglot.distill.config import get_preset
from tinyglot.distill.lealla import LeallaTrainer
from tinyglot.distill.student import load_student_model
from tinyglot.encoders import load_encoder as load_teacher_encoder
from tinyglot.errors import CheckpointError, TinyglotError

TINY = {"train": {"max_steps": 40, "eval_every": 20, "save_every": 20, "dev_fraction": 0.1,
                  "dev_pairs_per_lang": 30}}


def _trainer(small_pairs, teacher_dir, out, overrides=None, resume=False, cache=None):
    teacher = load_teacher_encoder(str(teacher_dir))
    from tinyglot.distill.run import teacher_tokenizer

    merged = {k: dict(v) for k, v in TINY.items()}
    for section, values in (overrides or {}).items():
        merged.setdefault(section, {}).update(values)
    return LeallaTrainer(get_preset("lealla-tiny", merged), out, small_pairs, teacher, teacher.identity(),
                         teacher_tokenizer(str(teacher_dir)), "lealla-tiny", cache or out / "cache",
                         resume=resume, progress=False)


def _losses(run):
    return [r for r in map(json.loads, (run / "metrics.jsonl").read_text().splitlines()) if "loss" in r]


def test_tiny_distillation_learns_and_saves_a_loadable_student(small_pairs, tiny_teacher_dir, tmp_path):
    trainer = _trainer(small_pairs, tiny_teacher_dir, tmp_path / "run")
    untrained = trainer.evaluate(trainer.initial_model()[0]).primary_metric
    result = trainer.train()
    logs = _losses(tmp_path / "run")
    assert result.best_dev_p1 > untrained, (untrained, result.best_dev_p1)  # it learnt (from the teacher-derived start)
    assert all(r["ams"] > 0 and r["ld"] > 0 for r in logs)
    enc = tinyglot.load(result.student_dir)
    emb = enc.encode(["Datei öffnen", "open file"])
    assert emb.shape == (2, 32) and np.allclose(np.linalg.norm(emb, axis=1), 1, atol=1e-5)
    model, tok, cfg = load_student_model(result.student_dir)
    # the student reuses the teacher's vocabulary and is a transformers BertModel with 2 layers
    from tinyglot.tokenizer import Tokenizer

    assert tok.sha256 == Tokenizer.load(tiny_teacher_dir / "tokenizer.model").sha256
    assert type(model.encoder).__name__ == "BertModel" and len(model.encoder.encoder.layer) == 2
    assert cfg["parameters"]["total"] == sum(p.numel() for p in model.encoder.parameters())


@pytest.mark.parametrize("switch", ["ams", "fd", "ld"])
def test_each_loss_can_be_switched_off(small_pairs, tiny_teacher_dir, tmp_path, switch):
    trainer = _trainer(small_pairs, tiny_teacher_dir, tmp_path / "r", {"loss": {switch: False},
                                                                       "train": {"max_steps": 3}})
    trainer.train()
    lc = trainer.preset.loss
    for r in _losses(tmp_path / "r"):
        assert r[switch] == 0.0
        # the optimised loss is exactly the weighted sum of the parts that are on
        assert r["loss"] == pytest.approx(lc.alpha * r["ams"] + lc.beta * r["fd"] + lc.gamma * r["ld"], rel=1e-5)
        assert all(r[k] > 0 for k in ("ams", "fd", "ld") if k != switch)


@pytest.mark.parametrize("sparse", [False, True])
def test_resume_after_interrupt_matches(small_pairs, tiny_teacher_dir, tmp_path, sparse):
    cache, over = tmp_path / "cache", {"train": {"sparse_embeddings": sparse}}
    _trainer(small_pairs, tiny_teacher_dir, tmp_path / "full", over, cache=cache).train()

    def stop(step):
        if step == 25:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        _trainer(small_pairs, tiny_teacher_dir, tmp_path / "cut", over, cache=cache).train(on_step=stop)
    _trainer(small_pairs, tiny_teacher_dir, tmp_path / "cut", over, resume=True, cache=cache).train()
    full = torch.load(tmp_path / "full" / "last.pt", weights_only=True)
    a, b = full["model"], torch.load(tmp_path / "cut" / "last.pt", weights_only=True)["model"]
    assert all(torch.equal(a[k], b[k]) for k in a)
    # the rows of pieces no batch held: AdamW's weight decay alone, the same factor for every one of them
    # (dense AdamW steps them all; the sparse table's rows catch up at the checkpoint)
    key = "encoder.embeddings.word_embeddings.weight"
    start = _trainer(small_pairs, tiny_teacher_dir, tmp_path / "start", over, cache=cache).initial_model()[0]
    seen = next(s["exp_avg_sq"] for s in full["optimizer"]["state"].values()
                if s["exp_avg_sq"].shape == a[key].shape).abs().sum(dim=1) > 0
    unseen_start, unseen_end = start.state_dict()[key][~seen], a[key][~seen]
    assert 0 < int((~seen).sum()) < len(seen) and unseen_start.abs().sum() > 0
    factor = float(unseen_end.flatten()[0] / unseen_start.flatten()[0])
    assert 0.99 < factor < 1 and torch.allclose(unseen_end, unseen_start * factor, rtol=1e-5, atol=1e-9)
    # byte-reproducible: the resumed checkpoint is the uninterrupted one, byte for byte
    assert (tmp_path / "full" / "last.pt").read_bytes() == (tmp_path / "cut" / "last.pt").read_bytes()


def test_bad_inputs(small_pairs, tiny_teacher_dir, tmp_path):
    with pytest.raises(TinyglotError, match="larger than the teacher"):
        _trainer(small_pairs, tiny_teacher_dir, tmp_path / "a", {"student": {"hidden_size": 128}})
    result = _trainer(small_pairs, tiny_teacher_dir, tmp_path / "b", {"train": {"max_steps": 2}}).train()
    # a tokenizer that does not belong to the student is refused
    from tinyglot.tokenizer import Tokenizer

    other = Tokenizer.train([p.x for p in small_pairs[:300]], ["de", "en"], vocab_size=300)
    other.save(result.student_dir / "tokenizer.model")
    with pytest.raises(CheckpointError, match="does not match"):
        load_student_model(result.student_dir)


@pytest.mark.slow
def test_distill_command_end_to_end(small_corpus, tiny_teacher_dir, tmp_path):
    out = tmp_path / "distill"
    env_home = {"TINYGLOT_HOME": str(tmp_path / "home")}
    import os

    cmd = [sys.executable, "-c", "from tinyglot.app.cli import distill_main; raise SystemExit(distill_main())",
           "--student", "lealla-tiny", "--teacher", str(tiny_teacher_dir), "--data", str(small_corpus),
           "--out", str(out), "--no-progress", "--set", "train.max_steps=20", "--set", "train.threads=1"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600, env={**os.environ, **env_home})
    assert proc.returncode == 0, proc.stderr
    # no import-time noise from third-party packages (torchao's triton warning, torch pytree notices)
    assert "_pytree" not in proc.stderr and "triton" not in proc.stderr, proc.stderr[-2000:]
    report = json.loads((out / "report.json").read_text())
    assert [r["model"] for r in report["results"]] == ["student", "teacher", "tfidf"]
    assert report["student_dim"] == 32 and report["teacher_dim"] == 64
    assert report["retention"] > 0
    md = (out / "report.md").read_text()
    assert "| **average** |" in md and "Retention" in md
    assert list((tmp_path / "home" / "teacher-cache").glob("*.npy"))


def test_dimension_reduction_reference(small_corpus, tiny_teacher_dir, tmp_path):
    from tinyglot.distill.run import run_dimred

    report = run_dimred(16, teacher=str(tiny_teacher_dir), data=small_corpus, out=tmp_path / "dr",
                        progress=False, cache_dir=tmp_path / "cache", steps=60, say=lambda m: None)
    assert report["student_dim"] == 16 and report["teacher_dim"] == 64
    enc = tinyglot.load(tmp_path / "dr" / "model")
    emb = enc.encode(["Datei öffnen", "open file"])
    assert emb.shape == (2, 16) and np.allclose(np.linalg.norm(emb, axis=1), 1, atol=1e-5)
    with pytest.raises(TinyglotError, match="not smaller"):
        run_dimred(64, teacher=str(tiny_teacher_dir), data=small_corpus, out=tmp_path / "dr2",
                   progress=False, cache_dir=tmp_path / "cache", steps=1, say=lambda m: None)


def test_student_init_from_teacher_pca(tiny_teacher_dir, tokenizer):
    """teacher-pca copies the teacher's token embeddings projected on their principal directions:
    at full rank the projection keeps every pairwise distance, below it the variance kept is the
    share of the top eigenvalues (computed here independently with numpy)."""
    from tinyglot.distill.config import StudentConfig
    from tinyglot.distill.student import Student, init_from_teacher_pca, teacher_input_embeddings

    teacher = load_teacher_encoder(str(tiny_teacher_dir))
    tables = teacher_input_embeddings(teacher, tokenizer)
    assert tables is not None
    word = tables["word_embeddings"].numpy().astype(np.float64)
    centred = word - word.mean(0)
    eig = np.sort(np.linalg.eigvalsh(centred.T @ centred))[::-1]
    full = word.shape[1]
    for hidden in (full, full // 2):
        cfg = StudentConfig(hidden_size=hidden, num_layers=1, num_heads=2, ffn_size=32, max_len=48,
                            vocab_size=tokenizer.vocab_size)
        student = Student(cfg)
        kept = init_from_teacher_pca(student, tables)
        assert kept == pytest.approx(eig[:hidden].sum() / eig.sum(), rel=1e-6)
        ours = student.encoder.embeddings.word_embeddings.weight.detach().numpy().astype(np.float64)
        if hidden == full:
            np.testing.assert_allclose(ours @ ours.T, centred @ centred.T, atol=1e-5)
        else:  # the leading principal component carries the largest variance
            assert ours.var(0).max() == pytest.approx(eig[0] / len(word), rel=1e-4)


def test_student_init_modes(small_pairs, tiny_teacher_dir, tmp_path):
    from tinyglot.tokenizer import Tokenizer

    trainer = _trainer(small_pairs, tiny_teacher_dir, tmp_path / "auto", {"student": {"init": "auto"}})
    assert trainer.init_tables is not None  # a tinyglot teacher sharing the student's vocabulary
    assert _trainer(small_pairs, tiny_teacher_dir, tmp_path / "r", {"student": {"init": "random"}}).init_tables is None
    other = Tokenizer.train([p.x for p in small_pairs] + [p.en for p in small_pairs], ["de", "fr", "ja", "ru", "en"],
                            vocab_size=1200, seed=1)
    from tinyglot.distill.student import teacher_input_embeddings

    assert teacher_input_embeddings(load_teacher_encoder(str(tiny_teacher_dir)), other) is None
    with pytest.raises(TinyglotError, match="student.init"):
        get_preset("lealla-tiny", {"student": {"init": "pca"}})


def test_fd_head_least_squares_start(small_pairs, tiny_teacher_dir, tmp_path):
    from tinyglot.distill.losses import feature_distillation
    from tinyglot.distill.student import Student

    trainer = _trainer(small_pairs, tiny_teacher_dir, tmp_path / "r", {"train": {"max_steps": 1}})
    torch.manual_seed(0)
    model = Student(trainer.preset.student, trainer.teacher_dim)
    model.eval()
    with torch.no_grad():
        batches = [trainer._batch(model, i) for i in range(3)]
        random_fd = [float(feature_distillation(xt, yt, model.fd_proj(xs), model.fd_proj(ys)))
                     for xs, ys, xt, yt in batches]
    assert trainer.fit_fd_head(model, batches=3).startswith("least-squares start on")
    # f is the least-squares map from the student's embeddings (both sides) to the teacher's
    src = torch.cat([torch.cat([b[0], b[1]]) for b in batches]).double().numpy()
    dst = torch.cat([torch.cat([b[2], b[3]]) for b in batches]).double().numpy()
    w, *_ = np.linalg.lstsq(np.hstack([src, np.ones((len(src), 1))]), dst, rcond=None)
    fit = model.fd_proj
    ours = np.hstack([src, np.ones((len(src), 1))]) @ np.vstack([fit.weight.detach().double().numpy().T,
                                                                  fit.bias.detach().double().numpy()[None]])
    best = np.hstack([src, np.ones((len(src), 1))]) @ w
    assert np.abs(ours - dst).mean() == pytest.approx(np.abs(best - dst).mean(), rel=0.05)
    model.eval()
    with torch.no_grad():
        fitted_fd = [float(feature_distillation(xt, yt, model.fd_proj(xs), model.fd_proj(ys)))
                     for xs, ys, xt, yt in batches]
    assert all(f < r / 2 for f, r in zip(fitted_fd, random_fd, strict=True))


def test_fd_head_init_is_recorded(small_pairs, tiny_teacher_dir, tmp_path):
    a = _trainer(small_pairs, tiny_teacher_dir, tmp_path / "a", {"train": {"max_steps": 2}}).train()
    assert json.loads((a.student_dir / "config.json").read_text())["fd_head_init"].startswith("least-squares")


def test_gradient_checkpointing_of_long_batches_gives_the_same_training(small_pairs, tiny_teacher_dir, tmp_path):
    cache = tmp_path / "cache"
    states = {}
    for name, limit in (("never", 0), ("always", 1)):
        trainer = _trainer(small_pairs, tiny_teacher_dir, tmp_path / name,
                           {"train": {"max_steps": 4, "checkpoint_above_tokens": limit}}, cache=cache)
        trainer.train()
        states[name] = torch.load(tmp_path / name / "last.pt", weights_only=True)["model"]
    from tinyglot.distill.student import Student

    model = Student(trainer.preset.student, trainer.teacher_dim)
    trainer._batch(model, 0)  # limit 1: every batch is checkpointed ...
    assert model.encoder.is_gradient_checkpointing
    trainer.preset.train.checkpoint_above_tokens = 10**9  # ... and none above a huge limit
    trainer._batch(model, 0)
    assert not model.encoder.is_gradient_checkpointing
    # with dropout on: the recomputed forward pass replays the same random masks
    assert all(torch.allclose(states["never"][k], states["always"][k], atol=1e-6) for k in states["never"])
    with pytest.raises(TinyglotError, match="checkpoint_above_tokens"):
        get_preset("lealla-tiny", {"train": {"checkpoint_above_tokens": -1}})


def test_fast_preset_english_targets_and_output_projection(small_pairs, tiny_teacher_dir, tmp_path):
    """fast-tiny: a shallow wide student with a final projection; loss.fd_target=english embeds only the
    distinct English sentences with the teacher and aims both sides of a pair at the English one."""
    from tinyglot.distill.run import teacher_tokenizer

    teacher = load_teacher_encoder(str(tiny_teacher_dir))
    preset = get_preset("fast-tiny", {"train": {"max_steps": 6, "eval_every": 3, "save_every": 3}})
    assert preset.loss.fd_target == "english" and preset.student.output_dim == 32
    trainer = LeallaTrainer(preset, tmp_path / "run", small_pairs, teacher, teacher.identity(),
                            teacher_tokenizer(str(tiny_teacher_dir)), "fast-tiny", tmp_path / "cache",
                            progress=False)
    english = {p.en for ps in trainer.data.pairs for p in ps}
    assert trainer.t_emb.shape == (len(english), teacher.dim)  # no row for any non-English side
    assert all(x is e for x, e in zip(trainer.x_row, trainer.en_row, strict=True))
    result = trainer.train()
    model, _, cfg = load_student_model(result.student_dir)
    assert cfg["dim"] == 32 and cfg["student"]["hidden_size"] == 48 and len(model.encoder.encoder.layer) == 1
    assert cfg["parameters"]["output"] == 48 * 32 + 32
    emb = tinyglot.load(result.student_dir).encode(["Datei öffnen", "open file"])
    assert emb.shape == (2, 32) and np.allclose(np.linalg.norm(emb, axis=1), 1, atol=1e-5)
    # the projection is part of the saved student: a reload gives the same embeddings
    again = tinyglot.load(result.student_dir).encode(["Datei öffnen", "open file"])
    np.testing.assert_array_equal(emb, again)


@pytest.mark.parametrize("name", ["fast-mini", "fast-small", "fast-base"])
def test_fast_presets_are_shallow_and_train_at_tiny_width(name, small_pairs, tiny_teacher_dir, tmp_path):
    """Each named fast preset: its depth, English targets and no checkpointing, trained for a few steps
    at a tiny width (the real widths train in the benchmarks and docs/results.md)."""
    from tinyglot.distill.run import teacher_tokenizer

    real = get_preset(name)
    assert real.student.num_layers <= 4 and real.loss.fd_target == "english"
    assert real.train.checkpoint_above_tokens == 0
    preset = get_preset(name, {"student": {"hidden_size": 32, "num_heads": 2, "ffn_size": 64, "max_len": 48},
                               "train": {"max_steps": 3, "batch_size": 16, "eval_every": 3, "save_every": 3,
                                         "dev_fraction": 0.1, "dev_pairs_per_lang": 20}})
    teacher = load_teacher_encoder(str(tiny_teacher_dir))
    result = LeallaTrainer(preset, tmp_path / "run", small_pairs, teacher, teacher.identity(),
                           teacher_tokenizer(str(tiny_teacher_dir)), name, tmp_path / "cache",
                           progress=False).train()
    model, _, cfg = load_student_model(result.student_dir)
    assert len(model.encoder.encoder.layer) == real.student.num_layers and cfg["dim"] == 32
    assert result.steps == 3 and result.best_dev_p1 is not None


def test_unknown_fd_target_is_refused():
    with pytest.raises(TinyglotError, match="fd_target"):
        get_preset("fast-tiny", {"loss": {"fd_target": "both"}})
    with pytest.raises(TinyglotError, match="output_dim"):
        get_preset("fast-tiny", {"student": {"output_dim": -1}})
