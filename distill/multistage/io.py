"""Multi-stage folders: save and load a stage's output (student or assistant), and open the assistant."""

from __future__ import annotations

import hashlib
from pathlib import Path

from safetensors import SafetensorError
from safetensors.torch import load_file, save_file

from tinyglot.errors import CheckpointError, TinyglotError
from tinyglot.io import atomic_folder, atomic_write_json
from tinyglot.models import (TorchEncoder, check_transformers_folder, load_folder_tokenizer, model_subfolder,
                             read_model_config)
from tinyglot.registry import load_source, source_sha
from tinyglot.tokenizer import Tokenizer
from tinyglot.training import select_device

from .model import MSModel

KIND_STUDENT = "multistage-student"
KIND_ASSISTANT = "multistage-assistant"
LOADER = "tinyglot.distill.multistage:load_multistage"
ASSISTANT_KINDS = ("ems-teacher", "lealla-student", KIND_ASSISTANT)
ASSISTANT_FIX = ("pass a tinyglot BERT model folder: an EMS teacher run (tinyglot teacher train), a LEALLA "
                 "student, or the stage1/assistant folder of an earlier multi-stage run; leave --assistant "
                 "out for the cached default ems-small teacher")
HEADS_FILE = "heads.safetensors"


def save_ms_model(model: MSModel, tokenizer: Tokenizer, out: str | Path, kind: str, max_len: int,
                  extra: dict | None = None) -> Path:
    """``out/``: ``model/`` (a plain transformers folder), ``heads.safetensors``, ``tokenizer.model`` and
    ``config.json``."""
    out = Path(out)
    with atomic_folder(out) as tmp:
        model.encoder.save_pretrained(tmp / "model", safe_serialization=True)
        save_file({k: v.contiguous() for k, v in model.heads.state_dict().items()}, str(tmp / HEADS_FILE),
                  metadata={"kind": "multistage-heads"})  # safetensors: the same weights give the same bytes
        tokenizer.save(tmp / "tokenizer.model")
        atomic_write_json(tmp / "config.json", {
            "loader": LOADER, "kind": kind, "encoder": model.encoder.config.model_type, "tokenizer": "tokenizer.model",
            "tokenizer_sha256": tokenizer.sha256, "dim": model.hidden_size, "max_len": int(max_len),
            "languages": list(tokenizer.languages), "pooling": "mean", "normalize": True,
            "parameters": model.parameter_counts(), "heads": model.head_shapes(), **(extra or {}),
        })
    return out


def load_ms_model(path: str | Path) -> tuple[MSModel, Tokenizer, dict]:
    """The model (eval mode, CPU), tokenizer and config of a multi-stage student or assistant folder."""
    from transformers import AutoModel

    path = Path(path)
    cfg = read_model_config(path)
    if cfg.get("kind") not in (KIND_STUDENT, KIND_ASSISTANT):
        raise CheckpointError(f"{path} is not a multi-stage student or assistant (kind={cfg.get('kind')!r})",
                              "pass a folder written by `tinyglot distill --recipe multistage`")
    tokenizer = load_folder_tokenizer(path, cfg["tokenizer"], cfg.get("tokenizer_sha256"), "model", "trained",
                                      CheckpointError)
    model_dir = model_subfolder(path, "model")
    if model_dir.is_dir():
        check_transformers_folder(model_dir, path)
    try:
        encoder = AutoModel.from_pretrained(model_dir, add_pooling_layer=False, local_files_only=True)
        heads = load_file(str(path / HEADS_FILE))
    except (OSError, ValueError, RuntimeError, TypeError, AssertionError, SafetensorError) as exc:
        raise CheckpointError(f"the weights in {path} cannot be read ({exc})",
                              "re-create the folder (rerun the stage that wrote it)") from None
    if encoder.config.vocab_size != tokenizer.vocab_size:
        raise CheckpointError(f"tokenizer has {tokenizer.vocab_size} pieces, the model expects "
                              f"{encoder.config.vocab_size}", "use the tokenizer the model was trained with")
    model = MSModel(encoder, {k: tuple(v) for k, v in cfg.get("heads", {}).items()})
    model.heads.load_state_dict(heads)
    return model.eval(), tokenizer, cfg


def load_multistage(path: str | Path, device: str = "cpu") -> TorchEncoder:
    """The loader named in the folders' config.json: ``tinyglot.load(folder)`` calls it."""
    model, tokenizer, cfg = load_ms_model(path)
    dev = select_device(device)
    model.to(dev)
    return TorchEncoder(tokenizer, model.embed, cfg["max_len"], dev, name=f"{cfg['kind']} ({Path(path).name})")


def weights_sha(folder: Path) -> str:
    """sha256 of the files that define a saved model (``model/``, the heads, ``tokenizer.model``)."""
    digest = hashlib.sha256()
    files = sorted((folder / "model").iterdir()) + [folder / HEADS_FILE, folder / "tokenizer.model"]
    for f in files:
        if f.is_file():
            digest.update(f.name.encode() + b"\0" + f.read_bytes())
    return digest.hexdigest()


def load_assistant(path: str | Path) -> tuple[MSModel, Tokenizer, dict, str]:
    """A fresh in-memory copy of the assistant's BertModel, its tokenizer, config and identity."""
    from transformers import BertModel

    path = Path(path).resolve()
    try:
        cfg = read_model_config(path)
    except TinyglotError:
        raise TinyglotError(f"the assistant {path} is not a tinyglot model folder", ASSISTANT_FIX) from None
    if cfg.get("kind") not in ASSISTANT_KINDS:
        raise TinyglotError(f"the assistant {path} (kind {cfg.get('kind')!r}) is not a BERT model that "
                            "stage 1 can fine-tune and the student can copy layers from", ASSISTANT_FIX)
    model, tokenizer, cfg = load_source(path)
    if not isinstance(model.encoder, BertModel):
        raise TinyglotError(f"the assistant {path} holds a {type(model.encoder).__name__}, not a BertModel",
                            ASSISTANT_FIX)
    identity = f"{cfg['kind']}|{path}|{source_sha(path, cfg)}"
    return MSModel(model.encoder), tokenizer, cfg, identity


# the keys save_ms_model writes itself; the rest of a folder's config is carried over by resave_ms_model
_WRITTEN = ("loader", "kind", "encoder", "tokenizer", "tokenizer_sha256", "dim", "max_len", "languages", "pooling",
            "normalize", "parameters", "heads")


def resave_ms_model(model: MSModel, tokenizer: Tokenizer, out: str | Path, cfg: dict,
                    extra: dict | None = None) -> Path:
    """Write ``model`` as a folder of the kind of ``cfg`` (the folder it was loaded from), keeping that
    folder's records (stage, teacher_dim, ...); the registry's ``save`` (vocabulary pruning uses it)."""
    kept = {k: v for k, v in cfg.items() if k not in _WRITTEN}
    return save_ms_model(model, tokenizer, out, cfg["kind"], int(cfg["max_len"]), {**kept, **(extra or {})})


__all__ = ["ASSISTANT_KINDS", "HEADS_FILE", "KIND_ASSISTANT", "KIND_STUDENT", "LOADER", "load_assistant",
           "load_ms_model", "load_multistage", "resave_ms_model", "save_ms_model", "weights_sha"]
