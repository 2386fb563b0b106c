"""The training allocator setting: the resident size stays flat over training steps."""

from __future__ import annotations

import ctypes
import os
import resource
import sys

import numpy as np
import pytest

from tinyglot import trainloop, training

pytestmark = pytest.mark.skipif(training._glibc() is None, reason="glibc malloc only (Linux)")


def _rss() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def _minflt() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt


def test_the_setting_keeps_tensors_in_the_heap_and_reuses_them():
    assert sys.platform.startswith("linux")
    # the decision: blocks above the threshold are mapped (and unmapped when freed), the heap trimmed often
    assert 64 << 10 <= training.MMAP_THRESHOLD <= 1 << 20
    assert training.TRIM_THRESHOLD >= training.MMAP_THRESHOLD
    assert 1 <= training.TRIM_EVERY <= 1000
    assert training.limit_allocator_growth() is True
    assert training.release_free_memory() is True

    # the behaviour: a block below the threshold (an activation) is not mapped, and freeing and allocating
    # it again reuses the same pages (the 128 KiB threshold mapped it afresh: a page fault per 4 KiB)
    libc = training._glibc()
    if not hasattr(libc, "mallinfo2"):
        pytest.skip("glibc < 2.33 has no mallinfo2")

    class MallInfo2(ctypes.Structure):
        _fields_ = [(name, ctypes.c_size_t) for name in
                    ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks",
                     "fordblks", "keepcost")]

    libc.mallinfo2.restype = MallInfo2
    libc.malloc.restype = ctypes.c_void_p
    libc.malloc.argtypes = [ctypes.c_size_t]
    libc.free.argtypes = [ctypes.c_void_p]
    size = training.MMAP_THRESHOLD // 2
    mapped = libc.mallinfo2().hblks
    faults = []
    for _ in range(3):
        before = _minflt()
        block = libc.malloc(size)
        assert block
        ctypes.memset(block, 1, size)
        assert libc.mallinfo2().hblks == mapped, "the block was mmap'd"
        libc.free(block)
        faults.append(_minflt() - before)
    assert faults[-1] < size // 4096 // 8, faults


