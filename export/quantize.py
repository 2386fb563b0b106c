"""Graph optimisation and quantization of exported ONNX graphs, configured with optimum-onnx.

Optimisation runs optimum's :class:`~optimum.onnxruntime.ORTOptimizer` with an
:class:`~optimum.onnxruntime.OptimizationConfig`: onnxruntime's transformer fusions (Attention,
EmbedLayerNormalization, BiasGelu; contrib ops, so the file then runs on onnxruntime only), or only
onnxruntime's extended graph optimisations.  SkipLayerNormalization, which both fuse, is split back
into ``Add``/``Sum`` + ``LayerNormalization`` after quantization (:mod:`tinyglot.onnx_graph`: faster
on the CPU).

Quantization presets are optimum's :class:`~optimum.onnxruntime.AutoQuantizationConfig` targets:

============  ==========================================================================
preset        optimum configuration
============  ==========================================================================
``none``      fp32, fused graph
``dynamic``   ``AutoQuantizationConfig.avx512(is_static=False, per_channel=False, reduce_range=True)``:
              int8 weights per tensor in 7 bits (no u8s8 saturation on CPUs without VNNI), activations
              quantized per batch at run time: the portable preset
``dynamic-per-channel`` ``dynamic`` with one weight scale per output channel (``per_channel=True``): as
              portable, for students whose weights lose parity per tensor (those started as
              e5-small's layers)
``avx2``      ``AutoQuantizationConfig.avx2(is_static=False)``: unsigned weights, per channel
``avx512-vnni`` ``AutoQuantizationConfig.avx512_vnni(is_static=False)``: signed weights, per channel
``arm64``     ``AutoQuantizationConfig.arm64(is_static=False)``: signed weights, per channel
``static``    QDQ, int8 weights and activations (symmetric), ranges calibrated on tokenised corpus
              sentences (the embedded corpus by default), on the fused graph: fused Attention stays
              fp32.  Quantizing the unfused graph (attention scores and softmax in int8 too) drifts
              too far on deep students
``fp16``      ``onnxruntime.transformers.float16`` (the converter optimum's ``fp16`` option calls):
              fp16 weights, fp32 inputs/outputs; halves the file, not faster on x86 CPUs
============  ==========================================================================

Every quantized file is checked by :func:`verify_quantized`: it must hold integer (or fp16)
weights and be much smaller than the fp32 graph (an "int8" file barely smaller than fp32 was not
quantized).
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import tempfile
from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from tinyglot.errors import TinyglotError
from tinyglot.onnx_graph import unfuse_file
from tinyglot.quiet import third_party_output

if TYPE_CHECKING:
    from optimum.onnxruntime.configuration import OptimizationConfig
    from optimum.onnxruntime.configuration import QuantizationConfig as OptimumQuantizationConfig

MODES = ("none", "dynamic", "static", "fp16")
OPTIMIZATIONS = ("transformers", "ort", "none")
# ops that only exist in a graph whose weights are integers
INT8_OPS = frozenset({"GatherBlockQuantized", "MatMulInteger", "DynamicQuantizeMatMul", "QAttention",
                      "QEmbedLayerNormalization", "QLinearMatMul", "QGemm", "ConvInteger", "QLinearConv",
                      "DequantizeLinear", "DynamicQuantizeLinear", "QuantizeLinear", "MatMulIntegerToFloat"})
_TYPE_NAMES = {"QInt8": "qint8", "QUInt8": "quint8"}

log = logging.getLogger(__name__)


def _optimum() -> Any:
    """``optimum.onnxruntime.configuration``, or a TinyglotError saying how to install it."""
    try:
        from optimum.onnxruntime import configuration
    except ImportError as exc:
        raise TinyglotError(f"ONNX optimisation and quantization need optimum-onnx ({exc})",
                            "pip install 'tinyglot[export]'") from None
    return configuration


# ====================================================================== graph optimisation
def optimization_config(method: str, embed_layer_norm: bool = True) -> OptimizationConfig:
    """optimum's configuration for ``method``: ``transformers`` (O2: transformer fusions, with the
    EmbedLayerNormalization fusion that optimum leaves off by default, unless ``embed_layer_norm`` is
    False: a 4-bit token table needs its own Gather) or ``ort`` (onnxruntime's extended graph
    optimisations only)."""
    conf = _optimum()
    if method == "transformers":
        return conf.AutoOptimizationConfig.O2(disable_embed_layer_norm_fusion=not embed_layer_norm)
    if method == "ort":
        return conf.OptimizationConfig(optimization_level=2, enable_transformers_specific_optimizations=False)
    raise TinyglotError(f"unknown optimisation {method!r}", f"use {', '.join(OPTIMIZATIONS)}")


def _run_optimizer(src: Path, dst: Path, config: OptimizationConfig, num_heads: int, hidden_size: int) -> None:
    from optimum.onnxruntime import ORTOptimizer
    from transformers import BertConfig

    # the fusions need only the attention shape; 0 lets onnxruntime read it from the graph
    shape = BertConfig(num_attention_heads=num_heads, hidden_size=hidden_size)
    quiet = [logging.getLogger(name) for name in ("onnxruntime.transformers", "optimum", "transformers")]
    levels = [q.level for q in quiet]
    for q in quiet:
        q.setLevel(logging.ERROR)
    try:
        with tempfile.TemporaryDirectory(dir=dst.parent) as tmp:
            ORTOptimizer([src], config=shape).optimize(config, tmp, file_suffix="optimized")
            os.replace(Path(tmp) / f"{src.stem}_optimized.onnx", dst)
    finally:
        for q, level in zip(quiet, levels, strict=True):
            q.setLevel(level)


def optimize_graph(src: str | Path, dst: str | Path, method: str = "transformers", num_heads: int = 0,
                   hidden_size: int = 0, embed_layer_norm: bool = True) -> str:
    """Write an onnxruntime-optimised copy of ``src``; returns the method that was applied.

    ``transformers``: onnxruntime's transformer fusions through optimum's ORTOptimizer; falls back
    to ``ort`` if the fusion fails.  ``ort``: onnxruntime's extended graph optimisations.
    ``none``: a copy.  :func:`quantize_graph` later splits the fused ``SkipLayerNormalization`` nodes
    of both back into standard ops.  ``embed_layer_norm`` False keeps the embedding lookups as Gathers
    (:attr:`QuantizationConfig.embedding_bits` 4 quantizes the token table's).
    """
    src, dst = Path(src).resolve(), Path(dst).resolve()
    if method not in OPTIMIZATIONS:
        raise TinyglotError(f"unknown optimisation {method!r}", f"use {', '.join(OPTIMIZATIONS)}")
    if method == "none":
        shutil.copyfile(src, dst)
        return "none"
    if method == "transformers":
        try:
            _run_optimizer(src, dst, optimization_config("transformers", embed_layer_norm), num_heads, hidden_size)
            return "transformers"
        except TinyglotError:
            raise
        except Exception as exc:  # fusion is an optimisation: fall back, but say so
            log.warning("onnxruntime transformer fusion failed (%s); using ORT graph optimisations", exc)
    _run_optimizer(src, dst, optimization_config("ort"), num_heads, hidden_size)
    return "ort"


# ====================================================================== quantization
@dataclass
class QuantizationConfig:
    """How to quantize an ONNX bundle; build one with a preset factory (optimum's targets).

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
    embedding_bits: int = 8  # 4: the token embedding table as 4-bit blocks (GatherBlockQuantized), dynamic only
    embedding_block_size: int = 128  # values of a row that share one scale, with embedding_bits 4
    name: str = ""

    # ------------------------------------------------------------ presets: optimum's targets
    @classmethod
    def from_optimum(cls, config: OptimumQuantizationConfig, name: str, **extra: Any) -> QuantizationConfig:
        """The same settings as optimum's ``config`` (operators left to onnxruntime's defaults)."""
        return cls(mode="static" if config.is_static else "dynamic", per_channel=config.per_channel,
                   reduce_range=config.reduce_range, weight_type=_TYPE_NAMES[config.weights_dtype.name],
                   activation_type=_TYPE_NAMES[config.activations_dtype.name],
                   weight_symmetric=config.weights_symmetric, activation_symmetric=config.activations_symmetric,
                   name=name, **extra)

    @classmethod
    def none(cls) -> QuantizationConfig:
        return cls(mode="none", name="none")

    @classmethod
    def dynamic(cls, per_channel: bool = False, reduce_range: bool = True) -> QuantizationConfig:
        """Dynamic int8, signed weights, per tensor: the portable preset.  Weights in 7 bits
        (``reduce_range``): onnxruntime's u8s8 kernels on x86 CPUs without VNNI (AVX2, AVX-512 before
        Cascade Lake, AMD before Zen 4) add pairs of 8-bit products in 16 bits, which saturate with
        full-range weights; a bundle made on any machine must give the same embeddings on those."""
        auto = _optimum().AutoQuantizationConfig
        return cls.from_optimum(auto.avx512(is_static=False, per_channel=per_channel, reduce_range=reduce_range),
                                "dynamic")

    @classmethod
    def dynamic_per_channel(cls) -> QuantizationConfig:
        """``dynamic`` (portable: 7-bit weights) with one scale per output channel of each weight matrix.
        A student started as e5-small's layers falls to a mean cosine of 0.90 against fp32 per tensor,
        0.997 per channel.  Not the default: on a 2 x 256 student, per channel ran 2-6 % slower at
        batch 1 on an AVX2 CPU (0-1 % in batches of 32; docs/results.md)."""
        qcfg = cls.dynamic(per_channel=True)
        qcfg.name = "dynamic-per-channel"
        return qcfg

    @classmethod
    def avx2(cls, per_channel: bool = True, reduce_range: bool = False) -> QuantizationConfig:
        """x86 with AVX2: dynamic, unsigned weights (u8u8 kernels never saturate), per channel."""
        auto = _optimum().AutoQuantizationConfig
        return cls.from_optimum(auto.avx2(is_static=False, per_channel=per_channel, reduce_range=reduce_range),
                                "avx2")

    @classmethod
    def avx512_vnni(cls, per_channel: bool = True) -> QuantizationConfig:
        """x86 with AVX512-VNNI: dynamic, signed weights, per channel, full range."""
        auto = _optimum().AutoQuantizationConfig
        return cls.from_optimum(auto.avx512_vnni(is_static=False, per_channel=per_channel), "avx512-vnni")

    @classmethod
    def arm64(cls, per_channel: bool = True) -> QuantizationConfig:
        """ARM64 (phones, Apple silicon, Graviton): dynamic, signed weights, per channel."""
        auto = _optimum().AutoQuantizationConfig
        return cls.from_optimum(auto.arm64(is_static=False, per_channel=per_channel), "arm64")

    @classmethod
    def static(cls, calibration_sentences: Sequence[str] | None = None, per_channel: bool = True,
               calibration_size: int = 256) -> QuantizationConfig:
        """Static int8 (QDQ, s8 activations and weights, symmetric), ranges calibrated on corpus sentences."""
        conf = _optimum()
        qdq = conf.QuantizationConfig(is_static=True, format=conf.QuantFormat.QDQ,
                                      mode=conf.QuantizationMode.QLinearOps, activations_dtype=conf.QuantType.QInt8,
                                      activations_symmetric=True, weights_dtype=conf.QuantType.QInt8,
                                      weights_symmetric=True, per_channel=per_channel)
        return cls.from_optimum(qdq, "static", calibration_size=calibration_size,
                                calibration_sentences=list(calibration_sentences) if calibration_sentences else None)

    @classmethod
    def dynamic_int4_embeddings(cls, block_size: int = 128) -> QuantizationConfig:
        """Dynamic int8 for the encoder, and the token embedding table (most of a thin student's bytes)
        as symmetric 4-bit values with one fp32 scale per ``block_size`` values of a row: onnxruntime's
        ``GatherBlockQuantized``, made by its own weight-only quantizer.  About half the size of
        ``dynamic`` for a 48k-piece 2x256 student, at the same P@1 (docs/results.md)."""
        qcfg = cls.dynamic()
        qcfg.embedding_bits, qcfg.embedding_block_size, qcfg.name = 4, block_size, "dynamic-int4-embeddings"
        return qcfg

    @classmethod
    def fp16(cls) -> QuantizationConfig:
        return cls(mode="fp16", name="fp16")

    @classmethod
    def from_name(cls, name: str) -> QuantizationConfig:
        """The CLI's ``--quantize`` values."""
        presets = {"none": cls.none, "dynamic": cls.dynamic, "dynamic-int4-embeddings": cls.dynamic_int4_embeddings,
                   "dynamic-per-channel": cls.dynamic_per_channel, "avx2": cls.avx2, "avx512-vnni": cls.avx512_vnni,
                   "avx512_vnni": cls.avx512_vnni, "arm64": cls.arm64, "static": cls.static, "fp16": cls.fp16}
        if name not in presets:
            raise TinyglotError(f"unknown quantization {name!r}",
                                "choose one of: " + ", ".join(k for k in presets if k != "avx512_vnni"))
        return presets[name]()

    def to_optimum(self) -> OptimumQuantizationConfig:
        """optimum's configuration with these settings (``dynamic`` and ``static`` modes)."""
        if self.mode not in ("dynamic", "static"):
            raise TinyglotError(f"quantization mode {self.mode!r} has no optimum configuration")
        conf = _optimum()
        static = self.mode == "static"
        return conf.QuantizationConfig(
            is_static=static, format=conf.QuantFormat.QDQ if static else conf.QuantFormat.QOperator,
            mode=conf.QuantizationMode.QLinearOps if static else conf.QuantizationMode.IntegerOps,
            activations_dtype=_qtype(self.activation_type), activations_symmetric=self.activation_symmetric,
            weights_dtype=_qtype(self.weight_type), weights_symmetric=self.weight_symmetric,
            per_channel=self.per_channel, reduce_range=self.reduce_range,
            operators_to_quantize=list(self.operators) if self.operators else [])

    def validate(self) -> None:
        if self.mode not in MODES:
            raise TinyglotError(f"unknown quantization mode {self.mode!r}", f"choose one of: {', '.join(MODES)}")
        for what, value in (("weight_type", self.weight_type), ("activation_type", self.activation_type)):
            if value not in ("qint8", "quint8"):
                raise TinyglotError(f"{what} must be qint8 or quint8, got {value!r}")
        if self.embedding_bits not in (4, 8):
            raise TinyglotError(f"embedding_bits must be 8 or 4, got {self.embedding_bits!r}")
        if self.embedding_bits == 4 and self.mode != "dynamic":
            raise TinyglotError(f"4-bit embeddings go with dynamic int8 quantization, not {self.mode!r}",
                                "use --quantize dynamic-int4-embeddings")
        if self.embedding_block_size < 16 or self.embedding_block_size & (self.embedding_block_size - 1):
            raise TinyglotError(f"embedding_block_size must be a power of two >= 16, got {self.embedding_block_size}")
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
        if self.embedding_bits == 8:
            d.pop("embedding_block_size")
        return d

    @property
    def embed_layer_norm(self) -> bool:
        """Whether the graph optimiser may fuse the embedding lookups (:func:`optimize_graph`): not for a
        4-bit token table, which needs the table's own Gather."""
        return self.embedding_bits == 8

    @property
    def label(self) -> str:
        return self.name or self.mode


def _qtype(name: str) -> Any:
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


def _calibration_reader(tokenizer: Any, sentences: Sequence[str], max_len: int, batch_size: int) -> Any:
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

        def get_next(self) -> dict[str, np.ndarray] | None:
            batch = next(self._batches, None)
            return None if batch is None else {"input_ids": batch.ids, "attention_mask": batch.mask}

    return Reader()


def _quantizer_options(config: OptimumQuantizationConfig, operators: Sequence[str] | None) -> dict[str, Any]:
    """onnxruntime quantizer arguments of optimum's ``config``, as ``ORTQuantizer.quantize`` builds them.

    ``operators`` None: onnxruntime's own default op list, not optimum's: for static QDQ optimum lists
    the QDQ registry only, which leaves EmbedLayerNormalization (the embedding table) in fp32."""
    import onnx

    return {
        "op_types_to_quantize": list(operators) if operators else None, "per_channel": config.per_channel,
        "reduce_range": config.reduce_range, "weight_type": config.weights_dtype,
        "nodes_to_quantize": list(config.nodes_to_quantize) or None,
        "nodes_to_exclude": list(config.nodes_to_exclude) or None,
        # ORT-fused graphs carry contrib ops whose output types the quantizer cannot infer
        "extra_options": {"DefaultTensorType": onnx.TensorProto.FLOAT, "WeightSymmetric": config.weights_symmetric,
                          "ActivationSymmetric": config.activations_symmetric},
    }


def quantize_graph(src: str | Path, dst: str | Path, qcfg: QuantizationConfig, *, tokenizer: Any = None,
                   max_len: int = 128, workdir: str | Path | None = None) -> Path:
    """Quantize ``src`` into ``dst`` as ``qcfg`` says (``mode`` none copies), then split each fused
    ``SkipLayerNormalization`` of ``dst`` into standard ops (:func:`tinyglot.onnx_graph.unfuse_file`:
    onnxruntime's CPU kernel of it is the slower form).  This comes after quantization: onnxruntime's static
    quantizer leaves the fused op in float but tries to quantize a standard LayerNormalization, and fails
    on its bias."""
    import onnx

    qcfg.validate()
    # absolute paths: static calibration runs in a temporary working directory
    src, dst = Path(src).resolve(), Path(dst).resolve()
    workdir = Path(workdir).resolve() if workdir is not None else dst.parent
    if qcfg.mode == "none":
        shutil.copyfile(src, dst)
    elif qcfg.mode == "dynamic":
        from onnxruntime.quantization import quantize_dynamic

        with contextlib.ExitStack() as stack:
            if qcfg.embedding_bits == 4:  # the table first: the int8 quantizer would take its Gather too
                # in a folder of its own, gone afterwards (also on failure): no name beside dst is touched
                table = Path(stack.enter_context(tempfile.TemporaryDirectory(dir=workdir))) / "int4-table.onnx"
                quantize_token_table(src, table, qcfg.embedding_block_size)
                src = table
            # ORTQuantizer cannot pass DefaultTensorType, which fused graphs need: optimum's config, ORT's
            # quantizer
            with third_party_output("onnxruntime's quantizer output"):
                quantize_dynamic(src, dst, **_quantizer_options(qcfg.to_optimum(), qcfg.operators))
    elif qcfg.mode == "static":
        from onnxruntime.quantization import CalibrationMethod, QuantFormat, quantize_static

        if tokenizer is None:
            raise TinyglotError("static quantization needs the tokenizer for its calibration sentences")
        sentences = qcfg.calibration_sentences or calibration_sentences(qcfg.calibration_size)
        reader = _calibration_reader(tokenizer, sentences, max_len, qcfg.calibration_batch_size)
        method = {"minmax": CalibrationMethod.MinMax, "entropy": CalibrationMethod.Entropy,
                  "percentile": CalibrationMethod.Percentile}[qcfg.calibration_method]
        options = _quantizer_options(qcfg.to_optimum(), qcfg.operators)
        # the calibrator writes an augmented copy of the model next to its temporary files
        with tempfile.TemporaryDirectory(dir=workdir) as tmp, _chdir(tmp), \
                third_party_output("onnxruntime's quantizer output"):
            quantize_static(src, dst, reader, quant_format=QuantFormat.QDQ, calibrate_method=method,
                            activation_type=_qtype(qcfg.activation_type), **options)
    elif qcfg.mode == "fp16":
        from onnxruntime.transformers.float16 import convert_float_to_float16

        model = convert_float_to_float16(onnx.load(str(src)), keep_io_types=True)
        onnx.save(model, str(dst))
    unfuse_file(dst)
    return dst


TOKEN_TABLE = "word_embeddings"  # the token table's initializer name holds this (transformers' BertEmbeddings)


def quantize_token_table(src: str | Path, dst: str | Path, block_size: int = 128) -> str:
    """Write ``src`` with its token embedding table as 4-bit blocks: onnxruntime's weight-only quantizer
    (``MatMulNBitsQuantizer``, RTN, symmetric) turns that one Gather into ``GatherBlockQuantized``
    (com.microsoft); the position and type tables and every MatMul are left to the int8 pass.  Returns
    the Gather's name.  The quantizer raises the graph's opset to 21 for the int4 type; the standard ops
    are kept at the opset they were exported with (the new op is onnxruntime's own; int4 initializers
    need IR version 10, which it sets)."""
    import onnx
    from onnxruntime.quantization.matmul_nbits_quantizer import DefaultWeightOnlyQuantConfig, MatMulNBitsQuantizer
    from onnxruntime.quantization.quant_utils import QuantFormat

    model = onnx.load(str(src))
    constants = {init.name: init for init in model.graph.initializer}
    gathers = [n for n in model.graph.node if n.op_type == "Gather" and n.input[0] in constants]
    table = [n for n in gathers if TOKEN_TABLE in n.input[0]]
    if len(table) != 1:
        raise TinyglotError(f"4-bit embeddings: {len(table)} Gathers read a {TOKEN_TABLE} table in {src}, not one",
                            "export with --quantize dynamic (int8 embeddings); 4-bit tables need a BERT-style "
                            "student exported with the embedding fusion off")
    width = int(constants[table[0].input[0]].dims[-1])
    block_size = max(16, min(block_size, 1 << (width.bit_length() - 1)))  # a block no wider than a row
    opsets = {o.domain: o.version for o in model.opset_import}
    config = DefaultWeightOnlyQuantConfig(block_size=block_size, is_symmetric=True, quant_format=QuantFormat.QOperator,
                                          op_types_to_quantize=("Gather",), quant_axes=(("Gather", 1),))
    quantizer = MatMulNBitsQuantizer(model, nodes_to_exclude=[n.name for n in gathers if n is not table[0]],
                                     algo_config=config)
    # np.errstate: an all-zero row (the padding piece's) has a zero scale, which the quantizer divides by
    with third_party_output("onnxruntime's weight-only quantizer output"), \
            np.errstate(divide="ignore", invalid="ignore"):
        quantizer.process()
    for opset in quantizer.model.model.opset_import:
        if opset.domain in opsets:
            opset.version = opsets[opset.domain]
    quantizer.model.save_model_to_file(str(dst), use_external_data_format=False)
    return table[0].name


@contextlib.contextmanager
def _chdir(path: str | Path) -> Iterator[None]:
    old = os.getcwd()
    os.chdir(path)
    try:
        yield
    finally:
        os.chdir(old)


# ====================================================================== checking the result
def graph_stats(path: str | Path) -> dict:
    """Op counts and how the weights are stored: ``{"ops", "int8_ops", "weights": {dtype: elements}}``."""
    import onnx
    from onnx import TensorProto

    model = onnx.load(str(path), load_external_data=False)
    ops = Counter(n.op_type for n in model.graph.node)
    weights: Counter[str] = Counter()
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
        low = sum(w.get(t, 0) for t in ("int8", "uint8", "int4", "uint4")) / total
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


__all__ = [
    "INT8_OPS", "MODES", "OPTIMIZATIONS", "QuantizationConfig", "calibration_sentences", "graph_stats",
    "optimization_config", "optimize_graph", "quantize_graph", "quantize_token_table", "verify_quantized",
]
