"""Derive, once and locally, the two graphs the USE embedder runs from the pinned model file.

The pinned graph quantises activations with ``DynamicQuantizeLinear``, whose scale and zero point come
from the min and max of the *whole* tensor, i.e. of every text in the batch: batch-mates change each
other's vectors. ``per_text_graph`` rewrites each of its 12 ``DynamicQuantizeLinear`` + ``MatMulInteger``
pairs so that the scale and zero point are taken per text, over exactly the elements the same text
alone would have given:

* min and max are taken per text: per row for the text-level tensors ``[texts, width]``, and for the
  token-level ones ``[tokens, width]`` (text 0's rows, then text 1's, …) per row and then per text
  through ``token_rows``; scale and zero point follow onnxruntime's formula
  (``scale = (max(0, max) - min(0, min)) / 255``, 1 when the range is empty;
  ``zp = round_half_even(clip(0 - min / scale, 0, 255))``);
* each row is quantised with its text's scale and zero point by onnxruntime's ``QuantizeLinear``
  (``com.microsoft``, axis 0), the same MLAS kernel ``DynamicQuantizeLinear`` calls;
* ``MatMulInteger`` cannot take one zero point per text, so it runs with none and the zero point is
  taken off afterwards in int32: ``(q - zp) @ W' = q @ W' - zp * colsum(W')`` with ``W' = W - w_zp``.
  Integer arithmetic is exact, so the int32 result equals the original's to the bit;
* ``float(C) * (scale * w_scale)``, as the original ``Cast`` + ``Mul`` (or the fused kernel) does.

Two more changes make the rest of the graph batch-proof. The word-embedding SegmentSum gathered a
text's token rows through tf2onnx's sort + scatter, which rotates them inside a batch (same rows,
another summation order); it now gathers them in token order, position-major, from
``token_rows_by_position``, and its ReduceSum adds them row after row at every batch size
(``_sequential_segment_sum``).

Two more make it smaller (rewrite 6: 1,054 -> 555 nodes, same vectors): the n-gram convolutions
quantise their input once and read their windows with one uint8 Gather each by ``token_windows``
(``_window_gathers``), and the token embeddings come from one table instead of 17 shards
(``_one_embedding_table``).

So a batch of any texts, of any lengths, gives each text bit for bit the vector the pinned graph gives
it alone (tests/core/test_embedding_use_batching.py checks it on English, Chinese and mixed lengths).
The graph takes four extra inputs computed from the token counts (``batch_inputs``); the counts come
from ``tokenizer_graph``, the pinned graph's own SentencePiece node alone (about 20 µs a text).

``onnx`` is imported lazily: only deriving the files needs it, loading them does not.
"""

from __future__ import annotations

import hashlib
import importlib
import json
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from core.embedding.base import EmbedderError
from core.embedding.files import atomic_write_bytes, file_sha256

# Bump when the rewrite changes: derived files carry it in their name and their stamp.
REWRITE_VERSION = 6
# An earlier version's derived files are deleted once they were last derived this long ago (seconds).
STALE_AFTER = 24 * 3600
# The per-text graph's extra inputs, computed from the token counts (``batch_inputs``).
TOKEN_ROWS = "token_rows"  # int64 [texts, longest]: each text's rows in the flat token tensor; padding = tokens
TOKEN_TEXT = "token_text"  # int64 [tokens]: the text each flat token row belongs to
TOKEN_ROWS_BY_POSITION = "token_rows_by_position"  # int64 [longest, texts]: TOKEN_ROWS transposed
# int64 [tokens, 5]: the flat rows of each token's neighbours at offsets -2..2 within its own text; for
# a neighbour outside the text, row tokens + t (token t's own padding row, its text's zero point).
TOKEN_WINDOWS = "token_windows"
WINDOW_REACH = 2  # the widest n-gram convolution (order 5) reads two tokens either side
_DQL = "DynamicQuantizeLinear"
_MS = "com.microsoft"  # onnxruntime's own operators


def derived_paths(source: Path) -> tuple[Path, Path]:
    """Where the per-text graph and the tokenizer graph derived from ``source`` live (beside it)."""
    stem = source.name.removesuffix(".onnx")
    return (
        source.with_name(f"{stem}.per-text-v{REWRITE_VERSION}.onnx"),
        source.with_name(f"{stem}.tokenizer-v{REWRITE_VERSION}.onnx"),
    )


