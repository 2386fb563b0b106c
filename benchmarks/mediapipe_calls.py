"""Where a tflite-mediapipe file's time goes: MediaPipe's TextEmbedder against LiteRT's interpreter on the
same file, per call, natively or on AVX2 kernels (:mod:`tinyglot.devices.isa`).

Per sentence set, microseconds a call, 1 thread, the fastest of ``--repeats`` passes:

- ``mediapipe``: ``TextEmbedder.embed`` alone (tinyglot's encoder around it left out);
- ``litert``: LiteRT's signature runner on the ids MediaPipe fed the file (``[CLS] pieces [SEP]``, read
  back from its ``token_ids`` head), the tokenisation done ahead;
- ``... fixed``: both on a one-token string, the cost of a call itself.

The gap between the two rows is MediaPipe's (its graph, its tokeniser, its copies); what both share is
the file's own compute.  Prints numbers, asserts nothing.

    python benchmarks/mediapipe_calls.py tinyglot-small --test general@15=GENERAL/general-test --isa avx2
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

import numpy as np

from tinyglot.devices.isa import ISAS, NATIVE, isa_env, masked_isa
from tinyglot.devices.regimes import default_set_specs, fastest_pass, load_set, sets_line


def fed_inputs(enc, text: str) -> dict[str, np.ndarray]:
    """The inputs the MediaPipe encoder ``enc`` fed its file for ``text``: ``[CLS] pieces [SEP]`` (both ends
    ``<unk>``, id 1, in tinyglot's vocabularies), the pieces read back from the file's ``token_ids`` head."""
    ids = np.array([[1, *enc.run_text(text)[1], 1]], dtype=np.int32)
    return {"ids": ids, "mask": np.ones_like(ids), "segment_ids": np.zeros_like(ids)}


def measure(model: Path, sentences: list[str], repeats: int) -> dict[str, float]:
    """The four timings of the module docstring for ``sentences``, and the mean ids a call."""
    from ai_edge_litert.interpreter import Interpreter

    from tinyglot.export.tflite_mediapipe import SIGNATURE, MediaPipeTextEncoder
    from tinyglot.quiet import third_party_output

    enc = MediaPipeTextEncoder(model, max_len=0)  # closes its TextEmbedder when collected: kept to the end
    embedder = enc.embedder
    with third_party_output("LiteRT's output"):  # its "Created ... XNNPACK delegate" line
        runner = Interpreter(model_path=str(model), num_threads=1).get_signature_runner(SIGNATURE)
        inputs, one, k = [fed_inputs(enc, s) for s in sentences], fed_inputs(enc, "a"), 1000
        runner(**one)
    n = len(sentences)
    times = {"mediapipe": fastest_pass(lambda: [embedder.embed(s) for s in sentences], repeats) / n * 1e6,
             "litert": fastest_pass(lambda: [runner(**x) for x in inputs], repeats) / n * 1e6,
             "mediapipe fixed": fastest_pass(lambda: [embedder.embed("a") for _ in range(k)], repeats) / k * 1e6,
             "litert fixed": fastest_pass(lambda: [runner(**one) for _ in range(k)], repeats) / k * 1e6,
             "ids": float(np.mean([x["ids"].shape[1] for x in inputs]))}
    enc.close()
    return times


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("model", help="a released name with a tflite-mediapipe bundle, the bundle, or its model.tflite")
    p.add_argument("--test", action="append", default=[], metavar="NAME[@MIN_WORDS]=SOURCE[+SOURCE..]",
                   help="a sentence set (repeatable); default: the shared libreoffice test and the prose set")
    p.add_argument("--max-sentences", type=int, default=500)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--isa", choices=sorted(ISAS), default=NATIVE)
    args = p.parse_args(argv)
    if args.isa != NATIVE and args.isa != masked_isa():  # this script again, in a process shown that ISA
        argv = sys.argv[1:] if argv is None else list(argv)
        return subprocess.run([sys.executable, __file__, *argv], env={**os.environ, **isa_env(args.isa)}).returncode
    from tinyglot.released import released_folder

    model = Path(args.model) if Path(args.model).exists() else released_folder(args.model) / "tflite-mediapipe"
    model = model / "model.tflite" if model.is_dir() else model
    if not model.is_file():
        raise SystemExit(f"{model}: no MediaPipe file; give a released name or a tflite-mediapipe bundle")
    from tinyglot.devices.profiles import detect_host

    sets = [load_set(spec, args.max_sentences) for spec in args.test or default_set_specs()]
    print(f"{detect_host()['cpu_model']}, {os.cpu_count()} cores, 1 thread, fastest of {args.repeats} passes; "
          f"ISA: {ISAS[masked_isa()]}; {model}")
    print(sets_line(sets) + "\n")
    print("| set | ids a call | mediapipe us | litert us | mediapipe fixed us | litert fixed us | mediapipe / litert |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for s in sets:
        t = measure(model, s.sentences, args.repeats)
        print(f"| {s.name} | {t['ids']:.1f} | {t['mediapipe']:,.0f} | {t['litert']:,.0f} | {t['mediapipe fixed']:,.0f} "
              f"| {t['litert fixed']:,.0f} | {t['mediapipe'] / t['litert']:.2f} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
