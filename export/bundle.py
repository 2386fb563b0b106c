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

import hashlib
import json
from pathlib import Path
from typing import Any
from tinyglot.encoder import encode_token_batches  # the one token-id batcher, re-exported for the formats
from tinyglot.errors import TinyglotError
from tinyglot.integrity import check_sha256, file_digests
from tinyglot.io import atomic_write_json
from tinyglot.models import config_files, folder_file, read_model_config

BUNDLE_KIND = "bundle"
CONFIG = "config.json"
TOKENIZER = "tokenizer.model"
PARITY = "parity.json"
STUDENT_KIND = "lealla-student"
TEACHER_KIND = "ems-teacher"
MULTISTAGE_KINDS = ("multistage-student", "multistage-assistant")  # a transformers folder in model/, like students
SOURCE_KINDS = (STUDENT_KIND, TEACHER_KIND, *MULTISTAGE_KINDS)


def load_source(path: str | Path) -> tuple[Any, Any, dict]:
    """``(module with .embed(ids, mask), tokenizer, config)`` of a student folder or an EMS teacher run.

    Dispatches on ``config.json["kind"]``; the distill and teacher stages are imported only when
    needed.  The module is in eval mode on the CPU.
    """
    path = Path(path)
    if not path.exists():
        raise TinyglotError(f"model not found: {path}", "pass a student folder (tinyglot distill) or a teacher run")
    cfg = read_model_config(path)
    kind = cfg.get("kind")
    if kind == STUDENT_KIND:
        from tinyglot.distill.student import load_student_model

        model, tokenizer, cfg = load_student_model(path)
    elif kind == TEACHER_KIND:
        from tinyglot.teacher.encoder import load_model

        model, tokenizer, cfg = load_model(path)
    elif kind in MULTISTAGE_KINDS:
        from tinyglot.distill.multistage import load_ms_model

        model, tokenizer, cfg = load_ms_model(path)
    elif kind == BUNDLE_KIND:
        raise TinyglotError(f"{path} is already an exported bundle ({cfg.get('format')})",
                            f"export from its source model instead: {cfg.get('source', 'the student folder')}")
    else:
        raise TinyglotError(
            f"{path} is not a model tinyglot can export (kind={kind!r})",
            f"pass a student folder written by `tinyglot distill` ({STUDENT_KIND}, {MULTISTAGE_KINDS[0]}) "
            f"or a teacher run of `tinyglot teacher train` ({TEACHER_KIND})",
        )
    if not hasattr(model, "embed"):
        raise TinyglotError(f"the model of {path} has no embed(ids, mask) method")
    model.eval()
    return model, tokenizer, cfg


def source_weight_files(path: str | Path, cfg: dict) -> list[Path]:
    """The files whose bytes define the source model's weights (for sizes and ``source_sha``)."""
    path = Path(path)
    if cfg.get("kind") in (STUDENT_KIND, *MULTISTAGE_KINDS):
        files = sorted(p for p in (path / "model").iterdir() if p.is_file())
        files += [path / name for name in cfg.get("extra_weights", ())]
    elif cfg.get("kind") == TEACHER_KIND:
        best = path / "best.pt"
        files = [best if best.exists() else path / "last.pt"]
    else:
        files = []
    return [f for f in files if f.is_file()]


def source_sha(path: str | Path, cfg: dict) -> str:
    """sha256 over the source's config.json, tokenizer and weight files (names and bytes)."""
    path = Path(path)
    digest = hashlib.sha256()
    tok = folder_file(path, cfg.get("tokenizer", TOKENIZER), "'tokenizer'")
    for f in [path / CONFIG, tok, *source_weight_files(path, cfg)]:
        if f.is_file():
            digest.update(f.relative_to(path).as_posix().encode() + b"\0")
            with open(f, "rb") as fh:
                for chunk in iter(lambda: fh.read(1 << 20), b""):
                    digest.update(chunk)
    return digest.hexdigest()


def source_size(path: str | Path, cfg: dict) -> int:
    """Bytes of the source's weight files (a teacher checkpoint also holds the optimizer state)."""
    return sum(f.stat().st_size for f in source_weight_files(path, cfg))


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
            raise TinyglotError(f"{path} lacks {file.relative_to(path)}", "re-run `tinyglot export` into a fresh folder")
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
    "BUNDLE_KIND", "CONFIG", "PARITY", "TOKENIZER", "bundle_config", "encode_token_batches", "file_sizes", "human_size",
    "load_source", "read_bundle", "source_sha", "source_size", "source_weight_files", "write_bundle_config",
]
