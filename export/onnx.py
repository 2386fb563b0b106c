"""ONNX bundles: export a student (or an EMS teacher) with pooling and normalisation in the graph,
optimise it for onnxruntime, quantize it, and run it as an ``Encoder``.

The recipe: the legacy TorchScript exporter (``dynamo=False``, opset 17; its graphs ran faster than
the dynamo exporter's), inputs ``input_ids`` + ``attention_mask`` (int64, dynamic batch and sequence
axes), one output ``sentence_embedding`` (L2-normalised mean pooling), then onnxruntime's transformer
fusions and, on request, quantization (the modes and presets are in :mod:`tinyglot.export.quantize`).
Every quantized file is checked: it must hold integer (or fp16) weights and be much smaller than the
fp32 graph, else the export fails (an "int8" file barely smaller than fp32 was not quantized).
"""

from __future__ import annotations

import logging
import os
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from collections.abc import Callable, Sequence

import numpy as np

from tinyglot.errors import TinyglotError
from tinyglot.onnx_graph import inference_session

from .bundle import TOKENIZER, Converter, ExportResult, Source, eager_attention, embedding_module_class, \
    encode_token_batches, export_bundle, find_transformer, read_bundle
from .parity import Gates
from .quantize import QuantizationConfig, calibration_sentences, graph_stats, optimize_graph, quantize_graph, \
    verify_quantized

LOADER = "tinyglot.export.onnx:load_onnx_bundle"
FORMAT = "onnx"
MODEL_FILE = "model.onnx"
INPUT_NAMES = ("input_ids", "attention_mask")
OUTPUT_NAME = "sentence_embedding"
OPSET = 17

log = logging.getLogger(__name__)


def _require_onnx():
    try:
        import onnx  # noqa: F401
        import onnxruntime  # noqa: F401
    except ImportError as exc:
        raise TinyglotError(f"ONNX export needs onnx and onnxruntime ({exc})",
                            "pip install 'tinyglot[export]'") from None


# ====================================================================== the graph
_find_bert = find_transformer
_eager_attention = eager_attention
_embedding_module_class = embedding_module_class


