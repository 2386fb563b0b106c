"""Load a trained EMS teacher as an ``Encoder`` with one call."""

from __future__ import annotations

from pathlib import Path


from tinyglot.config import from_dict
from tinyglot.errors import CheckpointError
from tinyglot.models import TorchEncoder, check_model_shape, config_section, folder_file, read_model_config
from tinyglot.tokenizer import Tokenizer
from tinyglot.training import load_checkpoint, select_device

from .config import EMSModelConfig
from .model import EMSModel


def load_model(path: str | Path, which: str = "best") -> tuple[EMSModel, Tokenizer, dict]:
    """The EMS model (eval mode, CPU), its tokenizer and its config from a run folder.

    ``which`` is ``best`` (best dev P@1; falls back to ``last`` if there was no dev set) or ``last``.
    """
    path = Path(path)
    cfg = read_model_config(path)
    if cfg.get("kind") != "ems-teacher":
        raise CheckpointError(f"{path} is not an EMS teacher run (kind={cfg.get('kind')!r})",
                              "pass the --out folder of `tinyglot teacher train`")
    tokenizer = Tokenizer.load(folder_file(path, cfg.get("tokenizer", "tokenizer.model"), "'tokenizer'"))
    model_cfg = from_dict(EMSModelConfig, config_section(path, cfg, "model"))
    ck_path = path / f"{which}.pt"
    if which == "best" and not ck_path.exists():
        ck_path = path / "last.pt"
    check_model_shape(path / "config.json", {"vocab_size": model_cfg.vocab_size, "hidden_size": model_cfg.hidden_size,
                                             "num_layers": model_cfg.num_layers, "num_heads": model_cfg.num_heads,
                                             "ffn_size": model_cfg.ffn_size, "max_len": model_cfg.max_len},
                      weights=[folder_file(path, ck_path.name, "the checkpoint")])
    ck = load_checkpoint(ck_path, expect={"kind": "ems-teacher", "model": cfg["model"],
                                          "tokenizer": tokenizer.sha256})
    model = EMSModel(model_cfg)
    model.load_state_dict(ck["model"])
    model.eval()
    return model, tokenizer, cfg


def load_teacher(path: str | Path, which: str = "best", device: str = "cpu") -> TorchEncoder:
    """A trained teacher as an ``Encoder``: ``load_teacher("runs/teacher").encode(["Hallo"])``."""
    model, tokenizer, cfg = load_model(path, which)
    dev = select_device(device)
    model.to(dev)
    return TorchEncoder(tokenizer, model.embed, cfg.get("max_len", 0), dev, name=f"ems-teacher ({Path(path).name})")


__all__ = ["load_model", "load_teacher"]
