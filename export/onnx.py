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
import shutil
import tempfile
import warnings
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any
from collections.abc import Callable, Sequence

import numpy as np

from tinyglot.errors import TinyglotError

from .bundle import TOKENIZER, Converter, ExportResult, Source, eager_attention, embedding_module_class, \
    encode_token_batches, export_bundle, find_transformer, read_bundle
from .parity import Gates

LOADER = "tinyglot.export.onnx:load_onnx_bundle"
FORMAT = "onnx"
MODEL_FILE = "model.onnx"
INPUT_NAMES = ("input_ids", "attention_mask")
OUTPUT_NAME = "sentence_embedding"
OPSET = 17
MODES = ("none", "dynamic", "static", "fp16")
# ops that only exist in a graph whose weights are integers
INT8_OPS = frozenset({"MatMulInteger", "DynamicQuantizeMatMul", "QAttention", "QEmbedLayerNormalization",
                      "QLinearMatMul", "QGemm", "ConvInteger", "QLinearConv", "DequantizeLinear",
                      "DynamicQuantizeLinear", "QuantizeLinear", "MatMulIntegerToFloat"})

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


def optimize_graph(src: str | Path, dst: str | Path, method: str = "transformers", num_heads: int = 0,
                   hidden_size: int = 0) -> str:
    """Write an onnxruntime-optimised copy of ``src``; returns the method that was applied.

    ``transformers``: onnxruntime's transformer optimizer (fused Attention, SkipLayerNormalization,
    EmbedLayerNormalization, BiasGelu; contrib ops, so the file then runs on onnxruntime only);
    falls back to ``ort`` if the fusion fails.  ``ort``: the session's extended graph
    optimisations saved with ``SessionOptions.optimized_model_filepath``.  ``none``: a copy.
    """
    import onnxruntime as ort

    src, dst = Path(src), Path(dst)
    if method == "none":
        shutil.copyfile(src, dst)
        return "none"
    if method == "transformers":
        try:
            from onnxruntime.transformers import optimizer

            quiet = logging.getLogger("onnxruntime.transformers")
            level = quiet.level
            quiet.setLevel(logging.ERROR)
            try:
                opt = optimizer.optimize_model(str(src), model_type="bert", num_heads=num_heads,
                                               hidden_size=hidden_size, opt_level=1, use_gpu=False)
                opt.save_model_to_file(str(dst))
            finally:
                quiet.setLevel(level)
            return "transformers"
        except Exception as exc:  # fusion is an optimisation: fall back, but say so
            log.warning("onnxruntime transformer fusion failed (%s); using ORT graph optimisations", exc)
    if method not in ("transformers", "ort"):
        raise TinyglotError(f"unknown optimisation {method!r}", "use transformers, ort or none")
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED
    so.optimized_model_filepath = str(dst)
    so.intra_op_num_threads = 1
    ort.InferenceSession(str(src), so, providers=["CPUExecutionProvider"])
    return "ort"


