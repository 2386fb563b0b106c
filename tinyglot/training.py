"""Training-loop plumbing shared by the teacher and the distillation recipes.

Device and AMP selection, seeding, RNG state capture, atomic checkpoints that refuse to load into
a different configuration, the warm-up/decay schedule, a JSONL metrics log and a progress bar.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import random
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from collections.abc import Callable, Iterator, Sequence

import numpy as np
import torch

from tinyglot import allocator
from tinyglot.allocator import glibc as _glibc  # the name tests and benchmarks/allocator.py use
from tinyglot.errors import CheckpointError, TinyglotError
from tinyglot.io import atomic_path, atomic_write_bytes


# ------------------------------------------------------------------ devices and precision
def single_process_device(settings: Any, what: str) -> torch.device:
    """Apply ``settings.threads`` and pick ``settings.device`` for a recipe that runs in one process."""
    if settings.threads:
        torch.set_num_threads(settings.threads)
    if int(os.environ.get("WORLD_SIZE", "1")) > 1:
        raise TinyglotError(f"{what} runs in one process", "run it without torchrun")
    return select_device(settings.device)


def pick_device(name: str, cuda: bool, mps: bool, local_rank: int | None = None) -> str:
    """The device ``name`` resolves to on a machine with (``cuda``, ``mps``) available, as a string.

    ``auto`` picks CUDA, then Apple MPS, then the CPU; an explicit name must be available.  Under
    torchrun (``local_rank`` given) a CUDA device without an index becomes ``cuda:<local_rank>``, so
    each process of a machine trains on its own GPU.  Pure: the unit tests call it without a GPU.
    """
    name = (name or "auto").strip().lower()
    if name == "auto":
        name = "cuda" if cuda else "mps" if mps else "cpu"
    try:
        kind = torch.device(name).type
    except RuntimeError:
        raise TinyglotError(f"unknown device {name!r}", "use auto, cpu, cuda, cuda:N or mps") from None
    if kind == "cuda" and not cuda:
        raise TinyglotError(f"device {name!r} was asked for but no CUDA GPU is visible",
                            "use --device cpu or auto (or --set train.device=cpu|auto)")
    if kind == "mps" and not mps:
        raise TinyglotError(f"device {name!r} was asked for but Apple MPS is not available", "use cpu or auto")
    if kind == "cuda" and name == "cuda" and local_rank is not None:
        return f"cuda:{local_rank}"
    return name


def select_device(name: str = "auto", local_rank: int | None = None) -> torch.device:
    """``auto`` picks CUDA, then Apple MPS, then CPU; an explicit name must be available."""
    mps = getattr(torch.backends, "mps", None) is not None and torch.backends.mps.is_available()
    return torch.device(pick_device(name, torch.cuda.is_available(), mps, local_rank))


def training_device(settings: Any) -> torch.device:
    """Apply ``settings.threads`` and pick ``settings.device``; under torchrun each process of a
    machine takes the GPU of its ``LOCAL_RANK``.  The teacher pass, dev evaluation and training of a
    recipe all run there."""
    if settings.threads:
        torch.set_num_threads(settings.threads)
    world = int(os.environ.get("WORLD_SIZE", "1"))
    return select_device(settings.device, int(os.environ.get("LOCAL_RANK", "0")) if world > 1 else None)


def to_device(array: np.ndarray, device: torch.device) -> torch.Tensor:
    """A numpy batch on ``device``: on CUDA through pinned memory with a non-blocking copy (the copy
    overlaps the previous step's kernels); elsewhere ``torch.from_numpy(...).to(device)`` as before."""
    tensor = torch.from_numpy(np.ascontiguousarray(array))
    if device.type == "cuda":
        return tensor.pin_memory().to(device, non_blocking=True)
    return tensor.to(device)


CHECKPOINTING = ("auto", "always", "never")
# Part of free GPU memory a step's activations may take before checkpointing switches on: the rest
# holds the allocator's fragmentation, the optimizer's temporaries and the other side of the pair.
GPU_MEMORY_SHARE = 0.6


def activation_bytes(tokens: int, hidden: int, layers: int, ffn: int, heads: int, seq_len: int,
                     bytes_per_value: int = 4) -> int:
    """Rough size of the activations a BERT encoder keeps for the backward pass over ``tokens``
    tokens (sentences x padded length) of length ``seq_len``: per layer and token about 12 hidden-sized
    tensors (attention inputs/outputs, layer norms, dropout masks), two FFN-sized ones and the
    attention probabilities (heads x seq_len, twice with their dropout mask)."""
    per_token_layer = 12 * hidden + 2 * ffn + 2 * heads * seq_len
    return int(tokens) * int(layers) * per_token_layer * bytes_per_value


def use_checkpointing(mode: str, device_type: str, tokens: int, limit_tokens: int,
                      need_bytes: int | None = None, free_bytes: int | None = None,
                      out_of_memory_before: bool = False) -> bool:
    """Whether a training batch runs with gradient checkpointing.

    ``always`` / ``never`` decide alone.  ``auto`` on CUDA decides by memory: on when the batch's
    estimated activations (``need_bytes``) exceed :data:`GPU_MEMORY_SHARE` of the free GPU memory, or
    once a step ran out of memory; a CPU-sized token limit never applies there.  ``auto`` elsewhere
    keeps the token rule sized for CPU memory: on above ``limit_tokens`` tokens (0: never).
    """
    if mode not in CHECKPOINTING:
        raise TinyglotError(f"unknown train.checkpointing {mode!r}", f"choose one of: {', '.join(CHECKPOINTING)}")
    if mode != "auto":
        return mode == "always"
    if device_type == "cuda":
        if out_of_memory_before:
            return True
        if need_bytes is None or free_bytes is None:
            return False
        return need_bytes > GPU_MEMORY_SHARE * free_bytes
    return bool(limit_tokens) and tokens > limit_tokens


def free_device_bytes(device: torch.device) -> int | None:
    """Free memory on a CUDA device (what the caching allocator holds but does not use counts as
    free); None elsewhere."""
    if device.type != "cuda":
        return None
    free, _ = torch.cuda.mem_get_info(device)
    return int(free + torch.cuda.memory_reserved(device) - torch.cuda.memory_allocated(device))


def maybe_compile(module: torch.nn.Module, enabled: bool) -> bool:
    """``torch.compile`` ``module`` in place (``nn.Module.compile``: its state_dict keys, and so the
    checkpoints, stay as they are) with dynamic shapes, since length buckets change the padded
    length from batch to batch.  Returns whether it was compiled."""
    if not enabled:
        return False
    module.compile(dynamic=True)
    return True


def amp_dtype(device: torch.device, enabled: bool, cpu_bf16: str = "off") -> torch.dtype | None:
    """bf16 on GPUs that support it, else fp16 (unless ``enabled`` is off); on CPU bf16 only when
    ``cpu_bf16`` is "on" ("auto" is decided by :func:`faster_autocast` once the batches exist); None (no
    autocast) otherwise."""
    if device.type == "cuda":
        return (torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16) if enabled else None
    if device.type == "cpu" and cpu_bf16 == "on":
        if not cpu_bf16_supported():
            raise TinyglotError("train.cpu_bf16=on, but this CPU has no bf16 kernels (oneDNN)",
                                "set train.cpu_bf16=off (or auto, which times both and keeps the faster)")
        return torch.bfloat16
    return None


def cpu_bf16_supported() -> bool:
    """Whether oneDNN has bf16 kernels for this CPU (AVX-512 BF16, AVX512-core or AMX)."""
    return bool(torch.backends.mkldnn.is_available() and torch.ops.mkldnn._is_mkldnn_bf16_supported())


@dataclass(frozen=True)
class AutocastProbe:
    fp32_s: float  # mean seconds of one batch's forward and backward without autocast
    bf16_s: float  # ... under bf16 autocast
    chosen: torch.dtype | None

    def describe(self) -> str:
        pick = "bf16" if self.chosen is not None else "fp32"
        return (f"{pick} (a batch's forward and backward: {self.bf16_s * 1e3:.0f} ms in bf16, "
                f"{self.fp32_s * 1e3:.0f} ms in fp32)")


def faster_autocast(loss: Callable[[int], torch.Tensor], device: torch.device, batches: Sequence[int],
                    reset: Callable[[], None] = lambda: None, margin: float = 0.9) -> AutocastProbe:
    """Time ``loss(i)`` and its backward for each batch index ``i`` of ``batches`` in fp32 and under bf16
    autocast; bf16 is chosen when its total is below ``margin`` times fp32's.  Each batch is first called
    once untimed, in the precision that goes second: the first call of a batch pays for building it (its
    rows, pieces and teacher rows; in the e5 profile 50-500 ms, more than the forward and backward) and
    for its shapes' kernels, and a probe that timed it chose fp32 on a CPU where bf16 steps were 30 %
    faster.  Then both ways, which first alternating; ``reset()`` before every call throws the gradients
    away.  Batches from the whole run, because short batches can favour fp32 while the run as a whole
    favours bf16.  The RNG streams are restored, so the run draws what it would have drawn."""
    times: dict[torch.dtype | None, list[float]] = {None: [], torch.bfloat16: []}
    order: list[tuple[int, torch.dtype | None, bool]] = []  # (batch, precision, timed)
    for n, i in enumerate(batches):
        first, second = (None, torch.bfloat16) if n % 2 else (torch.bfloat16, None)
        order += [(i, second, False), (i, first, True), (i, second, True)]
    with torch.random.fork_rng(devices=[]):
        for i, dtype, timed in order:
            reset()
            start = time.perf_counter()
            with autocast(device, dtype):
                value = loss(i)
            value.backward()
            if timed:
                times[dtype].append(time.perf_counter() - start)
        reset()
    fp32, bf16 = sum(times[None]) / len(batches), sum(times[torch.bfloat16]) / len(batches)
    return AutocastProbe(fp32, bf16, torch.bfloat16 if bf16 < margin * fp32 else None)


def autocast(device: torch.device, dtype: torch.dtype | None):
    if dtype is None:
        return contextlib.nullcontext()
    return torch.autocast(device_type=device.type, dtype=dtype)


# glibc malloc settings for training (see limit_allocator_growth); the mallopt parameter numbers are
# glibc's M_TRIM_THRESHOLD and M_MMAP_THRESHOLD.
MMAP_THRESHOLD = 128 << 10
TRIM_THRESHOLD = 128 << 10
TRIM_EVERY = 50  # training steps between two release_free_memory() calls
TRIM_GROWTH = 1 << 62  # resident growth (bytes) since the last trim that triggers one (HeapTrimmer)
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3


def limit_allocator_growth() -> bool:
    """Keep the training process's memory flat; returns True if a setting applied.

    Under mimalloc (:mod:`tinyglot.allocator`, preloaded by the commands that train) nothing is to be set:
    it reuses the blocks a step frees in the next steps, and this hands the pages freed before training
    (data preparation) back to the OS.

    Under glibc (Linux; ``TINYGLOT_ALLOCATOR=system``, or the mimalloc wheel missing): length-bucketed
    batches allocate tensors of ever-changing sizes.  glibc's default, adaptive mmap threshold keeps freed
    blocks in the heap, and a long run grows (an ems-small run passed 4.7 GB after 700 steps).  A
    ``MMAP_THRESHOLD`` of 128 KiB maps every larger tensor and unmaps it when it is freed, so the resident
    size stays flat (2.3 GB over 400 ems-small steps), at the price of page faults: about a third of the
    run's time goes to the kernel.  Larger thresholds trade memory for that time (8 MiB: system time 8 %
    of user time, but a peak of 4.0 GB after 400 steps; the measurements are in docs/results.md,
    "Training memory on the CPU").  The heap's free pages also go back to the OS when training starts and
    every ``TRIM_EVERY`` steps (:func:`release_free_memory`).
    """
    if allocator.collect():
        return True
    libc = _glibc()
    if libc is None:
        return False
    applied = bool(libc.mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD)) and bool(
        libc.mallopt(_M_TRIM_THRESHOLD, TRIM_THRESHOLD))
    libc.malloc_trim(0)
    return applied


