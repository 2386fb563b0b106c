"""TensorFlow SavedModels in TF Hub format: raw-string models (USE, LEALLA) and LaBSE-style
encoders that take the output of a preprocessing SavedModel."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from tinyglot.encoder import encode_texts, l2_normalize
from tinyglot.errors import TinyglotError

from .base import EncoderAdapter, fingerprint
from tinyglot.spec import split_query

_TF_OUTPUT_KEYS = ("sentence_embedding", "default", "pooled_output", "outputs", "output", "embeddings",
                   "embedding", "output_0")


def import_tf() -> tuple[Any, Any]:
    """(tensorflow, tensorflow_hub or None), with onnxruntime-extensions loaded first and a clear
    error when TensorFlow is missing."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    from tinyglot.ortx import preload_ortx

    preload_ortx()  # onnxruntime-extensions crashes a process that imported TensorFlow first (onnx-text bundles)
    try:
        import tensorflow as tf
    except ImportError as exc:
        raise TinyglotError(f"TensorFlow is needed to run a SavedModel teacher but cannot be imported ({exc})",
                            "pip install 'tinyglot[tf]'") from None
    # tensorflow-text registers the SentencePiece / text ops that LaBSE, USE-m and tinyglot's SavedModels
    # use; without it a model that needs them fails to load, and load_saved_model names the extra
    with contextlib.suppress(ImportError):
        import tensorflow_text  # noqa: F401
    try:
        import tensorflow_hub as hub
    except ImportError:  # tf.saved_model.load reads the same local folders
        hub = None
    return tf, hub


def load_saved_model(load: Callable[[str], Any], path: Path) -> Any:
    """``load(path)``, with the missing-op error of a model that needs tensorflow-text made clear."""
    try:
        return load(str(path))
    except Exception as exc:  # TensorFlow raises several types for an unregistered op
        if "Op type not registered" not in str(exc):
            raise
        op = str(exc).split("'")[1] if "'" in str(exc) else "an op"
        raise TinyglotError(f"the SavedModel at {path} uses the TensorFlow op {op}, which is not registered "
                            "(tensorflow-text is not installed)", "pip install 'tinyglot[tf]'") from None


class TFHubEncoder(EncoderAdapter):
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
        pre_path = None
        if preprocessor is not None:
            pre_path = Path(preprocessor).resolve()
            if not (pre_path / "saved_model.pb").is_file():
                raise TinyglotError(f"preprocessor {pre_path} holds no saved_model.pb",
                                    "pass the preprocessing SavedModel folder published with the encoder")
        super().__init__(f"tfhub:{path.name}", str(path))
        self.preprocessor_path = pre_path
        self.output_key = output_key
        self._tf, hub = import_tf()
        load = hub.load if hub is not None else self._tf.saved_model.load
        self._device = {"cpu": "/CPU:0", "cuda": "/GPU:0", "gpu": "/GPU:0"}.get(str(device).split(":")[0])
        self._model = self._callable(load_saved_model(load, path), path)
        self._pre = self._callable(load_saved_model(load, pre_path), pre_path) if pre_path else None

    def _callable(self, obj: Any, path: Path) -> Callable[[Any], Any]:
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
        pre = f"pre={self.preprocessor_path}:{fingerprint(self.preprocessor_path)}" if self.preprocessor_path else ""
        return ";".join(x for x in (pre, f"key={self.output_key}" if self.output_key else "") if x)

    def _pick(self, out: Any) -> np.ndarray:
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
        return np.asarray(out.numpy() if hasattr(out, "numpy") else out)

    def _batch(self, texts: list[str]) -> np.ndarray:
        tf = self._tf
        x = tf.constant(texts, dtype=tf.string)
        try:
            if self._pre is not None:
                x = self._pre(x)
            raw = self._model(x)
        except (TypeError, ValueError, tf.errors.InvalidArgumentError) as exc:
            raise self._call_error(exc) from None
        emb = self._pick(raw)
        if emb.ndim != 2 or emb.shape[0] != len(texts):
            raise TinyglotError(f"{self.name} returned shape {emb.shape} for {len(texts)} sentences",
                                "the model must return one embedding row per sentence")
        return l2_normalize(emb)

    def encode(self, sentences: Sequence[str], batch_size: int = 64) -> np.ndarray:
        scope = self._tf.device(self._device) if self._device else contextlib.nullcontext()
        with scope:
            return self._remember_dim(encode_texts(sentences, batch_size, self._batch))


def tf_folders(path: Path) -> tuple[Path, Path | None] | None:
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


def load_tfhub(body: str, device: str) -> TFHubEncoder:
    """``tfhub:DIR[?preprocessor=PRE_DIR&output_key=NAME]`` (``body`` is what follows ``tfhub:``)."""
    path_s, opts = split_query(body)
    unknown = set(opts) - {"preprocessor", "output_key"}
    if unknown:
        raise TinyglotError(f"unknown tfhub option(s): {', '.join(sorted(unknown))}",
                            "options: preprocessor=PRE_DIR, output_key=NAME")
    path = Path(path_s).expanduser()
    found = tf_folders(path)
    if found is None:
        raise TinyglotError(f"no TensorFlow SavedModel at {path} (no saved_model.pb)",
                            "pass the folder of an unpacked TF Hub model (it holds saved_model.pb and variables/)")
    encoder, pre = found
    if "preprocessor" in opts:
        pre = Path(opts["preprocessor"]).expanduser()
    return TFHubEncoder(encoder, preprocessor=pre, device=device, output_key=opts.get("output_key"))
