"""Vocabulary pruning: a student cut down to the pieces a few languages use, before export.

A multilingual student spends most of its bytes on the word-embedding table (lealla-small: 8k to
16k rows).  For an app that only needs, say, German, French and Japanese,
:func:`prune_student`:

1. tokenises those languages' sentences (both sides of the embedded corpus's pairs for them by
   default, or a given ``corpus`` file) with the student's tokenizer;
2. keeps the pieces used, every control / unknown / user-defined symbol except the ``<2xx>``
   tokens of dropped languages, every single-character piece (with or without the ``▁`` prefix)
   of the scripts seen in those sentences (unseen words then split into characters instead of
   ``<unk>``), and the lowest-scored piece (the unigram model's ``<unk>`` penalty is derived
   from the minimum score, so keeping it keeps that penalty);
3. writes a NEW SentencePiece ``ModelProto`` (``sentencepiece_model_pb2``) holding the kept
   pieces in their original order with their original scores and the same normaliser, so that the
   Viterbi segmentation of those sentences is unchanged; this is VERIFIED: every sentence must give
   the same pieces with the new model, else the pruning fails;
4. slices the student's word-embedding rows with ``index_select`` (ids remapped in the same
   order; pad 0 and unk 1 stay 0 and 1), updates ``config.vocab_size`` and writes a new student
   folder with :func:`tinyglot.distill.student.save_student`;
5. measures sizes and bitext P@1 of the kept languages before and after, and FAILS if P@1
   drops by more than ``max_p1_drop`` (0.5 points by default).

``tinyglot export --prune-vocab --languages de,fr,ja --format tflite`` prunes and then exports the
pruned student; the pruning report goes into the bundle's ``config.json`` and ``parity.json``.
English is kept with the chosen languages when the sentences are X-English pairs (P@1 is
measured X<->English), unless ``keep_english=False``.
"""

from __future__ import annotations

import json
import unicodedata
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any
from collections.abc import Callable, Sequence

import numpy as np

from tinyglot.errors import TinyglotError
from tinyglot.io import atomic_write_json

from .formats import get_format

MAX_P1_DROP = 0.5
WORD_BOUNDARY = "\u2581"  # ▁
# SentencePiece ModelProto.SentencePiece.Type
NORMAL, UNKNOWN, CONTROL, USER_DEFINED, UNUSED, BYTE = 1, 2, 3, 4, 5, 6


def char_script(ch: str) -> str:
    """A coarse script of one character from its Unicode name (LATIN, CYRILLIC, CJK, HIRAGANA...);
    ``COMMON`` for digits, punctuation, symbols, combining marks and spaces."""
    cat = unicodedata.category(ch)
    if not cat.startswith("L"):
        return "COMMON"
    name = unicodedata.name(ch, "")
    if not name:
        return "UNKNOWN"
    first = name.split()[0]
    if first in ("FULLWIDTH", "HALFWIDTH") and len(name.split()) > 1:
        first = name.split()[1]
    return first


@dataclass
class PruneResult:
    """What the pruning kept and what it cost (sizes in bytes, P@1 in points)."""

    out: Path
    languages: list[str]
    sentences: int
    vocab_before: int
    vocab_after: int
    scripts: list[str]
    embedding_params_before: int
    embedding_params_after: int
    params_before: int
    params_after: int
    weights_bytes_before: int
    weights_bytes_after: int
    p1_before: dict[str, float] = field(default_factory=dict)
    p1_after: dict[str, float] = field(default_factory=dict)
    max_p1_drop: float = MAX_P1_DROP
    corpus: str = "embedded"

    @property
    def p1_drop(self) -> float:
        if not self.p1_before:
            return 0.0
        return float(np.mean(list(self.p1_before.values())) - np.mean(list(self.p1_after.values())))

    @property
    def worst_drop(self) -> float:
        return max((self.p1_before[k] - self.p1_after[k] for k in self.p1_before), default=0.0)

    @property
    def passed(self) -> bool:
        return self.worst_drop <= self.max_p1_drop + 1e-9

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["out"] = str(self.out)
        d.update(p1_drop=self.p1_drop, worst_drop=self.worst_drop, passed=self.passed,
                 vocab_ratio=self.vocab_after / max(1, self.vocab_before),
                 weights_ratio=self.weights_bytes_after / max(1, self.weights_bytes_before))
        return d


