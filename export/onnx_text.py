"""ONNX bundles that take RAW STRINGS: the SentencePiece tokenizer is inside the graph.

One ``model.onnx`` runs on onnxruntime + onnxruntime-extensions, with no tinyglot, no
sentencepiece and no Python pre-processing::

    import numpy as np, onnxruntime as ort, onnxruntime_extensions as ortx
    so = ort.SessionOptions()
    so.register_custom_ops_library(ortx.get_library_path())
    session = ort.InferenceSession("model.onnx", so, providers=["CPUExecutionProvider"])
    emb, ids = session.run(None, {"text": np.array(["Hallo Welt", "Bonjour"], dtype=object)})

The graph:

1. ``SentencepieceTokenizer`` (domain ``ai.onnx.contrib``) with the bundle's ``tokenizer.model``
   bytes as its ``model`` attribute: the same proto, hence the same normaliser (NFKC, whitespace,
   case folding), no BOS/EOS.  It tokenises the WHOLE string (1 MB takes about 0.25 s);
2. truncation to the first ``max_len`` ids, padding with id 0 to the longest sentence of the batch
   (at least one column), attention mask: standard ONNX ops on the ragged (ids, row splits);
3. the encoder of :mod:`tinyglot.export.onnx` (onnxruntime transformer fusions, optionally dynamic
   int8 quantization of the encoder part only) with mean pooling and L2 normalisation;
4. rows of sentences with no token at all (``""``, whitespace, zero-width spaces) are set to zero.

One runtime limit: onnxruntime's string tensors end at a NUL character (U+0000); the text after
one is not seen (the Python tokenizer sees it).

Inputs and outputs: ``text`` (string ``[batch]``, any batch size, 0 included) ->
``sentence_embedding`` (float32 ``[batch, dim]``) and ``input_ids`` (int64 ``[batch, width]``,
the truncated, padded ids: for checks against other SentencePiece runtimes).

:class:`OnnxTextEncoder` (``tinyglot.load(bundle)``) validates like every tinyglot encoder
(a list of strings, not empty; an empty or whitespace-only sentence is a ``TinyglotError``) and
feeds the strings as they are.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from tinyglot.encoder import check_sentences, text_lengths
from tinyglot.errors import TinyglotError
from tinyglot.onnx_graph import inference_session
from tinyglot.ortx import ortx_library_path, preload_ortx

from .bundle import (ExportResult, Source, StringBundleConverter, bundle_tokenizer, embedding_module_class,
                     export_bundle, read_bundle)
from .parity import STANDALONE_ONNX, Gates, ParityReport, parity_paragraph

LOADER = "tinyglot.export.onnx_text:load_onnx_text_bundle"
FORMAT = "onnx-text"
MODEL_FILE = "model.onnx"
INPUT_NAME = "text"
OUTPUT_NAME = "sentence_embedding"
IDS_NAME = "input_ids"
MASK_NAME = "attention_mask"
# dynamic: int8 per tensor; dynamic-per-channel and the CPU presets int8 per channel (students started as
# e5-small's layers need it: per tensor, their parity falls to a mean cosine of 0.90-0.97)
MODES = ("none", "dynamic", "dynamic-int4-embeddings", "dynamic-per-channel", "avx2", "avx512-vnni", "arm64")
CONTRIB_DOMAIN = "ai.onnx.contrib"
MAX_P1_DROP = 0.3  # a string-in bundle may cost at most 0.3 P@1 points against the token-id path

log = logging.getLogger(__name__)


def _require_ortx():
    try:
        import onnx  # noqa: F401
        import onnxruntime  # noqa: F401
    except ImportError as exc:
        raise TinyglotError(f"onnx-text bundles need onnx, onnxruntime and onnxruntime-extensions ({exc})",
                            "pip install 'tinyglot[export]'") from None
    ortx_library_path()


def gates_for_mode(mode: str) -> Gates:
    """The parity gates of a string-in bundle: the ONNX ones with a P@1 drop of at most 0.3 points."""
    gates = Gates.for_mode(mode)
    gates.max_p1_drop = MAX_P1_DROP
    return gates


# ====================================================================== the graph
def tokenizer_nodes(sp_proto: bytes, max_len: int, ids_type: int, mask_type: int) -> tuple[list, list]:
    """``(nodes, initializers)`` turning the string input ``text`` into ``input_ids`` /
    ``attention_mask`` ((batch, width), truncated to ``max_len``, padded with 0) and ``_tg_has_tokens``
    (bool (batch, 1)).  ``ids_type``/``mask_type``: the ONNX element types the encoder declares."""
    from onnx import TensorProto, helper

    def const(name: str, values, dtype=TensorProto.INT64, dims=None):
        vals = list(values) if isinstance(values, (list, tuple)) else [values]
        return helper.make_tensor(name, dtype, [] if dims is None and not isinstance(values, (list, tuple))
                                  else (dims or [len(vals)]), vals)

    p = "_tg_"  # prefix of every internal name
    inits = [
        const(p + "nbest", 0), const(p + "alpha", 0.0, TensorProto.FLOAT),
        const(p + "false", False, TensorProto.BOOL),
        const(p + "zero", 0), const(p + "one", 1), const(p + "max_len", int(max_len)),
        const(p + "s0", [0]), const(p + "s1", [1]), const(p + "sm1", [-1]), const(p + "sbig", [2**62]),
        const(p + "ax0", [0]), const(p + "ax1", [1]), const(p + "pad", [0]),
    ]
    n = helper.make_node
    nodes = [
        n("SentencepieceTokenizer", [INPUT_NAME, p + "nbest", p + "alpha", p + "false", p + "false", p + "false"],
          [p + "tokens32", p + "splits"], domain=CONTRIB_DOMAIN, name=p + "sentencepiece", model=bytes(sp_proto)),
        n("Slice", [p + "splits", p + "s0", p + "sm1", p + "ax0"], [p + "starts"]),
        n("Slice", [p + "splits", p + "s1", p + "sbig", p + "ax0"], [p + "ends"]),
        n("Sub", [p + "ends", p + "starts"], [p + "lens"]),
        n("Min", [p + "lens", p + "max_len"], [p + "tlen"]),
        # width = max(1, longest truncated length); the 1 also makes an empty batch well defined
        n("Concat", [p + "tlen", p + "s1"], [p + "tlen1"], axis=0),
        n("ReduceMax", [p + "tlen1"], [p + "width"], keepdims=0),
        n("Range", [p + "zero", p + "width", p + "one"], [p + "pos"]),
        n("Unsqueeze", [p + "pos", p + "ax0"], [p + "pos_row"]),
        n("Unsqueeze", [p + "starts", p + "ax1"], [p + "starts_col"]),
        n("Unsqueeze", [p + "tlen", p + "ax1"], [p + "tlen_col"]),
        n("Add", [p + "starts_col", p + "pos_row"], [p + "idx"]),
        n("Less", [p + "pos_row", p + "tlen_col"], [p + "valid"]),
        # gather from the tokens with a trailing 0: positions past a sentence's end read the pad
        n("Cast", [p + "tokens32"], [p + "tokens"], to=TensorProto.INT64),
        n("Concat", [p + "tokens", p + "pad"], [p + "tokens_pad"], axis=0),
        n("Shape", [p + "tokens"], [p + "n_tokens1"]),
        n("Squeeze", [p + "n_tokens1", p + "ax0"], [p + "n_tokens"]),
        n("Where", [p + "valid", p + "idx", p + "n_tokens"], [p + "safe_idx"]),
        n("Gather", [p + "tokens_pad", p + "safe_idx"], [p + "ids64"], axis=0),
        n("Cast", [p + "ids64"], [IDS_NAME], to=ids_type),
        n("Cast", [p + "valid"], [MASK_NAME], to=mask_type),
        n("Greater", [p + "tlen_col", p + "zero"], [p + "has_tokens"]),
    ]
    return nodes, inits


def add_tokenizer(encoder_path: str | Path, dst: str | Path, sp_proto: bytes, max_len: int) -> Path:
    """Prepend the tokenizer to an encoder graph with inputs ``input_ids``/``attention_mask`` and
    output ``sentence_embedding``; write the string-in graph to ``dst`` (one file)."""
    import onnx
    from onnx import TensorProto, helper

    model = onnx.load(str(encoder_path))
    graph = model.graph
    types = {i.name: i.type.tensor_type.elem_type for i in graph.input}
    if IDS_NAME not in types or OUTPUT_NAME not in [o.name for o in graph.output]:
        raise TinyglotError(f"{encoder_path} is not a tinyglot encoder graph (inputs {sorted(types)})",
                            "export the encoder with tinyglot.export.onnx.export_module first")
    nodes, inits = tokenizer_nodes(sp_proto, max_len, types[IDS_NAME], types.get(MASK_NAME, TensorProto.INT64))
    if MASK_NAME not in types:  # an encoder that derives its own mask: drop ours
        nodes = [nd for nd in nodes if MASK_NAME not in nd.output]
    # rows without any token: the encoder pools nothing; make them exactly zero, never NaN
    emb_raw = "_tg_embedding_raw"
    for node in graph.node:
        node.output[:] = [emb_raw if o == OUTPUT_NAME else o for o in node.output]
        node.input[:] = [emb_raw if i == OUTPUT_NAME else i for i in node.input]
    post = [helper.make_node("Where", ["_tg_has_tokens", emb_raw, "_tg_zero_f"], [OUTPUT_NAME], name="_tg_zero_empty")]
    inits.append(helper.make_tensor("_tg_zero_f", TensorProto.FLOAT, [], [0.0]))
    old_nodes = list(graph.node)
    del graph.node[:]
    graph.node.extend([*nodes, *old_nodes, *post])
    graph.initializer.extend(inits)
    del graph.input[:]
    graph.input.append(helper.make_tensor_value_info(INPUT_NAME, TensorProto.STRING, ["batch"]))
    dim = None
    for out in graph.output:
        if out.name == OUTPUT_NAME:
            dims = out.type.tensor_type.shape.dim
            dim = dims[1].dim_value if len(dims) > 1 and dims[1].dim_value else None
    del graph.output[:]
    graph.output.extend([
        helper.make_tensor_value_info(OUTPUT_NAME, TensorProto.FLOAT, ["batch", dim if dim else "dim"]),
        helper.make_tensor_value_info(IDS_NAME, types[IDS_NAME], ["batch", "width"]),
    ])
    del graph.value_info[:]  # shapes inferred for the old inputs no longer hold
    if not any(o.domain == CONTRIB_DOMAIN for o in model.opset_import):
        model.opset_import.append(helper.make_opsetid(CONTRIB_DOMAIN, 1))
    graph.doc_string = ("tinyglot sentence encoder: text (string [batch]) -> sentence_embedding (L2-normalised "
                        f"mean pooling), input_ids; SentencePiece inside, truncation to {int(max_len)} tokens")
    onnx.save(model, str(dst))
    return Path(dst)


# ====================================================================== running a bundle
def session_options(threads: int = 1):
    """onnxruntime session options with the onnxruntime-extensions ops registered."""
    _require_ortx()
    if not preload_ortx():
        raise TinyglotError(
            "onnxruntime-extensions cannot be loaded into a process that has already imported TensorFlow "
            "(onnxruntime crashes); MediaPipe and SavedModel bundles import it",
            "open onnx-text bundles before tflite-mediapipe or savedmodel bundles, or in another process")
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.register_custom_ops_library(ortx_library_path())
    so.intra_op_num_threads = max(0, int(threads))
    so.inter_op_num_threads = 1
    so.log_severity_level = 3
    return so


class OnnxTextEncoder:
    """``Encoder`` over a string-in ONNX file: strings go into the graph as they are.  ``tokenizer``: the
    bundle's SentencePiece model, to sort a call's sentences by tokens into sub-batches (by characters
    without it)."""

    def __init__(self, model_path: str | Path, max_len: int, threads: int = 1, name: str = "",
                 tokenizer: Any = None) -> None:
        so = session_options(threads)
        self.model_path = Path(model_path)
        self.max_len = int(max_len)
        self.tokenizer = tokenizer
        self.name = name or f"onnx-text ({self.model_path.parent.name})"
        try:
            self.session = inference_session(self.model_path, so)
        except Exception as exc:  # noqa: BLE001 - onnxruntime raises its own exception types
            raise TinyglotError(f"onnxruntime cannot open {self.model_path} ({type(exc).__name__}: {exc})",
                                "re-export the bundle with `tinyglot export --format onnx-text`") from None
        inputs = [i.name for i in self.session.get_inputs()]
        if inputs != [INPUT_NAME]:
            raise TinyglotError(f"{self.model_path} takes inputs {inputs}, not [{INPUT_NAME!r}]",
                                "re-export the bundle with `tinyglot export --format onnx-text`")

    def run_texts(self, texts: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
        """``(embeddings, input_ids)`` of a batch of strings, straight from the graph (no checks)."""
        emb, ids = self.session.run([OUTPUT_NAME, IDS_NAME], {INPUT_NAME: np.array(list(texts), dtype=object)})
        return emb, ids

    def encode(self, sentences: Sequence[str], batch_size: int = 64) -> np.ndarray:
        from tinyglot.encoder import encode_by_length

        texts = check_sentences(sentences)

        def run(rows: np.ndarray) -> np.ndarray:
            emb, ids = self.run_texts([texts[i] for i in rows])
            return np.where(np.any(ids != 0, axis=1, keepdims=True), emb, 0.0)  # no tokens: the zero vector

        # sorted by tokens: the graph pads each batch to its longest sentence
        return encode_by_length(text_lengths(texts, self.tokenizer, self.max_len), batch_size, run)


def load_onnx_text_bundle(path: str | Path, threads: int = 1, **_: Any) -> OnnxTextEncoder:
    """The loader named in an onnx-text bundle's config.json: ``tinyglot.load(bundle)`` calls it."""
    path = Path(path)
    cfg = read_bundle(path, FORMAT)
    q = cfg.get("quantization", {}).get("mode", "none")
    return OnnxTextEncoder(path / cfg["files"][0], cfg["max_len"], threads=threads,
                           name=f"onnx-text{'-' + q if q != 'none' else ''} ({path.name})",
                           tokenizer=bundle_tokenizer(path, cfg))


