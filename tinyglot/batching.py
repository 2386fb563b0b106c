"""Tokenised parallel corpora and a deterministic, resumable, length-bucketed batch plan.

The batch of optimizer step ``s`` is a pure function of (seed, s): resuming at step ``s`` needs
no iterator state, and every process of a data-parallel run derives the same global batch and
takes its own slice of it.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Protocol

import numpy as np

import logging

from tinyglot.data import Pair
from tinyglot.data.clean import english_key, group_by_lang, sampling_probs, train_dev_split
from tinyglot.errors import TinyglotError
from tinyglot.tokenizer import PAD_ID, Batch, Tokenizer, frequent_characters

log = logging.getLogger("tinyglot.data")
PIVOT = "en"
TRAINER_SPLIT_SALT = 1_000_003


class PlanSettings(Protocol):
    """What :meth:`BatchPlan.from_settings` reads of a trainer's settings
    (:class:`tinyglot.trainloop.TrainSettings` has it)."""

    batch_size: int
    lang_temperature: float
    seed: int
    general_share: float
    batch_grouping: str


def split_train_dev(
    pairs: list[Pair], dev_fraction: float, dev_pairs_per_lang: int, seed: int
) -> tuple[dict[str, list[Pair]], dict[str, list[Pair]]]:
    """Train/dev pairs grouped by language; an English sentence lands on one side only.

    Dev keeps at most ``dev_pairs_per_lang`` pairs per language, and only languages with 10+.
    """
    if all(p.lang == PIVOT for p in pairs):
        raise TinyglotError(
            "the corpus holds only English-English pairs: there is nothing to align across languages",
            "give a corpus of translation pairs (x in some language, en its English translation)",
        )
    pairs = [p for p in pairs if p.lang != PIVOT]
    # Salted: a corpus already split by `tinyglot data prepare` (same seed) still yields a dev set.
    train, dev = train_dev_split(pairs, dev_fraction=dev_fraction, seed=seed + TRAINER_SPLIT_SALT)
    train_g = group_by_lang(train)
    if not train_g:
        raise TinyglotError("no training pairs left after the train/dev split", "give a larger corpus")
    if len(train_g) == 1:
        log.warning("the corpus has one language besides English (%s): training a bilingual encoder",
                    next(iter(train_g)))
    dev_g = {lang: ps[:dev_pairs_per_lang] for lang, ps in group_by_lang(dev).items() if len(ps) >= 10}
    if not dev_g and dev_fraction > 0:
        log.warning("no language has 10+ dev pairs: no dev evaluation and no best checkpoint "
                    "(raise train.dev_fraction or give a larger corpus)")
    return train_g, dev_g


def train_vocabulary(
    train: dict[str, list[Pair]], vocab_size: int, max_sentences: int, model_type: str = "unigram",
    lowercase: bool = True, seed: int = 0, char_share: float = 0.0, general_share: float = 0.0,
    words: Mapping[str, Sequence[tuple[str, int]]] | None = None, word_sentences: int = 0,
    cache_dir: str | Path | None = None,
) -> Tokenizer:
    """A SentencePiece vocabulary trained on a language-balanced sample of both sides; with
    ``char_share`` > 0 (``train.vocab_char_share``) it holds every character that the whole corpus holds
    often enough (:func:`frequent_characters`), up to that share of its pieces; with ``general_share`` > 0
    (``train.vocab_general_share``) that share of the sample of a language with both kinds of rows comes
    from its general-domain rows (:attr:`Pair.general`); with ``words`` (``train.vocab_words``: language
    -> (word, wordfreq bucket), most frequent first) the sample also holds :func:`word_lines` of each
    language of ``train`` that has a list.  With ``cache_dir`` the model is kept there under a hash of
    everything SentencePiece is given (:func:`vocabulary_key`): a rerun on the same sample loads it
    instead of training it again (SentencePiece is seeded, so it would learn the same pieces)."""
    per_lang = max(1, max_sentences // (2 * len(train)))
    rng = np.random.default_rng(seed)
    sample: list[str] = []
    for lang in sorted(train):
        ps = train[lang]
        for i in _vocabulary_rows(ps, per_lang, general_share, rng):
            sample += [ps[i].x, ps[i].en]
    if words and word_sentences:
        word_rng = np.random.default_rng(seed + WORDS_SALT)
        for lang in sorted(train):
            if words.get(lang):
                sample += word_lines(words[lang], word_sentences, word_rng)
    chars = frequent_characters((s for ps in train.values() for p in ps for s in (p.x, p.en)),
                                int(vocab_size * char_share), lowercase)
    languages = [*train, PIVOT]
    cached = None
    if cache_dir is not None:
        key = vocabulary_key(sample, languages, vocab_size, model_type, lowercase, seed, chars)
        cached = Path(cache_dir) / f"vocabulary-{key[:24]}.model"
        if cached.is_file():
            try:
                tokenizer = Tokenizer.load(cached)
                log.info("vocabulary: %s (the same sample and settings as a run before)", cached)
                return tokenizer
            except TinyglotError:  # a damaged file: trained again below and replaced
                log.warning("vocabulary cache %s is not a SentencePiece model: training it again", cached)
    tokenizer = Tokenizer.train(sample, languages=languages, vocab_size=vocab_size, model_type=model_type,
                                lowercase=lowercase, seed=seed, required_chars=chars)
    if cached is not None:
        cached.parent.mkdir(parents=True, exist_ok=True)
        tokenizer.save(cached)
    return tokenizer


def vocabulary_key(sample: Sequence[str], languages: Sequence[str], vocab_size: int, model_type: str,
                   lowercase: bool, seed: int, required_chars: str) -> str:
    """sha256 of what :meth:`Tokenizer.train` learns a vocabulary from: the sample (in order), the
    settings, the required characters and SentencePiece's version."""
    import sentencepiece

    settings = {"languages": sorted(set(languages)), "vocab_size": vocab_size, "model_type": model_type,
                "lowercase": lowercase, "seed": seed, "required_chars": required_chars,
                "sentencepiece": sentencepiece.__version__, "format": 1}
    digest = hashlib.sha256(json.dumps(settings, sort_keys=True, ensure_ascii=False).encode("utf-8"))
    for sentence in sample:
        digest.update(sentence.encode("utf-8", "surrogatepass") + b"\0")
    return digest.hexdigest()


