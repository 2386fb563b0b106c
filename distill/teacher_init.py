"""Teacher-derived initialisation of a student's token embeddings, for a teacher of any kind.

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

The piece embeddings are computed once per (teacher identity, piece strings) and cached next to the
sentence embeddings (``<cache>/vocab/``): the piece strings are a function of the tokenizer (its
sha256), so a resumed or repeated run with the same vocabulary reads them back.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from tinyglot.errors import TinyglotError
from tinyglot.tokenizer import Tokenizer

log = logging.getLogger("tinyglot.distill")

WORD_BOUNDARY = "\u2581"  # SentencePiece's "▁"
VOCAB_CACHE = "vocab"  # the piece embeddings' folder inside the teacher cache
# The PCA block's root-mean-square, in units of the random initialisation's (BertConfig's
# initializer_range, 0.02).  The embeddings go through LayerNorm after the position and type
# embeddings are added, so this is the weight of the teacher's lexical signal against them.  Measured
# (fast-small from e5-small, 23k pairs of 12 languages, dev P@1 at steps 0/50/100/200): factor 1
# 29.6/54.7/74.7/79.9, 4 32.2/62.3/74.7/80.3, 16 32.7/60.6/72.8/78.2; random init 26.7/37.9/55.3/69.4.
VOCAB_INIT_RMS_FACTOR = 4.0

# student.init: "teacher" and "random" are the choices; "auto" and "teacher-pca" are older configs'
INIT_CHOICES = ("teacher", "random")
INIT_ALIASES = ("auto", "teacher-pca")


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
    return {"pieces": int(len(vocab.ids)), "columns": int(proj.shape[1]), "teacher_dim": int(vocab.rows.shape[1]),
            "variance_kept": kept, "scale": scale, "rms": target}


def describe(method: str, info: dict | None = None) -> str:
    """The init line of the log and of the student's config.json."""
    if method == "teacher-vocabulary" and info:
        return (f"teacher-vocabulary (the teacher's embeddings of {info['pieces']:,} vocabulary pieces, PCA "
                f"{info['teacher_dim']} -> {info['columns']} dims keeping {100 * info['variance_kept']:.1f} % of "
                f"the variance, RMS {info['rms']:.3g})")
    if method == "teacher-tables" and info:
        return f"teacher-tables (teacher-pca, {100 * info['variance_kept']:.1f} % of the token-embedding variance)"
    return method
