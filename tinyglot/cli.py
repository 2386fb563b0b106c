"""The ``tinyglot`` command line: ``tinyglot data|teacher|eval|distill|export|bench|run ...``.

User errors (:class:`~tinyglot.errors.TinyglotError`) print one message and exit with status 2,
without a traceback.  Stages register their subcommands lazily so ``--help`` stays fast.
"""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path
from collections.abc import Callable, Sequence

from tinyglot.errors import TinyglotError

EXIT_USER_ERROR = 2
EXIT_INTERRUPTED = 130


def make_console(stderr: bool = False):
    """The rich console of every command; wide when the output is a file or a pipe (logs, CI), so
    tables are not cut to 80 columns."""
    import sys

    from rich.console import Console

    stream = sys.stderr if stderr else sys.stdout
    return Console(stderr=stderr, highlight=False, width=None if stream.isatty() else 200)


# ------------------------------------------------------------------ shared options
def add_config_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--config", type=Path, help="TOML file with [model] and [train] tables overriding the preset")
    p.add_argument("--set", dest="sets", action="append", metavar="KEY=VALUE",
                   help="override one setting, e.g. --set train.max_steps=500 --set model.num_layers=2")


def config_overrides(args: argparse.Namespace) -> dict:
    from tinyglot.config import parse_sets, read_toml

    merged: dict = read_toml(args.config) if getattr(args, "config", None) else {}
    for section, values in parse_sets(getattr(args, "sets", None)).items():
        if isinstance(values, dict):
            merged.setdefault(section, {}).update(values)
        else:
            merged[section] = values
    return merged


def add_header_option(p: argparse.ArgumentParser) -> None:
    p.add_argument("--header", action=argparse.BooleanOptionalAction, default=None,
                   help="TSV files start with a row of column names (--no-header: they do not; "
                        "default: detect rows such as en<TAB>de or source<TAB>target)")


def print_and_save_result(result, json_path: Path | None) -> None:
    console = make_console()
    console.print(result.to_table())
    if json_path is not None:
        result.write_json(json_path)
        console.print(f"wrote {json_path}")


# ------------------------------------------------------------------ data
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
    from tinyglot.tokenizer import Tokenizer

    pairs = load_pairs(args.input, lang=args.lang)
    langs = sorted({p.lang for p in pairs} | {"en"})
    sentences = [s for p in pairs for s in (p.x, p.en)]
    tok = Tokenizer.train(sentences, langs, vocab_size=args.vocab_size, model_type=args.model_type,
                          lowercase=not args.keep_case, max_sentences=args.max_sentences, seed=args.seed)
    tok.save(args.out)
    make_console().print(f"wrote {args.out}: {tok.vocab_size} pieces, language tokens for {', '.join(tok.languages)}")
    return 0


def cmd_data_build_embedded(args: argparse.Namespace) -> int:
    from tinyglot.data.embedded import build_embedded

    hashes = build_embedded(args.shared, args.out)
    for name, digest in hashes.items():
        make_console().print(f"{name}  sha256 {digest}")
    return 0


# ------------------------------------------------------------------ eval
def cmd_eval(args: argparse.Namespace) -> int:
    from tinyglot.data.embedded import load_testset
    from tinyglot.encoders import load_encoder
    from tinyglot.evaluation import evaluate_bitext

    encoder = load_encoder(args.model, args.device)
    if args.task == "sts":
        from tinyglot.evaluation.tasks import evaluate_sts
        from tinyglot.io import atomic_write_json

        if args.data is None:
            raise TinyglotError("--task sts needs --data FILE", "pass a sentence1<TAB>sentence2<TAB>score file")
        result = evaluate_sts(encoder, args.data, batch_size=args.batch_size)
        rho = "undefined (constant scores)" if result["spearman"] is None else f"{100 * result['spearman']:.1f}"
        make_console().print(f"STS Spearman rho on {args.data} ({result['pairs']} pairs): {rho}")
        if args.json:
            atomic_write_json(args.json, result)
        return 0
    testset = load_testset(args.data, lang=args.lang)
    name = str(args.data or "embedded test set")
    if args.task == "mining":
        from tinyglot.evaluation.tasks import evaluate_mining

        result = evaluate_mining(encoder, testset, batch_size=args.batch_size, model_name=args.model,
                                 testset_name=name)
    else:
        result = evaluate_bitext(encoder, testset, batch_size=args.batch_size, margin=args.margin,
                                 model_name=args.model, testset_name=name)
    print_and_save_result(result, args.json)
    return 0


