"""Run a string-in ONNX bundle with onnxruntime + onnxruntime-extensions ONLY (no tinyglot, no
sentencepiece): ``python -I standalone_onnx.py IN.json OUT.json``.

IN.json: ``{"model": path of model.onnx, "sentences": [...], "threads": n}``.  OUT.json:
``{"runtime", "modules" (every module loaded), "ids" (token ids per sentence, padding dropped),
"embeddings"}``.  Used by ``tinyglot.export.parity.check_standalone``; it is also the smallest
example of using such a bundle from Python.
"""

import glob
import importlib.machinery
import importlib.metadata
import importlib.util
import json
import os
import sys

import numpy as np
import onnxruntime as ort


def ortx_library_path() -> str:
    """The onnxruntime-extensions ops library, found without importing the Python package (whose
    ``__init__`` imports torch and transformers when they are installed); the same file as
    ``onnxruntime_extensions.get_library_path()``."""
    spec = importlib.util.find_spec("onnxruntime_extensions")
    if spec is None or not spec.submodule_search_locations:
        raise SystemExit("onnxruntime-extensions is not installed: pip install onnxruntime-extensions")
    folder = next(iter(spec.submodule_search_locations))
    found = [f for suffix in importlib.machinery.EXTENSION_SUFFIXES
             for f in glob.glob(os.path.join(folder, "_extensions_pydll" + suffix))]
    if not found:
        raise SystemExit("onnxruntime-extensions has no ops library (_extensions_pydll)")
    return found[0]


def main(spec_path: str, out_path: str) -> None:
    with open(spec_path, encoding="utf-8") as fh:
        spec = json.load(fh)
    so = ort.SessionOptions()
    so.register_custom_ops_library(ortx_library_path())
    so.intra_op_num_threads = int(spec.get("threads", 1))
    so.log_severity_level = 3
    session = ort.InferenceSession(spec["model"], so, providers=["CPUExecutionProvider"])
    sentences = spec["sentences"]
    ids_out, emb_out = [], []
    # batches of 16 in the given order: padding inside the graph must not change a row
    for start in range(0, len(sentences), 16):
        batch = np.array(sentences[start:start + 16], dtype=object)
        emb, ids = session.run(["sentence_embedding", "input_ids"], {"text": batch})
        for row in ids:
            row = [int(x) for x in row]
            while row and row[-1] == 0:  # id 0 is <pad>, never a token
                row.pop()
            ids_out.append(row)
        emb_out += emb.astype(float).tolist()
    answer = {"runtime": (f"onnxruntime {ort.__version__} + onnxruntime-extensions "
                          f"{importlib.metadata.version('onnxruntime-extensions')}"),
              "modules": sorted(sys.modules), "ids": ids_out, "embeddings": emb_out}
    with open(out_path, "w", encoding="utf-8") as fh:
        json.dump(answer, fh)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