# ====================================================================== the whole export
@dataclass
class OnnxTextConverter(StringBundleConverter):
    """onnx-text's part of :func:`~tinyglot.export.bundle.export_bundle`: the ONNX export (traced,
    optimised, quantized) with the SentencePiece op in front, checked again in a process that has
    only onnxruntime + onnxruntime-extensions, and a model card."""

    qcfg: Any = None
    applied: str = ""
    standalone_script: str = STANDALONE_ONNX
    standalone_runtime: str = "onnxruntime + onnxruntime-extensions"

    def convert(self, source: Source, work: Path, say: Callable[[str], None]) -> dict:
        from .onnx import OPSET, _bert_shape, export_module
        from .quantize import optimize_graph, quantize_graph, verify_quantized

        heads, hidden = _bert_shape(source.model)
        say(f"exporting {source.path} ({source.config.get('kind')}) to a string-in ONNX graph (opset {OPSET})")
        raw = export_module(embedding_module_class()(source.model), work / "raw.onnx", source.tokenizer.vocab_size,
                            source.max_len, OPSET)
        self.applied = optimize_graph(raw, work / "opt.onnx", "transformers", heads, hidden,
                                      embed_layer_norm=self.qcfg.embed_layer_norm)
        fp32_bytes = (work / "opt.onnx").stat().st_size
        if self.qcfg.mode != "none":
            say(f"quantizing the encoder part: {self.qcfg.label}")
        enc = quantize_graph(work / "opt.onnx", work / "enc.onnx", self.qcfg, tokenizer=source.tokenizer,
                             max_len=source.max_len, workdir=work)
        stats = verify_quantized(enc, fp32_bytes, self.qcfg.mode)
        add_tokenizer(enc, work / MODEL_FILE, source.tokenizer.proto, source.max_len)
        return stats

    def open(self, out: Path, source: Source) -> OnnxTextEncoder:
        return OnnxTextEncoder(out / MODEL_FILE, source.max_len, threads=self.threads, tokenizer=source.tokenizer)

    def gates(self) -> Gates:
        return gates_for_mode(self.qcfg.mode)

    def extra(self, stats: dict, exported: Any, source: Source) -> dict:
        from .onnx import OPSET

        return {"onnx": {"opset": OPSET, "optimization": self.applied, "inputs": [INPUT_NAME],
                         "outputs": [OUTPUT_NAME, IDS_NAME], "int8_ops": stats["int8_ops"],
                         "custom_ops": f"onnxruntime-extensions ({CONTRIB_DOMAIN}.SentencepieceTokenizer)",
                         "truncation": f"first {source.max_len} SentencePiece ids of the whole string",
                         "empty_sentence": "zero vector in the graph; TinyglotError in tinyglot.load"},
                "tokenisation": "in the graph"}

    def write_card(self, out: Path, cfg: dict, report: Any) -> None:
        write_model_card(out, cfg, report)