WORDS_SALT = 7  # the word lines' generator: seeded apart from the sample's
WORD_LINE_LENGTH = 12


def word_lines(words: Sequence[tuple[str, int]], n: int, rng: np.random.Generator,
               length: int = WORD_LINE_LENGTH) -> list[str]:
    """``n`` lines of ``length`` words, each drawn from ``words`` ((word, wordfreq bucket): frequency
    ``10 ** (-bucket / 100)``) by its frequency: text with the language's word frequencies and no
    sentences, for a vocabulary's sample."""
    p = 10.0 ** (-np.asarray([bucket for _, bucket in words], dtype=np.float64) / 100.0)
    idx = rng.choice(len(words), size=(n, length), p=p / p.sum())
    return [" ".join(words[i][0] for i in row) for row in idx]


def general_mask(pairs: Sequence[Pair]) -> np.ndarray:
    """Which of ``pairs`` are general-domain rows (:attr:`Pair.general`)."""
    return np.fromiter((p.general for p in pairs), dtype=bool, count=len(pairs))


def general_split(pairs: Sequence[Pair]) -> tuple[np.ndarray, np.ndarray] | None:
    """(indices of the general-domain rows, indices of the others) where ``pairs`` hold both kinds, else None."""
    general = general_mask(pairs)
    return (np.flatnonzero(general), np.flatnonzero(~general)) if general.any() and not general.all() else None


def _vocabulary_rows(pairs: list[Pair], n: int, general_share: float, rng: np.random.Generator) -> np.ndarray:
    """``n`` distinct row indices of ``pairs`` drawn at random: uniformly, or with ``general_share`` of them
    from the general-domain rows where there are both kinds (the rest from the others; a kind with too
    few rows gives what it has and the other kind fills in)."""
    split = general_split(pairs) if general_share > 0 else None
    if split is None:
        return rng.permutation(len(pairs))[:n]
    g_rows, o_rows = rng.permutation(split[0]), rng.permutation(split[1])
    n_general = min(len(g_rows), round(n * general_share))
    n_other = min(len(o_rows), n - n_general)
    n_general = min(len(g_rows), n - n_other)
    return np.concatenate([g_rows[:n_general], o_rows[:n_other]])