# ====================================================================== sentences
def _read_corpus_sentences(path: Path, languages: set[str] | None) -> tuple[list[str], set[str]]:
    """Sentences of a corpus file: any format of ``tinyglot.data.readers`` (both sides of the pairs
    of the wanted languages), or plain text, one sentence a line."""
    from tinyglot.data.readers import detect_format, read_corpus

    if not path.exists():
        raise TinyglotError(f"corpus not found: {path}", "pass a corpus file (tsv, jsonl, tmx, ... or plain text)")
    if path.is_dir() or detect_format(path) is not None:
        sentences, langs = [], set()
        for p in read_corpus(path):
            if languages is None or p.lang in languages:
                sentences += [p.x, p.en]
                langs.add(p.lang)
        return sentences, langs
    import gzip

    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt", encoding="utf-8", errors="replace") as fh:
        return [line.strip() for line in fh if line.strip()], set()


def pruning_sentences(languages: Sequence[str] | None, corpus: str | Path | None,
                      max_per_language: int | None = None) -> tuple[list[str], list[str], str]:
    """``(sentences, languages, corpus name)``: both sides of the chosen languages' pairs of
    ``corpus`` (default: the embedded corpus)."""
    from tinyglot.languages import normalize_lang

    wanted = {normalize_lang(x) for x in languages} if languages else None
    if corpus is not None:
        sentences, found = _read_corpus_sentences(Path(corpus), wanted)
        langs = sorted(wanted or found)
        name = str(corpus)
    else:
        if not wanted:
            raise TinyglotError("vocabulary pruning needs --languages (or a --corpus)", "e.g. --languages de,fr,ja")
        from tinyglot.data.embedded import load_pairs

        per: dict[str, int] = {}
        sentences = []
        for p in load_pairs(None):
            if p.lang in wanted and (max_per_language is None or per.get(p.lang, 0) < max_per_language):
                per[p.lang] = per.get(p.lang, 0) + 1
                sentences += [p.x, p.en]
        missing = wanted - set(per)
        if missing:
            raise TinyglotError(f"the embedded corpus has no sentences for {', '.join(sorted(missing))}",
                                "pass --corpus FILE with sentences of those languages")
        langs = sorted(wanted)
        name = "embedded"
    sentences = [s for s in sentences if isinstance(s, str) and s.strip()]
    if not sentences:
        raise TinyglotError("no sentences to prune the vocabulary on", "pass --languages or a non-empty --corpus")
    return sentences, langs, name


# ====================================================================== the vocabulary
def prune_tokenizer(tokenizer, sentences: Sequence[str], languages: Sequence[str], *,
                    keep_english: bool = True, min_script_share: float = 0.005) -> tuple[Any, list[int], list[str]]:
    """``(new Tokenizer, kept old ids in order, scripts)``; fails if any sentence segments differently.

    ``min_script_share``: a script counts as one of the languages' scripts (all its single
    characters kept) when it has at least this share of the sentences' letters."""
    from sentencepiece import sentencepiece_model_pb2

    pb: Any = sentencepiece_model_pb2  # generated protobuf classes: no stubs

    from tinyglot.tokenizer import Tokenizer, _LANG_PIECE

    proto = pb.ModelProto()
    proto.ParseFromString(tokenizer.proto)
    if proto.trainer_spec.model_type not in (pb.TrainerSpec.UNIGRAM,):
        raise TinyglotError("vocabulary pruning supports unigram SentencePiece models",
                            "BPE merges depend on intermediate pieces; retrain the vocabulary as unigram")
    keep_langs = set(languages) | ({"en"} if keep_english and "en" in tokenizer.languages else set())
    ids_per_sentence = [tokenizer.tokenize(s) for s in sentences]
    used = {i for ids in ids_per_sentence for i in ids}
    counts = Counter(char_script(c) for s in sentences for c in unicodedata.normalize("NFKC", s) if not c.isspace())
    counts.pop("COMMON", None)
    letters = sum(counts.values()) or 1
    # the scripts of these languages: a stray Cyrillic word in German text does not make Cyrillic
    # one of them (its pieces are kept anyway, being used)
    scripts = sorted(k for k, n in counts.items() if n / letters >= min_script_share)
    keep_scripts = set(scripts)
    kept: list[int] = []
    normal_scores = [(p.score, i) for i, p in enumerate(proto.pieces) if p.type == NORMAL]
    lowest = min(normal_scores)[1] if normal_scores else -1
    for i, piece in enumerate(proto.pieces):
        text = piece.piece
        if piece.type in (UNKNOWN, CONTROL, BYTE):
            keep = True
        elif piece.type in (USER_DEFINED, UNUSED):
            m = _LANG_PIECE.match(text)
            keep = m is None or m.group(1) in keep_langs
        elif i in used or i == lowest:
            keep = True
        else:
            core = text[1:] if text.startswith(WORD_BOUNDARY) else text
            keep = len(core) == 1 and (char_script(core) in keep_scripts or char_script(core) == "COMMON")
        if keep:
            kept.append(i)
    new = pb.ModelProto()
    new.CopyFrom(proto)
    del new.pieces[:]
    new.pieces.extend(proto.pieces[i] for i in kept)
    new.trainer_spec.vocab_size = len(kept)
    pruned = Tokenizer(new.SerializeToString())
    if pruned.token_id(tokenizer.piece(0)) != 0 or pruned.token_id(tokenizer.piece(1)) != 1:
        raise TinyglotError("pruning moved the pad/unk ids", "report this with the tokenizer.model")
    # verification: the same pieces for every sentence the vocabulary was pruned on
    bad = 0
    example: tuple[str, list[str], list[str]] = ("", [], [])
    for s, old in zip(sentences, ids_per_sentence, strict=True):
        new_ids = pruned.tokenize(s)
        if [tokenizer.piece(i) for i in old] != [pruned.piece(i) for i in new_ids]:
            bad += 1
            if bad == 1:
                example = (s, [tokenizer.piece(i) for i in old][:10], [pruned.piece(i) for i in new_ids][:10])
    if bad:
        raise TinyglotError(f"the pruned vocabulary segments {bad} of {len(sentences)} sentences differently, "
                            f"e.g. {example[0]!r}: {example[1]} -> {example[2]}",
                            "report this with the tokenizer.model; pruning must not change segmentation")
    return pruned, kept, scripts