def export_onnx_text(
    model: str | Path,
    out: str | Path,
    quantization: str = "none",
    *,
    threads: int = 1,
    max_sentences: int = 100,
    testset=None,
    gates: Gates | None = None,
    parity_gate: bool = True,
    standalone: bool = True,
    card: bool = True,
    say: Callable[[str], None] = lambda msg: None,
) -> ExportResult:
    """Export the student or teacher at ``model`` to a string-in ONNX bundle in ``out``.

    ``quantization``: ``none`` (fp32), ``dynamic`` (int8 weights of the encoder part, per tensor),
    ``dynamic-int4-embeddings`` (and a 4-bit token table) or a per-channel int8 preset
    (``dynamic-per-channel``, ``avx2``, ``avx512-vnni``, ``arm64``).  Parity:
    :func:`~tinyglot.export.parity.check_parity` in this process, then (``standalone``) the same
    file in a separate process that imports only onnxruntime + onnxruntime-extensions
    (:func:`~tinyglot.export.parity.check_standalone`): identical token ids on every sentence, the
    cosine and P@1 gates.  ``config.json`` is written last, only if the gates pass (or not
    ``parity_gate``).  ``card``: write the bundle's README.md (usage from Python, Kotlin, Swift, JS).
    """
    from .quantize import QuantizationConfig

    _require_ortx()
    if quantization not in MODES:
        raise TinyglotError(f"--quantize {quantization} is not available for onnx-text",
                            f"choose one of: {', '.join(MODES)}")
    qcfg = QuantizationConfig.from_name(quantization)
    converter = OnnxTextConverter(fmt=FORMAT, loader=LOADER, label=f"onnx-text {qcfg.label}",
                                  quantization=qcfg.to_dict(), model_files=(MODEL_FILE,), qcfg=qcfg, threads=threads,
                                  standalone=standalone, card=card)
    return export_bundle(converter, model, out, testset=testset, max_sentences=max_sentences, gates=gates,
                         parity_gate=parity_gate, say=say)


