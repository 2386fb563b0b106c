"""TFLite bundles: a student (or EMS teacher) converted with litert-torch, one signature per
(batch, sequence-length) bucket in one ``model.tflite``, run with the LiteRT interpreter.

The recipe: litert-torch converts at fixed input shapes only
(dynamic sequence length did not convert), so the file holds one signature per bucket, named
``b{batch}_s{seq}`` (e.g. ``b1_s16`` ... ``b32_s128``); the weights are stored once and shared by
all signatures.  Inputs are int32 ``input_ids`` / ``attention_mask`` (bound by name at run time),
the output is the L2-normalised mean-pooled embedding (pooling and normalisation in the graph, the
:class:`~tinyglot.export.bundle.EmbeddingModule` every format shares).

============  ==========================================================================
mode          how (``litert_torch.generative.quantize.quant_recipes``)
============  ==========================================================================
``none``      fp32
``dynamic``   ``full_dynamic_recipe()``: dynamic-range int8 (int8 weights, activations
              quantized at run time); the fast one on CPUs
``fp16``      ``full_fp16_recipe()``: fp16 weights, fp32 compute; halves the file
============  ==========================================================================

Every quantized file is checked by reading its flatbuffer: the constant weights must really be
int8 (or fp16) and take much less room than fp32 (the PT2E quantizer silently did nothing
here; the quant recipes work).

:class:`TFLiteEncoder` tokenises, truncates to the largest bucket (= the bundle's ``max_len``),
splits a call into sub-batches by each sentence's bucket (:func:`tinyglot.encoder.length_batches`),
picks the smallest sequence bucket that holds the longest sentence of each batch, pads, and runs
the signature whose batch fits (a larger batch is cut into chunks, a smaller one padded with
copies of its first row, which are dropped, as long as at most half the rows are padding; else
it runs in smaller signatures).
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from collections.abc import Callable, Iterator, Sequence

import numpy as np

from tinyglot.errors import TinyglotError
from tinyglot.quiet import third_party_output

from .bundle import TOKENIZER, Converter, ExportResult, Source, eager_attention, embedding_module_class, \
    export_bundle, open_source, read_bundle
from .parity import Gates

LITERT_PROGRESS = "LITERT_TORCH_SHOW_PROGRESS"

LOADER = "tinyglot.export.tflite:load_tflite_bundle"
FORMAT = "tflite"
MODEL_FILE = "model.tflite"
INPUT_NAMES = ("input_ids", "attention_mask")
MODES = ("none", "dynamic", "fp16")
DEFAULT_BUCKETS = (16, 32, 64, 128)
# Batch 1 (single-stream, as on a phone). Measured on lealla-small: 4 batch-1 signatures convert in
# about 1.5 minutes with 1.5 GB of memory; adding batches 8 and 32 (12 signatures) took 16 minutes
# on a loaded 2-core machine and doubled the file (18 MB int8) for no faster single-sentence use.
DEFAULT_BATCH_SIZES = (1,)
# TFLite schema TensorType -> (name, bytes per element)
_TYPES = {0: ("float32", 4), 1: ("float16", 2), 2: ("int32", 4), 3: ("uint8", 1), 4: ("int64", 8),
          9: ("int8", 1), 10: ("float64", 8), 7: ("int16", 2), 17: ("int4", 0.5)}

log = logging.getLogger(__name__)


def _require_litert(convert: bool = False):
    try:
        with third_party_output("LiteRT's import output"):  # litert-torch imports TensorFlow: C++ log lines
            import ai_edge_litert.interpreter  # noqa: F401
            if convert:
                import litert_torch  # noqa: F401
    except ImportError as exc:
        what = "litert-torch and ai-edge-litert" if convert else "ai-edge-litert"
        raise TinyglotError(f"TFLite {'export' if convert else 'bundles'} need {what} ({exc})",
                            "pip install 'tinyglot[export]'") from None


# ====================================================================== buckets
def signature_name(batch: int, seq: int) -> str:
    return f"b{int(batch)}_s{int(seq)}"


def parse_ints(text: str | Sequence[int] | None, what: str = "buckets") -> tuple[int, ...] | None:
    """``"16,32,64"`` -> ``(16, 32, 64)`` (sorted, unique); None stays None."""
    if text is None:
        return None
    items = text.split(",") if isinstance(text, str) else list(text)
    try:
        values = sorted({int(str(x).strip()) for x in items if str(x).strip()})
    except ValueError:
        raise TinyglotError(f"--{what} takes comma-separated integers, got {text!r}", f"e.g. --{what} 16,32,64,128") \
            from None
    if not values or values[0] < 1:
        raise TinyglotError(f"--{what} needs positive integers, got {text!r}", f"e.g. --{what} 16,32,64,128")
    return tuple(values)


def resolve_buckets(buckets: Sequence[int] | str | None, max_len: int) -> tuple[int, ...]:
    """Sequence buckets clipped to the model's ``max_len``; ``max_len`` is always the largest one,
    so that no sentence is cut shorter than in the source model."""
    values = parse_ints(buckets if buckets is not None else DEFAULT_BUCKETS) or ()
    if max_len < 1:
        raise TinyglotError(f"max_len must be >= 1, got {max_len}")
    return tuple(sorted({min(int(b), int(max_len)) for b in values} | {int(max_len)}))


# ====================================================================== conversion
def _quant_config(mode: str):
    if mode == "none":
        return None
    from litert_torch.generative.quantize import quant_recipes

    if mode == "dynamic":
        return quant_recipes.full_dynamic_recipe()
    if mode == "fp16":
        return quant_recipes.full_fp16_recipe()
    raise TinyglotError(f"unknown TFLite quantization {mode!r}", f"choose one of: {', '.join(MODES)}")


def convert_module(module, path: str | Path, shapes: Sequence[tuple[int, int]], mode: str = "none",
                   vocab_size: int = 100) -> Path:
    """litert-torch conversion of ``module(input_ids, attention_mask)`` with one signature per
    ``(batch, seq)`` in ``shapes`` (int32 inputs, passed as keyword arguments so that the file's
    inputs are named ``input_ids``/``attention_mask``)."""
    import torch

    with third_party_output("litert-torch's import output"):  # TensorFlow's C++ log lines
        import litert_torch

        qcfg = _quant_config(mode)
    path = Path(path)
    module.eval()
    conv = None
    gen = torch.Generator().manual_seed(0)
    for batch, seq in shapes:
        ids = torch.randint(2, max(3, vocab_size), (batch, seq), generator=gen, dtype=torch.int32)
        mask = torch.ones_like(ids)
        if seq > 1:
            mask[:, seq // 2:] = 0  # padded positions, so the masking path stays in the graph
        kwargs = {"input_ids": ids * mask, "attention_mask": mask}
        conv = (litert_torch if conv is None else conv).signature(signature_name(batch, seq), module,
                                                                   sample_kwargs=kwargs)
    inner = getattr(module, "model", module)
    if conv is None:
        raise TinyglotError("no signature to convert", "pass at least one batch size and sequence bucket")
    try:
        # ai-edge-quantizer's tqdm bars and size lines (print), torch.export warnings, TF's C++ logs
        with third_party_output("litert-torch's conversion output"), quiet_litert(), eager_attention(inner), \
                torch.no_grad():
            edge = conv.convert(quant_config=qcfg) if qcfg is not None else conv.convert()
            edge.export(str(path))
    except TinyglotError:
        raise
    except Exception as exc:  # the converter raises many types; name it for the user
        raise TinyglotError(f"litert-torch conversion failed: {type(exc).__name__}: {exc}",
                            "report this with the model's config.json") from exc
    return path


@contextlib.contextmanager
def quiet_litert() -> Iterator[None]:
    """litert-torch without its terminal noise: its INFO logs, and the [START]/[ DONE] line it prints
    on stdout for every conversion step (``LITERT_TORCH_SHOW_PROGRESS``)."""
    logger = logging.getLogger("litert_torch")
    level, shown = logger.level, os.environ.get(LITERT_PROGRESS)
    logger.setLevel(logging.WARNING)
    os.environ[LITERT_PROGRESS] = "n"
    try:
        yield
    finally:
        logger.setLevel(level)
        if shown is None:
            os.environ.pop(LITERT_PROGRESS, None)
        else:
            os.environ[LITERT_PROGRESS] = shown


class _AlignedBuffer:  # namespace for the lazily defined BufferT subclass
    cls = None


def _aligned_buffer_class():
    if _AlignedBuffer.cls is None:
        from ai_edge_litert import schema_py_generated as schema

        class AlignedBufferT(schema.BufferT):
            """A BufferT that packs its bytes 16-byte aligned, as the TFLite converter does
            (``force_align: 16`` in the schema; the generated Python packer ignores it)."""

            def Pack(self, builder):
                data = None
                if self.data is not None:
                    raw = np.ascontiguousarray(self.data, dtype=np.uint8).tobytes()
                    builder.StartVector(1, len(raw), 16)
                    builder.head = builder.Head() - len(raw)
                    builder.Bytes[builder.Head():builder.Head() + len(raw)] = raw
                    builder.vectorNumElems = len(raw)
                    data = builder.EndVector()
                schema.BufferStart(builder)
                if data is not None:
                    schema.BufferAddData(builder, data)
                schema.BufferAddOffset(builder, self.offset)
                schema.BufferAddSize(builder, self.size)
                return schema.BufferEnd(builder)

        _AlignedBuffer.cls = AlignedBufferT
    return _AlignedBuffer.cls


def shorten_tensor_names(path: str | Path) -> dict:
    """Rewrite ``path`` with short names for the tensors inside each signature.

    litert-torch names every tensor after its full module path (``...BertModel_encoder/...
    BertLayer_0/...Linear_query;...``), once per signature: with a dozen buckets the names take
    more room than int8 weights.  Signature inputs/outputs keep their names; the graph, the
    buffers (shared by the signatures) and the signature defs are unchanged.
    Returns ``{"bytes_before", "bytes_after"}``.
    """
    def shorten(model) -> None:
        for sg in model.subgraphs:
            keep = set(sg.inputs or []) | set(sg.outputs or [])
            for i, tensor in enumerate(sg.tensors):
                if i not in keep:
                    tensor.name = f"t{i}"

    before = Path(path).stat().st_size
    return {"bytes_before": before, "bytes_after": rewrite_tflite(path, shorten)}


def rewrite_tflite(path: str | Path, edit: Callable[[Any], None]) -> int:
    """Apply ``edit`` to the flatbuffer object model (``schema_py_generated.ModelT``) of the .tflite file
    ``path`` and write it back in place, buffers 16-byte aligned as the converter writes them; returns
    the new size in bytes."""
    from ai_edge_litert.tools import flatbuffer_utils as fu

    path = Path(path)
    model = fu.read_model_from_bytearray(bytearray(path.read_bytes()))
    edit(model)
    aligned = _aligned_buffer_class()
    for i, buf in enumerate(model.buffers):
        new = aligned()
        new.data, new.offset, new.size = buf.data, buf.offset, buf.size
        model.buffers[i] = new
    data = fu.convert_object_to_bytearray(model)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_bytes(data)
    os.replace(tmp, path)
    return len(data)


TOKEN_LOOKUP, POSITION_LOOKUP = "token_table_lookup", "small_table_lookup"  # the lookups gathers_to_lookups names
INT4_BLOCK = 128  # values per fp16 scale in a 4-bit table: the blocks of the ONNX bundles' 4-bit table (a
# narrower table takes the widest block of 64 or 32 that divides its rows)


def gathers_to_lookups(path: str | Path, vocab_size: int) -> dict[str, tuple[int, int]]:
    """Rewrite in place each GATHER of a constant 2-D float table (TensorFlow's form of an embedding lookup)
    as RESHAPE(ids -> [-1]) -> EMBEDDING_LOOKUP -> RESHAPE(back): ai-edge-quantizer quantizes a table only
    under EMBEDDING_LOOKUP.  The token table's lookup (``vocab_size`` rows) is named :data:`TOKEN_LOOKUP`, a
    smaller table's (positions, token types) :data:`POSITION_LOOKUP` and a number; returns each lookup's
    table shape by its name."""
    from ai_edge_litert import schema_py_generated as s

    done: dict[str, tuple[int, int]] = {}

    def opcode(model, builtin: int) -> int:
        for i, c in enumerate(model.operatorCodes):
            if max(c.builtinCode, c.deprecatedBuiltinCode) == builtin:
                return i
        code = s.OperatorCodeT()
        code.builtinCode, code.deprecatedBuiltinCode, code.version = builtin, builtin, 1
        model.operatorCodes.append(code)
        return len(model.operatorCodes) - 1

    def tensor(model, sg, name: str, ttype: int, shape: list[int], signature: list[int], values=None) -> int:
        t = s.TensorT()
        t.name, t.type, t.shape, t.shapeSignature, t.buffer = name.encode(), ttype, shape, signature, 0
        if values is not None:
            buf = s.BufferT()
            buf.data = np.asarray(values, dtype=np.int32).view(np.uint8)
            model.buffers.append(buf)
            t.buffer = len(model.buffers) - 1
        sg.tensors.append(t)
        return len(sg.tensors) - 1

    def operator(index: int, inputs: list[int], outputs: list[int], new_shape: list[int] | None):
        op = s.OperatorT()
        op.opcodeIndex, op.inputs, op.outputs = index, inputs, outputs
        op.builtinOptionsType = s.BuiltinOptions.NONE
        if new_shape is not None:
            op.builtinOptionsType, op.builtinOptions = s.BuiltinOptions.ReshapeOptions, s.ReshapeOptionsT()
            op.builtinOptions.newShape = new_shape
        return op

    def edit(model) -> None:
        sg = model.subgraphs[0]
        lookup, reshape = opcode(model, s.BuiltinOperator.EMBEDDING_LOOKUP), opcode(model, s.BuiltinOperator.RESHAPE)
        ops = []
        for op in sg.operators:
            code = model.operatorCodes[op.opcodeIndex]
            table = sg.tensors[op.inputs[0]] if op.inputs is not None and len(op.inputs) else None
            if not (max(code.builtinCode, code.deprecatedBuiltinCode) == s.BuiltinOperator.GATHER and table is not None
                    and model.buffers[table.buffer].data is not None and len(table.shape) == 2
                    and table.type == s.TensorType.FLOAT32 and op.builtinOptions.axis == 0
                    and op.builtinOptions.batchDims == 0):
                ops.append(op)
                continue
            rows, dim = int(table.shape[0]), int(table.shape[1])
            name = TOKEN_LOOKUP if rows == vocab_size else f"{POSITION_LOOKUP}_{len(done)}"
            ids = sg.tensors[op.inputs[1]]
            signature = [int(x) for x in (ids.shapeSignature if ids.shapeSignature is not None
                                          and len(ids.shapeSignature) else ids.shape)]
            n = int(np.prod(ids.shape))
            flat_shape = tensor(model, sg, f"{name}/flat_shape", s.TensorType.INT32, [1], [1], [-1])
            flat = tensor(model, sg, f"{name}/ids", s.TensorType.INT32, [n], [-1])
            rows_out = tensor(model, sg, name, s.TensorType.FLOAT32, [n, dim], [-1, dim])
            back = tensor(model, sg, f"{name}/out_shape", s.TensorType.INT32, [len(signature) + 1],
                          [len(signature) + 1], [*signature, dim])
            ops += [operator(reshape, [op.inputs[1], flat_shape], [flat], [-1]),
                    operator(lookup, [flat, op.inputs[0]], [rows_out], None),
                    operator(reshape, [rows_out, back], [op.outputs[0]], [*signature, dim])]
            done[name] = (rows, dim)
        sg.operators = ops

    rewrite_tflite(path, edit)
    return done


def int4_token_table(src: str | Path, dst: str | Path, vocab_size: int) -> None:
    """``dst``: the float file ``src`` quantized with ai-edge-quantizer, dynamic-range int8 for the fully
    connected layers and the small tables (positions, token types; per channel), the token table in 4-bit blocks of
    :data:`INT4_BLOCK` (its lookup dequantizes only the rows a sentence reads), the weights kept inside the
    flatbuffer (MediaPipe's metadata writer re-serialises the flatbuffer alone)."""
    import shutil
    import warnings

    from tinyglot.quiet import third_party_output

    with third_party_output("ai-edge-quantizer's import output"):
        from ai_edge_quantizer import qtyping, quantizer

    work = Path(dst).with_name(Path(dst).name + ".lookups.tflite")
    shutil.copyfile(src, work)
    try:
        tables = gathers_to_lookups(work, vocab_size)
        if TOKEN_LOOKUP not in tables:
            raise TinyglotError(f"{src}: no lookup of a {vocab_size}-row token table to store in 4 bits",
                                "export with --quantize dynamic (an int8 table)")
        width = tables[TOKEN_LOOKUP][1]
        block = next((b for b in (INT4_BLOCK, 64, 32) if width % b == 0), None)
        granularity, op = qtyping.QuantGranularity, qtyping.TFLOperationName
        q = quantizer.Quantizer(str(work))
        q.add_dynamic_config(regex=".*", operation_name=op.FULLY_CONNECTED, num_bits=8,
                             granularity=granularity.CHANNELWISE)
        q.add_dynamic_config(regex=f"{POSITION_LOOKUP}_.*", operation_name=op.EMBEDDING_LOOKUP, num_bits=8,
                             granularity=granularity.CHANNELWISE)
        q.add_dynamic_config(regex=TOKEN_LOOKUP, operation_name=op.EMBEDDING_LOOKUP, num_bits=4,
                             granularity=granularity[f"BLOCKWISE_{block}"] if block else granularity.CHANNELWISE)
        Path(dst).unlink(missing_ok=True)
        with third_party_output("ai-edge-quantizer's output"), warnings.catch_warnings():
            warnings.simplefilter("ignore")  # its deprecation and casting notices, not the user's business
            q.quantize(enable_progress_report=False).export_model(str(dst))
    finally:
        work.unlink(missing_ok=True)
    rewrite_tflite(dst, lambda model: None)  # the weights ai-edge-quantizer wrote after the flatbuffer, inside it


def tflite_stats(path: str | Path) -> dict:
    """What a .tflite file stores: signatures, and the constant buffers by dtype
    (``{"weights": {dtype: elements}, "weight_bytes": {dtype: bytes}, "bytes", "subgraphs"}``).
    Each buffer is counted once even if several signatures (subgraphs) share it."""
    from ai_edge_litert import schema_py_generated as schema

    buf = Path(path).read_bytes()
    model = schema.Model.GetRootAs(buf, 0)
    seen: set[int] = set()
    elements: Counter = Counter()
    nbytes: Counter = Counter()
    for g in range(model.SubgraphsLength()):
        sg = model.Subgraphs(g)
        for t in range(sg.TensorsLength()):
            tensor = sg.Tensors(t)
            b = tensor.Buffer()
            if b <= 0 or b in seen or b >= model.BuffersLength():
                continue
            buffer = model.Buffers(b)
            size = buffer.DataLength() or int(buffer.Size() or 0)
            if size == 0:
                continue
            seen.add(b)
            name, width = _TYPES.get(tensor.Type(), (f"type{tensor.Type()}", 1))
            elements[name] += int(size / width) if width else size
            nbytes[name] += size
    return {"weights": dict(elements), "weight_bytes": dict(nbytes), "bytes": len(buf),
            "subgraphs": model.SubgraphsLength()}


def verify_quantized(path: str | Path, mode: str, fp32_weight_bytes: int | None = None) -> dict:
    """Fail loudly when a quantized file is not: weights not int8/fp16, or not much smaller than fp32.

    ``fp32_weight_bytes``: 4 x the source's parameter count (default: the file's constants as if
    they were all fp32)."""
    stats = tflite_stats(path)
    if mode == "none":
        return stats
    w, wb = stats["weights"], stats["weight_bytes"]
    total = sum(w.values()) or 1
    const_bytes = sum(wb.values())
    ref = fp32_weight_bytes or 4 * total
    ratio = const_bytes / max(1, ref)
    if mode == "dynamic":
        low = (w.get("int8", 0) + w.get("uint8", 0) + w.get("int4", 0)) / total
        if low < 0.5 or ratio > 0.6:
            raise TinyglotError(
                f"the dynamic int8 TFLite model was not really quantized: {100 * low:.0f}% of constant "
                f"elements int8, weights take {ratio:.2f}x their fp32 size",
                "use litert-torch's quant_recipes.full_dynamic_recipe (the PT2E quantizer "
                "silently does nothing)")
    elif mode == "fp16":
        half = w.get("float16", 0) / total
        if half < 0.5 or ratio > 0.8:  # position constants folded per bucket stay fp32
            raise TinyglotError(
                f"the fp16 TFLite model was not converted: {100 * half:.0f}% of constant elements fp16, "
                f"weights take {ratio:.2f}x their fp32 size", "use quant_recipes.full_fp16_recipe")
    else:
        raise TinyglotError(f"unknown TFLite quantization {mode!r}", f"choose one of: {', '.join(MODES)}")
    stats["weight_ratio"] = ratio
    return stats


# ====================================================================== running a bundle
@dataclass(frozen=True)
class _Signature:
    name: str
    batch: int
    seq: int
    ids: str
    mask: str
    output: str


class TFLiteEncoder:
    """``Encoder`` over a multi-signature .tflite file (one signature per (batch, seq) bucket).

    Inputs are bound by name (``input_ids``/``attention_mask``; files whose inputs are positional
    ``args_0``/``args_1`` map in that order); shapes are read from the file, not from its names.
    """

    def __init__(self, model_path: str | Path, tokenizer, max_len: int | None = None, threads: int = 1,
                 name: str = "") -> None:
        _require_litert()
        from ai_edge_litert.interpreter import Interpreter

        self.model_path = Path(model_path)
        self.tokenizer = tokenizer
        self.name = name or f"tflite ({self.model_path.parent.name})"
        try:
            # allocating applies the XNNPACK delegate now, inside the capture: LiteRT's C++ runtime
            # prints "INFO: Created TensorFlow Lite XNNPACK delegate for CPU." on stderr then
            with third_party_output("LiteRT's output"):
                self.interpreter = Interpreter(model_path=str(self.model_path), num_threads=max(1, int(threads)))
                self.interpreter.allocate_tensors()
        except Exception as exc:
            raise TinyglotError(f"LiteRT cannot open {self.model_path} ({type(exc).__name__}: {exc})",
                                "re-export the bundle with `tinyglot export --format tflite`") from None
        self._runners: dict[str, Any] = {}
        self.signatures: list[_Signature] = []
        for sig_name, io in self.interpreter.get_signature_list().items():
            inputs = list(io["inputs"])
            if set(INPUT_NAMES) <= set(inputs):
                ids_name, mask_name = INPUT_NAMES
            elif set(inputs) == {"args_0", "args_1"}:
                ids_name, mask_name = "args_0", "args_1"
            else:
                raise TinyglotError(f"{self.model_path} signature {sig_name!r} takes inputs {inputs}",
                                    f"tinyglot feeds {list(INPUT_NAMES)}; re-export with `tinyglot export`")
            details = self._runner(sig_name).get_input_details()[ids_name]
            batch, seq = (int(x) for x in details["shape"])
            self.signatures.append(_Signature(sig_name, batch, seq, ids_name, mask_name, io["outputs"][0]))
        if not self.signatures:
            raise TinyglotError(f"{self.model_path} has no signatures", "re-export with `tinyglot export`")
        self.buckets = tuple(sorted({s.seq for s in self.signatures}))
        self.max_len = min(int(max_len), self.buckets[-1]) if max_len else self.buckets[-1]
        self._by_seq = {seq: sorted((s for s in self.signatures if s.seq == seq), key=lambda s: s.batch)
                        for seq in self.buckets}

    def _runner(self, name: str):
        if name not in self._runners:
            self._runners[name] = self.interpreter.get_signature_runner(name)
        return self._runners[name]

    def bucket_for(self, length: int) -> int:
        """The smallest sequence bucket that holds ``length`` tokens (the largest one if none does)."""
        for seq in self.buckets:
            if seq >= length:
                return seq
        return self.buckets[-1]

    def signature_for(self, rows: int, seq: int) -> _Signature:
        """The signature run next for ``rows`` rows at bucket ``seq``: the smallest batch that holds
        them if that wastes at most half of it on padding rows, else the largest batch <= ``rows``
        (the rest follows in further runs); more rows than any batch: the largest, in chunks."""
        sigs = self._by_seq[seq]
        fits = [s for s in sigs if s.batch >= rows]
        if fits and fits[0].batch <= 2 * rows:
            return fits[0]
        below = [s for s in sigs if s.batch <= rows]
        return below[-1] if below else fits[0]

    def run_batch(self, ids: np.ndarray, mask: np.ndarray) -> np.ndarray:
        """Embeddings of already tokenised rows (any count, any width <= the largest bucket)."""
        ids = np.asarray(ids)
        mask = np.asarray(mask)
        n, width = ids.shape
        cols = np.nonzero(mask.any(axis=0))[0]
        used = int(cols.max()) + 1 if len(cols) else 1  # the last column any row attends to
        seq = self.bucket_for(used)  # longer rows are truncated to the largest bucket
        full_ids = np.zeros((n, seq), dtype=np.int32)
        full_mask = np.zeros((n, seq), dtype=np.int32)
        w = min(width, seq)
        full_ids[:, :w] = ids[:, :w]
        full_mask[:, :w] = mask[:, :w]
        out: list[np.ndarray] = []
        start = 0
        while start < n:
            sig = self.signature_for(n - start, seq)
            chunk_ids = full_ids[start:start + sig.batch]
            chunk_mask = full_mask[start:start + sig.batch]
            real = len(chunk_ids)
            if real < sig.batch:  # pad rows with copies of the first row; their outputs are dropped
                fill = sig.batch - real
                chunk_ids = np.concatenate([chunk_ids, np.repeat(chunk_ids[:1], fill, axis=0)])
                chunk_mask = np.concatenate([chunk_mask, np.repeat(chunk_mask[:1], fill, axis=0)])
            result = self._runner(sig.name)(**{sig.ids: np.ascontiguousarray(chunk_ids),
                                               sig.mask: np.ascontiguousarray(chunk_mask)})
            out.append(np.asarray(result[sig.output], dtype=np.float32)[:real])
            start += real
        return np.concatenate(out) if out else np.zeros((0, 0), dtype=np.float32)

    def encode(self, sentences: Sequence[str], batch_size: int = 64) -> np.ndarray:
        """:func:`~tinyglot.encoder.encode_token_batches`, but sub-batched by what a row costs here:
        its sequence bucket (a run pads every row to the bucket of its longest), so rows of one
        bucket share runs and no row runs in a larger bucket than its own."""
        from tinyglot.encoder import check_sentences, encode_by_length, token_batch_runner

        ids = self.tokenizer.encode_ids(check_sentences(sentences), self.max_len, allow_empty=True)
        lengths = [self.bucket_for(len(x)) if x else 0 for x in ids]  # no tokens: a zero row
        # budget 1: rows of two buckets never share a run (a few rows of bucket 32 among many of 48 are within
        # the padding budget, but would run padded to 48)
        return encode_by_length(lengths, batch_size, token_batch_runner(self, ids), budget=1.0)


def load_tflite_bundle(path: str | Path, threads: int = 1, **_: Any) -> TFLiteEncoder:
    """The loader named in a TFLite bundle's config.json: ``tinyglot.load(bundle)`` calls it."""
    from tinyglot.models import folder_file, load_folder_tokenizer

    path = Path(path)
    cfg = read_bundle(path, FORMAT)
    tokenizer = load_folder_tokenizer(path, cfg.get("tokenizer", TOKENIZER), cfg.get("tokenizer_sha256"), "bundle",
                                      "exported")
    q = cfg.get("quantization", {}).get("mode", "")
    return TFLiteEncoder(folder_file(path, cfg["files"][0], "'files'"), tokenizer, cfg["max_len"], threads=threads,
                         name=f"tflite{'-' + q if q and q != 'none' else ''} ({path.name})")


# ====================================================================== the whole export
def _n_params(module) -> int:
    return sum(p.numel() for p in module.parameters())


@dataclass
class TFLiteConverter(Converter):
    """TFLite's part of :func:`~tinyglot.export.bundle.export_bundle`: litert-torch conversion with one
    signature per (batch, bucket), shortened tensor names, quantization check."""

    mode: str = "none"
    shapes: tuple[tuple[int, int], ...] = ()
    threads: int = 1
    module_factory: Callable[[Any], Any] | None = None
    renamed: dict = field(default_factory=dict)

    def convert(self, source: Source, work: Path, say: Callable[[str], None]) -> dict:
        factory = self.module_factory or embedding_module_class()
        batches = sorted({b for b, _ in self.shapes})
        seqs = sorted({s for _, s in self.shapes})
        say(f"converting {source.path} ({source.config.get('kind')}) with litert-torch: {len(self.shapes)} "
            f"signatures (batches {batches} x buckets {seqs}), quantization {self.mode}")
        final = convert_module(factory(source.model), work / MODEL_FILE, self.shapes, self.mode,
                               source.tokenizer.vocab_size)
        self.renamed = shorten_tensor_names(final)
        return verify_quantized(final, self.mode, 4 * _n_params(source.model))

    def open(self, out: Path, source: Source) -> TFLiteEncoder:
        return TFLiteEncoder(out / MODEL_FILE, source.tokenizer, source.max_len, threads=self.threads)

    def gates(self) -> Gates:
        return Gates.for_mode(self.mode)

    def extra(self, stats: dict, exported: Any, source: Source) -> dict:
        return {"tflite": {"converter": "litert-torch", "buckets": sorted({s for _, s in self.shapes}),
                           "batch_sizes": list(dict.fromkeys(b for b, _ in self.shapes)),
                           "signatures": [{"name": s.name, "batch": s.batch, "seq": s.seq}
                                          for s in exported.signatures],
                           "inputs": list(INPUT_NAMES), "input_dtype": "int32",
                           "weights": stats["weights"], "weight_bytes": stats["weight_bytes"],
                           "bytes_before_renaming": self.renamed["bytes_before"]}}


def export_tflite(
    model: str | Path,
    out: str | Path,
    quantization: str = "none",
    *,
    buckets: Sequence[int] | str | None = DEFAULT_BUCKETS,
    batch_sizes: Sequence[int] | str | None = DEFAULT_BATCH_SIZES,
    threads: int = 1,
    max_sentences: int = 100,
    testset=None,
    gates: Gates | None = None,
    parity_gate: bool = True,
    module_factory: Callable[[Any], Any] | None = None,
    extra_config: dict | None = None,
    say: Callable[[str], None] = lambda msg: None,
) -> ExportResult:
    """Export the student or teacher at ``model`` to a TFLite bundle in ``out`` and check its parity.

    ``quantization``: ``none`` | ``dynamic`` (int8 dynamic range) | ``fp16``.  ``buckets``:
    sequence lengths (clipped to the model's ``max_len``, which is always the largest bucket);
    ``batch_sizes``: the batch of each signature (one signature per batch x bucket).
    ``module_factory(source_model)`` builds the module to convert (default ``EmbeddingModule``).
    As for ONNX, ``config.json`` is written last and only if the parity gates pass (or
    ``parity_gate=False``).  Returns an :class:`~tinyglot.export.bundle.ExportResult`.
    """
    _require_litert(convert=True)
    mode = quantization or "none"
    if mode not in MODES:
        raise TinyglotError(f"unknown TFLite quantization {mode!r}", f"choose one of: {', '.join(MODES)}")
    source, out = open_source(model, out)
    seqs = resolve_buckets(buckets, source.max_len)
    batches = parse_ints(batch_sizes if batch_sizes is not None else DEFAULT_BATCH_SIZES, "batch-sizes") or ()
    qdict = {"mode": mode, "name": mode,
             "recipe": {"none": None, "dynamic": "quant_recipes.full_dynamic_recipe",
                        "fp16": "quant_recipes.full_fp16_recipe"}[mode]}
    shapes = tuple((b, s) for s in seqs for b in batches)
    converter = TFLiteConverter(fmt=FORMAT, loader=LOADER, label=f"tflite {mode}", quantization=qdict,
                                model_files=(MODEL_FILE,), mode=mode, shapes=shapes, threads=threads,
                                module_factory=module_factory)
    return export_bundle(converter, model, out, source=source, testset=testset, max_sentences=max_sentences,
                         gates=gates, parity_gate=parity_gate, extra_config=extra_config, say=say)


__all__ = [
    "DEFAULT_BATCH_SIZES", "DEFAULT_BUCKETS", "TFLiteConverter", "TFLiteEncoder", "convert_module", "export_tflite",
    "load_tflite_bundle", "parse_ints", "resolve_buckets", "rewrite_tflite", "shorten_tensor_names", "signature_name",
    "tflite_stats",
    "verify_quantized",
]
