"""One training step of a LEALLA student, per vocabulary size, optimizer and dropout: where a large token
table's time goes, and what dropout costs.

For each ``--vocab-sizes`` it builds the student (``--student`` preset's shape, that many pieces) once per
mode with the same weights and times the training loop's step on each, alternating in one process so
that the machine's drift hits all of them alike:

- ``foreach``: ``torch.optim.AdamW``'s default implementation (a loop of ops per tensor);
- ``fused``: the same AdamW in one kernel (``fused=True``; the training loop's optimizer);
- ``sparse``: the token table's gradient as the batch's rows only, stepped lazily, each row caught up
  to AdamW's weights before a batch reads it (``train.sparse_embeddings``;
  :class:`tinyglot.trainloop.LazyAdamW`).

``--modes`` picks some of them; ``--dropouts 0.1,0`` builds each mode's student once per dropout (hidden
states and attention probabilities; the preset's own by default), timed in the same alternation: the e5
profile's student trains without dropout (docs/results.md, "No dropout in the e5 profile's student").

A step is the forward and backward of both sides of ``--batch`` random pairs of ``--tokens`` tokens, an
in-batch contrastive loss, :func:`tinyglot.trainloop.clip_grad_norm` and the optimizer's step.  It prints
the median and mean milliseconds a step; it is not a test.

    python benchmarks/optimizer_step.py --vocab-sizes 48000,96000 --threads 2
    python benchmarks/optimizer_step.py --vocab-sizes 96000 --modes fused --dropouts 0.1,0 --tokens 24
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from dataclasses import replace
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
MODES = ("foreach", "fused", "sparse")
FIRST_ID = 5  # random token ids start past the special pieces


def modes_list(text: str) -> list[str]:
    """An argparse type: comma-separated names of :data:`MODES`."""
    modes = list(dict.fromkeys(m.strip() for m in text.split(",") if m.strip()))
    unknown = [m for m in modes if m not in MODES]
    if not modes or unknown:
        raise argparse.ArgumentTypeError(f"expected modes of {', '.join(MODES)}, got {text!r}")
    return modes


def dropout_list(text: str) -> list[float]:
    """An argparse type: comma-separated dropout rates from 0 to 0.9 (each checked by ``bounded_number``)."""
    from tinyglot.app.commands.bench import bounded_number

    rate = bounded_number(float, 0, 0.9, "dropout rates")
    return list(dict.fromkeys(rate(x) for x in text.split(",")))


def main(argv: list[str] | None = None) -> int:
    sys.path.insert(0, str(REPO))
    from tinyglot.app.commands.bench import bounded_ints, bounded_number

    positive = bounded_number(int, 1, 10**6, "a whole number")
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--student", default="fast-small", help="LEALLA student preset whose shape is timed")
    p.add_argument("--vocab-sizes", type=bounded_ints(10**7), default=[48000, 96000],
                   help="comma-separated vocabulary sizes (default 48000,96000)")
    p.add_argument("--batch", type=positive, default=128, help="pairs per step (the fast presets' batch)")
    p.add_argument("--tokens", type=positive, default=24, help="tokens per sentence")
    p.add_argument("--steps", type=positive, default=15, help="timed steps per mode and round")
    p.add_argument("--rounds", type=positive, default=3, help="rounds (each runs every mode), after one warm-up round")
    p.add_argument("--threads", type=positive, default=2, help="torch threads")
    p.add_argument("--modes", type=modes_list, default=list(MODES), help=f"comma-separated, of {', '.join(MODES)}")
    p.add_argument("--dropouts", type=dropout_list, default=None,
                   help="comma-separated dropout rates from 0 to 0.9 (default: the student preset's)")
    args = p.parse_args(argv)
    if min(args.vocab_sizes) <= FIRST_ID:
        p.error(f"argument --vocab-sizes: vocabulary sizes must be above {FIRST_ID}, got {min(args.vocab_sizes)}")

    import torch

    from tinyglot.devices.profiles import detect_host
    from tinyglot.distill.config import get_preset
    from tinyglot.distill.student import Student
    from tinyglot.errors import TinyglotError
    from tinyglot.trainloop import LazyAdamW, clip_grad_norm

    torch.set_num_threads(args.threads)
    try:
        shape = get_preset(args.student).student
    except TinyglotError as err:
        p.error(str(err))
    # a column per mode and dropout rate, named after the mode alone when the rate is the preset's
    columns = {mode if args.dropouts is None else f"{mode} d{d:g}": (mode, d)
               for mode in args.modes for d in args.dropouts or [shape.dropout]}
    names = list(columns)
    print(f"{detect_host()['cpu_model']}, {args.threads} thread(s), torch {torch.__version__}; {args.student} "
          f"({shape.num_layers} x {shape.hidden_size}), {args.batch} pairs of {args.tokens} tokens a step")
    print(f"{'vocabulary':>10} | " + " | ".join(f"{n:>16}" for n in names) + "  (median / mean ms a step)")
    for vocab in args.vocab_sizes:
        runs = {}
        for name, (mode, dropout) in columns.items():
            torch.manual_seed(0)
            model = Student(replace(shape, vocab_size=vocab, dropout=dropout), None).train()
            model.set_sparse_embeddings(mode == "sparse")
            opt = LazyAdamW(model.parameters(), lr=1e-3, weight_decay=0.01, fused=mode == "fused")
            if mode == "sparse":  # as the training loop does: the batch's rows catch up before it reads them
                opt.watch(model.encoder.embeddings.word_embeddings)
            runs[name] = (model, opt)
        gen = torch.Generator().manual_seed(1)
        times: dict[str, list[float]] = {name: [] for name in names}
        for round_ in range(args.rounds + 1):
            for name, (model, opt) in runs.items():
                for _ in range(args.steps):
                    ids = torch.randint(FIRST_ID, vocab, (2 * args.batch, args.tokens), generator=gen)
                    start = time.perf_counter()
                    opt.zero_grad(set_to_none=True)
                    emb = torch.nn.functional.normalize(model.embed(ids, torch.ones_like(ids)), dim=-1)
                    scores = emb[: args.batch] @ emb[args.batch:].T * 20
                    torch.nn.functional.cross_entropy(scores, torch.arange(args.batch)).backward()
                    clip_grad_norm(list(model.parameters()), 1.0)
                    opt.step()
                    if round_:  # the first round warms up
                        times[name].append(1000 * (time.perf_counter() - start))
        cells = [f"{statistics.median(times[n]):7.1f} / {statistics.mean(times[n]):6.1f}" for n in names]
        print(f"{vocab:>10} | " + " | ".join(f"{c:>16}" for c in cells), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