def prune_embeddings(model, kept: Sequence[int]) -> None:
    """Keep the rows ``kept`` of the student's word embeddings (in place; ids remapped in order).

    ``model.encoder`` is a ``transformers`` model (BertModel, AlbertModel: its input embeddings are the
    vocabulary table, whatever their width); a model with its own ``cfg`` (LEALLA students) records
    the new vocabulary size there too."""
    import torch

    bert = model.encoder
    old = bert.get_input_embeddings()
    index = torch.as_tensor(list(kept), dtype=torch.long)
    weight = old.weight.detach().index_select(0, index).clone()
    new = torch.nn.Embedding(len(kept), weight.shape[1], padding_idx=old.padding_idx)
    with torch.no_grad():
        new.weight.copy_(weight)
    bert.set_input_embeddings(new)
    bert.config.vocab_size = len(kept)
    if hasattr(model, "cfg"):
        model.cfg.vocab_size = len(kept)


def _weights_bytes(folder: Path) -> int:
    from tinyglot.models import read_model_config
    from tinyglot.registry import source_size

    return source_size(folder, read_model_config(folder))


def _p1(encoder, testset) -> dict[str, float]:
    from tinyglot.evaluation import evaluate_bitext

    return {r.lang: 100 * r.mean for r in evaluate_bitext(encoder, testset, batch_size=32).rows}