def ensure_derived(source: Path, source_sha256: str) -> tuple[Path, Path]:
    """Return the two derived graphs for the (already verified) ``source``, writing them if absent.

    A stamp beside each records the source hash, the rewrite version and the file's own sha256; a file
    whose stamp does not match is derived again. Nothing is downloaded: the input is the local file.
    """
    per_text, tokenizer = derived_paths(source)
    if _stamped(per_text, source_sha256) and _stamped(tokenizer, source_sha256):
        _remove_other_versions(source)
        return per_text, tokenizer
    onnx = _onnx()
    try:
        model = onnx.load(str(source))
    except Exception as exc:  # onnx raises DecodeError/ValidationError without a common base
        raise EmbedderError(f"could not read the model graph {source}: {exc}") from exc
    tok_model = tokenizer_graph(model)
    per_text_graph(model)
    for path, m in ((per_text, model), (tokenizer, tok_model)):
        data = m.SerializeToString()
        try:
            atomic_write_bytes(path, data)
            atomic_write_bytes(_stamp(path), json.dumps(_stamp_data(source_sha256, path, data)).encode("utf-8"))
        except OSError as exc:
            raise EmbedderError(
                f"could not write the derived embedding graph {path}: {exc.strerror or exc}. "
                "The models folder must be writable once (set $MEMORY_STUDIO_MODELS to another folder)."
            ) from exc
    _remove_other_versions(source)
    return per_text, tokenizer


def _remove_other_versions(source: Path, now: float | None = None) -> None:
    """Delete graphs an earlier rewrite version derived from ``source`` (72 MB each), once unused.

    Only lower versions, and only when derived more than ``STALE_AFTER`` seconds ago (by their stamp's
    mtime; a file without a stamp is stale): code of another version may still run on this machine
    (an older checkout, a second install) and share the folder. Deleting its file at once would make
    it derive its graph again on its next start, and delete ours in turn if it is older code: each
    version would rewrite 72 MB on every start of the other. A newer version's file is never ours to delete.
    """
    stem = source.name.removesuffix(".onnx")
    now = time.time() if now is None else now
    for kind in ("per-text", "tokenizer"):
        for old in source.parent.glob(f"{stem}.{kind}-v*.onnx"):
            version = old.name.removeprefix(f"{stem}.{kind}-v").removesuffix(".onnx")
            if not version.isdigit() or int(version) >= REWRITE_VERSION:
                continue
            try:
                derived_at = _stamp(old).stat().st_mtime
            except OSError:
                derived_at = 0.0
            if now - derived_at < STALE_AFTER:
                continue
            for path in (old, _stamp(old)):
                try:
                    path.unlink(missing_ok=True)
                except OSError:
                    pass  # a read-only folder keeps them; nothing reads them


def _stamp(path: Path) -> Path:
    return path.with_name(path.name + ".derived")


def _stamp_data(source_sha256: str, path: Path, data: bytes) -> dict[str, Any]:
    st = path.stat()
    return {
        "source_sha256": source_sha256,
        "rewrite_version": REWRITE_VERSION,
        "sha256": hashlib.sha256(data).hexdigest(),
        "size": st.st_size,
        "mtime_ns": st.st_mtime_ns,
    }


def _stamped(path: Path, source_sha256: str) -> bool:
    """True if ``path`` is the file its stamp describes, derived from ``source_sha256`` by this rewrite.

    A file whose size and mtime still match the stamp is trusted (hashing 80 MB on every start would
    cost ~0.2 s); one whose mtime moved is hashed again.
    """
    try:
        stamp = json.loads(_stamp(path).read_text(encoding="utf-8"))
        st = path.stat()
    except (OSError, ValueError):
        return False
    if not (
        isinstance(stamp, dict)
        and stamp.get("source_sha256") == source_sha256
        and stamp.get("rewrite_version") == REWRITE_VERSION
        and stamp.get("size") == st.st_size
    ):
        return False
    if stamp.get("mtime_ns") == st.st_mtime_ns:
        return True
    return bool(file_sha256(path) == stamp.get("sha256"))


