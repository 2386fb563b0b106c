"""What every peer encoder shares (:class:`PeerEncoder`, the package import, identity and files), below
:mod:`tinyglot.encoders.peers` (the loaders by name) and :mod:`tinyglot.encoders.e5_onnx`."""

from __future__ import annotations

import importlib
import importlib.metadata
import importlib.util
import os
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np

from tinyglot.encoder import encode_texts, l2_normalize
from tinyglot.errors import TinyglotError
from tinyglot.io import folder_bytes
from tinyglot.peerinfo import PEERS, PeerInfo


def _import(info: PeerInfo):
    try:
        return importlib.import_module(info.module)
    except ImportError:
        raise TinyglotError(f"the peer {info.name!r} needs the package {info.package}",
                            f'pip install "tinyglot[peers]" (or pip install {info.package})') from None


class PeerEncoder:
    """``encode(sentences) -> (N, dim)`` L2-normalised float32 rows over a peer's own API."""

    def __init__(self, info: PeerInfo, embed: Callable[[list[str]], np.ndarray], files: Path) -> None:
        self.info, self._embed, self.files = info, embed, files
        self.name, self.dim = info.name, info.dim

    def _batch(self, texts: list[str]) -> np.ndarray:
        return l2_normalize(np.asarray(self._embed(texts), dtype=np.float32))

    def encode(self, sentences: Sequence[str], batch_size: int = 64) -> np.ndarray:
        return encode_texts(sentences, batch_size, self._batch)

    def identity(self) -> str:
        """Stable key of the model for embedding caches: the peer and its package version."""
        return peer_identity(self.info.name)

    def size_bytes(self) -> int:
        """Bytes of the package folder (weights, vocabulary, code) as installed."""
        return folder_bytes(self.files)


def peer_identity(name: str) -> str:
    """``peer:NAME:PACKAGE==VERSION[:VARIANT]``, without loading the model: what its embeddings and scores
    depend on."""
    package, variant = PEERS[name].package, PEERS[name].variant
    try:
        version = importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        version = "unknown"
    return f"peer:{name}:{package}=={version}" + (f":{variant}" if variant else "")


def peer_files(name: str) -> Path | None:
    """The installed package folder of a peer (its weights), or None when it is not installed."""
    spec = importlib.util.find_spec(PEERS[name].module) if name in PEERS else None
    return Path(spec.origin).parent if spec is not None and spec.origin else None


def all_cores() -> int:
    """The CPU cores this process may run on."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
