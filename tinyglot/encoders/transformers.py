"""Plain ``transformers`` model folders (config.json with ``model_type``), run offline with pooling.

:class:`HFModel` (AutoTokenizer + AutoModel, pooling, optional dense layers) is also the fallback of
the sentence-transformers adapter when that library is not installed.
"""

from __future__ import annotations

import inspect
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from tinyglot.encoder import encode_texts
from tinyglot.errors import TinyglotError

from .base import EncoderAdapter, offline_env, torch_device
from .onnx_backend import check_backend, load_onnx_transformer

POOLING_KEYS = (  # legacy boolean keys, in sentence-transformers' concatenation order
    ("pooling_mode_cls_token", "cls"), ("pooling_mode_max_tokens", "max"),
    ("pooling_mode_mean_tokens", "mean"), ("pooling_mode_mean_sqrt_len_tokens", "mean_sqrt_len_tokens"),
    ("pooling_mode_weightedmean_tokens", "weightedmean"), ("pooling_mode_lasttoken", "lasttoken"),
)
POOLING_MODES = tuple(m for _, m in POOLING_KEYS)


def pool(hidden: Any, mask: Any, mode: str) -> Any:
    """Token states (B, L, D) pooled to (B, D) over the positions where ``mask`` is 1."""
    import torch

    m = mask.unsqueeze(-1).to(hidden.dtype)
    if mode == "cls":  # first real token: index 0 with right padding, first unmasked with left padding
        first = mask.to(torch.int).argmax(dim=1)
        return hidden[torch.arange(hidden.shape[0], device=hidden.device), first]
    if mode == "max":
        return hidden.masked_fill(m == 0, float("-inf")).max(dim=1).values
    if mode in ("mean", "mean_sqrt_len_tokens"):
        total, count = (hidden * m).sum(dim=1), m.sum(dim=1).clamp(min=1e-9)
        return total / (count if mode == "mean" else count.sqrt())
    if mode == "weightedmean":
        w = torch.arange(1, hidden.shape[1] + 1, device=hidden.device, dtype=hidden.dtype)[None, :, None] * m
        return (hidden * w).sum(dim=1) / w.sum(dim=1).clamp(min=1e-9)
    if mode == "lasttoken":
        values, idx = mask.flip(1).max(1)
        idx = torch.where(values == 0, hidden.shape[1] - 1, idx)
        last = hidden.shape[1] - idx - 1
        return (hidden * m)[torch.arange(hidden.shape[0], device=hidden.device), last]
    raise ValueError(mode)


def check_pooling(modes: Sequence[str], where: str = "") -> tuple[str, ...]:
    bad = [m for m in modes if m not in POOLING_MODES]
    if bad:
        raise TinyglotError(f"{where}unknown pooling mode {bad[0]!r}", f"use one of {', '.join(POOLING_MODES)}")
    return tuple(modes)


class HFModel:
    """AutoTokenizer + AutoModel from a local folder (never downloading, no remote code), then
    pooling, optional dense layers and L2 normalisation of one batch of texts.

    ``backend="onnx"`` runs the transformer itself on onnxruntime instead (exported once, cached
    under ``onnx_key``; see :mod:`tinyglot.encoders.onnx_backend`); the rest stays the same code."""

    def __init__(self, model_dir: Path, device: str, pooling: Sequence[str], max_seq_length: int | None,
                 do_lower_case: bool = False, dense: Sequence[Any] = (), backend: str = "torch",
                 onnx_key: str = "") -> None:
        offline_env()
        import torch
        from transformers import AutoConfig, AutoModel, AutoTokenizer

        self.backend = check_backend(backend)
        self.device = torch_device(device if backend == "torch" else "cpu")
        try:
            self.tokenizer = AutoTokenizer.from_pretrained(str(model_dir), local_files_only=True)
            config = AutoConfig.from_pretrained(str(model_dir), local_files_only=True)
            model = AutoModel.from_pretrained(str(model_dir), local_files_only=True) if backend == "torch" else None
        except (OSError, ValueError, KeyError) as exc:
            raise TinyglotError(f"cannot load the transformers model in {model_dir} ({exc})",
                                "the folder needs config.json, the weights and the tokenizer files "
                                "(save_pretrained writes them); nothing is downloaded") from None
        if model is not None:
            if getattr(config, "is_encoder_decoder", False):
                model = model.get_encoder()
            self.model = model.eval().to(self.device)
            self._accepts = set(inspect.signature(self.model.forward).parameters)
        else:
            if getattr(config, "is_encoder_decoder", False):
                raise TinyglotError(f"{model_dir} is an encoder-decoder model: the onnx backend runs encoders only",
                                    "use the torch backend (drop ?backend=onnx)")
            self.onnx = load_onnx_transformer(model_dir, onnx_key or str(model_dir), torch.get_num_threads())
        limits = [getattr(config, "max_position_embeddings", None), self.tokenizer.model_max_length]
        limits = [int(x) for x in limits if isinstance(x, (int, float)) and 0 < x < 1_000_000]
        self.max_seq_length = int(max_seq_length) if max_seq_length else min(limits + [512])
        self.pooling = tuple(pooling)
        self.do_lower_case = do_lower_case
        self.dense = [d.to(self.device).eval() for d in dense]

    def embed(self, texts: list[str]) -> np.ndarray:
        import torch

        texts = [s.strip() for s in texts]
        if self.do_lower_case:
            texts = [s.lower() for s in texts]
        with torch.inference_mode():
            batch = self.tokenizer(texts, padding=True, truncation=True, max_length=self.max_seq_length,
                                   return_tensors="pt")
            if self.backend == "onnx":
                hidden = torch.from_numpy(self.onnx({k: v.numpy() for k, v in batch.items()}))
            else:
                feed = {k: v.to(self.device) for k, v in batch.items() if k in self._accepts}
                result = self.model(**feed)
                hidden = result.last_hidden_state if hasattr(result, "last_hidden_state") else result[0]
            mask = batch["attention_mask"].to(self.device)
            emb = torch.cat([pool(hidden, mask, mode) for mode in self.pooling], dim=-1)
            for layer in self.dense:
                emb = layer(emb)
            return torch.nn.functional.normalize(emb.float(), dim=-1).cpu().numpy()


class TransformersEncoder(EncoderAdapter):
    """A plain ``transformers`` model folder (config.json with ``model_type``), mean pooling.

    ``backend="onnx"`` runs the transformer on onnxruntime (exported once); the rows and the
    ``identity()`` are the same as with ``"torch"`` (float rounding apart), so both share a cache."""

    kind = "transformers"

    def __init__(self, path: str | Path, device: str = "cpu", pooling: str | Sequence[str] = "mean",
                 max_seq_length: int | None = None, backend: str = "torch") -> None:
        path = Path(path).resolve()
        modes = check_pooling((pooling,) if isinstance(pooling, str) else tuple(pooling))
        super().__init__(f"hf:{path.name}", str(path))
        self.backend = check_backend(backend)
        self.hf = HFModel(path, device, modes, max_seq_length, backend=backend,
                          onnx_key=self._onnx_key(backend))
        self.pooling, self.max_seq_length, self.do_lower_case = modes, self.hf.max_seq_length, False

    def _settings(self) -> str:
        return f"pool={'+'.join(self.pooling)};max_len={self.max_seq_length};lower={int(self.do_lower_case)}"

    def encode(self, sentences: Sequence[str], batch_size: int = 64) -> np.ndarray:
        return self._remember_dim(encode_texts(sentences, batch_size, self.hf.embed))
