"""Dataclass configs with named presets, overridable from a TOML file or ``--set key=value``."""

from __future__ import annotations

import dataclasses
import math
import os
import tomllib
from pathlib import Path
from types import UnionType
from typing import TYPE_CHECKING, Any, TypeVar, Union, get_args, get_origin, get_type_hints
from collections.abc import Callable, Mapping

from tinyglot.errors import TinyglotError

if TYPE_CHECKING:
    from _typeshed import DataclassInstance

T = TypeVar("T", bound="DataclassInstance")  # a dataclass (configs and presets are dataclasses)


def to_dict(cfg: Any) -> dict[str, Any]:
    return dataclasses.asdict(cfg)


def _coerce(name: str, value: Any, hint: Any) -> Any:
    """Convert a string (from --set) or TOML value to the field's type; clear error if impossible."""
    args = get_args(hint) if get_origin(hint) in (Union, UnionType) else (hint,)
    optional = type(None) in args
    base = next((a for a in args if a is not type(None)), str)
    if value is None or (optional and isinstance(value, str) and value.strip().lower() in ("none", "null")):
        if optional:
            return None
        raise TinyglotError(f"{name} cannot be empty")
    if base is bool:
        if isinstance(value, bool):
            return value
        lowered = str(value).strip().lower()
        if lowered in ("1", "true", "yes", "on"):
            return True
        if lowered in ("0", "false", "no", "off"):
            return False
        raise TinyglotError(f"{name} must be true or false, got {value!r}")
    if base in (int, float):
        try:
            number = base(value)
        except (TypeError, ValueError):
            raise TinyglotError(f"{name} must be a{'n integer' if base is int else ' number'}, got {value!r}") from None
        if base is int and isinstance(value, float) and not value.is_integer():
            raise TinyglotError(f"{name} must be an integer, got {value!r}")
        if base is float and not math.isfinite(number):
            raise TinyglotError(f"{name} must be a finite number, got {value!r}", f"set {name} to a real value")
        return number
    if base is str:
        return str(value)
    return value


def replace(cfg: T, overrides: Mapping[str, Any], prefix: str = "") -> T:
    """A copy of dataclass ``cfg`` with ``overrides`` applied; nested dataclasses take dicts.

    Unknown keys are an error that lists the valid ones.
    """
    hints = get_type_hints(type(cfg))
    fields = {f.name for f in dataclasses.fields(cfg)}
    changes: dict[str, Any] = {}
    for key, value in overrides.items():
        if key not in fields:
            raise TinyglotError(
                f"unknown setting '{prefix}{key}'",
                f"valid settings here: {', '.join(sorted(fields))}",
            )
        current = getattr(cfg, key)
        if dataclasses.is_dataclass(current) and not isinstance(current, type):
            if not isinstance(value, Mapping):
                raise TinyglotError(f"{prefix}{key} is a section; give it as a table of settings")
            changes[key] = replace(current, value, prefix=f"{prefix}{key}.")
        else:
            changes[key] = _coerce(prefix + key, value, hints[key])
    return dataclasses.replace(cfg, **changes)


MAX_THREADS = 1024  # thread counts past this are a typo, and torch overflows on huge ones
MAX_BATCH = 1 << 20  # sentences or pairs in one batch: past this the arrays alone exhaust memory


def validate_at_most(cfg: Any, limits: Mapping[str, int], section: str) -> None:
    """Settings with an upper bound (thread counts, batch sizes): one clear error each."""
    for name, limit in limits.items():
        value = getattr(cfg, name)
        if isinstance(value, int) and value > limit:
            raise TinyglotError(f"{section}.{name} is {value:,}, more than the {limit:,} tinyglot allows",
                                f"set {section}.{name} to a smaller value")


def validate_positive(cfg: Any, names: tuple[str, ...], section: str) -> None:
    """Settings that must be >= 1 (step counts, sizes) or > 0 (rates): one clear error each."""
    for name in names:
        value = getattr(cfg, name)
        if value is None:
            continue
        if (isinstance(value, int) and value < 1) or (isinstance(value, float) and not value > 0):
            raise TinyglotError(f"{section}.{name} must be positive, got {value!r}",
                                f"set {section}.{name} to a positive value")


def parse_sets(items: list[str] | None) -> dict[str, Any]:
    """Turn ``["model.hidden_size=128", "train.lr=1e-3"]`` into a nested dict."""
    out: dict[str, Any] = {}
    for item in items or []:
        if "=" not in item:
            raise TinyglotError(f"--set {item!r} is not key=value", "write e.g. --set train.max_steps=500")
        key, value = item.split("=", 1)
        node = out
        parts = key.strip().split(".")
        if not all(part.strip() for part in parts):
            raise TinyglotError(f"--set {item!r}: {key.strip()!r} is not a setting name",
                                "write e.g. --set train.max_steps=500")
        for depth, part in enumerate(parts[:-1]):
            node = node.setdefault(part, {})
            if not isinstance(node, dict):
                raise TinyglotError(f"--set {item!r} conflicts with an earlier --set of {'.'.join(parts[:depth + 1])}: "
                                    "one names a section, the other a value", "keep one of the two")
        if isinstance(node.get(parts[-1]), dict):
            raise TinyglotError(f"--set {item!r} conflicts with an earlier --set inside {key.strip()}: "
                                "one names a section, the other a value", "keep one of the two")
        node[parts[-1]] = value
    return out


def read_toml(path: str | Path) -> dict[str, Any]:
    path = Path(path)
    if not path.is_file():
        raise TinyglotError(f"config file not found: {path}", "check the path given to --config")
    try:
        return tomllib.loads(path.read_text(encoding="utf-8"))
    except tomllib.TOMLDecodeError as exc:
        raise TinyglotError(f"{path} is not valid TOML: {exc}",
                            "fix the file (a run's OUT/config.toml is a complete example; docs/pipeline.md, "
                            "Settings)") from None


def from_dict(cls: type[T], data: Mapping[str, Any]) -> T:
    """Rebuild a (possibly nested) dataclass from :func:`to_dict` output."""
    return replace(cls(), data)


def named_preset(presets: Mapping[str, Callable[[], T]], name: str, overrides: Mapping[str, Any] | None,
                 what: str) -> T:
    """A fresh copy of the preset ``name`` with ``overrides`` applied; unknown names list the known ones."""
    if name not in presets:
        raise TinyglotError(f"unknown {what} preset {name!r}", f"choose one of: {', '.join(presets)}")
    preset = presets[name]()
    return replace(preset, overrides) if overrides else preset


def tinyglot_home() -> Path:
    """Where tinyglot caches what it trains or computes once (the default teacher, teacher embeddings):
    ``$TINYGLOT_HOME``, else ``~/.cache/tinyglot``."""
    return Path(os.environ.get("TINYGLOT_HOME", Path.home() / ".cache" / "tinyglot")).expanduser()
