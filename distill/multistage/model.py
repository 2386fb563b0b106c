"""The multi-stage recipe's model: a ``transformers`` encoder with mean pooling and projection heads,
the recurrent ALBERT student, and the copy of the assistant's BertLayers into the student's unit."""

from __future__ import annotations

from typing import Any, cast

import torch
from torch import nn

from tinyglot.errors import TinyglotError
from tinyglot.models import albert_config, mean_pool

from ..ms_config import MSStudentConfig


class MSModel(nn.Module):
    """A ``transformers`` encoder (the assistant's BertModel or the student's AlbertModel) with mean
    pooling, plus the recipe's projection heads, which are saved but not part of the exported model:
    ``"teacher"`` (hidden -> teacher dimension) and ``"assistant"`` (student hidden -> assistant hidden).
    A head is absent when the dimensions already agree; :meth:`head` is then the identity."""

    def __init__(self, encoder: nn.Module, heads: dict[str, tuple[int, int]] | None = None) -> None:
        super().__init__()
        self.encoder: Any = encoder  # a transformers model: its attributes are not typed
        self.heads = nn.ModuleDict({name: nn.Linear(i, o) for name, (i, o) in sorted((heads or {}).items())})

    @property
    def hidden_size(self) -> int:
        return int(self.encoder.config.hidden_size)

    def embed(self, ids: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        return mean_pool(self.encoder(input_ids=ids, attention_mask=mask).last_hidden_state, mask)

    def layer_input(self, ids: torch.Tensor) -> torch.Tensor:
        """The token vectors entering the first transformer layer: BERT's embedding-layer output,
        ALBERT's bottleneck output (vocabulary -> B, then B -> H)."""
        out = self.encoder.embeddings(input_ids=ids)
        mapping = getattr(self.encoder.encoder, "embedding_hidden_mapping_in", None)
        return out if mapping is None else mapping(out)

    def head(self, name: str, x: torch.Tensor) -> torch.Tensor:
        return self.heads[name](x) if name in self.heads else x

    def head_shapes(self) -> dict[str, list[int]]:
        return {name: [cast(nn.Linear, m).in_features, cast(nn.Linear, m).out_features]
                for name, m in self.heads.items()}

    def parameter_counts(self) -> dict[str, int]:
        """The paper's split: embedding (incl. the B -> H bottleneck mapping) vs encoder layers."""
        def count(module: nn.Module | None) -> int:
            return 0 if module is None else sum(p.numel() for p in module.parameters())

        emb = count(self.encoder.embeddings) + count(getattr(self.encoder.encoder, "embedding_hidden_mapping_in", None))
        total = count(self.encoder)
        return {"embedding": emb, "encoder": total - emb, "total": total, "projections": count(self.heads)}


def encoder_config(cfg: MSStudentConfig):
    """Recurrent: one layer group of M layers run ``passes`` times.  Not recurrent: passes * M groups
    of one layer each (every application has its own weights)."""
    depth = cfg.passes * cfg.unit_layers
    layers, groups, inner = (cfg.passes, 1, cfg.unit_layers) if cfg.recurrent else (depth, depth, 1)
    return albert_config(cfg.vocab_size, cfg.embedding_size, cfg.hidden_size, cfg.num_heads, cfg.ffn_size,
                         cfg.max_len, cfg.dropout, layers=layers, groups=groups, inner=inner, act=cfg.hidden_act)


def build_student(cfg: MSStudentConfig, heads: dict[str, tuple[int, int]] | None = None) -> MSModel:
    from transformers import AlbertModel

    cfg.validate()
    if cfg.vocab_size <= 0 or cfg.hidden_size <= 0:
        raise TinyglotError("the student's vocabulary or hidden size is not set", "resolve it from the assistant")
    return MSModel(AlbertModel(encoder_config(cfg), add_pooling_layer=False), heads)


def unit_layers(albert) -> list[nn.Module]:
    """Every AlbertLayer object, group by group (a recurrent student has M of them)."""
    return [layer for group in albert.encoder.albert_layer_groups for layer in group.albert_layers]


# BertLayer submodule -> AlbertLayer submodule holding the same weights
LAYER_MAP = (("attention.self.query", "attention.query"), ("attention.self.key", "attention.key"),
             ("attention.self.value", "attention.value"), ("attention.output.dense", "attention.dense"),
             ("attention.output.LayerNorm", "attention.LayerNorm"), ("intermediate.dense", "ffn"),
             ("output.dense", "ffn_output"), ("output.LayerNorm", "full_layer_layer_norm"))


def unit_mismatch(albert, bert, unit: int) -> str | None:
    """Why the assistant's first ``unit`` layers cannot initialise the student's unit (None: they can)."""
    a, b = albert.config, bert.config
    for key in ("hidden_size", "num_attention_heads", "intermediate_size", "hidden_act"):
        if getattr(a, key) != getattr(b, key):
            return f"student {key} {getattr(a, key)} != assistant {key} {getattr(b, key)}"
    if len(bert.encoder.layer) < unit:
        return f"the assistant has {len(bert.encoder.layer)} layers, the unit needs {unit}"
    return None


def init_unit_from_assistant(albert, bert, unit: int) -> str | None:
    """Copy BertLayer ``j % unit`` of the assistant into the student's j-th AlbertLayer; returns why
    not (and copies nothing) when the shapes differ."""
    reason = unit_mismatch(albert, bert, unit)
    if reason is not None:
        return reason
    with torch.no_grad():
        for j, dst in enumerate(unit_layers(albert)):
            src = bert.encoder.layer[j % unit]
            for src_name, dst_name in LAYER_MAP:
                dst.get_submodule(dst_name).load_state_dict(src.get_submodule(src_name).state_dict())
    return None


__all__ = ["LAYER_MAP", "MSModel", "build_student", "encoder_config", "init_unit_from_assistant", "unit_layers",
           "unit_mismatch"]
