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

# Every bundle format, and the quantizations each accepts (`tinyglot export --quantize`, `tinyglot run`'s
# export.formats).
FORMATS = ("onnx", "tflite", "savedmodel", "onnx-text", "tflite-mediapipe")
QUANTIZE = ("none", "dynamic", "avx2", "avx512-vnni", "arm64", "static", "fp16")
QUANTIZE_BY_FORMAT: dict[str, tuple[str, ...]] = {
    "onnx": QUANTIZE,
    "tflite": ("none", "dynamic", "fp16"),
    "savedmodel": ("none",),
    "onnx-text": ("none", "dynamic"),
    "tflite-mediapipe": ("none", "dynamic"),
}

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


def usage_without_tinyglot(cfg: dict) -> str:
    """The runtime part of a string-in bundle's own model card (Kotlin, Swift, JavaScript, Python
    code with the real file name), headings demoted one level, for cards that embed it
    (``tinyglot run`` writes its own README.md over the bundle's).  Empty for other formats."""
    fmt = cfg.get("format")
    if fmt not in STRING_FORMATS:
        return ""
    module = importlib.import_module(STRING_FORMATS[fmt][0])
    body = module.model_card(cfg).split("\n", 1)[1]  # without the title line
    return "\n".join("#" + line if line.startswith("## ") else line for line in body.splitlines()).strip()


__all__ = ["STRING_FORMATS", "STRING_QUANTIZE", "export_string_bundle", "usage_without_tinyglot"]
