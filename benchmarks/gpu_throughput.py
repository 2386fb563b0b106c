"""GPU training throughput: pairs/s and peak GPU memory of full training steps (forward, backward,
AdamW) for teacher and student presets at several batch sizes, and the teacher pass (inference,
sentences/s) that distillation runs first.  Prints numbers; asserts nothing.

    python benchmarks/gpu_throughput.py                                    # default presets and batches
    python benchmarks/gpu_throughput.py --teachers ems-384x6 --students lealla-small --batches 512,1024,4096
    python benchmarks/gpu_throughput.py --device cpu --threads 16 --batches 256 --only teacher-pass  # CPU side

Batches hold random token ids with lengths drawn from --min-len..--max-len (the embedded corpus:
mostly 8-40 tokens), sorted into one length bucket per batch as the training batch plan does, so
the numbers are the model's: they leave out tokenisation and batch building (see train.token_cache)
and the teacher pass's text side.  ``ems-384x6`` is a larger EMS teacher (hidden 384, 6 layers,
32k vocabulary).  On a machine without a CUDA GPU (and no --device cpu) it says so and exits 0.
"""

from __future__ import annotations

import argparse
import sys
import time
from dataclasses import dataclass

import numpy as np
import torch

# presets of this benchmark on top of the packages' own: name -> (package preset, overrides)
EXTRA_TEACHERS = {"ems-384x6": ("ems-paper", {"model": {"vocab_size": 32000, "hidden_size": 384, "num_layers": 6,
                                                        "num_heads": 6, "ffn_size": 1536}})}


@dataclass
class Result:
    kind: str  # teacher | student | teacher-pass
    preset: str
    batch: int
    pairs_per_s: float
    ms_per_step: float
    peak_gb: float | None
    compiled: bool

    def row(self) -> str:
        peak = "-" if self.peak_gb is None else f"{self.peak_gb:.2f}"
        unit = "sentences/s" if self.kind == "teacher-pass" else "pairs/s"
        return (f"{self.kind:<13} {self.preset:<14} {self.batch:>6} {self.pairs_per_s:>11.0f} {unit:<11} "
                f"{self.ms_per_step:>9.1f} {peak:>8} {'yes' if self.compiled else 'no':>8}")


