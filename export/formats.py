"""Bundle formats, one record each: the single place a format is declared.

A :class:`BundleFormat` names its exporter, the quantizations it takes, the loader its bundles' config.json
names, the runtime ``tinyglot bench`` measures it with and the keywords its exporter takes beyond the common
ones.  ``tinyglot export`` (its ``--format``/``--quantize`` choices, help and keywords), ``tinyglot run``
(``export.formats``, the export stage and the bench targets), vocabulary pruning and the bench read
:data:`BUNDLE_FORMATS`; a package adds a format with :func:`register_format` (its loader must also be one of
:data:`tinyglot.models.LOADERS` or a ``tinyglot.loaders`` entry point, so that ``tinyglot.load`` opens it).

Every exporter is called ``exporter(model, out, quantization, **kwargs)`` and takes the keywords of
:data:`COMMON_KWARGS`; ``options`` lists the others.  Exporters are named as ``"module:function"`` and
imported only when a bundle is written, so reading the records needs neither torch nor TensorFlow.

The string-in formats, ``onnx-text`` (:mod:`tinyglot.export.onnx_text`, onnxruntime +
onnxruntime-extensions) and ``tflite-mediapipe`` (:mod:`tinyglot.export.tflite_mediapipe`, MediaPipe's
TextEmbedder), take raw strings (the tokenizer is inside the model file).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tinyglot.errors import TinyglotError

# The keywords every exporter takes (the parity check and its console); the format-specific ones are a
# record's ``options``.
COMMON_KWARGS = ("threads", "max_sentences", "testset", "gates", "parity_gate", "say")
# ONNX's, the widest list
QUANTIZE = ("none", "dynamic", "dynamic-int4-embeddings", "dynamic-per-channel", "avx2", "avx512-vnni", "arm64",
            "static", "fp16")


@dataclass(frozen=True)
class BundleFormat:
    """One bundle format (see the module docstring)."""

    name: str
    exporter: str  # "module:function", called (model, out, quantization, **kwargs) -> ExportResult
    quantizations: tuple[str, ...]
    loader: str  # the "loader" of its bundles' config.json (tinyglot.models.LOADERS)
    bench_runtime: str | None  # the tinyglot.devices runner runtime; None: tinyglot bench does not run it
    options: tuple[str, ...] = ()  # keywords its exporter takes beyond COMMON_KWARGS
    raw_strings: bool = False  # string-in: the tokenizer is inside the model file
    summary: str = ""  # what it is, for `tinyglot export --help`
    quantize_help: str = ""  # its quantizations, for `tinyglot export --help`

    def exporter_function(self) -> Callable[..., Any]:
        """The exporter, imported now."""
        module_name, func_name = self.exporter.split(":")
        try:
            return getattr(importlib.import_module(module_name), func_name)
        except ImportError as exc:
            raise TinyglotError(f"cannot import the {self.name} exporter {self.exporter} ({exc})",
                                "pip install 'tinyglot[export]' (and 'tinyglot[tf]' for TensorFlow formats)") from None

    def export(self, model: str | Path, out: str | Path, quantization: Any = "none", **kwargs: Any):
        """Export ``model`` into ``out`` (the exporter checks ``quantization``); returns its ``ExportResult``."""
        return self.exporter_function()(model, out, quantization, **kwargs)

    def takes(self, options: Mapping[str, Any]) -> dict[str, Any]:
        """The entries of ``options`` (format-specific keywords a caller can give) this format's exporter takes."""
        return {key: value for key, value in options.items() if key in self.options}


BUNDLE_FORMATS: dict[str, BundleFormat] = {}


def register_format(fmt: BundleFormat) -> BundleFormat:
    """Add (or replace) a bundle format; returns it."""
    BUNDLE_FORMATS[fmt.name] = fmt
    return fmt