# ====================================================================== model card
def model_card(cfg: dict, report: ParityReport | None = None) -> str:
    """README.md of an onnx-text bundle: what the file does and the minimal code to use it."""
    name = cfg["files"][0]
    quantization = cfg.get("quantization", {})
    q = quantization.get("mode", "none")
    precision = "fp32" if q != "dynamic" else \
        "int8, 4-bit token table" if quantization.get("embedding_bits") == 4 else "int8"
    parity = parity_paragraph(report)
    return f"""# tinyglot sentence encoder: ONNX, raw strings in ({precision})

`{name}` takes a batch of raw strings and returns L2-normalised sentence embeddings
(dimension {cfg['dim']}). The SentencePiece tokenizer (`tokenizer.model`, embedded in the graph as the
`model` attribute of onnxruntime-extensions' `SentencepieceTokenizer` op), truncation to the first
{cfg['max_len']} tokens, padding, mean pooling and normalisation are all inside the graph: no
tinyglot, no sentencepiece, no pre-processing. Languages of the vocabulary: {', '.join(cfg.get('languages', []))}.

- input `text`: string `[batch]` (any batch size)
- output `sentence_embedding`: float32 `[batch, {cfg['dim']}]`, unit rows; a string without any
  token (`""`, only spaces) gives a zero row
- output `input_ids`: int64 `[batch, width]`, the truncated, padded token ids (for checks)

## Python (onnxruntime + onnxruntime-extensions)

```python
# pip install onnxruntime onnxruntime-extensions
import numpy as np, onnxruntime as ort, onnxruntime_extensions as ortx

so = ort.SessionOptions()
so.register_custom_ops_library(ortx.get_library_path())
session = ort.InferenceSession("{name}", so, providers=["CPUExecutionProvider"])
emb, ids = session.run(None, {{"text": np.array(["Hallo Welt", "Hello world"], dtype=object)}})
print(float(emb[0] @ emb[1]))  # cosine similarity
```

With tinyglot: `tinyglot.load("<this folder>").encode(["Hallo Welt"])` (raises on an empty list,
a non-string or an empty sentence, like every tinyglot encoder).

## JavaScript (onnxruntime-web + onnxruntime-extensions)

onnxruntime-web does not ship onnxruntime-extensions' ops: in the browser use the
`tflite-mediapipe` bundle with `@mediapipe/tasks-text`. Native runtimes (onnxruntime-node,
mobile) need the extensions library registered as a custom-ops library, as in Python.

## Kotlin / Swift

Android: `com.microsoft.onnxruntime:onnxruntime-android` + `onnxruntime-extensions-android`,
`SessionOptions().registerCustomOpLibrary(OrtxPackage.getLibraryPath())`, then
`OnnxTensor.createTensor(env, arrayOf("Hallo Welt"), longArrayOf(1))` as `text`. iOS: the
`onnxruntime-extensions-c` pod, `ORTSessionOptions.registerCustomOps(functionPointer:
RegisterCustomOps)`. For MediaPipe's TextEmbedder (Kotlin, Swift, web) use the `tflite-mediapipe`
bundle.

## Limits

Truncation: only the first {cfg['max_len']} tokens of each string count (the whole string is
tokenised first: a 1 MB string takes about 0.25 s). onnxruntime string tensors end at a NUL
character (U+0000): text after one is ignored. Quantization: {q}.
{parity}"""


def write_model_card(out: str | Path, cfg: dict, report: ParityReport | None = None) -> Path:
    from tinyglot.io import atomic_write_text

    path = Path(out) / "README.md"
    atomic_write_text(path, model_card(cfg, report))
    return path


__all__ = [
    "OnnxTextEncoder",
    "add_tokenizer",
    "export_onnx_text",
    "load_onnx_text_bundle",
    "model_card",
    "preload_ortx",
    "tokenizer_nodes",
]
