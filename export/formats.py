"""Bundle formats that take raw strings (the tokenizer inside the model file), by name.

``onnx-text`` (:mod:`tinyglot.export.onnx_text`, onnxruntime + onnxruntime-extensions) and
``tflite-mediapipe`` (:mod:`tinyglot.export.tflite_mediapipe`, MediaPipe's TextEmbedder).  Both
take ``quantization`` ``none`` or ``dynamic`` and the common export keywords (``threads``,
``max_sentences``, ``testset``, ``parity_gate``, ``say``).
"""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import Any

from tinyglot.errors import TinyglotError

STRING_FORMATS: dict[str, tuple[str, str]] = {
    "onnx-text": ("tinyglot.export.onnx_text", "export_onnx_text"),
    "tflite-mediapipe": ("tinyglot.export.tflite_mediapipe", "export_tflite_mediapipe"),
}
STRING_QUANTIZE = ("none", "dynamic")


def export_string_bundle(fmt: str, model: str | Path, out: str | Path, quantization: str = "none",
                         **kwargs: Any):
    """Export ``model`` as the string-in format ``fmt``; returns the exporter's result."""
    if fmt not in STRING_FORMATS:
        raise TinyglotError(f"{fmt!r} is not a string-in bundle format", f"choose one of: {', '.join(STRING_FORMATS)}")
    module, func = STRING_FORMATS[fmt]
    return getattr(importlib.import_module(module), func)(model, out, quantization, **kwargs)


__all__ = ["STRING_FORMATS", "STRING_QUANTIZE", "export_string_bundle"]