for _fmt in (
    BundleFormat("onnx", "tinyglot.export.onnx:export_onnx", QUANTIZE, "tinyglot.export.onnx:load_onnx_bundle",
                 "onnx", ("optimize", "module_factory", "opset"),
                 summary="onnxruntime",
                 quantize_help="none (fp32); dynamic int8 (per-tensor); dynamic-int4-embeddings (dynamic int8, "
                               "the token table as 4-bit blocks); dynamic-per-channel (dynamic int8 with a "
                               "scale per output channel: students started as e5-small's layers); avx2 / "
                               "avx512-vnni / arm64 (dynamic int8 presets per CPU); static int8 calibrated on "
                               "the embedded corpus; fp16"),
    BundleFormat("tflite", "tinyglot.export.tflite:export_tflite", ("none", "dynamic", "fp16"),
                 "tinyglot.export.tflite:load_tflite_bundle", "tflite",
                 ("buckets", "batch_sizes", "module_factory", "extra_config"),
                 summary="LiteRT, one signature per batch x sequence bucket",
                 quantize_help="none, dynamic (dynamic-range int8), fp16"),
    BundleFormat("savedmodel", "tinyglot.export.savedmodel:export_savedmodel", ("none",),
                 "tinyglot.export.savedmodel:load_savedmodel_bundle", None,
                 ("extra_config", "graph_tokenizer", "pooling"),
                 summary="TF SavedModel taking raw strings, loads with tensorflow_hub.KerasLayer",
                 quantize_help="none"),
    BundleFormat("onnx-text", "tinyglot.export.onnx_text:export_onnx_text",
                 ("none", "dynamic", "dynamic-int4-embeddings", "dynamic-per-channel", "avx2", "avx512-vnni",
                  "arm64"),
                 "tinyglot.export.onnx_text:load_onnx_text_bundle", "onnx-text", ("standalone", "card"), True,
                 summary="raw strings in: SentencePiece inside the graph, onnxruntime + onnxruntime-extensions",
                 quantize_help="none, dynamic (int8 encoder, per tensor), dynamic-int4-embeddings (and a 4-bit "
                               "token table), dynamic-per-channel (int8 encoder per channel, portable), "
                               "avx2 / avx512-vnni / arm64 (int8 encoder per channel, per CPU)"),
    BundleFormat("tflite-mediapipe", "tinyglot.export.tflite_mediapipe:export_tflite_mediapipe",
                 ("none", "dynamic", "dynamic-int4-embeddings"),
                 "tinyglot.export.tflite_mediapipe:load_tflite_mediapipe_bundle", "mediapipe",
                 ("standalone", "card", "input_shape"), True,
                 summary="raw strings in MediaPipe's TextEmbedder: TFLite Metadata with the SentencePiece model; "
                         "dynamic input length where TensorFlow can convert the model",
                 quantize_help="none, dynamic (dynamic-range int8), dynamic-int4-embeddings (and a 4-bit token "
                               "table)"),
):
    register_format(_fmt)


def format_names() -> tuple[str, ...]:
    """Every registered format (`tinyglot export --format`, `tinyglot run`'s export.formats)."""
    return tuple(BUNDLE_FORMATS)


def quantization_names() -> tuple[str, ...]:
    """Every quantization of some format, in first-seen order (`tinyglot export --quantize`)."""
    return tuple(dict.fromkeys(q for fmt in BUNDLE_FORMATS.values() for q in fmt.quantizations))


def get_format(name: str) -> BundleFormat:
    """The record of the format ``name``, else a clear error."""
    fmt = BUNDLE_FORMATS.get(name)
    if fmt is None:
        raise TinyglotError(f"unknown export format {name!r}", f"choose one of: {', '.join(BUNDLE_FORMATS)}")
    return fmt


def bundle_runtimes() -> dict[str, str]:
    """Bundle format -> the runtime ``tinyglot bench`` measures it with (formats it can run only)."""
    return {fmt.name: fmt.bench_runtime for fmt in BUNDLE_FORMATS.values() if fmt.bench_runtime is not None}


def export_string_bundle(fmt: str, model: str | Path, out: str | Path, quantization: str = "none",
                         **kwargs: Any):
    """Export ``model`` as the string-in format ``fmt``; returns the exporter's result."""
    record = BUNDLE_FORMATS.get(fmt)
    if record is None or not record.raw_strings:
        strings = [f.name for f in BUNDLE_FORMATS.values() if f.raw_strings]
        raise TinyglotError(f"{fmt!r} is not a string-in bundle format", f"choose one of: {', '.join(strings)}")
    return record.export(model, out, quantization, **kwargs)


def usage_without_tinyglot(cfg: dict) -> str:
    """The runtime part of a string-in bundle's own model card (Kotlin, Swift, JavaScript, Python
    code with the real file name), headings demoted one level, for cards that embed it
    (``tinyglot run`` writes its own README.md over the bundle's).  Empty for other formats."""
    record = BUNDLE_FORMATS.get(str(cfg.get("format")))
    if record is None or not record.raw_strings:
        return ""
    module = importlib.import_module(record.exporter.split(":")[0])
    body = module.model_card(cfg).split("\n", 1)[1]  # without the title line
    return "\n".join("#" + line if line.startswith("## ") else line for line in body.splitlines()).strip()


__all__ = ["BUNDLE_FORMATS", "COMMON_KWARGS", "QUANTIZE", "BundleFormat", "bundle_runtimes", "export_string_bundle",
           "format_names", "get_format", "quantization_names", "register_format", "usage_without_tinyglot"]
