"""sentence-transformers folders (``modules.json``), run with the ``sentence_transformers`` library
when it is installed (the ``peers`` extra), else with ``transformers`` and a small reader of
``modules.json`` (Transformer, Pooling, Dense, Normalize).

Model folders come from other people, so ``modules.json`` is checked before either path loads it:
only sentence-transformers' own module types, files inside the folder, torch activations, and no
``trust_remote_code``; nothing is downloaded.
"""

from __future__ import annotations

import importlib
import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from tinyglot.encoder import encode_texts
from tinyglot.errors import TinyglotError

from .base import EncoderAdapter, offline_env, torch_device
from .onnx_backend import check_backend
from .transformers import POOLING_KEYS, HFModel, check_pooling

SUPPORTED = ("Transformer", "Pooling", "Dense", "Normalize", "Dropout")


def read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as exc:
        raise TinyglotError(f"cannot read {path} ({exc})", "re-create the model folder") from None


def _pooling_modes(cfg: dict, where: Path) -> tuple[str, ...]:
    if "pooling_mode" in cfg:  # sentence-transformers >= 5
        modes = cfg["pooling_mode"]
        modes = (modes,) if isinstance(modes, str) else tuple(modes)
    else:
        modes = tuple(mode for key, mode in POOLING_KEYS if cfg.get(key))
    if not modes:
        raise TinyglotError(f"{where} enables no pooling mode", "set e.g. pooling_mode_mean_tokens: true")
    return check_pooling(modes, f"{where}: ")


def _dense_activation(folder: Path) -> str:
    cfg = read_json(folder / "config.json")
    act_name = cfg.get("activation_function", "torch.nn.modules.activation.Tanh") or "torch.nn.Identity"
    if not isinstance(act_name, str) or not act_name.startswith("torch."):
        raise TinyglotError(f"{folder}: activation {act_name!r} is not a torch module",
                            "only torch.nn activations are supported in Dense modules")
    return act_name


def _dense_layer(folder: Path) -> Any:
    """A sentence-transformers Dense module (nn.Linear + activation) from its folder (no pickle)."""
    import torch

    cfg = read_json(folder / "config.json")
    linear = torch.nn.Linear(int(cfg["in_features"]), int(cfg["out_features"]), bias=bool(cfg.get("bias", True)))
    if (folder / "model.safetensors").is_file():
        from safetensors.torch import load_file

        state = load_file(str(folder / "model.safetensors"))
    elif (folder / "pytorch_model.bin").is_file():
        state = torch.load(folder / "pytorch_model.bin", map_location="cpu", weights_only=True)
    else:
        raise TinyglotError(f"{folder} holds no weights (model.safetensors or pytorch_model.bin)",
                            "re-save the sentence-transformers model")
    linear.load_state_dict({k.removeprefix("linear."): v for k, v in state.items()})
    mod_name, _, cls_name = _dense_activation(folder).rpartition(".")
    activation = getattr(importlib.import_module(mod_name), cls_name)()
    return torch.nn.Sequential(linear, activation)


@dataclass
class STLayout:
    """What ``modules.json`` and the module folders say, checked."""

    transformer_dir: Path
    pooling: tuple[str, ...] = ("mean",)
    dense_dirs: list[Path] = field(default_factory=list)
    do_lower_case: bool = False
    max_seq_length: int | None = None


def _refuse_remote_code(cfg: dict, where: Path) -> None:
    for key in ("model_args", "tokenizer_args", "config_args", "model_kwargs", "tokenizer_kwargs", "config_kwargs"):
        args = cfg.get(key)
        if isinstance(args, dict) and args.get("trust_remote_code"):
            raise TinyglotError(f"{where} asks for trust_remote_code: the model would run code from its folder",
                                "tinyglot runs no code from model folders; wrap the model with python:module:attr")


