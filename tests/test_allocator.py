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