def _onnx() -> Any:
    try:
        return importlib.import_module("onnx")
    except ImportError as exc:
        raise EmbedderError(
            "Preparing the local embedding model needs the `onnx` package, which is missing. "
            "Reinstall Memory Studio's dependencies (`make install` or `pip install memory-studio`)."
        ) from exc


def tokenizer_graph(model: Any) -> Any:
    """A graph of the pinned model's SentencePiece node alone: strings in, token ids and row splits out."""
    onnx = _onnx()
    helper = onnx.helper
    graph = model.graph
    (tok,) = [n for n in graph.node if n.op_type == "SentencepieceTokenizer"]
    needed = set(tok.input)
    inits = [i for i in graph.initializer if i.name in needed]
    outputs = [helper.make_value_info(o, onnx.TypeProto()) for o in tok.output]
    g = helper.make_graph([tok], "use_tokenizer", list(graph.input), outputs, inits)
    return helper.make_model(g, opset_imports=list(model.opset_import), ir_version=model.ir_version)


def _maps(graph: Any) -> tuple[dict[str, Any], dict[Any, Any], dict[str, list[Any]]]:
    """The graph as it is now: initializers by name, each value's producing node, each value's consumers."""
    inits = {i.name: i for i in graph.initializer}
    producer = {o: n for n in graph.node for o in n.output}
    consumers: dict[str, list[Any]] = {}
    for n in graph.node:
        for i in n.input:
            consumers.setdefault(i, []).append(n)
    return inits, producer, consumers


