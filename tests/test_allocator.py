"""The training allocator setting: the resident size stays flat over training steps."""

from __future__ import annotations

import ctypes
import os
import resource
import sys

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
