"""``tinyglot eval``: bitext retrieval, mining or STS of any encoder."""

from __future__ import annotations

import argparse
from pathlib import Path

from tinyglot.app.commands.common import print_and_save_result
from tinyglot.console import make_console
from tinyglot.errors import TinyglotError


def cmd_eval(args: argparse.Namespace) -> int:
    import tinyglot
    from tinyglot.data.embedded import load_testset
    from tinyglot.evaluation import evaluate_bitext

    # the data is checked before the model loads, so a bad --data fails at once, not after the load
    if args.task == "sts":
        from tinyglot.evaluation.tasks import evaluate_sts
        from tinyglot.io import atomic_write_json

        if args.data is None:
            raise TinyglotError("--task sts needs --data FILE", "pass a sentence1<TAB>sentence2<TAB>score file")
        if not Path(args.data).is_file():
            raise TinyglotError(f"STS file {args.data} not found", "pass a sentence1<TAB>sentence2<TAB>score file")
        encoder = tinyglot.load(args.model, args.device)
        result = evaluate_sts(encoder, args.data, batch_size=args.batch_size)
        rho = "undefined (constant scores)" if result["spearman"] is None else f"{100 * result['spearman']:.1f}"
        make_console().print(f"STS Spearman rho on {args.data} ({result['pairs']} pairs): {rho}")
        if args.json:
            atomic_write_json(args.json, result)
        return 0
    testset = load_testset(args.data, lang=args.lang)
    encoder = tinyglot.load(args.model, args.device)
    name = str(args.data or "embedded test set")
    if args.task == "mining":
        from tinyglot.evaluation.tasks import evaluate_mining

        mining = evaluate_mining(encoder, testset, batch_size=args.batch_size, model_name=args.model,
                                 testset_name=name)
        print_and_save_result(mining, args.json)
        return 0
    bitext = evaluate_bitext(encoder, testset, batch_size=args.batch_size, margin=args.margin,
                             model_name=args.model, testset_name=name)
    print_and_save_result(bitext, args.json)
    return 0


def register(sub) -> None:
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
    p.add_argument("--batch-size", type=int, default=64, help="sentences per forward pass")
    p.add_argument("--device", default="cpu", help="cpu, cuda or auto")
    p.add_argument("--json", type=Path, default=None, help="also write the result as JSON")
    p.set_defaults(func=cmd_eval)