def per_text_graph(model: Any) -> Any:
    """Rewrite ``model`` in place so each text's activations are quantised with its own scale (see above)."""
    onnx = _onnx()
    helper, numpy_helper = onnx.helper, onnx.numpy_helper
    graph = model.graph
    inits, producer, consumers = _maps(graph)

    def const(name: str) -> Any:
        return numpy_helper.to_array(inits[name])

    new_inits: list[Any] = []

    def add_const(name: str, value: Any) -> str:
        new_inits.append(numpy_helper.from_array(np.asarray(value), name))
        return name

    f0 = add_const("pt/zero_f", np.float32(0.0))
    f1 = add_const("pt/one_f", np.float32(1.0))
    f255 = add_const("pt/255_f", np.float32(255.0))
    zero_1 = add_const("pt/zero_1", np.zeros(1, dtype=np.float32))
    if not any(o.domain == _MS for o in model.opset_import):
        model.opset_import.append(helper.make_opsetid(_MS, 1))
    graph.input.extend(
        [
            helper.make_tensor_value_info(TOKEN_ROWS, onnx.TensorProto.INT64, ["texts", "longest"]),
            helper.make_tensor_value_info(TOKEN_TEXT, onnx.TensorProto.INT64, ["tokens"]),
            helper.make_tensor_value_info(TOKEN_ROWS_BY_POSITION, onnx.TensorProto.INT64, ["longest", "texts"]),
            helper.make_tensor_value_info(TOKEN_WINDOWS, onnx.TensorProto.INT64, ["tokens", 2 * WINDOW_REACH + 1]),
        ]
    )
    # Replacement nodes, inserted just before the first node that reads what they replace, so the order stays topological.
    insert_before: dict[int, list[Any]] = {}
    removed: set[int] = set()
    rewritten = token_level = 0
    for dql in [n for n in graph.node if n.op_type == _DQL]:
        x = dql.input[0]
        q_out, s_out, zp_out = dql.output
        p = f"pt/{rewritten}/"
        users = consumers.get(q_out, [])
        if not users or any(u.op_type != "MatMulInteger" or u.input[1] not in inits for u in users):
            raise EmbedderError(f"unexpected USE graph: {dql.name} feeds {[u.op_type for u in users]}")
        width = int(const(users[0].input[1]).shape[0])
        if "/DNN/" in x:
            # One row per text: each row's own min and max.
            quant = [
                helper.make_node("ReduceMax", [x], [p + "max"], axes=[1], keepdims=0),
                helper.make_node("ReduceMin", [x], [p + "min"], axes=[1], keepdims=0),
            ]
        else:
            # One row per token, texts one after another: each row's min and max, gathered per text into
            # [texts, longest] (padding reads an appended 0, which cannot move min(0, ·) or max(0, ·)),
            # reduced per text, and handed back to every token row of the text.
            token_level += 1
            quant = []
            for m in ("Max", "Min"):
                low = m.lower()
                quant += [
                    helper.make_node(f"Reduce{m}", [x], [p + f"row_{low}"], axes=[1], keepdims=0),
                    helper.make_node("Concat", [p + f"row_{low}", zero_1], [p + f"row_{low}_padded"], axis=0),
                    helper.make_node("Gather", [p + f"row_{low}_padded", TOKEN_ROWS], [p + f"text_rows_{low}"]),
                    helper.make_node(f"Reduce{m}", [p + f"text_rows_{low}"], [p + f"text_{low}"], axes=[1], keepdims=0),
                    helper.make_node("Gather", [p + f"text_{low}", TOKEN_TEXT], [p + low]),
                ]
        quant += [
            helper.make_node("Max", [p + "max", f0], [p + "max0"]),
            helper.make_node("Min", [p + "min", f0], [p + "min0"]),
            helper.make_node("Sub", [p + "max0", p + "min0"], [p + "range"]),
            helper.make_node("Div", [p + "range", f255], [p + "scale_raw"]),
            helper.make_node("Equal", [p + "max0", p + "min0"], [p + "flat"]),
            helper.make_node("Where", [p + "flat", f1, p + "scale_raw"], [p + "scale"]),
            helper.make_node("Div", [p + "min0", p + "scale"], [p + "min_over_scale"]),
            helper.make_node("Sub", [f0, p + "min_over_scale"], [p + "zp_raw"]),
            helper.make_node("Clip", [p + "zp_raw", f0, f255], [p + "zp_clipped"]),
            helper.make_node("Round", [p + "zp_clipped"], [p + "zp"]),
            helper.make_node("Cast", [p + "zp"], [p + "zp_u8"], to=onnx.TensorProto.UINT8),
            # onnxruntime's QuantizeLinear with one scale per row (axis 0): the MLAS kernel
            # DynamicQuantizeLinear uses, row by row (default-domain QuantizeLinear-10 is per tensor only).
            helper.make_node("QuantizeLinear", [x, p + "scale", p + "zp_u8"], [p + "q"], axis=0, domain=_MS),
            helper.make_node("Cast", [p + "zp"], [p + "zp_i"], to=onnx.TensorProto.INT32),
            helper.make_node("Unsqueeze", [p + "zp_i"], [p + "zp_col"], axes=[1]),
            helper.make_node("Unsqueeze", [p + "scale"], [p + "scale_col"], axes=[1]),
        ]
        first_index = min(_index(graph, u) for u in users)
        nodes = list(quant)
        for k, mmi in enumerate(users):
            a, w, a_zp, w_zp = mmi.input
            if a != q_out or a_zp != zp_out or w not in inits:
                raise EmbedderError(f"unexpected USE graph at {mmi.name}")
            (cast,) = consumers[mmi.output[0]]
            (mul,) = consumers[cast.output[0]]
            scales = producer[next(i for i in mul.input if i != cast.output[0])]
            if cast.op_type != "Cast" or mul.op_type != "Mul" or scales.op_type != "Mul" or s_out not in scales.input:
                raise EmbedderError(f"unexpected USE graph after {mmi.name}")
            w_scale = next(i for i in scales.input if i != s_out)
            weights = const(w).astype(np.int32) - const(w_zp).astype(np.int32)
            colsum = add_const(f"{p}{k}/colsum", weights.sum(axis=0).astype(np.int32))
            o = f"{p}{k}/"
            nodes += [
                helper.make_node("MatMulInteger", [p + "q", w, "", w_zp], [o + "c"]),
                helper.make_node("Mul", [p + "zp_col", colsum], [o + "zp_term"]),
                helper.make_node("Sub", [o + "c", o + "zp_term"], [o + "c_exact"]),
                helper.make_node("Cast", [o + "c_exact"], [o + "c_f"], to=onnx.TensorProto.FLOAT),
                helper.make_node("Mul", [p + "scale_col", w_scale], [o + "multiplier"]),
                helper.make_node("Mul", [o + "c_f", o + "multiplier"], [mul.output[0]]),
            ]
            removed.update(id(n) for n in (mmi, cast, mul))
        insert_before.setdefault(first_index, []).extend(nodes)
        removed.add(id(dql))
        rewritten += 1
    if (rewritten, token_level) != (12, 8):
        raise EmbedderError(
            f"unexpected USE graph: {rewritten} DynamicQuantizeLinear nodes ({token_level} per token), expected 12 (8)"
        )
    kept: list[Any] = []
    for i, n in enumerate(graph.node):
        kept.extend(insert_before.get(i, []))
        if id(n) not in removed:
            kept.append(n)
    del graph.node[:]
    graph.node.extend(kept)
    graph.initializer.extend(new_inits)
    _sequential_segment_sum(graph)
    _window_gathers(graph, helper, numpy_helper)
    _one_embedding_table(graph, helper, numpy_helper)
    _prune(graph)
    return model