# ====================================================================== quantization
@dataclass
class QuantizationConfig:
    """How to quantize an ONNX bundle; build one with a preset factory.

    ``mode``: ``none`` | ``dynamic`` | ``static`` | ``fp16``.  ``weight_type`` / ``activation_type``:
    ``qint8`` | ``quint8``.  ``reduce_range`` uses 7-bit weights (avoids saturation of u8s8 kernels
    on AVX2 CPUs without VNNI, at some accuracy).  Static mode calibrates on
    ``calibration_sentences`` (default: ``calibration_size`` sentences of the embedded corpus).
    """

    mode: str = "none"
    per_channel: bool = False
    reduce_range: bool = False
    weight_type: str = "qint8"
    activation_type: str = "quint8"
    weight_symmetric: bool = True
    activation_symmetric: bool = False
    operators: tuple[str, ...] | None = None
    calibration_sentences: list[str] | None = field(default=None, repr=False)
    calibration_size: int = 256
    calibration_batch_size: int = 16
    calibration_method: str = "minmax"
    name: str = ""

    # ------------------------------------------------------------ presets (optimum's style)
    @classmethod
    def none(cls) -> QuantizationConfig:
        return cls(mode="none", name="none")

    @classmethod
    def dynamic(cls, per_channel: bool = False, reduce_range: bool = False) -> QuantizationConfig:
        """Dynamic int8 (signed weights, per tensor): the recipe measured in TOOLCHAIN.md."""
        return cls(mode="dynamic", per_channel=per_channel, reduce_range=reduce_range, weight_type="qint8",
                   name="dynamic")

    @classmethod
    def avx2(cls, per_channel: bool = True, reduce_range: bool = False) -> QuantizationConfig:
        """x86 with AVX2: dynamic, unsigned weights (u8u8 kernels never saturate), per channel."""
        return cls(mode="dynamic", per_channel=per_channel, reduce_range=reduce_range, weight_type="quint8",
                   name="avx2")

    @classmethod
    def avx512_vnni(cls, per_channel: bool = True) -> QuantizationConfig:
        """x86 with AVX512-VNNI: dynamic, signed weights, per channel, full range."""
        return cls(mode="dynamic", per_channel=per_channel, reduce_range=False, weight_type="qint8",
                   name="avx512-vnni")

    @classmethod
    def arm64(cls, per_channel: bool = True) -> QuantizationConfig:
        """ARM64 (phones, Apple silicon, Graviton): dynamic, signed weights, per channel."""
        return cls(mode="dynamic", per_channel=per_channel, reduce_range=False, weight_type="qint8",
                   name="arm64")

    @classmethod
    def static(cls, calibration_sentences: Sequence[str] | None = None, per_channel: bool = True,
               calibration_size: int = 256) -> QuantizationConfig:
        """Static int8 (QDQ): weights and activations, ranges calibrated on corpus sentences."""
        return cls(mode="static", per_channel=per_channel, weight_type="qint8", activation_type="qint8",
                   activation_symmetric=True,
                   calibration_sentences=list(calibration_sentences) if calibration_sentences else None,
                   calibration_size=calibration_size, name="static")

    @classmethod
    def fp16(cls) -> QuantizationConfig:
        return cls(mode="fp16", name="fp16")

    @classmethod
    def from_name(cls, name: str) -> QuantizationConfig:
        """The CLI's ``--quantize`` values."""
        presets = {"none": cls.none, "dynamic": cls.dynamic, "avx2": cls.avx2, "avx512-vnni": cls.avx512_vnni,
                   "avx512_vnni": cls.avx512_vnni, "arm64": cls.arm64, "static": cls.static, "fp16": cls.fp16}
        if name not in presets:
            raise TinyglotError(f"unknown quantization {name!r}",
                                "choose one of: none, dynamic, avx2, avx512-vnni, arm64, static, fp16")
        return presets[name]()

    def validate(self) -> None:
        if self.mode not in MODES:
            raise TinyglotError(f"unknown quantization mode {self.mode!r}", f"choose one of: {', '.join(MODES)}")
        for what, value in (("weight_type", self.weight_type), ("activation_type", self.activation_type)):
            if value not in ("qint8", "quint8"):
                raise TinyglotError(f"{what} must be qint8 or quint8, got {value!r}")
        if self.calibration_method not in ("minmax", "entropy", "percentile"):
            raise TinyglotError(f"unknown calibration method {self.calibration_method!r}",
                                "use minmax, entropy or percentile")

    def to_dict(self) -> dict:
        d = asdict(self)
        sentences = d.pop("calibration_sentences")
        if self.mode == "static":
            d["calibration_sentences"] = len(sentences) if sentences else "embedded corpus"
        else:
            for key in ("calibration_size", "calibration_batch_size", "calibration_method"):
                d.pop(key)
        d["operators"] = list(self.operators) if self.operators else None
        return d

    @property
    def label(self) -> str:
        return self.name or self.mode


def _qtype(name: str):
    from onnxruntime.quantization import QuantType

    return QuantType.QInt8 if name == "qint8" else QuantType.QUInt8


