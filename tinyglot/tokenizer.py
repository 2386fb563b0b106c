"""SentencePiece vocabulary shared by every stage (teacher, students, exported bundles).

One ``.model`` file holds everything: the pieces, the normaliser (NFKC, whitespace folding and
lower-casing are SentencePiece's ``nmt_nfkc_cf`` case-folding rule, so they travel with the file)
and one ``<2xx>`` user-defined symbol per language (matched by SentencePiece itself, in the text).

The file is self-contained: tinyglot does no text processing of its own before SentencePiece.
The ids of a sentence are exactly what any stock SentencePiece runtime (the C++ library, the
``sentencepiece`` wheel, onnxruntime-extensions' ``SentencepieceTokenizer`` op, MediaPipe's
tokenizer) gives for the raw string, cut to the first ``max_len``::

    sp = sentencepiece.SentencePieceProcessor(model_file="tokenizer.model")
    ids = sp.encode(sentence)[:max_len]          # == Tokenizer.encode_ids([sentence], max_len)[0]

No BOS/EOS ids are added; padding uses id 0 (``<pad>``), which SentencePiece never emits.
"""

from __future__ import annotations

import hashlib
import os
import re
from dataclasses import dataclass
from pathlib import Path
from collections import Counter
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np

from tinyglot.errors import TinyglotError
from tinyglot.io import atomic_write_bytes, check_file_size
from tinyglot.languages import normalize_lang

MAX_TOKENIZER_BYTES = 64 << 20  # a SentencePiece model: a few MB even at 250k pieces
# A character the training text holds this often can be made a piece of the vocabulary (never <unk>):
# SentencePiece keeps only the characters of its sample (``character_coverage`` of them), and a sample
# of a few thousand software strings per language leaves out common Chinese, Japanese and Korean
# characters (很, 说, 왕) that the whole corpus holds.
REQUIRED_CHAR_MIN_COUNT = 2
PAD_ID = 0
UNK_ID = 1
_LANG_PIECE = re.compile(r"^<2([a-z]{2,3})>$")


def lang_piece(lang: str) -> str:
    """The language token for a canonical language code, e.g. ``<2de>``."""
    return f"<2{normalize_lang(lang)}>"


@dataclass(frozen=True)
class Batch:
    """Token ids and attention mask, both int64 arrays of shape (batch, length)."""

    ids: np.ndarray
    mask: np.ndarray


