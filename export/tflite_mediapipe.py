"""TFLite bundles that MediaPipe's TextEmbedder opens: raw strings in, on Android, iOS, the web and Python.

MediaPipe Tasks choose the text pre-processing from the model's inputs and TFLite Metadata
(``mediapipe/tasks/cc/text/utils/text_model_utils.cc``): three int32 inputs ``[1, seq]`` make a
BERT model, handled by ``BertPreprocessorCalculator``, which

1. lower-cases ASCII (``absl::AsciiStrToLower``), then runs SentencePiece (the ``tokenizer.model``
   packed in the metadata as the SentencePiece tokenizer process unit) on the WHOLE string;
2. keeps the first ``seq - 2`` pieces and writes ``[CLS] pieces... [SEP]`` with ids from
   ``PieceToId``: our vocabulary has no ``[CLS]``/``[SEP]``, so both become ``<unk>`` (id 1);
3. fills ``ids``, ``mask`` (1 on those tokens) and ``segment_ids`` (0), padded to ``seq``.

The file takes ``ids``/``mask``/``segment_ids`` and, inside the graph, drops the first and the last
real position (``ids[:, 1:-1]``, ``mask[:, 2:]``): the encoder sees exactly tinyglot's ids (at most
``max_len``) at positions 0.., mean-pools and L2-normalises.  Their shape (``input_shape``):

- ``dynamic`` (the default where it can be built): ``[1, n]`` with ``n`` free (shape signature
  ``[1, -1]``).  MediaPipe's BERT pre-processing then sizes the tensors to the string itself
  (``has_dynamic_input_tensors`` in ``text_preprocessing_graph.cc``: ``[CLS] pieces [SEP]``, no
  padding and no truncation), so a 16-token sentence costs what 16 tokens cost; the graph cuts at
  ``max_len`` itself.  MediaPipe accepts only a single subgraph, so per-length signatures are no
  option; a dynamic sequence length does not convert with litert-torch either (its lowering of
  BERT's position slicing needs static shapes), so this file is converted by TensorFlow's
  TFLiteConverter from the TensorFlow twin of the source's transformers model (the SavedModel
  export's :func:`~tinyglot.export.savedmodel.tf_twin`, in a ``USE_TF=1`` subprocess; int8: its
  dynamic-range quantization).  Needs TensorFlow and tf-keras (``tinyglot[tf]``) and a source
  that is a plain transformers model (LEALLA and multi-stage students);
- ``fixed``: ``[1, max_len + 2]``, converted with litert-torch from the PyTorch module (any source):
  MediaPipe pads every string to that length, so every sentence costs as much as the longest.

``auto`` (the default) is ``dynamic`` where it can be built and ``fixed`` otherwise (the export says
why, and ``config.json`` records the shape).
Because of step 1 the vocabulary must fold case (``nmt_nfkc_cf``, tinyglot's default); a
case-sensitive one is refused.  The other MediaPipe text model types do not fit: the
single-input "Gecko" path (``SentencePiecePreprocessorCalculator``) adds BOS/EOS ids our
vocabulary lacks and fails on text longer than the model instead of truncating it.

Outputs (MediaPipe "embedding heads"): ``sentence_embedding`` (float32 ``[1, dim]``, unit norm;
zero for a string without tokens) and ``token_ids`` (float32 ``[1, max_len]``: the ids the
encoder saw, 0-padded, for parity checks against other SentencePiece runtimes).

MediaPipe 1.2.x's Python metadata writer imports a native module its wheel lacks
(``mediapipe.tasks.cc.metadata.python._pywrap_metadata_version``, only used to compute the
metadata's minimum parser version); :func:`write_metadata` provides that one function when
the module is missing (our metadata needs parser version 1.1.0: input process units and the
SentencePiece tokenizer options, ``metadata_version.cc``).
"""

from __future__ import annotations

import contextlib
import logging
import sys
import threading
import types
import weakref
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from tinyglot.errors import TinyglotError
from tinyglot.quiet import mediapipe_without_tensorflow, third_party_output

from .bundle import TOKENIZER, ExportResult, Source, StringBundleConverter, eager_attention, export_bundle, read_bundle
from .parity import STANDALONE_MEDIAPIPE, Gates, ParityReport, parity_paragraph

