"""Thin-deep LEALLA students: a ``transformers`` BertModel (an AlbertModel with its own weights in each
layer when the token table is factorised) with mean pooling, saved and loaded like any transformers model,
plus tinyglot's tokenizer and config."""

from __future__ import annotations

from pathlib import Path

import torch
from safetensors import SafetensorError
from torch import nn
from transformers import AlbertModel, BertModel

from tinyglot.config import from_dict, to_dict
from tinyglot.errors import CheckpointError, TinyglotError
from tinyglot.io import atomic_folder, atomic_write_json
from tinyglot.models import (TorchEncoder, albert_config, bert_config, check_model_shape, check_transformers_folder,
                             config_section, load_folder_tokenizer, mean_pool, model_subfolder, read_model_config)
from tinyglot.tokenizer import Tokenizer
from tinyglot.training import select_device

from .config import StudentConfig

KIND = "lealla-student"
LOADER = "tinyglot.distill.student:load_student"


class Student(nn.Module):
    """The student encoder and, for training, the feature-distillation dense layer f: d -> d_teacher.

    f is applied AFTER the student embedding (the LEALLA paper, App. C); it is not part of the exported model.
    """

    def __init__(self, cfg: StudentConfig, teacher_dim: int | None = None) -> None:
        super().__init__()
        cfg.validate()
        if cfg.vocab_size <= 0:
            raise TinyglotError("the student's vocab_size is not set", "build the student from a tokenizer")
        self.cfg = cfg
        self.encoder = encoder_class(cfg)(encoder_config(cfg), add_pooling_layer=False)
        self.output = nn.Linear(cfg.hidden_size, cfg.output_dim) if cfg.output_dim else None
        self.fd_proj = nn.Linear(cfg.embedding_dim, teacher_dim) if teacher_dim else None

    def embed(self, ids: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        pooled = mean_pool(self.encoder(input_ids=ids, attention_mask=mask).last_hidden_state, mask)
        return pooled if self.output is None else self.output(pooled)

    def set_sparse_embeddings(self, on: bool) -> None:
        """Sparse gradients for the token table (the rows of the batch only; the training loop's
        LazyAdamW steps those rows and catches the others up to AdamW's weights): a step then costs the
        same at any vocabulary size."""
        self.encoder.embeddings.word_embeddings.sparse = on

    def set_checkpointing(self, on: bool) -> None:
        """Gradient checkpointing of the encoder layers (only acts in training mode): less memory for
        long batches, the same results, ~30 % more compute."""
        if on != self.encoder.is_gradient_checkpointing:
            if on:
                self.encoder.gradient_checkpointing_enable({"use_reentrant": False})
            else:
                self.encoder.gradient_checkpointing_disable()

    def parameter_counts(self) -> dict[str, int]:
        emb = sum(p.numel() for p in self.encoder.embeddings.parameters())
        enc = sum(p.numel() for p in self.encoder.encoder.parameters())
        out = sum(p.numel() for p in self.output.parameters()) if self.output is not None else 0
        return {"embedding": emb, "encoder": enc, "output": out, "total": emb + enc + out}


def encoder_class(cfg: StudentConfig) -> type[AlbertModel] | type[BertModel]:
    return AlbertModel if cfg.embedding_size else BertModel


def encoder_config(cfg: StudentConfig):
    """The ``transformers`` config of the student's encoder: BERT's, or for a factorised table ALBERT's with
    one layer a group (no layer shares weights) and BERT's activation, so that only the table differs."""
    if not cfg.embedding_size:
        return bert_config(cfg.vocab_size, cfg.hidden_size, cfg.num_layers, cfg.num_heads, cfg.ffn_size,
                           cfg.max_len, cfg.dropout)
    return albert_config(cfg.vocab_size, cfg.embedding_size, cfg.hidden_size, cfg.num_heads, cfg.ffn_size,
                         cfg.max_len, cfg.dropout, layers=cfg.num_layers, groups=cfg.num_layers, inner=1)


def least_squares_head(head: nn.Linear, x: torch.Tensor, y: torch.Tensor, ridge: float = 1e-4) -> None:
    """Set ``head`` (weight and bias) to the ridge-regularised least-squares map from rows ``x`` to ``y``."""
    x1 = torch.cat([x.double(), torch.ones(len(x), 1, dtype=torch.float64, device=x.device)], 1)
    gram = x1.T @ x1
    gram += ridge * gram.diagonal().mean() * torch.eye(len(gram), dtype=gram.dtype, device=gram.device)
    w = torch.linalg.solve(gram, x1.T @ y.double())
    with torch.no_grad():
        head.weight.copy_(w[:-1].T.to(head.weight))
        head.bias.copy_(w[-1].to(head.bias))


EMBEDDING_TABLES = ("word_embeddings", "position_embeddings", "token_type_embeddings")


def teacher_input_embeddings(teacher, tokenizer: Tokenizer) -> dict[str, torch.Tensor] | None:
    """The teacher's token, position and type embedding tables, when the teacher is a tinyglot
    torch model (an EMS run or a student) whose vocabulary is ``tokenizer``; else None."""
    inner = getattr(teacher, "inner", teacher)
    module = getattr(inner, "module", None)
    embeddings = getattr(getattr(module, "encoder", None), "embeddings", None)
    own = getattr(inner, "tokenizer", None)
    if embeddings is None or own is None or getattr(own, "sha256", None) != tokenizer.sha256:
        return None
    return {name: getattr(embeddings, name).weight.detach().float().cpu() for name in EMBEDDING_TABLES}


def init_from_teacher_pca(model: Student, tables: dict[str, torch.Tensor]) -> float:
    """Project the teacher's embedding tables onto the top principal directions of its (centred) token
    embeddings, as many as the student's table is wide, and copy them into the student; returns the
    variance kept."""
    word = tables["word_embeddings"]
    d = model.cfg.table_dim
    if word.shape[0] != model.cfg.vocab_size or word.shape[1] < d:
        raise TinyglotError(f"teacher embeddings {tuple(word.shape)} cannot initialise a "
                            f"{model.cfg.vocab_size} x {d} student", "use --set student.init=random")
    centred = word - word.mean(0)
    _, sv, vh = torch.linalg.svd(centred.double(), full_matrices=False)
    basis = vh[:d].T.float()
    ours = model.encoder.embeddings
    with torch.no_grad():
        ours.word_embeddings.weight.copy_(centred @ basis)
        for name in EMBEDDING_TABLES[1:]:
            src, dst = tables[name], getattr(ours, name).weight
            rows = min(src.shape[0], dst.shape[0])
            dst[:rows].copy_(src[:rows] @ basis)
    init_table_map(model)
    return float((sv[:d] ** 2).sum() / (sv ** 2).sum())


def init_table_map(model: Student) -> None:
    """A factorised table's map to the hidden size (ALBERT's ``embedding_hidden_mapping_in``) set to an
    isometry scaled by sqrt(hidden / embedding_size): the first layer then sees the teacher-started table's
    geometry, at the per-dimension scale of BERT's normalised embeddings; a no-op for a BertModel."""
    mapping = getattr(model.encoder.encoder, "embedding_hidden_mapping_in", None)
    if mapping is None:
        return
    out_dim, in_dim = mapping.weight.shape
    generator = torch.Generator().manual_seed(0)
    q, _ = torch.linalg.qr(torch.randn(out_dim, in_dim, generator=generator, dtype=torch.float64))
    with torch.no_grad():
        mapping.weight.copy_((q * (out_dim / in_dim) ** 0.5).to(mapping.weight))
        mapping.bias.zero_()


def save_student(model: Student, tokenizer: Tokenizer, out: str | Path, extra: dict | None = None) -> Path:
    """Write ``out/`` as a transformers model folder (``model/``) + ``tokenizer.model`` + ``config.json``."""
    out = Path(out)
    with atomic_folder(out) as tmp:
        _write_student(model, tokenizer, tmp, extra)
    return out


def resave_student(model: Student, tokenizer: Tokenizer, out: str | Path, cfg: dict, extra: dict | None = None) -> Path:
    """The registry's ``save`` for students (vocabulary pruning): :func:`save_student` with ``extra``
    (a student's config holds nothing else that its model does not define)."""
    return save_student(model, tokenizer, out, extra)


OUTPUT_FILE = "output.safetensors"  # the output projection, when the student has one


def _write_student(model: Student, tokenizer: Tokenizer, out: Path, extra: dict | None) -> None:
    model.encoder.save_pretrained(out / "model", safe_serialization=True)
    if model.output is not None:
        from safetensors.torch import save_file

        save_file({k: v.contiguous() for k, v in model.output.state_dict().items()}, str(out / OUTPUT_FILE))
    tokenizer.save(out / "tokenizer.model")
    atomic_write_json(out / "config.json", {
        "loader": LOADER, "kind": KIND, "student": to_dict(model.cfg), "tokenizer": "tokenizer.model",
        "tokenizer_sha256": tokenizer.sha256, "dim": model.cfg.embedding_dim, "max_len": model.cfg.max_len,
        "languages": list(tokenizer.languages), "pooling": "mean", "normalize": True,
        "parameters": model.parameter_counts(), "extra_weights": [OUTPUT_FILE] if model.output is not None else [],
        **(extra or {}),
    })


def load_student_model(path: str | Path) -> tuple[Student, Tokenizer, dict]:
    path = Path(path)
    cfg = read_model_config(path)
    if cfg.get("kind") != KIND:
        raise CheckpointError(f"{path} is not a tinyglot student (kind={cfg.get('kind')!r})",
                              "pass the student folder written by `tinyglot distill`")
    tokenizer = load_folder_tokenizer(path, cfg["tokenizer"], cfg.get("tokenizer_sha256"), "student", "trained",
                                      CheckpointError)
    scfg = from_dict(StudentConfig, config_section(path, cfg, "student"))
    if scfg.vocab_size != tokenizer.vocab_size:
        raise CheckpointError(f"tokenizer has {tokenizer.vocab_size} pieces, the student expects {scfg.vocab_size}",
                              "use the tokenizer the student was trained with")
    model_dir = model_subfolder(path, "model")
    weights = sorted(model_dir.glob("*.safetensors")) if model_dir.is_dir() else []
    factorised = {"embedding_size": scfg.embedding_size} if scfg.embedding_size else {}
    check_model_shape(path / "config.json", {"vocab_size": scfg.vocab_size, "hidden_size": scfg.hidden_size,
                                             "num_layers": scfg.num_layers, "num_heads": scfg.num_heads,
                                             "ffn_size": scfg.ffn_size, "max_len": scfg.max_len, **factorised},
                      weights=weights)
    if model_dir.is_dir():
        check_transformers_folder(model_dir, path, {
            "model_type": "albert" if factorised else "bert", "vocab_size": scfg.vocab_size,
            "hidden_size": scfg.hidden_size, "num_hidden_layers": scfg.num_layers,
            "num_attention_heads": scfg.num_heads, "intermediate_size": scfg.ffn_size,
            "max_position_embeddings": scfg.max_len, "type_vocab_size": 1, "pad_token_id": 0,
            **({**factorised, "num_hidden_groups": scfg.num_layers, "inner_group_num": 1} if factorised else {})})
    model = Student(scfg)
    try:
        model.encoder = encoder_class(scfg).from_pretrained(model_dir, add_pooling_layer=False, local_files_only=True)
    # a truncated model.safetensors; odd values in model/config.json (transformers asserts on some)
    except (OSError, ValueError, RuntimeError, TypeError, AssertionError, SafetensorError) as exc:
        raise CheckpointError(f"the student weights in {path / 'model'} cannot be read ({exc})",
                              "re-create the student (tinyglot distill ... --resume finishes a run)") from None
    positions = model.encoder.config.max_position_embeddings
    if scfg.max_len > positions or model.encoder.config.hidden_size != scfg.hidden_size:
        raise CheckpointError(f"{path}/config.json does not match the weights in {model_dir} (max_len {scfg.max_len} "
                              f"vs {positions} positions, hidden size {scfg.hidden_size} vs "
                              f"{model.encoder.config.hidden_size})",
                              "re-create the student with tinyglot (its config.json was edited)")
    if model.output is not None:
        from safetensors.torch import load_file

        try:
            model.output.load_state_dict(load_file(str(path / OUTPUT_FILE)))
        except (OSError, ValueError, RuntimeError) as exc:
            raise CheckpointError(f"the student's output projection {path / OUTPUT_FILE} cannot be read ({exc})",
                                  "re-create the student (tinyglot distill ... --resume finishes a run)") from None
    model.eval()
    return model, tokenizer, cfg


def load_student(path: str | Path, device: str = "cpu") -> TorchEncoder:
    model, tokenizer, cfg = load_student_model(path)
    dev = select_device(device)
    model.to(dev)
    return TorchEncoder(tokenizer, model.embed, int(cfg["max_len"]), dev, name=f"student ({Path(path).name})")
