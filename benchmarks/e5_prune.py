"""Does cutting e5-small's feed-forward blocks buy a faster student that starts as e5-small's layers?
A student of e5-small's width started as its first k layers (``student.init=teacher-layers``: the
weights of ``e5_layer_weights`` on ``e5_vocabulary``'s pieces of the training corpus) with each layer's
feed-forward block cut from 1,536 units to f, untrained, mean-pooled in PyTorch; P@1 on each test set as
``tinyglot eval`` reports it (the mean of x -> en and en -> x).  Which units stay: by their mean
|activation| on calibration sentences times the norm of their output column (``act``; the mean output
of the cut units goes into the output bias), or by weight norms alone (``weights``).  A feed-forward
block of f units costs 2 x 384 x f multiply-adds a token against the attention's 4 x 384 x 384, so
4 layers at f = 512 cost a little more than 2 whole layers.  e5-small's weights and the units' activity
are computed once, for the deepest try: layer i's activity does not depend on the layers above it.
Prints numbers; asserts nothing.

    python benchmarks/e5_prune.py --corpus ../shared/data/train.jsonl.gz --pairs 200 \\
        --test general=GENERAL/general-test --test docs=GENERAL/docs-test \\
        --try 4:1536:act,4:512:act,4:512:weights,6:384:act,6:256:act
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import random
import time
from collections import defaultdict
from collections.abc import Sequence

import numpy as np
import torch

from tinyglot.data.embedded import load_testset
from tinyglot.data.readers import read_jsonl
from tinyglot.distill.config import StudentConfig
from tinyglot.distill.student import Student
from tinyglot.distill.teacher_init import e5_layer_weights, e5_vocabulary
from tinyglot.evaluation.metrics import bitext_p_at_1
from tinyglot.models import TorchEncoder
from tinyglot.tokenizer import Tokenizer

E5_FFN = 1536


def _student(cfg: StudentConfig, weights: dict[str, torch.Tensor]) -> Student:
    model = Student(cfg)
    model.encoder.load_state_dict(weights, strict=False)  # (position_ids are the model's own)
    return model.eval()


def first_layers(weights: dict[str, torch.Tensor], layers: int) -> dict[str, torch.Tensor]:
    """``weights`` (BertModel names) without the encoder layers from ``layers`` on."""
    return {k: v for k, v in weights.items()
            if not k.startswith("encoder.layer.") or int(k.split(".")[2]) < layers}


def ffn_activity(weights: dict[str, torch.Tensor], tokenizer: Tokenizer, cfg: StudentConfig,
                 sentences: Sequence[str]) -> list[torch.Tensor]:
    """Per layer of the uncut student (``weights``), the mean |activation| and the mean activation of
    each feed-forward unit over the real tokens of ``sentences``: a (2, units) tensor per layer."""
    full = _student(cfg, weights)
    sums = [torch.zeros(2, cfg.ffn_size, dtype=torch.float64) for _ in range(cfg.num_layers)]
    state = {"tokens": 0}

    def hook(i: int):
        def record(_module, _inputs, output: torch.Tensor) -> None:
            real = output[state["mask"].bool()].double()
            sums[i][0] += real.abs().sum(0)
            sums[i][1] += real.sum(0)
        return record

    def embed(ids: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        state["mask"] = mask
        state["tokens"] += int(mask.sum())
        return full.embed(ids, mask)

    hooks = [layer.intermediate.register_forward_hook(hook(i)) for i, layer in enumerate(full.encoder.encoder.layer)]
    try:
        TorchEncoder(tokenizer, embed, cfg.max_len, torch.device("cpu"), name="e5 layers").encode(list(sentences))
    finally:
        for h in hooks:
            h.remove()
    return [s / max(state["tokens"], 1) for s in sums]


def cut_ffn(weights: dict[str, torch.Tensor], layers: int, units: int,
            activity: list[torch.Tensor] | None) -> dict[str, torch.Tensor]:
    """``weights`` with each of ``layers`` layers' feed-forward block cut to its ``units`` strongest units:
    mean |activation| (``activity``, else the norm of the unit's input row) times the norm of its output
    column; with ``activity``, the cut units' mean output is folded into the output bias."""
    out = dict(weights)
    for i in range(layers):
        name = f"encoder.layer.{i}."
        w_in, b_in = out[name + "intermediate.dense.weight"], out[name + "intermediate.dense.bias"]
        w_out, b_out = out[name + "output.dense.weight"], out[name + "output.dense.bias"]
        size = activity[i][0] if activity is not None else w_in.norm(dim=1).double()
        keep = torch.sort(torch.topk(w_out.norm(dim=0).double() * size, units).indices).values
        if activity is not None:
            cut = torch.ones(len(b_in), dtype=torch.bool)
            cut[keep] = False
            b_out = b_out + (w_out[:, cut].double() @ activity[i][1][cut]).float()
        out[name + "intermediate.dense.weight"], out[name + "intermediate.dense.bias"] = w_in[keep], b_in[keep]
        out[name + "output.dense.weight"], out[name + "output.dense.bias"] = w_out[:, keep].contiguous(), b_out
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--corpus", required=True, help="training corpus (JSON lines) for the vocabulary and calibration")
    p.add_argument("--test", action="append", required=True, metavar="NAME=PATH",
                   help="a test set (repeatable): a folder of <lang>.tsv, or any corpus")
    p.add_argument("--try", dest="tries", default="4:1536:act,4:512:act,4:512:weights,6:384:act,6:256:act",
                   help="LAYERS:UNITS:act|weights, comma-separated")
    p.add_argument("--vocab-size", type=int, default=96000)
    p.add_argument("--min-pairs", type=int, default=1500, help="corpus languages with fewer pairs are left out")
    p.add_argument("--calibration", type=int, default=20, help="calibration sentences per language")
    p.add_argument("--pairs", type=int, default=200, help="first test pairs per language")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", default=None, help="also write the figures here")
    args = p.parse_args(argv)
    tries = [(int(a), int(b), how) for a, b, how in (t.split(":") for t in args.tries.split(","))]
    if bad := [t for t in tries if t[2] not in ("act", "weights") or not 1 <= t[1] <= E5_FFN]:
        raise SystemExit(f"--try: {bad}: units 1 to {E5_FFN}, and act or weights")
    grouped: dict[str, list] = defaultdict(list)
    for pair in read_jsonl(args.corpus):
        grouped[pair.lang].append(pair)
    train = {lang: pairs for lang, pairs in grouped.items() if len(pairs) >= args.min_pairs}
    tokenizer = e5_vocabulary(train, args.vocab_size, seed=args.seed)
    rng = random.Random(args.seed)
    calibration = [train[lang][i].x for lang in sorted(train)
                   for i in rng.sample(range(len(train[lang])), min(args.calibration, len(train[lang])))]
    sets = {}
    for spec in args.test:
        name, _, path = spec.partition("=")
        sets[name] = {lang: pairs[:args.pairs] for lang, pairs in sorted(load_testset(path).items())}
    deepest = StudentConfig(hidden_size=384, num_layers=max(t[0] for t in tries), num_heads=12, ffn_size=E5_FFN,
                            max_len=128, dropout=0.0, init="teacher-layers", vocab_size=tokenizer.vocab_size)
    all_weights, _ = e5_layer_weights(tokenizer, deepest)
    activity = ffn_activity(all_weights, tokenizer, deepest, calibration) \
        if any(units < E5_FFN and how == "act" for _, units, how in tries) else None
    rows = []
    for layers, units, how in tries:
        start = time.perf_counter()
        weights = first_layers(all_weights, layers)
        if units < E5_FFN:
            weights = cut_ffn(weights, layers, units, activity if how == "act" else None)
        cut = dataclasses.replace(deepest, num_layers=layers, ffn_size=units)
        encoder = TorchEncoder(tokenizer, _student(cut, weights).embed, cut.max_len, torch.device("cpu"), name="cut")
        row = {"layers": layers, "units": units, "by": how}
        for name, grouped_test in sets.items():
            both = np.array([bitext_p_at_1(encoder.encode([q.x for q in pairs]), encoder.encode([q.en for q in pairs]))
                             for pairs in grouped_test.values()])
            row[name] = round(100 * float(both.mean()), 1)
        row["seconds"] = round(time.perf_counter() - start, 1)
        rows.append(row)
        print(json.dumps(row), flush=True)
    print("\n| layers | units | by | " + " | ".join(sets) + " |\n|---:|---:|---|" + "---:|" * len(sets))
    for row in rows:
        print(f"| {row['layers']} | {row['units']} | {row['by']} | " + " | ".join(f"{row[n]:.1f}" for n in sets) + " |")
    if args.json:
        from tinyglot.io import atomic_write_json

        atomic_write_json(args.json, rows)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
