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

import contextlib
import json
import os
import shutil
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tinyglot.encoder import encode_token_batches  # the one token-id batcher, re-exported for the formats
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
    size = float(n)
    for unit in ("B", "KB", "MB", "GB"):
        if size < 1000 or unit == "GB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.2f} {unit}"
        size /= 1000
    return str(size)  # pragma: no cover


# ====================================================================== the graph every format converts
class _Wrapper:  # namespace for the lazily defined torch module class
    cls: Any = None


def embedding_module_class() -> Any:
    """``EmbeddingModule(model)``: ``(input_ids, attention_mask) -> L2-normalised sentence_embedding``
    of any model with ``embed(ids, mask)``; defined on first use so that this module needs no torch."""
    if _Wrapper.cls is None:
        import torch
        from torch import nn

        class EmbeddingModule(nn.Module):
            """``(input_ids, attention_mask) -> L2-normalised sentence_embedding`` of any model with
            ``embed(ids, mask)`` (a tinyglot student or an EMS teacher): pooling and normalisation
            are part of the exported graph."""

            def __init__(self, model) -> None:
                super().__init__()
                self.model = model

            def forward(self, input_ids, attention_mask):
                emb = self.model.embed(input_ids, attention_mask)
                return torch.nn.functional.normalize(emb, p=2.0, dim=-1, eps=1e-12)

        _Wrapper.cls = EmbeddingModule
    return _Wrapper.cls


def find_transformer(model: Any) -> Any:
    """The ``transformers`` model inside a source module (``model.encoder``), or None."""
    enc = getattr(model, "encoder", None)
    return enc if enc is not None and hasattr(enc, "config") else None


@contextlib.contextmanager
def eager_attention(model: Any) -> Iterator[None]:
    """Convert with eager attention: under tracing, sdpa's mask handling may be specialised to the
    example input; the eager graph is the same size and the runtimes fuse it."""
    bert = find_transformer(model)
    old = getattr(bert.config, "_attn_implementation", None) if bert is not None else None
    if bert is not None:
        bert.config._attn_implementation = "eager"
    try:
        yield
    finally:
        if bert is not None and old is not None:
            bert.config._attn_implementation = old


# ====================================================================== one skeleton for every format
@dataclass
class ExportResult:
    """What every ``export_*`` returns: the bundle folder, its config, the parity report, the bundle's
    file sizes, the source's weight bytes and the format's own figures (``graph``)."""

    out: Path
    config: dict
    parity: Any
    sizes: dict[str, int]
    source_bytes: int
    graph: dict


@dataclass
class Source:
    """The model being exported: its folder, torch module (``embed(ids, mask)``), tokenizer, config."""

    path: Path
    model: Any
    tokenizer: Any
    config: dict

    @property
    def max_len(self) -> int:
        return int(self.config["max_len"])

    def reference(self) -> Any:
        """The source as an ``Encoder`` (CPU, fp32): what the bundle must agree with."""
        from tinyglot.models import TorchEncoder

        return TorchEncoder(self.tokenizer, self.model.embed, self.max_len, name=f"source ({self.path.name})")


@dataclass
class Converter:
    """One bundle format's part of :func:`export_bundle`; subclasses override :meth:`convert`,
    :meth:`open` and :meth:`extra`, and the other hooks where the format needs them."""

    fmt: str = ""
    loader: str = ""
    label: str = ""  # the parity report's label, e.g. "onnx dynamic"
    quantization: dict = field(default_factory=dict)
    model_files: tuple[str, ...] = ()  # produced in the work folder, moved into the bundle
    stale: tuple[str, ...] = ()  # files or folders of an earlier export to remove before the move

    def check(self, source: Source) -> None:
        """Refuse a source this format cannot take (before any work)."""

    def convert(self, source: Source, work: Path, say: Callable[[str], None]) -> dict:
        """Write :attr:`model_files` into ``work``; returns the format's figures (ExportResult.graph)."""
        raise NotImplementedError

    def open(self, out: Path, source: Source) -> Any:
        """The exported bundle as an ``Encoder`` for the parity check."""
        raise NotImplementedError

    def gates(self) -> Any:
        raise NotImplementedError

    def verify(self, report: Any, out: Path, source: Source, reference: Any, testset: Any, gates: Any,
               max_sentences: int, say: Callable[[str], None]) -> None:
        """More checks after the in-process parity (e.g. the file in a process without tinyglot)."""

    def dim(self, exported: Any, reference: Any) -> int:
        return int(exported.encode(["a"]).shape[1])

    def files(self, out: Path) -> list[str]:
        """The model files the bundle's config lists (and its sha256 covers)."""
        return list(self.model_files)

    def extra(self, stats: dict, exported: Any, source: Source) -> dict:
        """The format's keys of config.json."""
        return {}

    def finish(self, out: Path, cfg: dict, report: Any) -> None:
        """Before config.json is written (e.g. the bundle's model card)."""

    def sizes(self, out: Path) -> dict[str, int]:
        return file_sizes(out)