def _sequential_segment_sum(graph: Any) -> None:
    """Make the word-embedding SegmentSum add a text's token rows in the same order at any batch size.

    The rows it sums are gathered in token order (``TOKEN_ROWS``). The sum is ``ReduceSum(axes=[1])`` over ``[texts, tokens, 512]``. With one text onnxruntime reduces
    ``[tokens, 512]`` over its first axis, adding row after row; with several it switches to a GEMM
    against a vector of ones, whose different summation order moves the last bit. Gathering straight
    into ``[tokens, texts, 512]`` (by ``TOKEN_ROWS_BY_POSITION``, ``TOKEN_ROWS`` transposed) and reducing
    axis 0 is the row-after-row path at every batch size. (Rewrite 4 gathered ``[texts, tokens, 512]``
    and added a Transpose; once the rest of the graph had static ranks, onnxruntime's transpose
    optimiser folded that Transpose back into ``ReduceSum(axes=[1])``: an input leaves it nothing to fold.)
    """
    found = 0
    for n in graph.node:
        if n.op_type == "ReduceSum" and n.name.endswith("combine_word_embeddings/SegmentSum_ReduceSum__1337"):
            axes = [a for a in n.attribute if a.name == "axes"]
            keepdims = [a for a in n.attribute if a.name == "keepdims"]
            if [list(a.ints) for a in axes] != [[1]] or [a.i for a in keepdims] != [0]:
                raise EmbedderError(f"unexpected USE graph at {n.name}")
            src = n.input[0]
            (gather,) = [g for g in graph.node if src in g.output]
            if gather.op_type != "Gather":
                raise EmbedderError(f"unexpected USE graph before {n.name}")
            # tf2onnx builds this gather's [texts, longest] row index with a sort and a scatter that, in a
            # batch, rotate a text's rows (same rows, another order, so another rounding of the sum);
            # alone they come in token order. TOKEN_ROWS_BY_POSITION is that token order for every text
            # (position-major), padded with the appended zero row.
            gather.input[1] = TOKEN_ROWS_BY_POSITION
            axes[0].ints[:] = [0]
            found += 1
            break
    if found != 1:
        raise EmbedderError("unexpected USE graph: no word-embedding SegmentSum")


