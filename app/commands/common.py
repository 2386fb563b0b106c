"""What several commands share: their common options and argument types (below every command module,
above nothing of the application layer)."""

from __future__ import annotations

import argparse
import math
from pathlib import Path

from tinyglot.console import make_console


def add_config_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--config", type=Path, help="TOML file with [model] and [train] tables overriding the preset")
    p.add_argument("--set", dest="sets", action="append", metavar="KEY=VALUE",
                   help="override one setting, e.g. --set train.max_steps=500 --set model.num_layers=2")


def config_overrides(args: argparse.Namespace) -> dict:
    from tinyglot.config import parse_sets, read_toml

    merged: dict = read_toml(args.config) if getattr(args, "config", None) else {}
    for section, values in parse_sets(getattr(args, "sets", None)).items():
        if isinstance(values, dict):
            merged.setdefault(section, {}).update(values)
        else:
            merged[section] = values
    return merged


def add_header_option(p: argparse.ArgumentParser) -> None:
    p.add_argument("--header", action=argparse.BooleanOptionalAction, default=None,
                   help="TSV files start with a row of column names (--no-header: they do not; "
                        "default: detect rows such as en<TAB>de or source<TAB>target)")


def print_and_save_result(result, json_path: Path | None) -> None:
    console = make_console()
    console.print(result.to_table())
    if json_path is not None:
        result.write_json(json_path)
        console.print(f"wrote {json_path}")


def int_list(text: str, limit: int = 10**6) -> list[int]:
    try:
        values = [int(x) for x in str(text).replace(" ", "").split(",") if x]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers, got {text!r}") from None
    if not values or min(values) < 1 or max(values) > limit:
        raise argparse.ArgumentTypeError(f"expected integers from 1 to {limit:,}, got {text!r}")
    return values


def bounded_ints(limit: int):
    """An argparse type: comma-separated integers from 1 to ``limit``."""
    def parse(text: str) -> list[int]:
        return int_list(text, limit)

    parse.__name__ = "integer list"
    return parse


def bounded_number(cast: type[int] | type[float], low: float, high: float, what: str):
    """An argparse type: a finite ``cast`` number from ``low`` to ``high`` (``what`` words the error)."""
    def parse(text: str):
        try:
            value = cast(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected {what}, got {text!r}") from None
        if not (math.isfinite(value) and low <= value <= high):
            raise argparse.ArgumentTypeError(f"expected {what} from {low:,} to {high:,}, got {text!r}")
        return value

    parse.__name__ = what
    return parse