def calibration_sentences(n: int = 256, seed: int = 0) -> list[str]:
    """``n`` sentences of the embedded corpus, both sides, spread evenly over its languages."""
    from tinyglot.data.embedded import load_pairs

    pairs = load_pairs(None)
    rng = np.random.default_rng(seed)
    pick = rng.permutation(len(pairs))[: max(1, (n + 1) // 2)]
    out = [s for i in sorted(pick) for s in (pairs[i].x, pairs[i].en)]
    return out[:n]


def _calibration_reader(tokenizer, sentences: Sequence[str], max_len: int, batch_size: int):
    from onnxruntime.quantization import CalibrationDataReader

    sentences = [s for s in sentences if isinstance(s, str) and s.strip()]
    if not sentences:
        raise TinyglotError("static quantization got no calibration sentences",
                            "pass QuantizationConfig.static(sentences) with some corpus sentences")
    ids = tokenizer.encode_ids(sentences, max_len)

    class Reader(CalibrationDataReader):
        def __init__(self) -> None:
            self._batches = iter([tokenizer.pad(ids[i:i + batch_size], max_len)
                                  for i in range(0, len(ids), batch_size)])

        def get_next(self):
            batch = next(self._batches, None)
            return None if batch is None else {"input_ids": batch.ids, "attention_mask": batch.mask}

    return Reader()


def quantize_graph(src: str | Path, dst: str | Path, qcfg: QuantizationConfig, *, tokenizer=None,
                   max_len: int = 128, workdir: str | Path | None = None) -> Path:
    """Quantize ``src`` into ``dst`` as ``qcfg`` says (``mode`` none copies)."""
    import onnx

    qcfg.validate()
    # absolute paths: static calibration runs in a temporary working directory
    src, dst = Path(src).resolve(), Path(dst).resolve()
    workdir = Path(workdir).resolve() if workdir is not None else dst.parent
    # ORT-fused graphs carry contrib ops whose output types the quantizer cannot infer (TOOLCHAIN)
    extra = {"DefaultTensorType": onnx.TensorProto.FLOAT}
    ops = list(qcfg.operators) if qcfg.operators else None
    if qcfg.mode == "none":
        shutil.copyfile(src, dst)
    elif qcfg.mode == "dynamic":
        from onnxruntime.quantization import quantize_dynamic

        quantize_dynamic(src, dst, op_types_to_quantize=ops, per_channel=qcfg.per_channel,
                         reduce_range=qcfg.reduce_range, weight_type=_qtype(qcfg.weight_type),
                         extra_options={**extra, "WeightSymmetric": qcfg.weight_symmetric})
    elif qcfg.mode == "static":
        from onnxruntime.quantization import CalibrationMethod, QuantFormat, quantize_static

        if tokenizer is None:
            raise TinyglotError("static quantization needs the tokenizer for its calibration sentences")
        sentences = qcfg.calibration_sentences or calibration_sentences(qcfg.calibration_size)
        reader = _calibration_reader(tokenizer, sentences, max_len, qcfg.calibration_batch_size)
        method = {"minmax": CalibrationMethod.MinMax, "entropy": CalibrationMethod.Entropy,
                  "percentile": CalibrationMethod.Percentile}[qcfg.calibration_method]
        # the calibrator writes an augmented copy of the model next to its temporary files
        with tempfile.TemporaryDirectory(dir=workdir) as tmp, _chdir(tmp):
            quantize_static(src, dst, reader, quant_format=QuantFormat.QDQ, op_types_to_quantize=ops,
                            per_channel=qcfg.per_channel, reduce_range=qcfg.reduce_range,
                            activation_type=_qtype(qcfg.activation_type), weight_type=_qtype(qcfg.weight_type),
                            calibrate_method=method,
                            extra_options={**extra, "ActivationSymmetric": qcfg.activation_symmetric,
                                           "WeightSymmetric": qcfg.weight_symmetric})
    elif qcfg.mode == "fp16":
        from onnxruntime.transformers.float16 import convert_float_to_float16

        model = convert_float_to_float16(onnx.load(str(src)), keep_io_types=True)
        onnx.save(model, str(dst))
    return dst


@contextlib.contextmanager
def _chdir(path):
    old = os.getcwd()
    os.chdir(path)
    try:
        yield
    finally:
        os.chdir(old)


def graph_stats(path: str | Path) -> dict:
    """Op counts and how the weights are stored: ``{"ops", "int8_ops", "weights": {dtype: elements}}``."""
    import onnx
    from onnx import TensorProto

    model = onnx.load(str(path), load_external_data=False)
    ops = Counter(n.op_type for n in model.graph.node)
    weights: Counter = Counter()
    for init in model.graph.initializer:
        n = int(np.prod(init.dims)) if init.dims else 1
        weights[TensorProto.DataType.Name(init.data_type).lower()] += n
    return {"ops": dict(ops), "int8_ops": sum(c for op, c in ops.items() if op in INT8_OPS),
            "weights": dict(weights), "bytes": Path(path).stat().st_size}


def verify_quantized(path: str | Path, fp32_bytes: int, mode: str) -> dict:
    """Fail loudly when a quantized file is not: no integer ops, float weights, or barely smaller."""
    stats = graph_stats(path)
    if mode in ("none",):
        return stats
    w = stats["weights"]
    total = sum(w.values()) or 1
    ratio = stats["bytes"] / max(1, fp32_bytes)
    if mode in ("dynamic", "static"):
        low = (w.get("int8", 0) + w.get("uint8", 0)) / total
        if stats["int8_ops"] == 0 or low < 0.5 or ratio > 0.6:
            raise TinyglotError(
                f"the {mode} int8 model was not really quantized: {stats['int8_ops']} integer ops, "
                f"{100 * low:.0f}% of weight elements int8, {ratio:.2f}x the fp32 size",
                "this graph's ops are not covered by onnxruntime's quantizer; report the model's config.json",
            )
    elif mode == "fp16":
        half = w.get("float16", 0) / total
        if half < 0.5 or ratio > 0.7:
            raise TinyglotError(
                f"the fp16 model was not converted: {100 * half:.0f}% of weights fp16, {ratio:.2f}x the fp32 size")
    return stats


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
        self.applied = optimize_graph(raw, work / "opt.onnx", self.optimize, heads, hidden)
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