def _window_gathers(graph: Any, helper: Any, numpy_helper: Any) -> None:
    """Build each n-gram convolution's quantised input with one Gather instead of tf2onnx's windows.

    Each of the six convolutions (orders 2, 3 and 5, two layers) concatenates ``order`` windows of its
    input ``x`` ([tokens, width]): ``x`` padded with zero rows, sliced at every offset, each shifted
    slice multiplied by a mask (is the neighbour in the same text?) built from the sparse indices:
    some twenty nodes and three [tokens, width] passes per window; then the per-text quantisation
    reads all [tokens, order x width] of it three times (row max, row min, QuantizeLinear). Here
    ``x`` itself is quantised with its text's scale and zero point, and the windows are one uint8
    Gather of ``[q(x); zero points]`` by ``TOKEN_WINDOWS`` (each token's neighbours' rows; outside its
    text, its own padding row), reshaped to [tokens, order x width]. Same bytes into ``MatMulInteger``:
    a masked-out neighbour was ``x * 0 + 0 * 1 = +0``, which quantises to the zero point; a kept one was
    ``x * 1 + 0 * 0``, ``x`` (or +0 for -0: the same byte); and a text's scale and zero point are
    unchanged, its windows holding its own rows of ``x`` (each token's centre window) and zeros,
    which cannot move max(0, ·) or min(0, ·).
    """
    inits, producer, _ = _maps(graph)
    replaced = 0
    for n in list(graph.node):
        name = n.name.rsplit("CNN_layers/", 1)[-1]
        if n.op_type != "Concat" or not name.startswith("ngram_order_") or not name.endswith("/concat_2"):
            continue
        order = int(name.split("/")[0].removeprefix("ngram_order_"))
        if [a.i for a in n.attribute if a.name == "axis"] != [1] or len(n.input) != order:
            raise EmbedderError(f"unexpected USE graph at {n.name}")
        padded = None
        offsets_masked: list[bool] = []
        for w, win in enumerate(n.input):
            p = producer[win]
            masked = p.op_type == "Add"
            if masked:  # Select: Cast(mask) * slice + zeros * Cast(not mask)
                muls = [producer[i] for i in p.input]
                slices = [producer[i] for m in muls if m.op_type == "Mul" for i in m.input if i in producer and producer[i].op_type == "Slice"]
                if len(slices) != 1:
                    raise EmbedderError(f"unexpected USE graph before {n.name}")
                p = slices[0]
            if p.op_type != "Slice" or p.input[1] not in inits or int(numpy_helper.to_array(inits[p.input[1]]).reshape(-1)[0]) != w:
                raise EmbedderError(f"unexpected USE graph before {n.name}")
            if padded not in (None, p.input[0]):
                raise EmbedderError(f"unexpected USE graph before {n.name}: windows of two tensors")
            padded = p.input[0]
            offsets_masked.append(masked)
        pad = producer[padded]
        xs = [i for i in pad.input if i not in inits]
        if pad.op_type != "Concat" or len(xs) != 1:
            raise EmbedderError(f"unexpected USE graph at {pad.name}")
        x = xs[0]
        before = pad.input[: list(pad.input).index(x)]
        left = sum(int(inits[z].dims[0]) for z in before)
        width = int(inits[pad.input[0] if before else pad.input[-1]].dims[1])
        offsets = [w - left for w in range(order)]
        if any(abs(d) > WINDOW_REACH or masked != (d != 0) for d, masked in zip(offsets, offsets_masked)):
            raise EmbedderError(f"unexpected USE graph at {n.name}: windows {offsets}")
        # The per-text quantisation (``per_text_graph``) reads the window tensor three times: row max,
        # row min, QuantizeLinear. All three move to ``x`` itself: a text's windows hold its own rows
        # of ``x`` (every token's centre window) and zeros, and the zeros cannot move max(0, ·) or
        # min(0, ·), so its scale and zero point are unchanged; quantising is elementwise with the
        # text's scale, so gathering the quantised rows equals quantising the gathered ones, and a
        # neighbour outside the text, 0 before, quantises to the text's zero point: the gathered
        # padding row for token t is row tokens + t of ``[q(x); zp(t) broadcast]``.
        users = [u for u in graph.node if n.output[0] in u.input]
        if sorted(u.op_type for u in users) != ["QuantizeLinear", "ReduceMax", "ReduceMin"]:
            raise EmbedderError(f"unexpected USE graph after {n.name}: {[u.op_type for u in users]}")
        (quantize,) = [u for u in users if u.op_type == "QuantizeLinear"]
        for u in users:
            u.input[0] = x
        q = quantize.output[0]
        p_ = f"pt/window/{replaced}/"
        first = offsets[0] + WINDOW_REACH
        graph.initializer.extend(
            [
                numpy_helper.from_array(np.array([first], dtype=np.int64), p_ + "start"),
                numpy_helper.from_array(np.array([first + order], dtype=np.int64), p_ + "end"),
                numpy_helper.from_array(np.array([1], dtype=np.int64), p_ + "axis"),
                numpy_helper.from_array(np.array([-1, order * width], dtype=np.int64), p_ + "shape"),
            ]
        )
        quantize.output[0] = p_ + "q_x"
        nodes = [
            helper.make_node("Unsqueeze", [quantize.input[2]], [p_ + "zp_col"], axes=[1]),
            helper.make_node("Shape", [x], [p_ + "x_shape"]),
            helper.make_node("Expand", [p_ + "zp_col", p_ + "x_shape"], [p_ + "zp_rows"]),
            helper.make_node("Concat", [p_ + "q_x", p_ + "zp_rows"], [p_ + "q_and_zp"], axis=0),
            helper.make_node("Slice", [TOKEN_WINDOWS, p_ + "start", p_ + "end", p_ + "axis"], [p_ + "rows"]),
            helper.make_node("Gather", [p_ + "q_and_zp", p_ + "rows"], [p_ + "windows"], axis=0),
            helper.make_node("Reshape", [p_ + "windows", p_ + "shape"], [q]),
        ]
        graph.node.remove(n)
        i = _index(graph, quantize) + 1
        for k, node in enumerate(nodes):
            graph.node.insert(i + k, node)
        replaced += 1
    if replaced != 6:
        raise EmbedderError(f"unexpected USE graph: {replaced} n-gram window concatenations, expected 6")


