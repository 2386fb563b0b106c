"""The layout every exported bundle shares, whatever its format, and opening export sources.

A bundle is a folder::

    model.onnx          the model file(s) of the format (ONNX here; TFLite/SavedModel later)
    tokenizer.model     the SentencePiece vocabulary, byte for byte the source's
    config.json         {"loader", "kind": "bundle", "format", "dim", "max_len", "languages",
                         "pooling": "mean", "normalize": true, "quantization": {...},
                         "source", "source_kind", "source_sha", "tokenizer_sha256", "files", ...}
    parity.json         the parity report against the source (see ``tinyglot.export.parity``)

``tinyglot.load(bundle)`` follows ``config.json["loader"]`` like for any tinyglot model folder.
Pooling and normalisation live inside the model file: the runtime only tokenises and feeds
``input_ids`` + ``attention_mask``.
"""

from __future__ import annotations

import json
from pathlib import Path
from collections.abc import Sequence

import numpy as np

from tinyglot.errors import TinyglotError
from tinyglot.integrity import check_sha256, file_digests
from tinyglot.io import atomic_write_json
from tinyglot.models import config_files, folder_file, read_model_config
from tinyglot.registry import BUNDLE_KIND, load_source, source_kinds, source_sha, source_size, source_weight_files

CONFIG = "config.json"
TOKENIZER = "tokenizer.model"
PARITY = "parity.json"
SOURCE_KINDS = source_kinds()  # the kinds registered when this module was imported (see tinyglot.registry)


def bundle_config(
    *,
    loader: str,
    fmt: str,
    model_files: list[str],
    source: str | Path,
    source_cfg: dict,
    tokenizer,
    dim: int,
    max_len: int,
    quantization: dict,
    extra: dict | None = None,
) -> dict:
    """The ``config.json`` dict of a bundle (common keys first, format-specific ones in ``extra``)."""
    return {
        "loader": loader,
        "kind": BUNDLE_KIND,
        "format": fmt,
        "files": list(model_files),
        "tokenizer": TOKENIZER,
        "tokenizer_sha256": tokenizer.sha256,
        "dim": int(dim),
        "max_len": int(max_len),
        "languages": list(tokenizer.languages),
        "pooling": "mean",
        "normalize": True,
        "quantization": quantization,
        "source": str(Path(source).resolve()),
        "source_kind": source_cfg.get("kind"),
        "source_sha": source_sha(source, source_cfg),
        **(extra or {}),
    }


def write_bundle_config(out: str | Path, cfg: dict) -> Path:
    path = Path(out) / CONFIG
    atomic_write_json(path, cfg)
    return path


def encode_token_batches(encoder, sentences: Sequence[str], batch_size: int) -> np.ndarray:
    """``Encoder.encode`` for runtimes fed token ids: ``encoder`` has ``tokenizer``, ``max_len``
    and ``run_batch(ids, mask)``; batches are length-sorted, rows come back in input order."""
    from tinyglot.encoder import encode_by_length

    if isinstance(sentences, str):
        raise TinyglotError("encode() takes a list of sentences, got one string", "wrap it: [sentence]")
    ids = encoder.tokenizer.encode_ids(list(sentences), encoder.max_len)
    if not ids:
        raise TinyglotError("encode() got no sentences", "pass at least one sentence")

    def run(rows: np.ndarray) -> np.ndarray:
        batch = encoder.tokenizer.pad([ids[i] for i in rows], encoder.max_len)
        return encoder.run_batch(batch.ids, batch.mask)

    return encode_by_length([len(x) for x in ids], batch_size, run)


