"""A student vocabulary made of the teacher's own SentencePiece pieces, and a probe of what a vocabulary's
pieces carry.  Prints numbers; asserts nothing.

``build``: ``--size`` pieces of a teacher's SentencePiece unigram model (default: e5-small-onnx's, the
XLM-R pieces of multilingual-e5-small; only its lower-case ones when ``--like`` folds case, as tinyglot's
``nmt_nfkc_cf`` does); half of them the ones it uses most on a sample of the corpora (``--per-lang``
random sentences of each language of ``--like``, all English sides counted as one language), the rest its
most probable other pieces (its unigram scores: how common they were in its own, broader training
text).  The special pieces (padding, ``<unk>``, the ``<2xx>`` language tokens), normaliser and trainer
settings are those of ``--like``, a tinyglot vocabulary.  The result is a ``tokenizer.model`` for
``tinyglot run --set distill.tokenizer=FILE``.

``probe``: each vocabulary as a static model, model2vec's way: a sentence is the mean of the teacher's
embeddings of its pieces (centred); P@1 as ``tinyglot eval`` reports it (mean of x -> en and en -> x).
It says how much cross-lingual matching the pieces themselves carry, before any training.

    python benchmarks/teacher_pieces.py build --like runs/rel-mini/distill/tokenizer.model --size 26000 \\
        --corpus ../shared/data/train.jsonl.gz --corpus GENERAL/general-train.jsonl.gz --permissive-only \\
        --out xlmr-26k.model
    python benchmarks/teacher_pieces.py probe ours=runs/rel-mini/distill/tokenizer.model xlmr=xlmr-26k.model \\
        --test general=GENERAL/general-test --test docs=GENERAL/docs-test --pairs 300
"""

from __future__ import annotations

import argparse
import json
import time
from collections import defaultdict
from pathlib import Path

import numpy as np

from tinyglot.data import is_permissive
from tinyglot.data.embedded import load_pairs, load_testset
from tinyglot.distill.teacher_init import select_teacher_pieces
from tinyglot.evaluation.metrics import bitext_p_at_1
from tinyglot.export.prune import NORMAL  # SentencePiece's piece type of an ordinary text piece
from tinyglot.tokenizer import Tokenizer


def read_proto(path: str | Path):
    from sentencepiece import sentencepiece_model_pb2 as pb

    proto = pb.ModelProto()
    proto.ParseFromString(Path(path).read_bytes())
    return proto


def teacher_normal_pieces(teacher, like) -> list[tuple[str, float]]:
    """The teacher's normal pieces (text, score), in its order, but ``like``'s special pieces."""
    specials = {p.piece for p in like.pieces if p.type != NORMAL} | {"<s>", "</s>", "<pad>"}
    return [(p.piece, p.score) for p in teacher.pieces if p.type == NORMAL and p.piece not in specials]


def build(args) -> None:
    import random

    from tinyglot.encoders import e5_onnx

    like = read_proto(args.like)
    teacher = read_proto(args.teacher or e5_onnx.e5_onnx_folder() / e5_onnx.TOKENIZER_FILE)
    pieces = teacher_normal_pieces(teacher, like)
    like_tokenizer = Tokenizer(like.SerializeToString())
    languages = set(like_tokenizer.languages)
    by_lang: dict[str, list[str]] = defaultdict(list)  # (in the order the corpora first name a language)
    for corpus in args.corpus:
        for pair in load_pairs(corpus):
            if is_permissive(pair.license) or not args.permissive_only:
                by_lang[pair.lang].append(pair.x)
                by_lang["en"].append(pair.en)
    rng, sample = random.Random(args.seed), []
    for lang, sentences in by_lang.items():
        if lang in languages:
            rng.shuffle(sentences)
            sample += sentences[:args.per_lang]
    out, used = select_teacher_pieces(like_tokenizer, pieces, sample, args.size)
    out.save(args.out)
    print(f"{args.out}: {out.vocab_size:,} pieces: {used:,} the teacher's most used on {len(sample):,} "
          f"sentences of {len(languages & set(by_lang))} languages, {args.size - used:,} by its scores "
          f"(it has {len(teacher.pieces):,} pieces)")


