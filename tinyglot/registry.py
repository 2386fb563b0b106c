"""The model kinds tinyglot trains, by the ``"kind"`` of their ``config.json``, and what each supports.

Every command that takes a model folder (export in every format, vocabulary pruning, the torch
bench, the pipeline's stage markers, the multi-stage assistant) asks this registry instead of
comparing kind strings, so a new student kind works everywhere once it is registered here.

The core must not import the stages, so a kind names its functions as ``"module:function"`` strings
that are imported only when called (the same plugin mechanism as :data:`tinyglot.models.LOADERS`);
a package adds a kind with :func:`register_kind`.

A kind's functions:

* ``load`` (path) -> ``(module with .embed(ids, mask), tokenizer, config)``, the module in eval mode on the CPU;
* ``save`` (model, tokenizer, out, source config, extra) -> out: write a folder of the same kind
  (vocabulary pruning writes the pruned model with it); None: the kind cannot be re-saved;
* ``transformers_folder``: the sub-folder holding a plain ``transformers`` model (``save_pretrained``):
  the SavedModel export builds its TensorFlow twin from it with ``TFAutoModel`` (BertModel ->
  TFBertModel, AlbertModel -> TFAlbertModel); None: a torch checkpoint only;
* ``weights``: ``"folder"`` (the files of ``transformers_folder`` plus ``config["extra_weights"]``) or
  ``"checkpoint"`` (``best.pt``, else ``last.pt``): the files whose bytes define the weights.
"""

from __future__ import annotations

import hashlib
import importlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tinyglot.errors import TinyglotError
from tinyglot.models import folder_file, read_model_config

BUNDLE_KIND = "bundle"


@dataclass(frozen=True)
class ModelKind:
    """One kind of model folder (see the module docstring)."""

    name: str
    load: str
    save: str | None = None
    transformers_folder: str | None = "model"
    weights: str = "folder"
    role: str = "student"  # "student" or "teacher": how errors and help describe it

    def function(self, which: str) -> Callable[..., Any]:
        """The function ``load`` or ``save`` names, imported now."""
        target = getattr(self, which)
        if target is None:
            raise TinyglotError(f"a {self.name} folder cannot be re-saved", "use a student folder")
        module_name, func_name = target.split(":")
        try:
            return getattr(importlib.import_module(module_name), func_name)
        except ImportError as exc:
            raise TinyglotError(f"cannot import {target} for {self.name} folders ({exc})",
                                "install tinyglot with the extra that provides it") from None

    @property
    def can_prune(self) -> bool:
        """Vocabulary pruning slices the input embeddings of a transformers model and re-saves it."""
        return self.save is not None and self.transformers_folder is not None


KINDS: dict[str, ModelKind] = {}


def register_kind(kind: ModelKind) -> ModelKind:
    """Add (or replace) a model kind; returns it."""
    KINDS[kind.name] = kind
    return kind


for _kind in (
    ModelKind("lealla-student", "tinyglot.distill.student:load_student_model",
              "tinyglot.distill.student:resave_student"),
    ModelKind("ems-teacher", "tinyglot.teacher.encoder:load_model", None, None, "checkpoint", "teacher"),
    ModelKind("multistage-student", "tinyglot.distill.multistage.io:load_ms_model",
              "tinyglot.distill.multistage.io:resave_ms_model"),
    ModelKind("multistage-assistant", "tinyglot.distill.multistage.io:load_ms_model",
              "tinyglot.distill.multistage.io:resave_ms_model"),
):
    register_kind(_kind)


def source_kinds() -> tuple[str, ...]:
    """Every registered kind (the folders export, bench and the pipeline take as a model)."""
    return tuple(KINDS)


def kind_of(path: str | Path, cfg: dict) -> ModelKind:
    """The registered kind of the folder ``path`` (config ``cfg``), else a clear error."""
    kind = cfg.get("kind")
    if isinstance(kind, str) and kind in KINDS:
        return KINDS[kind]
    if kind == BUNDLE_KIND:
        raise TinyglotError(f"{path} is already an exported bundle ({cfg.get('format')})",
                            f"export from its source model instead: {cfg.get('source', 'the student folder')}")
    students = ", ".join(k.name for k in KINDS.values() if k.role == "student")
    teachers = ", ".join(k.name for k in KINDS.values() if k.role == "teacher")
    raise TinyglotError(f"{path} is not a model tinyglot can export (kind={kind!r})",
                        f"pass a student folder written by `tinyglot distill` ({students}) "
                        f"or a teacher run of `tinyglot teacher train` ({teachers})")


def load_source(path: str | Path) -> tuple[Any, Any, dict]:
    """``(module with .embed(ids, mask), tokenizer, config)`` of any registered model folder; the
    module is in eval mode on the CPU.  The stage that wrote the folder is imported only now.

    Internal, for the stages that rebuild a model (export, pruning, the torch bench, the assistant): it
    gives the bare torch module, not an ``Encoder``; to encode sentences, open a model with
    :func:`tinyglot.load`."""
    path = Path(path)
    if not path.exists():
        raise TinyglotError(f"model not found: {path}", "pass a student folder (tinyglot distill) or a teacher run")
    kind = kind_of(path, read_model_config(path))
    model, tokenizer, cfg = kind.function("load")(path)
    if not hasattr(model, "embed"):
        raise TinyglotError(f"the model of {path} has no embed(ids, mask) method")
    model.eval()
    return model, tokenizer, cfg


def source_weight_files(path: str | Path, cfg: dict) -> list[Path]:
    """The files whose bytes define the source model's weights (for sizes and ``source_sha``)."""
    path = Path(path)
    kind = KINDS.get(str(cfg.get("kind")))
    files: list[Path] = []
    if kind is not None and kind.weights == "folder" and kind.transformers_folder:
        folder = path / kind.transformers_folder
        files = sorted(p for p in folder.iterdir() if p.is_file()) if folder.is_dir() else []
        files += [path / name for name in cfg.get("extra_weights", ())]
    elif kind is not None and kind.weights == "checkpoint":
        best = path / "best.pt"
        files = [best if best.exists() else path / "last.pt"]
    return [f for f in files if f.is_file()]


def source_sha(path: str | Path, cfg: dict) -> str:
    """sha256 over the source's config.json, tokenizer and weight files (names and bytes)."""
    path = Path(path)
    digest = hashlib.sha256()
    tok = folder_file(path, cfg.get("tokenizer", "tokenizer.model"), "'tokenizer'")
    for f in [path / "config.json", tok, *source_weight_files(path, cfg)]:
        if f.is_file():
            digest.update(f.relative_to(path).as_posix().encode() + b"\0")
            with open(f, "rb") as fh:
                for chunk in iter(lambda: fh.read(1 << 20), b""):
                    digest.update(chunk)
    return digest.hexdigest()


def source_size(path: str | Path, cfg: dict) -> int:
    """Bytes of the source's weight files (a teacher checkpoint also holds the optimizer state)."""
    return sum(f.stat().st_size for f in source_weight_files(path, cfg))


__all__ = ["BUNDLE_KIND", "KINDS", "ModelKind", "kind_of", "load_source", "register_kind", "source_kinds",
           "source_sha", "source_size", "source_weight_files"]