def __getattr__(name: str) -> Any:
    if name == "EmbeddingModule":  # defined on first use so that importing this module needs no torch
        return embedding_module_class()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def export_module(module, path: str | Path, vocab_size: int, max_len: int, opset: int = OPSET) -> Path:
    """``torch.onnx.export`` of ``module(input_ids, attention_mask)`` with dynamic batch/sequence axes."""
    import torch

    path = Path(path)
    module.eval()
    seq = max(2, min(8, max_len))
    gen = torch.Generator().manual_seed(0)
    ids = torch.randint(2, max(3, vocab_size), (2, seq), generator=gen, dtype=torch.long)
    mask = torch.ones_like(ids)
    mask[1, seq // 2:] = 0  # a padded row, so the traced graph keeps the masking path
    ids = ids * mask
    axes = {"input_ids": {0: "batch", 1: "sequence"}, "attention_mask": {0: "batch", 1: "sequence"},
            OUTPUT_NAME: {0: "batch"}}
    inner = getattr(module, "model", module)
    with warnings.catch_warnings(), _eager_attention(inner), torch.no_grad():
        warnings.simplefilter("ignore")
        try:
            torch.onnx.export(module, (ids, mask), str(path), dynamo=False, input_names=list(INPUT_NAMES),
                              output_names=[OUTPUT_NAME], dynamic_axes=axes, opset_version=opset,
                              do_constant_folding=True)
        except Exception as exc:  # the exporter raises many types; name it for the user
            raise TinyglotError(f"torch.onnx.export failed: {type(exc).__name__}: {exc}",
                                "report this with the model's config.json") from exc
    return path


def _bert_shape(model) -> tuple[int, int]:
    bert = _find_bert(model)
    if bert is None:
        return 0, 0  # let the optimizer detect them
    return int(bert.config.num_attention_heads), int(bert.config.hidden_size)


# ====================================================================== running a bundle
class OnnxEncoder:
    """``Encoder`` over an ONNX file with inputs ``input_ids``/``attention_mask`` and L2-normalised
    output rows, and a tinyglot tokenizer.  Inputs are bound by name (and cast to the dtype the graph
    declares); sentences are sorted by length before batching, returned in input order."""

    def __init__(self, model_path: str | Path, tokenizer, max_len: int, threads: int = 1,
                 device: str = "cpu", name: str = "") -> None:
        _require_onnx()
        import onnxruntime as ort

        self.model_path = Path(model_path)
        self.tokenizer = tokenizer
        self.max_len = int(max_len)
        self.name = name or f"onnx ({self.model_path.parent.name})"
        so = ort.SessionOptions()
        so.intra_op_num_threads = max(0, int(threads))
        so.inter_op_num_threads = 1
        so.log_severity_level = 3
        providers = ["CPUExecutionProvider"]
        if device in ("cuda", "auto") and "CUDAExecutionProvider" in ort.get_available_providers():
            providers.insert(0, "CUDAExecutionProvider")
        elif device == "cuda":
            raise TinyglotError("device cuda asked for, but this onnxruntime has no CUDA provider",
                                "install onnxruntime-gpu, or use --device cpu")
        try:
            self.session = inference_session(self.model_path, so, providers)
        except Exception as exc:
            raise TinyglotError(f"onnxruntime cannot open {self.model_path} ({type(exc).__name__}: {exc})",
                                "re-export the bundle with `tinyglot export`") from None
        self._inputs = {i.name: (np.int32 if "int32" in i.type else np.int64) for i in self.session.get_inputs()}
        unknown = set(self._inputs) - set(INPUT_NAMES)
        if unknown or "input_ids" not in self._inputs:
            raise TinyglotError(f"{self.model_path} takes inputs {sorted(self._inputs)}",
                                f"tinyglot feeds {list(INPUT_NAMES)}; re-export with `tinyglot export`")
        outputs = [o.name for o in self.session.get_outputs()]
        self._output = OUTPUT_NAME if OUTPUT_NAME in outputs else outputs[0]

    def run_batch(self, ids: np.ndarray, mask: np.ndarray) -> np.ndarray:
        feed = {"input_ids": ids, "attention_mask": mask}
        feed = {k: np.ascontiguousarray(feed[k], dtype=dt) for k, dt in self._inputs.items()}
        return self.session.run([self._output], feed)[0]

    def encode(self, sentences: Sequence[str], batch_size: int = 64) -> np.ndarray:
        return encode_token_batches(self, sentences, batch_size)


def load_onnx_bundle(path: str | Path, threads: int = 1, device: str = "cpu", **_: Any) -> OnnxEncoder:
    """The loader named in an ONNX bundle's config.json: ``tinyglot.load(bundle)`` calls it."""
    from tinyglot.models import folder_file, load_folder_tokenizer

    path = Path(path)
    cfg = read_bundle(path, FORMAT)
    tokenizer = load_folder_tokenizer(path, cfg.get("tokenizer", TOKENIZER), cfg.get("tokenizer_sha256"), "bundle",
                                      "exported")
    q = cfg.get("quantization", {}).get("name") or cfg.get("quantization", {}).get("mode", "")
    return OnnxEncoder(folder_file(path, cfg["files"][0], "'files'"), tokenizer, cfg["max_len"], threads=threads,
                       device=device, name=f"onnx{'-' + q if q and q != 'none' else ''} ({path.name})")


# ====================================================================== the whole export
@dataclass
class OnnxConverter(Converter):
    """ONNX's part of :func:`~tinyglot.export.bundle.export_bundle`: trace, optimise, quantize, verify."""

    qcfg: QuantizationConfig = field(default_factory=QuantizationConfig)
    optimize: str = "transformers"
    opset: int = OPSET
    threads: int = 1
    module_factory: Callable[[Any], Any] | None = None
    applied: str = ""

    def convert(self, source: Source, work: Path, say: Callable[[str], None]) -> dict:
        heads, hidden = _bert_shape(source.model)
        factory = self.module_factory or embedding_module_class()
        say(f"exporting {source.path} ({source.config.get('kind')}) to ONNX (opset {self.opset})")
        raw = export_module(factory(source.model), work / "raw.onnx", source.tokenizer.vocab_size, source.max_len,
                            self.opset)
        self.applied = optimize_graph(raw, work / "opt.onnx", self.optimize, heads, hidden,
                                      embed_layer_norm=self.qcfg.embed_layer_norm)
        fp32_bytes = (work / "opt.onnx").stat().st_size
        if self.qcfg.mode != "none":
            say(f"quantizing: {self.qcfg.label} ({self.qcfg.mode})")
        final = quantize_graph(work / "opt.onnx", work / "final.onnx", self.qcfg, tokenizer=source.tokenizer,
                               max_len=source.max_len, workdir=work)
        stats = verify_quantized(final, fp32_bytes, self.qcfg.mode)
        os.replace(final, work / MODEL_FILE)
        return stats

    def open(self, out: Path, source: Source) -> OnnxEncoder:
        return OnnxEncoder(out / MODEL_FILE, source.tokenizer, source.max_len, threads=self.threads)

    def gates(self) -> Gates:
        return Gates.for_mode(self.qcfg.mode)

    def extra(self, stats: dict, exported: Any, source: Source) -> dict:
        return {"onnx": {"opset": self.opset, "exporter": "torch.onnx legacy (dynamo=False)",
                         "optimization": self.applied, "inputs": list(INPUT_NAMES), "output": OUTPUT_NAME,
                         "int8_ops": stats["int8_ops"],
                         "onnxruntime_only": self.applied == "transformers" or self.qcfg.mode != "none"}}


def export_onnx(
    model: str | Path,
    out: str | Path,
    quantization: QuantizationConfig | str | None = None,
    *,
    optimize: str = "transformers",
    threads: int = 1,
    max_sentences: int = 100,
    testset=None,
    gates: Gates | None = None,
    parity_gate: bool = True,
    module_factory: Callable[[Any], Any] | None = None,
    opset: int = OPSET,
    say: Callable[[str], None] = lambda msg: None,
) -> ExportResult:
    """Export the student or teacher at ``model`` to an ONNX bundle in ``out`` and check its parity.

    ``quantization``: a :class:`QuantizationConfig` or a preset name (default ``none``).
    ``module_factory(source_model)`` builds the module to export (default ``EmbeddingModule``).
    The bundle's ``config.json`` is written last; when a parity gate fails (and ``parity_gate``),
    it is not written — the folder keeps ``model.onnx`` and ``parity.json`` for inspection — and a
    TinyglotError lists the failing figures.
    """
    _require_onnx()
    qcfg = quantization if isinstance(quantization, QuantizationConfig) else \
        QuantizationConfig.from_name(quantization or "none")
    qcfg.validate()
    if optimize not in ("transformers", "ort", "none"):
        raise TinyglotError(f"unknown optimisation {optimize!r}", "use transformers, ort or none")
    converter = OnnxConverter(fmt=FORMAT, loader=LOADER, label=f"onnx {qcfg.label}", quantization=qcfg.to_dict(),
                              model_files=(MODEL_FILE,), qcfg=qcfg, optimize=optimize, opset=opset, threads=threads,
                              module_factory=module_factory)
    return export_bundle(converter, model, out, testset=testset, max_sentences=max_sentences, gates=gates,
                         parity_gate=parity_gate, say=say)


__all__ = [
    "ExportResult", "OnnxConverter", "OnnxEncoder", "QuantizationConfig", "calibration_sentences",
    "export_module", "export_onnx", "graph_stats", "load_onnx_bundle", "optimize_graph", "quantize_graph",
    "verify_quantized",
]
