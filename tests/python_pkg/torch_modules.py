"""Plain PyTorch modules for the torch.compile(backend="yirage") tests and bench/torch_bench.py:
the public suite's eight workloads as nn.Modules (sizes are arguments, so the tests run them
small), a Llama decoder layer, and a module with ops YiRage's IR does not cover."""
import math

import torch
from torch import nn


def _weight(*shape, scale=None):
    scale = scale if scale is not None else 1.0 / math.sqrt(shape[0])
    return nn.Parameter(torch.randn(*shape) * scale)


def rms_norm(x, weight=None, eps=1e-6):
    normed = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)
    return normed * weight if weight is not None else normed


class RmsNormLinear(nn.Module):
    def __init__(self, hidden=4096, out=6144):
        super().__init__()
        self.gain = _weight(hidden, scale=1.0)
        self.w = _weight(hidden, out)

    def forward(self, x):
        return rms_norm(x, self.gain) @ self.w


class GatedMlp(nn.Module):
    def __init__(self, hidden=4096):
        super().__init__()
        self.w1 = _weight(hidden, hidden)
        self.w2 = _weight(hidden, hidden)

    def forward(self, x):
        return nn.functional.silu(x @ self.w1) * (x @ self.w2)


class Gqa(nn.Module):
    """The suite's attention core: softmax written as exp / sum, K given transposed."""

    def forward(self, q, k, v):
        e = torch.exp(q @ k)
        return (e / e.sum(-1, keepdim=True)) @ v


class Lora(nn.Module):
    def __init__(self, d_in=256, d_out=4096, rank=16):
        super().__init__()
        self.w = _weight(d_in, d_out)
        self.a = _weight(d_in, rank)
        self.b = _weight(rank, d_out, scale=0.25)

    def forward(self, x):
        return x @ self.w + (x @ self.a) @ self.b


class NTrans(nn.Module):
    def forward(self, h, x, alpha):
        return rms_norm(x + alpha * (rms_norm(h) + x))


class GemmSoftmax(nn.Module):
    def __init__(self, d_in=2048, vocab=32000):
        super().__init__()
        self.w = _weight(d_in, vocab)

    def forward(self, x):
        return torch.softmax(x @ self.w, dim=-1)


class GemmLayerNorm(nn.Module):
    def __init__(self, hidden=4096):
        super().__init__()
        self.w = _weight(hidden, hidden)

    def forward(self, x):
        return nn.functional.layer_norm(x @ self.w, (x.shape[-1],))


class LlamaMlpBlock(nn.Module):
    def __init__(self, hidden=4096, intermediate=14336):
        super().__init__()
        self.gain = _weight(hidden, scale=1.0)
        self.w_gate_up = _weight(hidden, 2 * intermediate)
        self.w_down = _weight(intermediate, hidden)

    def forward(self, x):
        gate, up = (rms_norm(x, self.gain) @ self.w_gate_up).chunk(2, dim=-1)
        return (nn.functional.silu(gate) * up) @ self.w_down + x