def resident_bytes() -> int | None:
    """The resident set size of this process (Linux ``/proc/self/statm``), or None elsewhere."""
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return None


class HeapTrimmer:
    """Calls :func:`release_free_memory` after a training step when the resident size has grown by
    ``TRIM_GROWTH`` bytes since the last call, and under glibc every ``TRIM_EVERY`` steps in any case
    (mimalloc reuses what a step frees, and a periodic trim would only make the next step fault it in).

    With a high mmap threshold the blocks a step frees stay in the heap for the next steps; the ones no
    later tensor fits in (batch shapes vary) would pile up.  Trimming them when they add up to
    ``TRIM_GROWTH`` bounds the resident size at a page fault per trimmed page, instead of one per page of
    every large tensor at every step."""

    def __init__(self) -> None:
        self.mimalloc = allocator.active() == "mimalloc"  # it reuses freed blocks: no periodic trim
        self.applies = self.mimalloc or _glibc() is not None
        self.base: int | None = None  # the resident size after the first step since the last trim
        self.trims = 0

    def after_step(self, step: int) -> bool:
        """Trim if due; True if it trimmed."""
        if not self.applies:
            return False
        rss = resident_bytes()
        if self.base is None:  # this step's working set is back in memory: measure growth from here
            self.base = rss
        grown = rss is not None and self.base is not None and rss - self.base > TRIM_GROWTH
        if not grown and (self.mimalloc or step % TRIM_EVERY):
            return False
        return self.trim()

    def trim(self) -> bool:
        """Trim now (e.g. before an evaluation, whose tensors have other shapes); True if glibc."""
        if not self.applies:
            return False
        release_free_memory()
        self.base, self.trims = None, self.trims + 1
        return True


