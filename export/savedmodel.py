"""TF SavedModel bundles that take RAW STRINGS, loadable with ``tensorflow_hub.KerasLayer``
(like LEALLA on TF Hub)::

    import tensorflow_hub as hub, tensorflow_text  # noqa: F401  (registers the SentencePiece op)
    encoder = hub.KerasLayer("bundles/small-savedmodel")
    embeddings = encoder(tf.constant(["Hallo Welt", "Bonjour"]))   # (2, dim), L2-normalised

The bundle folder IS the SavedModel (``saved_model.pb`` + ``variables/``), with tinyglot's
``tokenizer.model``, ``config.json`` and ``parity.json`` beside it.  Inside the graph:

1. SentencePiece tokenisation with ``tensorflow_text.SentencepieceTokenizer(model=<the
   tokenizer.model bytes>)``: the same proto, hence the same normaliser (``nmt_nfkc_cf``
   lower-casing when the vocabulary was trained lower-cased), pad id 0, no BOS/EOS.  The export
   checks that the graph's token ids equal the Python tokenizer's on the parity sentences and on
   upper-cased copies of them;
2. truncation to the first ``max_len`` ids (like :meth:`tinyglot.tokenizer.Tokenizer.encode_ids`:
   the whole string is tokenised, no character cut), padding, attention mask;
3. the encoder: the TensorFlow twin of the student's transformers model,
   ``transformers.TFAutoModel.from_pretrained(student/model, from_pt=True)`` (TFBertModel for a
   LEALLA student, TFAlbertModel for a multi-stage student; see :mod:`tinyglot.registry`);
4. mean pooling over the mask (``tf.expand_dims``) and L2 normalisation.

Signatures: ``serving_default`` (``sentences``: string ``[None]`` -> ``sentence_embedding``) and
``encode_ids`` (``input_ids``/``attention_mask``: int32 ``[None, None]`` -> ``sentence_embedding``).

TensorFlow and transformers: ``tinyglot`` sets ``USE_TF=0`` (torch-only processes import
transformers faster and do not oversubscribe threads), and transformers decides at import time
whether its TF classes exist.  So the TF part of the export (``TFAutoModel`` + ``tf.saved_model.save``)
runs in a SUBPROCESS started with ``USE_TF=1`` (``python -m tinyglot.export.savedmodel``), whatever
the parent process imported before.  Loading a bundle needs TensorFlow, ``tensorflow_hub`` and
``tensorflow_text`` but not transformers, so it runs in-process.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from collections.abc import Callable, Sequence

import numpy as np

from tinyglot.encoder import check_sentences, encode_by_length, text_lengths
from tinyglot.errors import TinyglotError
from tinyglot.registry import KINDS

from .bundle import (TOKENIZER, Converter, ExportResult, Source, bundle_tokenizer, export_bundle, open_source,
                     read_bundle)
from .parity import Gates

LOADER = "tinyglot.export.savedmodel:load_savedmodel_bundle"
FORMAT = "savedmodel"
MODES = ("none",)
OUTPUT_NAME = "sentence_embedding"
STRING_SIGNATURE = "serving_default"
IDS_SIGNATURE = "encode_ids"


def _require_tf(build: bool = False):
    from tinyglot.ortx import preload_ortx

    preload_ortx()  # before TensorFlow: onnxruntime-extensions crashes when loaded after it
    missing = []
    for mod in ("tensorflow", "tensorflow_hub", "tensorflow_text") + (("tf_keras",) if build else ()):
        try:
            __import__(mod)
        except ImportError as exc:
            missing.append(f"{mod} ({exc})")
    if missing:
        raise TinyglotError(f"SavedModel bundles need {', '.join(missing)}", "pip install 'tinyglot[tf]'")


def _tf_threads(threads: int) -> None:
    import tensorflow as tf

    try:
        tf.config.threading.set_intra_op_parallelism_threads(max(1, int(threads)))
        tf.config.threading.set_inter_op_parallelism_threads(1)
    except RuntimeError:  # TF already initialised in this process: keep its settings
        pass


# ====================================================================== the TF graph (subprocess)
def _build_module(bert, sp_proto: bytes, max_len: int, pooling: str = "mean"):
    """The ``tf.Module`` saved as the bundle: raw strings -> tokens -> the TF encoder -> pooled, normalised."""
    import tensorflow as tf
    import tensorflow_text as tf_text

    class SentenceEncoder(tf.Module):
        def __init__(self) -> None:
            super().__init__(name="tinyglot_sentence_encoder")
            self.bert = bert
            self.tokenizer = tf_text.SentencepieceTokenizer(model=sp_proto, out_type=tf.int32, add_bos=False,
                                                            add_eos=False)
            self.max_len = tf.constant(int(max_len), tf.int32)

        def _embed(self, input_ids, attention_mask):
            hidden = self.bert(input_ids=input_ids, attention_mask=attention_mask, training=False).last_hidden_state
            if pooling == "first":  # a deliberately broken graph, for the tests of the parity gate
                emb = hidden[:, 0]
            else:
                m = tf.cast(tf.expand_dims(attention_mask, -1), hidden.dtype)
                emb = tf.reduce_sum(hidden * m, axis=1) / tf.maximum(tf.reduce_sum(m, axis=1), 1.0)
            norm = tf.maximum(tf.norm(emb, axis=-1, keepdims=True), 1e-12)
            return emb / norm

        @tf.function(input_signature=[tf.TensorSpec([None], tf.string, name="sentences")])
        def tokenize(self, sentences):
            """``(input_ids, attention_mask)``, int32 ``(batch, longest <= max_len)``."""
            tokens = self.tokenizer.tokenize(sentences)[:, : int(max_len)]
            ids = tokens.to_tensor(default_value=0)
            mask = tf.ones_like(tokens).to_tensor(default_value=0)
            width = tf.maximum(0, 1 - tf.shape(ids)[1])  # at least one column (all-empty batch)
            ids = tf.pad(ids, [[0, 0], [0, width]])
            mask = tf.pad(mask, [[0, 0], [0, width]])
            return ids, mask

        @tf.function(input_signature=[tf.TensorSpec([None], tf.string, name="sentences")])
        def __call__(self, sentences):
            ids, mask = self.tokenize(sentences)
            return self._embed(ids, mask)

        @tf.function(input_signature=[tf.TensorSpec([None, None], tf.int32, name="input_ids"),
                                      tf.TensorSpec([None, None], tf.int32, name="attention_mask")])
        def encode_ids(self, input_ids, attention_mask):
            return self._embed(input_ids, attention_mask)

    return SentenceEncoder()


def _build(spec: dict) -> dict:
    """Runs in the subprocess (``USE_TF=1``): build, save, reload and self-check the SavedModel."""
    import tensorflow as tf

    _tf_threads(spec.get("threads", 1))
    import tensorflow_text  # noqa: F401
    model_dir, out = Path(spec["model_dir"]), Path(spec["out"])
    sp_proto = Path(spec["tokenizer"]).read_bytes()
    bert = tf_twin(model_dir)
    module = _build_module(bert, sp_proto, int(spec["max_len"]), spec.get("pooling", "mean"))

    @tf.function(input_signature=[tf.TensorSpec([None], tf.string, name="sentences")])
    def serve_strings(sentences):
        return {OUTPUT_NAME: module(sentences)}

    @tf.function(input_signature=[tf.TensorSpec([None, None], tf.int32, name="input_ids"),
                                  tf.TensorSpec([None, None], tf.int32, name="attention_mask")])
    def serve_ids(input_ids, attention_mask):
        return {OUTPUT_NAME: module.encode_ids(input_ids, attention_mask)}

    t0 = time.perf_counter()
    tf.saved_model.save(module, str(out), signatures={
        STRING_SIGNATURE: serve_strings.get_concrete_function(), IDS_SIGNATURE: serve_ids.get_concrete_function()})
    saved_s = time.perf_counter() - t0
    # tokenisation check: the graph's ids == the Python tokenizer's (same proto, same normaliser)
    sentences = spec.get("check_sentences") or []
    ids, mask = module.tokenize(tf.constant(sentences or ["a"]))
    ids, mask = ids.numpy(), mask.numpy()
    graph_ids = [row[: int(m.sum())].tolist() for row, m in zip(ids, mask, strict=True)] if sentences else []
    return {"graph_ids": graph_ids, "save_seconds": saved_s, "tf_version": tf.__version__,
            "variables": int(sum(int(np.prod(v.shape)) for v in module.trainable_variables))}


def tf_twin(model_dir: Path):
    """The TensorFlow class of the transformers model saved in ``model_dir``, with its weights
    (``from_pt``).  BERT is built without its pooler (unused: the graph mean-pools); TFAlbertModel
    takes no such option, so its pooler exists but is not called."""
    from transformers import AutoConfig, TFAutoModel

    config = AutoConfig.from_pretrained(str(model_dir), local_files_only=True)
    options = {"add_pooling_layer": False} if config.model_type == "bert" else {}
    return TFAutoModel.from_pretrained(str(model_dir), from_pt=True, local_files_only=True, **options)


def _main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if len(argv) != 2 or argv[0] != "--spec":
        print("usage: python -m tinyglot.export.savedmodel --spec SPEC.json  (internal)", file=sys.stderr)
        return 2
    spec = json.loads(Path(argv[1]).read_text(encoding="utf-8"))
    result = _build(spec)
    Path(spec["result"]).write_text(json.dumps(result), encoding="utf-8")
    return 0


def build_savedmodel(model_dir: str | Path, tokenizer_path: str | Path, out: str | Path, max_len: int, *,
                     check_sentences: Sequence[str] = (), threads: int = 1, pooling: str = "mean",
                     timeout: float = 1800) -> dict:
    """Build the SavedModel at ``out`` from a transformers BertModel folder in a ``USE_TF=1`` subprocess.

    Returns the subprocess's report (``graph_ids``: the graph's token ids of ``check_sentences``)."""
    spec = {"model_dir": str(Path(model_dir).resolve()), "tokenizer": str(Path(tokenizer_path).resolve()),
            "out": str(Path(out).resolve()), "max_len": int(max_len), "check_sentences": list(check_sentences),
            "threads": int(threads), "pooling": pooling}
    return run_tf_subprocess("tinyglot.export.savedmodel", spec, threads, timeout, "building the SavedModel",
                             "check that tensorflow, tf-keras, tensorflow-text and transformers<5 are installed "
                             "(pip install 'tinyglot[tf]')")


def run_tf_subprocess(module: str, spec: dict, threads: int, timeout: float, what: str, fix: str) -> dict:
    """``python -m module --spec SPEC.json`` with ``USE_TF=1`` (transformers' TF classes on, whatever this
    process imported): the module's ``_main`` reads ``spec`` and writes its result dict to
    ``spec["result"]``, which is returned.  A failure is a TinyglotError naming ``what`` and ``fix``."""
    with tempfile.TemporaryDirectory(prefix="tinyglot-tf-") as tmp:
        spec = {**spec, "result": str(Path(tmp) / "result.json")}
        (Path(tmp) / "spec.json").write_text(json.dumps(spec), encoding="utf-8")
        # transformers enables its TF classes only if USE_TF is true AND USE_TORCH is not "1"
        env = {k: v for k, v in os.environ.items() if k != "USE_TORCH"}
        env = {**env, "USE_TF": "1", "TF_CPP_MIN_LOG_LEVEL": "2",
               "CUDA_VISIBLE_DEVICES": os.environ.get("CUDA_VISIBLE_DEVICES", ""),
               "OMP_NUM_THREADS": str(max(1, int(threads))), "TF_NUM_INTRAOP_THREADS": str(max(1, int(threads))),
               "TF_NUM_INTEROP_THREADS": "1"}
        cmd = [sys.executable, "-m", module, "--spec", str(Path(tmp) / "spec.json")]
        proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout)
        if proc.returncode != 0:
            tail = "\n".join((proc.stderr or proc.stdout).strip().splitlines()[-15:])
            raise TinyglotError(f"{what} failed (exit {proc.returncode}):\n{tail}", fix)
        return json.loads((Path(tmp) / "result.json").read_text(encoding="utf-8"))


# ====================================================================== running a bundle
class SavedModelEncoder:
    """``Encoder`` over a raw-string SavedModel, loaded with ``tensorflow_hub.KerasLayer``.

    The graph tokenises: ``encode`` feeds the strings themselves (sorted by length: tokens of
    ``tokenizer``, the bundle's, else characters; in batches of ``batch_size``).  :meth:`run_batch`
    feeds token ids through the ``encode_ids`` function."""

    def __init__(self, path: str | Path, max_len: int | None = None, threads: int = 1, name: str = "",
                 tokenizer: Any = None) -> None:
        _require_tf()
        _tf_threads(threads)
        import tensorflow_hub as hub
        import tensorflow_text  # noqa: F401  (registers SentencepieceOp before the graph is loaded)

        self.path = Path(path)
        self.max_len = max_len
        self.tokenizer = tokenizer
        self.name = name or f"savedmodel ({self.path.name})"
        try:
            self.layer = hub.KerasLayer(str(self.path), trainable=False)
        except Exception as exc:
            raise TinyglotError(f"tensorflow_hub.KerasLayer cannot load {self.path} ({type(exc).__name__}: {exc})",
                                "re-export the bundle with `tinyglot export --format savedmodel`") from None

    def embed_strings(self, sentences: Sequence[str]) -> np.ndarray:
        import tensorflow as tf

        return np.asarray(self.layer(tf.constant(list(sentences), dtype=tf.string)), dtype=np.float32)

    def run_batch(self, ids: np.ndarray, mask: np.ndarray) -> np.ndarray:
        import tensorflow as tf

        fn = self.layer.resolved_object.encode_ids
        return np.asarray(fn(tf.constant(np.asarray(ids, dtype=np.int32)),
                             tf.constant(np.asarray(mask, dtype=np.int32))), dtype=np.float32)

    def encode(self, sentences: Sequence[str], batch_size: int = 64) -> np.ndarray:
        sentences = check_sentences(sentences)
        return encode_by_length(text_lengths(sentences, self.tokenizer, self.max_len or 0), batch_size,
                                lambda rows: self.embed_strings([sentences[i] for i in rows]))


def load_savedmodel_bundle(path: str | Path, threads: int = 1, **_: Any) -> SavedModelEncoder:
    """The loader named in a SavedModel bundle's config.json: ``tinyglot.load(bundle)`` calls it."""
    path = Path(path)
    cfg = read_bundle(path, FORMAT)
    return SavedModelEncoder(path, cfg.get("max_len"), threads=threads, name=f"savedmodel ({path.name})",
                             tokenizer=bundle_tokenizer(path, cfg))


# ====================================================================== the whole export
def _tree_sizes(folder: Path) -> dict[str, int]:
    return {p.relative_to(folder).as_posix(): p.stat().st_size for p in sorted(folder.rglob("*"))
            if p.is_file() and not any(part.startswith(".") for part in p.relative_to(folder).parts)}


def _token_check(tokenizer, sentences: Sequence[str], graph_ids: Sequence[Sequence[int]], max_len: int) -> None:
    expected = tokenizer.encode_ids(list(sentences), max_len)
    bad = [(s, e, g) for s, e, g in zip(sentences, expected, graph_ids, strict=True) if list(e) != list(g)]
    if bad or len(graph_ids) != len(expected):
        s, e, g = bad[0] if bad else ("", [], [])
        raise TinyglotError(
            f"tokenisation inside the SavedModel differs from tinyglot's tokenizer on {len(bad)} of "
            f"{len(expected)} sentences, e.g. {s!r}: graph {list(g)[:12]} vs python {list(e)[:12]}",
            "the graph must embed the same tokenizer.model (same normaliser, e.g. nmt_nfkc_cf lower-casing)")


SAVEDMODEL_ITEMS = ("saved_model.pb", "fingerprint.pb", "variables", "assets")


@dataclass
class SavedModelConverter(Converter):
    """SavedModel's part of :func:`~tinyglot.export.bundle.export_bundle`: the TF twin of the source's
    transformers folder (built in a ``USE_TF=1`` subprocess) with the tokenizer in the graph, and the
    check that the graph tokenises like tinyglot."""

    threads: int = 1
    check_sentences: list[str] = field(default_factory=list)
    graph_tokenizer: bytes | None = None
    pooling: str = "mean"
    build: dict = field(default_factory=dict)

    def check(self, source: Source) -> None:
        folder = KINDS[source.config["kind"]].transformers_folder
        if folder is None:
            raise TinyglotError(f"SavedModel export needs a transformers model folder; a {source.config['kind']!r} "
                                "is a torch checkpoint", "export the teacher with --format onnx or tflite")
        if source.config.get("extra_weights"):
            raise TinyglotError(f"SavedModel export covers the transformers model only; {source.path} has "
                                f"{', '.join(source.config['extra_weights'])} on top",
                                "export it with --format onnx or tflite")

    def convert(self, source: Source, work: Path, say: Callable[[str], None]) -> dict:
        tok_path = work / TOKENIZER
        tok_path.write_bytes(self.graph_tokenizer if self.graph_tokenizer is not None else source.tokenizer.proto)
        folder = source.path / str(KINDS[source.config["kind"]].transformers_folder)
        say(f"building the SavedModel of {source.path} in a TensorFlow subprocess (USE_TF=1)")
        t0 = time.perf_counter()
        self.build = build_savedmodel(folder, tok_path, work / "sm", source.max_len,
                                      check_sentences=self.check_sentences, threads=self.threads,
                                      pooling=self.pooling)
        self.build["seconds"] = time.perf_counter() - t0
        _token_check(source.tokenizer, self.check_sentences, self.build["graph_ids"], source.max_len)
        self.model_files = tuple(item.name for item in (work / "sm").iterdir())
        for name in self.model_files:
            os.replace(work / "sm" / name, work / name)
        return {}

    def open(self, out: Path, source: Source) -> SavedModelEncoder:
        return SavedModelEncoder(out, source.max_len, threads=self.threads, tokenizer=source.tokenizer)

    def gates(self) -> Gates:
        return Gates.for_mode("none")

    def files(self, out: Path) -> list[str]:
        return [name for name in _tree_sizes(out) if name.split("/")[0] in SAVEDMODEL_ITEMS]

    def sizes(self, out: Path) -> dict[str, int]:
        return _tree_sizes(out)

    def extra(self, stats: dict, exported: Any, source: Source) -> dict:
        files, sizes = self.files(exported.path), _tree_sizes(exported.path)
        stats.update(files=files, bytes=sum(sizes[f] for f in files))
        return {"savedmodel": {
            "inputs": "raw strings", "signatures": {
                STRING_SIGNATURE: {"sentences": "string [None]", OUTPUT_NAME: "float32 [None, dim]"},
                IDS_SIGNATURE: {"input_ids": "int32 [None, None]", "attention_mask": "int32 [None, None]",
                                OUTPUT_NAME: "float32 [None, dim]"}},
            "tokenization": "tensorflow_text.SentencepieceTokenizer (tokenizer.model in the graph)",
            "load": "tensorflow_hub.KerasLayer(bundle) after `import tensorflow_text`",
            "tokenization_checked": len(self.check_sentences), "tf_version": self.build["tf_version"],
            "build_seconds": round(self.build["seconds"], 1)}}


def export_savedmodel(
    model: str | Path,
    out: str | Path,
    quantization: str = "none",
    *,
    threads: int = 1,
    max_sentences: int = 100,
    testset=None,
    gates: Gates | None = None,
    parity_gate: bool = True,
    extra_config: dict | None = None,
    graph_tokenizer: bytes | None = None,
    pooling: str = "mean",
    say: Callable[[str], None] = lambda msg: None,
) -> ExportResult:
    """Export the student at ``model`` (any kind with a transformers folder: LEALLA, multi-stage) to a
    raw-string SavedModel bundle in ``out`` and check parity.

    Only ``quantization="none"``.  ``graph_tokenizer`` (tests) embeds another SentencePiece proto
    in the graph; ``pooling="first"`` (tests) builds a broken graph; both must be caught.
    As for ONNX, ``config.json`` is written last and only if the checks pass (or ``parity_gate=False``
    for the parity gates; the tokenisation check always fails loudly).
    """
    _require_tf(build=True)
    if (quantization or "none") not in MODES:
        raise TinyglotError(f"SavedModel export supports no quantization ({quantization!r})",
                            "use --quantize none, or --format tflite/onnx for int8 and fp16")
    source, out = open_source(model, out)
    max_len = source.max_len
    # sentences for the tokenisation check: the parity sentences, upper-cased copies, and edge cases
    if testset is None:
        from tinyglot.data.embedded import load_testset

        testset = load_testset()
    langs = set(source.tokenizer.languages)
    check = [s for lang, pairs in testset.items() if lang in langs
             for p in list(pairs)[:max_sentences] for s in (p.x, p.en)]
    check = check + [s.upper() for s in check[:200]] + ["HELLO World", "ÄÖÜ Straße", "ＦＵＬＬＷＩＤＴＨ ｶﾀｶﾅ",
                                                       "x " * (4 * max_len)]
    converter = SavedModelConverter(fmt=FORMAT, loader=LOADER, label="savedmodel",
                                    quantization={"mode": "none", "name": "none"},
                                    threads=threads, check_sentences=check, graph_tokenizer=graph_tokenizer,
                                    pooling=pooling)
    return export_bundle(converter, model, out, source=source, testset=testset, max_sentences=max_sentences,
                         gates=gates, parity_gate=parity_gate, extra_config=extra_config, say=say)


__all__ = ["SavedModelConverter", "SavedModelEncoder", "build_savedmodel", "export_savedmodel",
           "load_savedmodel_bundle", "run_tf_subprocess"]


if __name__ == "__main__":
    sys.exit(_main())