def _one_embedding_table(graph: Any, helper: Any, numpy_helper: Any) -> None:
    """Look the token embeddings up in one table instead of tf2onnx's partitioned lookup.

    The pinned graph keeps the vocabulary in ``P`` (17) uint8 shards, id ``i`` at row ``i // P`` of
    shard ``i % P``, each with its own scale and zero point: it de-duplicates the ids, splits them by
    shard (Equal, Split, Compress, ...), gathers and dequantises each shard, scatters the rows back
    and gathers them per token: about 130 nodes. Here the shards are interleaved into one
    [P x rows, 512] uint8 table with a per-row scale and zero point, and each token's row is
    ``(float(q) - zp) * scale``, which is what ``DequantizeLinear`` computes (an exact difference, one
    rounding in the product): the same float32 rows.
    """
    inits, producer, consumers = _maps(graph)
    (out,) = [n for n in graph.node if n.op_type == "Reshape" and n.name.endswith("EmbeddingLookupUnique/Reshape_1")]
    gather_v2 = producer[out.input[0]]
    inverse_cast = producer[gather_v2.input[1]]
    unique = producer[inverse_cast.input[0]] if inverse_cast.op_type == "Cast" else None
    if gather_v2.op_type != "Gather" or unique is None or unique.op_type != "Unique":
        raise EmbedderError(f"unexpected USE graph before {out.name}")
    ids = unique.input[0]
    (split,) = [n for n in graph.node if n.op_type == "Split" and n.name.startswith("Split__") and len(n.output) > 2]
    (mod_y,) = [i for i in inits if i.endswith("EmbeddingLookupUnique/embedding_lookup/mod/y:0")]
    parts = int(numpy_helper.to_array(inits[mod_y]).reshape(-1)[0])
    if len(split.output) != parts:
        raise EmbedderError(f"unexpected USE graph at {split.name}: {len(split.output)} shards, mod {parts}")
    shards: dict[int, tuple[Any, float, int]] = {}
    for g in graph.node:
        if g.op_type != "Gather" or g.input[0] not in inits or "EmbeddingLookupUnique/embedding_lookup/Gather" not in g.name:
            continue
        compress = producer[g.input[1]]
        squeeze = producer[compress.input[1]] if compress.op_type == "Compress" else None
        cast = producer[squeeze.input[0]] if squeeze is not None and squeeze.op_type == "Squeeze" else None
        if cast is None or cast.op_type != "Cast" or cast.input[0] not in split.output:
            raise EmbedderError(f"unexpected USE graph before {g.name}")
        (deq,) = consumers[g.output[0]]
        if deq.op_type != "DequantizeLinear":
            raise EmbedderError(f"unexpected USE graph after {g.name}")
        scale = float(numpy_helper.to_array(inits[deq.input[1]]))
        zp = int(numpy_helper.to_array(inits[deq.input[2]]))
        shards[list(split.output).index(cast.input[0])] = (numpy_helper.to_array(inits[g.input[0]]), scale, zp)
    if sorted(shards) != list(range(parts)) or len({s[0].shape for s in shards.values()}) != 1:
        raise EmbedderError(f"unexpected USE graph: embedding shards {sorted(shards)} of {parts}")
    rows, dim = shards[0][0].shape
    table = np.empty((rows * parts, dim), dtype=np.uint8)
    for j, (values, _scale, _zp) in shards.items():
        table[j::parts] = values
    scales = np.tile(np.array([shards[j][1] for j in range(parts)], dtype=np.float32), rows)
    zps = np.tile(np.array([shards[j][2] for j in range(parts)], dtype=np.float32), rows)
    p_ = "pt/embedding/"
    graph.initializer.extend(
        [
            numpy_helper.from_array(table, p_ + "table"),
            numpy_helper.from_array(scales, p_ + "scale"),
            numpy_helper.from_array(zps, p_ + "zero_point"),
        ]
    )
    nodes = [
        helper.make_node("Gather", [p_ + "table", ids], [p_ + "q"], axis=0),
        helper.make_node("Cast", [p_ + "q"], [p_ + "q_f"], to=1),  # FLOAT
        helper.make_node("Gather", [p_ + "zero_point", ids], [p_ + "zp"], axis=0),
        helper.make_node("Unsqueeze", [p_ + "zp"], [p_ + "zp_col"], axes=[1]),
        helper.make_node("Gather", [p_ + "scale", ids], [p_ + "scale_rows"], axis=0),
        helper.make_node("Unsqueeze", [p_ + "scale_rows"], [p_ + "scale_col"], axes=[1]),
        helper.make_node("Sub", [p_ + "q_f", p_ + "zp_col"], [p_ + "centred"]),
        helper.make_node("Mul", [p_ + "centred", p_ + "scale_col"], [out.output[0]]),
    ]
    i = _index(graph, out)
    graph.node.remove(out)
    for k, node in enumerate(nodes):
        graph.node.insert(i + k, node)


