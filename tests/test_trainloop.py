"""TrainLoop: step counting, accumulation, logging and evaluation cadence, checkpoints, exact resume."""

from __future__ import annotations

import dataclasses
import json
import math
import time

import pytest
import torch

from tinyglot.errors import CheckpointError, TinyglotError
from tinyglot.evaluation.bitext import BitextResult, LangResult
from tinyglot.trainloop import LazyAdamW, TrainLoop, TrainSettings, clip_grad_norm, fused_optimizer
from tinyglot.training import cpu_bf16_supported, faster_autocast, load_checkpoint

CPU = torch.device("cpu")
META = {"kind": "unit-test", "config": {"width": 8}}


class Net(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.dense = torch.nn.Linear(4, 8)
        self.LayerNorm = torch.nn.LayerNorm(8)
        self.out = torch.nn.Linear(8, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.out(self.LayerNorm(torch.tanh(self.dense(x))))


class Recorder:
    """A ``micro_loss`` whose batch is a pure function of its index (as every recipe's is)."""

    def __init__(self, fail_at: int | None = None) -> None:
        self.indices: list[int] = []
        self.losses: list[float] = []
        self.fail_at = fail_at

    def __call__(self, net: torch.nn.Module, index: int) -> dict:
        if self.fail_at is not None and index == self.fail_at:
            self.fail_at = None
            raise torch.OutOfMemoryError("fake: out of memory")
        gen = torch.Generator().manual_seed(index)
        x = torch.randn(6, 4, generator=gen)
        loss = torch.nn.functional.mse_loss(net(x), x.sum(dim=1, keepdim=True))
        self.indices.append(index)
        self.losses.append(float(loss.detach()))
        return {"loss": loss, "parts": {"loss": float(loss.detach())}, "pairs": 6}


def _settings(**kw) -> TrainSettings:
    base = {"max_steps": 7, "grad_accum": 2, "lr": 1e-2, "warmup_steps": 2, "log_every": 2, "eval_every": 3,
            "save_every": 3, "amp": False}
    return TrainSettings(**{**base, **kw})


def _loop(out, cfg: TrainSettings, seed: int = 0, meta: dict = META) -> TrainLoop:
    torch.manual_seed(seed)
    return TrainLoop(out, Net(), cfg, CPU, meta, "unit", progress=False)


def _evaluator(scores: list[float]):
    calls: list[int] = []

    def evaluate() -> BitextResult:
        p1 = scores[len(calls)]
        calls.append(1)
        return BitextResult("net", "dev", False, [LangResult("de", 10, p1, p1)])

    return evaluate, calls


def _records(out) -> list[dict]:
    return [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]


def test_steps_accumulation_logging_and_checkpoint_cadence(tmp_path):
    cfg = _settings()
    loop = _loop(tmp_path, cfg)
    micro = Recorder()
    evaluate, calls = _evaluator([0.2, 0.5, 0.4])
    saved: list[int | None] = []

    def on_step(step: int) -> None:
        last = tmp_path / "last.pt"
        saved.append(load_checkpoint(last)["step"] if last.exists() else None)

    result = loop.run(micro, evaluate, on_step=on_step)
    assert result.steps == loop.step == 7
    assert micro.indices == list(range(14))  # step s runs micro-batches 2s and 2s+1
    assert saved == [None, None, 3, 3, 3, 6, 7]  # every save_every steps and at the end
    assert len(calls) == 3  # steps 3, 6 and the last
    records = _records(tmp_path)
    train = [r for r in records if "loss" in r]
    assert [r["step"] for r in train] == [2, 4, 6, 7]
    for r in train:  # the logged loss is the mean over the step's micro-batches
        s = r["step"] - 1
        assert r["loss"] == pytest.approx((micro.losses[2 * s] + micro.losses[2 * s + 1]) / 2, rel=1e-6)
        assert math.isfinite(r["grad_norm"]) and r["pairs_per_s"] > 0
    assert train[0]["lr"] > train[1]["lr"] > 0 and train[-1]["lr"] == 0  # linear decay to 0 at max_steps
    dev = [r for r in records if "dev_p1" in r]
    assert [(r["step"], r["dev_p1"]) for r in dev] == [(3, 0.2), (6, 0.5), (7, 0.4)]
    assert result.best_dev_p1 == 0.5 and result.last_loss == train[-1]["loss"]
    best = load_checkpoint(tmp_path / "best.pt", expect=META)
    assert best["step"] == 6 and best["dev_p1"] == 0.5
    last = load_checkpoint(tmp_path / "last.pt", expect=META)
    assert last["step"] == 7 and last["best"] == 0.5
    assert all(torch.equal(last["model"][k], v) for k, v in loop.model.state_dict().items())


def test_resume_continues_exactly(tmp_path):
    cfg = _settings(max_steps=6, log_every=1, eval_every=100)
    whole = _loop(tmp_path / "whole", cfg)
    whole.run(Recorder(), lambda: None)

    class Killed(Exception):
        pass

    def kill_at_5(step: int) -> None:
        if step == 5:
            raise Killed

    first = _loop(tmp_path / "cut", cfg)
    with pytest.raises(Killed):
        first.run(Recorder(), lambda: None, on_step=kill_at_5)  # last.pt holds step 3
    assert [r["step"] for r in _records(tmp_path / "cut")] == [1, 2, 3, 4, 5]

    again = _loop(tmp_path / "cut", cfg, seed=123)  # other initial weights: resume must replace them
    again.resume()
    assert again.step == 3
    assert [r["step"] for r in _records(tmp_path / "cut")] == [1, 2, 3]  # records past the checkpoint dropped
    micro = Recorder()
    again.run(micro, lambda: None)
    assert micro.indices == list(range(6, 12))
    assert [r["step"] for r in _records(tmp_path / "cut")] == [1, 2, 3, 4, 5, 6]
    for (name, a), b in zip(whole.model.state_dict().items(), again.model.state_dict().values(), strict=True):
        assert torch.equal(a, b), name
    assert again.scheduler.get_last_lr() == whole.scheduler.get_last_lr()


def test_resume_refuses_another_runs_checkpoint(tmp_path):
    cfg = _settings(max_steps=3)
    _loop(tmp_path, cfg).run(Recorder(), lambda: None)
    other = _loop(tmp_path, cfg, meta={**META, "config": {"width": 16}})
    with pytest.raises(CheckpointError, match="config differs"):
        other.resume()


def test_the_optimizer_is_fused_where_torch_has_the_kernel(tmp_path):
    assert _loop(tmp_path, _settings()).optimizer.defaults["fused"] is True  # on the CPU
    assert not fused_optimizer(Net(), torch.device("mps"))  # no kernel there: the foreach AdamW
    counted = Net()
    counted.register_parameter("count", torch.nn.Parameter(torch.zeros(2, dtype=torch.int64), requires_grad=False))
    assert not fused_optimizer(counted, CPU)


def test_no_weight_decay_on_biases_and_layer_norms(tmp_path):
    loop = _loop(tmp_path, _settings(weight_decay=0.1))
    decay, plain = loop.optimizer.param_groups
    names = {id(p): n for n, p in loop.model.named_parameters()}
    assert decay["weight_decay"] == 0.1 and plain["weight_decay"] == 0.0
    assert sorted(names[id(p)] for p in decay["params"]) == ["dense.weight", "out.weight"]
    assert sorted(names[id(p)] for p in plain["params"]) == ["LayerNorm.bias", "LayerNorm.weight", "dense.bias",
                                                             "out.bias"]


def test_non_finite_loss_stops_with_the_step(tmp_path):
    def nan_at_step_3(net, index):
        loss = net(torch.ones(2, 4)).sum() * (math.nan if index >= 4 else 1.0)
        return {"loss": loss, "parts": {"loss": float(loss.detach())}, "pairs": 2}

    loop = _loop(tmp_path, _settings(max_steps=5))
    with pytest.raises(TinyglotError, match="loss became nan at step 3"):
        loop.run(nan_at_step_3, lambda: None)
    assert loop.step == 2


def test_out_of_memory_step_is_retried_once_when_the_handler_acts(tmp_path):
    handled: list[int] = []

    def handler() -> bool:
        handled.append(1)
        return True

    micro = Recorder(fail_at=3)  # the second micro-batch of the second step
    loop = _loop(tmp_path, _settings(max_steps=3))
    assert loop.run(micro, lambda: None, on_out_of_memory=handler).steps == 3
    assert handled == [1]
    assert micro.indices == [0, 1, 2, 2, 3, 4, 5]  # step 2 ran again from its first micro-batch

    loop = _loop(tmp_path / "b", _settings(max_steps=3))
    with pytest.raises(torch.OutOfMemoryError):
        loop.run(Recorder(fail_at=1), lambda: None, on_out_of_memory=lambda: False)
    assert loop.step == 0


def _embedding_steps(sparse: bool, batches: list[torch.Tensor], optimizer=None, rows: int = 6, lr: float = 0.1,
                     schedule=None, flush: bool = True, dtype=torch.float32,
                     resume: tuple[torch.Tensor, dict] | None = None) -> tuple[torch.Tensor, dict]:
    """A table of ``rows`` x 3 trained by LazyAdamW (with weight decay) through clip_grad_norm, its
    rows caught up as the training loop does (watched, flushed at the end); the weights and the
    optimizer's state_dict.  ``resume``: weights and state_dict to start from.  The loss is linear in
    the rows, so the gradients do not depend on the weights and two optimizers' paths compare to float
    precision (a loss that converges amplifies rounding, and makes rows' gradients small enough for
    ``eps`` to count)."""
    torch.manual_seed(0)
    emb = torch.nn.Embedding(rows, 3, sparse=sparse, dtype=dtype)
    target = torch.randn(rows, 3, dtype=dtype)
    opt = (optimizer or LazyAdamW)(emb.parameters(), lr=lr, weight_decay=0.1)
    if resume is not None:
        with torch.no_grad():
            emb.weight.copy_(resume[0])
        opt.load_state_dict(resume[1])
    scheduler = torch.optim.lr_scheduler.LambdaLR(opt, schedule or (lambda step: 1.0))
    if sparse:
        opt.watch(emb)
    for ids in batches:
        opt.zero_grad(set_to_none=True)
        (emb(ids) * target[ids]).sum().mul(3).backward()
        clip_grad_norm(list(emb.parameters()), 1.0)
        opt.step()
        scheduler.step()
    if sparse and flush:
        opt.flush()
    return emb.weight.detach().clone(), opt.state_dict()


def test_lazy_adamw_equals_adamw_on_rows_every_batch_holds():
    # every row (some twice: duplicates are summed) in every batch: the lazy step is AdamW's, clipping included
    batches = [torch.tensor([[0, 1, 2, 3, 4, 5, 5, 2]]), torch.tensor([[5, 4, 3, 2, 1, 0, 0, 0]])] * 3
    lazy, lazy_state = _embedding_steps(True, batches)
    dense, dense_state = _embedding_steps(False, batches, torch.optim.AdamW)
    lazy_state, dense_state = lazy_state["state"][0], dense_state["state"][0]
    assert torch.allclose(lazy, dense, atol=1e-6)
    for key in ("exp_avg", "exp_avg_sq", "step"):
        assert torch.allclose(lazy_state[key], dense_state[key], atol=1e-7)


@pytest.mark.parametrize("flush_rows", [None, 7])
def test_lazy_adamw_catches_up_to_adamw_on_the_rows_a_batch_does_not_hold(flush_rows, monkeypatch):
    # 300 steps of a warm-up/decay schedule over 40 rows, 6 a batch: a row waits up to dozens of steps,
    # row 0 appears only in the first batch (299 steps behind: past the 220-step horizon of its sums)
    # and row 39 in none (weight decay alone); flush_rows 7: the final flush in chunks of 7 rows
    if flush_rows:
        monkeypatch.setattr("tinyglot.trainloop.FLUSH_ROWS", flush_rows)
    gen = torch.Generator().manual_seed(1)
    batches = [torch.tensor([[0, 1, 2, 3, 4, 5]])] + [torch.randint(1, 39, (1, 6), generator=gen)
                                                      for _ in range(299)]
    schedule = lambda step: min(1.0, (step + 1) / 10) * (1 - step / 300)  # noqa: E731
    kw = {"rows": 40, "lr": 0.05, "schedule": schedule, "dtype": torch.float64}  # float64: no rounding noise
    lazy, lazy_state = _embedding_steps(True, batches, **kw)
    dense, dense_state = _embedding_steps(False, batches, torch.optim.AdamW, **kw)
    lazy_state, dense_state = lazy_state["state"][0], dense_state["state"][0]
    start, _ = _embedding_steps(True, [], **kw)
    assert torch.allclose(lazy, dense, rtol=0, atol=5e-6)  # (eps: 1e-6 measured)
    assert torch.allclose(lazy_state["exp_avg"], dense_state["exp_avg"], rtol=0, atol=1e-7)
    assert torch.allclose(lazy_state["exp_avg_sq"], dense_state["exp_avg_sq"], rtol=1e-5, atol=1e-12)
    assert float(lazy_state["step"]) == 300
    # no batch held row 39: AdamW's weight decay of every step, lr_t * 0.1
    decay = math.prod(1 - 0.05 * schedule(step) * 0.1 for step in range(300))
    assert torch.allclose(lazy[39], start[39] * decay, rtol=1e-12) and decay < 0.5
    # without the catch-up the rows stand where their last batch left them (TensorFlow's LazyAdam)
    stale, _ = _embedding_steps(True, batches, flush=False, **kw)
    assert torch.equal(stale[39], start[39])
    assert float((stale[0] - dense[0]).abs().max()) > 1e-3


def test_lazy_adamw_state_resumes_flushed():
    # a flushed optimizer's state loads into a new one that goes on as the first would have
    gen = torch.Generator().manual_seed(2)
    batches = [torch.randint(0, 10, (1, 3), generator=gen) for _ in range(40)]
    whole, _ = _embedding_steps(True, batches, rows=10)
    resumed, _ = _embedding_steps(True, batches[17:], rows=10, resume=_embedding_steps(True, batches[:17], rows=10))
    assert torch.allclose(resumed, whole, atol=1e-6)
    stale, _ = _embedding_steps(True, batches[17:], rows=10,
                                resume=_embedding_steps(True, batches[:17], rows=10, flush=False))
    assert not torch.allclose(stale, whole, atol=1e-4)  # an unflushed state loses the rows' pending moves


def test_watch_catches_up_the_rows_a_lookup_reads_and_only_those():
    torch.manual_seed(0)
    emb = torch.nn.Embedding(4, 2, sparse=True)
    opt = LazyAdamW(emb.parameters(), lr=0.1, weight_decay=0.1)
    for ids in ([0, 1], [0, 1], [2]):  # rows 0 and 1 are one step behind after the third
        opt.zero_grad(set_to_none=True)
        emb(torch.tensor(ids)).sum().backward()
        opt.step()
    before = emb.weight.detach().clone()
    with opt.watching(torch.nn.Sequential(emb)):
        emb(input=torch.tensor([0]))  # by keyword too
    assert not torch.equal(emb.weight[0], before[0]) and torch.equal(emb.weight[1:], before[1:])
    emb(torch.tensor([1]))  # the hooks went with the block
    assert torch.equal(emb.weight[1], before[1])


def test_train_loop_catches_up_sparse_rows_before_batches_saves_and_evaluations(tmp_path):
    class Table(torch.nn.Module):
        def __init__(self, sparse: bool) -> None:
            super().__init__()
            self.word_embeddings = torch.nn.Embedding(30, 8, sparse=sparse)
            self.out = torch.nn.Linear(8, 1)

    def micro_loss(net, index):
        gen = torch.Generator().manual_seed(index)
        ids = torch.randint(0, 29, (4, 3), generator=gen)  # row 29: never in a batch
        loss = (net.out(torch.tanh(net.word_embeddings(ids))).squeeze(-1) - ids.float() / 30).pow(2).mean()
        return {"loss": loss, "parts": {"loss": float(loss.detach())}, "pairs": 4}

    seen = []
    for sparse in (False, True):
        torch.manual_seed(0)
        loop = TrainLoop(tmp_path / str(sparse), Table(sparse), _settings(max_steps=24, grad_accum=1,
                                                                           eval_every=10, save_every=5),
                         CPU, META, "unit", progress=False)
        weights: list[torch.Tensor] = []

        def evaluate(loop=loop, weights=weights) -> BitextResult:
            weights.append(loop.model.word_embeddings.weight.detach().clone())
            return BitextResult("net", "dev", False, [LangResult("de", 10, 0.5, 0.5)])  # best: the first

        loop.run(micro_loss, evaluate)
        seen.append((weights, load_checkpoint(tmp_path / str(sparse) / "last.pt", expect=META)["model"],
                     load_checkpoint(tmp_path / str(sparse) / "best.pt", expect=META)["model"]))
    (dense_evals, dense_last, dense_best), (lazy_evals, lazy_last, lazy_best) = seen
    assert len(lazy_evals) == 3  # steps 10, 20, 24: each evaluation saw AdamW's table
    for a, b in zip(dense_evals, lazy_evals, strict=True):
        assert torch.allclose(a, b, atol=1e-5)
    for key in dense_last:
        assert torch.allclose(dense_last[key], lazy_last[key], atol=1e-5), key
        assert torch.allclose(dense_best[key], lazy_best[key], atol=1e-5), key
    assert not torch.equal(lazy_last["word_embeddings.weight"][29], dense_evals[0][29])  # decayed on


def test_clip_grad_norm_of_sparse_gradients_is_that_of_the_dense_ones():
    ids = torch.tensor([[0, 3, 3, 5]])
    norms, grads = [], []
    for sparse in (False, True):
        torch.manual_seed(0)
        emb, head = torch.nn.Embedding(6, 3, sparse=sparse), torch.nn.Linear(3, 1)
        head(emb(ids)).pow(2).sum().mul(50).backward()
        norms.append(float(clip_grad_norm([*emb.parameters(), *head.parameters()], 0.5)))
        grads.append(emb.weight.grad.to_dense() if sparse else emb.weight.grad)
        assert emb.weight.grad.is_sparse == sparse
    assert norms[0] > 0.5 and norms[1] == pytest.approx(norms[0], rel=1e-5)
    assert torch.allclose(grads[0], grads[1], atol=1e-6)
    assert float(torch.linalg.vector_norm(grads[1])) < 0.5 + 1e-4  # clipped


def test_lazy_adamw_refuses_amsgrad_on_sparse_rows_before_any_parameter_moves():
    emb, head = torch.nn.Embedding(6, 3, sparse=True), torch.nn.Linear(3, 1)
    opt = LazyAdamW([*emb.parameters(), *head.parameters()], lr=0.1, amsgrad=True)
    head(emb(torch.tensor([[0, 3]]))).sum().backward()
    before = head.weight.detach().clone()
    with pytest.raises(TinyglotError, match="plain AdamW"):
        opt.step()
    assert torch.equal(head.weight, before) and emb.weight.grad.is_sparse  # the dense step did not run


class Precision(Recorder):
    """A Recorder that also records whether each call ran under bf16 autocast, and can be made slow under one
    precision (sleep) so that train.cpu_bf16=auto's timing has a known answer."""

    def __init__(self, slow: str | None = None) -> None:
        super().__init__()
        self.bf16: list[bool] = []
        self.slow = slow

    def __call__(self, net: torch.nn.Module, index: int) -> dict:
        bf16 = torch.is_autocast_enabled("cpu") and torch.get_autocast_dtype("cpu") == torch.bfloat16
        self.bf16.append(bf16)
        if self.slow == ("bf16" if bf16 else "fp32"):
            time.sleep(0.05)
        return super().__call__(net, index)


needs_bf16 = pytest.mark.skipif(not cpu_bf16_supported(), reason="this CPU has no bf16 kernels")


def test_cpu_bf16_setting_is_checked():
    with pytest.raises(TinyglotError, match="cpu_bf16"):
        _settings(cpu_bf16="yes").validate()


@needs_bf16
def test_cpu_bf16_on_runs_every_step_under_bf16_autocast(tmp_path):
    micro = Precision()
    loop = _loop(tmp_path, _settings(max_steps=3, cpu_bf16="on"))
    result = loop.run(micro, lambda: None)
    assert micro.bf16 == [True] * 6 and result.precision == "bfloat16"
    assert load_checkpoint(tmp_path / "last.pt")["autocast"] == "bfloat16"
    plain = _loop(tmp_path / "off", _settings(max_steps=3))
    assert plain.run(Precision(), lambda: None).precision == "fp32"


@needs_bf16
def test_cpu_bf16_auto_keeps_fp32_when_bf16_is_slower_and_leaves_no_trace(tmp_path):
    cfg = _settings(max_steps=4, log_every=1, eval_every=100)
    off = _loop(tmp_path / "off", cfg)
    off.run(Recorder(), lambda: None)
    micro = Precision(slow="bf16")
    auto = _loop(tmp_path / "auto", dataclasses.replace(cfg, cpu_bf16="auto"))
    result = auto.run(micro, lambda: None)
    # the probe: batches spread over the run's 8 (4 steps of 2 micro-batches), each called once untimed in
    # the precision that goes second, then both ways, which first alternating; then the 8 training calls in fp32
    assert micro.bf16 == [False, True, False, True, False, True] * 4 + [False] * 8
    assert micro.indices[:24] == [i for i in range(8) for _ in (0, 1, 2)]
    assert result.precision == "fp32"
    probe = _records(tmp_path / "auto")[0]["cpu_bf16"]
    assert probe["chosen"] == "fp32" and probe["bf16_ms"] > probe["fp32_ms"] >= 0
    # its gradients are thrown away and the RNG restored: the same weights as a run without it
    for (name, a), b in zip(off.model.state_dict().items(), auto.model.state_dict().values(), strict=True):
        assert torch.equal(a, b), name


@needs_bf16
def test_cpu_bf16_auto_takes_bf16_when_faster_and_a_resumed_run_keeps_it(tmp_path):
    cfg = _settings(max_steps=6, log_every=1, eval_every=100, cpu_bf16="auto")

    class Killed(Exception):
        pass

    def kill_at_5(step: int) -> None:
        if step == 5:
            raise Killed

    first = Precision(slow="fp32")
    with pytest.raises(Killed):
        _loop(tmp_path, cfg).run(first, lambda: None, on_step=kill_at_5)
    assert first.bf16[8 * 3:] == [True] * 10  # after the probe's 8 batches, each once untimed and both ways
    assert load_checkpoint(tmp_path / "last.pt")["autocast"] == "bfloat16"
    again = _loop(tmp_path, cfg)
    again.resume()
    micro = Precision(slow="bf16")  # would make a new probe choose fp32: a resumed run does not probe again
    assert again.run(micro, lambda: None).precision == "bfloat16"
    assert micro.bf16 == [True] * 6 and micro.indices == list(range(6, 12))


def test_faster_autocast_picks_the_faster_precision():
    def loss(slow: str):
        def call(index: int) -> torch.Tensor:
            bf16 = torch.is_autocast_enabled("cpu")
            if slow == ("bf16" if bf16 else "fp32"):
                time.sleep(0.03)
            x = torch.ones(3, requires_grad=True)
            return (x * 2).sum()
        return call

    assert faster_autocast(loss("fp32"), CPU, [0, 5]).chosen == torch.bfloat16
    slower = faster_autocast(loss("bf16"), CPU, [0, 5])
    assert slower.chosen is None and slower.bf16_s > slower.fp32_s
    assert "fp32 (" in slower.describe()


def test_faster_autocast_does_not_time_what_the_first_call_of_a_batch_pays():
    # the e5 profile's case: building a batch costs more than its forward and backward, and is paid once
    built: set[int] = set()

    def call(index: int) -> torch.Tensor:
        if index not in built:
            built.add(index)
            time.sleep(0.08)
        if not torch.is_autocast_enabled("cpu"):
            time.sleep(0.01)  # fp32 slower
        x = torch.ones(3, requires_grad=True)
        return (x * 2).sum()

    probe = faster_autocast(call, CPU, [0, 3, 6, 9])
    assert probe.chosen == torch.bfloat16 and probe.bf16_s < 0.01 < probe.fp32_s < 0.05
