"""Training throughput of EMS presets: pairs/s and tokens/s per thread count, and the share of
step time spent in the XTR softmax over the vocabulary.  Prints numbers; asserts nothing.

    python benchmarks/teacher_throughput.py --presets ems-tiny,ems-small --threads 1,2 --steps 10
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import torch

from tinyglot.batching import BatchPlan, tokenize_pairs
from tinyglot.data.clean import group_by_lang
from tinyglot.data.embedded import load_pairs
from tinyglot.teacher import EMSModel, get_preset
from tinyglot.teacher.losses import bag_of_tokens, xtr_kl
from tinyglot.batching import train_vocabulary


def bench(preset_name: str, threads: int, steps: int, batch: int | None) -> dict:
    torch.set_num_threads(threads)
    preset = get_preset(preset_name)
    if batch:
        preset.train.batch_size = batch
    grouped = group_by_lang(load_pairs(None))
    tc = preset.train
    tok = train_vocabulary(grouped, preset.model.vocab_size, tc.vocab_sentences, tc.vocab_model_type, tc.lowercase)
    preset.model.vocab_size = tok.vocab_size
    data = tokenize_pairs(grouped, tok, preset.model.max_len)
    plan = BatchPlan(data, preset.train.batch_size, preset.train.lang_temperature, seed=0)
    lang_ids = [tok.lang_token_id(lang) for lang in data.langs]
    torch.manual_seed(0)
    model = EMSModel(preset.model)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    en = tok.lang_token_id("en")
    t = torch.from_numpy
    step_s, xtr_s, pairs, tokens = [], [], 0, 0
    for step in range(steps + 2):  # two warm-up steps
        rows = plan.batch(step)
        xb, eb, x_lang = plan.tensors(rows, tok, lang_ids, preset.model.max_len)
        args = (t(xb.ids), t(xb.mask), t(eb.ids), t(eb.mask), t(x_lang), torch.full((len(rows),), en))
        start = time.perf_counter()
        opt.zero_grad()
        model(*args)["loss"].backward()
        opt.step()
        elapsed = time.perf_counter() - start
        # the XTR head alone (logits over the vocabulary, softmax, KL), forward + backward
        u = model.embed(args[0], args[1]).detach().requires_grad_()
        start = time.perf_counter()
        xtr_kl(model.xtr_logits(u, args[5]), bag_of_tokens(args[2], args[3], preset.model.vocab_size)).backward()
        xtr = 2 * (time.perf_counter() - start)  # both directions
        if step >= 2:
            step_s.append(elapsed)
            xtr_s.append(xtr)
            pairs += len(rows)
            tokens += int(xb.mask.sum() + eb.mask.sum())
    total = sum(step_s)
    return {"preset": preset_name, "threads": threads, "batch": preset.train.batch_size,
            "vocab": tok.vocab_size, "pairs_per_s": pairs / total, "tokens_per_s": tokens / total,
            "xtr_share": sum(xtr_s) / total, "ms_per_step": 1000 * float(np.median(step_s))}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--presets", default="ems-tiny,ems-small")
    p.add_argument("--threads", default="1,2")
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--batch", type=int, default=None, help="override the preset's batch size")
    args = p.parse_args()
    print(f"{'preset':<10} {'threads':>7} {'batch':>5} {'vocab':>6} {'pairs/s':>8} {'tokens/s':>9} "
          f"{'ms/step':>8} {'XTR share':>9}")
    for name in args.presets.split(","):
        for threads in map(int, args.threads.split(",")):
            r = bench(name, threads, args.steps, args.batch)
            print(f"{r['preset']:<10} {r['threads']:>7} {r['batch']:>5} {r['vocab']:>6} {r['pairs_per_s']:>8.1f} "
                  f"{r['tokens_per_s']:>9.0f} {r['ms_per_step']:>8.0f} {100 * r['xtr_share']:>8.1f}%")


if __name__ == "__main__":
    main()
