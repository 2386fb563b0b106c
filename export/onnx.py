"""ONNX bundles: export a student (or an EMS teacher) with pooling and normalisation in the graph,
optimise it for onnxruntime, quantize it, and run it as an ``Encoder``.

The recipe follows ``shared/TOOLCHAIN.md``: the legacy TorchScript exporter (``dynamo=False``,
opset 17: faster graphs than the dynamo exporter), inputs ``input_ids`` + ``attention_mask``
(int64, dynamic batch and sequence axes), one output ``sentence_embedding`` (L2-normalised mean
pooling), then onnxruntime's transformer fusions (Attention, SkipLayerNormalization,
EmbedLayerNormalization, BiasGelu) and, on request, quantization:

============  ==========================================================================
mode          how
============  ==========================================================================
``none``      fp32, fused graph
``dynamic``   ``quantize_dynamic`` of the fused graph (int8 weights, activations quantized
              per batch at run time); presets :meth:`QuantizationConfig.avx2`,
              :meth:`~QuantizationConfig.avx512_vnni`, :meth:`~QuantizationConfig.arm64`
``static``    ``quantize_static`` (QDQ, int8 weights and activations) calibrated on
              tokenised corpus sentences (the embedded corpus by default), on the fused graph:
              fused Attention stays fp32.  Quantizing the unfused graph (attention scores and
              softmax in int8 too) drifts too far on deep students: measured on a trained
              24-layer lealla-small, mean cosine 0.898 and -17 P@1 unfused, 0.9999 fused
``fp16``      ``onnxruntime.transformers.float16`` (fp16 weights, fp32 inputs/outputs);
              halves the file, not faster on x86 CPUs
============  ==========================================================================

Every quantized file is checked: it must hold integer (or fp16) weights and be much smaller
than the fp32 graph, else the export fails (TOOLCHAIN: an "int8" file barely smaller than fp32
was not quantized).
"""

from __future__ import annotations

import contextlib
import logging
import os
import tempfile
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from collections.abc import Callable, Sequence

import numpy as np

from tinyglot.errors import TinyglotError

from .bundle import PARITY, TOKENIZER, bundle_config, file_sizes, load_source, read_bundle, source_size, \
    finalize_bundle, parity_summary, check_bundle_out, encode_token_batches
from .parity import Gates, ParityReport, check_parity
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
def _find_bert(model):
    enc = getattr(model, "encoder", None)
    return enc if enc is not None and hasattr(enc, "config") else None


class _Wrapper:  # namespace for the lazily defined torch module class
    cls = None


def _embedding_module_class():
    if _Wrapper.cls is None:
        import torch
        from torch import nn

        class EmbeddingModule(nn.Module):
            """``(input_ids, attention_mask) -> L2-normalised sentence_embedding`` of any model with
            ``embed(ids, mask)`` (a tinyglot student or an EMS teacher): pooling and normalisation
            are part of the exported graph."""

            def __init__(self, model) -> None:
                super().__init__()
                self.model = model

            def forward(self, input_ids, attention_mask):
                emb = self.model.embed(input_ids, attention_mask)
                return torch.nn.functional.normalize(emb, p=2.0, dim=-1, eps=1e-12)

        _Wrapper.cls = EmbeddingModule
    return _Wrapper.cls


def __getattr__(name: str) -> Any:
    if name == "EmbeddingModule":  # defined on first use so that importing this module needs no torch
        return _embedding_module_class()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


@contextlib.contextmanager
def _eager_attention(model):
    """Export with eager attention: under tracing, sdpa's mask handling may be specialised to the
    example input; the eager graph is the same size and onnxruntime fuses it into Attention."""
    bert = _find_bert(model)
    old = getattr(bert.config, "_attn_implementation", None) if bert is not None else None
    if bert is not None:
        bert.config._attn_implementation = "eager"
    try:
        yield
    finally:
        if bert is not None and old is not None:
            bert.config._attn_implementation = old


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
            self.session = ort.InferenceSession(str(self.model_path), so, providers=providers)
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
    return OnnxEncoder(folder_file(path, cfg["files"][0], "'files'"), tokenizer, cfg["max_len"], threads=threads, device=device,
                       name=f"onnx{'-' + q if q and q != 'none' else ''} ({path.name})")


# ====================================================================== the whole export
@dataclass
class ExportResult:
    out: Path
    config: dict
    parity: ParityReport
    sizes: dict[str, int]
    source_bytes: int
    graph: dict


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
    ``module_factory(source_model)`` builds the module to export (default :class:`EmbeddingModule`).
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
    model_path, out = Path(model), Path(out)
    source, tokenizer, scfg = load_source(model_path)
    check_bundle_out(model_path, out)
    max_len = int(scfg["max_len"])
    vocab = tokenizer.vocab_size
    heads, hidden = _bert_shape(source)
    factory = module_factory or _embedding_module_class()
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=".export-", dir=out) as tmp:
        tmp = Path(tmp)
        say(f"exporting {model_path} ({scfg.get('kind')}) to ONNX (opset {opset})")
        raw = export_module(factory(source), tmp / "raw.onnx", vocab, max_len, opset)
        applied = optimize_graph(raw, tmp / "opt.onnx", optimize, heads, hidden)
        fp32_bytes = (tmp / "opt.onnx").stat().st_size
        if qcfg.mode != "none":
            say(f"quantizing: {qcfg.label} ({qcfg.mode})")
        final = quantize_graph(tmp / "opt.onnx", tmp / "final.onnx", qcfg, tokenizer=tokenizer, max_len=max_len,
                               workdir=tmp)
        stats = verify_quantized(final, fp32_bytes, qcfg.mode)
        for stale in ("config.json", PARITY):
            (out / stale).unlink(missing_ok=True)
        os.replace(final, out / MODEL_FILE)
    tokenizer.save(out / TOKENIZER)

    from tinyglot.models import TorchEncoder

    say(f"checking parity against the source on up to {max_sentences} pairs per language")
    reference = TorchEncoder(tokenizer, source.embed, max_len, name=f"source ({model_path.name})")
    exported = OnnxEncoder(out / MODEL_FILE, tokenizer, max_len, threads=threads)
    report = check_parity(reference, exported, testset, gates or Gates.for_mode(qcfg.mode),
                          languages=tokenizer.languages, max_sentences=max_sentences,
                          label=f"onnx {qcfg.label}")
    report.write_json(out / PARITY)
    cfg = bundle_config(
        loader=LOADER, fmt=FORMAT, model_files=[MODEL_FILE], source=model_path, source_cfg=scfg,
        tokenizer=tokenizer, dim=int(exported.encode(["a"]).shape[1]), max_len=max_len,
        quantization=qcfg.to_dict(),
        extra={"onnx": {"opset": opset, "exporter": "torch.onnx legacy (dynamo=False)", "optimization": applied,
                        "inputs": list(INPUT_NAMES), "output": OUTPUT_NAME, "int8_ops": stats["int8_ops"],
                        "onnxruntime_only": applied == "transformers" or qcfg.mode != "none"},
               "parity": parity_summary(report, parity_gate)},
    )
    finalize_bundle(out, cfg, report, parity_gate)
    return ExportResult(out, cfg, report, file_sizes(out), source_size(model_path, scfg), stats)


__all__ = [
    "EmbeddingModule", "ExportResult", "OnnxEncoder", "QuantizationConfig", "calibration_sentences",
    "export_module", "export_onnx", "graph_stats", "load_onnx_bundle", "optimize_graph", "quantize_graph",
    "verify_quantized",
]