LOADER = "tinyglot.export.tflite_mediapipe:load_tflite_mediapipe_bundle"
FORMAT = "tflite-mediapipe"
MODEL_FILE = "model.tflite"
INPUT_NAMES = ("ids", "mask", "segment_ids")  # the metadata names MediaPipe's BERT pre-processing looks up
HEADS = ("sentence_embedding", "token_ids")
SIGNATURE = "serving_default"
MODES = ("none", "dynamic", "dynamic-int4-embeddings")  # the last: dynamic int8 and a 4-bit token table
INT4_TABLE = "dynamic-int4-embeddings"
INPUT_SHAPES = ("auto", "dynamic", "fixed")  # see the module docstring
MIN_PARSER_VERSION = "1.1.0"
MAX_P1_DROP = 0.3

log = logging.getLogger(__name__)


def _require_mediapipe():
    from tinyglot.ortx import preload_ortx

    preload_ortx()  # before MediaPipe imports TensorFlow: onnx-text bundles then still open here
    try:
        # MediaPipe imports TensorFlow, when installed, only for its docs build and tf.io.gfile
        with mediapipe_without_tensorflow(), third_party_output("MediaPipe's import output"):
            import mediapipe  # noqa: F401
            from mediapipe.tasks.python.text import text_embedder  # noqa: F401
    except ImportError as exc:
        raise TinyglotError(f"tflite-mediapipe bundles need mediapipe ({exc})",
                            "pip install 'tinyglot[mediapipe]'") from None


def gates_for_mode(mode: str) -> Gates:
    gates = Gates.for_mode(mode)
    gates.max_p1_drop = MAX_P1_DROP
    if mode == "none":  # same graph, another runtime (XNNPACK kernels): fp32 round-off only
        gates.min_mean_cosine, gates.min_cosine, gates.max_abs_diff = 0.999, 0.99, 1e-2
    return gates


# ====================================================================== the graph
class _Module:  # namespace for the lazily defined torch module class
    cls = None


def mediapipe_module_class():
    """``(ids, mask, segment_ids)`` as MediaPipe's BERT pre-processing fills them ->
    ``(sentence_embedding, token_ids)``."""
    if _Module.cls is None:
        import torch
        from torch import nn

        class MediaPipeModule(nn.Module):
            def __init__(self, model) -> None:
                super().__init__()
                self.model = model

            def forward(self, ids, mask, segment_ids):
                n = ids.shape[1]
                # [CLS] t0 .. tk [SEP] pad..: token j is at j + 1 and is real iff mask[j + 2] == 1.
                # segment_ids are all 0; adding 0 * them keeps the third input in the converted file.
                real = ids[:, 1:n - 1] + segment_ids[:, 1:n - 1] * 0
                real_mask = mask[:, 2:n]
                emb = self.model.embed(real, real_mask)
                emb = torch.nn.functional.normalize(emb, p=2.0, dim=-1, eps=1e-12)
                return emb, (real * real_mask).to(torch.float32)

        _Module.cls = MediaPipeModule
    return _Module.cls