def _index(graph: Any, node: Any) -> int:
    for i, n in enumerate(graph.node):
        if n is node:
            return i
    raise ValueError(node.name)


def _prune(graph: Any) -> None:
    """Drop nodes whose outputs nothing reads, then initialisers nothing reads."""
    wanted = {o.name for o in graph.output}
    while True:
        used = wanted | {i for n in graph.node for i in n.input}
        live = [n for n in graph.node if any(o in used for o in n.output)]
        if len(live) == len(graph.node):
            break
        del graph.node[:]
        graph.node.extend(live)
    used = {i for n in graph.node for i in n.input}
    live_inits = [i for i in graph.initializer if i.name in used]
    del graph.initializer[:]
    graph.initializer.extend(live_inits)


def batch_inputs(counts: Sequence[int]) -> dict[str, Any]:
    """The per-text graph's extra inputs for a batch whose texts have ``counts`` tokens, in order."""
    n = np.asarray(counts, dtype=np.int64)
    if n.ndim != 1 or n.size == 0 or (n < 1).any():
        raise ValueError(f"token counts must be a non-empty list of positive counts, not {list(counts)!r}")
    total, longest = int(n.sum()), int(n.max())
    starts = np.cumsum(n) - n
    position = np.arange(longest, dtype=np.int64)[None, :]
    rows = np.where(position < n[:, None], starts[:, None] + position, total)
    text = np.repeat(np.arange(n.size, dtype=np.int64), n)
    flat = np.arange(total, dtype=np.int64)
    offsets = np.arange(-WINDOW_REACH, WINDOW_REACH + 1, dtype=np.int64)[None, :]
    neighbour = (flat - starts[text])[:, None] + offsets  # position of each neighbour in its text
    inside = (neighbour >= 0) & (neighbour < n[text][:, None])
    windows = np.where(inside, flat[:, None] + offsets, total + flat[:, None])
    return {
        TOKEN_ROWS: rows,
        TOKEN_ROWS_BY_POSITION: np.ascontiguousarray(rows.T),
        TOKEN_TEXT: text,
        TOKEN_WINDOWS: windows,
    }
