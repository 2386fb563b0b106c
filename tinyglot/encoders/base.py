"""What every adapter of :mod:`tinyglot.encoders` shares: ``name``, a lazy ``dim`` and a cheap,
stable ``identity()`` to key embedding caches (kind, resolved location, a fingerprint of the files)."""

from __future__ import annotations

import hashlib
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from tinyglot.errors import TinyglotError
from tinyglot.integrity import sha256_file

_SKIP_NAMES = {"metrics.jsonl", "eval.json", ".gitattributes", ".DS_Store"}
_SKIP_DIRS = {"__pycache__", ".git", ".cache", ".ipynb_checkpoints", "teacher-cache"}


def offline_env() -> None:
    """Never reach a hub: these are read when huggingface_hub / transformers are first imported."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")


def fingerprint(root: Path, max_files: int = 20000) -> str:
    """Digest of a model folder's files by content; each file is hashed once per version (device,
    inode, size, mtime, ctime), so a teacher replaced in place never reuses a stale embedding cache."""
    h = hashlib.sha256()
    root = Path(root)
    files: list[Path] = []
    if root.is_file():
        files = [root]
        root = root.parent
    else:
        for dirpath, dirnames, filenames in os.walk(root):
            dirnames[:] = sorted(d for d in dirnames if d not in _SKIP_DIRS and not d.startswith("."))
            for fn in sorted(filenames):
                if fn in _SKIP_NAMES or fn.startswith(".") or fn.endswith((".lock", ".log", ".pyc")):
                    continue
                files.append(Path(dirpath) / fn)
                if len(files) > max_files:
                    raise TinyglotError(f"{root} holds more than {max_files} files: not a model folder?",
                                        "pass the folder that holds the model files themselves")
    for path in sorted(files):
        h.update(str(path.relative_to(root)).encode("utf-8", "surrogateescape") + b"\0")
        h.update(b"c" + bytes.fromhex(sha256_file(path)))  # by content (hashed once per file version)
    return h.hexdigest()[:20]


def torch_device(device: str | None) -> Any:
    from tinyglot.training import select_device

    return select_device(device or "cpu")


def to_array(raw: Any) -> np.ndarray:
    """A model's output (numpy, torch, TensorFlow, JAX, nested lists) as a numpy array."""
    if hasattr(raw, "detach"):  # torch
        raw = raw.detach().float().cpu().numpy()
    elif hasattr(raw, "numpy") and not isinstance(raw, np.ndarray):  # tensorflow, jax
        raw = raw.numpy()
    try:
        return np.asarray(raw)
    except (ValueError, TypeError) as exc:  # ragged lists
        raise TinyglotError(f"encoder output is not an array ({exc})",
                            "return a (sentences, dim) array of floats") from None


class EncoderAdapter:
    """Shared part of every adapter: ``name``, lazy ``dim``, ``identity()``."""

    kind = "encoder"

    def __init__(self, name: str, location: str, dim: int | None = None) -> None:
        self.name = name
        self._location = location
        self._dim = dim
        self._fingerprint: str | None = None
        self.identity_extra = ""  # set by wrappers (pypi:) that know more about the source

    def _compute_fingerprint(self) -> str:
        return fingerprint(Path(self._location))

    def _settings(self) -> str:
        return ""

    def _files_fingerprint(self) -> str:
        """The fingerprint of the model's files, computed once per adapter."""
        if self._fingerprint is None:
            self._fingerprint = self._compute_fingerprint()
        return self._fingerprint

    def _onnx_key(self, backend: str) -> str:
        """The key of the onnx backend's exported transformer (kind, location, files); empty for torch."""
        if backend != "onnx":
            return ""
        return f"{self.kind}|{self._location}|{self._files_fingerprint()}"

    def identity(self) -> str:
        """Stable key for an embedding cache: kind, resolved location, file fingerprint, settings."""
        parts = [self.kind, self._location, self._files_fingerprint()]
        if self._settings():
            parts.append(self._settings())
        if self.identity_extra:
            parts.append(self.identity_extra)
        return "|".join(parts)

    @property
    def dim(self) -> int:
        if self._dim is None:
            self._dim = int(self.encode(["dimension probe"]).shape[1])
        return self._dim

    def encode(self, sentences: Sequence[str], batch_size: int = 64) -> np.ndarray:  # pragma: no cover
        raise NotImplementedError

    def _remember_dim(self, out: np.ndarray) -> np.ndarray:
        self._dim = int(out.shape[1])
        return out

    def __repr__(self) -> str:
        return f"{type(self).__name__}(name={self.name!r}, location={self._location!r})"
