"""tinyglot model folders (teacher runs, students, export bundles), opened by their ``loader``."""

from __future__ import annotations

import inspect
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from tinyglot.encoder import check_sentences, l2_normalize
from tinyglot.errors import TinyglotError

from .base import EncoderAdapter


class TinyglotModelEncoder(EncoderAdapter):
    """A tinyglot model folder (teacher run, student, export bundle) opened by its ``loader``."""

    kind = "tinyglot"

    def __init__(self, path: str | Path, device: str = "cpu", **kwargs: Any) -> None:
        from tinyglot.models import loader_function, open_model_folder, read_model_config

        path = Path(path).resolve()
        cfg = read_model_config(path)
        loader = cfg.get("loader")
        if isinstance(loader, str) and ":" in loader and device is not None:
            try:
                params = inspect.signature(loader_function(loader, path)).parameters  # registered loaders only
                if "device" in params or any(p.kind is p.VAR_KEYWORD for p in params.values()):
                    kwargs.setdefault("device", device)
            except (TinyglotError, TypeError, ValueError):
                pass  # open_model_folder reports an unusable loader clearly
        self.inner = open_model_folder(path, **kwargs)
        super().__init__(getattr(self.inner, "name", "") or f"tinyglot:{path.name}", str(path))

    def encode(self, sentences: Sequence[str], batch_size: int = 64) -> np.ndarray:
        sentences = check_sentences(sentences)
        return self._remember_dim(l2_normalize(self.inner.encode(sentences, batch_size=batch_size)))