def read_layout(path: Path) -> STLayout:
    """Read and check a sentence-transformers folder's ``modules.json`` (see the module docstring)."""
    modules = read_json(path / "modules.json")
    if not isinstance(modules, list) or not all(isinstance(m, dict) for m in modules):
        raise TinyglotError(f"{path}/modules.json is not a list of modules", "re-save the model")
    layout: STLayout | None = None
    pooling: tuple[str, ...] | None = None
    dense: list[Path] = []
    lower, seq_len = False, None
    for module in sorted(modules, key=lambda m: m.get("idx", 0)):
        type_name = str(module.get("type", ""))
        kind = type_name.rsplit(".", 1)[-1]
        if not type_name.startswith("sentence_transformers.") or kind not in SUPPORTED:
            raise TinyglotError(f"{path}: module type {module.get('type')!r} is not supported",
                                f"supported modules: sentence_transformers' {', '.join(SUPPORTED)}; or wrap the "
                                "model with python:module:attr")
        folder = (path / str(module.get("path", ""))).resolve()
        if folder != path and path not in folder.parents:
            raise TinyglotError(f"{path}/modules.json points outside the model folder ({module.get('path')!r})",
                                "re-save the model")
        if kind == "Transformer":
            for cfg_name in ("sentence_bert_config.json", "sentence_xlnet_config.json"):
                if (folder / cfg_name).is_file():
                    st_cfg = read_json(folder / cfg_name)
                    _refuse_remote_code(st_cfg, folder / cfg_name)
                    seq_len = st_cfg.get("max_seq_length")
                    lower = bool(st_cfg.get("do_lower_case", False))
                    break
            layout = STLayout(folder)
        elif kind == "Pooling":
            pooling = _pooling_modes(read_json(folder / "config.json"), folder / "config.json")
        elif kind == "Dense":
            _dense_activation(folder)
            dense.append(folder)
    if layout is None:
        raise TinyglotError(f"{path}/modules.json lists no Transformer module",
                            "only transformer-based sentence-transformers models are supported")
    layout.pooling = pooling or ("mean",)
    layout.dense_dirs, layout.do_lower_case, layout.max_seq_length = dense, lower, seq_len
    return layout


def _library() -> Any:
    """The ``sentence_transformers`` module, or None when it is not installed."""
    try:
        import sentence_transformers
    except ImportError:
        return None
    return sentence_transformers


class SentenceTransformersEncoder(EncoderAdapter):
    """A sentence-transformers folder: ``SentenceTransformer(path)`` when the library is installed,
    else ``transformers`` with the Pooling, Dense and Normalize modules read from the folder.

    ``backend="onnx"`` runs the transformer on onnxruntime, with the same reader of the folder's
    modules. ``self.backend`` says which ran (``"sentence-transformers"``, ``"transformers"`` or
    ``"onnx"``); all give the same rows (L2-normalised, as the ``Encoder`` protocol asks).
    """

    kind = "sentence-transformers"
    SUPPORTED = SUPPORTED

    def __init__(self, path: str | Path, device: str = "cpu", max_seq_length: int | None = None,
                 backend: str = "torch") -> None:
        path = Path(path).resolve()
        layout = read_layout(path)
        super().__init__(f"st:{path.name}", str(path))
        self.pooling, self.do_lower_case = layout.pooling, layout.do_lower_case
        seq_len = max_seq_length or layout.max_seq_length
        # the onnx backend takes the reader path: the library's own ONNX backend wants a hub-style layout
        library = _library() if check_backend(backend) == "torch" else None
        if library is not None:
            self.backend = "sentence-transformers"
            self._st = self._load_library(library, path, device, seq_len)
            self.max_seq_length = int(self._st.max_seq_length)
        else:
            self.backend = "transformers" if backend == "torch" else "onnx"
            dense = [_dense_layer(d) for d in layout.dense_dirs]
            self._hf = HFModel(layout.transformer_dir, device, layout.pooling, seq_len, layout.do_lower_case, dense,
                               backend=backend, onnx_key=self._onnx_key(backend))
            self.max_seq_length = self._hf.max_seq_length

    @staticmethod
    def _load_library(library: Any, path: Path, device: str, seq_len: int | None) -> Any:
        offline_env()
        try:
            model = library.SentenceTransformer(str(path), device=str(torch_device(device)), local_files_only=True,
                                                trust_remote_code=False)
        except (OSError, ValueError, KeyError) as exc:
            raise TinyglotError(f"sentence-transformers cannot load {path} ({exc})",
                                "the folder needs modules.json, the module folders, the weights and the "
                                "tokenizer files (save() writes them); nothing is downloaded") from None
        if seq_len:
            model.max_seq_length = int(seq_len)
        return model.eval()

    def _settings(self) -> str:
        return f"pool={'+'.join(self.pooling)};max_len={self.max_seq_length};lower={int(self.do_lower_case)}"

    def _embed(self, texts: list[str]) -> np.ndarray:
        if self.backend != "sentence-transformers":
            return self._hf.embed(texts)
        return self._st.encode(texts, batch_size=len(texts), convert_to_numpy=True, normalize_embeddings=True,
                               show_progress_bar=False)

    def encode(self, sentences: Sequence[str], batch_size: int = 64) -> np.ndarray:
        return self._remember_dim(encode_texts(sentences, batch_size, self._embed))
