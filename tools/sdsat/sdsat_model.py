"""A Llama-family decoder in plain PyTorch, Hugging Face checkpoints without
the safetensors package, and SDSAT training sequences (docs/sdsat.md).

Only what Debian ships is used (python3-torch, numpy): the safetensors format
(an 8-byte little-endian header length, a JSON header naming each tensor's
dtype, shape and byte range, then the raw bytes) is read and written here.
The model follows Hugging Face's LlamaForCausalLM exactly as this project's
C++ backend does (runtime/torch/src/model.cc): RMSNorm, rotary embeddings
(rotate_half), grouped-query attention, SwiGLU, the same tensor names;
tests/sdsat/test_sdsat.py checks its greedy output against sam-generate's.
"""
import json
import math
import os
import struct

import torch
import torch.nn.functional as F

# ---------------------------------------------------------------------------
# safetensors

_DTYPES = {"F32": torch.float32, "F16": torch.float16, "BF16": torch.bfloat16}
_NAMES = {v: k for k, v in _DTYPES.items()}


class CheckpointError(Exception):
    """A checkpoint that cannot be read: names the file and the problem."""


def read_safetensors(path):
    """{name: tensor} of a .safetensors file (F32, F16, BF16)."""
    with open(path, "rb") as f:
        data = f.read()
    if len(data) < 8:
        raise CheckpointError("%s: truncated (no header length)" % path)
    (n,) = struct.unpack("<Q", data[:8])
    if 8 + n > len(data):
        raise CheckpointError("%s: header length %d exceeds the file (%d bytes)" % (path, n, len(data)))
    try:
        header = json.loads(data[8:8 + n])
    except ValueError as e:
        raise CheckpointError("%s: the header is not JSON (%s)" % (path, e))
    body = memoryview(data)[8 + n:]
    tensors = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        dtype = _DTYPES.get(info.get("dtype"))
        if dtype is None:
            raise CheckpointError("%s: tensor %s has dtype %r (supported: F32, F16, BF16)" %
                                  (path, name, info.get("dtype")))
        begin, end = info["data_offsets"]
        shape = info["shape"]
        count = math.prod(shape) if shape else 1
        if not 0 <= begin <= end <= len(body) or end - begin != count * _itemsize(dtype):
            raise CheckpointError("%s: tensor %s: bytes %d..%d do not hold shape %s of %s" %
                                  (path, name, begin, end, shape, info["dtype"]))
        raw = bytearray(body[begin:end])
        tensors[name] = torch.frombuffer(raw, dtype=dtype).reshape(shape).clone() if count else \
            torch.empty(shape, dtype=dtype)
    return tensors


def write_safetensors(path, tensors, metadata=None):
    """Writes {name: tensor} atomically (PATH.tmp-PID, then rename)."""
    header, chunks, offset = {}, [], 0
    for name in sorted(tensors):
        t = tensors[name].detach().cpu().contiguous()
        if t.dtype not in _NAMES:
            t = t.float()
        raw = (t.view(torch.int16) if t.dtype == torch.bfloat16 else t).numpy().tobytes()
        header[name] = {"dtype": _NAMES[t.dtype], "shape": list(t.shape),
                        "data_offsets": [offset, offset + len(raw)]}
        chunks.append(raw)
        offset += len(raw)
    if metadata:
        header["__metadata__"] = {k: str(v) for k, v in metadata.items()}
    blob = json.dumps(header, separators=(",", ":")).encode()
    blob += b" " * (-len(blob) % 8)
    tmp = "%s.tmp-%d" % (path, os.getpid())
    try:
        with open(tmp, "wb") as f:
            f.write(struct.pack("<Q", len(blob)))
            f.write(blob)
            for c in chunks:
                f.write(c)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.remove(tmp)
        raise


def _itemsize(dtype):
    return torch.tensor([], dtype=dtype).element_size()


# ---------------------------------------------------------------------------
# The model


