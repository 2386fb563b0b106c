"""Train an EMS teacher: vocabulary, then the dual encoder, with resumable atomic checkpoints."""

from __future__ import annotations

import logging
import math
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Callable

import numpy as np
import torch

from tinyglot.batching import BatchPlan, TokenizedPairs, tokenize_pairs
from tinyglot.config import to_dict
from tinyglot.data import Pair
from tinyglot.data.clean import group_by_lang, train_dev_split
from tinyglot.data.embedded import load_pairs
from tinyglot.distributed import DistContext, init_distributed, shutdown_distributed
from tinyglot.errors import TinyglotError
from tinyglot.evaluation import BitextResult, evaluate_bitext
from tinyglot.io import atomic_write_json
from tinyglot.models import TorchEncoder
from tinyglot.tokenizer import Tokenizer
from tinyglot.training import (MetricsLog, Progress, amp_dtype, autocast, load_checkpoint,
                               rng_state, save_checkpoint, seed_everything, select_device,
                               set_rng_state, warmup_linear_decay)

from .config import EMSPreset
from .model import EMSModel

log = logging.getLogger("tinyglot.teacher")

KIND = "ems-teacher"
LOADER = "tinyglot.teacher.encoder:load_teacher"
PIVOT = "en"


@dataclass
class TrainResult:
    out_dir: Path
    steps: int
    seconds: float
    best_dev_p1: float | None
    last_loss: float


# ------------------------------------------------------------------ data and vocabulary
def prepare_data(
    pairs: list[Pair], preset: EMSPreset
) -> tuple[dict[str, list[Pair]], dict[str, list[Pair]]]:
    """Split into train/dev (an English sentence on one side only) and cap dev per language."""
    tc = preset.train
    if all(p.lang == PIVOT for p in pairs):
        raise TinyglotError(
            "the corpus holds only English-English pairs: there is nothing to align across languages",
            "give a corpus of translation pairs (x in some language, en its English translation)",
        )
    pairs = [p for p in pairs if p.lang != PIVOT]
    train, dev = train_dev_split(pairs, dev_fraction=tc.dev_fraction, seed=tc.seed)
    train_g = group_by_lang(train)
    if len(train_g) == 1:
        log.warning("the corpus has one language besides English (%s): training a bilingual encoder",
                    next(iter(train_g)))
    dev_g = {lang: ps[: tc.dev_pairs_per_lang] for lang, ps in group_by_lang(dev).items()
             if len(ps) >= 10}
    return train_g, dev_g


