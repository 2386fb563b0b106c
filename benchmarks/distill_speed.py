"""The first N steps of a LEALLA student, once per ``--init``, with the same data and seed.

For each init (default ``random,teacher``: the student's token embeddings random, or derived from the
teacher, see ``distill/teacher_init.py``) it runs the distillation API in a fresh process (so that the
resource figures are that run's own) and prints:

- the setup: the teacher pass over the sentences (cached: the second run reads it), the teacher pass
  over the vocabulary (``--init teacher`` with a teacher of another vocabulary; cached too) and the rest;
- the training's steps/s and pairs/s (dev evaluations left out of the time), its user and system CPU
  time (``resource.getrusage``, the training only) and the process's peak RSS;
- dev P@1 at step 0 (the initialised student) and every ``--eval-every`` steps;

then a table "dev P@1 by step: random vs teacher" and, for each step, how many fewer steps the
teacher-derived student needed to reach random's P@1 of that step.  It prints numbers; it is not a test.

The steps are the first ``--steps`` of the preset's schedule (its ``train.max_steps``, warm-up and
decay), so the curve is the start of a real run; ``--set train.max_steps=N`` runs a shorter schedule.

    python benchmarks/distill_speed.py --student fast-small --teacher e5-small-onnx \\
        --data ../shared/data/train.jsonl.gz --english 2500 --steps 600 --eval-every 100 --threads 1

The teacher defaults to ``e5-small-onnx`` when it loads, else ``e5-small`` (the wheel's C engine,
60-80 sentences/s: keep the distinct English sentences to a few thousand with ``--english``).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import multiprocessing
import os
import platform
import random
import resource
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


class StopRun(Exception):
    """Raised after the last benchmarked step (the preset's schedule goes on past it)."""


def cpu_model() -> str:
    from tinyglot.devices.profiles import detect_host

    return str(detect_host()["cpu_model"])


def default_teacher() -> str:
    from tinyglot.encoders import load_teacher

    try:
        load_teacher("e5-small-onnx")
        return "e5-small-onnx"
    except Exception:  # noqa: BLE001 - not installed, or not in this tinyglot: the wheel's engine
        return "e5-small"


def load_data(path: str | None, english: int, languages: str | None, seed: int) -> list:
    """The pairs of ``path`` (default: the embedded corpus), cut to ``languages`` and to the pairs of
    ``english`` distinct English sentences drawn at random (0: all)."""
    from tinyglot.data.embedded import load_pairs

    pairs = load_pairs(path)
    if languages:
        keep = {lang.strip() for lang in languages.split(",") if lang.strip()}
        pairs = [p for p in pairs if p.lang in keep]
    if english:
        distinct = sorted({p.en for p in pairs})
        chosen = set(random.Random(seed).sample(distinct, min(english, len(distinct))))
        pairs = [p for p in pairs if p.en in chosen]
    return pairs


def usage() -> tuple[float, float, float]:
    """(user s, system s, peak RSS MB) of this process."""
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return ru.ru_utime, ru.ru_stime, ru.ru_maxrss / 1024  # ru_maxrss is in KiB on Linux


def one_run(init: str, args: dict, queue) -> None:
    """One init in this (fresh) process; puts its figures on ``queue``."""
    try:
        queue.put(_one_run(init, args))
    except BaseException as exc:  # noqa: BLE001 - reported by the parent
        import traceback

        queue.put({"init": init, "error": f"{type(exc).__name__}: {exc}\n{traceback.format_exc()[-3000:]}"})


def _one_run(init: str, a: dict) -> dict:
    import torch

    from tinyglot.distill.config import get_preset
    from tinyglot.distill.lealla import LeallaTrainer
    from tinyglot.distill.run import resolve_spec, teacher_tokenizer
    from tinyglot.encoders import load_teacher

    overrides = json.loads(a["overrides"])
    train = overrides.setdefault("train", {})
    train.update({"threads": a["threads"], "seed": a["seed"], "eval_every": a["eval_every"],
                  "save_every": 10**9, "dev_fraction": a["dev_fraction"]})
    overrides.setdefault("student", {})["init"] = init
    preset = get_preset(a["student"], overrides)
    if a["threads"]:
        torch.set_num_threads(a["threads"])
    pairs = load_data(a["data"], a["english"], a["languages"], a["seed"])
    t0 = time.time()
    spec = resolve_spec(a["teacher"])
    teacher = load_teacher(spec)
    out = Path(a["out"]) / init
    trainer = LeallaTrainer(preset, out, pairs, teacher, teacher.identity(), teacher_tokenizer(spec), a["student"],
                            a["cache_dir"], a["vocab_size"], resume=False, progress=not a["no_progress"])
    setup = time.time() - t0
    model, described = trainer.initial_model()
    model.eval()
    evals = [(0, trainer.evaluate(model).primary_metric)]
    eval_seconds = [0.0]
    evaluate = trainer.evaluate

    def timed_evaluate(m):
        start = time.time()
        try:
            return evaluate(m)
        finally:
            eval_seconds[0] += time.time() - start

    trainer.evaluate = timed_evaluate  # the loop's dev evaluations, timed apart from the steps
    steps = a["steps"]
    marks: dict[str, float] = {}

    def on_step(step: int) -> None:
        if step == 1:  # from the end of step 1: no least-squares fit of f, no first-step warm-up
            marks["t1"], (marks["u1"], marks["s1"], _) = time.time(), usage()[:3]
            marks["e1"] = eval_seconds[0]
        if step >= steps:
            raise StopRun

    u0, s0, _ = usage()
    start = time.time()
    with contextlib.suppress(StopRun):
        trainer.train(on_step=on_step)
    wall = time.time() - start
    u1, s1, peak = usage()
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    evals += [(r["step"], r["dev_p1"]) for r in rows if "dev_p1" in r and r["step"] <= steps]
    train_seconds = time.time() - marks["t1"] - (eval_seconds[0] - marks["e1"]) if "t1" in marks else float("nan")
    timed_steps = steps - 1
    pairs_per_step = preset.train.batch_size * preset.train.grad_accum
    return {
        "init": init, "described": described, "method": trainer.init_method, "setup_s": setup,
        "wall_s": wall, "eval_s": eval_seconds[0], "steps": steps,
        "steps_per_s": timed_steps / train_seconds if timed_steps > 0 else float("nan"),
        "pairs_per_s": timed_steps * pairs_per_step / train_seconds if timed_steps > 0 else float("nan"),
        "user_s": u1 - u0, "sys_s": s1 - s0, "peak_rss_mb": peak, "evals": evals,
        "train_pairs": sum(len(v) for v in trainer.data.pairs), "dev_pairs": sum(len(v) for v in trainer.dev.values()),
        "vocab": trainer.tokenizer.vocab_size, "teacher": trainer.identity,
    }


def steps_saved(base: list[tuple[int, float]], other: list[tuple[int, float]]) -> dict[int, int | None]:
    """For each evaluated step s of ``base``: s minus the first evaluated step at which ``other`` reached
    ``base``'s P@1 at s (None when it did not within the run)."""
    out: dict[int, int | None] = {}
    for step, p1 in base:
        reached = next((s for s, q in other if q >= p1), None)
        out[step] = None if reached is None else step - reached
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--teacher", default=None, help="teacher spec (default: e5-small-onnx if it loads, else e5-small)")
    p.add_argument("--student", default="fast-small", help="LEALLA student preset")
    p.add_argument("--data", default=None, help="parallel corpus (default: the embedded corpus)")
    p.add_argument("--english", type=int, default=0,
                   help="keep the pairs of this many distinct English sentences, drawn with --seed (0: all)")
    p.add_argument("--languages", default=None, help="comma-separated languages to keep (default: all)")
    p.add_argument("--steps", type=int, default=300, help="steps per run")
    p.add_argument("--eval-every", type=int, default=50, help="dev P@1 every this many steps")
    p.add_argument("--dev-fraction", type=float, default=0.05, help="train.dev_fraction")
    p.add_argument("--threads", type=int, default=1, help="torch threads of the training (train.threads)")
    p.add_argument("--init", default="random,teacher", help="inits to run, comma-separated (random, teacher)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--vocab-size", type=int, default=8000, help="the student's vocabulary when the teacher has none")
    p.add_argument("--set", dest="sets", action="append", default=[], metavar="KEY=VALUE",
                   help="preset override, e.g. --set train.batch_size=64")
    p.add_argument("--out", default=None, help="run folders (default: a temporary folder, removed)")
    p.add_argument("--cache-dir", default=None, help="teacher cache (default: $TINYGLOT_HOME/teacher-cache)")
    p.add_argument("--json", type=Path, default=None, help="also write the figures here")
    p.add_argument("--no-progress", action="store_true")
    args = p.parse_args(argv)
    os.environ.setdefault("USE_TF", "0")

    from tinyglot.config import parse_sets, tinyglot_home

    inits = [i.strip() for i in args.init.split(",") if i.strip()]
    teacher = args.teacher or default_teacher()
    tmp = None if args.out else tempfile.TemporaryDirectory(prefix="distill-speed-")
    shared = {
        "teacher": teacher, "student": args.student, "data": args.data, "english": args.english,
        "languages": args.languages, "steps": args.steps, "eval_every": args.eval_every,
        "dev_fraction": args.dev_fraction, "threads": args.threads, "seed": args.seed, "vocab_size": args.vocab_size,
        "overrides": json.dumps(parse_sets(args.sets)), "out": args.out or tmp.name,
        "cache_dir": str(args.cache_dir or tinyglot_home() / "teacher-cache"), "no_progress": args.no_progress,
    }
    print(f"# distill_speed: {args.student} from {teacher}, {args.steps} steps, {args.threads} thread(s)")
    print(f"CPU: {cpu_model()} ({os.cpu_count()} logical CPUs), Python {platform.python_version()}")
    print("command: python benchmarks/distill_speed.py " + " ".join(sys.argv[1:] if argv is None else argv))
    results = []
    ctx = multiprocessing.get_context("spawn")
    for init in inits:
        queue = ctx.Queue()
        proc = ctx.Process(target=one_run, args=(init, shared, queue))
        proc.start()
        result = queue.get()
        proc.join()
        if "error" in result:
            print(f"\n{init}: FAILED\n{result['error']}")
            return 1
        results.append(result)
        print(f"\n## init {init}: {result['described']}")
        print(f"data: {result['train_pairs']:,} training pairs, {result['dev_pairs']:,} dev pairs, "
              f"vocabulary {result['vocab']:,}; teacher {result['teacher']}")
    if tmp is not None:
        tmp.cleanup()
    print("\n| init | setup s | steps/s | pairs/s | user s | system s | system/user | peak RSS MB | train wall s |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for r in results:
        print(f"| {r['init']} | {r['setup_s']:.0f} | {r['steps_per_s']:.2f} | {r['pairs_per_s']:.0f} | "
              f"{r['user_s']:.0f} | {r['sys_s']:.1f} | {100 * r['sys_s'] / max(r['user_s'], 1e-9):.1f} % | "
              f"{r['peak_rss_mb']:.0f} | {r['wall_s']:.0f} |")
    print("(setup: teacher passes from cache or computed, tokenising; steps/s and pairs/s: steps 2..N without the "
          "dev evaluations; user/system: the training, evaluations included)")
    names = [r["init"] for r in results]
    by_step: dict[int, dict[str, float]] = {}
    for r in results:
        for step, p1 in r["evals"]:
            by_step.setdefault(step, {})[r["init"]] = p1
    print("\ndev P@1 by step: " + " vs ".join(names))
    header = "| step | " + " | ".join(names) + " |"
    extra = "random" in names and "teacher" in names
    if extra:
        header += " teacher - random | steps saved |"
    print(header)
    print("|---:|" + "---:|" * (len(names) + (2 if extra else 0)))
    saved = {}
    if extra:
        base = next(r["evals"] for r in results if r["init"] == "random")
        other = next(r["evals"] for r in results if r["init"] == "teacher")
        saved = steps_saved(base, other)
    for step in sorted(by_step):
        row = by_step[step]
        line = f"| {step} | " + " | ".join(f"{100 * row[n]:.1f}" if n in row else "" for n in names) + " |"
        if extra:
            diff = (row.get("teacher", float("nan")) - row.get("random", float("nan"))) * 100
            s = saved.get(step)
            line += f" {diff:+.1f} | {'' if s is None else s} |"
        print(line)
    if extra:
        print("(steps saved at step s: s minus the first evaluated step at which teacher reached random's P@1 "
              "of step s)")
    if args.json:
        args.json.write_text(json.dumps({"command": sys.argv, "cpu": cpu_model(), "results": results}, indent=2))
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(REPO))
    raise SystemExit(main())
