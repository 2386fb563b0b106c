"""Shared fixtures: a small real corpus cut from the embedded one, and a tokenizer trained on it."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
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

from tinyglot.quiet import VERBOSE_ENV  # noqa: E402  (after the ortx preload above)

REPO = Path(__file__).resolve().parents[1]
SHARED_DATA = REPO.parent / "shared" / "data"
TEST_LANGS = ("de", "fr", "ja", "ru")


# Session fixtures that take a minute or more: the tests that use one run in the same pytest-xdist worker,
# so that each is built once (a test that asks for one with request.getfixturevalue carries the mark).
SHARED_GROUPS = {"tiny_run": "tiny-run", "mediapipe_export": "mediapipe", "mediapipe_bundle": "mediapipe"}


def _shared_groups(item) -> set[str]:
    """The :data:`SHARED_GROUPS` of the fixtures ``item`` uses."""
    return {SHARED_GROUPS[name] for name in getattr(item, "fixturenames", ()) if name in SHARED_GROUPS}


def _uses_a_module_fixture(item) -> bool:
    info = getattr(item, "_fixtureinfo", None)
    return bool(info) and any(defs and defs[-1].scope == "module" for defs in info.name2fixturedefs.values())


@pytest.hookimpl(tryfirst=True)  # before xdist's own hook, which reads the marks into the node ids
def pytest_collection_modifyitems(config, items):
    """Each test that uses a fixture of :data:`SHARED_GROUPS` goes to that fixture's xdist group; the other
    tests of a file that use one of its module-scoped fixtures (an exported bundle, a trained model: most
    take 30-60 s) go to a group named after the file, so that one worker builds each such fixture once."""
    for item in items:
        if item.get_closest_marker("xdist_group") is not None:
            continue
        groups = _shared_groups(item)
        if len(groups) > 1:
            raise pytest.UsageError(f"{item.nodeid} uses the fixtures of two xdist groups: {sorted(groups)}")
        if not groups and _uses_a_module_fixture(item):
            groups = {item.nodeid.partition("::")[0].replace("_", "-")}  # xdist joins two groups with "_"
        if groups:
            item.add_marker(pytest.mark.xdist_group(groups.pop()))


@pytest.hookimpl(tryfirst=True)  # before any fixture is set up
def pytest_runtest_setup(item):
    """Under ``--dist loadgroup``, a test that uses a fixture of :data:`SHARED_GROUPS` must carry its group
    in its node id, or it lands in any worker and that worker builds the fixture again: the suite then takes
    minutes longer, silently.  That happened twice: the marks came after xdist's hook, and pytest 9.2 ignores
    xdist 3.8's node-id suffix (pytest-dev/pytest-xdist#1386; pyproject.toml's dev extra pins pytest < 9.2)."""
    config = item.config
    if not (hasattr(config, "workerinput") and config.getvalue("loadgroup")):
        return
    groups = item.nodeid.rpartition("@")[2].split("_") if "@" in item.nodeid else []
    missing = sorted(_shared_groups(item) - set(groups))
    if missing:
        pytest.fail(f"not in xdist group {missing[0]!r}: pytest-xdist runs it in any worker, which builds the shared "
                    "fixture again (is pytest newer than pyproject.toml's dev extra allows?)", pytrace=False)


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


MEDIAPIPE_SENTENCES = 25  # parity sentences of the shared MediaPipe bundle


@pytest.fixture(scope="session")
def mediapipe_export(student_dir, tmp_path_factory):
    """One fp32 tflite-mediapipe export of ``student_dir`` (input shape ``auto``: dynamic where TensorFlow
    is installed), for the tests that only read a MediaPipe bundle: each conversion takes half a minute
    (TensorFlow's converter in a subprocess).  Its :class:`ExportResult`; the bundle is ``.out``."""
    pytest.importorskip("litert_torch")
    pytest.importorskip("mediapipe.tasks.python.text.text_embedder")
    from tinyglot.export.tflite_mediapipe import export_tflite_mediapipe

    return export_tflite_mediapipe(student_dir, tmp_path_factory.mktemp("shared-bundles") / "mp-fp32", "none",
                                   max_sentences=MEDIAPIPE_SENTENCES)


@pytest.fixture(scope="session")
def mediapipe_bundle(mediapipe_export) -> Path:
    """The folder of :func:`mediapipe_export` (read it, never write to it)."""
    return mediapipe_export.out


# ====================================================================== the tiny pipeline, end to end
# Variables that hide (or show) third-party output: a user has none of them set (tests/test_quiet.py).
HIDING_ENV = ("USE_TF", "USE_TORCH", "USE_JAX", "USE_FLAX", "TRANSFORMERS_NO_TF", "TRANSFORMERS_NO_ADVISORY_WARNINGS",
              "TRANSFORMERS_VERBOSITY", "TF_CPP_MIN_LOG_LEVEL", "TF_CPP_MAX_VLOG_LEVEL", "GLOG_minloglevel",
              "ABSL_MIN_LOG_LEVEL", "PYTHONWARNINGS", VERBOSE_ENV)


def clean_env(**extra: str) -> dict[str, str]:
    """This process's environment as a user's shell has it: none of :data:`HIDING_ENV`, progress bars off."""
    env = {k: v for k, v in os.environ.items() if k not in HIDING_ENV}
    env.update(TINYGLOT_NO_PROGRESS="1", **extra)
    return env


@dataclass
class TinyRun:
    out: Path
    env: dict
    interrupted: subprocess.CompletedProcess  # stdout and stderr together
    teacher_done_at_kill: bool
    teacher_marker_at_kill: bytes | None  # stages/teacher.json as the killed run left it
    resumed: subprocess.CompletedProcess
    seconds: float


def run_tiny(out: Path, env: dict, *extra: str) -> subprocess.CompletedProcess:
    """``tinyglot run --profile tiny --out OUT [EXTRA]`` in a subprocess, its output captured."""
    return subprocess.run([sys.executable, "-m", "tinyglot", "run", "--profile", "tiny", "--out", str(out), *extra],
                          capture_output=True, text=True, env=env, timeout=600)


@pytest.fixture(scope="session")
def tiny_run(tmp_path_factory) -> TinyRun:
    """The tiny pipeline in a user's environment (:func:`clean_env`), interrupted (SIGTERM) while the
    teacher trains, then rerun to the end: tests/test_pipeline.py checks the stages, tests/test_quiet.py
    the terminal.  Tests may rerun it with other settings, never delete it."""
    root = tmp_path_factory.mktemp("pipeline")
    out = root / "run"
    env = clean_env(TINYGLOT_HOME=str(root / "home"))
    proc = subprocess.Popen([sys.executable, "-m", "tinyglot", "run", "--profile", "tiny", "--out", str(out)],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
    deadline = time.time() + 300
    while time.time() < deadline and proc.poll() is None:
        if (out / "teacher" / "last.pt").exists() or (out / "stages" / "teacher.json").exists():
            break
        time.sleep(0.05)
    proc.send_signal(signal.SIGTERM)
    stdout, _ = proc.communicate(timeout=120)
    marker = out / "stages" / "teacher.json"
    teacher_marker = marker.read_bytes() if marker.exists() else None
    interrupted = subprocess.CompletedProcess(proc.args, proc.returncode, stdout, "")
    started = time.time()
    resumed = run_tiny(out, env)
    return TinyRun(out, env, interrupted, teacher_marker is not None, teacher_marker, resumed,
                   time.time() - started)


@pytest.fixture
def clock(monkeypatch) -> list[float]:
    """``time.time`` of :mod:`tinyglot.training` (progress bars and their estimates) as the test sets it
    (``clock[0]``), with progress lines on."""
    from tinyglot import training

    now = [0.0]
    monkeypatch.setattr(training.time, "time", lambda: now[0])
    monkeypatch.delenv("TINYGLOT_NO_PROGRESS", raising=False)
    return now