def suite_modules(scale=1):
    """name -> (module, input shapes): the suite's workloads at bs 1, their sizes divided by
    `scale` (the tests run them at scale 16 or more)."""
    s = lambda n: max(n // scale, 4)  # noqa: E731
    h = s(4096)
    return {
        "rmsnorm_linear": (RmsNormLinear(h, s(6144)), [(2, h)]),
        "gated_mlp": (GatedMlp(h), [(8, h)]),
        "gqa": (Gqa(), [(2, s(256), 64), (2, 64, s(4096)), (2, s(4096), 64)]),
        "lora": (Lora(256, h), [(16, 256)]),
        "ntrans": (NTrans(), [(8, h)] * 3),
        "gemm_softmax": (GemmSoftmax(s(2048), s(32000)), [(8, s(2048))]),
        "gemm_layernorm": (GemmLayerNorm(h), [(16, h)]),
        "llama_mlp_block": (LlamaMlpBlock(h, s(14336)), [(1, h)]),
    }


# The suite's input scales (src/suite/suite.cpp): exp(Q @ K) overflows float32 on unscaled
# normal inputs, in eager as anywhere.
INPUT_SCALES = {"gqa": [1 / 8, 1 / 8, 1]}


def suite_inputs(name, shapes, generator=None):
    """Fresh normal inputs of the suite module `name`, at the suite's scales."""
    scales = INPUT_SCALES.get(name, [1] * len(shapes))
    return [torch.randn(s, generator=generator) * k for s, k in zip(shapes, scales)]


def rotate_half(x):
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


class LlamaDecoderLayer(nn.Module):
    """One Llama decoder layer written plainly: RMSNorm, rotary embedding (Hugging Face's
    rotate-half layout), grouped-query attention by hand over a KV cache, a SwiGLU MLP and the
    two residuals. Inputs: x [b, s, hidden], cos and sin [s, head_dim] for the new positions,
    the cached keys and values [b, kv_heads, past, head_dim], and an additive mask
    [s, past + s]. The queries of each KV head's group attend together, as [b, kv_heads,
    group * s, head_dim], which keeps every tensor within four dims."""

    def __init__(self, hidden=2048, heads=32, kv_heads=8, intermediate=5632, eps=1e-5):
        super().__init__()
        self.heads, self.kv_heads, self.head_dim = heads, kv_heads, hidden // heads
        self.eps = eps
        self.input_norm = _weight(hidden, scale=1.0)
        self.post_norm = _weight(hidden, scale=1.0)
        self.wq = _weight(hidden, heads * self.head_dim)
        self.wk = _weight(hidden, kv_heads * self.head_dim)
        self.wv = _weight(hidden, kv_heads * self.head_dim)
        self.wo = _weight(heads * self.head_dim, hidden)
        self.w_gate = _weight(hidden, intermediate)
        self.w_up = _weight(hidden, intermediate)
        self.w_down = _weight(intermediate, hidden)

    def attention(self, x, cos, sin, k_cache, v_cache, mask):
        b, s, _ = x.shape
        group = self.heads // self.kv_heads
        q = (x @ self.wq).view(b, s, self.heads, self.head_dim).transpose(1, 2)
        k = (x @ self.wk).view(b, s, self.kv_heads, self.head_dim).transpose(1, 2)
        v = (x @ self.wv).view(b, s, self.kv_heads, self.head_dim).transpose(1, 2)
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        k = torch.cat((k_cache, k), dim=2)
        v = torch.cat((v_cache, v), dim=2)
        q = q.reshape(b, self.kv_heads, group * s, self.head_dim)
        scores = (q @ k.transpose(2, 3)) * (1.0 / math.sqrt(self.head_dim))
        scores = scores + mask.repeat(group, 1)
        probs = torch.softmax(scores, dim=-1)
        out = (probs @ v).reshape(b, self.heads, s, self.head_dim).transpose(1, 2)
        return out.reshape(b, s, -1) @ self.wo

    def forward(self, x, cos, sin, k_cache, v_cache, mask):
        h = x + self.attention(rms_norm(x, self.input_norm, self.eps), cos, sin, k_cache,
                               v_cache, mask)
        n = rms_norm(h, self.post_norm, self.eps)
        return h + (nn.functional.silu(n @ self.w_gate) * (n @ self.w_up)) @ self.w_down


def llama_inputs(layer, batch=1, seq=1, past=15, generator=None):
    """Fresh random inputs of a LlamaDecoderLayer: seq new tokens after past cached ones."""
    hidden = layer.heads * layer.head_dim
    g = generator
    x = torch.randn(batch, seq, hidden, generator=g)
    positions = torch.arange(past, past + seq, dtype=torch.float32)
    inv_freq = 10000.0 ** (-torch.arange(0, layer.head_dim, 2, dtype=torch.float32) / layer.head_dim)
    angles = torch.outer(positions, inv_freq)
    angles = torch.cat((angles, angles), dim=-1)
    k_cache = torch.randn(batch, layer.kv_heads, past, layer.head_dim, generator=g)
    v_cache = torch.randn(batch, layer.kv_heads, past, layer.head_dim, generator=g)
    causal = torch.ones(seq, past + seq, dtype=torch.bool).tril(past)
    mask = torch.zeros(seq, past + seq).masked_fill(~causal, float("-inf"))
    return [x, angles.cos(), angles.sin(), k_cache, v_cache, mask]


class WithUncoveredOps(nn.Module):
    """A matmul and softmax around an argsort and a data-dependent branch (a graph break):
    the argsort and the branch stay in PyTorch."""

    def __init__(self, hidden=64):
        super().__init__()
        self.w = _weight(hidden, hidden)

    def forward(self, x):
        y = torch.softmax(x @ self.w, dim=-1)
        order = torch.argsort(y, dim=-1)
        y = y + torch.gather(x, -1, order)
        if y.sum() > 0:  # data-dependent: dynamo breaks the graph here
            y = nn.functional.silu(y) * 2.0
        else:
            y = torch.exp(y) - 1.0
        return rms_norm(y @ self.w)
