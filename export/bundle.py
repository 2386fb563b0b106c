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
import hashlib
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
from tinyglot.io import atomic_write_json, read_json_object
from tinyglot.outputs import claim_output
from tinyglot.models import config_files, folder_file, read_model_config
from tinyglot.registry import BUNDLE_KIND, load_source, source_kinds, source_sha, source_size, source_weight_files

CONFIG = "config.json"
ALLOW_UNVERIFIED = "TINYGLOT_ALLOW_UNVERIFIED"  # =1: a bundle without its integrity record loads, with a warning
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
    """The bundle folder must differ from the source (what else it may hold: :func:`claim_bundle_out`)."""
    if out.resolve() == model_path.resolve():
        raise TinyglotError("the bundle folder is the source folder", "pass another --out")


def legacy_bundle_files(folder: Path) -> list[str] | None:
    """The top-level names a bundle folder written before ownership records holds as its own (None: the
    folder is no such bundle)."""
    cfg = read_json_object(folder / CONFIG)
    if cfg is None or cfg.get("kind") != BUNDLE_KIND:
        return None
    listed = [*(cfg.get("files") or []), *(cfg.get("sha256") or {}), cfg.get("tokenizer", TOKENIZER)]
    return [CONFIG, PARITY, TOKENIZER, "README.md", *(str(n).split("/")[0] for n in listed if isinstance(n, str))]


def claim_bundle_out(out: str | Path) -> None:
    """``out`` may take a bundle: new, empty, or a bundle folder that holds only the files tinyglot wrote
    there (an export replaces the whole folder); else a clear error and nothing touched."""
    claim_output(out, BUNDLE_KIND, legacy=legacy_bundle_files, exclusive=True)


def config_digest(cfg: dict) -> str:
    """sha256 of a bundle config's content, less its own digests (recorded as ``config_sha256``)."""
    body = {k: v for k, v in cfg.items() if k not in ("sha256", "config_sha256")}
    return hashlib.sha256(json.dumps(body, sort_keys=True, ensure_ascii=False).encode("utf-8")).hexdigest()


def onnx_external_files(path: Path) -> list[str]:
    """The external-data files an ONNX model names (its weights kept beside it), as written there."""
    import onnx

    model = onnx.load(str(path), load_external_data=False)
    names: set[str] = set()
    for tensor in model.graph.initializer:
        if tensor.data_location == onnx.TensorProto.EXTERNAL:
            names.update(e.value for e in tensor.external_data if e.key == "location")
    return sorted(names)


def verified_files(folder: Path, cfg: dict) -> list[str]:
    """Every file a bundle's loader reads: its model files, their ONNX external data, the tokenizer."""
    files = [*cfg["files"], cfg.get("tokenizer", TOKENIZER)]
    for name in cfg["files"]:
        if str(name).endswith(".onnx"):
            files += [str(Path(name).parent / ext) if Path(name).parent != Path(".") else ext
                      for ext in onnx_external_files(folder_file(folder, name, "'files'"))]
    return files


def parity_summary(report, gated: bool) -> dict:
    """The parity figures a bundle's config.json carries."""
    return {"passed": report.passed, "mean_cosine": report.mean_cosine, "p1_drop": report.p1_drop, "gated": gated}


def finalize_bundle(out: str | Path, cfg: dict, report, parity_gate: bool, failed: str) -> None:
    """Write config.json (which makes the bundle loadable) only if parity passed or is not gated; else
    raise, ``failed`` saying where the failed bundle is (:func:`export_bundle` decides).

    ``cfg["sha256"]`` records the digest of every file the bundle's loader reads (model files and
    tokenizer); :func:`read_bundle` checks them, so a swapped or damaged file is refused."""
    if parity_gate and not report.passed:
        report.raise_if_failed(f"{failed}. Pass --no-parity-gate to keep it anyway")
    seal_bundle_config(out, cfg)


def seal_bundle_config(out: str | Path, cfg: dict) -> None:
    """Record in ``cfg`` the sha256 of every file the bundle ``out``'s loader reads and of ``cfg`` itself,
    and write it as the bundle's config.json (also after a file of a finished bundle was rewritten)."""
    out = Path(out)
    cfg["sha256"] = file_digests(out, verified_files(out, cfg))
    cfg["config_sha256"] = config_digest(cfg)
    write_bundle_config(out, cfg)