class LlamaConfig:
    FIELDS = ("vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers",
              "num_attention_heads", "num_key_value_heads", "rms_norm_eps", "rope_theta",
              "max_position_embeddings", "tie_word_embeddings")

    def __init__(self, **kw):
        self.vocab_size = kw["vocab_size"]
        self.hidden_size = kw["hidden_size"]
        self.intermediate_size = kw["intermediate_size"]
        self.num_hidden_layers = kw["num_hidden_layers"]
        self.num_attention_heads = kw["num_attention_heads"]
        self.num_key_value_heads = kw.get("num_key_value_heads") or self.num_attention_heads
        self.head_dim = kw.get("head_dim") or self.hidden_size // self.num_attention_heads
        self.rms_norm_eps = kw.get("rms_norm_eps", 1e-6)
        self.rope_theta = kw.get("rope_theta", 10000.0)
        self.max_position_embeddings = kw.get("max_position_embeddings", 2048)
        self.tie_word_embeddings = kw.get("tie_word_embeddings", False)
        self.extra = {k: v for k, v in kw.items() if k not in self.FIELDS and k != "head_dim"}

    @classmethod
    def load(cls, directory):
        path = os.path.join(directory, "config.json")
        try:
            with open(path) as f:
                return cls(**json.load(f))
        except (OSError, ValueError, KeyError) as e:
            raise CheckpointError("%s: %s" % (path, e))

    def to_json(self):
        out = dict(self.extra)
        out.update({k: getattr(self, k) for k in self.FIELDS})
        out.update(architectures=["LlamaForCausalLM"], model_type="llama", hidden_act="silu",
                   head_dim=self.head_dim, torch_dtype="float32")
        return out


