"""The training loop every tinyglot recipe runs: AdamW (fused; lazy for sparse embedding rows),
warm-up/decay, accumulation, clipping, AMP, data parallelism, progress bar, JSONL log, periodic dev
evaluation, best/last checkpoints written atomically, and exact resume.

A recipe supplies the model, a ``micro_loss(net, index)`` that computes the loss of micro-batch
``index`` (a pure function of the index, so resuming needs no data-iterator state) and an
``evaluate()`` that returns a dev :class:`~tinyglot.evaluation.BitextResult`.
"""

from __future__ import annotations

import logging
import math
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar
from collections.abc import Callable, Iterator

import torch

from tinyglot.batching import BATCH_GROUPINGS
from tinyglot.config import MAX_BATCH, MAX_THREADS, validate_at_most, validate_positive
from tinyglot.distributed import DistContext
from tinyglot.errors import TinyglotError
from tinyglot import allocator
from tinyglot.training import (HeapTrimmer, MetricsLog, Progress, amp_dtype, autocast, cpu_bf16_supported,
                               faster_autocast, limit_allocator_growth, load_checkpoint, process_cpu_seconds,
                               rng_state, save_checkpoint, set_rng_state, warmup_linear_decay)

log = logging.getLogger("tinyglot.train")
NO_DECAY = ("bias", "LayerNorm.weight", "LayerNorm.bias")
PROBE_BATCHES = 8  # train.cpu_bf16=auto times this many batches of the run both ways


# A row's pending momentum moves are summed over this many steps at most: beyond them they are below
# this share of one step (they fall as (beta1 / sqrt(beta2)) ** steps, 0.9005 for AdamW's betas: 220 steps).
CATCH_UP_TOLERANCE = 1e-10
FLUSH_ROWS = 32_768  # rows caught up at once by LazyAdamW.flush


@dataclass
class _Lag:
    """What :meth:`LazyAdamW.catch_up` needs of a lazily stepped parameter: the optimizer step each row
    is current at, and for every step t the AdamW step size of a zero gradient's moment ratio
    (``lr_t * sqrt(1 - beta2^t) / (1 - beta1^t)``) and the running sum of ``log(1 - lr_t * wd)``
    (index 0: before the first step)."""

    last: torch.Tensor
    size: list[float]
    log_decay: list[float]

    @property
    def step(self) -> int:
        return len(self.size) - 1


