"""ONNX graphs in the form onnxruntime's CPU kernels run fastest, and sessions that keep them so.

onnxruntime's fused ``SkipLayerNormalization`` (com.microsoft) CPU kernel is several times slower than
the two standard ops it replaces: on onnxruntime 1.32 (Intel Xeon, one thread) it took 88 us on a
``[1, 43, 256]`` tensor against 25 us for ``Add`` + ``LayerNormalization``, and 654 us against 81 us on
``[8, 43, 256]`` (docs/design.md, "Fused ops that cost time").  On the 2 x 256 students it was a fifth
of the run time.  So every graph tinyglot writes or opens keeps the residual sum and the LayerNorm
apart:

- :func:`unfuse_skip_layer_norm` rewrites each ``SkipLayerNormalization`` node as ``Add`` (its bias, if
  any), ``Sum`` (the residual) and ``LayerNormalization``; the result is the same function up to float
  round-off.  The residual is a ``Sum``, not an ``Add``: onnxruntime's own ``SkipLayerNormFusion``
  (part of its default, extended optimisation level) matches ``Add`` -> ``LayerNormalization`` and would
  fuse the pair again in any stock session that opens the file.
- :func:`inference_session` opens a file with that rewrite applied in memory (bundles exported before
  it keep working, faster) and with ``SkipLayerNormFusion`` switched off for graphs written with ``Add``.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

SKIP_LAYER_NORM = "SkipLayerNormalization"
# onnxruntime graph transformers that make a graph slower on the CPU (see the module docstring)
SLOW_FUSIONS = ("SkipLayerNormFusion",)


def skip_layer_norm_nodes(x: str, skip: str, gamma: str, beta: str, bias: str | None, out: str, epsilon: float,
                          name: str) -> list[Any]:
    """The standard nodes computing ``SkipLayerNormalization(x, skip, gamma, beta, bias) -> out``:
    ``LayerNormalization(Sum(x + bias, skip))`` over the last axis (ONNX opset 17 or later)."""
    from onnx import helper

    nodes = []
    if bias:
        nodes.append(helper.make_node("Add", [x, bias], [f"{name}.biased"], name=f"{name}.bias"))
        x = f"{name}.biased"
    nodes.append(helper.make_node("Sum", [x, skip], [f"{name}.residual"], name=f"{name}.residual"))
    nodes.append(helper.make_node("LayerNormalization", [f"{name}.residual", gamma, beta], [out],
                                  name=f"{name}.layernorm", axis=-1, epsilon=epsilon))
    return nodes


def _opset(model: Any) -> int:
    return max((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), default=0)


def unfuse_skip_layer_norm(model: Any) -> int:
    """Rewrite, in place, each ``SkipLayerNormalization`` node of ``model`` (an ``onnx.ModelProto``) whose
    extra outputs (mean, inverse std, the pre-norm sum) nothing reads as :func:`skip_layer_norm_nodes`;
    returns how many were rewritten.  A graph below opset 17 (no standard LayerNormalization) is left
    as it is."""
    if _opset(model) < 17:
        return 0
    graph = model.graph
    read = {name for node in graph.node for name in node.input} | {o.name for o in graph.output}
    nodes, rewritten = [], 0
    for node in graph.node:
        extra = [o for o in node.output[1:] if o and o in read]
        if node.op_type != SKIP_LAYER_NORM or node.domain != "com.microsoft" or extra or len(node.input) < 4:
            nodes.append(node)
            continue
        eps = next((a.f for a in node.attribute if a.name == "epsilon"), 1e-12)
        x, skip, gamma, beta = node.input[:4]
        bias = node.input[4] if len(node.input) > 4 and node.input[4] else None
        nodes += skip_layer_norm_nodes(x, skip, gamma, beta, bias, node.output[0], eps,
                                       node.name or f"skip_layer_norm_{rewritten}")
        rewritten += 1
    if rewritten:
        del graph.node[:]
        graph.node.extend(nodes)
    return rewritten


def unfuse_file(path: str | os.PathLike[str]) -> int:
    """:func:`unfuse_skip_layer_norm` on an ONNX file, rewritten in place (atomically) when it changes."""
    import onnx

    from tinyglot.io import atomic_write_bytes

    path = Path(path)
    model = onnx.load(str(path))
    count = unfuse_skip_layer_norm(model)
    if count:
        atomic_write_bytes(path, model.SerializeToString())
    return count


def skip_layer_norm_count(path: str | os.PathLike[str]) -> int:
    """How many fused ``SkipLayerNormalization`` nodes the ONNX file at ``path`` holds (0 without parsing it
    when its bytes do not name the op)."""
    import onnx

    if not _mentions(path, SKIP_LAYER_NORM):
        return 0
    model = onnx.load(str(path), load_external_data=False)
    return sum(node.op_type == SKIP_LAYER_NORM for node in model.graph.node)


def inference_session(path: str | os.PathLike[str], options: Any, providers: list[str] | None = None) -> Any:
    """``onnxruntime.InferenceSession`` over the file at ``path`` in the fast form on the CPU: its fused
    ``SkipLayerNormalization`` nodes rewritten in memory (the file is not touched) and onnxruntime's
    :data:`SLOW_FUSIONS` off.  With a GPU provider in ``providers`` (CUDA), the file as it is."""
    import onnx
    import onnxruntime as ort

    providers = providers or ["CPUExecutionProvider"]
    if any(p != "CPUExecutionProvider" for p in providers):  # a GPU's fused kernel is the fast one
        return ort.InferenceSession(str(path), options, providers=providers)
    source: Any = str(path)
    if _mentions(path, SKIP_LAYER_NORM):  # parsed only then: the e5 graph is 74 MB, 0.1 s to parse
        model = onnx.load(str(path), load_external_data=False)
        if not _has_external_data(model) and unfuse_skip_layer_norm(model):
            source = model.SerializeToString()
    return ort.InferenceSession(source, options, providers=providers, disabled_optimizers=list(SLOW_FUSIONS))


def _mentions(path: str | os.PathLike[str], name: str) -> bool:
    """Whether the file's bytes hold ``name`` (an op type is stored as plain text in the protobuf): a scan
    of the mapped file, without parsing it.  False for an empty or unreadable file (onnxruntime then says
    what is wrong with it)."""
    import mmap

    try:
        with open(path, "rb") as f:
            if not os.fstat(f.fileno()).st_size:
                return False
            with mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as data:
                return data.find(name.encode()) != -1
    except OSError:
        return False


def _has_external_data(model: Any) -> bool:
    from onnx.external_data_helper import uses_external_data

    return any(uses_external_data(t) for t in model.graph.initializer)
