"""Multi-stage distillation ("Multi-stage Distillation Framework for Cross-Lingual Semantic Similarity
Matching", Ding et al., Findings of NAACL 2022, section 3).

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
``metrics.jsonl``, dev P@1) whose output folder (``stage1/assistant``, ``stageN/student``) is recorded
by a :class:`~tinyglot.stagecache.StageStore` marker in the stage folder (``stageN/stages/stage.json``:
the hash of the settings and inputs it was made from, and of its files); a complete stage is skipped,
a stale or altered one is refused.

The package: :mod:`.model` (the encoder with heads, the ALBERT student), :mod:`.losses`, :mod:`.io`
(stage folders), :mod:`.trainer` (the stages) and :mod:`.report` (``run_multistage`` and its report).
"""

from __future__ import annotations

from .io import (ASSISTANT_KINDS, HEADS_FILE, KIND_ASSISTANT, KIND_STUDENT, LOADER, load_assistant, load_ms_model,
                 load_multistage, resave_ms_model, save_ms_model, weights_sha)
from .losses import contrastive_loss, hard_label_loss, masked_mse, mcl_loss, mse, pair_mse, soft_ce_loss
from .model import MSModel, build_student, encoder_config, init_unit_from_assistant, unit_layers, unit_mismatch
from .report import DEFAULT_TEACHER, evaluate_models, multistage_trainer, run_multistage, write_ms_report
from .trainer import STAGES, Batch, MultiStageTrainer, StageResult, parse_stages, trajectory

__all__ = [
    "ASSISTANT_KINDS", "DEFAULT_TEACHER", "HEADS_FILE", "KIND_ASSISTANT", "KIND_STUDENT", "LOADER", "STAGES", "Batch",
    "MSModel", "MultiStageTrainer", "StageResult", "build_student", "contrastive_loss", "encoder_config",
    "evaluate_models", "hard_label_loss", "init_unit_from_assistant", "load_assistant", "load_ms_model",
    "load_multistage", "masked_mse", "mcl_loss", "mse", "multistage_trainer", "pair_mse", "parse_stages",
    "resave_ms_model", "run_multistage", "save_ms_model", "soft_ce_loss", "trajectory", "unit_layers", "unit_mismatch",
    "weights_sha", "write_ms_report",
]