def check_tokenizer(tokenizer: Tokenizer, langs: list[str]) -> None:
    missing = sorted(set(langs) - set(tokenizer.languages))
    if missing:
        raise TinyglotError(
            f"the vocabulary lacks language tokens for: {', '.join(missing)} "
            f"(it has {', '.join(tokenizer.languages) or 'none'})",
            "train a new vocabulary (omit --tokenizer) or drop those languages from the corpus",
        )


@dataclass
class TokenizedPairs:
    """Token ids of both sides of every pair, grouped by language."""

    langs: list[str]
    x: list[list[np.ndarray]]  # x[lang_index][pair_index] -> int32 ids
    en: list[list[np.ndarray]]
    en_key: list[np.ndarray]  # 64-bit hash of the English side, to keep duplicates out of a batch
    pairs: list[list[Pair]] = field(default_factory=list)  # the pairs kept, aligned with x / en
    truncated: int = 0
    fingerprint: str = ""

    def count(self, lang_index: int) -> int:
        return len(self.x[lang_index])


def tokenize_pairs(
    grouped: dict[str, list[Pair]], tokenizer: Tokenizer, max_len: int
) -> TokenizedPairs:
    """Tokenise every pair (truncating to ``max_len``); pairs with an empty side are dropped."""
    langs = sorted(grouped)
    h = hashlib.sha256()
    out = TokenizedPairs(langs=langs, x=[], en=[], en_key=[], pairs=[])
    for lang in langs:
        xs, ens, keys, kept = [], [], [], []
        for pair in grouped[lang]:
            xi, ei = tokenizer.tokenize(pair.x), tokenizer.tokenize(pair.en)
            if not xi or not ei:
                continue
            out.truncated += int(len(xi) > max_len) + int(len(ei) > max_len)
            xs.append(np.asarray(xi[:max_len], dtype=np.int32))
            ens.append(np.asarray(ei[:max_len], dtype=np.int32))
            digest = hashlib.blake2b(english_key(pair.en).encode("utf-8"), digest_size=8).digest()
            keys.append(int.from_bytes(digest, "little") & 0x7FFF_FFFF_FFFF_FFFF)
            h.update(f"{lang}\t{pair.x}\t{pair.en}\n".encode())
            kept.append(pair)
        if xs:
            out.pairs.append(kept)
            out.x.append(xs)
            out.en.append(ens)
            out.en_key.append(np.asarray(keys, dtype=np.int64))
        else:
            out.langs = [lang_ for lang_ in out.langs if lang_ != lang]
    h.update(f"max_len={max_len};tok={tokenizer.sha256}".encode())
    out.fingerprint = h.hexdigest()
    if not out.langs:
        raise TinyglotError(
            "no pairs left after tokenisation (every sentence was empty)",
            "check the corpus: it must hold non-empty sentence pairs",
        )
    return out


# Fixed widths to pad training batches to: the first that holds a batch's longest row (at most the model's
# max_len), so that tensor sizes recur from step to step and the blocks malloc freed at one step fit the
# next step's tensors (docs/design.md, "Memory on the CPU").  The widths grow by about a third: 12.5 % more
# padded tokens than padding to the longest row on 400 ems-small batches.  Not the default yet: the row
# count of a batch varies too (English duplicates dropped: 101-128 rows on ems-small), and the gain is
# unmeasured (benchmarks/allocator.py, pad=buckets).
BUCKET_WIDTHS: tuple[int, ...] = (8, 12, 16, 20, 24, 32, 40, 48, 64, 80, 96, 128, 160, 192, 256, 320, 384, 512)
# The widths BatchPlan.tensors pads training batches to; () pads to the longest row.  Read at each call.
PAD_WIDTHS: tuple[int, ...] = ()


