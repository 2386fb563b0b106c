"""Shared fixtures: a small real corpus cut from the embedded one, and a tokenizer trained on it."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

os.environ.setdefault("TINYGLOT_NO_PROGRESS", "1")
os.environ.setdefault("USE_TF", "0")

# onnxruntime-extensions crashes the process when loaded after TensorFlow (MediaPipe imports it, also
# at collection: importorskip); every format's tests share this process, so load it first.
try:
    from tinyglot.ortx import preload_ortx

    preload_ortx()
except ImportError:  # pragma: no cover
    pass

REPO = Path(__file__).resolve().parents[1]
SHARED_DATA = REPO.parent / "shared" / "data"
TEST_LANGS = ("de", "fr", "ja", "ru")


@pytest.fixture(autouse=True, scope="session")
def _one_torch_thread():
    # CI machines have 2 cores: one intra-op thread keeps tests fast and deterministic.
    try:
        import torch
    except ImportError:  # pragma: no cover
        return
    torch.set_num_threads(1)


@pytest.fixture(scope="session")
def small_pairs():
    """300 real pairs per language for four languages (two scripts each side of Latin)."""
    from tinyglot.data.embedded import load_pairs

    out = []
    for lang in TEST_LANGS:
        out += [p for p in load_pairs(None) if p.lang == lang][:300]
    return out


@pytest.fixture(scope="session")
def small_corpus(small_pairs, tmp_path_factory) -> Path:
    from tinyglot.data.embedded import write_jsonl

    path = tmp_path_factory.mktemp("corpus") / "small.jsonl.gz"
    write_jsonl(path, small_pairs)
    return path


@pytest.fixture(scope="session")
def tokenizer(small_pairs):
    from tinyglot.tokenizer import Tokenizer

    sentences = [s for p in small_pairs for s in (p.x, p.en)]
    return Tokenizer.train(sentences, [*TEST_LANGS, "en"], vocab_size=1500, seed=0)


@pytest.fixture(scope="session")
def tiny_teacher_dir(small_pairs, tokenizer, tmp_path_factory) -> Path:
    """A real EMS teacher (ems-tiny, 30 steps) trained on the small corpus."""
    from tinyglot.teacher import TeacherTrainer, get_preset

    out = tmp_path_factory.mktemp("teacher") / "run"
    preset = get_preset("ems-tiny", {"train": {"max_steps": 30, "eval_every": 30, "save_every": 30,
                                               "batch_size": 16, "dev_fraction": 0.1}})
    TeacherTrainer(preset, out, small_pairs, tokenizer, "ems-tiny", progress=False).train()
    return out


@pytest.fixture(scope="session")
def student_dir(tokenizer, tmp_path_factory) -> Path:
    """A lealla-tiny-shaped student with random weights (export parity does not need training)."""
    import torch

    from tinyglot.distill.config import StudentConfig
    from tinyglot.distill.student import Student, save_student

    torch.manual_seed(0)
    cfg = StudentConfig(hidden_size=32, num_layers=2, num_heads=2, ffn_size=64, max_len=48, dropout=0.0,
                        vocab_size=tokenizer.vocab_size)
    return save_student(Student(cfg), tokenizer, tmp_path_factory.mktemp("student") / "student")