def bundle_tokenizer(path: str | Path, cfg: dict) -> Any:
    """The :class:`~tinyglot.tokenizer.Tokenizer` of the bundle ``path`` (config ``cfg``, as
    :func:`read_bundle` returns it): string-in encoders sort a call's sentences by its token counts."""
    from tinyglot.tokenizer import Tokenizer

    return Tokenizer.load(folder_file(Path(path), cfg.get("tokenizer", TOKENIZER), "'tokenizer'"))


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
    if "sha256" in cfg and "config_sha256" in cfg:
        check_sha256(path, cfg["sha256"])
        if cfg["config_sha256"] != config_digest(cfg):
            raise TinyglotError(f"{path}/config.json was changed after the export (its content no longer matches "
                                "the digest recorded in it)", "re-export the bundle with `tinyglot export`")
        missing = sorted(set(verified_files(path, cfg)) - set(cfg["sha256"]))
        if missing:
            raise TinyglotError(f"{path}/config.json records no digest for {', '.join(missing)}, which the model "
                                "reads", "re-export the bundle with `tinyglot export`")
    elif os.environ.get(ALLOW_UNVERIFIED) == "1":
        from rich.markup import escape

        from tinyglot.console import make_console

        make_console(stderr=True).print(
            f"[bold yellow]WARNING:[/] {escape(str(path))} has no integrity record (sha256 of its files and config): "
            f"it is loaded UNVERIFIED because {ALLOW_UNVERIFIED}=1 (--allow-unverified), and what it computes may "
            "come from damaged or swapped files", soft_wrap=True)
    else:
        raise TinyglotError(
            f"{path} has no integrity record (config.json lacks 'sha256' or 'config_sha256'), so its files "
            "cannot be checked: it was damaged, edited, or exported by an older tinyglot",
            "re-export it with `tinyglot export`; to load it anyway, pass --allow-unverified to the command "
            f"(or set {ALLOW_UNVERIFIED}=1)")
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
    """prepare -> convert -> verify -> finalise -> swap, the same for every format:

    the source is opened and ``out`` claimed (new, empty, or a bundle folder holding only tinyglot's
    files: else a clear error and nothing touched); the whole bundle is built in a staging folder
    beside ``out``: the converter's model files, the tokenizer, ``parity.json`` against the PyTorch
    source (and the converter's own checks), then ``config.json`` last, only if the parity gates
    passed (or not ``parity_gate``).  The finished folder then replaces ``out`` in one atomic swap, so
    a kill at any point leaves the earlier bundle or the new one.  A bundle that fails its gates
    replaces nothing: it is kept (without config.json) only where ``out`` held no bundle."""
    from tinyglot.outputs import remove_dead_staging, replace_folder, staging_folder

    if source is None:
        source, out = open_source(model, out)
    out = Path(out)
    converter.check(source)
    claim_bundle_out(out)
    remove_dead_staging(out)  # what a killed export into ``out`` left beside it (its record says so)
    stage = staging_folder(out)
    keep_failed = not (out / CONFIG).exists()  # a bundle that fails its gates is kept where out holds none
    failed = (f"inspect {out / PARITY}; the bundle was not finalised (no config.json)" if keep_failed
              else f"{out} keeps its earlier bundle and the failed one was not kept")
    try:
        result = _build_bundle(converter, source, stage, testset, max_sentences, gates, parity_gate, extra_config,
                               failed, say)
    except TinyglotError:
        if keep_failed and (stage / PARITY).exists() and not (stage / CONFIG).exists():
            replace_folder(stage, out, BUNDLE_KIND)  # the failed bundle, for inspection
        else:
            shutil.rmtree(stage, ignore_errors=True)
        raise
    except BaseException:
        shutil.rmtree(stage, ignore_errors=True)
        raise
    replace_folder(stage, out, BUNDLE_KIND)
    return ExportResult(out, result.config, result.parity, converter.sizes(out), result.source_bytes, result.graph)


def _build_bundle(converter: Converter, source: Source, out: Path, testset: Any, max_sentences: int, gates: Any,
                  parity_gate: bool, extra_config: dict | None, failed: str,
                  say: Callable[[str], None]) -> ExportResult:
    """The bundle, complete, in the (staging) folder ``out``; ``failed``: :func:`finalize_bundle`'s."""
    from .parity import check_parity

    with tempfile.TemporaryDirectory(prefix=".export-", dir=out) as tmp:
        stats = converter.convert(source, Path(tmp), say)
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
    finalize_bundle(out, cfg, report, parity_gate, failed)
    return ExportResult(out, cfg, report, {}, source_size(source.path, source.config), stats)


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
    "ALLOW_UNVERIFIED", "BUNDLE_KIND", "CONFIG", "PARITY", "SOURCE_KINDS", "TOKENIZER", "Converter", "ExportResult",
    "Source", "StringBundleConverter",
    "bundle_config", "check_bundle_out", "claim_bundle_out", "config_digest", "eager_attention",
    "embedding_module_class", "encode_token_batches", "export_bundle", "file_sizes", "find_transformer",
    "human_size", "legacy_bundle_files", "load_source", "onnx_external_files", "open_source", "read_bundle",
    "source_sha", "source_size", "source_weight_files", "verified_files", "write_bundle_config",
]