def convert(module, path: str | Path, max_len: int, mode: str, vocab_size: int) -> Path:
    """litert-torch conversion at ``[1, max_len + 2]`` int32 inputs, one signature (one subgraph)."""
    import torch

    from .tflite import _quant_config, quiet_litert

    with third_party_output("litert-torch's import output"):  # TensorFlow's C++ log lines
        import litert_torch

    seq = int(max_len) + 2
    gen = torch.Generator().manual_seed(0)
    ids = torch.randint(2, max(3, vocab_size), (1, seq), generator=gen, dtype=torch.int32)
    mask = torch.ones_like(ids)
    mask[:, seq // 2:] = 0  # padded positions, so the masking path stays in the graph
    kwargs = {"ids": ids * mask, "mask": mask, "segment_ids": torch.zeros_like(ids)}
    module.eval()
    qcfg = _quant_config(mode)
    try:
        # ai-edge-quantizer's tqdm bars and size lines (print), torch.export warnings, TF's C++ logs
        with third_party_output("litert-torch's conversion output"), quiet_litert(), \
                eager_attention(getattr(module, "model", module)), torch.no_grad():
            conv = litert_torch.signature(SIGNATURE, module, sample_kwargs=kwargs)
            edge = conv.convert(quant_config=qcfg) if qcfg is not None else conv.convert()
            edge.export(str(path))
    except Exception as exc:
        raise TinyglotError(f"litert-torch conversion failed: {type(exc).__name__}: {exc}",
                            "report this with the model's config.json") from exc
    return Path(path)


def dynamic_unavailable(source: Source) -> str:
    """Why the dynamic-shape file cannot be built from ``source`` ("" when it can): it needs a plain
    transformers model (its TensorFlow twin) and TensorFlow with tf-keras installed."""
    import importlib.util

    from tinyglot.registry import KINDS

    kind = KINDS.get(str(source.config.get("kind")))
    if kind is None or kind.transformers_folder is None:
        return f"a {source.config.get('kind')!r} model is a torch checkpoint, not a transformers model"
    if source.config.get("extra_weights"):
        return f"{source.path} has {', '.join(source.config['extra_weights'])} on top of its transformers model"
    missing = [m for m in ("tensorflow", "tf_keras") if importlib.util.find_spec(m) is None]
    if missing:
        return f"{' and '.join(missing)} not installed (pip install 'tinyglot[tf]')"
    return ""


def _dynamic_module(bert, max_len: int):
    """The ``tf.Module`` converted for ``input_shape="dynamic"``: MediaPipe's BERT inputs ``[1, n]`` ->
    ``{sentence_embedding, token_ids}`` with the TensorFlow twin ``bert`` of the source."""
    import tensorflow as tf

    class MediaPipeDynamic(tf.Module):
        def __init__(self) -> None:
            super().__init__(name="tinyglot_mediapipe")
            self.bert = bert

        @tf.function(input_signature=[tf.TensorSpec([1, None], tf.int32, name=n) for n in INPUT_NAMES])
        def serve(self, ids, mask, segment_ids):
            # [CLS] t0 .. tk [SEP] (pad..): token j is at j + 1 and is real iff mask[j + 2] == 1 (padded or
            # not).  A zero column keeps one position for a string without tokens; MediaPipe does not cut
            # dynamic-shape inputs, so the graph keeps the first max_len (a slice past the end is clamped).
            # segment_ids are all 0; adding 0 * them keeps the third input in the graph.
            zero = tf.zeros([1, 1], tf.int32)
            real = tf.concat([ids[:, 1:-1] + 0 * segment_ids[:, 1:-1], zero], axis=1)[:, :max_len]
            real_mask = tf.concat([mask[:, 2:], zero], axis=1)[:, :max_len]
            hidden = self.bert(input_ids=real, attention_mask=real_mask, training=False).last_hidden_state
            m = tf.cast(tf.expand_dims(real_mask, -1), hidden.dtype)  # expand_dims, not [..., None]: converts
            emb = tf.reduce_sum(hidden * m, axis=1) / tf.maximum(tf.reduce_sum(m, axis=1), 1.0)
            emb = emb / tf.maximum(tf.norm(emb, axis=-1, keepdims=True), 1e-12)
            seen = tf.cast(real * real_mask, tf.float32)
            seen = tf.reshape(tf.pad(seen, [[0, 0], [0, max_len - tf.shape(seen)[1]]]), [1, max_len])
            return {HEADS[0]: emb, HEADS[1]: seen}

    return MediaPipeDynamic()


def _build_dynamic(spec: dict) -> dict:
    """Runs in the ``USE_TF=1`` subprocess: the TF twin of ``spec["model_dir"]`` in :func:`_dynamic_module`,
    converted by TFLiteConverter (``mode`` dynamic: its dynamic-range int8) to ``spec["out"]``."""
    import tensorflow as tf

    from .savedmodel import _tf_threads, tf_twin

    _tf_threads(int(spec.get("threads", 1)))
    module = _dynamic_module(tf_twin(Path(spec["model_dir"])), int(spec["max_len"]))
    conv = tf.lite.TFLiteConverter.from_concrete_functions([module.serve.get_concrete_function()], module)
    if spec["mode"] == "dynamic":
        conv.optimizations = [tf.lite.Optimize.DEFAULT]
    Path(spec["out"]).write_bytes(conv.convert())
    return {"tf_version": tf.__version__}


def _main(argv: Sequence[str] | None = None) -> int:
    import json

    argv = list(sys.argv[1:] if argv is None else argv)
    if len(argv) != 2 or argv[0] != "--spec":
        print("usage: python -m tinyglot.export.tflite_mediapipe --spec SPEC.json  (internal)", file=sys.stderr)
        return 2
    spec = json.loads(Path(argv[1]).read_text(encoding="utf-8"))
    Path(spec["result"]).write_text(json.dumps(_build_dynamic(spec)), encoding="utf-8")
    return 0


def convert_dynamic(model_dir: str | Path, path: str | Path, max_len: int, mode: str, threads: int = 1,
                    timeout: float = 1800) -> dict:
    """TFLite file with ``[1, n]`` inputs (``input_shape="dynamic"``) from the transformers model folder
    ``model_dir``, built in a ``USE_TF=1`` subprocess; returns its report (``tf_version``)."""
    from .savedmodel import run_tf_subprocess

    spec = {"model_dir": str(Path(model_dir).resolve()), "out": str(Path(path).resolve()), "max_len": int(max_len),
            "mode": mode, "threads": int(threads)}
    return run_tf_subprocess("tinyglot.export.tflite_mediapipe", spec, threads, timeout,
                             "converting the dynamic-shape MediaPipe file with TensorFlow",
                             "check that tensorflow, tf-keras and transformers<5 are installed (pip install "
                             "'tinyglot[tf]'), or export with input_shape='fixed'")


def heads_first(path: str | Path) -> None:
    """Put the subgraph's outputs in :data:`HEADS` order (the embedding first), by the signature's output
    names: MediaPipe lists a model's embeddings in output order, and apps take ``embeddings[0]``.
    TensorFlow's converter orders them its own way; a file whose outputs are not named after the heads
    (litert-torch's, already in order) is left as it is."""
    from .tflite import rewrite_tflite

    def text(value) -> str:
        return value.decode() if isinstance(value, bytes) else str(value)

    def reorder(model) -> None:
        sig = next(s for s in model.signatureDefs if text(s.signatureKey) == SIGNATURE)
        index = {text(t.name): t.tensorIndex for t in sig.outputs}
        if sorted(index) == sorted(HEADS):
            model.subgraphs[sig.subgraphIndex].outputs = [index[h] for h in HEADS]
            sig.outputs.sort(key=lambda t: HEADS.index(text(t.name)))

    rewrite_tflite(path, reorder)


def _io_names(path: str | Path) -> tuple[list[str], list[str]]:
    """Tensor names of the subgraph's inputs (ordered as ``INPUT_NAMES``), and the head name of each of
    its outputs in their order: the signature's output names where they are the heads (TensorFlow's
    file), else the heads in the order the module returns them (litert-torch's ``output_0``, ..)."""
    from ai_edge_litert.interpreter import Interpreter

    it = Interpreter(model_path=str(path))
    inputs = {d["name"]: d for d in it.get_input_details()}
    ordered = []
    for want in INPUT_NAMES:
        match = [n for n in inputs if n in (want, f"{SIGNATURE}_{want}", f"{SIGNATURE}_{want}:0")]
        if len(match) != 1:
            raise TinyglotError(f"{path}: cannot find the input {want!r} among {sorted(inputs)}",
                                "report this with the model's config.json")
        ordered.append(match[0])
    outputs = [d["index"] for d in it.get_output_details()]
    named = {d["index"]: name for name, d in it.get_signature_runner(SIGNATURE).get_output_details().items()}
    heads = [named.get(i, "") for i in outputs]
    return ordered, heads if sorted(heads) == sorted(HEADS) else list(HEADS[:len(outputs)])


def _metadata_writer():
    """mediapipe's metadata_writer module; provides the parser-version function MediaPipe 1.2.x
    wheels lack (see the module docstring)."""
    _require_mediapipe()
    name = "mediapipe.tasks.cc.metadata.python._pywrap_metadata_version"
    try:
        __import__(name)
    except ImportError:
        shim = types.ModuleType(name)
        shim.GetMinimumMetadataParserVersion = lambda buf: MIN_PARSER_VERSION
        parts = name.split(".")
        for i in range(3, len(parts)):
            sys.modules.setdefault(".".join(parts[:i]), types.ModuleType(".".join(parts[:i])))
        sys.modules[name] = shim
        sys.modules[".".join(parts[:-1])]._pywrap_metadata_version = shim
    with mediapipe_without_tensorflow():  # its metadata module opens files with tf.io.gfile when it can
        from mediapipe.tasks.python.metadata.metadata_writers import metadata_writer

    return metadata_writer


def write_metadata(src: str | Path, dst: str | Path, sp_model: str | Path, dim: int, max_len: int) -> Path:
    """Add TFLite Metadata: BERT text input with the SentencePiece tokenizer process unit (the
    ``tokenizer.model`` file packed inside) and the two embedding heads."""
    mw = _metadata_writer()
    inputs, heads = _io_names(src)
    if len(heads) != len(HEADS):
        raise TinyglotError(f"{src} has {len(heads)} outputs, expected {len(HEADS)}")
    writer = mw.MetadataWriter.create(bytearray(Path(src).read_bytes()))
    writer.add_general_info("tinyglot sentence encoder",
                            f"Raw text in, L2-normalised sentence embedding (dim {dim}) out; SentencePiece "
                            f"tokenizer in the metadata; the first {max_len} tokens count.")
    writer.add_bert_text_input(mw.SentencePieceTokenizer(sentence_piece_model_path=str(sp_model)), *inputs)
    about = {HEADS[0]: "L2-normalised mean-pooled sentence embedding",
             HEADS[1]: "SentencePiece ids the encoder saw (0 = padding)"}
    for head in heads:  # in the order of the subgraph's outputs
        writer.add_feature_output(name=head, description=about[head])
    model, _ = writer.populate()
    Path(dst).write_bytes(bytes(model))
    return Path(dst)


# ====================================================================== running a bundle
class MediaPipeTextEncoder:
    """``Encoder`` over a tflite-mediapipe file run by MediaPipe's TextEmbedder (raw strings in,
    MediaPipe's own tokenisation): one string per call, as MediaPipe embeds them."""

    def __init__(self, model_path: str | Path, max_len: int, name: str = "") -> None:
        _require_mediapipe()
        from mediapipe.tasks.python.core import base_options
        from mediapipe.tasks.python.text import text_embedder

        self.model_path = Path(model_path)
        self.max_len = int(max_len)
        self.name = name or f"tflite-mediapipe ({self.model_path.parent.name})"
        options = text_embedder.TextEmbedderOptions(
            base_options=base_options.BaseOptions(model_asset_path=str(self.model_path)),
            l2_normalize=False, quantize=False)
        try:
            with third_party_output("MediaPipe's output"):  # LiteRT's "Created ... XNNPACK delegate" line
                self.embedder = text_embedder.TextEmbedder.create_from_options(options)
        except Exception as exc:  # noqa: BLE001 - MediaPipe raises RuntimeError/ValueError with its status
            raise TinyglotError(f"MediaPipe's TextEmbedder cannot open {self.model_path} ({exc})",
                                "re-export the bundle with `tinyglot export --format tflite-mediapipe`") from None
        # closed when this encoder is collected or at exit, before the interpreter tears MediaPipe's
        # modules down (its own __del__ then fails with "'NoneType' object is not callable")
        self._closer = weakref.finalize(self, self.embedder.close)
        # MediaPipe runs its calls on a thread pool that Python stops before atexit handlers run:
        # close before that (threading's own exit hooks), when the hook exists
        register = getattr(threading, "_register_atexit", None)
        if register is not None:
            with contextlib.suppress(RuntimeError):  # already shutting down
                register(self._closer)

    def run_text(self, text: str) -> tuple[np.ndarray, list[int]]:
        """``(embedding, token ids)`` of one string, straight from MediaPipe (no checks)."""
        result = self.embedder.embed(text)
        heads = {e.head_name: e for e in result.embeddings}
        emb = np.asarray(heads[HEADS[0]].embedding, dtype=np.float32)
        # the ids head (0-padded to max_len) in numpy: a Python loop over it cost about 20 us a call
        seen = np.rint(np.asarray(heads[HEADS[1]].embedding, dtype=np.float32)).astype(np.int64)
        real = np.flatnonzero(seen)
        return emb, seen[:real[-1] + 1].tolist() if real.size else []

    def encode(self, sentences: Sequence[str], batch_size: int = 64) -> np.ndarray:
        from tinyglot.encoder import check_sentences

        texts = check_sentences(sentences)
        rows = []
        for text in texts:
            emb, ids = self.run_text(text)
            rows.append(emb if ids else np.zeros_like(emb))  # no tokens: the zero vector, as the graph gives
        return np.stack(rows).astype(np.float32)

    def close(self) -> None:
        self._closer()


def load_tflite_mediapipe_bundle(path: str | Path, **_: Any) -> MediaPipeTextEncoder:
    """The loader named in a tflite-mediapipe bundle's config.json: ``tinyglot.load(bundle)`` calls it."""
    path = Path(path)
    cfg = read_bundle(path, FORMAT)
    q = cfg.get("quantization", {}).get("mode", "none")
    return MediaPipeTextEncoder(path / cfg["files"][0], cfg["max_len"],
                                name=f"tflite-mediapipe{'-' + q if q != 'none' else ''} ({path.name})")


# ====================================================================== the whole export
@dataclass
class MediaPipeConverter(StringBundleConverter):
    """tflite-mediapipe's part of :func:`~tinyglot.export.bundle.export_bundle`: litert-torch conversion
    with MediaPipe's BERT text-embedder metadata (the tokenizer inside), parity through MediaPipe's
    TextEmbedder, again in a process with mediapipe only, and a model card."""

    mode: str = "none"  # the gates' and the loader's mode: none or dynamic
    table_bits: int = 8  # 4: the token table in 4-bit blocks (dynamic-int4-embeddings; dynamic shapes only)
    input_shape: str = "auto"  # what was asked (INPUT_SHAPES); ``shape`` is what was built
    width: int = 0
    shape: str = ""
    shape_note: str = ""  # why ``auto`` built a fixed-shape file
    tf_version: str = ""
    standalone_script: str = STANDALONE_MEDIAPIPE
    standalone_runtime: str = "mediapipe"

    def check(self, source: Source) -> None:
        if not source.tokenizer.folds_case:
            raise TinyglotError(
                f"the vocabulary of {source.path} is case-sensitive, and MediaPipe lower-cases ASCII before "
                "SentencePiece: its ids would differ from tinyglot's",
                "train the student on a case-folding vocabulary (`tinyglot data vocab` without --keep-case), "
                "or export --format onnx-text")

    def convert(self, source: Source, work: Path, say: Callable[[str], None]) -> dict:
        from .tflite import _n_params, shorten_tensor_names, verify_quantized

        from tinyglot.registry import KINDS

        max_len = source.max_len
        self.width = int(source.reference().encode(["a"]).shape[1])
        self.shape = self.choose_shape(source)
        raw = work / "raw.tflite"
        if self.shape == "dynamic":
            say(f"converting {source.path} ({source.config.get('kind')}) with TensorFlow for MediaPipe: inputs "
                f"[1, n] (dynamic: each string at its own length, cut at {max_len} tokens), quantization "
                f"{self.mode}")
            folder = source.path / str(KINDS[source.config["kind"]].transformers_folder)
            int4 = self.table_bits == 4
            self.tf_version = convert_dynamic(folder, raw, max_len, "none" if int4 else self.mode,
                                              self.threads)["tf_version"]
            heads_first(raw)
            if int4:
                from .tflite import INT4_BLOCK, int4_token_table

                int4_token_table(raw, raw, source.tokenizer.vocab_size)
                self.quantization = {**self.quantization, "recipe": "ai-edge-quantizer: dynamic int8 per channel, "
                                     f"the token table's EMBEDDING_LOOKUP in 4-bit blocks of {INT4_BLOCK}"}
            elif self.mode == "dynamic":
                self.quantization = {**self.quantization, "recipe": "TFLiteConverter optimizations=[DEFAULT]"}
        else:
            say(f"converting {source.path} ({source.config.get('kind')}) with litert-torch for MediaPipe: inputs "
                f"[1, {max_len + 2}] (fixed)" + (f" because {self.shape_note}" if self.shape_note else "")
                + f", quantization {self.mode}")
            convert(mediapipe_module_class()(source.model), raw, max_len, self.mode, source.tokenizer.vocab_size)
            shorten_tensor_names(raw)
        stats = verify_quantized(raw, self.mode, 4 * _n_params(source.model))
        source.tokenizer.save(work / TOKENIZER)
        write_metadata(raw, work / MODEL_FILE, work / TOKENIZER, self.width, max_len)
        return stats

    def choose_shape(self, source: Source) -> str:
        """``dynamic`` or ``fixed`` for :attr:`input_shape` (``auto``: dynamic where it can be built)."""
        if self.input_shape == "fixed" and self.table_bits == 4:
            raise TinyglotError("a 4-bit token table (dynamic-int4-embeddings) is made on the dynamic-shape path",
                                "export with input_shape='dynamic' or 'auto', or --quantize dynamic")
        if self.input_shape == "fixed":
            return "fixed"
        why = dynamic_unavailable(source)
        if why and self.table_bits == 4:
            raise TinyglotError(f"a 4-bit token table needs the dynamic-shape MediaPipe file, and {why}",
                                "export with --quantize dynamic (an int8 table)")
        if why and self.input_shape == "dynamic":
            raise TinyglotError(f"cannot build a dynamic-shape MediaPipe file: {why}",
                                "export with input_shape='fixed' (every string costs max_len tokens)")
        self.shape_note = why
        return "fixed" if why else "dynamic"

    def open(self, out: Path, source: Source) -> MediaPipeTextEncoder:
        return MediaPipeTextEncoder(out / MODEL_FILE, source.max_len)

    def gates(self) -> Gates:
        return gates_for_mode(self.mode)

    def dim(self, exported: Any, reference: Any) -> int:
        return self.width

    def extra(self, stats: dict, exported: Any, source: Source) -> dict:
        import mediapipe

        max_len = source.max_len
        dynamic = self.shape == "dynamic"
        shape = {"converter": f"tensorflow {self.tf_version} (TFLiteConverter, the TF twin of the transformers model)"
                 if dynamic else "litert-torch", "input_shape": [1, -1] if dynamic else [1, max_len + 2],
                 "sequence": "dynamic: MediaPipe feeds [CLS] pieces [SEP] at their own length" if dynamic
                 else "fixed: MediaPipe pads every string to max_len + 2"}
        if self.shape_note:
            shape["fixed_because"] = self.shape_note
        return {"tflite": {**shape, "inputs": list(INPUT_NAMES),
                           "input_dtype": "int32", "heads": list(HEADS), "weights": stats["weights"],
                           "metadata": f"BERT text input + SentencePiece tokenizer process unit (min parser "
                                       f"{MIN_PARSER_VERSION})",
                           "checked_with": f"mediapipe {getattr(mediapipe, '__version__', '?')}",
                           "truncation": f"first {max_len} SentencePiece ids of the whole string "
                                         + ("(inside the graph)" if dynamic else "(MediaPipe)"),
                           "empty_sentence": "zero vector in MediaPipe; TinyglotError in tinyglot.load"},
                "tokenisation": "MediaPipe (metadata)"}

    def write_card(self, out: Path, cfg: dict, report: Any) -> None:
        write_model_card(out, cfg, report)


def export_tflite_mediapipe(
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
    input_shape: str = "auto",
    say: Callable[[str], None] = lambda msg: None,
) -> ExportResult:
    """Export the student or teacher at ``model`` to a TFLite file MediaPipe's TextEmbedder opens.

    ``quantization``: ``none`` (fp32), ``dynamic`` (dynamic-range int8) or ``dynamic-int4-embeddings`` (and
    the token table in 4-bit blocks: about half the bytes of a large vocabulary).  ``input_shape``: ``dynamic``
    (``[1, n]``: short strings cost less; TensorFlow conversion of a transformers model), ``fixed``
    (``[1, max_len + 2]``, litert-torch, any model) or ``auto`` (dynamic where it can be built; see the
    module docstring).  Parity: in this process
    through MediaPipe's TextEmbedder, then (``standalone``) in a process that imports only
    mediapipe (token ids from the ``token_ids`` head).  ``config.json`` is written last, only if
    the gates pass (or not ``parity_gate``).  ``card``: write the bundle's README.md."""
    from .tflite import _require_litert

    _require_litert(convert=True)
    _require_mediapipe()
    if quantization not in MODES:
        raise TinyglotError(f"--quantize {quantization} is not available for tflite-mediapipe",
                            f"choose one of: {', '.join(MODES)}")
    if input_shape not in INPUT_SHAPES:
        raise TinyglotError(f"input_shape {input_shape!r} is not one of {', '.join(INPUT_SHAPES)}",
                            "dynamic: each string at its own length; fixed: [1, max_len + 2]; auto: dynamic "
                            "where it can be built")
    mode = "dynamic" if quantization == INT4_TABLE else quantization
    qdict = {"mode": mode, "name": quantization,
             "recipe": "quant_recipes.full_dynamic_recipe" if mode == "dynamic" else None}
    converter = MediaPipeConverter(fmt=FORMAT, loader=LOADER, label=f"tflite-mediapipe {quantization}",
                                   quantization=qdict, model_files=(MODEL_FILE,), mode=mode, threads=threads,
                                   standalone=standalone, card=card, input_shape=input_shape,
                                   table_bits=4 if quantization == INT4_TABLE else 8)
    return export_bundle(converter, model, out, testset=testset, max_sentences=max_sentences, gates=gates,
                         parity_gate=parity_gate, say=say)


# ====================================================================== model card
def kotlin_snippet(asset: str, a: str, b: str) -> str:
    """The Kotlin of a model card: MediaPipe's TextEmbedder opens the asset ``asset`` and compares the
    embeddings of the sentences ``a`` and ``b``."""
    return f"""```kotlin
val options = TextEmbedder.TextEmbedderOptions.builder()
    .setBaseOptions(BaseOptions.builder().setModelAssetPath("{asset}").build())
    .build()
val embedder = TextEmbedder.createFromOptions(context, options)
val a = embedder.embed("{a}").embeddingResult().embeddings()[0]
val b = embedder.embed("{b}").embeddingResult().embeddings()[0]
val similarity = TextEmbedder.cosineSimilarity(a, b)
```"""


def model_card(cfg: dict, report: ParityReport | None = None) -> str:
    name = cfg["files"][0]
    q = cfg.get("quantization", {}).get("mode", "none")
    precision = ("int8, the token table in 4-bit blocks" if cfg.get("quantization", {}).get("name") == INT4_TABLE
                 else "int8" if q == "dynamic" else "fp32")
    parity = parity_paragraph(report)
    return f"""# tinyglot sentence encoder: TFLite for MediaPipe TextEmbedder ({precision})

`{name}` opens in MediaPipe's TextEmbedder (Android, iOS, web, Python) and embeds raw strings:
the SentencePiece model is packed in its TFLite Metadata, MediaPipe tokenises, the file
mean-pools and L2-normalises. Head `{HEADS[0]}` is the sentence embedding (dimension
{cfg['dim']}); head `{HEADS[1]}` holds the token ids the model saw (for checks; ignore it).
Only the first {cfg['max_len']} tokens of a string count. A string without any token gives a
zero vector. Languages of the vocabulary: {', '.join(cfg.get('languages', []))}.

## Kotlin (Android, `com.google.mediapipe:tasks-text`)

{kotlin_snippet(name, "Hallo Welt", "Hello world")}

## Swift (iOS, pod `MediaPipeTasksText`)

```swift
let options = TextEmbedderOptions()
options.baseOptions.modelAssetPath = Bundle.main.path(forResource: "model", ofType: "tflite")!
let embedder = try TextEmbedder(options: options)
let a = try embedder.embed(text: "Hallo Welt").embeddingResult.embeddings[0]
let b = try embedder.embed(text: "Hello world").embeddingResult.embeddings[0]
let similarity = try TextEmbedder.cosineSimilarity(embedding1: a, embedding2: b)
```

## JavaScript (browser, npm `@mediapipe/tasks-text`)

```js
import {{ FilesetResolver, TextEmbedder }} from "@mediapipe/tasks-text";
const fileset = await FilesetResolver.forTextTasks("node_modules/@mediapipe/tasks-text/wasm");
const embedder = await TextEmbedder.createFromOptions(fileset, {{ baseOptions: {{ modelAssetPath: "{name}" }} }});
const a = embedder.embed("Hallo Welt").embeddings[0];
const b = embedder.embed("Hello world").embeddings[0];
console.log(TextEmbedder.cosineSimilarity(a, b));
```

## Python (`pip install mediapipe`)

```python
from mediapipe.tasks.python.core.base_options import BaseOptions
from mediapipe.tasks.python.text import text_embedder

options = text_embedder.TextEmbedderOptions(base_options=BaseOptions(model_asset_path="{name}"))
with text_embedder.TextEmbedder.create_from_options(options) as embedder:
    a = embedder.embed("Hallo Welt").embeddings[0]
    b = embedder.embed("Hello world").embeddings[0]
    print(text_embedder.TextEmbedder.cosine_similarity(a, b))
```

With tinyglot: `tinyglot.load("<this folder>").encode(["Hallo Welt"])` runs the same TextEmbedder.

## Limits

MediaPipe lower-cases ASCII before SentencePiece (harmless: this vocabulary folds case itself)
and tokenises the whole string before truncating. {_shape_paragraph(cfg)}
Quantization: {q}. Checked with {cfg.get('tflite', {}).get('checked_with', 'mediapipe')}.
{parity}"""


def _shape_paragraph(cfg: dict) -> str:
    """The card's sentence on the input shape (a bundle written before ``input_shape`` is fixed)."""
    shape = cfg.get("tflite", {}).get("input_shape") or [1, cfg["max_len"] + 2]
    if shape[-1] == -1:
        return ("Inputs `ids`/`mask`/`segment_ids` are int32 `[1, n]` with a dynamic `n`: MediaPipe sizes them "
                "to each string (`[CLS]` pieces `[SEP]`), so a short sentence costs less than a long one; the "
                f"graph drops `[CLS]`/`[SEP]` and keeps the first {cfg['max_len']} tokens (checked with MediaPipe "
                "0.10.15 and 1.2, and `@mediapipe/tasks-text` 1.0 in the browser).")
    return (f"Inputs `ids`/`mask`/`segment_ids` are `[1, {shape[-1]}]` int32 (`[CLS]` and `[SEP]` are dropped "
            "inside the graph): every string is padded to that length, so a short sentence costs as much as "
            "a long one.")


def write_model_card(out: str | Path, cfg: dict, report: ParityReport | None = None) -> Path:
    from tinyglot.io import atomic_write_text

    path = Path(out) / "README.md"
    atomic_write_text(path, model_card(cfg, report))
    return path


__all__ = ["INPUT_SHAPES", "MediaPipeTextEncoder", "convert_dynamic", "dynamic_unavailable", "export_tflite_mediapipe",
           "load_tflite_mediapipe_bundle", "mediapipe_module_class", "model_card", "write_metadata"]


if __name__ == "__main__":
    sys.exit(_main())