def random_batch(rng: np.random.Generator, batch: int, vocab: int, min_len: int, max_len: int,
                 device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """One length bucket: ``batch`` rows of one drawn length (padded rows would add nothing)."""
    from tinyglot.training import to_device

    length = int(rng.integers(min_len, max_len + 1))
    ids = rng.integers(10, vocab, size=(batch, length), dtype=np.int64)
    return to_device(ids, device), to_device(np.ones_like(ids), device)


def timed(device: torch.device, fn, steps: int, warmup: int) -> tuple[float, float | None]:
    """Median seconds per call of ``fn`` after ``warmup`` calls, and peak GPU memory (GB)."""
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    times = []
    for i in range(warmup + steps):
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        start = time.perf_counter()
        fn(i)
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        if i >= warmup:
            times.append(time.perf_counter() - start)
    peak = torch.cuda.max_memory_allocated(device) / 2**30 if device.type == "cuda" else None
    return float(np.median(times)), peak


def teacher_preset(name: str):
    from tinyglot.teacher import get_preset

    base, overrides = EXTRA_TEACHERS.get(name, (name, None))
    return get_preset(base, overrides)


def bench_teacher(name: str, batch: int, args, device: torch.device) -> list[Result]:
    from tinyglot.teacher import EMSModel

    from tinyglot.training import amp_dtype, autocast, maybe_compile

    cfg = teacher_preset(name).model
    cfg.dropout = 0.0
    torch.manual_seed(0)
    model = EMSModel(cfg).to(device)
    compiled = maybe_compile(model.encoder, args.compile)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    dtype = amp_dtype(device, True)
    rng = np.random.default_rng(0)
    lang = torch.full((batch,), 5, dtype=torch.long, device=device)
    out = []
    if args.only in (None, "teacher"):
        def step(_):
            x, xm = random_batch(rng, batch, cfg.vocab_size, args.min_len, min(args.max_len, cfg.max_len), device)
            y, ym = random_batch(rng, batch, cfg.vocab_size, args.min_len, min(args.max_len, cfg.max_len), device)
            n = min(x.shape[1], y.shape[1])
            opt.zero_grad(set_to_none=True)
            with autocast(device, dtype):
                loss = model(x[:, :n], xm[:, :n], y[:, :n], ym[:, :n], lang, lang)["loss"]
            loss.backward()
            opt.step()

        seconds, peak = timed(device, step, args.steps, args.warmup)
        out.append(Result("teacher", name, batch, batch / seconds, 1000 * seconds, peak, compiled))
    if args.only in (None, "teacher-pass"):
        model.eval()

        def encode(_):
            with torch.inference_mode(), autocast(device, dtype):
                ids, mask = random_batch(rng, batch, cfg.vocab_size, args.min_len, min(args.max_len, cfg.max_len),
                                         device)
                model.embed(ids, mask).float().cpu()

        seconds, peak = timed(device, encode, args.steps, args.warmup)
        out.append(Result("teacher-pass", name, batch, batch / seconds, 1000 * seconds, peak, compiled))
    return out


def bench_student(name: str, batch: int, args, device: torch.device) -> Result:
    from tinyglot.distill.config import get_preset
    from tinyglot.distill.losses import (
        ams_loss,
        feature_distillation,
        logit_distillation,
    )
    from tinyglot.distill.student import Student

    from tinyglot.training import amp_dtype, autocast, maybe_compile, use_checkpointing

    preset = get_preset(name)
    sc, lc, tc = preset.student, preset.loss, preset.train
    sc.vocab_size, sc.dropout = args.student_vocab, 0.0
    torch.manual_seed(0)
    model = Student(sc, args.teacher_dim).to(device)
    compiled = maybe_compile(model.encoder, args.compile)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    dtype = amp_dtype(device, True)
    rng = np.random.default_rng(0)

    def step(_):
        x, xm = random_batch(rng, batch, sc.vocab_size, args.min_len, min(args.max_len, sc.max_len), device)
        y, ym = random_batch(rng, batch, sc.vocab_size, args.min_len, min(args.max_len, sc.max_len), device)
        # the memory-driven rule of train.checkpointing=auto (CUDA) or the CPU token rule
        mode = tc.checkpointing if args.checkpointing is None else args.checkpointing
        model.set_checkpointing(use_checkpointing(mode, device.type, x.numel() + y.numel(), tc.checkpoint_above_tokens))
        xt = torch.nn.functional.normalize(torch.randn(batch, args.teacher_dim, device=device), dim=-1)
        yt = torch.nn.functional.normalize(torch.randn(batch, args.teacher_dim, device=device), dim=-1)
        opt.zero_grad(set_to_none=True)
        with autocast(device, dtype):
            xs, ys = model.embed(x, xm), model.embed(y, ym)
            loss = (lc.alpha * ams_loss(xs, ys, lc.margin, lc.scale)
                    + lc.beta * feature_distillation(xt, yt, model.fd_proj(xs), model.fd_proj(ys))
                    + lc.gamma * logit_distillation(xt, yt, xs, ys, lc.ld_temperature))
        loss.backward()
        opt.step()

    seconds, peak = timed(device, step, args.steps, args.warmup)
    return Result("student", name, batch, batch / seconds, 1000 * seconds, peak, compiled)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--teachers", default="ems-small,ems-384x6", help="teacher presets (ems-*, ems-384x6)")
    p.add_argument("--students", default="lealla-small,lealla-base,fast-small", help="distillation student presets")
    p.add_argument("--batches", default="256,512,1024,4096", help="pairs per step")
    p.add_argument("--steps", type=int, default=20, help="timed steps per measurement (the median is shown)")
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--min-len", type=int, default=8)
    p.add_argument("--max-len", type=int, default=40)
    p.add_argument("--teacher-dim", type=int, default=384, help="teacher embedding size the students distil")
    p.add_argument("--student-vocab", type=int, default=32000)
    p.add_argument("--only", choices=["teacher", "teacher-pass", "student"], default=None)
    p.add_argument("--checkpointing", choices=["auto", "always", "never"], default=None,
                   help="students' gradient checkpointing (default: the preset's train.checkpointing)")
    p.add_argument("--compile", action="store_true", help="torch.compile the encoders (train.compile=true)")
    p.add_argument("--device", default="cuda", help="cuda, cuda:N, or cpu (to compare the CPU on the same machine)")
    p.add_argument("--threads", type=int, default=0, help="torch threads for --device cpu (0: torch's default)")
    p.add_argument("--json", default=None, help="also write the results as JSON to this file")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.device.startswith("cuda") and not torch.cuda.is_available():
        print("gpu_throughput: no CUDA GPU is visible on this machine, nothing measured "
              "(run it on a GPU machine, or pass --device cpu to measure the CPU)")
        return 0
    from tinyglot.training import select_device

    device = select_device(args.device)
    if args.threads:
        torch.set_num_threads(args.threads)
    if device.type == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = True
        name = torch.cuda.get_device_name(device)
    else:
        name = f"CPU, {torch.get_num_threads()} threads"
    print(f"device: {name}; torch {torch.__version__}; lengths {args.min_len}-{args.max_len} tokens")
    print(f"{'kind':<13} {'preset':<14} {'batch':>6} {'throughput':>23} {'ms/step':>9} {'peak GB':>8} "
          f"{'compiled':>8}")
    results: list[Result] = []
    batches = [int(b) for b in args.batches.split(",") if b]

    def report(r: Result) -> None:
        results.append(r)
        print(r.row(), flush=True)

    def attempt(fn, preset: str, batch: int) -> None:
        try:
            out = fn(preset, batch, args, device)
        except torch.OutOfMemoryError:
            print(f"  ({preset} at batch {batch}: out of GPU memory)", flush=True)
            torch.cuda.empty_cache()
            return
        for r in out if isinstance(out, list) else [out]:
            report(r)

    teachers = [t for t in args.teachers.split(",") if t] if args.only in (None, "teacher", "teacher-pass") else []
    students = [s for s in args.students.split(",") if s] if args.only in (None, "student") else []
    for preset in teachers:
        for batch in batches:
            attempt(bench_teacher, preset, batch)
    for preset in students:
        for batch in batches:
            attempt(bench_student, preset, batch)
    if args.json:
        from pathlib import Path

        from tinyglot.io import atomic_write_json

        atomic_write_json(Path(args.json), {"device": name, "results": [r.__dict__ for r in results]})
    return 0


if __name__ == "__main__":
    sys.exit(main())