def release_free_memory() -> bool:
    """Return the allocator's free pages to the OS (mimalloc's ``mi_collect``, glibc's ``malloc_trim(0)``).

    Costs one page fault per page the next step touches again, so it is called every
    ``TRIM_EVERY`` steps under glibc, not at each.  Returns True if called (mimalloc, or glibc on Linux)."""
    if allocator.collect():
        return True
    libc = _glibc()
    if libc is None:
        return False
    libc.malloc_trim(0)
    return True


# ------------------------------------------------------------------ seeding and RNG state
def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def rng_state() -> dict[str, Any]:
    """Every RNG's state as tensors and plain python values (``torch.load(weights_only=True)`` reads it)."""
    version, internal, gauss = random.getstate()
    name, keys, pos, has_gauss, cached = np.random.get_state()
    state: dict[str, Any] = {"python": [int(version), [int(x) for x in internal], gauss],
                             "numpy": [str(name), [int(x) for x in keys], int(pos), int(has_gauss), float(cached)],
                             "torch": torch.get_rng_state()}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict[str, Any]) -> None:
    version, internal, gauss = state["python"]
    random.setstate((int(version), tuple(int(x) for x in internal), gauss))
    name, keys, pos, has_gauss, cached = state["numpy"]
    np.random.set_state((str(name), np.asarray(keys, dtype=np.uint32), int(pos), int(has_gauss), float(cached)))
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


