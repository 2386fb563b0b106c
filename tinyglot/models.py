"""Torch building blocks shared by every stage, and ``load_encoder`` for any model folder.

A model folder (a teacher run, a student, an exported bundle) holds a ``config.json`` whose
``"loader"`` names the function that opens it (``"module:function"``).  The core never imports a
stage: it follows that pointer, so a stage registers itself simply by writing its folders so.
"""

from __future__ import annotations

import importlib
import json
from pathlib import Path
from typing import Callable, Sequence

import numpy as np

from tinyglot.encoder import Encoder, encode_by_length
from tinyglot.errors import TinyglotError


def bert_config(vocab_size: int, hidden: int, layers: int, heads: int, ffn: int, max_len: int,
                dropout: float):
    """A ``transformers`` BertConfig for tinyglot's encoders (no token types, pad id 0)."""
    from transformers import BertConfig

    return BertConfig(vocab_size=vocab_size, hidden_size=hidden, num_hidden_layers=layers,
                      num_attention_heads=heads, intermediate_size=ffn, hidden_dropout_prob=dropout,
                      attention_probs_dropout_prob=dropout, max_position_embeddings=max_len,
                      type_vocab_size=1, pad_token_id=0)


def mean_pool(hidden, mask):
    """Mean of ``hidden`` (B, L, D) over positions where ``mask`` (B, L) is 1."""
    m = mask.unsqueeze(-1).to(hidden.dtype)
    return (hidden * m).sum(dim=1) / m.sum(dim=1).clamp(min=1.0)


class TorchEncoder:
    """``Encoder`` over a tokenizer and a torch module mapping (ids, mask) -> (B, D) embeddings.

    Sentences are sorted by length before batching (less padding), embeddings are L2-normalised
    and returned in the input order as float32.
    """

    def __init__(self, tokenizer, embed: Callable, max_len: int, device=None, name: str = "") -> None:
        import torch

        self.tokenizer = tokenizer
        self._embed = embed
        self.max_len = max_len
        self.device = device or torch.device("cpu")
        self.name = name

    @property
    def module(self):
        """The torch module whose bound ``embed`` method this encoder calls (None for a plain function)."""
        return getattr(self._embed, "__self__", None)

    def encode(self, sentences: Sequence[str], batch_size: int = 64) -> np.ndarray:
        import torch

        if isinstance(sentences, str):
            raise TinyglotError("encode() takes a list of sentences, got one string", "wrap it: [sentence]")
        ids = self.tokenizer.encode_ids(list(sentences), self.max_len)

        def run(rows: np.ndarray) -> np.ndarray:
            batch = self.tokenizer.pad([ids[i] for i in rows], self.max_len)
            emb = self._embed(torch.from_numpy(batch.ids).to(self.device), torch.from_numpy(batch.mask).to(self.device))
            return torch.nn.functional.normalize(emb.float(), dim=-1).cpu().numpy()

        with torch.inference_mode():
            return encode_by_length([len(x) for x in ids], batch_size, run)


def read_model_config(path: str | Path) -> dict:
    path = Path(path)
    cfg_path = path / "config.json" if path.is_dir() else path
    if not cfg_path.is_file():
        raise TinyglotError(
            f"no model found at {path} (expected a folder with config.json)",
            "pass a folder written by tinyglot (a teacher run, a student or an export bundle)",
        )
    try:
        return json.loads(cfg_path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise TinyglotError(f"{cfg_path} is not valid JSON ({exc})", "re-create the model folder") from None


def load_folder_tokenizer(path: str | Path, name: str, expected_sha256: str | None, owner: str, made: str,
                          error: type[TinyglotError] = TinyglotError):
    """The tokenizer file ``name`` of a model folder, checked against the sha256 its config recorded
    (None: not recorded); ``owner``/``made`` word the error ("student", "trained")."""
    from tinyglot.tokenizer import Tokenizer

    tokenizer = Tokenizer.load(Path(path) / name)
    if expected_sha256 not in (None, tokenizer.sha256):
        raise error(f"{path}/tokenizer.model does not match the {owner}'s config",
                    f"copy the tokenizer.model the {owner} was {made} with")
    return tokenizer


def load_encoder(path: str | Path, **kwargs) -> Encoder:
    """Open a tinyglot model folder as an ``Encoder`` by following its config's ``loader``."""
    cfg = read_model_config(path)
    loader = cfg.get("loader")
    if not isinstance(loader, str) or ":" not in loader:
        raise TinyglotError(
            f"{path}/config.json names no loader",
            "this folder was not written by tinyglot; pass a teacher run, student or bundle folder",
        )
    module_name, func_name = loader.split(":", 1)
    try:
        func = getattr(importlib.import_module(module_name), func_name)
    except (ImportError, AttributeError) as exc:
        raise TinyglotError(
            f"cannot import the loader {loader!r} of {path} ({exc})",
            "install the extra that provides it, e.g. pip install 'tinyglot[export]'",
        ) from None
    return func(Path(path), **kwargs)
