"""Sentences/s of one ONNX bundle's encoder layers on other onnxruntime weight kernels than the int8 ones
it ships with, in the three calling regimes (:mod:`tinyglot.devices.regimes`), natively or on AVX2 kernels.

The bundle's int8 matrices (``DynamicQuantizeLinear`` -> ``MatMulInteger`` chains, which onnxruntime runs
as ``DynamicQuantizeMatMul``) are dequantized into fp32 ``MatMul`` (``fp32``), which onnxruntime's
weight-only quantizer then turns into ``MatMulNBits`` blocks (``nbits8``, ``nbits4``; ``-a4``: int8
activations, accuracy_level 4; ``-a0``: fp32 compute).  The attention's fused ``QAttention``, the token
table and the tokenizer stay as shipped, so the variants differ in those matrices only.  Each variant is
a copy of the bundle with its new graph sealed into its config; the lowest cosine of its embeddings
against the shipped bundle's is printed beside its speed.  Prints numbers, asserts nothing.

    python benchmarks/weight_kernels.py tinyglot-small --test general@15=GENERAL/general-test --isa avx2
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
from pathlib import Path

import numpy as np

from tinyglot.devices.isa import ISAS, NATIVE
from tinyglot.devices.regimes import BASELINE, default_set_specs, load_set, regimes_table, run_regimes, sets_line

VARIANTS = ("fp32", "nbits8-a4", "nbits8-a0", "nbits4-a4", "nbits4-a0")


def dequantized_matmuls(model) -> int:
    """Replace each ``DynamicQuantizeLinear -> MatMulInteger -> Cast -> Mul`` chain of ``model`` (in place)
    by one fp32 ``MatMul`` on the dequantized weights; returns how many."""
    from onnx import helper, numpy_helper

    g = model.graph
    consts = {i.name: i for i in g.initializer}
    made_by = {o: n for n in g.node for o in n.output}
    users: dict[str, list] = {}
    for n in g.node:
        for i in n.input:
            users.setdefault(i, []).append(n)
    dropped, replaced = set(), {}
    for n in g.node:
        if n.op_type != "MatMulInteger":
            continue
        cast = users[n.output[0]][0]
        mul = users[cast.output[0]][0]
        scales = made_by[next(i for i in mul.input if i != cast.output[0])]  # x_scale * w_scale
        w_scale = next(numpy_helper.to_array(consts[i]) for i in scales.input if i in consts)
        w = (numpy_helper.to_array(consts[n.input[1]]).astype(np.float32)
             - numpy_helper.to_array(consts[n.input[3]]).astype(np.float32)) * w_scale.astype(np.float32)
        g.initializer.append(numpy_helper.from_array(w, n.input[1] + "_fp32"))
        x = made_by[n.input[0]].input[0]
        replaced[id(mul)] = helper.make_node("MatMul", [x, n.input[1] + "_fp32"], [mul.output[0]],
                                             name=n.name.removesuffix("_quant"))
        dropped |= {id(n), id(cast), id(scales)}
    nodes = [replaced.get(id(n), n) for n in g.node if id(n) not in dropped]
    needed = {i for n in nodes for i in n.input} | {o.name for o in g.output}
    nodes = [n for n in nodes if n.op_type != "DynamicQuantizeLinear" or any(o in needed for o in n.output)]
    needed = {i for n in nodes for i in n.input}
    del g.node[:]
    g.node.extend(nodes)  # each MatMul takes its Mul's place: the order stays topological
    kept = [i for i in g.initializer if i.name in needed]
    del g.initializer[:]
    g.initializer.extend(kept)
    return len(replaced)


def variant_graph(model, variant: str):
    """A copy of the dequantized ``model`` with ``variant``'s MatMul kernels."""
    import onnx

    out = onnx.ModelProto()
    out.CopyFrom(model)
    if variant == "fp32":
        return out
    from onnxruntime.quantization.matmul_nbits_quantizer import DefaultWeightOnlyQuantConfig, MatMulNBitsQuantizer

    from tinyglot.quiet import third_party_output

    bits, level = (int(x) for x in variant.removeprefix("nbits").split("-a"))
    config = DefaultWeightOnlyQuantConfig(block_size=32, is_symmetric=True, accuracy_level=level, bits=bits,
                                          op_types_to_quantize=("MatMul",))
    quantizer = MatMulNBitsQuantizer(out, block_size=32, is_symmetric=True, accuracy_level=level,
                                     algo_config=config)
    with third_party_output("onnxruntime's weight-only quantizer output"):
        quantizer.process()
    return quantizer.model.model