# ------------------------------------------------------------------ schedule
def warmup_linear_decay(optimizer: torch.optim.Optimizer, warmup: int, total: int):
    """Linear warm-up from 0 to the base LR over ``warmup`` steps, then linear decay to 0 at ``total``."""

    def factor(step: int) -> float:
        if warmup > 0 and step < warmup:
            return (step + 1) / warmup
        return max(0.0, (total - step) / max(1, total - warmup))

    return torch.optim.lr_scheduler.LambdaLR(optimizer, factor)


# ------------------------------------------------------------------ checkpoints
def _canonical(obj: Any) -> Any:
    """A copy of nested dicts/lists/tuples whose equal strings are one object (interned).

    Pickle writes an object seen before as a back-reference: without this, a resumed run (whose
    optimizer state keys were unpickled, not interned) would write other bytes for the same state."""
    if isinstance(obj, str):
        return sys.intern(obj)
    if isinstance(obj, dict):
        copy = type(obj)((_canonical(k), _canonical(v)) for k, v in obj.items())
        if hasattr(obj, "_metadata"):  # a module's state_dict keeps its version information
            copy._metadata = _canonical(obj._metadata)  # type: ignore[attr-defined]
        return copy
    if isinstance(obj, list):
        return [_canonical(v) for v in obj]
    if isinstance(obj, tuple) and not hasattr(obj, "_fields"):
        return tuple(_canonical(v) for v in obj)
    return obj


