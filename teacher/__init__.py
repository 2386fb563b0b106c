"""EMS teacher: train a multilingual sentence encoder from parallel sentences alone.

``train_teacher(get_preset("ems-small"), "runs/teacher")`` trains; ``load_teacher("runs/teacher")``
returns an ``Encoder``.  The CLI is ``tinyglot teacher train|eval``.  Names are imported lazily so
that ``tinyglot --help`` does not pay for torch and transformers.
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "PRESETS": "config", "EMSModelConfig": "config", "EMSPreset": "config", "EMSTrainConfig": "config",
    "get_preset": "config", "load_model": "encoder", "load_teacher": "encoder", "EMSModel": "model",
    "TeacherTrainer": "train", "TrainResult": "train", "train_teacher": "train",
}
__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        return getattr(importlib.import_module(f"{__name__}.{_EXPORTS[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