class LazyAdamW(torch.optim.AdamW):
    """AdamW, except for a parameter whose gradient is sparse (an ``nn.Embedding(sparse=True)``): that
    one is stepped in the rows its gradient holds, and every other row catches up later, so that the
    result is AdamW's at the cost of the batch's rows.

    A dense gradient over a large token table makes every step pay for the whole table (zeroing,
    clipping, the moments); the lazy rows cost the batch's tokens, whatever the vocabulary
    (``benchmarks/optimizer_step.py``).  In AdamW a row that a batch does not hold still moves, on its
    momentum, and decays.  Those moves depend only on the row's moments, the learning rates and the
    number of steps, so they are summed in closed form when the row is next needed
    (:meth:`catch_up`): by the forward pre-hook of the embedding (:meth:`watch`) before a batch reads
    it, before its own step, and for every row at :meth:`flush` (before an evaluation or a
    checkpoint).  The sums are AdamW's but for ``eps``, which is added to the root of the row's second
    moment as at the first skipped step instead of at each (300 steps of a schedule in float64: within
    1e-6 of AdamW's weights at eps 1e-8, 1e-11 at eps 1e-30).
    TensorFlow's LazyAdam, which skips those moves, lost 1.6 dev P@1 against AdamW (docs/results.md,
    "96k pieces in 27 minutes").

    The state has AdamW's keys and shapes, so a flushed checkpoint resumes either way.  Under a
    GradScaler with the fused kernel a step whose gradients overflowed is skipped for these rows too.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._lags: dict[torch.Tensor, _Lag] = {}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        super().load_state_dict(state_dict)
        self._lags.clear()  # a saved state is flushed: every row is current at its step

    def watch(self, embedding: torch.nn.Embedding) -> Any:
        """Catch up the rows a batch reads before ``embedding`` looks them up (a forward pre-hook; the
        returned handle removes it)."""
        def hook(module: torch.nn.Embedding, args: tuple, kwargs: dict) -> None:
            self.catch_up(module.weight, args[0] if args else kwargs["input"])

        return embedding.register_forward_pre_hook(hook, with_kwargs=True)

    @contextmanager
    def watching(self, model: torch.nn.Module) -> Iterator[None]:
        """:meth:`watch` every sparse ``nn.Embedding`` of ``model`` while the block runs (the hooks hold
        this optimizer and its moments, so they go when it ends)."""
        hooks = [self.watch(m) for m in model.modules() if isinstance(m, torch.nn.Embedding) and m.sparse]
        try:
            yield
        finally:
            for hook in hooks:
                hook.remove()

    def flush(self) -> None:
        """Catch up every row of every lazily stepped parameter: the parameters and moments are then
        AdamW's, to save or evaluate."""
        for p in list(self._lags):
            self.catch_up(p)

    def step(self, closure: Callable[[], Any] | None = None) -> Any:
        sparse = [(group, p, p.grad) for group in self.param_groups for p in group["params"]
                  if p.grad is not None and p.grad.is_sparse]
        if any(group["amsgrad"] or group["maximize"] for group, _, _ in sparse):  # before any parameter moves
            raise TinyglotError("sparse embedding gradients take plain AdamW (no amsgrad, no maximize)",
                                "set train.sparse_embeddings=false")
        for _, p, _ in sparse:
            p.grad = None  # AdamW refuses sparse gradients: it steps the dense ones alone
        try:
            loss = super().step(closure)
        finally:
            for _, p, grad in sparse:
                p.grad = grad
        found_inf = getattr(self, "found_inf", None)  # set by a GradScaler for fused optimizers
        if found_inf is not None and bool(found_inf):
            return loss
        with torch.no_grad():
            for group, p, grad in sparse:
                self._lazy_step(group, p, grad.coalesce())
        return loss

    def _group(self, p: torch.Tensor) -> dict[str, Any]:
        return next(g for g in self.param_groups if any(q is p for q in g["params"]))

    def _lag(self, p: torch.Tensor) -> _Lag | None:
        state = self.state.get(p)
        if not state:
            return None  # not stepped yet: nothing to catch up
        if p not in self._lags:
            n = int(state["step"])
            self._lags[p] = _Lag(torch.full((p.shape[0],), n, dtype=torch.int64, device=p.device), [0.0] * (n + 1),
                                 [0.0] * (n + 1))
        return self._lags[p]

    @torch.no_grad()
    def catch_up(self, p: torch.Tensor, rows: torch.Tensor | None = None) -> None:
        """Move ``rows`` of ``p`` (all rows when None) as AdamW would have since their last step: on
        their momentum alone, with the weight decay of each step."""
        lag = self._lag(p)
        if lag is None:
            return
        n = lag.step
        if rows is None:
            behind = (lag.last < n).nonzero().squeeze(1)
            for start in range(0, len(behind), FLUSH_ROWS):  # a few copies of these rows at a time
                self._catch_up_rows(p, lag, behind[start:start + FLUSH_ROWS])
        else:
            distinct = rows.reshape(-1).to(p.device).unique()
            self._catch_up_rows(p, lag, distinct[lag.last[distinct] < n])

    def _catch_up_rows(self, p: torch.Tensor, lag: _Lag, sel: torch.Tensor) -> None:
        if not len(sel):
            return
        n = lag.step
        group, state = self._group(p), self.state[p]
        beta1, beta2 = group["betas"]
        since, inverse = lag.last[sel].unique(return_inverse=True)  # rows current at the same step share sums
        size = torch.tensor(lag.size, dtype=torch.float64, device=p.device)
        log_decay = torch.tensor(lag.log_decay, dtype=torch.float64, device=p.device)
        ratio = beta1 / math.sqrt(beta2)  # a zero gradient's moment ratio m / sqrt(v) shrinks by this a step
        horizon = n - int(since.min())
        if ratio < 1:
            horizon = min(horizon, math.ceil(math.log(CATCH_UP_TOLERANCE) / math.log(ratio)))
        j = torch.arange(1, horizon + 1, dtype=torch.int64, device=p.device)
        t = since[:, None] + j  # the skipped steps, since + 1 ... n (beyond n: masked)
        live = t <= n
        t = t.clamp(max=n)
        # the move of step t, decayed by the steps after it: size_t * ratio^j * prod_{i > t}(1 - lr_i wd)
        moves = (size[t] * ratio ** j.double() * torch.exp(log_decay[n] - log_decay[t]) * live).sum(1)
        decay = torch.exp(log_decay[n] - log_decay[since])
        behind = (n - lag.last[sel]).double()
        m, v = state["exp_avg"][sel], state["exp_avg_sq"][sel]
        dtype = p.dtype
        w = p[sel].mul_(decay[inverse].to(dtype)[:, None])
        # eps as AdamW adds it at the first skipped step (to the root of the bias-corrected moment)
        eps = (group["eps"] * torch.sqrt(1 - beta2 ** (since + 1).double()) / math.sqrt(beta2))[inverse]
        w.sub_(m / (v.sqrt() + eps.to(dtype)[:, None]) * moves[inverse].to(dtype)[:, None])
        p.index_copy_(0, sel, w)
        state["exp_avg"].index_copy_(0, sel, m.mul_((beta1 ** behind).to(dtype)[:, None]))
        state["exp_avg_sq"].index_copy_(0, sel, v.mul_((beta2 ** behind).to(dtype)[:, None]))
        lag.last[sel] = n

    def _lazy_step(self, group: dict[str, Any], p: torch.Tensor, grad: torch.Tensor) -> None:
        rows, g = grad.indices()[0], grad.values()
        self.catch_up(p, rows)  # (the forward pre-hook of watch() did it already when there is one)
        state = self.state[p]
        if not state:
            state["step"] = torch.tensor(0.0)
            state["exp_avg"] = torch.zeros_like(p, memory_format=torch.preserve_format)
            state["exp_avg_sq"] = torch.zeros_like(p, memory_format=torch.preserve_format)
        lag = self._lag(p)
        assert lag is not None
        state["step"] += 1
        step = float(state["step"])
        (beta1, beta2), lr = group["betas"], float(group["lr"])
        correction1, root_correction2 = 1 - beta1 ** step, math.sqrt(1 - beta2 ** step)  # AdamW's bias corrections
        lag.size.append(lr * root_correction2 / correction1)
        lag.log_decay.append(lag.log_decay[-1] + math.log1p(-lr * group["weight_decay"]))
        m = state["exp_avg"].index_select(0, rows).mul_(beta1).add_(g, alpha=1 - beta1)
        v = state["exp_avg_sq"].index_select(0, rows).mul_(beta2).addcmul_(g, g, value=1 - beta2)
        state["exp_avg"].index_copy_(0, rows, m)
        state["exp_avg_sq"].index_copy_(0, rows, v)
        denom = (v.sqrt() / root_correction2).add_(group["eps"])
        w = p.index_select(0, rows).mul_(1 - lr * group["weight_decay"])
        p.index_copy_(0, rows, w.addcdiv_(m, denom, value=-lr / correction1))
        lag.last[rows] = int(step)


