"""benchmarks/teacher_pieces.py build: a student vocabulary of a teacher's own SentencePiece pieces."""

from __future__ import annotations

import io
import subprocess
import sys
from collections import Counter
from pathlib import Path

import sentencepiece as spm
from sentencepiece import sentencepiece_model_pb2 as pb

from tinyglot.tokenizer import Tokenizer

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "teacher_pieces.py"


def _proto(data: bytes) -> pb.ModelProto:
    proto = pb.ModelProto()
    proto.ParseFromString(data)
    return proto


def test_the_vocabulary_holds_the_teachers_most_used_and_most_probable_pieces(small_pairs, small_corpus,
                                                                              tokenizer, tmp_path):
    # the "teacher": a cased SentencePiece unigram model of its own (XLM-R's kind), larger than the result
    sentences = [s for p in small_pairs for s in (p.x, p.en)]
    buffer = io.BytesIO()
    spm.SentencePieceTrainer.train(sentence_iterator=iter(sentences), model_writer=buffer, vocab_size=2500,
                                   model_type="unigram", normalization_rule_name="nmt_nfkc", minloglevel=2)
    teacher_file, out = tmp_path / "teacher.model", tmp_path / "v.model"
    like_file = tokenizer.save(tmp_path / "like.model")
    teacher_file.write_bytes(buffer.getvalue())
    size = 600
    proc = subprocess.run([sys.executable, str(SCRIPT), "build", "--like", str(like_file),
                           "--teacher", str(teacher_file), "--size", str(size), "--corpus", str(small_corpus),
                           "--per-lang", "100", "--out", str(out)], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    built, like, teacher = _proto(out.read_bytes()), _proto(tokenizer.proto), _proto(teacher_file.read_bytes())
    # the special pieces (padding, <unk>, language tokens), normaliser and settings of --like, in its order
    specials = [(p.piece, p.type) for p in like.pieces if p.type != 1]
    assert [(p.piece, p.type) for p in built.pieces[:len(specials)]] == specials
    assert built.normalizer_spec == like.normalizer_spec
    assert Tokenizer(out.read_bytes()).languages == tokenizer.languages
    # then `size` of the teacher's lower-case normal pieces, with the teacher's scores, most probable first
    scores = {p.piece: p.score for p in teacher.pieces if p.type == 1}
    normal = [(p.piece, p.score) for p in built.pieces[len(specials):]]
    assert len(normal) == size and all(p.type == 1 for p in built.pieces[len(specials):])
    assert all(piece == piece.lower() and scores[piece] == score for piece, score in normal)
    assert [s for _, s in normal] == sorted((s for _, s in normal), reverse=True)
    # half of them the ones the teacher uses most on the corpus (its most used lower-case piece is there), the
    # rest by its scores: the fill walks the scores past the used half, so the top half by score is all kept
    lower = {q: sc for q, sc in scores.items() if q == q.lower()}
    every = _proto(tokenizer.proto)  # the special pieces of --like, then every lower-case teacher piece
    del every.pieces[len(specials):]
    for q, sc in lower.items():
        every.pieces.add(piece=q, score=sc, type=1)
    teacher_tok = Tokenizer(every.SerializeToString())
    used = Counter(teacher_tok.piece(i) for s in sentences for i in teacher_tok.tokenize(s))
    kept = {q for q, _ in normal}
    assert max(used, key=used.__getitem__) in kept
    assert set(sorted(lower, key=lower.__getitem__, reverse=True)[:size - size // 2]) <= kept
    assert len(kept - set(sorted(lower, key=lower.__getitem__, reverse=True)[:size])) > 0  # not only by score
    assert f"{size // 2:,} the teacher's most used" in proc.stdout
