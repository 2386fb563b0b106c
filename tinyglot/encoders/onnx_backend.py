"""The ``onnx`` backend of transformers / sentence-transformers teachers: the bare transformer
(token ids in, ``last_hidden_state`` out) exported once with optimum-onnx into
``$TINYGLOT_HOME/onnx-teachers/<key>/`` and run with onnxruntime on as many threads as torch uses
(``torch.get_num_threads()`` when the teacher is loaded).

optimum leaves pooling outside the graph, which is what we want here: pooling, Dense and the
normalisation stay tinyglot's own Python code (:class:`tinyglot.encoders.transformers.HFModel`).
"""

from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

from tinyglot.config import tinyglot_home
from tinyglot.errors import TinyglotError
from tinyglot.onnx_graph import inference_session

BACKENDS = ("torch", "onnx")
MODEL_FILE = "model.onnx"
PIP_FIX = 'pip install "tinyglot[export]" (optimum-onnx and onnxruntime run the onnx backend)'


def check_backend(backend: str) -> str:
    if backend not in BACKENDS:
        raise TinyglotError(f"unknown teacher backend {backend!r}", f"use one of {', '.join(BACKENDS)}")
    return backend


def onnx_teacher_dir(key: str) -> Path:
    """The cache folder of one exported transformer, named by a digest of its encoder's identity."""
    return tinyglot_home() / "onnx-teachers" / hashlib.sha256(key.encode("utf-8")).hexdigest()[:20]


def export_transformer(model_dir: Path, dest: Path) -> Path:
    """``dest/model.onnx``, exported from the transformers folder ``model_dir`` unless already there.

    The export is written to a temporary folder beside ``dest`` and renamed into place, so a killed
    export leaves only a ``.tmp-*`` folder that is never read."""
    if (dest / MODEL_FILE).is_file():
        return dest / MODEL_FILE
    try:
        from optimum.exporters.onnx import main_export
    except ImportError:
        raise TinyglotError("the onnx teacher backend needs optimum-onnx", PIP_FIX) from None
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{dest.name}.tmp-", dir=dest.parent))
    tmp.chmod(0o755)  # mkdtemp's 0700 would hide a shared cache from other users
    try:
        main_export(model_name_or_path=str(model_dir), output=tmp, task="feature-extraction",
                    library_name="transformers", local_files_only=True, trust_remote_code=False,
                    no_post_process=True, do_validation=True)
        if not (tmp / MODEL_FILE).is_file():
            raise TinyglotError(f"optimum wrote no {MODEL_FILE} for {model_dir}",
                                "use the torch backend for this model")
        if dest.exists() and not (dest / MODEL_FILE).is_file():  # a folder left by something else
            shutil.rmtree(dest)
        try:
            os.replace(tmp, dest)
        except OSError:  # another process finished the same export first
            if not (dest / MODEL_FILE).is_file():
                raise
    except Exception as exc:
        shutil.rmtree(tmp, ignore_errors=True)
        if isinstance(exc, TinyglotError):
            raise
        raise TinyglotError(f"cannot export {model_dir} to ONNX ({type(exc).__name__}: {exc})",
                            "use the torch backend for this model") from None
    shutil.rmtree(tmp, ignore_errors=True)
    return dest / MODEL_FILE


class OnnxTransformer:
    """An exported transformer on onnxruntime: ``(ids, mask[, type ids]) -> last_hidden_state``."""

    def __init__(self, model_file: Path, threads: int) -> None:
        try:
            import onnxruntime as ort
        except ImportError:
            raise TinyglotError("the onnx teacher backend needs onnxruntime", PIP_FIX) from None
        opts = ort.SessionOptions()
        opts.intra_op_num_threads = max(1, threads)
        opts.inter_op_num_threads = 1
        self.session = inference_session(model_file, opts)
        self.inputs = {i.name for i in self.session.get_inputs()}
        self.output = "last_hidden_state" if "last_hidden_state" in {o.name for o in self.session.get_outputs()} \
            else self.session.get_outputs()[0].name

    def __call__(self, batch: dict[str, Any]) -> np.ndarray:
        feed = {k: np.asarray(v, dtype=np.int64) for k, v in batch.items() if k in self.inputs}
        if "token_type_ids" in self.inputs and "token_type_ids" not in feed:
            feed["token_type_ids"] = np.zeros_like(feed["input_ids"])
        return self.session.run([self.output], feed)[0]


def load_onnx_transformer(model_dir: Path, key: str, threads: int) -> OnnxTransformer:
    """Export ``model_dir`` once (cached under ``key``) and open it on onnxruntime."""
    return OnnxTransformer(export_transformer(model_dir, onnx_teacher_dir(key)), threads)
