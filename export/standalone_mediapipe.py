"""Run a tflite-mediapipe bundle with MediaPipe's TextEmbedder ONLY (no tinyglot, no sentencepiece):
``python -I standalone_mediapipe.py IN.json OUT.json``.

IN.json: ``{"model": path of model.tflite, "sentences": [...]}``.  OUT.json: ``{"runtime",
"modules" (every module loaded), "ids" (the ``token_ids`` head, padding dropped), "embeddings"
(the ``sentence_embedding`` head)}``.  Used by ``tinyglot.export.parity.check_standalone``.
"""

import json
import sys

# MediaPipe imports TensorFlow, when it is installed, only for a decorator of its API docs (seconds of
# start-up): hidden, as in a user's MediaPipe-only environment (tinyglot.quiet.optional_modules_hidden).
sys.modules.setdefault("tensorflow", None)  # type: ignore[arg-type]
from mediapipe.tasks.python.core import base_options  # noqa: E402
from mediapipe.tasks.python.text import text_embedder  # noqa: E402


def main(spec_path: str, out_path: str) -> None:
    import mediapipe

    with open(spec_path, encoding="utf-8") as fh:
        spec = json.load(fh)
    options = text_embedder.TextEmbedderOptions(
        base_options=base_options.BaseOptions(model_asset_path=spec["model"]), l2_normalize=False, quantize=False)
    ids_out, emb_out = [], []
    with text_embedder.TextEmbedder.create_from_options(options) as embedder:
        for sentence in spec["sentences"]:
            heads = {e.head_name: e.embedding for e in embedder.embed(sentence).embeddings}
            ids = [round(float(x)) for x in heads["token_ids"]]
            while ids and ids[-1] == 0:  # id 0 is <pad>, never a token
                ids.pop()
            ids_out.append(ids)
            emb_out.append([float(x) for x in heads["sentence_embedding"]])
    loaded = sorted(name for name, module in sys.modules.items() if module is not None)  # not the hidden one
    answer = {"runtime": f"mediapipe {getattr(mediapipe, '__version__', '?')}", "modules": loaded,
              "ids": ids_out, "embeddings": emb_out}
    with open(out_path, "w", encoding="utf-8") as fh:
        json.dump(answer, fh)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