class Tokenizer:
    """A SentencePiece model with language tokens, padding and truncation."""

    def __init__(self, model_proto: bytes) -> None:
        import sentencepiece as spm

        self._proto = bytes(model_proto)
        self._sp = spm.SentencePieceProcessor()
        try:
            self._sp.LoadFromSerializedProto(self._proto)
        except Exception as exc:  # sentencepiece raises plain RuntimeError/OSError
            raise TinyglotError(
                f"not a SentencePiece model ({exc})",
                "pass the tokenizer.model file written by `tinyglot data vocab` or a training run",
            ) from None
        self.languages: tuple[str, ...] = tuple(
            sorted(
                m.group(1)
                for i in range(self._sp.GetPieceSize())
                if (m := _LANG_PIECE.match(self._sp.IdToPiece(i))) and self._sp.IsControl(i) is False
            )
        )

    # ---------------------------------------------------------------- training / io
    @classmethod
    def train(
        cls,
        sentences: Iterable[str],
        languages: Sequence[str],
        vocab_size: int = 8000,
        model_type: str = "unigram",
        lowercase: bool = True,
        character_coverage: float = 0.9995,
        max_sentences: int | None = None,
        seed: int = 0,
        num_threads: int | None = None,
        required_chars: str = "",
    ) -> Tokenizer:
        """Train a SentencePiece model on ``sentences`` (the first ``max_sentences`` of them; None: all).

        ``vocab_size`` counts the language tokens too.  On a corpus too small for the requested
        size the vocabulary is smaller (SentencePiece's soft limit) rather than failing.
        ``required_chars`` (most frequent first, e.g. :func:`frequent_characters` of the whole
        corpus) become pieces whether or not the sample holds them; when they do not fit, the
        retries keep the first half, then the first quarter...
        """
        import io

        import sentencepiece as spm

        if model_type not in ("unigram", "bpe"):
            raise TinyglotError(f"unknown model_type {model_type!r}", "use 'unigram' or 'bpe'")
        langs = sorted({normalize_lang(lang) for lang in languages})
        if not langs:
            raise TinyglotError("no languages given for the vocabulary", "pass the corpus languages")
        symbols = [f"<2{lang}>" for lang in langs]
        if vocab_size < len(symbols) + 100:
            raise TinyglotError(
                f"vocab_size {vocab_size} is too small for {len(symbols)} language tokens",
                f"use at least {len(symbols) + 100}",
            )
        sample = [s for s in (sentences if max_sentences is None else _take(sentences, max_sentences)) if s.strip()]
        if len(sample) < 10:
            raise TinyglotError(
                f"only {len(sample)} non-empty sentences to train a vocabulary on",
                "give a corpus with at least a few hundred sentences",
            )
        # CJK scripts alone need thousands of characters: when they do not fit in a small
        # vocabulary, lower the character coverage (rare characters become <unk>) and retry.
        coverages = [c for c in (character_coverage, 0.999, 0.995, 0.99, 0.98, 0.95) if c <= character_coverage]
        for attempt, coverage in enumerate(coverages):
            spm.set_random_generator_seed(seed)
            model = io.BytesIO()
            try:
                spm.SentencePieceTrainer.train(
                    sentence_iterator=iter(sample),
                    model_writer=model,
                    vocab_size=vocab_size,
                    model_type=model_type,
                    character_coverage=coverage,
                    normalization_rule_name="nmt_nfkc_cf" if lowercase else "nmt_nfkc",
                    user_defined_symbols=symbols,
                    required_chars=required_chars[: len(required_chars) >> attempt],
                    pad_id=PAD_ID,
                    unk_id=UNK_ID,
                    bos_id=-1,
                    eos_id=-1,
                    hard_vocab_limit=False,
                    shuffle_input_sentence=False,
                    num_threads=num_threads or min(4, os.cpu_count() or 1),
                    max_sentence_length=8192,
                    minloglevel=2,
                )
                break
            except RuntimeError as exc:
                if "required_chars" not in str(exc):
                    raise TinyglotError(f"SentencePiece training failed: {exc}") from None
        else:
            raise TinyglotError(
                f"vocab_size {vocab_size} cannot hold the characters of this corpus",
                "raise --vocab-size (CJK languages need a few thousand pieces)",
            )
        return cls(model.getvalue())

    @classmethod
    def load(cls, path: str | Path) -> Tokenizer:
        path = Path(path)
        if path.is_dir():
            path = path / "tokenizer.model"
        if not path.is_file():
            raise TinyglotError(
                f"tokenizer file not found: {path}",
                "pass a tokenizer.model file, or a run folder that contains one",
            )
        check_file_size(path, MAX_TOKENIZER_BYTES, "SentencePiece tokenizer.model")
        return cls(path.read_bytes())

    def save(self, path: str | Path) -> Path:
        """Write the model atomically (temporary file + rename)."""
        path = Path(path)
        atomic_write_bytes(path, self._proto)
        return path

    @property
    def proto(self) -> bytes:
        return self._proto

    @property
    def sha256(self) -> str:
        return hashlib.sha256(self._proto).hexdigest()

    def with_pieces(self, pieces: Sequence[tuple[str, float]]) -> Tokenizer:
        """This vocabulary's special pieces (padding, ``<unk>``, the ``<2xx>`` tokens), normaliser and
        settings, with ``pieces`` (text, unigram score) as its text pieces instead of its own."""
        from sentencepiece import sentencepiece_model_pb2

        pb: Any = sentencepiece_model_pb2  # generated protobuf classes: no stubs
        proto, own = pb.ModelProto(), pb.ModelProto()
        own.ParseFromString(self._proto)
        proto.CopyFrom(own)
        del proto.pieces[:]
        for piece in own.pieces:
            if piece.type != pb.ModelProto.SentencePiece.NORMAL:
                proto.pieces.add().CopyFrom(piece)
        taken = {piece.piece for piece in proto.pieces}
        for text, score in pieces:
            if text not in taken:
                taken.add(text)
                proto.pieces.add(piece=text, score=float(score), type=pb.ModelProto.SentencePiece.NORMAL)
        proto.trainer_spec.vocab_size = len(proto.pieces)
        return Tokenizer(proto.SerializeToString())

    # ---------------------------------------------------------------- vocabulary
    @property
    def vocab_size(self) -> int:
        return int(self._sp.GetPieceSize())

    @property
    def pad_id(self) -> int:
        return PAD_ID

    @property
    def unk_id(self) -> int:
        return UNK_ID

    def lang_token_id(self, lang: str) -> int:
        """Id of ``<2xx>``; an error naming the known languages if the vocabulary lacks it."""
        code = normalize_lang(lang)
        if code not in self.languages:
            raise TinyglotError(
                f"the vocabulary has no language token for {code!r} (it has: {', '.join(self.languages)})",
                "train a vocabulary on a corpus that includes this language (tinyglot data vocab CORPUS)",
            )
        return int(self._sp.PieceToId(f"<2{code}>"))

    @property
    def folds_case(self) -> bool:
        """True when the normaliser lower-cases (``nmt_nfkc_cf``): upper- and lower-case text give
        the same ids, so a runtime that lower-cases ASCII first (MediaPipe's BERT pre-processing)
        still reproduces tinyglot's ids."""
        probe = "The Quick Brown Fox Jumps Over The Lazy Dog 0123 ÄÖÜ"
        return self.tokenize(probe.upper()) == self.tokenize(probe.lower())

    def piece(self, token_id: int) -> str:
        return str(self._sp.IdToPiece(int(token_id)))

    def token_id(self, piece: str) -> int:
        return int(self._sp.PieceToId(piece))

    def is_special(self, token_id: int) -> bool:
        """True for a piece that is not text: padding, ``<unk>``, control, unused and byte pieces and the
        ``<2xx>`` language tokens."""
        i = int(token_id)
        sp = self._sp  # (its Python API has no IsUserDefined: the language tokens are matched by name)
        return bool(sp.IsControl(i) or sp.IsUnknown(i) or sp.IsUnused(i) or sp.IsByte(i)
                    or _LANG_PIECE.match(sp.IdToPiece(i)))

    # ---------------------------------------------------------------- encoding
    def score(self, ids: Sequence[int]) -> float:
        """The unigram model's log-probability of the segmentation ``ids`` (the sum of its pieces' scores)."""
        return float(sum(self._sp.GetScore(int(i)) for i in ids))

    def equally_likely(self, a: Sequence[int], b: Sequence[int]) -> bool:
        """Whether ``a`` and ``b`` are two segmentations of the same text with the same score: a tie of
        the Viterbi search, which SentencePiece implementations may break differently."""
        return list(a) == list(b) or (self.decode(a) == self.decode(b)
                                      and abs(self.score(a) - self.score(b)) <= 1e-4 * max(1.0, abs(self.score(a))))

    def tokenize(self, sentence: str) -> list[int]:
        """Ids of one sentence, without padding or truncation."""
        return list(self._sp.EncodeAsIds(sentence))

    def encode_ids(self, sentences: Sequence[str], max_len: int, allow_empty: bool = False) -> list[list[int]]:
        """Ids per sentence, truncated to ``max_len``.  A sentence without ids is an error, unless
        ``allow_empty`` (then its list is empty: encoders embed it as the zero vector)."""
        if max_len < 1:
            raise TinyglotError(f"max_len must be >= 1, got {max_len}")
        out: list[list[int]] = []
        # No character cut before SentencePiece: a prefix can segment differently from the whole
        # string (runs of whitespace fold to one space), and the ids must be a stock runtime's.
        # SentencePiece encodes 1 MB in about 0.1 s.
        for i, sentence in enumerate(sentences):
            if not isinstance(sentence, str):
                raise TinyglotError(
                    f"sentence #{i} is a {type(sentence).__name__}, not a string", "pass a list of str"
                )
            ids = self._sp.EncodeAsIds(sentence)[:max_len]
            if not ids and not allow_empty:
                raise TinyglotError(
                    f"sentence #{i} is empty (or only whitespace): {sentence!r}",
                    "drop empty strings before encoding",
                )
            out.append(ids)
        return out

    def encode(
        self, sentences: Sequence[str], max_len: int = 128, pad_to: str = "longest"
    ) -> Batch:
        """Encode a batch: pad to the longest sentence (or to ``max_len``), truncate to ``max_len``."""
        return self.pad(self.encode_ids(sentences, max_len), max_len, pad_to)

    def pad(self, ids: Sequence[Sequence[int]], max_len: int, pad_to: str = "longest") -> Batch:
        if pad_to not in ("longest", "max_len"):
            raise TinyglotError(f"pad_to must be 'longest' or 'max_len', got {pad_to!r}")
        width = max_len if pad_to == "max_len" else max((len(x) for x in ids), default=1)
        arr = np.full((len(ids), width), PAD_ID, dtype=np.int64)
        mask = np.zeros((len(ids), width), dtype=np.int64)
        for row, seq in enumerate(ids):
            seq = list(seq)[:width]
            arr[row, : len(seq)] = seq
            mask[row, : len(seq)] = 1
        return Batch(arr, mask)

    def decode(self, ids: Sequence[int]) -> str:
        return str(self._sp.DecodeIds([int(i) for i in ids if int(i) != PAD_ID]))