def test_rss_stays_flat_over_training_steps(small_pairs, tokenizer, tmp_path, monkeypatch):
    """60 steps of a real teacher with length-bucketed batches: the resident size of the second half is
    that of the first (a heap that kept every batch's freed blocks would grow step by step)."""
    from tinyglot.teacher import TeacherTrainer, get_preset

    records: list[tuple[int, int, int]] = []
    one_step = trainloop.TrainLoop._one_step

    def recorded(self, net, micro_loss):
        out = one_step(self, net, micro_loss)
        records.append((self.step + 1, _rss(), _minflt()))
        return out

    monkeypatch.setattr(trainloop.TrainLoop, "_one_step", recorded)
    steps = 60
    preset = get_preset("ems-tiny", {"train": {"max_steps": steps, "eval_every": 10**6, "save_every": 10**6,
                                               "batch_size": 64, "dev_fraction": 0.1}})
    TeacherTrainer(preset, tmp_path / "run", small_pairs, tokenizer, "ems-tiny", progress=False).train()
    assert [s for s, _, _ in records] == list(range(1, steps + 1))

    rss = [r for _, r, _ in records]
    first, second = max(rss[steps // 4: steps // 2]), max(rss[3 * steps // 4:])
    # measured: +23 MiB at most (the heap settles on the longest batches); a growth of 1.5 MiB per step fails
    assert second - first < 32 << 20, [r >> 20 for r in rss]


def test_training_batches_are_padded_to_fixed_widths_with_the_same_rows(small_pairs, tokenizer, monkeypatch):
    """Shapes recur (so freed heap blocks fit the next steps' tensors): with batching.PAD_WIDTHS set to the
    bucket widths, each side of a training batch is padded to one of them (or max_len), holding the same
    rows, ids and mask as padded to its longest row."""
    from tinyglot import batching
    from tinyglot.batching import BUCKET_WIDTHS as PAD_WIDTHS
    from tinyglot.batching import BatchPlan, pad_arrays, padded_width, split_train_dev, tokenize_pairs
    from tinyglot.tokenizer import PAD_ID

    assert padded_width(17, 120) == 17  # the default: the longest row
    monkeypatch.setattr(batching, "PAD_WIDTHS", PAD_WIDTHS)
    assert list(PAD_WIDTHS) == sorted(set(PAD_WIDTHS)) and PAD_WIDTHS[0] >= 8
    assert all(b <= max(a + 8, 1.34 * a) for a, b in zip(PAD_WIDTHS, PAD_WIDTHS[1:], strict=False))  # little padding
    assert padded_width(17, 120) == 20 and padded_width(16, 120) == 16 and padded_width(100, 120) == 120
    assert padded_width(30, 24) == 30 and padded_width(17, 120, ()) == 17

    train, _ = split_train_dev(small_pairs, 0.1, 50, seed=0)
    max_len = 40
    data = tokenize_pairs(train, tokenizer, max_len)
    plan = BatchPlan(data, 32, 2.0, seed=0)
    widths, padded, real = set(), 0, 0
    for step in range(40):
        rows = plan.batch(step)
        xb, eb, _ = plan.tensors(rows, tokenizer, list(range(len(data.langs))), max_len)
        for side, batch in ((data.x, xb), (data.en, eb)):
            seqs = [side[li][pi] for li, pi in rows]
            before = pad_arrays(seqs, max_len)  # padded to the longest row, as before
            width = batch.ids.shape[1]
            assert width in (*PAD_WIDTHS, max_len) and width == padded_width(before.ids.shape[1], max_len)
            assert np.array_equal(batch.ids[:, : before.ids.shape[1]], before.ids)
            assert np.array_equal(batch.mask[:, : before.ids.shape[1]], before.mask)
            longest = before.ids.shape[1]
            assert (batch.ids[:, longest:] == PAD_ID).all() and not batch.mask[:, longest:].any()
            widths.add(width)
            padded, real = padded + batch.ids.size, real + before.ids.size
    assert len(widths) <= 8 and padded < 1.25 * real, (widths, padded / real)


def test_padding_to_a_fixed_width_leaves_the_teacher_loss_unchanged(small_pairs, tokenizer):
    import torch

    from tinyglot.batching import BatchPlan, split_train_dev, tokenize_pairs
    from tinyglot.teacher import EMSModel, get_preset

    preset = get_preset("ems-tiny")
    preset.model.vocab_size = tokenizer.vocab_size
    train, _ = split_train_dev(small_pairs, 0.1, 50, seed=0)
    data = tokenize_pairs(train, tokenizer, preset.model.max_len)
    plan = BatchPlan(data, 16, 2.0, seed=0)
    torch.manual_seed(0)
    model = EMSModel(preset.model).eval()
    lang_ids = [tokenizer.lang_token_id(lang) for lang in data.langs]
    en = torch.full((16,), tokenizer.lang_token_id("en"))

    def loss(widths):
        import tinyglot.batching as batching

        saved, batching.PAD_WIDTHS = batching.PAD_WIDTHS, widths
        try:
            xb, eb, x_lang = plan.tensors(rows, tokenizer, lang_ids, preset.model.max_len)
        finally:
            batching.PAD_WIDTHS = saved
        t = torch.from_numpy
        with torch.no_grad():
            return xb.ids.shape[1], model(t(xb.ids), t(xb.mask), t(eb.ids), t(eb.mask), t(x_lang), en[: len(rows)])

    for step in range(5):
        rows = plan.batch(step)
        (w0, a), (w1, b) = loss(()), loss((8, 16, 24, 32, 48))
        assert w1 >= w0
        for key in ("loss", "xtr", "cntrs"):
            torch.testing.assert_close(a[key], b[key], rtol=1e-5, atol=1e-5)


# ------------------------------------------------------------------ mimalloc, the training commands' allocator
# A training command in a child process whose steps are recorded: (step, resident bytes, minor faults).
RECORDING_CHILD = r"""
import json, resource, sys
from tinyglot import allocator, trainloop, training
one_step, rows = trainloop.TrainLoop._one_step, []
def recorded(self, net, micro_loss):
    out = one_step(self, net, micro_loss)
    rows.append((self.step + 1, training.resident_bytes(), resource.getrusage(resource.RUSAGE_SELF).ru_minflt))
    return out
trainloop.TrainLoop._one_step = recorded
from tinyglot.app.cli import main
code = main(sys.argv[2:])
json.dump({"allocator": allocator.active(), "rows": rows, "code": code}, open(sys.argv[1], "w"))
"""


def _train_recorded(tmp_path, corpus, env, steps: int = 60) -> dict:
    import json
    import subprocess

    trace = tmp_path / "trace.json"
    args = ["teacher", "train", "--preset", "ems-tiny", "--data", str(corpus), "--out", str(tmp_path / "run"),
            "--no-progress", "--set", f"train.max_steps={steps}", "--set", "train.eval_every=1000000",
            "--set", "train.save_every=1000000", "--set", "train.batch_size=64", "--set", "train.threads=1"]
    proc = subprocess.run([sys.executable, "-c", RECORDING_CHILD, str(trace), *args], env=env,
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(trace.read_text())


def _child_env(tmp_path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("LD_PRELOAD", "TINYGLOT_ALLOCATOR")}
    return {**env, "TINYGLOT_HOME": str(tmp_path / "home"), "TINYGLOT_NO_PROGRESS": "1", "USE_TF": "0"}


def test_mimalloc_keeps_training_steps_flat_and_reuses_their_memory(small_corpus, tmp_path):
    """Under mimalloc, as the training commands run: the resident size of the second half of the steps is
    that of the first, and a step no longer faults its tensors' pages in afresh (under the glibc setting
    every tensor above 128 KiB is mapped, touched and unmapped at each step)."""
    from tinyglot import allocator

    library = allocator.mimalloc_library()
    assert library is not None, "cmeel-mimalloc is a dependency on Linux: pip install -e ."
    steps = 60
    runs = {}
    for name in ("mimalloc", "system"):
        env = _child_env(tmp_path / name)
        if name == "mimalloc":
            env = allocator.preload_environment(env, library)
        else:
            env["TINYGLOT_ALLOCATOR"] = "system"
        runs[name] = _train_recorded(tmp_path / name, small_corpus, env, steps)
    assert runs["mimalloc"]["allocator"] == "mimalloc" and runs["system"]["allocator"] == "glibc"

    def faults_per_step(rows):  # the second half: shapes seen before, memory there to reuse
        half = rows[steps // 2:]
        return (half[-1][2] - half[0][2]) / (len(half) - 1)

    rows = runs["mimalloc"]["rows"]
    assert [s for s, _, _ in rows] == list(range(1, steps + 1))
    rss = [r for _, r, _ in rows]
    first, second = max(rss[steps // 4: steps // 2]), max(rss[3 * steps // 4:])
    assert second - first < 32 << 20, [r >> 20 for r in rss]
    # measured: 2.8 minor faults per step under mimalloc, 7,971 under glibc's 128 KiB threshold
    assert faults_per_step(rows) * 100 < faults_per_step(runs["system"]["rows"]), (
        faults_per_step(rows), faults_per_step(runs["system"]["rows"]))


def test_training_commands_restart_under_mimalloc(small_corpus, tmp_path):
    """``tinyglot teacher train`` (the process's own command line) replaces itself with the same command
    under mimalloc; TINYGLOT_ALLOCATOR=system keeps glibc; an unknown allocator is a user error."""
    import subprocess

    args = ["-v", "teacher", "train", "--preset", "ems-tiny", "--data", str(small_corpus), "--no-progress",
            "--set", "train.max_steps=2", "--set", "train.eval_every=1000000"]
    for setting, expected in (("", "mimalloc"), ("system", "glibc")):
        env = {**_child_env(tmp_path), "TINYGLOT_ALLOCATOR": setting}
        proc = subprocess.run([sys.executable, "-m", "tinyglot", *args, "--out", str(tmp_path / (setting or "mi"))],
                              env=env, capture_output=True, text=True, timeout=300)
        assert proc.returncode == 0, proc.stderr[-3000:]
        assert f"memory allocator: {expected}" in proc.stderr, proc.stderr[-3000:]

    bad = subprocess.run([sys.executable, "-m", "tinyglot", *args, "--out", str(tmp_path / "bad")],
                         env={**_child_env(tmp_path), "TINYGLOT_ALLOCATOR": "jemalloc"},
                         capture_output=True, text=True, timeout=300)
    assert bad.returncode == 2 and "TINYGLOT_ALLOCATOR='jemalloc'" in bad.stderr and "fix:" in bad.stderr
    assert not (tmp_path / "bad").exists()


def test_preload_environment_round_trip(monkeypatch, tmp_path):
    from tinyglot import allocator

    library = tmp_path / "libmimalloc.so"
    for before in (None, "", "/opt/libfoo.so"):
        environ = {"PATH": "/usr/bin"} if before is None else {"PATH": "/usr/bin", "LD_PRELOAD": before}
        env = allocator.preload_environment(environ, library)
        assert env["LD_PRELOAD"].split(":")[0] == str(library)
        assert env["MIMALLOC_PURGE_DELAY"] == str(allocator.PURGE_DELAY_MS)
        assert environ.get("LD_PRELOAD") == before  # the caller's dict is not changed
        for key in ("LD_PRELOAD", "MIMALLOC_PURGE_DELAY", "TINYGLOT_SAVED_LD_PRELOAD"):
            monkeypatch.delenv(key, raising=False)
        for key, value in env.items():
            monkeypatch.setenv(key, value)
        allocator.restore_environment()
        assert os.environ.get("LD_PRELOAD") == (before or None)
        assert "MIMALLOC_PURGE_DELAY" not in os.environ and "TINYGLOT_SAVED_LD_PRELOAD" not in os.environ
    allocator.restore_environment()  # not started by tinyglot: nothing to restore
    assert os.environ.get("LD_PRELOAD") == "/opt/libfoo.so"


def test_an_in_process_caller_is_never_replaced(small_corpus, tmp_path, monkeypatch):
    """main(argv) from Python (a test, a notebook) trains in this process, whatever the allocator."""
    from tinyglot import allocator
    from tinyglot.app.cli import main

    def refuse(*_):
        raise AssertionError("os.execve called")

    monkeypatch.setattr(os, "execve", refuse)
    monkeypatch.setenv("TINYGLOT_HOME", str(tmp_path / "home"))
    assert main(["teacher", "train", "--preset", "ems-tiny", "--data", str(small_corpus), "--no-progress",
                 "--out", str(tmp_path / "run"), "--set", "train.max_steps=2"]) == 0
    assert allocator.active() in ("glibc", "system")