def fused_optimizer(model: torch.nn.Module, device: torch.device) -> bool:
    """Whether PyTorch's fused AdamW takes ``model``'s parameters: floating point, on a CPU or CUDA."""
    return device.type in ("cpu", "cuda") and all(p.is_floating_point() for p in model.parameters())


def clip_grad_norm(params: list[torch.nn.Parameter], max_norm: float) -> torch.Tensor:
    """``torch.nn.utils.clip_grad_norm_`` that also takes sparse gradients (their duplicate rows summed
    first; torch's own refuses them): the total 2-norm before clipping."""
    if not any(p.grad is not None and p.grad.is_sparse for p in params):
        return torch.nn.utils.clip_grad_norm_(params, max_norm)
    grads = []
    for p in params:
        if p.grad is not None:
            if p.grad.is_sparse:
                p.grad = p.grad.coalesce()
            grads.append(p.grad.values() if p.grad.is_sparse else p.grad)
    total = torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(g.float()) for g in grads]))
    scale = torch.clamp(max_norm / (total + 1e-6), max=1.0)
    for g in grads:
        g.mul_(scale.to(g.dtype))
    return total


@dataclass
class TrainSettings:
    """Optimisation, data and logging settings every recipe shares (recipes subclass it)."""

    batch_size: int = 64  # pairs per optimizer step and process (before grad_accum)
    grad_accum: int = 1
    lr: float = 5e-4
    weight_decay: float = 0.01
    warmup_steps: int = 100
    max_steps: int = 1000
    clip_norm: float = 1.0
    lang_temperature: float = 2.0  # language sampling p ~ (n_l/N)^(1/T)
    # Within a language that has both, the share of draws that take a general-domain row (Pair.general:
    # the pipeline's data.general); 0 = every row of the language equally likely (general rows then
    # come up in proportion to their number).
    general_share: float = 0.0
    # How a chunk of draws is cut into batches: "length" (sentences of similar length together: little
    # padding); "source" (by the rows' src first, then length: each batch holds one corpus or general
    # source as far as the chunk allows, so its in-batch negatives are of the same kind of text, as
    # E5's own training batches were).
    batch_grouping: str = "length"
    # A new vocabulary (no tokenizer given) holds every character that the whole training text holds
    # twice or more, up to this share of its pieces, the most frequent first (tinyglot.tokenizer.
    # frequent_characters); 0 = only the characters of SentencePiece's sample (its character_coverage).
    # It pays with word pieces: measured +0.4 / +0.3 on narrative / documentation prose at 96k pieces,
    # -0.3 / +0.3 at 40k, -1.6 / -1.2 at 20k (docs/results.md), so 0 unless asked; the e5 profile asks 0.125.
    vocab_char_share: float = 0.0
    dev_fraction: float = 0.02
    dev_pairs_per_lang: int = 200
    log_every: int = 10
    eval_every: int = 250
    save_every: int = 250
    seed: int = 0
    device: str = "auto"
    amp: bool = True  # autocast on CUDA (bf16 where supported); on CPU see cpu_bf16
    # bf16 autocast on CPU: "off"; "on"; "auto": time 8 batches of the run both ways before the first step and
    # keep bf16 when it is clearly faster (fast-small's steps: 40 % faster on an AMD Zen 4; its forward and
    # backward 49 % slower on an Intel Xeon with AVX-512 BF16 and no AMX, so no CPU flag can decide it). The
    # choice goes to metrics.jsonl and the checkpoint, so a resumed run does not change it.
    cpu_bf16: str = "off"
    threads: int = 0  # torch intra-op threads; 0 keeps torch's default
    # torch.compile the encoder (dynamic shapes: length buckets change the padded length). Off by
    # default: it pays off on GPUs for long runs, costs minutes of compilation, and does not help on CPUs.
    compile: bool = False
    # The tokenised corpus as memory-mapped arrays in a cache keyed by tokenizer and corpus hashes
    # (tokenised once, then read; under torchrun rank 0 writes it and the others read it).
    # "auto": on for CUDA runs, off on CPU (tokenising in memory as before); "on"; "off".
    token_cache: str = "auto"
    token_cache_dir: str = ""  # "" = $TINYGLOT_HOME/token-cache

    TOKEN_CACHE = ("auto", "on", "off")
    CPU_BF16 = ("off", "on", "auto")

    POSITIVE: ClassVar[tuple[str, ...]] = ("batch_size", "grad_accum", "lr", "max_steps", "clip_norm",
                                          "lang_temperature", "dev_pairs_per_lang", "log_every", "eval_every",
                                          "save_every")

    def validate(self) -> None:
        validate_positive(self, self.POSITIVE, "train")
        validate_at_most(self, {"threads": MAX_THREADS, "batch_size": MAX_BATCH, "dev_pairs_per_lang": MAX_BATCH},
                         "train")
        if self.seed < 0 or self.warmup_steps < 0 or self.threads < 0:
            raise TinyglotError("train.seed, train.warmup_steps and train.threads must be >= 0")
        if not 0.0 <= self.general_share < 1.0:
            raise TinyglotError(f"train.general_share must be in [0, 1), got {self.general_share}",
                                "0 samples a language's rows uniformly; 0.5 takes half of its draws from "
                                "its general-domain rows")
        if not 0.0 <= self.vocab_char_share <= 1.0:
            raise TinyglotError(f"train.vocab_char_share must be in [0, 1], got {self.vocab_char_share}",
                                "0.125 lets characters take up to an eighth of a new vocabulary; 0 leaves "
                                "them to SentencePiece's sample")
        if self.batch_grouping not in BATCH_GROUPINGS:
            raise TinyglotError(f"unknown train.batch_grouping {self.batch_grouping!r}",
                                f"choose one of: {', '.join(BATCH_GROUPINGS)}")
        if self.token_cache not in self.TOKEN_CACHE:
            raise TinyglotError(f"unknown train.token_cache {self.token_cache!r}",
                                f"choose one of: {', '.join(self.TOKEN_CACHE)}")
        if self.cpu_bf16 not in self.CPU_BF16:
            raise TinyglotError(f"unknown train.cpu_bf16 {self.cpu_bf16!r}",
                                f"choose one of: {', '.join(self.CPU_BF16)}")

    def wants_token_cache(self, device_type: str) -> bool:
        return self.token_cache == "on" or (self.token_cache == "auto" and device_type == "cuda")


