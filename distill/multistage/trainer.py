"""The four stages of the multi-stage recipe: :class:`MultiStageTrainer` runs, resumes or skips each."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import numpy as np
import torch
from torch import nn

from tinyglot.batching import PIVOT, BatchPlan, check_tokenizer, split_train_dev
from tinyglot.config import to_dict
from tinyglot.data import Pair
from tinyglot.distributed import DistContext, data_parallel, init_distributed
from tinyglot.errors import TinyglotError
from tinyglot.evaluation import BitextResult, evaluate_bitext
from tinyglot.models import TorchEncoder, read_model_config
from tinyglot.stagecache import StageStore, hash_json
from tinyglot.tokcache import tokenized_corpus
from tinyglot.trainloop import TrainLoop
from tinyglot.training import (load_checkpoint, maybe_compile, prepare_run_dir, seed_everything, to_device,
                               training_device)

from ..cache import shared_teacher_embeddings
from ..losses import Gather
from ..ms_config import STAGE_NAMES, MSLossConfig, MSPreset, MSTrainConfig
from ..student import least_squares_head
from .io import KIND_ASSISTANT, KIND_STUDENT, load_assistant, load_ms_model, save_ms_model, weights_sha
from .losses import contrastive_loss, masked_mse, mse, pair_mse
from .model import MSModel, build_student, init_unit_from_assistant

log = logging.getLogger("tinyglot.distill")

STAGES = (1, 2, 3, 4)
OUTPUT_NAME = {1: "assistant", 2: "student", 3: "student", 4: "student"}
MARKER = "stage"  # the StageStore marker of a stage folder


def parse_stages(spec: str | Sequence[int] | None) -> tuple[int, ...]:
    """``"1,2,3,4"`` (or a list) -> (1, 2, 3, 4); None or empty -> every stage."""
    if spec is None or (isinstance(spec, str) and not spec.strip()):
        return STAGES
    items = spec.split(",") if isinstance(spec, str) else list(spec)
    try:
        stages = tuple(int(str(s).strip()) for s in items)
    except ValueError:
        raise TinyglotError(f"--stages {spec!r} is not a list of stage numbers",
                            "write stage numbers separated by commas, e.g. --stages 3,4") from None
    unknown = [s for s in stages if s not in STAGES]
    if unknown:
        raise TinyglotError(f"unknown stage {unknown[0]} in --stages {spec!r}", "stages are 1, 2, 3 and 4")
    if list(stages) != sorted(set(stages)):
        raise TinyglotError(f"--stages {spec!r} repeats a stage or is out of order",
                            "stages run in order: list each once, ascending (e.g. 2,3,4)")
    return stages


def trajectory(tc: MSTrainConfig, world: int = 1) -> dict:
    """The settings that decide a stage's weights (threads, logging cadence and device do not);
    ``batch_size`` is the global batch (per process x processes), so a stage trained by two processes
    at batch B counts as made with 2B in one process."""
    keys = ("seed", "batch_size", "grad_accum", "lr", "weight_decay", "warmup_steps", "max_steps", "clip_norm",
            "lang_temperature", "head_fit_pairs")
    return {**{k: getattr(tc, k) for k in keys}, "batch_size": tc.batch_size * world}


@dataclass
class Batch:
    s_ids: torch.Tensor  # English side
    s_mask: torch.Tensor
    t_ids: torch.Tensor  # translation
    t_mask: torch.Tensor
    rows: np.ndarray  # this process's rows of the global batch
    n_global: int = 0  # rows of the global batch (data-parallel runs; 0: these rows are all)

    def __len__(self) -> int:
        return len(self.rows)

    @property
    def pairs(self) -> int:
        return self.n_global or len(self.rows)


@dataclass
class StageResult:
    """One stage: ``wall_seconds`` of the invocation that finished it (a resumed stage counts its last
    part; stage 1 and 4 include the one-time teacher pass when they made it)."""

    stage: int
    output: Path
    steps: int
    wall_seconds: float
    best_dev_p1: float | None
    skipped: bool
    note: str = ""

    def to_dict(self) -> dict:
        return {"stage": self.stage, "name": STAGE_NAMES[self.stage], "output": str(self.output),
                "steps": self.steps, "wall_seconds": self.wall_seconds, "best_dev_p1": self.best_dev_p1,
                "skipped": self.skipped, "note": self.note}


class MultiStageTrainer:
    """The four stages in ``out_dir``; ``run(stages)`` runs, resumes or skips each in order.

    Under torchrun every stage is data-parallel (see :class:`~tinyglot.distill.lealla.LeallaTrainer`):
    each process takes a slice of the global batch, stage 4's contrastive columns are gathered across
    processes, rank 0 runs the teacher pass and writes every file, the others wait and read.
    """

    def __init__(self, preset: MSPreset, out_dir: str | Path, pairs: list[Pair], assistant: str | Path,
                 teacher: Any, teacher_identity: str | None = None, preset_name: str = "custom",
                 cache_dir: str | Path | None = None, progress: bool = True,
                 say: Callable[[str], None] = log.info) -> None:
        self.preset, self.preset_name, self.out = preset, preset_name, Path(out_dir)
        self.progress, self.say, self.teacher = progress, say, teacher
        tc = preset.train
        self.device = training_device(tc)
        self.ctx: DistContext = init_distributed(self.device)
        self.assistant_path = Path(assistant).resolve()
        first, self.tokenizer, acfg, self.assistant_identity = load_assistant(self.assistant_path)
        bc = first.encoder.config
        self.student_cfg = preset.student.resolved(bc.hidden_size, bc.num_attention_heads, bc.intermediate_size,
                                                   int(acfg["max_len"]), bc.hidden_act, self.tokenizer.vocab_size)
        self.assistant_max_len = int(acfg["max_len"])
        self.teacher_identity = teacher_identity or teacher.identity()
        self.cache_dir = Path(cache_dir) if cache_dir else self.out / "teacher-cache"
        train_g, self.dev = split_train_dev(pairs, tc.dev_fraction, tc.dev_pairs_per_lang, tc.seed)
        check_tokenizer(self.tokenizer, [*train_g, PIVOT])
        self.data = tokenized_corpus(train_g, self.tokenizer, self.student_cfg.max_len, tc, self.device, self.ctx)
        index: dict[str, int] = {}
        self.en_row = [np.array([index.setdefault(p.en, len(index)) for p in ps]) for ps in self.data.pairs]
        self.english = list(index)
        self._t_emb: np.ndarray | None = None

    # ---------------------------------------------------------------- inputs
    @property
    def t_emb(self) -> np.ndarray:
        """Teacher embeddings of every distinct English training sentence (cached on disk)."""
        if self._t_emb is None:
            self._t_emb = shared_teacher_embeddings(
                self.ctx, self.teacher, self.english, self.cache_dir, identity=self.teacher_identity,
                batch_size=self.preset.train.teacher_batch_size, progress=self.progress)
        return self._t_emb

    def teacher_rows(self, rows: np.ndarray) -> torch.Tensor:
        er = np.array([self.en_row[li][pi] for li, pi in rows])
        return to_device(np.asarray(self.t_emb[er], dtype=np.float32), self.device)

    def batch(self, plan: BatchPlan, index: int, whole: bool = False) -> Batch:
        """This process's rows of the global batch ``index`` (all of them with ``whole``)."""
        rows = plan.batch(index, 1 if whole else self.ctx.world)  # (whole: untrimmed, as in one process)
        n_global = len(rows) if self.ctx.enabled else 0
        if not whole:
            rows = rows[self.ctx.rank :: self.ctx.world]
        xb, eb, _ = plan.tensors(rows, self.tokenizer, [0] * len(self.data.langs), self.student_cfg.max_len)
        t = lambda a: to_device(a, self.device)  # noqa: E731
        return Batch(t(eb.ids), t(eb.mask), t(xb.ids), t(xb.mask), rows, 0 if whole else n_global)

    def plan(self, stage: int) -> BatchPlan:
        tc = self.preset.stage_settings(stage)
        return BatchPlan.from_settings(self.data, tc, self.ctx.world, seed_offset=stage)

    def share(self, b: Batch) -> float | None:
        """This process's part of the global batch (None in one process): per-pair losses are
        scaled by it so that the processes' losses sum to the global batch's."""
        return len(b) / b.n_global if b.n_global else None

    def gathered(self, b: Batch) -> tuple[Gather | None, int | None]:
        return (self.ctx.gather, b.n_global) if b.n_global else (None, None)

    def stage_dir(self, stage: int) -> Path:
        return self.out / f"stage{stage}"

    def output(self, stage: int) -> Path:
        return self.stage_dir(stage) / OUTPUT_NAME[stage]

    # ---------------------------------------------------------------- stage bookkeeping
    def stage_meta(self, stage: int) -> dict:
        """What stage ``stage``'s weights depend on; its checkpoints and output must match it."""
        meta = {"kind": f"multistage-stage{stage}", "tokenizer": self.tokenizer.sha256, "data": self.data.fingerprint,
                "train": trajectory(self.preset.stage_settings(stage), self.ctx.world)}
        if stage in (1, 4):
            meta["teacher"] = self.teacher_identity
        if stage == 1:
            return {**meta, "assistant": self.assistant_identity}
        meta.update(student=to_dict(self.student_cfg), assistant=weights_sha(self.require(1, stage)))
        if stage >= 3:
            meta["previous"] = weights_sha(self.require(stage - 1, stage))
        if stage == 4:
            meta["loss"] = to_dict(self.preset.loss)
        return meta

    def store(self, stage: int) -> StageStore:
        """The marker of ``stage`` (``stageN/stages/stage.json``, inside the stage folder so that a
        copied stage folder carries it): the hash of :meth:`stage_meta` and of the output's files."""
        return StageStore(self.stage_dir(stage))

    def status(self, stage: int, meta: dict | None = None) -> str:
        """``complete``, ``missing`` or why the existing output does not belong to these settings."""
        store = self.store(stage)
        if not store.marker_path(MARKER).exists() and not (self.output(stage) / "config.json").is_file():
            return "missing"
        if meta is None:
            try:
                meta = self.stage_meta(stage)
            except TinyglotError as exc:
                return f"made from earlier outputs that are gone or changed ({exc.problem})"
        marker, why = store.check(MARKER, hash_json(meta))
        if marker is not None:
            return "complete"
        recorded = store.read(MARKER)
        if recorded is None:
            return f"left without its marker ({why})"
        if recorded.input_hash != hash_json(meta):
            differ = sorted(k for k in set(meta) | set(recorded.inputs)
                            if hash_json(meta.get(k)) != hash_json(recorded.inputs.get(k)))
            return f"made with other {', '.join(differ) or 'settings'} than this run's"
        return f"changed since it was made ({why})"

    def recorded(self, stage: int) -> StageResult:
        """What the (complete) output of ``stage`` says about the run that made it."""
        cfg = read_model_config(self.output(stage))
        return StageResult(stage, self.output(stage), cfg["trained_steps"], cfg["wall_seconds"], cfg["best_dev_p1"],
                           True, cfg.get("note", ""))

    def require(self, stage: int, by: int) -> Path:
        """The complete output of ``stage``, which stage ``by`` reads; a clear error otherwise."""
        state = self.status(stage)
        if state != "complete":
            where = self.output(stage)
            problem = "does not exist" if state == "missing" else f"was {state}"
            fix = (f"run stage {stage} first (--stages {','.join(map(str, range(stage, by + 1)))}, or omit --stages "
                   f"to run them all)" if state == "missing" else
                   f"delete {self.stage_dir(stage)} and the later stage folders, or use another --out")
            raise TinyglotError(f"stage {by} needs the output of stage {stage}, but {where} {problem}", fix)
        return self.output(stage)

    def evaluate(self, model: MSModel, name: str) -> BitextResult | None:
        if not self.dev:
            return None
        enc = TorchEncoder(self.tokenizer, model.embed, self.student_cfg.max_len, self.device, name=name)
        return evaluate_bitext(enc, self.dev, batch_size=128, model_name=name, testset_name="dev")

    # ---------------------------------------------------------------- the run
    def run(self, stages: Sequence[int] = STAGES,
            on_step: Callable[[int, int], None] | None = None) -> list[StageResult]:
        """Run ``stages`` in order; ``on_step(stage, step)`` is called after every step."""
        results = []
        for stage in parse_stages(list(stages)):
            result = self.run_stage(stage, on_step)
            self.say(f"stage {stage} ({STAGE_NAMES[stage]}): "
                     + ("complete, skipped" if result.skipped else f"{result.steps} steps, {result.wall_seconds:.0f} s")
                     + (f"; {result.note}" if result.note else ""))
            results.append(result)
        return results

    def run_stage(self, stage: int, on_step: Callable[[int, int], None] | None = None) -> StageResult:
        """Skip ``stage`` if its output is complete, else train it (resuming its ``last.pt``)."""
        started = time.time()
        meta = self.stage_meta(stage)  # raises if an earlier stage's output is missing or stale
        state = self.status(stage, meta)
        if state == "complete":
            return self.recorded(stage)
        if state != "missing":
            raise TinyglotError(f"{self.output(stage)} was {state}",
                                f"delete {self.stage_dir(stage)} and the later stage folders, or use another --out")
        seed_everything(self.preset.stage_settings(stage).seed)
        model, loss_fn, kind, extra = self.build(stage)
        return self._train(stage, model, loss_fn, meta, kind, extra, on_step, started)

    def build(self, stage: int) -> tuple[MSModel, Callable[[MSModel, Batch], dict], str, dict]:
        """Stage ``stage``'s trained module (from the previous stage's output), its micro-batch loss,
        the kind of folder it writes and what that folder records."""
        return getattr(self, f"_stage{stage}")()

    def _train(self, stage: int, model: MSModel, loss_fn: Callable[[MSModel, Batch], dict], meta: dict, kind: str,
               extra: dict, on_step: Callable[[int, int], None] | None, started: float) -> StageResult:
        folder, tc = self.stage_dir(stage), self.preset.stage_settings(stage)
        resume = (folder / "last.pt").exists()
        self.ctx.barrier()  # (every process has looked before rank 0 writes)
        prepare_run_dir(folder, resume, f"stage-{stage} run", clean=self.ctx.is_main)
        self.ctx.barrier()
        model.to(self.device)
        name = "assistant" if stage == 1 else "student"
        loop = TrainLoop(folder, model, tc, self.device, meta, f"stage {stage} {name}", ctx=self.ctx,
                         progress=self.progress, global_loss=self.ctx.enabled)
        if resume:
            loop.resume()
        plan = self.plan(stage)
        maybe_compile(model.encoder, tc.compile)
        net, micro_loss = data_parallel(model, lambda m, i: loss_fn(cast(MSModel, m), self.batch(plan, i)), self.ctx,
                                        self.device)
        result = loop.run(micro_loss, lambda: self.evaluate(model, name), net=net,
                          on_step=(lambda step: on_step(stage, step)) if on_step else None)
        wall = round(time.time() - started, 1)
        if self.ctx.is_main:
            if (folder / "best.pt").exists():
                model.load_state_dict(load_checkpoint(folder / "best.pt", expect=meta)["model"])
            max_len = self.assistant_max_len if stage == 1 else self.student_cfg.max_len
            save_ms_model(model.cpu().eval(), self.tokenizer, self.output(stage), kind, max_len, {
                "stage": stage, "preset": self.preset_name, "stage_meta": meta, "trained_steps": result.steps,
                "train_seconds": round(result.seconds, 1), "wall_seconds": wall, "best_dev_p1": result.best_dev_p1,
                **extra,
            })
            self.store(stage).finish(MARKER, hash_json(meta), [self.output(stage)], time.time() - started, inputs=meta,
                                     info={"steps": result.steps, "best_dev_p1": result.best_dev_p1})
        self.ctx.barrier()
        return StageResult(stage, self.output(stage), result.steps, wall, result.best_dev_p1, False,
                           extra.get("note", ""))

    def frozen_assistant(self) -> MSModel:
        model = load_ms_model(self.output(1))[0].to(self.device).eval()
        return model.requires_grad_(False)

    # ---------------------------------------------------------------- stage 1
    def _stage1(self) -> tuple[MSModel, Callable, str, dict]:
        dim = int(self.t_emb.shape[1])
        model = load_assistant(self.assistant_path)[0]  # a new copy: the user's folder is only read
        hidden = model.hidden_size
        model = MSModel(model.encoder, {"teacher": (hidden, dim)} if hidden != dim else None)
        note = self.fit_teacher_head(model, 1)
        extra = {"teacher_dim": dim, "assistant_source": str(self.assistant_path), "note": note}
        return model, self.stage1_loss, KIND_ASSISTANT, extra

    def fit_teacher_head(self, model: MSModel, stage: int) -> str:
        """Start a new projection to the teacher's space at the least-squares map from the model's
        embeddings of s and t to h_T(s) on the stage's first ``train.head_fit_pairs`` pairs: a random
        projection would send large, arbitrary gradients into the model while it is still learning."""
        n = self.preset.stage_settings(stage).head_fit_pairs
        if "teacher" not in model.heads:
            return ""
        shape = "{} -> {}".format(*model.head_shapes()["teacher"])
        if n == 0:
            return f"projection {shape} to the teacher's space (random start)"
        plan, count = self.plan(stage), 0
        xs: list[torch.Tensor] = []
        ys: list[torch.Tensor] = []
        model.to(self.device).eval()
        with torch.no_grad():
            while count < n:
                b = self.batch(plan, len(xs) // 2, whole=True)  # every process fits the same projection
                t = self.teacher_rows(b.rows)
                xs += [model.embed(b.s_ids, b.s_mask), model.embed(b.t_ids, b.t_mask)]
                ys += [t, t]
                count += len(b)
        least_squares_head(cast(nn.Linear, model.heads["teacher"]), torch.cat(xs).float(), torch.cat(ys))
        return f"projection {shape} to the teacher's space (least-squares start on {count} pairs)"

    def stage1_loss(self, net: MSModel, b: Batch) -> dict:
        t = self.teacher_rows(b.rows)
        return _pair_parts(t, net.head("teacher", net.embed(b.s_ids, b.s_mask)),
                           t, net.head("teacher", net.embed(b.t_ids, b.t_mask)), b.pairs, self.share(b))

    # ---------------------------------------------------------------- stage 2
    def _stage2(self) -> tuple[MSModel, Callable, str, dict]:
        teacher_dim = int(read_model_config(self.output(1))["teacher_dim"])
        frozen = self.frozen_assistant()
        student, note = self.new_student(frozen, teacher_dim)

        def loss(net: MSModel, b: Batch) -> dict:
            with torch.no_grad():
                a_s, a_t = frozen.layer_input(b.s_ids), frozen.layer_input(b.t_ids)
            dim = a_s.shape[-1]  # data-parallel: normalised by the global batch's real positions
            den_s = self.ctx.all_reduce_sum(float(b.s_mask.sum()) * dim) if b.n_global else None
            den_t = self.ctx.all_reduce_sum(float(b.t_mask.sum()) * dim) if b.n_global else None
            mse_s = masked_mse(a_s, net.head("assistant", net.layer_input(b.s_ids)), b.s_mask, den_s)
            mse_t = masked_mse(a_t, net.head("assistant", net.layer_input(b.t_ids)), b.t_mask, den_t)
            return _parts(mse_s + mse_t, b.pairs, mse_s=mse_s, mse_t=mse_t)

        return student, loss, KIND_STUDENT, {"teacher_dim": teacher_dim, "note": note}

    def new_student(self, assistant: MSModel, teacher_dim: int) -> tuple[MSModel, str]:
        """The ALBERT student, its unit copied from the assistant's first layers when the shapes allow,
        its teacher projection copied from the assistant's when they have the same width."""
        cfg = self.student_cfg
        heads = {}
        if cfg.hidden_size != assistant.hidden_size:
            heads["assistant"] = (cfg.hidden_size, assistant.hidden_size)
        if cfg.hidden_size != teacher_dim:
            heads["teacher"] = (cfg.hidden_size, teacher_dim)
        student = build_student(cfg, heads)
        notes = []
        if cfg.init_from_assistant:
            reason = init_unit_from_assistant(student.encoder, assistant.encoder, cfg.unit_layers)
            if reason is None:
                notes.append(f"unit initialised from assistant layers 0-{cfg.unit_layers - 1}")
            else:
                log.warning("the student's unit starts from random weights: %s", reason)
                self.say(f"stage 2: the student's unit starts from random weights ({reason})")
                notes.append(f"unit random ({reason})")
        else:
            notes.append("unit random (student.init_from_assistant=false)")
        if "teacher" in student.heads and assistant.head_shapes().get("teacher") == student.head_shapes()["teacher"]:
            student.heads["teacher"].load_state_dict(assistant.heads["teacher"].state_dict())
            notes.append("teacher projection from stage 1")
        return student, "; ".join(notes)

    # ---------------------------------------------------------------- stage 3
    def _stage3(self) -> tuple[MSModel, Callable, str, dict]:
        student, _, cfg = load_ms_model(self.output(2))
        frozen = self.frozen_assistant()

        def loss(net: MSModel, b: Batch) -> dict:
            with torch.no_grad():
                a_s, a_t = frozen.embed(b.s_ids, b.s_mask), frozen.embed(b.t_ids, b.t_mask)
            return _pair_parts(a_s, net.head("assistant", net.embed(b.s_ids, b.s_mask)),
                               a_t, net.head("assistant", net.embed(b.t_ids, b.t_mask)), b.pairs, self.share(b))

        return student, loss, KIND_STUDENT, {"teacher_dim": cfg["teacher_dim"]}

    # ---------------------------------------------------------------- stage 4
    def _stage4(self) -> tuple[MSModel, Callable, str, dict]:
        student, _, cfg = load_ms_model(self.output(3))
        if int(self.t_emb.shape[1]) != cfg["teacher_dim"]:  # the teacher identity is in the meta; belt and braces
            raise TinyglotError("the teacher's dimension changed since stage 1", "run all stages with one teacher")
        copied = student.hidden_size == read_model_config(self.output(1))["dim"]  # stage 2 copied stage 1's P
        note = "" if copied else self.fit_teacher_head(student, 4)
        return student, self.stage4_loss, KIND_STUDENT, {"teacher_dim": cfg["teacher_dim"], "note": note,
                                                         "objective": self.preset.loss.stage4}

    def stage4_loss(self, net: MSModel, b: Batch) -> dict:
        lc: MSLossConfig = self.preset.loss
        t = self.teacher_rows(b.rows)
        s_s, s_t = net.embed(b.s_ids, b.s_mask), net.embed(b.t_ids, b.t_mask)
        kd = pair_mse(t, net.head("teacher", s_s), t, net.head("teacher", s_t))
        share = self.share(b)
        if share is not None:
            kd = kd * share
        cl = contrastive_loss(lc.stage4, t, s_s, s_t, lc.temperature, *self.gathered(b))
        return _parts(lc.contrastive_weight * cl + lc.kd_weight * kd, b.pairs, contrastive=cl, kd=kd)


def _parts(loss: torch.Tensor, pairs: int, **parts: torch.Tensor) -> dict:
    """A TrainLoop micro-loss result; ``parts`` are logged to metrics.jsonl."""
    shown = {"loss": float(loss.detach()), **{k: float(v.detach()) for k, v in parts.items()}}
    return {"loss": loss, "parts": shown, "pairs": pairs}


def _pair_parts(target_s: torch.Tensor, s: torch.Tensor, target_t: torch.Tensor, t: torch.Tensor, pairs: int,
                share: float | None = None) -> dict:
    """Stage 1 / 3's loss; ``share`` (data-parallel runs): this process's part of the global batch."""
    mse_s, mse_t = mse(target_s, s), mse(target_t, t)
    if share is not None:
        mse_s, mse_t = mse_s * share, mse_t * share
    return _parts(mse_s + mse_t, pairs, mse_s=mse_s, mse_t=mse_t)


__all__ = ["STAGES", "Batch", "MultiStageTrainer", "StageResult", "parse_stages", "trajectory"]
