"""Distillation recipes: LEALLA, multi-stage, dimension reduction.

``run_distill`` (LEALLA), ``run_multistage`` (teacher -> assistant -> recurrent ALBERT student) and
``run_dimred`` are what ``tinyglot distill --recipe lealla|multistage|dimred`` calls.  Names are imported
lazily so that ``tinyglot --help`` does not pay for torch and transformers.
"""

from __future__ import annotations

from tinyglot.lazy import lazy_exports

_EXPORTS = {
    "run_distill": "run", "run_dimred": "run", "load_student": "student", "LeallaTrainer": "lealla",
    "run_multistage": "multistage", "MultiStageTrainer": "multistage", "MSModel": "multistage",
    "load_multistage": "multistage", "load_ms_model": "multistage", "parse_stages": "multistage",
    "MSPreset": "ms_config", "MSStudentConfig": "ms_config", "MSLossConfig": "ms_config",
    "MSTrainConfig": "ms_config", "StageConfig": "ms_config",
}
__all__ = sorted(_EXPORTS)

__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
