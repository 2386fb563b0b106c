"""Torch building blocks shared by every stage, and ``load_encoder`` for any model folder.

A model folder (a teacher run, a student, an exported bundle) holds a ``config.json`` whose
``"loader"`` names the function that opens it (``"module:function"``).  Model folders come from
other people, so that name is only looked up, never imported as given: it must be one of
tinyglot's own loaders (:data:`LOADERS`) or the name of an entry point that an installed package
registers in the ``tinyglot.loaders`` group.  File names in a config are confined to the folder
(:func:`folder_file`).
"""

from __future__ import annotations

import importlib
import importlib.metadata
import json
from pathlib import Path
from collections.abc import Callable, Sequence

import numpy as np

from tinyglot.encoder import Encoder, encode_token_batches
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

        if not isinstance(max_len, int) or isinstance(max_len, bool) or max_len < 2:
            raise TinyglotError(f"max_len of {name or 'the model'} is {max_len!r}, not a whole number >= 2",
                                "re-create the model folder (its config.json is damaged)")
        self.tokenizer = tokenizer
        self._embed = embed
        self.max_len = max_len
        self.device = device or torch.device("cpu")
        self.name = name

    @property
    def module(self):
        """The torch module whose bound ``embed`` method this encoder calls (None for a plain function)."""
        return getattr(self._embed, "__self__", None)

    def run_batch(self, ids: np.ndarray, mask: np.ndarray) -> np.ndarray:
        """L2-normalised embeddings of one padded batch of token ids."""
        import torch

        emb = self._embed(torch.from_numpy(ids).to(self.device), torch.from_numpy(mask).to(self.device))
        return torch.nn.functional.normalize(emb.float(), dim=-1).cpu().numpy()

    def encode(self, sentences: Sequence[str], batch_size: int = 64) -> np.ndarray:
        import torch

        with torch.inference_mode():
            return encode_token_batches(self, sentences, batch_size)


# The loaders tinyglot writes into config.json, and the module attribute each one names.  Nothing
# else is imported from a config: a folder cannot make tinyglot import or call code of its choice.
LOADERS: dict[str, tuple[str, str]] = {
    "tinyglot.teacher.encoder:load_teacher": ("tinyglot.teacher.encoder", "load_teacher"),
    "tinyglot.distill.student:load_student": ("tinyglot.distill.student", "load_student"),
    "tinyglot.distill.multistage:load_multistage": ("tinyglot.distill.multistage", "load_multistage"),
    "tinyglot.distill.dimred:load_dimred": ("tinyglot.distill.dimred", "load_dimred"),
    "tinyglot.export.onnx:load_onnx_bundle": ("tinyglot.export.onnx", "load_onnx_bundle"),
    "tinyglot.export.onnx_text:load_onnx_text_bundle": ("tinyglot.export.onnx_text", "load_onnx_text_bundle"),
    "tinyglot.export.tflite_mediapipe:load_tflite_mediapipe_bundle": ("tinyglot.export.tflite_mediapipe",
                                                                      "load_tflite_mediapipe_bundle"),
    "tinyglot.export.tflite:load_tflite_bundle": ("tinyglot.export.tflite", "load_tflite_bundle"),
    "tinyglot.export.savedmodel:load_savedmodel_bundle": ("tinyglot.export.savedmodel", "load_savedmodel_bundle"),
}
LOADER_GROUP = "tinyglot.loaders"


def read_model_config(path: str | Path) -> dict:
    """The ``config.json`` of a model folder (or the file itself) as a dict, else a clear error."""
    path = Path(path)
    cfg_path = path / "config.json" if path.is_dir() else path
    if not cfg_path.is_file():
        raise TinyglotError(
            f"no model found at {path} (expected a folder with config.json)",
            "pass a folder written by tinyglot (a teacher run, a student or an export bundle)",
        )
    try:
        cfg = json.loads(cfg_path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError, RecursionError) as exc:
        raise TinyglotError(f"{cfg_path} is not valid JSON ({type(exc).__name__}: {str(exc)[:200]})",
                            "re-create the model folder") from None
    except OSError as exc:
        raise TinyglotError(f"{cfg_path} cannot be read ({exc})", "check the folder's permissions") from None
    if not isinstance(cfg, dict):
        raise TinyglotError(f"{cfg_path} holds a JSON {type(cfg).__name__}, not an object",
                            "re-create the model folder (config.json must be a JSON object {...})")
    return cfg


