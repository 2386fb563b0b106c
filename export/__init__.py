"""Export of students (and EMS teachers) to self-contained bundles, with parity checks.

A bundle folder holds the model file(s), ``tokenizer.model``, ``config.json`` (with the
``loader`` that ``tinyglot.load`` follows) and ``parity.json``.  Formats: ONNX
(:mod:`tinyglot.export.onnx`: fp32, dynamic/static int8, fp16), TFLite (:mod:`tinyglot.export.tflite`:
fixed-shape signatures per (batch, sequence) bucket; fp32, dynamic-range int8, fp16) and a TF-Hub
SavedModel that takes raw strings (:mod:`tinyglot.export.savedmodel`); string-in bundles for stock
runtimes: ONNX with the SentencePiece op inside (:mod:`tinyglot.export.onnx_text`) and TFLite for
MediaPipe's TextEmbedder (:mod:`tinyglot.export.tflite_mediapipe`); vocabulary pruning
(:mod:`tinyglot.export.prune`).

    from tinyglot.export import export_onnx, QuantizationConfig
    export_onnx("runs/distill/lealla-small/student", "bundles/small-int8", QuantizationConfig.avx512_vnni())
    enc = tinyglot.load("bundles/small-int8")

Command line: ``tinyglot export --model STUDENT --format onnx --quantize dynamic``.
Names are imported lazily: ``import tinyglot.export`` needs neither torch nor onnx.
"""

from __future__ import annotations

from tinyglot.lazy import lazy_exports

_EXPORTS = {
    "EmbeddingModule": "onnx",
    "ExportResult": "bundle",
    "OnnxEncoder": "onnx",
    "QuantizationConfig": "onnx",
    "export_onnx": "onnx",
    "load_onnx_bundle": "onnx",
    "Gates": "parity",
    "ParityReport": "parity",
    "check_parity": "parity",
    "load_source": "bundle",
    "read_bundle": "bundle",
    "TFLiteEncoder": "tflite",
    "export_tflite": "tflite",
    "load_tflite_bundle": "tflite",
    "SavedModelEncoder": "savedmodel",
    "export_savedmodel": "savedmodel",
    "load_savedmodel_bundle": "savedmodel",
    "prune_student": "prune",
    "OnnxTextEncoder": "onnx_text",
    "export_onnx_text": "onnx_text",
    "load_onnx_text_bundle": "onnx_text",
    "export_string_bundle": "formats",
    "BundleFormat": "formats",
    "BUNDLE_FORMATS": "formats",
    "register_format": "formats",
    "MediaPipeTextEncoder": "tflite_mediapipe",
    "export_tflite_mediapipe": "tflite_mediapipe",
    "load_tflite_mediapipe_bundle": "tflite_mediapipe",
    "prune_and_export": "prune",
}

__all__ = sorted(_EXPORTS)

__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)