class Llama(torch.nn.Module):
    """LlamaForCausalLM with Hugging Face's parameter names."""

    def __init__(self, config):
        super().__init__()
        self.config = c = config
        h, kv = c.hidden_size, c.num_key_value_heads * c.head_dim
        self.params = torch.nn.ParameterDict()
        p = self.params

        def add(name, *shape, ones=False):
            t = torch.ones(*shape) if ones else torch.empty(*shape)
            p[name.replace(".", "__")] = torch.nn.Parameter(t)

        add("model.embed_tokens.weight", c.vocab_size, h)
        for i in range(c.num_hidden_layers):
            q = "model.layers.%d." % i
            add(q + "input_layernorm.weight", h, ones=True)
            add(q + "post_attention_layernorm.weight", h, ones=True)
            add(q + "self_attn.q_proj.weight", c.num_attention_heads * c.head_dim, h)
            add(q + "self_attn.k_proj.weight", kv, h)
            add(q + "self_attn.v_proj.weight", kv, h)
            add(q + "self_attn.o_proj.weight", h, c.num_attention_heads * c.head_dim)
            add(q + "mlp.gate_proj.weight", c.intermediate_size, h)
            add(q + "mlp.up_proj.weight", c.intermediate_size, h)
            add(q + "mlp.down_proj.weight", h, c.intermediate_size)
        add("model.norm.weight", h, ones=True)
        if not c.tie_word_embeddings:
            add("lm_head.weight", c.vocab_size, h)

    def w(self, name):
        return self.params[name.replace(".", "__")]

    def init_random(self, seed=0, std=0.02):
        g = torch.Generator().manual_seed(seed)
        with torch.no_grad():
            for name, t in self.params.items():
                if not name.endswith("layernorm__weight") and name != "model__norm__weight":
                    t.copy_(torch.randn(t.shape, generator=g) * std)
        return self

    def state_dict_hf(self):
        return {k.replace("__", "."): v.detach() for k, v in self.params.items()}

    def load_hf(self, tensors, source="checkpoint"):
        names = set(self.state_dict_hf())
        missing = names - set(tensors)
        if missing:
            raise CheckpointError("%s: missing tensors %s" % (source, sorted(missing)[:4]))
        with torch.no_grad():
            for name in names:
                t = self.w(name)
                if tuple(tensors[name].shape) != tuple(t.shape):
                    raise CheckpointError("%s: %s has shape %s, the config says %s" %
                                          (source, name, tuple(tensors[name].shape), tuple(t.shape)))
                t.copy_(tensors[name].float())
        return self

    def save(self, directory, metadata=None):
        os.makedirs(directory, exist_ok=True)
        write_safetensors(os.path.join(directory, "model.safetensors"), self.state_dict_hf(), metadata)
        tmp = os.path.join(directory, "config.json.tmp-%d" % os.getpid())
        with open(tmp, "w") as f:
            json.dump(self.config.to_json(), f, indent=1)
        os.replace(tmp, os.path.join(directory, "config.json"))

    @classmethod
    def load(cls, directory):
        config = LlamaConfig.load(directory)
        path = os.path.join(directory, "model.safetensors")
        return cls(config).load_hf(read_safetensors(path), path)

    def _rms(self, x, weight):
        x32 = x.float()
        return weight * (x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + self.config.rms_norm_eps))

    def forward(self, ids, positions=None, allowed=None):
        """Logits (B, T, V) for ids (B, T). positions (B, T): rotary positions
        (default 0..T-1). allowed (B, T, T) bool: query i may attend to key j
        (default causal)."""
        c = self.config
        b, t = ids.shape
        if positions is None:
            positions = torch.arange(t).expand(b, t)
        if allowed is None:
            allowed = torch.ones(t, t, dtype=torch.bool).tril().expand(b, t, t)
        inv = 1.0 / (c.rope_theta ** (torch.arange(0, c.head_dim, 2, dtype=torch.float32) / c.head_dim))
        freqs = positions.float()[..., None] * inv
        emb = torch.cat((freqs, freqs), dim=-1)
        cos, sin = emb.cos()[:, None], emb.sin()[:, None]  # (B, 1, T, D)
        bias = torch.zeros(allowed.shape, dtype=torch.float32).masked_fill(~allowed, float("-inf"))
        bias = bias[:, None]
        groups = c.num_attention_heads // c.num_key_value_heads
        x = F.embedding(ids, self.w("model.embed_tokens.weight"))
        for i in range(c.num_hidden_layers):
            q_ = "model.layers.%d." % i
            hnorm = self._rms(x, self.w(q_ + "input_layernorm.weight"))
            q = (hnorm @ self.w(q_ + "self_attn.q_proj.weight").T).view(b, t, -1, c.head_dim).transpose(1, 2)
            k = (hnorm @ self.w(q_ + "self_attn.k_proj.weight").T).view(b, t, -1, c.head_dim).transpose(1, 2)
            v = (hnorm @ self.w(q_ + "self_attn.v_proj.weight").T).view(b, t, -1, c.head_dim).transpose(1, 2)
            q = q * cos + _rotate_half(q) * sin
            k = k * cos + _rotate_half(k) * sin
            if groups > 1:
                k = k.repeat_interleave(groups, dim=1)
                v = v.repeat_interleave(groups, dim=1)
            scores = q @ k.transpose(-1, -2) / math.sqrt(c.head_dim) + bias
            attn = torch.softmax(scores, dim=-1) @ v
            x = x + attn.transpose(1, 2).reshape(b, t, -1) @ self.w(q_ + "self_attn.o_proj.weight").T
            hnorm = self._rms(x, self.w(q_ + "post_attention_layernorm.weight"))
            mlp = F.silu(hnorm @ self.w(q_ + "mlp.gate_proj.weight").T) * (hnorm @ self.w(q_ + "mlp.up_proj.weight").T)
            x = x + mlp @ self.w(q_ + "mlp.down_proj.weight").T
        x = self._rms(x, self.w("model.norm.weight"))
        head = self.w("model.embed_tokens.weight" if c.tie_word_embeddings else "lm_head.weight")
        return x @ head.T


def _rotate_half(x):
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


# ---------------------------------------------------------------------------
# SDSAT sequences


