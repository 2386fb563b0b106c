"""The GPU-facing paths that CPU CI can check: device selection, the checkpointing rule, the
tokenised-corpus cache, array batching and the out-of-memory retry of the training loop."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

import tinyglot
from tinyglot.batching import BatchPlan, pad_arrays, split_train_dev, tokenize_pairs
from tinyglot.errors import TinyglotError
from tinyglot.tokcache import cached_tokenize_pairs, corpus_fingerprint
from tinyglot.training import (
    GPU_MEMORY_SHARE,
    activation_bytes,
    pick_device,
    select_device,
    training_device,
    use_checkpointing,
)


# ====================================================================== devices
@pytest.mark.parametrize("name, cuda, mps, rank, want", [
    ("auto", True, True, None, "cuda"),
    ("auto", False, True, None, "mps"),
    ("auto", False, False, None, "cpu"),
    ("auto", True, False, 1, "cuda:1"),  # torchrun: each process its own GPU
    ("cuda", True, False, 3, "cuda:3"),
    ("cuda:0", True, False, 3, "cuda:0"),  # an explicit index is kept
    ("cpu", True, True, 1, "cpu"),
    (" CPU ", False, False, None, "cpu"),
])
def test_pick_device(name, cuda, mps, rank, want):
    assert pick_device(name, cuda, mps, rank) == want


@pytest.mark.parametrize("name, cuda, mps, message", [
    ("cuda", False, False, "no CUDA GPU is visible"),
    ("cuda:1", False, True, "no CUDA GPU is visible"),
    ("mps", True, False, "MPS is not available"),
    ("gpu-please", True, True, "unknown device"),
])
def test_pick_device_refuses_what_is_not_there(name, cuda, mps, message):
    with pytest.raises(TinyglotError, match=message):
        pick_device(name, cuda, mps)


def test_training_device_follows_the_settings_and_local_rank(monkeypatch):
    from tinyglot.distill.config import get_preset

    settings = get_preset("lealla-tiny", {"train": {"device": "cpu"}}).train
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("LOCAL_RANK", "1")
    assert training_device(settings) == torch.device("cpu")  # the rank only numbers GPUs
    if not torch.cuda.is_available():
        assert select_device("auto") == torch.device("cpu")
        settings.device = "cuda"
        with pytest.raises(TinyglotError, match="no CUDA GPU"):
            training_device(settings)


def test_load_takes_a_device(student_dir):
    enc = tinyglot.load(student_dir, device="cpu")
    assert enc.device == torch.device("cpu") and enc.encode(["Datei öffnen"]).shape[0] == 1
    if not torch.cuda.is_available():
        with pytest.raises(TinyglotError, match="no CUDA GPU"):
            tinyglot.load(student_dir, device="cuda")


# ====================================================================== checkpointing
GB = 1 << 30


@pytest.mark.parametrize("mode, device, tokens, limit, need, free, oom, want", [
    ("never", "cuda", 10**6, 6144, 10 * GB, GB, True, False),
    ("always", "cpu", 10, 6144, None, None, False, True),
    # CPU: the token rule sized for 2-core CPU memory
    ("auto", "cpu", 6145, 6144, None, None, False, True),
    ("auto", "cpu", 6144, 6144, None, None, False, False),
    ("auto", "cpu", 10**6, 0, None, None, False, False),  # limit 0: never
    # CUDA: memory decides, the token limit never does
    ("auto", "cuda", 10**6, 6144, GB, 80 * GB, False, False),
    ("auto", "cuda", 10**6, 6144, 60 * GB, 80 * GB, False, True),
    ("auto", "cuda", 10, 6144, None, None, False, False),
    ("auto", "cuda", 10, 6144, GB, 80 * GB, True, True),  # after an out-of-memory step
])
def test_checkpointing_rule(mode, device, tokens, limit, need, free, oom, want):
    assert use_checkpointing(mode, device, tokens, limit, need, free, oom) is want


def test_checkpointing_rule_threshold_and_bad_mode():
    free = 10 * GB
    assert not use_checkpointing("auto", "cuda", 1, 0, int(GPU_MEMORY_SHARE * free), free)
    assert use_checkpointing("auto", "cuda", 1, 0, int(GPU_MEMORY_SHARE * free) + 1, free)
    with pytest.raises(TinyglotError, match="unknown train.checkpointing"):
        use_checkpointing("sometimes", "cpu", 1, 1)


def test_activation_estimate_of_lealla_small():
    # lealla-small's longest CPU batch (128 sentences x 120 tokens, both sides): measured 8.4 GB without
    # checkpointing (docs/distill.md, Memory); the estimate is of that order and grows linearly in tokens
    est = activation_bytes(2 * 128 * 120, 128, 24, 512, 8, 120)
    assert 2 * GB < est < 16 * GB
    assert activation_bytes(2000, 128, 24, 512, 8, 120) == 2 * activation_bytes(1000, 128, 24, 512, 8, 120)


def test_presets_checkpointing_settings():
    from tinyglot.distill.config import get_preset

    for name in ("fast-small", "fast-base", "fast-tiny"):  # 1-4 layers: never on CPU
        tc = get_preset(name).train
        assert tc.checkpointing == "auto" and tc.checkpoint_above_tokens == 0
        assert not use_checkpointing(tc.checkpointing, "cpu", 128 * 128 * 2, tc.checkpoint_above_tokens)
    tc = get_preset("lealla-small").train  # 24 layers: the CPU rule as before
    assert use_checkpointing(tc.checkpointing, "cpu", 6145, tc.checkpoint_above_tokens)
    with pytest.raises(TinyglotError, match="unknown train.checkpointing"):
        get_preset("lealla-tiny", {"train": {"checkpointing": "maybe"}})
    with pytest.raises(TinyglotError, match="unknown train.token_cache"):
        get_preset("lealla-tiny", {"train": {"token_cache": "yes"}})


def test_gradient_checkpointing_follows_the_setting(small_pairs, tiny_teacher_dir, tmp_path):
    from tinyglot.distill.lealla import LeallaTrainer
    from tinyglot.distill.run import teacher_tokenizer
    from tinyglot.distill.student import Student
    from tinyglot.encoders import load_encoder as load_teacher_encoder

    teacher = load_teacher_encoder(str(tiny_teacher_dir))
    seen = {}
    for mode in ("always", "never"):
        preset = get_lealla({"train": {"checkpointing": mode, "checkpoint_above_tokens": 1}})
        trainer = LeallaTrainer(preset, tmp_path / mode, small_pairs, teacher, teacher.identity(),
                                teacher_tokenizer(str(tiny_teacher_dir)), cache_dir=tmp_path / "cache",
                                progress=False)
        model = Student(preset.student, trainer.teacher_dim).to(trainer.device)  # the GPU when there is one
        trainer._batch(model, 0)
        seen[mode] = model.encoder.is_gradient_checkpointing
    assert seen == {"always": True, "never": False}


def get_lealla(overrides):
    from tinyglot.distill.config import get_preset

    return get_preset("lealla-tiny", overrides)


# ====================================================================== token cache
def _grouped(small_pairs):
    return split_train_dev(small_pairs, 0.1, 30, 0)[0]


def _same(a, b) -> None:
    assert a.langs == b.langs and a.fingerprint == b.fingerprint and a.truncated == b.truncated
    for li in range(len(a.langs)):
        assert len(a.x[li]) == len(b.x[li]) and a.pairs[li] == b.pairs[li]
        assert all(np.array_equal(p, q) for p, q in zip(a.x[li], b.x[li], strict=True))
        assert all(np.array_equal(p, q) for p, q in zip(a.en[li], b.en[li], strict=True))
        assert np.array_equal(a.en_key[li], b.en_key[li])


def test_token_cache_gives_the_same_batches(small_pairs, tokenizer, tmp_path):
    grouped = _grouped(small_pairs)
    # an empty side is dropped by tokenize_pairs: the cache must keep the same pairs
    grouped["de"] = [*grouped["de"][:5], type(grouped["de"][0])("de", "", "nothing"), *grouped["de"][5:]]
    plain = tokenize_pairs(grouped, tokenizer, 24)
    first = cached_tokenize_pairs(grouped, tokenizer, 24, tmp_path)
    entries = [p for p in tmp_path.iterdir()]
    assert len(entries) == 1 and not entries[0].name.startswith(".")  # renamed into place, no temp left
    assert isinstance(np.load(entries[0] / "x_ids.npy", mmap_mode="r"), np.memmap)
    again = cached_tokenize_pairs(grouped, tokenizer, 24, tmp_path)
    row = again.x[0][0]  # rows are views of the read-only memory-mapped arrays, not copies
    assert not row.flags.owndata and not row.flags.writeable
    assert plain.x[0][0].flags.writeable
    for data in (first, again):
        _same(plain, data)
    old, new = BatchPlan(plain, 16, 2.0, seed=3), BatchPlan(again, 16, 2.0, seed=3)
    for step in (0, 1, 7, 60):
        rows = old.batch(step)
        assert np.array_equal(rows, new.batch(step))
        a, b = old.tensors(rows, tokenizer, [0] * 4, 24), new.tensors(rows, tokenizer, [0] * 4, 24)
        assert all(np.array_equal(x, y) for x, y in ((a[0].ids, b[0].ids), (a[0].mask, b[0].mask),
                                                     (a[1].ids, b[1].ids), (a[1].mask, b[1].mask)))


def test_token_cache_is_invalidated_by_tokenizer_or_corpus(small_pairs, tokenizer, tmp_path):
    from tinyglot.tokenizer import Tokenizer

    grouped = _grouped(small_pairs)
    cached_tokenize_pairs(grouped, tokenizer, 24, tmp_path)
    other_tok = Tokenizer.train([s for p in small_pairs for s in (p.x, p.en)], ["de", "fr", "ja", "ru", "en"],
                                vocab_size=900, seed=0)
    by_other = cached_tokenize_pairs(grouped, other_tok, 24, tmp_path)
    _same(tokenize_pairs(grouped, other_tok, 24), by_other)
    changed = {**grouped, "fr": grouped["fr"][:-1]}
    assert corpus_fingerprint(changed) != corpus_fingerprint(grouped)
    _same(tokenize_pairs(changed, tokenizer, 24), cached_tokenize_pairs(changed, tokenizer, 24, tmp_path))
    assert len(list(tmp_path.iterdir())) == 3  # one entry per (tokenizer, corpus)


def test_token_cache_with_wrong_metadata_is_not_trusted(small_pairs, tokenizer, tmp_path):
    grouped = _grouped(small_pairs)
    cached_tokenize_pairs(grouped, tokenizer, 24, tmp_path)
    entry = next(tmp_path.iterdir())
    meta = json.loads((entry / "meta.json").read_text())
    (entry / "meta.json").write_text(json.dumps({**meta, "tokenizer": "0" * 64}))
    _same(tokenize_pairs(grouped, tokenizer, 24), cached_tokenize_pairs(grouped, tokenizer, 24, tmp_path))
    assert json.loads((entry / "meta.json").read_text())["tokenizer"] == tokenizer.sha256  # rewritten
    np.save(entry / "x_offsets.npy", np.zeros(3, dtype=np.int64))  # damaged arrays
    _same(tokenize_pairs(grouped, tokenizer, 24), cached_tokenize_pairs(grouped, tokenizer, 24, tmp_path))


def test_pad_arrays_equals_tokenizer_pad(tokenizer):
    seqs = [np.array(tokenizer.tokenize(s)[:12], dtype=np.int32) for s in
            ("Datei öffnen", "open the file now please", "a", "ファイルを開く")]
    for max_len in (3, 12, 40):
        a, b = pad_arrays(seqs, max_len), tokenizer.pad(seqs, max_len)
        assert a.ids.dtype == b.ids.dtype and np.array_equal(a.ids, b.ids) and np.array_equal(a.mask, b.mask)


# ====================================================================== training loop
def test_out_of_memory_step_is_retried_once_when_the_handler_switches_something_on(tmp_path):
    from tinyglot.trainloop import TrainLoop, TrainSettings

    model = torch.nn.Linear(3, 1)
    cfg = TrainSettings(max_steps=2, warmup_steps=0, log_every=1, eval_every=100, save_every=100)
    calls = {"loss": 0, "handler": 0}

    def micro_loss(net, index):
        calls["loss"] += 1
        if calls["loss"] == 1:
            raise torch.OutOfMemoryError("CUDA out of memory (simulated by the test)")
        loss = net(torch.ones(2, 3)).pow(2).mean()
        return {"loss": loss, "parts": {"loss": float(loss.detach())}, "pairs": 2}

    def handler():
        calls["handler"] += 1
        return calls["handler"] == 1

    loop = TrainLoop(tmp_path / "a", model, cfg, torch.device("cpu"), {"kind": "t"}, "t", progress=False)
    assert loop.run(micro_loss, lambda: None, on_out_of_memory=handler).steps == 2
    assert calls == {"loss": 3, "handler": 1}
    calls.update(loss=0, handler=1)  # the handler has nothing left to switch on: the error stands
    loop = TrainLoop(tmp_path / "b", model, cfg, torch.device("cpu"), {"kind": "t"}, "t", progress=False)
    with pytest.raises(torch.OutOfMemoryError):
        loop.run(micro_loss, lambda: None, on_out_of_memory=handler)


def test_single_process_data_parallel_is_the_plain_model():
    from tinyglot.distributed import DistContext, data_parallel

    model = torch.nn.Linear(2, 2)

    def loss(m, i):
        return m

    net, micro = data_parallel(model, loss, DistContext(), torch.device("cpu"))
    assert net is model and micro is loss
    assert DistContext().all_reduce_sum(2.5) == 2.5


def test_token_cache_setting(small_pairs, tokenizer, tmp_path, monkeypatch):
    from tinyglot.distill.config import get_preset

    from tinyglot.distributed import DistContext
    from tinyglot.tokcache import tokenized_corpus

    grouped = _grouped(small_pairs)
    monkeypatch.setenv("TINYGLOT_HOME", str(tmp_path / "home"))
    tc = get_preset("lealla-tiny").train
    assert tc.token_cache == "auto"
    tokenized_corpus(grouped, tokenizer, 24, tc, torch.device("cpu"), DistContext())  # auto: off on CPU
    assert not (tmp_path / "home").exists()
    tc.token_cache = "on"
    data = tokenized_corpus(grouped, tokenizer, 24, tc, torch.device("cpu"), DistContext())
    assert len(list((tmp_path / "home" / "token-cache").iterdir())) == 1
    _same(tokenize_pairs(grouped, tokenizer, 24), data)