def checkpoint_bytes(payload: dict[str, Any]) -> bytes:
    """``payload`` as ``torch.save`` bytes, the same bytes for the same state: whatever the file name
    (saved to a file, torch would write the temporary file's name into the archive) and however the
    state was reached (a resumed run writes what an uninterrupted one writes)."""
    buffer = io.BytesIO()
    torch.save(_canonical(payload), buffer)
    return buffer.getvalue()


def save_checkpoint(path: str | Path, payload: dict[str, Any]) -> None:
    """Byte-reproducible checkpoint written through a temporary file and a rename: a kill never
    leaves half a file.  Only tensors and plain python values: :func:`load_checkpoint` runs no code."""
    atomic_write_bytes(path, checkpoint_bytes(payload))


def load_checkpoint(path: str | Path, expect: dict[str, Any] | None = None) -> dict[str, Any]:
    """Load a checkpoint written by :func:`save_checkpoint` and check it fits ``expect``.

    ``expect`` maps keys of the checkpoint's ``"meta"`` dict (kind, model config, tokenizer hash...)
    to the values the caller needs; any difference is a :class:`CheckpointError` naming it.
    """
    path = Path(path)
    if not path.is_file():
        raise CheckpointError(f"checkpoint not found: {path}", "check the path, or train without --resume")
    try:  # weights_only: tensors and plain values only, a pickled payload is refused, never run
        payload = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:  # truncated zip, pickle garbage, code in the pickle, ...
        reason = f"{type(exc).__name__}: {exc}".splitlines()[0][:300]
        raise CheckpointError(
            f"checkpoint {path} is corrupted, holds more than tensors and plain values (it could run code, "
            f"so it was not loaded), or is not a tinyglot checkpoint ({reason})",
            "delete it and resume from another checkpoint, or train again (older tinyglot checkpoints held "
            "numpy RNG objects: retrain them)",
        ) from None
    if not isinstance(payload, dict) or "meta" not in payload:
        raise CheckpointError(f"{path} is not a tinyglot checkpoint", "pass a file written by tinyglot")
    meta = payload["meta"]
    for key, want in (expect or {}).items():
        have = meta.get(key)
        if have != want:
            raise CheckpointError(
                f"checkpoint {path} does not match this run: {key} differs\n"
                f"  checkpoint: {_short(have)}\n  this run:   {_short(want)}",
                "resume with the same preset/config and tokenizer, or start a new --out folder",
            )
    return payload


def _short(value: Any) -> str:
    text = json.dumps(value, default=str) if isinstance(value, dict) else repr(value)
    return text if len(text) < 300 else text[:300] + "..."


# ------------------------------------------------------------------ run folders
RUN_FILES = ("best.pt", "metrics.jsonl", "tokenizer.model")


def prepare_run_dir(out: Path, resume: bool, what: str = "training run", clean: bool = True) -> None:
    """Check ``out`` for a new run or a resume; a new run starts from an empty slate.

    A folder with ``last.pt`` is never overwritten without ``--resume``; leftovers of a run that
    died before its first checkpoint (best.pt, metrics.jsonl, tokenizer.model) are removed so they
    cannot be mistaken for this run's.
    """
    out = Path(out)
    if (out / "last.pt").exists() and not resume:
        raise TinyglotError(f"{out} already holds a {what} (last.pt)",
                            "pass --resume to continue it, or choose another --out folder")
    if resume and not (out / "last.pt").exists():
        raise TinyglotError(f"--resume: no checkpoint in {out}", "run without --resume first")
    out.mkdir(parents=True, exist_ok=True)
    if clean and not resume:  # (only the writing process of a data-parallel run cleans)
        for name in RUN_FILES:
            (out / name).unlink(missing_ok=True)


