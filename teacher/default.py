"""The default teacher: an ems-small teacher trained once on the embedded corpus and cached in
``$TINYGLOT_HOME/teachers`` (shared by ``tinyglot distill`` and ``tinyglot run``)."""

from __future__ import annotations

import logging

from collections.abc import Callable
from pathlib import Path

from tinyglot.config import tinyglot_home
from tinyglot.errors import TinyglotError
from tinyglot.models import read_model_config

log = logging.getLogger(__name__)

DEFAULT_TEACHER_PRESET = "ems-small"


def default_teacher_dir() -> Path:
    return tinyglot_home() / "teachers" / f"{DEFAULT_TEACHER_PRESET}-embedded"


def teacher_is_complete(path: Path) -> bool:
    """A finished teacher run: config says it trained all its steps and a checkpoint exists."""
    try:
        cfg = read_model_config(path)
    except TinyglotError:
        return False
    done = cfg.get("trained_steps") is not None and cfg.get("trained_steps") == cfg.get("train", {}).get("max_steps")
    return done and ((path / "best.pt").exists() or (path / "last.pt").exists())


def ensure_default_teacher(say: Callable[[str], None] = log.info, progress: bool = True,
                           preset: str = DEFAULT_TEACHER_PRESET) -> Path:
    """The cached default teacher, trained on the embedded corpus first if there is none."""
    from .config import get_preset
    from .train import train_teacher

    path = default_teacher_dir()
    if teacher_is_complete(path):
        say(f"teacher: the cached default teacher {path}")
        return path
    resume = (path / "last.pt").exists()
    say(f"teacher: no cached default teacher at {path}; {'resuming' if resume else 'training'} "
        f"{preset} on the embedded corpus first (once: later runs reuse it; it prints its expected time once timed). "
        f"Pass --teacher to use another one.")
    train_teacher(get_preset(preset), path, preset_name=preset, resume=resume, progress=progress)
    return path


__all__ = ["DEFAULT_TEACHER_PRESET", "default_teacher_dir", "ensure_default_teacher", "teacher_is_complete"]