def frequent_characters(sentences: Iterable[str], max_chars: int, lowercase: bool = True,
                        min_count: int = REQUIRED_CHAR_MIN_COUNT) -> str:
    """The characters that ``sentences`` hold at least ``min_count`` times after the vocabulary's
    normaliser (``nmt_nfkc_cf`` or ``nmt_nfkc``), the most frequent first, at most ``max_chars`` of
    them: :meth:`Tokenizer.train`'s ``required_chars``."""
    import sentencepiece as spm

    if max_chars <= 0:
        return ""
    raw: Counter[str] = Counter()
    chunk: list[str] = []
    for sentence in sentences:
        chunk.append(sentence)
        if len(chunk) == 10_000:
            raw.update("".join(chunk))
            chunk = []
    raw.update("".join(chunk))
    normalizer = spm.SentencePieceNormalizer(rule_name="nmt_nfkc_cf" if lowercase else "nmt_nfkc",
                                             add_dummy_prefix=False, escape_whitespaces=False)
    counts: Counter[str] = Counter()
    for char, n in raw.items():
        for out in normalizer.normalize(char):  # "ﬁ" -> "fi"; whitespace and format characters -> ""
            if not out.isspace():
                counts[out] += n
    ranked = sorted((c for c, n in counts.items() if n >= min_count), key=lambda c: (-counts[c], c))
    return "".join(ranked[:max_chars])


def _take(items: Iterable[str], n: int) -> list[str]:
    out: list[str] = []
    for item in items:
        if len(out) >= n:
            break
        out.append(item)
    return out
