"""Real tiny training runs: loss falls, resume equals an uninterrupted run, checkpoints round-trip."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest
import torch

from tinyglot.errors import CheckpointError, TinyglotError
from tinyglot.teacher import TeacherTrainer, get_preset, load_model, load_teacher

TINY = {"train": {"max_steps": 40, "eval_every": 20, "save_every": 20, "batch_size": 16,
                  "warmup_steps": 5, "dev_pairs_per_lang": 30, "dev_fraction": 0.1}}


def _train(pairs, tokenizer, out, overrides=None, resume=False, on_step=None):
    merged = {k: dict(v) for k, v in TINY.items()}
    for section, values in (overrides or {}).items():
        merged.setdefault(section, {}).update(values)
    trainer = TeacherTrainer(get_preset("ems-tiny", merged), out, pairs, tokenizer, "ems-tiny",
                             resume=resume, progress=False)
    return trainer.train(on_step=on_step)


def _losses(run):
    return [r["loss"] for r in map(json.loads, (run / "metrics.jsonl").read_text().splitlines()) if "loss" in r]


def test_tiny_run_loss_falls_and_writes_a_loadable_teacher(small_pairs, tokenizer, tmp_path):
    result = _train(small_pairs, tokenizer, tmp_path / "run", {"train": {"max_steps": 60}})
    losses = _losses(tmp_path / "run")
    assert losses[-1] < 0.8 * losses[0], losses
    assert result.best_dev_p1 is not None and result.best_dev_p1 > 0.1
    for name in ("config.json", "tokenizer.model", "last.pt", "best.pt", "metrics.jsonl"):
        assert (tmp_path / "run" / name).exists()
    import tinyglot

    enc = tinyglot.load(tmp_path / "run")
    emb = enc.encode(["Der Drucker ist bereit.", "The printer is ready.", "Принтер готов."])
    assert emb.shape == (3, 64) and emb.dtype == np.float32
    assert np.allclose(np.linalg.norm(emb, axis=1), 1.0, atol=1e-5)


def test_resume_after_interrupt_gives_identical_weights(small_pairs, tokenizer, tmp_path):
    _train(small_pairs, tokenizer, tmp_path / "full")

    def interrupt(step):
        if step == 27:  # past the checkpoint at step 20: work of steps 21-27 is lost
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        _train(small_pairs, tokenizer, tmp_path / "cut", on_step=interrupt)
    assert torch.load(tmp_path / "cut" / "last.pt", weights_only=True)["step"] == 20
    _train(small_pairs, tokenizer, tmp_path / "cut", resume=True)
    full = torch.load(tmp_path / "full" / "last.pt", weights_only=True)
    cut = torch.load(tmp_path / "cut" / "last.pt", weights_only=True)
    assert full["step"] == cut["step"] == 40
    for name, tensor in full["model"].items():
        assert torch.equal(tensor, cut["model"][name]), name
    assert _losses(tmp_path / "full") == _losses(tmp_path / "cut")
    # byte-reproducible checkpoints: the resumed run's files are the uninterrupted run's, byte for byte
    for name in ("last.pt", "best.pt"):
        assert (tmp_path / "full" / name).read_bytes() == (tmp_path / "cut" / name).read_bytes(), name


def test_checkpoint_round_trip_and_bad_checkpoints(small_pairs, tokenizer, tmp_path):
    run = tmp_path / "run"
    _train(small_pairs, tokenizer, run, {"train": {"max_steps": 20}})
    model, tok, cfg = load_model(run, which="last")
    enc = load_teacher(run, which="last")
    sentences = ["Datei öffnen", "open file"]
    batch = tok.encode(sentences, cfg["max_len"])
    with torch.no_grad():
        direct = torch.nn.functional.normalize(
            model.embed(torch.from_numpy(batch.ids), torch.from_numpy(batch.mask)), dim=-1).numpy()
    assert np.allclose(enc.encode(sentences), direct, atol=1e-6)

    # a run folder is never overwritten by accident
    with pytest.raises(TinyglotError, match="--resume"):
        _train(small_pairs, tokenizer, run)
    # a checkpoint from another preset/shape is refused on resume
    with pytest.raises(CheckpointError, match="model differs"):
        _train(small_pairs, tokenizer, run, {"model": {"num_layers": 3}}, resume=True)
    # a corrupted (truncated) checkpoint is a clear error
    data = (run / "last.pt").read_bytes()
    (run / "last.pt").write_bytes(data[: len(data) // 2])
    with pytest.raises(CheckpointError, match="corrupted"):
        load_model(run, which="last")


def test_bad_corpora_are_clear_errors(small_pairs, tokenizer, tmp_path):
    from tinyglot.data import Pair

    english_only = [Pair("en", p.en, p.en) for p in small_pairs[:50]]
    with pytest.raises(TinyglotError, match="only English-English"):
        _train(english_only, tokenizer, tmp_path / "a")
    zh = [Pair("zh", "打开文件" + str(i), f"open file {i}") for i in range(50)]
    with pytest.raises(TinyglotError, match="lacks language tokens for: zh"):
        _train(small_pairs + zh, tokenizer, tmp_path / "b")


def test_long_sentences_are_truncated_to_max_len(small_pairs, tokenizer, tmp_path):
    from tinyglot.data import Pair

    long = [Pair("de", "wort " * 500 + str(i), "word " * 500 + str(i)) for i in range(20)]
    trainer = TeacherTrainer(get_preset("ems-tiny", TINY), tmp_path / "r", small_pairs + long, tokenizer,
                             progress=False)
    assert trainer.data.truncated >= 20
    assert max(len(x) for lang in trainer.data.x for x in lang) <= trainer.preset.model.max_len


@pytest.mark.slow
def test_data_parallel_two_processes_match_one_process(small_corpus, tokenizer, tmp_path):
    """torchrun with 2 gloo processes at batch B each == 1 process at batch 2B (dropout off)."""
    tok = tokenizer.save(tmp_path / "tok.model")
    common = ["teacher", "train", "--preset", "ems-tiny", "--data", str(small_corpus), "--tokenizer", str(tok),
              "--no-progress", "--set", "train.max_steps=8", "--set", "train.eval_every=100",
              "--set", "train.save_every=8", "--set", "model.dropout=0", "--set", "train.threads=1",
              "--set", "train.log_every=1"]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    single = [sys.executable, "-m", "tinyglot", *common, "--out", str(tmp_path / "one"),
              "--set", "train.batch_size=32"]
    subprocess.run(single, check=True, env=env, timeout=300)
    import socket

    with socket.socket() as s:  # a free port for the rendezvous
        s.bind(("127.0.0.1", 0))
        port = str(s.getsockname()[1])
    ddp = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--master_addr", "127.0.0.1",
           "--master_port", port,
           "-m", "tinyglot", *common, "--out", str(tmp_path / "two"), "--set", "train.batch_size=16"]
    subprocess.run(ddp, check=True, env=env, timeout=300)
    # step 1 starts from the same seeded weights: the gradient (norm before clipping) must agree,
    # which catches a wrong loss scale (DDP averaging) or negatives not gathered across processes.
    def grad_norms(run: str) -> list[float]:
        rows = map(json.loads, (tmp_path / run / "metrics.jsonl").read_text().splitlines())
        return [r["grad_norm"] for r in rows if "grad_norm" in r]

    g1, g2 = grad_norms("one"), grad_norms("two")
    assert len(g1) == len(g2) == 8
    assert g1[:2] == pytest.approx(g2[:2], rel=1e-4)
    # later steps drift apart slightly: Adam's first updates are ~lr * sign(g), so reduction-order
    # noise in near-zero gradients flips a few signs; the losses still follow the same path.
    l1, l2 = _losses(tmp_path / "one"), _losses(tmp_path / "two")
    assert np.allclose(l1, l2, rtol=1e-2), (l1, l2)


def test_progress_prints_plain_lines_when_not_a_terminal(capsys, monkeypatch):
    from tinyglot.training import Progress, format_duration

    monkeypatch.delenv("TINYGLOT_NO_PROGRESS", raising=False)
    bar = Progress(4, "distill lealla-small", enabled=True, interval=0.0)  # pytest's stdout is no tty
    with bar.run(start=1):
        for step in (2, 3, 4):
            bar.update(step, "loss 1.500")
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 3 and lines[-1].startswith("distill lealla-small: 4/4 (100 %), 0:00 elapsed, eta 0:00")
    assert lines[0].startswith("distill lealla-small: 2/4 (50 %)") and lines[0].endswith("| loss 1.500")
    quiet = Progress(4, "x", enabled=True, interval=3600.0)  # only the last step within the interval
    with quiet.run():
        for step in (1, 2, 3, 4):
            quiet.update(step)
    assert capsys.readouterr().out.splitlines() == ["x: 4/4 (100 %), 0:00 elapsed, eta 0:00"]
    monkeypatch.setenv("TINYGLOT_NO_PROGRESS", "1")
    for bar in (Progress(4, "y", enabled=False, interval=0.0), Progress(4, "z", enabled=True, interval=0.0)):
        with bar.run():
            bar.update(4)
    assert capsys.readouterr().out == ""
    assert format_duration(59.6) == "1:00" and format_duration(3725) == "1:02:05"
    assert format_duration(float("nan")) == "?"