def run_tokenizer(out: Path, given, resume: bool, make):
    """The run's tokenizer: on resume the run's own (a different ``given`` one is refused before
    anything is written); otherwise ``given`` or ``make()``; saved as ``out/tokenizer.model``."""
    from tinyglot.tokenizer import Tokenizer

    path = Path(out) / "tokenizer.model"
    if resume and path.exists():
        own = Tokenizer.load(path)
        if given is not None and given.sha256 != own.sha256:
            raise CheckpointError(f"the tokenizer given does not match the one of the run in {out}",
                                  "resume without --tokenizer (the run keeps its own)")
        return own
    tokenizer = given if given is not None else make()
    tokenizer.save(path)
    return tokenizer


# ------------------------------------------------------------------ logs and progress
class MetricsLog:
    """Append-only JSONL log of training and evaluation records."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)

    def write(self, record: dict[str, Any]) -> None:
        with open(self.path, "a", encoding="utf-8") as fh:
            fh.write(json.dumps({"time": round(time.time(), 3), **record}) + "\n")
            fh.flush()

    def truncate_after(self, step: int) -> None:
        """Drop records past ``step`` (after a resume from an earlier checkpoint) and torn lines."""
        keep = [r for r in self.read() if r.get("step", 0) <= step]
        with atomic_path(self.path) as tmp:
            tmp.write_text("".join(json.dumps(r) + "\n" for r in keep), encoding="utf-8")

    def read(self) -> list[dict[str, Any]]:
        """All complete records; a line torn by a kill is skipped."""
        if not self.path.exists():
            return []
        out = []
        for line in self.path.read_text(encoding="utf-8").splitlines():
            try:
                out.append(json.loads(line))
            except json.JSONDecodeError:
                continue
        return out


def process_cpu_seconds() -> float:
    """User and system CPU time of this process so far (every thread): what ``benchmarks/pipeline_time.py``
    divides by steps."""
    times = os.times()
    return times.user + times.system


# The estimate of a long piece of work follows this much of it, timed after its first update (which holds
# the warm-up: the first batch builds kernels and caches)
PROBE_SECONDS = 5.0
PROBE_ITEMS = 3  # and at least this many of its items
REVISE_SHARE = 0.2  # an estimate off by more than this share is said again, from the pace since


@dataclass
class Progress:
    """A rich progress bar (steps, loss parts, pairs/s, ETA) on a terminal; elsewhere (a log file,
    CI) a plain line every ``interval`` seconds and at the end; nothing when disabled.

    Once :data:`PROBE_SECONDS` (and ``probe_items`` items) of the work after its first update are timed,
    one line says how long the whole is expected to take on this machine (:meth:`estimate`), measured,
    never assumed."""

    total: int
    description: str = "training"
    enabled: bool = True
    interval: float = 60.0
    unit: str = "steps"
    # where items differ in cost (sentences sorted by length): the cost of all of them, and each update
    # gives the cost done so far (``update(..., cost=)``), which the estimate and the ETA then follow
    cost_total: float | None = None
    probe_items: int = PROBE_ITEMS  # the first estimate waits for this many items after the first update

    def __post_init__(self) -> None:
        import rich

        self._bar = None
        self._probe: tuple[float, float] | None = None  # (time, work done) at the first update
        self._estimated = False
        self._first_estimate: tuple[float, float, int, float] | None = None  # (time, work, step, expected)
        self._cost = 0.0
        self._first_step = 0
        self._plain = (self.enabled and os.environ.get("TINYGLOT_NO_PROGRESS") != "1"
                       and not rich.get_console().is_terminal)
        self._started = self._last = time.time()
        self._start_step, self._start_cost = 0, 0.0
        if self.enabled and not self._plain:
            from rich.progress import (BarColumn, MofNCompleteColumn, Progress as RichProgress,
                                       TextColumn, TimeElapsedColumn, TimeRemainingColumn)

            self._bar = RichProgress(
                TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
                TimeElapsedColumn(), TextColumn("eta"), TimeRemainingColumn(),
                TextColumn("{task.fields[info]}"),
                transient=False,
                disable=os.environ.get("TINYGLOT_NO_PROGRESS") == "1",
            )

    @contextlib.contextmanager
    def run(self, start: int = 0, start_cost: float = 0.0) -> Iterator[Progress]:
        """``start``: the items a resumed pass had done before (``start_cost``: their cost), which the
        rates and ETAs of this run leave out."""
        self._started = self._last = time.time()
        self._start_step, self._start_cost = start, start_cost
        self._probe, self._estimated, self._cost, self._first_step = None, False, start_cost, start
        self._first_estimate = None
        if self._bar is None:
            yield self
            return
        with self._bar:
            self._task = self._bar.add_task(self.description, total=self.total, completed=start, info="")
            yield self

    def _work(self, step: int) -> tuple[float, float]:
        """(work done, work in all): the cost when it is given, else the steps."""
        return (self._cost, float(self.cost_total)) if self.cost_total else (float(step), float(self.total))

    def estimate(self, step: int, now: float) -> str | None:
        """The expected duration of the whole, once the probe is long enough (else None): the rate of the
        work since the first update, applied to what is left, plus the time so far.  Once a tenth of the
        rest is done, a second line revises it if the pace since differs by more than
        :data:`REVISE_SHARE` (the first items often run slower: kernels, caches, memory still warming)."""
        done, total = self._work(step)
        if self._probe is None:
            self._probe = (now, done)
            return None
        if self._estimated:
            return self._revision(step, now)
        t0, d0 = self._probe
        if done <= d0 or now - t0 < PROBE_SECONDS or step - self._first_step < self.probe_items or step >= self.total:
            return None
        self._estimated = True
        expected = now - self._started + (now - t0) / (done - d0) * (total - done)
        self._first_estimate = (now, done, step, expected)
        return f"{self.description}: expected {self._timed(expected, now - t0, step - self._first_step)}"

    def _timed(self, expected: float, seconds: float, items: int) -> str:
        rate = seconds / max(1, items)
        per = f"{rate:.3g} s" if rate >= 0.01 else f"{1000 * rate:.3g} ms"
        what = (f"the {self.total - self._start_step:,} {self.unit} left of {self.total:,}" if self._start_step
                else f"{self.total:,} {self.unit}")
        return (f"{format_duration(expected)} for {what} on this machine ({per} a "
                f"{self.unit.removesuffix('s')} over the {items:,} timed)")

    def _revision(self, step: int, now: float) -> str | None:
        if self._first_estimate is None or step >= self.total:
            return None
        t1, d1, s1, first = self._first_estimate
        done, total = self._work(step)
        if done - d1 < (total - d1) / 10 or now <= t1:
            return None
        self._first_estimate = None  # revised at most once
        expected = now - self._started + (now - t1) / (done - d1) * (total - done)
        if abs(expected - first) <= REVISE_SHARE * first:
            return None
        return f"{self.description}: revised to {self._timed(expected, now - t1, step - s1)}"

    def update(self, step: int, info: str = "", cost: float | None = None) -> None:
        if cost is not None:
            self._cost = cost
        if self._probe is None:
            self._first_step = step
        if self.enabled and os.environ.get("TINYGLOT_NO_PROGRESS") != "1":
            line = self.estimate(step, time.time())
            if line is not None:
                if self._bar is not None:
                    self._bar.console.print(line, markup=False, highlight=False, soft_wrap=True)
                else:
                    print(line, flush=True)
        if self._bar is not None:
            self._bar.update(self._task, completed=step, info=info)
        elif self._plain and (time.time() - self._last >= self.interval or step >= self.total):
            self._last = now = time.time()
            done, total = self._work(step)
            start = self._start_cost if self.cost_total else self._start_step
            eta = (total - done) * (now - self._started) / (done - start) if done > start else float("nan")
            print(f"{self.description}: {step}/{self.total} ({100 * step / max(1, self.total):.0f} %), "
                  f"{format_duration(now - self._started)} elapsed, eta {format_duration(eta)}"
                  + (f" | {info}" if info else ""), flush=True)


def format_duration(seconds: float) -> str:
    if seconds != seconds:  # nan
        return "?"
    seconds = int(round(seconds))
    return f"{seconds // 3600}:{seconds // 60 % 60:02d}:{seconds % 60:02d}" if seconds >= 3600 \
        else f"{seconds // 60}:{seconds % 60:02d}"