# ------------------------------------------------------------------ parser
def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="tinyglot",
        description="Turn a multilingual sentence encoder into a small, fast on-device model.",
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="log more detail")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    # data
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
    p.add_argument("--min-chars", type=int, default=1)
    p.add_argument("--max-chars", type=int, default=1000)
    p.add_argument("--max-ratio", type=float, default=3.0, help="max character-length ratio of the two sides")
    p.add_argument("--cap", type=int, default=None, help="at most this many pairs per language")
    p.add_argument("--languages", help="keep only these languages: comma-separated codes, or a peer's name "
                                       "(e5-small, use-m) for the languages it covers")
    p.add_argument("--min-pairs", type=int, default=0,
                   help="leave out languages with fewer pairs than this after cleaning")
    p.add_argument("--sample", action="store_true",
                   help="--cap draws a seeded random sample per language instead of the first pairs (implied by "
                        "--languages and --min-pairs)")
    p.add_argument("--dev-fraction", type=float, default=0.02)
    p.add_argument("--dev-min-words", type=int, default=0,
                   help="held-out pairs: keep only English sides of at least this many words, each English and "
                        "each translation once per language (a test set of full sentences)")
    p.add_argument("--dev-cap", type=int, default=None, help="held-out pairs: at most this many per language")
    p.add_argument("--seed", type=int, default=0)
    add_header_option(p)
    p.set_defaults(func=cmd_data_prepare)
    p = dsub.add_parser("vocab", help="train a SentencePiece vocabulary with one <2xx> token per language")
    p.add_argument("input", nargs="?", type=Path, help="corpus file or folder (default: embedded corpus)")
    p.add_argument("--out", type=Path, required=True, help="output .model file")
    p.add_argument("--lang")
    p.add_argument("--vocab-size", type=int, default=8000)
    p.add_argument("--model-type", choices=["unigram", "bpe"], default="unigram")
    p.add_argument("--keep-case", action="store_true", help="do not lower-case (the paper lower-cases)")
    p.add_argument("--max-sentences", type=int, default=300_000)
    p.add_argument("--seed", type=int, default=0)
    p.set_defaults(func=cmd_data_vocab)
    p = dsub.add_parser("build-embedded", help="rebuild the embedded corpus and test set from shared data")
    p.add_argument("--shared", type=Path, required=True, help="the shared data folder (train.jsonl.gz, test/)")
    p.add_argument("--out", type=Path, default=None, help="output folder (default: inside the package)")
    p.set_defaults(func=cmd_data_build_embedded)

    # eval
    p = sub.add_parser("eval", help="bitext retrieval P@1 of any encoder, per language and averaged",
                       description="Tatoeba-style bitext retrieval: P@1 in both directions per language.")
    p.add_argument("--model", required=True,
                   help="'tfidf' (baseline), a model folder (teacher run, student, bundle), a peer (e5-small, "
                        "use-m, minilm) or a teacher spec (pypi:, python:, tfhub:, st:, hf:)")
    p.add_argument("--data", type=Path, default=None, help="test set (default: the embedded test set)")
    p.add_argument("--lang", help="language of a single-language test file whose name does not say")
    p.add_argument("--task", choices=["bitext", "mining", "sts"], default="bitext",
                   help="bitext: P@1 both directions; mining: margin-based mining P/R/F1 with a threshold "
                        "chosen on held-out pairs (BUCC style); sts: Spearman rho on a s1<TAB>s2<TAB>score file")
    p.add_argument("--margin", action="store_true", help="ratio-margin scoring (k=4) instead of cosine")
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--device", default="cpu", help="cpu, cuda or auto")
    p.add_argument("--json", type=Path, default=None, help="also write the result as JSON")
    p.set_defaults(func=cmd_eval)

    # stages
    from tinyglot.distill.cli import register as register_distill
    from tinyglot.export.cli import register as register_export
    from tinyglot.teacher.cli import register as register_teacher

    from tinyglot.devices.cli import register as register_bench
    from tinyglot.pipeline import register as register_run

    register_teacher(sub)
    register_distill(sub)
    register_export(sub)
    register_bench(sub)
    register_run(sub)
    return parser


# Loggers that print import-time noise a user cannot act on: torchao (pulled in by transformers when
# litert-torch installed it) warns that there is no triton, and registers enums with torch's pytree,
# which logs a deprecation warning per enum.
NOISY_LOGGERS = ("torchao", "torch.utils._pytree")


def quiet_third_party_import_noise() -> None:
    for name in NOISY_LOGGERS:
        logging.getLogger(name).setLevel(logging.ERROR)


def run(argv: Sequence[str] | None, parser_factory: Callable[[], argparse.ArgumentParser]) -> int:
    parser = parser_factory()
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO if getattr(args, "verbose", False) else logging.WARNING,
                        format="%(levelname)s %(name)s: %(message)s")
    quiet_third_party_import_noise()
    try:
        return int(args.func(args) or 0)
    except TinyglotError as exc:
        from rich.markup import escape

        make_console(stderr=True).print(f"[bold red]error:[/] {escape(str(exc))}", soft_wrap=True)
        return EXIT_USER_ERROR
    except KeyboardInterrupt:
        make_console(stderr=True).print("interrupted: checkpoints are intact; rerun with --resume to continue")
        return EXIT_INTERRUPTED


def main(argv: Sequence[str] | None = None) -> int:
    return run(argv, build_parser)


def distill_main(argv: Sequence[str] | None = None) -> int:
    """The bare ``distill`` command: ``distill --student lealla-small`` == ``tinyglot distill ...``."""
    args = list(sys.argv[1:] if argv is None else argv)
    return main(["distill", *args])


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
