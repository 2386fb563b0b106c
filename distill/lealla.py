"""LEALLA distillation: a thin-deep student learns from parallel pairs (AMS) and from a teacher's
embeddings (feature distillation) and similarity matrices (logit distillation)."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import cast
from collections.abc import Callable

import numpy as np
import torch

from tinyglot.batching import (PIVOT, BatchPlan, TokenizedPairs, check_tokenizer, split_train_dev,
                               train_vocabulary)
from tinyglot.tokcache import tokenized_corpus
from tinyglot.config import to_dict
from tinyglot.data import Pair
from tinyglot.data.general import vocabulary_words
from tinyglot.distributed import DistContext, data_parallel, init_distributed
from tinyglot.errors import TinyglotError
from tinyglot.evaluation import BitextResult, evaluate_bitext
from tinyglot.models import TorchEncoder
from tinyglot.tokenizer import Tokenizer
from tinyglot.trainloop import TrainLoop
from tinyglot.training import (activation_bytes, free_device_bytes, load_checkpoint, maybe_compile,
                               prepare_run_dir, run_tokenizer, seed_everything, to_device, training_device,
                               use_checkpointing)

from .cache import shared_teacher_embeddings
from .config import DistillPreset
from .losses import ams_loss, feature_distillation, logit_distillation
from .student import Student, init_from_teacher_pca, least_squares_head, save_student, teacher_input_embeddings
from .teacher_init import (VocabularyEmbeddings, check_teacher_layers, describe, e5_layer_weights, e5_vocabulary,
                           init_from_vocabulary, vocabulary_embeddings)

log = logging.getLogger("tinyglot.distill")

# batches (of train.batch_size pairs, 2 sentences each) for the least-squares start of f; 16 x 64
# pairs give 2,048 rows for lealla-small's 129 unknowns per output
FD_FIT_BATCHES = 16


def check_dimensions(student_dim: int, teacher_dim: int) -> None:
    if student_dim > teacher_dim:
        raise TinyglotError(
            f"the student dimension {student_dim} is larger than the teacher's {teacher_dim}",
            "distillation compresses: pick a smaller student (e.g. lealla-small, 128-d)",
        )


@dataclass
class DistillResult:
    out_dir: Path
    student_dir: Path
    steps: int
    seconds: float
    best_dev_p1: float | None


def resumed_init(checkpoint: Path) -> tuple[str | bool | None, str | None]:
    """The init a run recorded in its checkpoint's meta (``init``; a bool in runs from before
    student.init=teacher) and the student.init setting it started with."""
    try:  # memory-mapped: only the meta is read
        meta = torch.load(checkpoint, map_location="cpu", weights_only=True, mmap=True).get("meta") or {}
    except Exception:  # noqa: BLE001 - the loop's own resume names what is wrong with the file
        return None, None
    saved = (meta.get("student") or {}).get("init")
    return meta.get("init"), saved if isinstance(saved, str) else None


class LeallaTrainer:
    """A LEALLA run in ``out_dir``: ``last.pt``/``best.pt``/``metrics.jsonl`` while training,
    ``student/`` (a loadable student folder) at the end.

    Under torchrun the run is data-parallel like the teacher's: every process takes a slice of the
    same global batch (``train.batch_size`` pairs per process), the AMS negatives and the logit
    distillation's columns are gathered across processes, rank 0 runs the teacher pass (the others
    wait and read its cache) and only rank 0 writes.
    """

    def __init__(self, preset: DistillPreset, out_dir: str | Path, pairs: list[Pair], teacher,
                 teacher_identity: str, tokenizer: Tokenizer | None = None, preset_name: str = "custom",
                 cache_dir: str | Path | None = None, vocab_size: int = 8000, resume: bool = False,
                 progress: bool = True) -> None:
        self.preset, self.preset_name, self.out = preset, preset_name, Path(out_dir)
        self.resume, self.progress, self.teacher = resume, progress, teacher
        tc = preset.train
        self.device = training_device(tc)
        self.ctx: DistContext = init_distributed(self.device)
        self.out_of_memory = False  # set by the first step that ran out of GPU memory
        if preset.student.init == "teacher-layers" and not resume:  # before the (long) teacher pass
            check_teacher_layers(preset.student, teacher_identity)
        if isinstance(getattr(teacher, "dim", None), int):
            check_dimensions(preset.student.embedding_dim, teacher.dim)
        prepare_run_dir(self.out, resume, "distillation run", clean=self.ctx.is_main)
        self.ctx.barrier()
        train_g, self.dev = split_train_dev(pairs, tc.dev_fraction, tc.dev_pairs_per_lang, tc.seed)
        if self.ctx.is_main:
            run_tokenizer(self.out, tokenizer, resume,
                          lambda: e5_vocabulary(train_g, vocab_size, seed=tc.seed)
                          if preset.student.init == "teacher-layers" else
                          train_vocabulary(train_g, vocab_size, tc.vocab_sentences, seed=tc.seed,
                                           char_share=tc.vocab_char_share, general_share=tc.vocab_general_share,
                                           words=vocabulary_words(tc.vocab_words, train_g),
                                           word_sentences=tc.vocab_word_sentences,
                                           cache_dir=cache_dir))
        self.ctx.barrier()
        tokenizer = Tokenizer.load(self.out / "tokenizer.model")
        check_tokenizer(tokenizer, [*train_g, PIVOT])
        self.tokenizer = tokenizer
        preset.student.vocab_size = tokenizer.vocab_size
        self.data: TokenizedPairs = tokenized_corpus(train_g, tokenizer, preset.student.max_len, tc, self.device,
                                                     self.ctx)
        self.plan = BatchPlan.from_settings(self.data, tc, self.ctx.world)
        general = self.plan.general_fraction()
        if general > 0:
            log.info("general-domain rows: %.1f %% of the draws (train.general_share=%s)", 100 * general,
                     tc.general_share)
        # teacher embeddings of every distinct training sentence (loss.fd_target=english: of every
        # distinct English sentence, the target of both sides), cached on disk
        index: dict[str, int] = {}
        english = preset.loss.fd_target == "english"
        self.en_row = [np.array([index.setdefault(p.en, len(index)) for p in ps]) for ps in self.data.pairs]
        self.x_row = self.en_row if english else \
            [np.array([index.setdefault(p.x, len(index)) for p in ps]) for ps in self.data.pairs]
        self.identity = teacher_identity
        self.t_emb = shared_teacher_embeddings(self.ctx, teacher, list(index), cache_dir or self.out / "teacher-cache",
                                               identity=teacher_identity, batch_size=tc.teacher_batch_size,
                                               progress=progress)
        self.teacher_dim = int(self.t_emb.shape[1])
        check_dimensions(preset.student.embedding_dim, self.teacher_dim)
        # how the student starts (student.init): "random", "teacher-tables" (init_tables: the teacher's
        # own embedding tables) or "teacher-vocabulary" (init_vocab: its embeddings of the vocabulary)
        self.init_tables: dict[str, torch.Tensor] | None = None
        self.init_vocab: VocabularyEmbeddings | None = None
        self.init_layers: tuple[dict[str, torch.Tensor], dict] | None = None
        self.init_method = self._plan_init(teacher, cache_dir or self.out / "teacher-cache")

    def _plan_init(self, teacher, cache_dir: str | Path):
        """The init method of student.init for this teacher, with what it needs computed (the teacher
        pass over the vocabulary happens here, before the seed of the training is set).  A resumed
        run keeps the init its checkpoint records and computes nothing."""
        sc, mode = self.preset.student, self.preset.student.init
        if self.resume:
            method, saved = resumed_init(self.out / "last.pt")
            if saved is not None and saved != mode:
                log.info("student.init=%s is not applied: the run resumes from last.pt (started with %s)", mode, saved)
                sc.init = saved  # (the run's meta is the checkpoint's)
            return method
        if mode == "random":
            log.info("student init: random")
            return "random"
        if mode == "teacher-layers":
            self.init_layers = e5_layer_weights(self.tokenizer, sc)
            return "teacher-layers"
        self.init_tables = teacher_input_embeddings(teacher, self.tokenizer)
        if self.init_tables is not None:
            return "teacher-tables"
        if mode == "teacher-pca":
            raise TinyglotError("student.init=teacher-pca needs a tinyglot teacher whose vocabulary is the "
                                "student's", "use --init teacher (the teacher embeds the student's vocabulary) "
                                "or --init random with this teacher")
        if mode == "auto":  # (older configs: the teacher's tables or random)
            log.info("student init: random (student.init=auto and the teacher does not share the student's "
                     "vocabulary; --init teacher embeds the vocabulary with it)")
            return "random"
        self.init_vocab = vocabulary_embeddings(teacher, self.tokenizer, cache_dir, self.identity, self.ctx,
                                                self.preset.train.teacher_batch_size, self.progress)
        return "teacher-vocabulary"

    def initial_model(self) -> tuple[Student, str]:
        """The student at step 0 (seeded by train.seed) and a description of its initialisation; a
        resumed run's student is left random here (its weights come from last.pt)."""
        seed_everything(self.preset.train.seed)
        model = Student(self.preset.student, self.teacher_dim if self.preset.loss.fd else None)
        if self.resume:
            method = self.init_method
            if isinstance(method, bool):  # a run from before student.init=teacher
                method = "teacher-tables" if method else "random"
            return model, f"{method} (at the start of the run; resumed from last.pt)"
        info = None
        if self.init_tables is not None:
            info = {"variance_kept": init_from_teacher_pca(model, self.init_tables)}
        elif self.init_vocab is not None:
            info = init_from_vocabulary(model, self.init_vocab)
        elif self.init_layers is not None:
            weights, info = self.init_layers
            with torch.no_grad():
                missing, unexpected = model.encoder.load_state_dict(weights, strict=False)
            assert not unexpected and not [k for k in missing if not k.endswith("position_ids")], (missing, unexpected)
        return model, describe(self.init_method, info)

    def meta(self) -> dict:
        # batch_size is the global batch (per process x processes): a run resumes on another
        # process count only when the batches stay the same
        return {"kind": "lealla-run", "student": to_dict(self.preset.student), "init": self.init_method,
                "loss": to_dict(self.preset.loss),
                "tokenizer": self.tokenizer.sha256, "data": self.data.fingerprint, "teacher": self.identity,
                "seed": self.preset.train.seed, "batch_size": self.preset.train.batch_size * self.ctx.world}

    def encoder(self, model: Student) -> TorchEncoder:
        return TorchEncoder(self.tokenizer, model.embed, self.preset.student.max_len, self.device, name="student")

    def evaluate(self, model: Student) -> BitextResult | None:
        if not self.dev:
            return None
        return evaluate_bitext(self.encoder(model), self.dev, batch_size=128, model_name="student",
                               testset_name="dev")

    def _rows(self, index: int, whole: bool = False) -> tuple[np.ndarray, int]:
        """This process's rows of the global batch ``index`` (all of them with ``whole``) and the
        global batch's size."""
        if whole:  # (not trimmed to a multiple of the process count: the rows one process would take)
            rows = self.plan.batch(index)
            return rows, len(rows)
        rows = self.plan.batch(index, self.ctx.world)
        return rows[self.ctx.rank :: self.ctx.world], len(rows)

    def checkpointing(self, tokens: int, seq_len: int) -> bool:
        """Gradient checkpointing for a batch of ``tokens`` tokens (both sides, padded) of length
        ``seq_len``: by ``train.checkpointing`` (see :func:`tinyglot.training.use_checkpointing`)."""
        tc, sc = self.preset.train, self.preset.student
        need = free = None
        if self.device.type == "cuda" and tc.checkpointing == "auto" and not self.out_of_memory:
            need = activation_bytes(tokens, sc.hidden_size, sc.num_layers, sc.ffn_size, sc.num_heads, seq_len)
            free = free_device_bytes(self.device)
        return use_checkpointing(tc.checkpointing, self.device.type, tokens, tc.checkpoint_above_tokens,
                                 need, free, self.out_of_memory)

    def _on_out_of_memory(self) -> bool:
        """The first out-of-memory step: checkpoint from now on (``auto``) and retry it."""
        if self.preset.train.checkpointing != "auto" or self.out_of_memory:
            return False
        self.out_of_memory = True
        return True

    def _batch(self, model: Student, index: int, whole: bool = False) -> tuple[torch.Tensor, ...]:
        """Student embeddings (x, en) and teacher embeddings (x, en) of this process's rows of the plan's
        batch ``index`` (all rows with ``whole``)."""
        return self._batch_and_size(model, index, whole)[:4]

    def _batch_and_size(self, model: Student, index: int, whole: bool = False) -> tuple:
        """:meth:`_batch`'s four tensors and the size of the global batch."""
        rows, n_global = self._rows(index, whole)
        xb, eb, _ = self.plan.tensors(rows, self.tokenizer, [0] * len(self.data.langs), self.preset.student.max_len)
        t = lambda a: to_device(a, self.device)  # noqa: E731
        model.set_checkpointing(self.checkpointing(xb.ids.size + eb.ids.size, max(xb.ids.shape[1], eb.ids.shape[1])))
        xs, ys = model.embed(t(xb.ids), t(xb.mask)), model.embed(t(eb.ids), t(eb.mask))
        xr = np.array([self.x_row[li][pi] for li, pi in rows])
        er = np.array([self.en_row[li][pi] for li, pi in rows])
        t_x, t_e = np.asarray(self.t_emb[xr], dtype=np.float32), np.asarray(self.t_emb[er], dtype=np.float32)
        return xs, ys, t(t_x), t(t_e), n_global

    def fit_fd_head(self, model: Student, batches: int = FD_FIT_BATCHES) -> str:
        """Start f at the least-squares map from the (initial) student's embeddings of both sides of
        the first ``batches`` training batches to the teacher's embeddings of the same sentences (every
        process fits on the whole global batches, so all start from the same f)."""
        src, dst = [], []
        model.eval()
        with torch.no_grad():
            for index in range(batches):
                xs, ys, xt, yt = self._batch(model, index, whole=True)
                src += [xs.float(), ys.float()]
                dst += [xt, yt]
        model.train()
        if model.fd_proj is None:  # the student's dimension is the teacher's: nothing to fit
            return "identity (no projection)"
        least_squares_head(model.fd_proj, torch.cat(src), torch.cat(dst))
        return f"least-squares start on {sum(len(a) for a in src) // 2} pairs"

    def _micro_loss(self, model: Student, index: int) -> dict:
        lc = self.preset.loss
        xs, ys, xt, yt, n_global = self._batch_and_size(model, index)
        # data-parallel: this process's share of the global batch's loss (see distill.losses)
        gather, n = (self.ctx.gather, n_global) if self.ctx.enabled else (None, None)
        zero = xs.new_zeros(())
        ams = ams_loss(xs, ys, lc.margin, lc.scale, gather, n) if lc.ams else zero
        proj = model.fd_proj if model.fd_proj is not None else torch.nn.Identity()
        fd = feature_distillation(xt, yt, proj(xs), proj(ys), n) if lc.fd else zero
        ld = logit_distillation(xt, yt, xs, ys, lc.ld_temperature, gather, n) if lc.ld else zero
        loss = lc.alpha * ams + lc.beta * fd + lc.gamma * ld
        parts = {k: float(v.detach()) for k, v in (("loss", loss), ("ams", ams), ("fd", fd), ("ld", ld))}
        return {"loss": loss, "parts": parts, "pairs": n_global}

    def train(self, on_step: Callable[[int], None] | None = None) -> DistillResult:
        tc = self.preset.train
        model, init = self.initial_model()
        log.info("student init: %s", init)
        model.to(self.device)
        if tc.sparse_embeddings:
            if self.ctx.enabled or tc.compile:
                log.info("train.sparse_embeddings: off under torchrun and with train.compile (a dense table)")
            else:
                model.set_sparse_embeddings(True)
        fd_init = "least-squares" if model.fd_proj is not None else "none (loss.fd off)"
        if fd_init == "least-squares":
            resuming = self.resume and (self.out / "last.pt").exists()  # the checkpoint holds f
            fd_init = "least-squares start (restored from last.pt)" if resuming else self.fit_fd_head(model)
            log.info("feature-distillation head f: %s", fd_init)
        loop = TrainLoop(self.out, model, tc, self.device, self.meta(), f"distill {self.preset_name}",
                         ctx=self.ctx, progress=self.progress, global_loss=self.ctx.enabled)
        if self.resume:
            loop.resume()
        maybe_compile(model.encoder, tc.compile)
        net, micro_loss = data_parallel(model, lambda m, i: self._micro_loss(cast(Student, m), i), self.ctx,
                                        self.device)
        result = loop.run(micro_loss, lambda: self.evaluate(model), net=net, on_step=on_step,
                          on_out_of_memory=self._on_out_of_memory)
        student_dir = self.out / "student"
        if self.ctx.is_main:
            best = self.out / "best.pt"
            if best.exists():
                model.load_state_dict(load_checkpoint(best, expect=self.meta())["model"])
            model.eval()
            save_student(model.cpu(), self.tokenizer, student_dir, {
                "preset": self.preset_name, "teacher": self.identity, "teacher_dim": self.teacher_dim,
                "loss": to_dict(self.preset.loss), "train": to_dict(tc), "trained_steps": result.steps,
                "precision": result.precision, "best_dev_p1": result.best_dev_p1, "init": init, "fd_head_init": fd_init,
            })
        self.ctx.barrier()
        return DistillResult(self.out, student_dir, result.steps, result.seconds, result.best_dev_p1)