@dataclass
class LoopResult:
    steps: int
    seconds: float
    best_dev_p1: float | None
    last_loss: float
    precision: str = "fp32"  # "fp32", or the autocast dtype the steps ran under ("bfloat16", "float16")


MicroLoss = Callable[[torch.nn.Module, int], dict[str, Any]]


class TrainLoop:
    """Runs ``model`` to ``cfg.max_steps`` in ``out``; ``last.pt``/``best.pt``/``metrics.jsonl``.

    ``micro_loss`` returns ``{"loss": tensor, "parts": {name: float}, "pairs": int}``.  With
    ``global_loss=True`` (data-parallel losses normalised by the global batch, e.g. gathered
    contrastive negatives) the loss is multiplied by the world size so that DDP's gradient
    averaging yields the gradient of the global loss.
    """

    def __init__(self, out: Path, model: torch.nn.Module, cfg: TrainSettings, device: torch.device,
                 meta: dict[str, Any], title: str, ctx: DistContext | None = None,
                 progress: bool = True, global_loss: bool = False) -> None:
        self.out, self.model, self.cfg, self.device = Path(out), model, cfg, device
        self.meta, self.title = meta, title
        self.ctx = ctx or DistContext()
        self.progress = progress and self.ctx.is_main
        self.scale = self.ctx.world if global_loss else 1
        self.log = MetricsLog(self.out / "metrics.jsonl")
        params = list(model.named_parameters())
        groups = [
            {"params": [p for n, p in params if not n.endswith(NO_DECAY)], "weight_decay": cfg.weight_decay},
            {"params": [p for n, p in params if n.endswith(NO_DECAY)], "weight_decay": 0.0},
        ]
        # fused: one kernel over all the parameters instead of a loop of ops per tensor (the same AdamW;
        # 2x256 student at 96k pieces, 2 CPU cores: 468 against 575 ms a step; benchmarks/optimizer_step.py)
        self.optimizer = LazyAdamW(groups, lr=cfg.lr, fused=fused_optimizer(model, device))
        self.scheduler = warmup_linear_decay(self.optimizer, cfg.warmup_steps, cfg.max_steps)
        self.dtype = amp_dtype(device, cfg.amp, cfg.cpu_bf16)
        # "auto" on a CPU: decided by timing both before the first step (run), or restored by resume
        self.probe_autocast = device.type == "cpu" and cfg.cpu_bf16 == "auto"
        self.scaler = torch.amp.GradScaler("cuda", enabled=self.dtype == torch.float16)
        self.step, self.best = 0, None
        limit_allocator_growth()
        self.trimmer = HeapTrimmer()
        log.info("memory allocator: %s", allocator.active())

    # ---------------------------------------------------------------- state
    def resume(self) -> None:
        ck = load_checkpoint(self.out / "last.pt", expect=self.meta)
        self.model.load_state_dict(ck["model"])
        self.optimizer.load_state_dict(ck["optimizer"])
        self.scheduler.load_state_dict(ck["scheduler"])
        if ck["scaler"] and self.scaler.is_enabled():  # a CPU run saved an empty (disabled) scaler
            self.scaler.load_state_dict(ck["scaler"])
        set_rng_state(ck["rng"])
        self.step, self.best = ck["step"], ck["best"]
        if self.probe_autocast:  # the choice the run made at its start (fp32 in checkpoints made before it)
            self.dtype = torch.bfloat16 if ck.get("autocast") == "bfloat16" else None
            self.probe_autocast = False
        if self.ctx.is_main:
            self.log.truncate_after(self.step)
        log.info("resumed %s from step %d", self.title, self.step)

    def save(self) -> None:
        self.optimizer.flush()  # (every rank: the weights stay the same everywhere)
        if self.ctx.is_main:
            save_checkpoint(self.out / "last.pt", {
                "meta": self.meta, "model": self.model.state_dict(), "optimizer": self.optimizer.state_dict(),
                "scheduler": self.scheduler.state_dict(), "scaler": self.scaler.state_dict(),
                "rng": rng_state(), "step": self.step, "best": self.best,
                "autocast": self.precision,
            })
        self.ctx.barrier()

    # ---------------------------------------------------------------- loop
    def run(self, micro_loss: MicroLoss, evaluate: Callable[[], Any], net: torch.nn.Module | None = None,
            on_step: Callable[[int], None] | None = None,
            on_out_of_memory: Callable[[], bool] | None = None) -> LoopResult:
        """Train to ``max_steps``.  ``on_out_of_memory()`` is called when a step runs out of GPU
        memory; if it returns True (it switched something on, e.g. gradient checkpointing) the step
        is run again, once."""
        cfg, net = self.cfg, net or self.model
        self.model.train()
        if self.probe_autocast:
            self._choose_cpu_autocast(net, micro_loss)
        t0, pairs_seen, last_loss = time.time(), 0, math.nan
        bar = Progress(cfg.max_steps, self.title, self.progress)
        # a sparse table's rows catch up before a batch reads them, while the loop runs
        with self.optimizer.watching(self.model), bar.run(start=self.step):
            while self.step < cfg.max_steps:
                parts, pairs = self._step_with_retry(net, micro_loss, on_out_of_memory)
                self.step += 1
                pairs_seen += pairs
                last_loss = parts["loss"]
                rate = pairs_seen / max(1e-9, time.time() - t0)
                shown = " ".join(f"{k} {v:.3f}" for k, v in parts.items() if k != "grad_norm")
                bar.update(self.step, f"{shown} | {rate:.0f} pairs/s")
                if self.ctx.is_main and (self.step % cfg.log_every == 0 or self.step == cfg.max_steps):
                    self.log.write({"step": self.step, "lr": self.scheduler.get_last_lr()[0],
                                    "pairs_per_s": rate, "cpu_s": round(process_cpu_seconds(), 2), **parts})
                if self.step % cfg.eval_every == 0 or self.step == cfg.max_steps:
                    self._evaluate(evaluate)
                if self.step % cfg.save_every == 0 or self.step == cfg.max_steps:
                    self.save()
                self.trimmer.after_step(self.step)
                if on_step is not None:
                    on_step(self.step)
        return LoopResult(self.step, time.time() - t0, self.best, last_loss, self.precision)

    @property
    def precision(self) -> str:
        return str(self.dtype).removeprefix("torch.") if self.dtype is not None else "fp32"

    def _choose_cpu_autocast(self, net: torch.nn.Module, micro_loss: MicroLoss) -> None:
        """train.cpu_bf16=auto: bf16 autocast when it is faster on this CPU (see faster_autocast)."""
        self.probe_autocast = False
        if self.ctx.enabled or not cpu_bf16_supported():  # every process must train in the same precision
            why = "several processes" if self.ctx.enabled else "no bf16 kernels on this CPU"
            log.info("train.cpu_bf16=auto: fp32 (%s)", why)
            return
        # batches spread over the run (a batch is a pure function of its index): their lengths are the run's
        first, span = self.step * self.cfg.grad_accum, (self.cfg.max_steps - self.step) * self.cfg.grad_accum
        batches = sorted({first + span * k // PROBE_BATCHES for k in range(PROBE_BATCHES)})
        probe = faster_autocast(lambda i: micro_loss(net, i)["loss"], self.device, batches,
                                reset=lambda: self.optimizer.zero_grad(set_to_none=True))
        self.dtype = probe.chosen
        log.info("train.cpu_bf16=auto: %s", probe.describe())
        self.log.write({"step": self.step, "cpu_bf16": {"chosen": self.precision,
                                                       "fp32_ms": round(probe.fp32_s * 1e3, 1),
                                                       "bf16_ms": round(probe.bf16_s * 1e3, 1)}})

    def _step_with_retry(self, net: torch.nn.Module, micro_loss: MicroLoss,
                         on_out_of_memory: Callable[[], bool] | None) -> tuple[dict[str, float], int]:
        try:
            return self._one_step(net, micro_loss)
        except torch.OutOfMemoryError:
            if on_out_of_memory is None or self.ctx.enabled or not on_out_of_memory():
                raise  # (under torchrun the other processes are inside the step: no retry)
        self.optimizer.zero_grad(set_to_none=True)
        if self.device.type == "cuda":
            torch.cuda.empty_cache()
        log.warning("step %d ran out of GPU memory: retrying it with gradient checkpointing", self.step + 1)
        return self._one_step(net, micro_loss)

    def _one_step(self, net: torch.nn.Module, micro_loss: MicroLoss) -> tuple[dict[str, float], int]:
        cfg = self.cfg
        self.optimizer.zero_grad(set_to_none=True)
        totals: dict[str, float] = {}
        pairs = 0
        for micro in range(cfg.grad_accum):
            with autocast(self.device, self.dtype):
                out = micro_loss(net, self.step * cfg.grad_accum + micro)
            self.scaler.scale(out["loss"] * self.scale / cfg.grad_accum).backward()
            for key, value in out["parts"].items():
                totals[key] = totals.get(key, 0.0) + float(value) * self.scale / cfg.grad_accum
            pairs += int(out["pairs"])
        self.scaler.unscale_(self.optimizer)
        grad_norm = clip_grad_norm(list(self.model.parameters()), cfg.clip_norm)
        self.scaler.step(self.optimizer)
        self.scaler.update()
        self.scheduler.step()
        parts = {key: self.ctx.all_reduce_mean(value) for key, value in totals.items()}
        parts["grad_norm"] = float(grad_norm)
        if not math.isfinite(parts["loss"]):
            raise TinyglotError(
                f"the loss became {parts['loss']} at step {self.step + 1}",
                "lower train.lr or raise train.warmup_steps; resume from the last checkpoint",
            )
        return parts, pairs

    def _evaluate(self, evaluate: Callable[[], Any]) -> None:
        self.optimizer.flush()  # best.pt holds AdamW's weights
        if self.ctx.is_main:
            self.trimmer.trim()  # the training steps' free blocks go back before the dev set's tensors come
            self.model.eval()
            try:
                result = evaluate()
            finally:
                self.model.train()
            if result is not None:
                p1 = result.primary_metric
                self.log.write({"step": self.step, "dev_p1": p1,
                                "dev": {r.lang: round(r.mean, 4) for r in result.rows}})
                if self.best is None or p1 > self.best:
                    self.best = p1
                    save_checkpoint(self.out / "best.pt", {"meta": self.meta, "model": self.model.state_dict(),
                                                           "step": self.step, "dev_p1": p1})
        self.ctx.barrier()