def write_variants(bundle: Path, variants: list[str], out: Path) -> dict[str, Path]:
    """``out/VARIANT``: the bundle with ``variant``'s graph, sealed (config sha256 of the new graph)."""
    import onnx

    from tinyglot.export.bundle import read_bundle, seal_bundle_config

    cfg = read_bundle(bundle)
    graph = bundle / cfg.get("model", "model.onnx")
    model = onnx.load(str(graph))
    if not dequantized_matmuls(model):
        raise SystemExit(f"{bundle}: no MatMulInteger in {graph.name}; give a bundle with int8 (dynamic) layers")
    folders = {}
    for v in variants:
        folder = out / v
        shutil.copytree(bundle, folder)
        onnx.save(variant_graph(model, v), str(folder / graph.name))
        seal_bundle_config(folder, dict(cfg))
        folders[v] = folder
    return folders


def lowest_cosines(reference: Path, folders: dict[str, Path], sentences: list[str]) -> dict[str, float]:
    import tinyglot

    ref = tinyglot.load(reference).encode(sentences)
    return {v: float((tinyglot.load(f).encode(sentences) * ref).sum(1).min()) for v, f in folders.items()}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("bundle", help="an onnx-text or onnx bundle with int8 layers, or a released name")
    p.add_argument("--variants", default=",".join(VARIANTS), help=f"comma-separated, of: {', '.join(VARIANTS)}")
    p.add_argument("--test", action="append", default=[], metavar="NAME[@MIN_WORDS]=SOURCE[+SOURCE..]",
                   help="a sentence set (repeatable); default: the shared libreoffice test and the prose set")
    p.add_argument("--max-sentences", type=int, default=500)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--isa", choices=sorted(ISAS), default=NATIVE)
    p.add_argument("--baseline", default=BASELINE, help="also measured; the ratios are taken against it")
    p.add_argument("--json", type=Path, default=None)
    args = p.parse_args(argv)
    variants = [v for v in args.variants.split(",") if v]
    if unknown := sorted(set(variants) - set(VARIANTS)):
        p.error(f"unknown variants {unknown}; choose from {', '.join(VARIANTS)}")
    from tinyglot.released import released_folder

    bundle = Path(args.bundle) if Path(args.bundle).exists() else released_folder(args.bundle) / "onnx-text"
    sets = [load_set(spec, args.max_sentences) for spec in args.test or default_set_specs()]
    with tempfile.TemporaryDirectory(prefix="tinyglot-kernels-") as tmp:
        folders = write_variants(bundle, variants, Path(tmp))
        cosines = lowest_cosines(bundle, folders, [s for st in sets for s in st.sentences])
        targets = [str(bundle), *map(str, folders.values()), args.baseline]
        rows = run_regimes(targets, sets, 1, args.repeats, rounds=args.rounds, isa=args.isa,
                           say=lambda msg: print(msg, file=sys.stderr, flush=True))
    from tinyglot.devices.profiles import detect_host

    names = {str(bundle): "shipped int8", **{str(f): v for v, f in folders.items()}}
    print(f"{detect_host()['cpu_model']}, {os.cpu_count()} cores, 1 thread, fastest of {args.repeats} passes x "
          f"{args.rounds} round(s); ISA: {ISAS[args.isa]}; bundle {bundle}")
    print(sets_line(sets) + "\n")
    print(regimes_table(rows, sets, args.baseline, names=names) + "\n")
    print("| variant | lowest cosine to the shipped bundle |\n|---|---:|")
    print("\n".join(f"| {v} | {c:.5f} |" for v, c in cosines.items()))
    if args.json:
        args.json.write_text(json.dumps({"settings": vars(args), "host": detect_host(), "cosines": cosines,
                                         "rows": rows, "names": names}, indent=2, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