def padded_width(longest: int, max_len: int, widths: Sequence[int] | None = None) -> int:
    """The width a batch whose longest row has ``longest`` tokens is padded to: the first of ``widths``
    (default :data:`PAD_WIDTHS`) that holds it, capped at ``max_len``; ``longest`` itself with no widths."""
    widths = PAD_WIDTHS if widths is None else widths
    if not widths:
        return longest
    fit = next((w for w in widths if w >= longest), max_len)
    return max(longest, min(fit, max_len))


def pad_arrays(seqs: Sequence[np.ndarray], max_len: int, widths: Sequence[int] = ()) -> Batch:
    """``Tokenizer.pad(seqs, max_len)`` for rows of token ids that are numpy arrays: the same int64 ids
    and mask, padded to the longest row (rows are truncated to ``max_len`` when tokenised), or with
    ``widths`` to the :func:`padded_width` of the longest row."""
    lengths = np.fromiter((len(s) for s in seqs), dtype=np.int64, count=len(seqs))
    width = padded_width(int(lengths.max()), max_len, widths) if len(seqs) else 1
    mask = np.arange(width)[None, :] < lengths[:, None]
    ids = np.full((len(seqs), width), PAD_ID, dtype=np.int64)
    if len(seqs):
        ids[mask] = np.concatenate(seqs)
    return Batch(ids, mask.astype(np.int64))


BATCH_GROUPINGS = ("length", "source")
# Batches a chunk holds with grouping="source": one source's share of a small chunk spans a wide range of
# lengths.  Padded tokens per real token, 2,000 batches of 128 from the e5 profile's mix (48k pieces):
# length 50 -> 1.32; source 50 -> 3.13, 500 -> 1.54, 2,000 -> 1.27.
SOURCE_CHUNK = 2000