def build_tokenizer(train: dict[str, list[Pair]], preset: EMSPreset) -> Tokenizer:
    """Train a SentencePiece vocabulary on a language-balanced sample of both sides."""
    tc = preset.train
    per_lang = max(1, tc.vocab_sentences // (2 * len(train)))
    rng = np.random.default_rng(tc.seed)
    sample: list[str] = []
    for lang in sorted(train):
        ps = train[lang]
        for i in rng.permutation(len(ps))[:per_lang]:
            sample += [ps[i].x, ps[i].en]
    return Tokenizer.train(
        sample, languages=[*train, PIVOT], vocab_size=preset.model.vocab_size,
        model_type=tc.vocab_model_type, lowercase=tc.lowercase, seed=tc.seed,
    )


def check_tokenizer(tokenizer: Tokenizer, langs: list[str]) -> None:
    missing = sorted(set(langs) - set(tokenizer.languages))
    if missing:
        raise TinyglotError(
            f"the vocabulary lacks language tokens for: {', '.join(missing)} "
            f"(it has {', '.join(tokenizer.languages) or 'none'})",
            "train a new vocabulary (omit --tokenizer) or drop those languages from the corpus",
        )


# ------------------------------------------------------------------ the run
class TeacherTrainer:
    """One training run in ``out_dir``: files written there are

    - ``config.json``: preset, languages, loader (``tinyglot.load(out_dir)`` opens the teacher)
    - ``tokenizer.model``; ``last.pt`` (full state, for ``--resume``); ``best.pt`` (best dev P@1)
    - ``metrics.jsonl``: training losses and dev evaluations
    """

    def __init__(
        self,
        preset: EMSPreset,
        out_dir: str | Path,
        pairs: list[Pair],
        tokenizer: Tokenizer | None = None,
        preset_name: str = "custom",
        resume: bool = False,
        progress: bool = True,
    ) -> None:
        self.preset = preset
        self.preset_name = preset_name
        self.out = Path(out_dir)
        self.resume = resume
        self.progress = progress
        tc = preset.train
        if tc.threads:
            torch.set_num_threads(tc.threads)
        self.device = select_device(tc.device)
        self.ctx: DistContext = init_distributed(self.device)
        if self.ctx.enabled and self.device.type == "cuda":
            self.device = torch.device("cuda", self.ctx.local_rank)
        self._check_out_dir()
        train_g, self.dev = prepare_data(pairs, preset)
        tok_path = self.out / "tokenizer.model"
        if tokenizer is None and resume and tok_path.exists():
            tokenizer = Tokenizer.load(tok_path)
        if tokenizer is None:
            if self.ctx.is_main:
                build_tokenizer(train_g, preset).save(tok_path)
            self.ctx.barrier()
            tokenizer = Tokenizer.load(tok_path)
        elif self.ctx.is_main:
            tokenizer.save(tok_path)
        check_tokenizer(tokenizer, [*train_g, PIVOT])
        self.tokenizer = tokenizer
        # the model's vocabulary is the tokenizer's (SentencePiece may give fewer pieces than asked)
        preset.model.vocab_size = tokenizer.vocab_size
        self.data: TokenizedPairs = tokenize_pairs(train_g, tokenizer, preset.model.max_len)
        if self.data.truncated:
            log.info("%d sentences longer than max_len=%d tokens were truncated",
                     self.data.truncated, preset.model.max_len)
        self.lang_ids = [tokenizer.lang_token_id(lang) for lang in self.data.langs]
        self.pivot_id = tokenizer.lang_token_id(PIVOT)
        self.plan = BatchPlan(self.data, tc.batch_size * self.ctx.world, tc.lang_temperature, tc.seed)
        self.log = MetricsLog(self.out / "metrics.jsonl")

    # ---------------------------------------------------------------- helpers
    def _check_out_dir(self) -> None:
        if (self.out / "last.pt").exists() and not self.resume:
            raise TinyglotError(
                f"{self.out} already holds a training run (last.pt)",
                "pass --resume to continue it, or choose another --out folder",
            )
        if self.resume and not (self.out / "last.pt").exists():
            raise TinyglotError(f"--resume: no checkpoint in {self.out}", "train without --resume first")
        self.out.mkdir(parents=True, exist_ok=True)

    def meta(self) -> dict:
        tc = self.preset.train
        return {
            "kind": KIND,
            "model": to_dict(self.preset.model),
            "tokenizer": self.tokenizer.sha256,
            "data": self.data.fingerprint,
            "trajectory": {"seed": tc.seed, "batch_size": tc.batch_size, "grad_accum": tc.grad_accum,
                           "lang_temperature": tc.lang_temperature, "world": self.ctx.world},
        }

    def write_config(self, extra: dict | None = None) -> None:
        atomic_write_json(self.out / "config.json", {
            "loader": LOADER,
            "kind": KIND,
            "preset": self.preset_name,
            "model": to_dict(self.preset.model),
            "train": to_dict(self.preset.train),
            "tokenizer": "tokenizer.model",
            "languages": sorted([*self.data.langs, PIVOT]),
            "dim": self.preset.model.hidden_size,
            "max_len": self.preset.model.max_len,
            "pooling": "mean",
            "normalize": True,
            **(extra or {}),
        })

    def encoder(self, model: EMSModel) -> TorchEncoder:
        return TorchEncoder(self.tokenizer, model.embed, self.preset.model.max_len, self.device, name="ems-teacher")

    def evaluate(self, model: EMSModel) -> BitextResult | None:
        if not self.dev:
            return None
        model.eval()
        try:
            result = evaluate_bitext(self.encoder(model), self.dev, batch_size=128,
                                     model_name="ems-teacher", testset_name="dev")
        finally:
            model.train()
        return result

    # ---------------------------------------------------------------- loop
    def train(self, on_step: Callable[[int], None] | None = None) -> TrainResult:
        """Run to ``max_steps``; ``on_step(step)`` is called after each step (and its saving)."""
        tc, mc = self.preset.train, self.preset.model
        seed_everything(tc.seed)
        model = EMSModel(mc).to(self.device)
        no_decay = ("bias", "LayerNorm.weight")
        groups = [
            {"params": [p for n, p in model.named_parameters() if not n.endswith(no_decay)],
             "weight_decay": tc.weight_decay},
            {"params": [p for n, p in model.named_parameters() if n.endswith(no_decay)], "weight_decay": 0.0},
        ]
        optimizer = torch.optim.AdamW(groups, lr=tc.lr)
        scheduler = warmup_linear_decay(optimizer, tc.warmup_steps, tc.max_steps)
        dtype = amp_dtype(self.device, tc.amp)
        scaler = torch.amp.GradScaler("cuda", enabled=dtype == torch.float16)
        step, best = 0, None
        if self.resume:
            ck = load_checkpoint(self.out / "last.pt", expect=self.meta())
            model.load_state_dict(ck["model"])
            optimizer.load_state_dict(ck["optimizer"])
            scheduler.load_state_dict(ck["scheduler"])
            scaler.load_state_dict(ck["scaler"])
            set_rng_state(ck["rng"])
            step, best = ck["step"], ck["best"]
            if self.ctx.is_main:
                self.log.truncate_after(step)
                log.info("resumed from step %d", step)
        if self.ctx.is_main:
            self.write_config()
        net = model
        if self.ctx.enabled:
            net = torch.nn.parallel.DistributedDataParallel(
                model, device_ids=[self.ctx.local_rank] if self.device.type == "cuda" else None)
        model.train()
        t0, pairs_seen, last_loss = time.time(), 0, math.nan
        bar = Progress(tc.max_steps, f"teacher {self.preset_name}", self.progress and self.ctx.is_main)
        with bar.run(start=step):
            while step < tc.max_steps:
                parts = self._step(net, model, optimizer, scaler, dtype, step)
                scheduler.step()
                step += 1
                pairs_seen += parts["pairs"]
                last_loss = parts["loss"]
                rate = pairs_seen / max(1e-9, time.time() - t0)
                bar.update(step, f"loss {parts['loss']:.3f} (xtr {parts['xtr']:.3f} cntrs "
                                 f"{parts['cntrs']:.3f}) {rate:.0f} pairs/s")
                if self.ctx.is_main and (step % tc.log_every == 0 or step == tc.max_steps):
                    self.log.write({"step": step, "lr": scheduler.get_last_lr()[0], "pairs_per_s": rate,
                                    **{k: v for k, v in parts.items() if k != "pairs"}})
                if step % tc.eval_every == 0 or step == tc.max_steps:
                    best = self._eval_and_keep_best(model, step, best)
                if step % tc.save_every == 0 or step == tc.max_steps:
                    self._save(model, optimizer, scheduler, scaler, step, best)
                if on_step is not None:
                    on_step(step)
        seconds = time.time() - t0
        if self.ctx.is_main:
            self.write_config({"trained_steps": step, "best_dev_p1": best})
        self.ctx.barrier()
        shutdown_distributed()
        return TrainResult(self.out, step, seconds, best, last_loss)

    def _step(self, net, model, optimizer, scaler, dtype, step: int) -> dict:
        tc, mc = self.preset.train, self.preset.model
        optimizer.zero_grad(set_to_none=True)
        totals = {"loss": 0.0, "xtr": 0.0, "cntrs": 0.0, "pairs": 0}
        for micro in range(tc.grad_accum):
            rows = self.plan.batch(step * tc.grad_accum + micro, self.ctx.world)
            n_global = len(rows)
            rows = rows[self.ctx.rank :: self.ctx.world]
            xb, eb, x_lang = self.plan.tensors(rows, self.tokenizer, self.lang_ids, mc.max_len)
            t = lambda a: torch.from_numpy(a).to(self.device)  # noqa: E731
            en_lang = torch.full((len(rows),), self.pivot_id, dtype=torch.long, device=self.device)
            with autocast(self.device, dtype):
                out = net(t(xb.ids), t(xb.mask), t(eb.ids), t(eb.mask), t(x_lang), en_lang,
                          gather=self.ctx.gather if self.ctx.enabled else None, global_batch=n_global)
            # DDP averages gradients over processes; the loss is a global sum / N, so scale back.
            scaler.scale(out["loss"] * self.ctx.world / tc.grad_accum).backward()
            for key in ("xtr", "cntrs"):
                totals[key] += float(out[key]) * self.ctx.world / tc.grad_accum
            totals["pairs"] += n_global
        scaler.unscale_(optimizer)
        grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), tc.clip_norm)
        scaler.step(optimizer)
        scaler.update()
        for key in ("xtr", "cntrs"):
            totals[key] = self.ctx.all_reduce_mean(totals[key])
        totals["loss"] = totals["xtr"] + totals["cntrs"]
        totals["grad_norm"] = float(grad_norm)
        if not math.isfinite(totals["loss"]):
            raise TinyglotError(
                f"the loss became {totals['loss']} at step {step + 1}",
                "lower train.lr or raise train.warmup_steps; resume from the last checkpoint",
            )
        return totals

    def _eval_and_keep_best(self, model, step: int, best):
        if not self.ctx.is_main:
            self.ctx.barrier()
            return best
        result = self.evaluate(model)
        if result is not None:
            p1 = result.primary_metric
            self.log.write({"step": step, "dev_p1": p1,
                            "dev": {r.lang: round(r.mean, 4) for r in result.rows}})
            if best is None or p1 > best:
                best = p1
                save_checkpoint(self.out / "best.pt", {"meta": self.meta(), "model": model.state_dict(),
                                                       "step": step, "dev_p1": p1})
        self.ctx.barrier()
        return best

    def _save(self, model, optimizer, scheduler, scaler, step: int, best) -> None:
        if self.ctx.is_main:
            save_checkpoint(self.out / "last.pt", {
                "meta": self.meta(), "model": model.state_dict(), "optimizer": optimizer.state_dict(),
                "scheduler": scheduler.state_dict(), "scaler": scaler.state_dict(), "rng": rng_state(),
                "step": step, "best": best,
            })
        self.ctx.barrier()


def train_teacher(
    preset: EMSPreset,
    out_dir: str | Path,
    data: str | Path | None = None,
    tokenizer: str | Path | None = None,
    preset_name: str = "custom",
    resume: bool = False,
    progress: bool = True,
) -> TrainResult:
    """Train (or ``resume``) an EMS teacher on ``data`` (default: the embedded corpus)."""
    pairs = load_pairs(data)
    tok = Tokenizer.load(tokenizer) if tokenizer else None
    trainer = TeacherTrainer(preset, out_dir, pairs, tok, preset_name, resume, progress)
    return trainer.train()