def sat_sequence(tokens, anchors, adaptive_ids):
    """One SDSAT training sequence from standard tokens x_0..x_{n-1}.

    After each anchor p (an index into tokens) a block of k = len(adaptive_ids)
    adaptive tokens S_1..S_k is inserted, S_j at rotary position p + j. Returns
    (ids, positions, labels, allowed, is_adaptive):
      labels       standard x_i -> x_{i+1}; S_j after anchor p -> x_{p+j+1}
                   (-100 where the text has ended)
      allowed      standard tokens attend to earlier standard tokens only; S_j
                   attends to x_0..x_p and to S_1..S_j of its own block
    """
    n, k = len(tokens), len(adaptive_ids)
    anchors = sorted(set(a for a in anchors if 0 <= a < n))
    ids, pos, labels, kind, owner = [], [], [], [], []  # owner: anchor of an adaptive token
    for i, x in enumerate(tokens):
        ids.append(x)
        pos.append(i)
        labels.append(tokens[i + 1] if i + 1 < n else -100)
        kind.append(False)
        owner.append(i)
        if i in anchors:
            for j in range(1, k + 1):
                ids.append(adaptive_ids[j - 1])
                pos.append(i + j)
                labels.append(tokens[i + j + 1] if i + j + 1 < n else -100)
                kind.append(True)
                owner.append(i)
    t = len(ids)
    allowed = torch.zeros(t, t, dtype=torch.bool)
    kind_t = torch.tensor(kind)
    owner_t = torch.tensor(owner)
    pos_t = torch.tensor(pos)
    idx = torch.arange(t)
    earlier = idx[None, :] <= idx[:, None]
    standard_key = ~kind_t[None, :]
    # Standard queries: earlier standard keys.
    std_rows = ~kind_t[:, None] & standard_key & earlier
    # Adaptive queries: standard keys up to their anchor; adaptive keys of the
    # same block up to themselves.
    ada_std = kind_t[:, None] & standard_key & (pos_t[None, :] <= owner_t[:, None])
    ada_ada = kind_t[:, None] & kind_t[None, :] & (owner_t[None, :] == owner_t[:, None]) & earlier
    allowed = std_rows | ada_std | ada_ada
    return (torch.tensor(ids), pos_t, torch.tensor(labels), allowed, kind_t)


def sat_loss(model, batch, sat_weight=1.0):
    """(total, standard, adaptive) mean cross-entropies over a batch of
    sat_sequence() tuples of equal length."""
    ids = torch.stack([s[0] for s in batch])
    pos = torch.stack([s[1] for s in batch])
    labels = torch.stack([s[2] for s in batch])
    allowed = torch.stack([s[3] for s in batch])
    kind = torch.stack([s[4] for s in batch])
    logits = model(ids, pos, allowed)
    flat = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), labels.reshape(-1),
                           ignore_index=-100, reduction="none").view(labels.shape)
    valid = labels != -100
    std_mask, ada_mask = valid & ~kind, valid & kind
    std = flat[std_mask].mean() if std_mask.any() else flat.sum() * 0
    ada = flat[ada_mask].mean() if ada_mask.any() else flat.sum() * 0
    return std + sat_weight * ada, std.detach(), ada.detach()


@torch.no_grad()
def greedy(model, prompt, new_tokens):
    """Plain greedy decoding (no cache: for tests and the demo's small models)."""
    ids = list(prompt)
    for _ in range(new_tokens):
        logits = model(torch.tensor([ids]))
        ids.append(int(logits[0, -1].argmax()))
    return ids[len(prompt):]


@torch.no_grad()
def sdsat_greedy(model, prompt, new_tokens, adaptive_ids):
    """The official two-pass SDSAT greedy scheme (no cache), the reference for
    the C++ implementation: pass 1 on [context, S x k] gives the exact next
    token t and drafts d_1..d_k; pass 2 on [context, t, d_1..d_k] verifies them;
    t, the accepted drafts and the bonus token are emitted. Returns (tokens,
    passes, accepted_per_iteration)."""
    ids, passes, accepted = list(prompt), 0, []
    k = len(adaptive_ids)
    while len(ids) - len(prompt) < new_tokens:
        n = len(ids)
        seq = torch.tensor([ids + list(adaptive_ids)])
        positions = torch.arange(n + k)[None]
        logits = model(seq, positions)  # adaptive tokens after the context: causal is right
        passes += 1
        t = int(logits[0, n - 1].argmax())
        drafts = [int(x) for x in logits[0, n:n + k].argmax(-1)]
        ver = model(torch.tensor([ids + [t] + drafts]))
        passes += 1
        out = [t]
        for j, d in enumerate(drafts):
            want = int(ver[0, n + j].argmax())
            if d != want:
                out.append(want)
                break
            out.append(d)
        else:
            out.append(int(ver[0, n + k].argmax()))
        accepted.append(len(out) - 2 if len(out) >= 2 else 0)
        ids.extend(out)
    return ids[len(prompt):len(prompt) + new_tokens], passes, accepted
