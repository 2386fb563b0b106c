"""Torch building blocks shared by every stage, and :func:`open_model_folder`, the step of :func:`tinyglot.load`
that opens a tinyglot model folder.

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
import math
import os
from pathlib import Path
from collections.abc import Callable, Sequence

import numpy as np

from tinyglot.encoder import Encoder, encode_token_batches
from tinyglot.errors import TinyglotError
from tinyglot.io import check_file_size


def bert_config(vocab_size: int, hidden: int, layers: int, heads: int, ffn: int, max_len: int,
                dropout: float, attention_dropout: float | None = None):
    """A ``transformers`` BertConfig for tinyglot's encoders (no token types, pad id 0).

    ``attention_dropout`` (default: ``dropout``) applies to the attention probabilities.  At 0, torch's
    scaled-dot-product attention runs its fused CPU kernel in training, which keeps no (heads x length x
    length) probabilities for the backward pass; with dropout it falls back to the unfused one."""
    from transformers import BertConfig

    return BertConfig(vocab_size=vocab_size, hidden_size=hidden, num_hidden_layers=layers,
                      num_attention_heads=heads, intermediate_size=ffn, hidden_dropout_prob=dropout,
                      attention_probs_dropout_prob=dropout if attention_dropout is None else attention_dropout,
                      max_position_embeddings=max_len,
                      type_vocab_size=1, pad_token_id=0)


def albert_config(vocab_size: int, embedding_size: int, hidden: int, heads: int, ffn: int, max_len: int,
                  dropout: float, *, layers: int, groups: int, inner: int, act: str = "gelu"):
    """A ``transformers`` AlbertConfig: a factorised token table (vocab -> ``embedding_size`` -> ``hidden``) and
    ``layers`` applications of ``groups`` groups of ``inner`` layers (groups == layers, inner 1: no sharing);
    no token types, pad id 0, as ``bert_config``."""
    from transformers import AlbertConfig

    return AlbertConfig(vocab_size=vocab_size, embedding_size=embedding_size, hidden_size=hidden,
                        num_hidden_layers=layers, num_hidden_groups=groups, inner_group_num=inner,
                        num_attention_heads=heads, intermediate_size=ffn, hidden_act=act,
                        hidden_dropout_prob=dropout, attention_probs_dropout_prob=dropout,
                        max_position_embeddings=max_len, type_vocab_size=1, pad_token_id=0)


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


MAX_CONFIG_BYTES = 16 << 20  # a model folder's config.json: a few KB in practice
# Bounds of a model's shape read from a folder (other people's files): each size, and the fp32 bytes the
# model would take once built (TINYGLOT_MAX_MODEL_BYTES overrides the default, in bytes).
SHAPE_LIMITS = {"vocab_size": 1_000_000, "hidden_size": 8192, "num_layers": 256, "num_heads": 256,
                "ffn_size": 65536, "max_len": 16384, "embedding_size": 8192}
MAX_MODEL_BYTES = 8 << 30


def check_model_shape(where: str | Path, shape: dict[str, object], *, shared_layers: bool = False,
                      weights: Sequence[Path] = ()) -> int:
    """Check the sizes a model folder's config gives (``SHAPE_LIMITS`` keys; absent ones are skipped)
    before anything is built: each a whole number within its bound, and the fp32 model within
    ``MAX_MODEL_BYTES`` and within what its ``weights`` files on disk can hold.  Returns the estimated
    bytes; a clear error names the estimate otherwise."""
    dims: dict[str, int] = {}
    for name, value in shape.items():
        if value is None:
            continue
        if not isinstance(value, int) or isinstance(value, bool) or value < 1 or value > SHAPE_LIMITS[name]:
            raise TinyglotError(f"{where}: {name} is {value!r}, not a whole number from 1 to {SHAPE_LIMITS[name]:,}",
                                "re-create the model folder with tinyglot (its config is damaged or hostile)")
        dims[name] = value
    h = dims.get("hidden_size", 1)
    e = dims.get("embedding_size", h)
    per_layer = 4 * h * h + 2 * h * dims.get("ffn_size", 4 * h) + 9 * h
    layers = 1 if shared_layers else dims.get("num_layers", 1)
    params = dims.get("vocab_size", 1) * e + dims.get("max_len", 1) * e + (e * h if e != h else 0) + layers * per_layer
    estimate = 4 * params
    limit = int(os.environ.get("TINYGLOT_MAX_MODEL_BYTES", MAX_MODEL_BYTES))
    gib = estimate / 2**30
    if estimate > limit:
        raise TinyglotError(f"{where} describes a model of {params:,} parameters (about {gib:.1f} GiB in memory), "
                            f"more than the {limit / 2**30:.1f} GiB tinyglot builds from a folder; nothing was built",
                            "check the folder's config.json; for a real model this large set "
                            "TINYGLOT_MAX_MODEL_BYTES (bytes)")
    on_disk = sum(p.stat().st_size for p in weights if p.is_file())
    if weights and on_disk and estimate > 2 * on_disk + (256 << 20):
        raise TinyglotError(f"{where} describes a model of about {estimate / 1e6:,.0f} MB, but its weights hold only "
                            f"{on_disk / 1e6:,.1f} MB; nothing was built",
                            "re-create the model folder with tinyglot (its config does not match its weights)")
    return estimate


def check_transformers_folder(folder: Path, where: str | Path, expect: dict[str, object] | None = None) -> None:
    """Bounds of a ``transformers`` model folder (``config.json`` + weights) inside a model folder, checked
    before ``from_pretrained`` builds it: sizes within bounds, numbers finite, a pad id inside the
    vocabulary, and the values ``expect`` names equal (type and value) to what the outer config says."""
    cfg_path = folder / "config.json"
    check_file_size(cfg_path, MAX_CONFIG_BYTES, "config.json")
    try:
        cfg = json.loads(cfg_path.read_text(encoding="utf-8"))
    except (OSError, ValueError, RecursionError):
        return  # from_pretrained reports it
    if not isinstance(cfg, dict):
        return
    shape = {"vocab_size": cfg.get("vocab_size"), "hidden_size": cfg.get("hidden_size"),
             "num_layers": cfg.get("num_hidden_layers"), "num_heads": cfg.get("num_attention_heads"),
             "ffn_size": cfg.get("intermediate_size"), "max_len": cfg.get("max_position_embeddings"),
             "embedding_size": cfg.get("embedding_size")}
    name = f"{where}/{folder.name}/config.json"
    for key, want in (expect or {}).items():
        if type(cfg.get(key)) is not type(want) or cfg.get(key) != want:
            raise TinyglotError(f"{name}: {key} is {cfg.get(key)!r}, but the model's config.json says {want!r}",
                                "re-create the model folder with tinyglot (one of its configs was edited)")
    odd = [k for k, v in cfg.items() if isinstance(v, float) and not math.isfinite(v)]
    pad, vocab = cfg.get("pad_token_id"), cfg.get("vocab_size")
    if odd or (pad is not None and not (type(pad) is int and type(vocab) is int and 0 <= pad < vocab)):
        raise TinyglotError(f"{name}: {', '.join(odd) or 'pad_token_id'} is {cfg[odd[0]] if odd else pad!r}",
                            "re-create the model folder with tinyglot (its config is damaged)")
    weights = [p for p in folder.iterdir() if p.suffix in (".safetensors", ".bin")]
    check_model_shape(name, shape,
                      shared_layers=cfg.get("model_type") == "albert" and cfg.get("num_hidden_groups", 1) == 1,
                      weights=weights)


def model_subfolder(folder: str | Path, name: str) -> Path:
    """``folder/name``, a folder of weights inside a model folder: it and every entry in it stay inside
    ``folder`` (a symlinked folder or file pointing outside is refused, like a symlinked file)."""
    sub = folder_file(folder, name, f"the {name!r} folder")
    root = Path(folder).resolve()
    if sub.is_dir():
        for entry in sub.iterdir():
            try:
                inside = entry.resolve().is_relative_to(root)
            except (OSError, RuntimeError):
                inside = False
            if not inside:
                raise TinyglotError(f"{entry} is a link to outside the model folder {folder}",
                                    "replace the link by the file itself")
    return sub


def read_model_config(path: str | Path) -> dict:
    """The ``config.json`` of a model folder (or the file itself) as a dict, else a clear error."""
    path = Path(path)
    cfg_path = path / "config.json" if path.is_dir() else path
    if not cfg_path.is_file():
        raise TinyglotError(
            f"no model found at {path} (expected a folder with config.json)",
            "pass a folder written by tinyglot (a teacher run, a student or an export bundle)",
        )
    check_file_size(cfg_path, MAX_CONFIG_BYTES, "config.json")
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
    """Deprecated: use :func:`tinyglot.load`, which opens this and every other model the command line takes."""
    import warnings

    warnings.warn("tinyglot.models.load_encoder is deprecated: use tinyglot.load", DeprecationWarning, stacklevel=2)
    return open_model_folder(path, **kwargs)


def open_model_folder(path: str | Path, **kwargs) -> Encoder:
    """Internal (call :func:`tinyglot.load`): open a tinyglot model folder as an ``Encoder`` by calling the
    registered loader its config names with ``kwargs``."""
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