def check_bundle_out(model_path: Path, out: Path) -> None:
    """The bundle folder must differ from the source and must not hold another tinyglot model."""
    if out.resolve() == model_path.resolve():
        raise TinyglotError("the bundle folder is the source folder", "pass another --out")
    cfg_path = out / "config.json"
    if cfg_path.exists():
        try:
            kind = json.loads(cfg_path.read_text(encoding="utf-8")).get("kind")
        except (json.JSONDecodeError, AttributeError):
            kind = None
        if kind != "bundle":
            raise TinyglotError(f"{out} holds another tinyglot model", "pass an empty or new --out folder")


def parity_summary(report, gated: bool) -> dict:
    """The parity figures a bundle's config.json carries."""
    return {"passed": report.passed, "mean_cosine": report.mean_cosine, "p1_drop": report.p1_drop, "gated": gated}


def finalize_bundle(out: str | Path, cfg: dict, report, parity_gate: bool) -> None:
    """Write config.json (which makes the bundle loadable) only if parity passed or is not gated.

    ``cfg["sha256"]`` records the digest of every file the bundle's loader reads (model files and
    tokenizer); :func:`read_bundle` checks them, so a swapped or damaged file is refused."""
    out = Path(out)
    if parity_gate and not report.passed:
        report.raise_if_failed(f"inspect {out / PARITY}; the bundle was not finalised (no config.json). "
                               "Pass --no-parity-gate to keep it anyway")
    cfg["sha256"] = file_digests(out, [*cfg["files"], cfg.get("tokenizer", TOKENIZER)])
    write_bundle_config(out, cfg)


def read_bundle(path: str | Path, fmt: str | None = None) -> dict:
    """A bundle's config, checked: kind ``bundle``, the expected format, model files present (names
    inside the folder) and unchanged since the export (the sha256 its config recorded)."""
    path = Path(path)
    cfg = read_model_config(path)
    if cfg.get("kind") != BUNDLE_KIND:
        raise TinyglotError(f"{path} is not an exported bundle (kind={cfg.get('kind')!r})",
                            "pass the --out folder of `tinyglot export`")
    if fmt is not None and cfg.get("format") != fmt:
        raise TinyglotError(f"{path} is a {cfg.get('format')!r} bundle, not {fmt!r}")
    files = config_files(path, cfg, "files")
    if not files:
        raise TinyglotError(f"{path}/config.json lists no model files", "re-run `tinyglot export` into a fresh folder")
    for file in [*files, folder_file(path, cfg.get("tokenizer", TOKENIZER), "'tokenizer'")]:
        if not file.is_file():
            raise TinyglotError(f"{path} lacks {file.relative_to(path)}",
                                "re-run `tinyglot export` into a fresh folder")
    max_len = cfg.get("max_len")
    if not isinstance(max_len, int) or isinstance(max_len, bool) or max_len < 2:
        raise TinyglotError(f"{path}/config.json: max_len is {max_len!r}, not a whole number >= 2",
                            "re-run `tinyglot export` into a fresh folder")
    if not isinstance(cfg.get("quantization", {}), dict):
        raise TinyglotError(f"{path}/config.json: 'quantization' is not an object",
                            "re-run `tinyglot export` into a fresh folder")
    if "sha256" in cfg:  # bundles exported before the digests were recorded have none
        check_sha256(path, cfg["sha256"])
    return cfg


def file_sizes(folder: str | Path) -> dict[str, int]:
    """Bytes of each file of a bundle folder (hidden temporary files excluded)."""
    folder = Path(folder)
    return {p.name: p.stat().st_size for p in sorted(folder.iterdir()) if p.is_file() and not p.name.startswith(".")}


def human_size(n: int) -> str:
    for unit in ("B", "KB", "MB", "GB"):
        if n < 1000 or unit == "GB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.2f} {unit}"
        n /= 1000
    return str(n)  # pragma: no cover


__all__ = [
    "BUNDLE_KIND", "CONFIG", "PARITY", "SOURCE_KINDS", "TOKENIZER", "bundle_config", "file_sizes", "human_size",
    "load_source", "read_bundle", "source_sha", "source_size", "source_weight_files", "write_bundle_config",
]