class BatchPlan:
    """Length-bucketed batches drawn with temperature-based language sampling.

    Steps are grouped in chunks of ``chunk`` batches: a chunk draws ``chunk * batch_size`` pairs
    (language by temperature sampling, then a pair uniformly), sorts them by length so each batch
    holds sentences of similar length (little padding), and shuffles the batch order.  Within a
    batch a repeated English sentence (the same English translated into two languages) is dropped,
    since it would be a false in-batch negative.

    ``general_share`` > 0: in a language with both general-domain rows (:attr:`Pair.general`) and
    others, that share of its draws takes a general row (uniformly among them), the rest another row.

    ``grouping="source"`` sorts a chunk's draws by their pair's ``src`` before length, so a batch holds
    rows of one source (of any language): in-batch negatives of the same kind of text.  Its chunks
    are :data:`SOURCE_CHUNK` batches long (``chunk`` = 0 picks 50 or that), so that each source's share
    of a chunk still sorts into batches of similar length.
    """

    def __init__(
        self, data: TokenizedPairs, batch_size: int, temperature: float, seed: int, chunk: int = 0,
        general_share: float = 0.0, grouping: str = "length",
    ) -> None:
        if batch_size < 2:
            raise TinyglotError(f"batch_size must be at least 2 for in-batch negatives, got {batch_size}")
        if grouping not in BATCH_GROUPINGS:
            raise TinyglotError(f"unknown batch grouping {grouping!r}", f"choose one of: {', '.join(BATCH_GROUPINGS)}")
        self.grouping = grouping
        self.data = data
        self.batch_size = batch_size
        self.seed = seed
        self.chunk = chunk or (SOURCE_CHUNK if grouping == "source" else 50)
        counts = {lang: data.count(i) for i, lang in enumerate(data.langs)}
        probs = sampling_probs(counts, temperature)
        self.probs = np.array([probs[lang] for lang in data.langs], dtype=np.float64)
        self.general_share = general_share
        # per language: (indices of its general rows, of its other rows) where it has both
        self._domains: dict[int, tuple[np.ndarray, np.ndarray]] = {}
        if general_share > 0:
            for li, ps in enumerate(data.pairs):
                if (split := general_split(ps)) is not None:
                    self._domains[li] = split
        self._cache: tuple[int, list[np.ndarray]] | None = None
        self._sources: list[np.ndarray] | None = None

    @classmethod
    def from_settings(cls, data: TokenizedPairs, tc: PlanSettings, world: int = 1, seed_offset: int = 0
                      ) -> BatchPlan:
        """The plan a trainer's settings ask for: the global batch (``tc.batch_size`` per process times
        ``world``), its language temperature, seed (plus ``seed_offset``), general-domain share and grouping."""
        return cls(data, tc.batch_size * world, tc.lang_temperature, tc.seed + seed_offset,
                   general_share=tc.general_share, grouping=tc.batch_grouping)

    def _general_masks(self) -> list[np.ndarray]:
        """Per language, which of its rows are general-domain (:attr:`Pair.general`)."""
        return [general_mask(ps) for ps in self.data.pairs]

    def _source_codes(self) -> list[np.ndarray]:
        """Per language, a code of each row's ``src`` (codes in the order of the sorted names); made once."""
        if self._sources is None:
            names = sorted({p.src for ps in self.data.pairs for p in ps})
            code = {name: i for i, name in enumerate(names)}
            self._sources = [np.fromiter((code[p.src] for p in ps), dtype=np.int64, count=len(ps))
                             for ps in self.data.pairs]
        return self._sources

    def general_fraction(self) -> float:
        """The expected share of general-domain rows among the draws (language probabilities included)."""
        return float(sum(self.probs[li] * (self.general_share if li in self._domains else general.mean())
                         for li, general in enumerate(self._general_masks()) if len(general)))

    def _chunk(self, c: int) -> list[np.ndarray]:
        if self._cache is not None and self._cache[0] == c:
            return self._cache[1]
        rng = np.random.default_rng([self.seed, c])
        n = self.chunk * self.batch_size
        lang = rng.choice(len(self.probs), size=n, p=self.probs)
        counts = np.array([self.data.count(i) for i in range(len(self.probs))])
        idx = np.floor(rng.random(n) * counts[lang]).astype(np.int64)
        if self._domains:  # (further draws only then: a plan without general_share stays as it was)
            take_general, where = rng.random(n) < self.general_share, rng.random(n)
            for li, (general, other) in self._domains.items():
                rows = np.flatnonzero(lang == li)
                for pool, pick in ((general, take_general[rows]), (other, ~take_general[rows])):
                    idx[rows[pick]] = pool[np.floor(where[rows[pick]] * len(pool)).astype(np.int64)]
        length = np.array(
            [max(len(self.data.x[li][pi]), len(self.data.en[li][pi])) for li, pi in zip(lang, idx, strict=True)]
        )
        keys = [rng.random(n), length]
        if self.grouping == "source":
            sources = self._source_codes()
            keys.append(np.fromiter((sources[li][pi] for li, pi in zip(lang, idx, strict=True)), dtype=np.int64,
                                    count=n))
        order = np.lexsort(keys)
        draws = np.stack([lang[order], idx[order]], axis=1)
        batches = [draws[i : i + self.batch_size] for i in range(0, n, self.batch_size)]
        batches = [batches[i] for i in rng.permutation(len(batches))]
        self._cache = (c, batches)
        return batches

    def batch(self, step: int, world: int = 1) -> np.ndarray:
        """Rows (lang_index, pair_index) of the global batch of ``step``, English duplicates removed.

        The row count is trimmed to a multiple of ``world`` so every process gets the same size.
        """
        rows = self._chunk(step // self.chunk)[step % self.chunk]
        keys = np.array([self.data.en_key[li][pi] for li, pi in rows])
        _, first = np.unique(keys, return_index=True)
        rows = rows[np.sort(first)]
        return rows[: len(rows) - len(rows) % world]

    def tensors(self, rows: np.ndarray, tokenizer: Tokenizer, lang_ids: Sequence[int], max_len: int):
        """(x Batch, en Batch, x language-token ids) for ``rows``: the arrays ``tokenizer.pad`` makes,
        built with one scatter per side instead of a Python loop over rows, each side padded to the
        :func:`padded_width` of its longest row (:data:`PAD_WIDTHS`; () by default: the longest row)."""
        widths = PAD_WIDTHS
        xb = pad_arrays([self.data.x[li][pi] for li, pi in rows], max_len, widths)
        eb = pad_arrays([self.data.en[li][pi] for li, pi in rows], max_len, widths)
        x_lang = np.array([lang_ids[li] for li, _ in rows], dtype=np.int64)
        return xb, eb, x_lang