def folder_file(folder: str | Path, name: object, key: str = "a file name") -> Path:
    """``folder/name`` for a file name read from the folder's config, confined to the folder.

    An absolute path, ``..``, a symlink pointing outside or a name that is not a string is a
    :class:`TinyglotError`: a downloaded folder must not make tinyglot read other files.
    """
    folder = Path(folder)
    if not isinstance(name, str) or not name or "\0" in name:
        raise TinyglotError(f"{folder}/config.json: {key} is {name!r}, not a file name",
                            "re-create the model folder with tinyglot")
    rel = Path(name)
    if not rel.parts or rel.is_absolute() or ".." in rel.parts or name.startswith(("/", "\\")) or ":" in rel.parts[0]:
        raise TinyglotError(f"{folder}/config.json: {key} {name!r} points outside the model folder",
                            "use a model folder written by tinyglot; its files are named relative to the folder")
    try:
        inside = (folder / rel).resolve().is_relative_to(folder.resolve())
    except (OSError, RuntimeError, ValueError):  # symlink loop, ...
        inside = False
    if not inside:
        raise TinyglotError(f"{folder}/{name} (from config.json, {key}) is a link to outside the model folder",
                            "replace the link by the file itself")
    return folder / rel


def config_section(folder: str | Path, cfg: dict, key: str) -> dict:
    """``cfg[key]``, which must be a JSON object, else a clear error."""
    value = cfg.get(key)
    if not isinstance(value, dict):
        raise TinyglotError(f"{folder}/config.json: {key!r} is {'missing' if value is None else 'not an object'}",
                            "re-create the model folder with tinyglot")
    return value


def config_files(folder: str | Path, cfg: dict, key: str = "files") -> list[Path]:
    """The confined paths of the list ``cfg[key]`` (missing: none)."""
    names = cfg.get(key, [])
    if not isinstance(names, list):
        raise TinyglotError(f"{folder}/config.json: {key!r} is not a list of file names",
                            "re-create the model folder with tinyglot")
    return [folder_file(folder, name, f"{key!r}") for name in names]


def load_folder_tokenizer(path: str | Path, name: str, expected_sha256: str | None, owner: str, made: str,
                          error: type[TinyglotError] = TinyglotError):
    """The tokenizer file ``name`` of a model folder, checked against the sha256 its config recorded
    (None: not recorded); ``owner``/``made`` word the error ("student", "trained")."""
    from tinyglot.tokenizer import Tokenizer

    tokenizer = Tokenizer.load(folder_file(path, name, "'tokenizer'"))
    if expected_sha256 not in (None, tokenizer.sha256):
        raise error(f"{path}/tokenizer.model does not match the {owner}'s config",
                    f"copy the tokenizer.model the {owner} was {made} with")
    return tokenizer


def loader_function(loader: object, path: str | Path = "") -> Callable[..., Encoder]:
    """The function a config's ``"loader"`` names: one of :data:`LOADERS`, or an entry point of an
    installed package in the ``tinyglot.loaders`` group; anything else is a :class:`TinyglotError`
    (the name is never imported as given)."""
    where = f"{path}/config.json" if path else "config.json"
    if not isinstance(loader, str) or not loader:
        raise TinyglotError(f"{where} names no loader",
                            "this folder was not written by tinyglot; pass a teacher run, student or bundle folder")
    if loader in LOADERS:
        module_name, func_name = LOADERS[loader]
        try:
            return getattr(importlib.import_module(module_name), func_name)
        except ImportError as exc:
            raise TinyglotError(
                f"cannot import the loader {loader!r} of {path} ({exc})",
                "install the extra that provides it, e.g. pip install 'tinyglot[export]' or 'tinyglot[tf]'",
            ) from None
    for entry in importlib.metadata.entry_points(group=LOADER_GROUP):
        if entry.name == loader:
            try:
                return entry.load()
            except (ImportError, AttributeError) as exc:
                raise TinyglotError(f"the installed loader {loader!r} of {path} cannot be imported ({exc})",
                                    f"reinstall the package that provides it ({entry.value})") from None
    raise TinyglotError(
        f"{where} names the loader {loader!r}, which is not one of tinyglot's loaders; it was not "
        "imported (a model folder cannot choose code to run)",
        f"use a folder written by tinyglot ({', '.join(sorted(LOADERS))}), or install the package that "
        f"registers {loader!r} as a '{LOADER_GROUP}' entry point",
    )


def load_encoder(path: str | Path, **kwargs) -> Encoder:
    """Open a tinyglot model folder as an ``Encoder`` by calling the registered loader its config names."""
    func = loader_function(read_model_config(path).get("loader"), path)
    try:
        return func(Path(path), **kwargs)
    except TinyglotError:
        raise
    except (KeyError, TypeError, ValueError, AttributeError, IndexError, RuntimeError, OSError) as exc:
        # the folder is the loader's only input: a value of the wrong type or a missing key
        raise TinyglotError(
            f"{path} cannot be opened: its config.json or model files are malformed "
            f"({type(exc).__name__}: {str(exc)[:300]})",
            "re-create the folder with tinyglot, or download it again",
        ) from None
