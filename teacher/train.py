"""Train an EMS teacher: vocabulary, then the dual encoder, with resumable atomic checkpoints."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from collections.abc import Callable

import torch

from tinyglot.batching import (PIVOT, BatchPlan, TokenizedPairs, check_tokenizer, split_train_dev,
                               train_vocabulary)
from tinyglot.config import to_dict
from tinyglot.data import Pair
from tinyglot.data.embedded import load_pairs
from tinyglot.distributed import DistContext, init_distributed, shutdown_distributed
from tinyglot.evaluation import BitextResult, evaluate_bitext
from tinyglot.io import atomic_write_json
from tinyglot.models import TorchEncoder
from tinyglot.tokenizer import Tokenizer
from tinyglot.trainloop import TrainLoop
from tinyglot.tokcache import tokenized_corpus
from tinyglot.training import (maybe_compile, prepare_run_dir, run_tokenizer, seed_everything, to_device,
                               training_device)

from .config import EMSPreset
from .model import EMSModel

log = logging.getLogger("tinyglot.teacher")

KIND = "ems-teacher"
LOADER = "tinyglot.teacher.encoder:load_teacher"


@dataclass
class TrainResult:
    out_dir: Path
    steps: int
    seconds: float
    best_dev_p1: float | None
    last_loss: float


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
        self.device = training_device(tc)  # under torchrun: cuda:<LOCAL_RANK>
        self.ctx: DistContext = init_distributed(self.device)
        prepare_run_dir(self.out, resume, "teacher run", clean=self.ctx.is_main)
        self.ctx.barrier()
        train_g, self.dev = split_train_dev(pairs, tc.dev_fraction, tc.dev_pairs_per_lang, tc.seed)

        def make() -> Tokenizer:
            return train_vocabulary(train_g, preset.model.vocab_size, tc.vocab_sentences, tc.vocab_model_type,
                                    tc.lowercase, tc.seed, tc.vocab_char_share)

        if self.ctx.is_main:
            run_tokenizer(self.out, tokenizer, resume, make)
        self.ctx.barrier()
        tokenizer = Tokenizer.load(self.out / "tokenizer.model")
        check_tokenizer(tokenizer, [*train_g, PIVOT])
        self.tokenizer = tokenizer
        # the model's vocabulary is the tokenizer's (SentencePiece may give fewer pieces than asked)
        preset.model.vocab_size = tokenizer.vocab_size
        self.data: TokenizedPairs = tokenized_corpus(train_g, tokenizer, preset.model.max_len, tc, self.device,
                                                     self.ctx)
        if self.data.truncated:
            log.info("%d sentences longer than max_len=%d tokens were truncated",
                     self.data.truncated, preset.model.max_len)
        self.lang_ids = [tokenizer.lang_token_id(lang) for lang in self.data.langs]
        self.pivot_id = tokenizer.lang_token_id(PIVOT)
        self.plan = BatchPlan.from_settings(self.data, tc, self.ctx.world)

    # ---------------------------------------------------------------- helpers
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
        return evaluate_bitext(self.encoder(model), self.dev, batch_size=128,
                               model_name="ems-teacher", testset_name="dev")

    # ---------------------------------------------------------------- loop
    def train(self, on_step: Callable[[int], None] | None = None) -> TrainResult:
        """Run to ``max_steps``; ``on_step(step)`` is called after each step (and its saving)."""
        tc = self.preset.train
        seed_everything(tc.seed)
        model = EMSModel(self.preset.model).to(self.device)
        loop = TrainLoop(self.out, model, tc, self.device, self.meta(), f"teacher {self.preset_name}",
                         ctx=self.ctx, progress=self.progress, global_loss=True)
        if self.resume:
            loop.resume()
        if self.ctx.is_main:
            self.write_config()
        maybe_compile(model.encoder, tc.compile)
        net: torch.nn.Module = model
        if self.ctx.enabled:
            net = torch.nn.parallel.DistributedDataParallel(
                model, device_ids=[self.ctx.local_rank] if self.device.type == "cuda" else None)
        result = loop.run(self._micro_loss, lambda: self.evaluate(model), net=net, on_step=on_step)
        if self.ctx.is_main:
            self.write_config({"trained_steps": result.steps, "best_dev_p1": result.best_dev_p1})
        shutdown_distributed()  # waits for every process first
        return TrainResult(self.out, result.steps, result.seconds, result.best_dev_p1, result.last_loss)

    def _micro_loss(self, net: torch.nn.Module, index: int) -> dict:
        """Loss of micro-batch ``index``: this process's slice of the global batch."""
        rows = self.plan.batch(index, self.ctx.world)
        n_global = len(rows)
        rows = rows[self.ctx.rank :: self.ctx.world]
        xb, eb, x_lang = self.plan.tensors(rows, self.tokenizer, self.lang_ids, self.preset.model.max_len)
        t = lambda a: to_device(a, self.device)  # noqa: E731
        en_lang = torch.full((len(rows),), self.pivot_id, dtype=torch.long, device=self.device)
        out = net(t(xb.ids), t(xb.mask), t(eb.ids), t(eb.mask), t(x_lang), en_lang,
                  gather=self.ctx.gather if self.ctx.enabled else None, global_batch=n_global)
        xtr, cntrs = float(out["xtr"]), float(out["cntrs"])
        parts = {"loss": xtr + cntrs, "xtr": xtr, "cntrs": cntrs}
        return {"loss": out["loss"], "parts": parts, "pairs": n_global}


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