def open_source(model: str | Path, out: str | Path) -> tuple[Source, Path]:
    """The source model of an export and the checked bundle folder."""
    model_path, out = Path(model), Path(out)
    source = Source(model_path, *load_source(model_path))
    check_bundle_out(model_path, out)
    return source, out


def export_bundle(converter: Converter, model: str | Path, out: str | Path, *, source: Source | None = None,
                  testset: Any = None, max_sentences: int = 100, gates: Any = None, parity_gate: bool = True,
                  extra_config: dict | None = None, say: Callable[[str], None] = lambda msg: None) -> ExportResult:
    """prepare -> convert -> verify -> finalise, the same for every format:

    the source is opened and checked; the converter writes its model files in a hidden work folder
    inside ``out``, which are moved into ``out`` only when the conversion succeeded (an earlier
    bundle's config.json and parity.json are removed then); the tokenizer is copied; parity against
    the PyTorch source is measured (and the converter's own checks run); ``parity.json`` is written,
    then ``config.json`` last, and only if the parity gates passed (or not ``parity_gate``)."""
    from .parity import check_parity

    if source is None:
        source, out = open_source(model, out)
    out = Path(out)
    converter.check(source)
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=".export-", dir=out) as tmp:
        stats = converter.convert(source, Path(tmp), say)
        for stale in (CONFIG, PARITY, *converter.stale):
            path = out / stale
            if path.is_dir() and not path.is_symlink():
                shutil.rmtree(path)
            else:
                path.unlink(missing_ok=True)
        for name in converter.model_files:
            os.replace(Path(tmp) / name, out / name)
    source.tokenizer.save(out / TOKENIZER)
    gates = gates or converter.gates()
    say(f"checking parity against the source on up to {max_sentences} pairs per language")
    reference = source.reference()
    exported = converter.open(out, source)
    try:
        report = check_parity(reference, exported, testset, gates, languages=source.tokenizer.languages,
                              max_sentences=max_sentences, label=converter.label)
        dim = converter.dim(exported, reference)
    finally:
        close = getattr(exported, "close", None)
        if callable(close):
            close()
    converter.verify(report, out, source, reference, testset, gates, max_sentences, say)
    report.write_json(out / PARITY)
    cfg = bundle_config(loader=converter.loader, fmt=converter.fmt, model_files=converter.files(out),
                        source=source.path, source_cfg=source.config, tokenizer=source.tokenizer, dim=dim,
                        max_len=source.max_len, quantization=converter.quantization,
                        extra={**converter.extra(stats, exported, source),
                               "parity": parity_summary(report, parity_gate), **(extra_config or {})})
    converter.finish(out, cfg, report)
    finalize_bundle(out, cfg, report, parity_gate)
    return ExportResult(out, cfg, report, converter.sizes(out), source_size(source.path, source.config), stats)



@dataclass
class StringBundleConverter(Converter):
    """A raw-strings-in format (tokenizer inside the file): after the in-process parity the file is checked
    again in a separate process that has only the stock runtime (``standalone_script`` beside
    :mod:`tinyglot.export.parity`), and the bundle gets a model card."""

    threads: int = 1
    standalone: bool = True
    card: bool = True
    standalone_script: str = ""
    standalone_runtime: str = ""  # what that process has, for the progress line

    def verify(self, report: Any, out: Path, source: Source, reference: Any, testset: Any, gates: Any,
               max_sentences: int, say: Callable[[str], None]) -> None:
        from .parity import check_standalone

        if self.standalone:
            say(f"checking the file in a separate process with {self.standalone_runtime} only")
            report.standalone = check_standalone(self.standalone_script, out / self.model_files[0], reference,
                                                 source.tokenizer, source.max_len, testset, gates,
                                                 languages=source.tokenizer.languages,
                                                 max_sentences=max_sentences, threads=self.threads)

    def finish(self, out: Path, cfg: dict, report: Any) -> None:
        if self.card:  # tinyglot run writes its own README.md (with this usage part) after its report
            self.write_card(out, cfg, report)

    def write_card(self, out: Path, cfg: dict, report: Any) -> None:
        """The bundle's README.md: how to use the file without tinyglot."""
        raise NotImplementedError

__all__ = [
    "BUNDLE_KIND", "CONFIG", "PARITY", "SOURCE_KINDS", "TOKENIZER", "Converter", "ExportResult", "Source",
    "StringBundleConverter",
    "bundle_config", "eager_attention", "embedding_module_class", "encode_token_batches", "export_bundle",
    "file_sizes", "find_transformer",
    "human_size", "load_source", "open_source", "read_bundle", "source_sha", "source_size", "source_weight_files",
    "write_bundle_config",
]