def prune_student(
    source: str | Path,
    out: str | Path,
    languages: Sequence[str] | None = None,
    corpus: str | Path | None = None,
    *,
    keep_english: bool = True,
    max_p1_drop: float = MAX_P1_DROP,
    testset=None,
    max_test_pairs: int = 200,
    max_sentences_per_language: int | None = None,
    say: Callable[[str], None] = lambda msg: None,
) -> PruneResult:
    """Write the pruned copy of the student at ``source`` into ``out`` (see the module docstring).

    Raises TinyglotError (and leaves ``out`` without config.json) when the segmentation changes or
    P@1 of a kept language drops by more than ``max_p1_drop`` points."""
    from tinyglot.models import TorchEncoder, read_model_config
    from tinyglot.registry import kind_of

    source, out = Path(source), Path(out)
    if out.resolve() == source.resolve():
        raise TinyglotError("the pruned student's folder is the source folder", "pass another folder")
    kind = kind_of(source, read_model_config(source)) if source.exists() else None
    if kind is None or not kind.can_prune:
        raise TinyglotError(f"{source} is not a student whose vocabulary can be pruned"
                            + (f" (a {kind.name} is a torch checkpoint, not a transformers folder)" if kind else ""),
                            "prune a student folder written by `tinyglot distill`")
    model, tokenizer, cfg = kind.function("load")(source)
    sentences, langs, corpus_name = pruning_sentences(languages, corpus, max_sentences_per_language)
    unknown = [x for x in langs if x not in tokenizer.languages]
    if unknown:
        raise TinyglotError(f"the student's vocabulary has no {', '.join(unknown)} "
                            f"(it has {', '.join(tokenizer.languages)})", "choose languages the student knows")
    say(f"pruning the vocabulary of {source} to {', '.join(langs)} on {len(sentences)} sentences ({corpus_name})")
    max_len = int(cfg["max_len"])
    pruned_tok, kept, scripts = prune_tokenizer(tokenizer, sentences, langs, keep_english=keep_english)
    if testset is None:
        from tinyglot.data.embedded import load_testset

        testset = load_testset()
    subset = {lang: list(pairs)[:max_test_pairs] for lang, pairs in testset.items() if lang in set(langs) and pairs}
    params_before = sum(p.numel() for p in model.encoder.parameters())
    emb_before = model.encoder.get_input_embeddings().weight.numel()
    p1_before = _p1(TorchEncoder(tokenizer, model.embed, max_len, name="before"), subset) if subset else {}
    prune_embeddings(model, kept)
    params_after = sum(p.numel() for p in model.encoder.parameters())
    emb_after = model.encoder.get_input_embeddings().weight.numel()
    p1_after = _p1(TorchEncoder(pruned_tok, model.embed, max_len, name="after"), subset) if subset else {}
    result = PruneResult(out=out, languages=list(pruned_tok.languages), sentences=len(sentences),
                         vocab_before=tokenizer.vocab_size, vocab_after=pruned_tok.vocab_size, scripts=scripts,
                         embedding_params_before=emb_before, embedding_params_after=emb_after,
                         params_before=params_before, params_after=params_after,
                         weights_bytes_before=_weights_bytes(source), weights_bytes_after=0,
                         p1_before=p1_before, p1_after=p1_after, max_p1_drop=max_p1_drop, corpus=corpus_name)
    if not result.passed:
        worst = max(result.p1_before, key=lambda k: result.p1_before[k] - result.p1_after[k])
        raise TinyglotError(
            f"vocabulary pruning costs {result.worst_drop:.2f} points of P@1 on {worst} "
            f"({result.p1_before[worst]:.2f} -> {result.p1_after[worst]:.2f}) > {max_p1_drop}",
            "prune on a larger --corpus of those languages, or do not prune")
    kind.function("save")(model, pruned_tok, out, cfg, {"pruned_from": str(source.resolve())})
    result.weights_bytes_after = _weights_bytes(out)
    cfg_out = json.loads((out / "config.json").read_text(encoding="utf-8"))
    cfg_out["pruning"] = result.to_dict()
    atomic_write_json(out / "config.json", cfg_out)
    say(f"vocabulary {result.vocab_before} -> {result.vocab_after} pieces; weights "
        f"{result.weights_bytes_before / 1e6:.2f} -> {result.weights_bytes_after / 1e6:.2f} MB; P@1 "
        + ", ".join(f"{k} {p1_before[k]:.1f}->{p1_after[k]:.1f}" for k in p1_before))
    return result


def add_pruning_report(bundle: str | Path, result: PruneResult) -> None:
    """Record the pruning in a bundle's ``config.json`` (if written; its recorded digest follows) and
    ``parity.json``."""
    from .bundle import config_digest

    bundle = Path(bundle)
    for name in ("config.json", "parity.json"):
        path = bundle / name
        if path.is_file():
            data = json.loads(path.read_text(encoding="utf-8"))
            data["pruning"] = result.to_dict()
            if name == "config.json" and "config_sha256" in data:
                data["config_sha256"] = config_digest(data)
            atomic_write_json(path, data)


def prune_and_export(source: str | Path, out: str | Path, fmt: str = "onnx", *, languages: Sequence[str] | None = None,
                     corpus: str | Path | None = None, student_out: str | Path | None = None,
                     say: Callable[[str], None] = lambda msg: None, prune_kwargs: dict | None = None,
                     **export_kwargs):
    """Prune the student at ``source`` (into ``student_out``, default ``OUT-student`` beside the
    bundle), export the pruned student as ``fmt`` into ``out``; returns ``(ExportResult, PruneResult)``."""
    out = Path(out)
    student_out = Path(student_out) if student_out else out.resolve().parent / f"{out.resolve().name}-student"
    record = get_format(fmt)  # an unknown format fails before the pruning
    result = prune_student(source, student_out, languages, corpus, say=say, **(prune_kwargs or {}))
    extra = {"pruning": result.to_dict()}
    quant = export_kwargs.pop("quantization", "none")
    if "extra_config" in record.options:
        exported = record.export(student_out, out, quant, say=say, extra_config=extra, **export_kwargs)
    else:
        exported = record.export(student_out, out, quant, say=say, **export_kwargs)
        exported.config.update(extra)  # the files get it from add_pruning_report below
    add_pruning_report(out, result)
    return exported, result


__all__ = ["MAX_P1_DROP", "PruneResult", "add_pruning_report", "char_script", "prune_and_export",
           "prune_embeddings", "prune_student", "prune_tokenizer", "pruning_sentences"]