def static_embeddings(teacher, tokenizer: Tokenizer, sentences: list[str]) -> np.ndarray:
    """Each sentence as the centred mean of the teacher's embeddings of its text pieces, L2-normalised."""
    split = {s: [p for p in (tokenizer.piece(i) for i in tokenizer.tokenize(s)) if p.replace("\u2581", " ").strip()]
             for s in sentences}
    vocab = sorted({p for ps in split.values() for p in ps})
    table = teacher.encode([p.replace("\u2581", " ").strip() for p in vocab])
    table -= table.mean(axis=0)
    index = {p: i for i, p in enumerate(vocab)}
    rows = np.stack([table[[index[p] for p in split[s]]].mean(axis=0) if split[s] else
                     np.zeros(table.shape[1], dtype=np.float32) for s in sentences])
    return rows / np.maximum(np.linalg.norm(rows, axis=1, keepdims=True), 1e-9)


def probe(args) -> None:
    import tinyglot

    teacher = tinyglot.load(args.model)
    sets = {}
    for spec in args.test:
        name, _, path = spec.partition("=")
        sets[name] = {lang: ps[:args.pairs] for lang, ps in sorted(load_testset(path).items())}
    sentences = sorted({s for grouped in sets.values() for ps in grouped.values() for q in ps for s in (q.x, q.en)})
    rows = []
    for spec in args.vocab:
        name, _, path = spec.partition("=")
        tokenizer, start = Tokenizer.load(path), time.perf_counter()
        emb = dict(zip(sentences, static_embeddings(teacher, tokenizer, sentences), strict=True))
        row = {"vocabulary": name, "pieces": tokenizer.vocab_size, "seconds": round(time.perf_counter() - start, 1)}
        for set_name, grouped in sets.items():
            p1 = [bitext_p_at_1(np.stack([emb[q.x] for q in ps]), np.stack([emb[q.en] for q in ps]))
                  for ps in grouped.values()]
            row[set_name] = round(100 * float(np.mean(p1)), 1)
        rows.append(row)
        print(json.dumps(row), flush=True)
    print("\n| vocabulary | pieces | " + " | ".join(sets) + " |\n|---|---:|" + "---:|" * len(sets))
    for row in rows:
        print(f"| {row['vocabulary']} | {row['pieces']:,} | " + " | ".join(f"{row[n]:.1f}" for n in sets) + " |")


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="command", required=True)
    b = sub.add_parser("build", help="a vocabulary of the teacher's pieces")
    b.add_argument("--like", required=True, help="a tinyglot tokenizer.model: its special pieces and normaliser")
    b.add_argument("--teacher", default=None, help="the teacher's SentencePiece model (default: e5-small-onnx's)")
    b.add_argument("--size", type=int, required=True, help="normal pieces to keep")
    b.add_argument("--corpus", action="append", required=True, help="training text (repeatable)")
    b.add_argument("--permissive-only", action="store_true", help="only rows under a permissive licence")
    b.add_argument("--per-lang", type=int, default=3000,
                   help="sample sentences per language (English sides: one language)")
    b.add_argument("--seed", type=int, default=1)
    b.add_argument("--out", required=True)
    q = sub.add_parser("probe", help="vocabularies as static models of the teacher's piece embeddings")
    q.add_argument("vocab", nargs="+", metavar="NAME=TOKENIZER")
    q.add_argument("--test", action="append", required=True, metavar="NAME=PATH")
    q.add_argument("--pairs", type=int, default=300, help="first pairs per language")
    q.add_argument("--model", default="e5-small-onnx", help="the teacher that embeds the pieces")
    args = p.parse_args(argv)
    build(args) if args.command == "build" else probe(args)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
