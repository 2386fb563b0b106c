"""EMS teacher: train a multilingual sentence encoder from parallel sentences alone.

``train_teacher(get_preset("ems-small"), "runs/teacher")`` trains; ``load_teacher("runs/teacher")``
returns an ``Encoder``.  The CLI is ``tinyglot teacher train|eval``.  Names are imported lazily so
that ``tinyglot --help`` does not pay for torch and transformers.
"""

from __future__ import annotations

from tinyglot.lazy import lazy_exports

_EXPORTS = {
    "PRESETS": "config", "EMSModelConfig": "config", "EMSPreset": "config", "EMSTrainConfig": "config",
    "get_preset": "config", "load_model": "encoder", "load_teacher": "encoder", "EMSModel": "model",
    "TeacherTrainer": "train", "TrainResult": "train", "train_teacher": "train",
}
__all__ = sorted(_EXPORTS)

__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
