"""A small, readable decoder-only transformer for the gBB lab (SPEC §7), nanoGPT-like.

One module per concept (`CausalSelfAttention`, `MLP`, `Block`, `TinyTransformer`). Attention variants, on the
logits `l_ij = q_i·k_j / √d_head` of a causal head (j ≤ i):
- `softmax`: `A_ij = exp(l_ij) / Σ_{j'≤i} exp(l_ij')`.
- `softmax_sink`: a learned per-head logit `b` joins the denominator ("off-by-one"):
  `A_ij = exp(l_ij) / (exp(b) + Σ_{j'≤i} exp(l_ij'))`, so a row can put mass `exp(b)/(...)` on nothing.
- `relu`: `A_ij = relu(l_ij) / (i + 1)` (ReLU attention normalised by the number of visible keys).
- `sigmoid_gate`: softmax attention whose head output is multiplied by a per-token, per-head gate
  `σ(z_i·w_g^h + c^h)` (head-wise output gating; the head can switch itself off without a sink).
- `softmax1`: softmax with one extra logit fixed at 0 ("softmax off by one", Miller 2023; gpt-oss learns it):
  `A_ij = exp(l_ij) / (1 + Σ_{j'≤i} exp(l_ij'))`, rows sum to `1 − 1/(1 + Σ exp)` < 1.
- `sigmoid`: element-wise sigmoid attention with the bias `−log n` of Ramapuram et al. 2024 (n the sequence
  length), no normalisation: `A_ij = σ(l_ij − log n)`; rows sum to anything in (0, i + 1).
- `softpick` (Zuhri et al. 2025): a rectified softmax, `A_ij = relu(exp(l_ij) − 1) / (Σ_{j'≤i} |exp(l_ij') − 1|
  + ε)`, ε = 1e-6; rows sum to at most 1 and are all zero when every visible logit is ≤ 0.
- `output_gate`: Qwen3-Next's gated attention (Qiu et al. 2025): the query projection outputs, per head, the
  query and a gate of the head's width, `[q^h, g^h] = z_i W_Q'^h`; the head output is `σ(g^h) ⊙ Σ_j A_ij v_j`
  (an element-wise gate per channel, no bias, softmax underneath). It differs from `sigmoid_gate`, whose gate
  is one scalar per head from its own projection with a bias.
Initialisation (`init`), part of the configuration because it decides which pattern a small model learns
(docs/experiments.md):
- `gpt2`: every Linear and Embedding weight ~ N(0, 0.02²), biases 0 (GPT-2 / nanoGPT);
- `torch`: PyTorch's defaults: Embedding N(0, 1), Linear weight and bias U(±1/√fan_in) (kaiming_uniform with
  a = √5), norms' gain 1;
- `scaled`: Linear weights ~ N(0, init_std²), Embedding weights ~ N(0, embedding_init_std²), biases 0.
Row-vector convention of SPEC: the head's bilinear form is `l_ij = z_i W_QK z_jᵀ` with
`W_QK = W_Q^h W_K^hᵀ / √d_head` (d×d), `z` the attention input after the norm (gain included).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import nn
from torch.nn import functional as F

from sinkscope.errors import SinkscopeError

ATTENTIONS = ("softmax", "softmax_sink", "relu", "sigmoid_gate", "softmax1", "sigmoid", "softpick", "output_gate")
SOFTPICK_EPS = 1e-6
NORM_KINDS = ("layernorm", "rmsnorm")
NORM_POSITIONS = ("pre", "post")
POSITIONALS = ("learned", "rope", "none")
INITS = ("gpt2", "torch", "scaled")
GPT2_STD = 0.02


@dataclass(frozen=True)
class TinyTransformerConfig:
    """Architecture of the lab model; vocabulary sizes and context length come from the task."""

    n_layers: int = 2
    n_heads: int = 1
    d_model: int = 64
    mlp: bool = True
    mlp_ratio: int = 4
    norm: str = "layernorm"
    norm_position: str = "pre"
    positional: str = "learned"
    attention: str = "softmax"
    init: str = "gpt2"  # gpt2 | torch | scaled (module doc)
    init_std: float = GPT2_STD  # Linear weights' std, init="scaled" only
    embedding_init_std: float = GPT2_STD  # Embedding weights' std, init="scaled" only

    def __post_init__(self) -> None:
        for name, value, allowed in (
            ("norm", self.norm, NORM_KINDS),
            ("norm_position", self.norm_position, NORM_POSITIONS),
            ("positional", self.positional, POSITIONALS),
            ("attention", self.attention, ATTENTIONS),
            ("init", self.init, INITS),
        ):
            if value not in allowed:
                raise SinkscopeError(f"model {name}={value!r}: use one of {', '.join(allowed)}")
        if self.n_layers < 1 or self.n_heads < 1 or self.d_model % self.n_heads:
            raise SinkscopeError(
                f"model n_layers={self.n_layers}, n_heads={self.n_heads}, d_model={self.d_model}: need ≥ 1 "
                "layer and head, and d_model divisible by n_heads"
            )
        if self.mlp and self.mlp_ratio < 1:
            raise SinkscopeError(f"model mlp_ratio={self.mlp_ratio}: an MLP needs a hidden width of at least d_model "
                                 "(ratio ≥ 1); --no-mlp drops it")
        if self.positional == "rope" and (self.d_model // self.n_heads) % 2:
            raise SinkscopeError("model positional='rope': needs an even head dimension d_model/n_heads")
        if not (0 < self.init_std < math.inf and 0 < self.embedding_init_std < math.inf):
            raise SinkscopeError(
                f"model init_std={self.init_std}, embedding_init_std={self.embedding_init_std}: use positive finite stds"
            )
        if self.init != "scaled" and (self.init_std, self.embedding_init_std) != (GPT2_STD, GPT2_STD):
            raise SinkscopeError(
                f"model init={self.init!r} ignores init_std/embedding_init_std: set model.init=scaled to use them"
            )


@dataclass
class LayerTrace:
    """What one layer saw and did, for the lab's measurements.

    `resid` (B, T, d) residual entering the layer; `z` (B, T, d) attention input (after the norm, if pre-norm);
    `probs` (B, H, T, T) attention weights; `values` (B, H, T, d_head) value vectors;
    `gates` (B, H, T) the output gates of `sigmoid_gate` attention, (B, H, T, d_head) those of `output_gate`
    (None for the other variants).
    """

    resid: torch.Tensor
    z: torch.Tensor
    probs: torch.Tensor
    values: torch.Tensor
    gates: torch.Tensor | None


def make_norm(kind: str, d: int) -> nn.Module:
    return nn.LayerNorm(d, bias=False) if kind == "layernorm" else nn.RMSNorm(d)


def attention_weights(logits: torch.Tensor, kind: str, sink_logit: torch.Tensor | None = None) -> torch.Tensor:
    """Causal attention weights (B, H, T, T) from logits (B, H, T, T) for the variants in the module doc.

    `sink_logit` (H,) is used by `softmax_sink` only. Entries above the diagonal are exactly 0.
    """
    t = logits.shape[-1]
    causal = torch.ones(t, t, dtype=torch.bool, device=logits.device).tril()
    if kind == "relu":
        visible = torch.arange(1, t + 1, device=logits.device, dtype=logits.dtype).unsqueeze(1)  # (T, 1)
        return F.relu(logits).masked_fill(~causal, 0.0) / visible
    if kind == "sigmoid":
        return torch.sigmoid(logits - math.log(t)).masked_fill(~causal, 0.0)
    masked = logits.masked_fill(~causal, float("-inf"))
    if kind == "softpick":
        # numerator and denominator times exp(−m), m the row's largest visible logit, so nothing overflows
        top = masked.amax(-1, keepdim=True)
        shifted = (torch.exp(masked - top) - torch.exp(-top)).masked_fill(~causal, 0.0)  # exp(l − m) − exp(−m)
        return F.relu(shifted) / (shifted.abs().sum(-1, keepdim=True) + SOFTPICK_EPS * torch.exp(-top))
    if kind in ("softmax_sink", "softmax1"):
        sink = sink_logit.view(1, -1, 1, 1) if kind == "softmax_sink" else logits.new_zeros(1, 1, 1, 1)
        sink = sink.expand(*logits.shape[:-1], 1)  # (B, H, T, 1)
        return torch.softmax(torch.cat([masked, sink], dim=-1), dim=-1)[..., :t]
    return torch.softmax(masked, dim=-1)


def rope(x: torch.Tensor) -> torch.Tensor:
    """Rotary position embedding (base 10000, half-split pairing) of (B, H, T, d_head)."""
    _, _, t, dh = x.shape
    freqs = 10000.0 ** (-torch.arange(0, dh, 2, dtype=x.dtype, device=x.device) / dh)  # (dh/2,)
    angles = torch.arange(t, dtype=x.dtype, device=x.device).unsqueeze(1) * freqs  # (T, dh/2)
    cos, sin = angles.cos(), angles.sin()
    x1, x2 = x[..., : dh // 2], x[..., dh // 2:]
    return torch.cat([x1 * cos - x2 * sin, x1 * sin + x2 * cos], dim=-1)


class CausalSelfAttention(nn.Module):
    def __init__(self, config: TinyTransformerConfig) -> None:
        super().__init__()
        d = config.d_model
        self.n_heads, self.d_head = config.n_heads, d // config.n_heads
        self.kind, self.use_rope = config.attention, config.positional == "rope"
        # output_gate: the query projection also gives each head a gate of its width (Qwen3-Next's layout)
        self.q_proj = nn.Linear(d, 2 * d if self.kind == "output_gate" else d, bias=False)
        self.k_proj = nn.Linear(d, d, bias=False)
        self.v_proj = nn.Linear(d, d, bias=False)
        self.o_proj = nn.Linear(d, d, bias=False)
        self.sink_logit = nn.Parameter(torch.zeros(config.n_heads)) if self.kind == "softmax_sink" else None
        self.gate = nn.Linear(d, config.n_heads) if self.kind == "sigmoid_gate" else None

    def split_heads(self, x: torch.Tensor) -> torch.Tensor:
        b, t, _ = x.shape
        return x.view(b, t, self.n_heads, self.d_head).transpose(1, 2)  # (B, H, T, dh)

    def forward(self, z: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor | None]:
        """z (B, T, d) -> (output (B, T, d), probs (B, H, T, T), values (B, H, T, dh), gates (B, H, T) or None)."""
        b, t, d = z.shape
        q, gate_logits = self.query_and_gate(z)
        k, v = self.split_heads(self.k_proj(z)), self.split_heads(self.v_proj(z))
        if self.use_rope:
            q, k = rope(q), rope(k)
        logits = q @ k.transpose(-2, -1) / math.sqrt(self.d_head)  # (B, H, T, T)
        probs = attention_weights(logits, self.kind, self.sink_logit)
        y = probs @ v  # (B, H, T, dh)
        gates = None
        if self.gate is not None:
            gates = torch.sigmoid(self.gate(z)).transpose(1, 2)  # (B, H, T)
            y = y * gates.unsqueeze(-1)
        elif gate_logits is not None:
            gates = torch.sigmoid(gate_logits)  # (B, H, T, dh)
            y = y * gates
        return self.o_proj(y.transpose(1, 2).reshape(b, t, d)), probs, v, gates

    def query_and_gate(self, z: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor | None]:
        """The queries (B, H, T, dh) and, for `output_gate`, the gate logits (B, H, T, dh) (else None): the
        projection's output per head is `[q^h, g^h]`, as Qwen3-Next lays it out."""
        b, t, _ = z.shape
        if self.kind != "output_gate":
            return self.split_heads(self.q_proj(z)), None
        both = self.q_proj(z).view(b, t, self.n_heads, 2 * self.d_head).transpose(1, 2)  # (B, H, T, 2·dh)
        return both[..., : self.d_head], both[..., self.d_head :]

    def query_weight(self) -> torch.Tensor:
        """`W_Q` as (H, dh, d): the rows of the query projection that give each head's query."""
        d = self.q_proj.in_features
        rows = self.q_proj.weight.view(self.n_heads, -1, d)  # (H, dh or 2·dh, d)
        return rows[:, : self.d_head]

    def switch_parameter_norm(self) -> torch.Tensor:
        """Per head (H,), the Frobenius norm of the parameters the head switches off with besides W_QK: the
        gate's weights and bias (`sigmoid_gate`: `||(w_g^h, c^h)||`; `output_gate`: the gate rows of the query
        projection), `|b_h|` for a learned sink logit; NaN for the variants without such parameters."""
        if self.gate is not None:
            return torch.cat([self.gate.weight, self.gate.bias.unsqueeze(1)], dim=1).norm(dim=1)
        if self.sink_logit is not None:
            return self.sink_logit.abs()
        if self.kind == "output_gate":
            d = self.q_proj.in_features
            return self.q_proj.weight.view(self.n_heads, 2 * self.d_head, d)[:, self.d_head :].flatten(1).norm(dim=1)
        return torch.full((self.n_heads,), math.nan)

    def w_qk(self) -> torch.Tensor:
        """Per-head effective `W_QK = W_Q^h W_K^hᵀ / √d_head` (H, d, d), row-vector convention (SPEC §6).

        With RoPE this is the form at relative offset 0 (the logits of a query with itself)."""
        d = self.q_proj.in_features
        wq = self.query_weight()  # rows of W_Q^hᵀ
        wk = self.k_proj.weight.view(self.n_heads, self.d_head, d)
        return wq.transpose(1, 2) @ wk / math.sqrt(self.d_head)


class MLP(nn.Module):
    def __init__(self, config: TinyTransformerConfig) -> None:
        super().__init__()
        hidden = config.mlp_ratio * config.d_model
        self.up = nn.Linear(config.d_model, hidden, bias=False)
        self.down = nn.Linear(hidden, config.d_model, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down(F.gelu(self.up(x)))


class Block(nn.Module):
    def __init__(self, config: TinyTransformerConfig) -> None:
        super().__init__()
        self.pre = config.norm_position == "pre"
        self.norm1 = make_norm(config.norm, config.d_model)
        self.attn = CausalSelfAttention(config)
        self.mlp = MLP(config) if config.mlp else None
        self.norm2 = make_norm(config.norm, config.d_model) if config.mlp else None

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, LayerTrace]:
        z = self.norm1(x) if self.pre else x
        out, probs, values, gates = self.attn(z)
        trace = LayerTrace(resid=x, z=z, probs=probs, values=values, gates=gates)
        x = x + out if self.pre else self.norm1(x + out)
        if self.mlp is not None:
            x = x + self.mlp(self.norm2(x)) if self.pre else self.norm2(x + self.mlp(x))
        return x, trace


class TinyTransformer(nn.Module):
    """Decoder-only transformer: token (+ learned position) embedding, blocks, (final norm if pre-norm), unembed."""

    def __init__(self, config: TinyTransformerConfig, vocab_in: int, vocab_out: int, max_len: int) -> None:
        super().__init__()
        self.config = config
        self.tok_emb = nn.Embedding(vocab_in, config.d_model)
        self.pos_emb = nn.Embedding(max_len, config.d_model) if config.positional == "learned" else None
        self.blocks = nn.ModuleList(Block(config) for _ in range(config.n_layers))
        self.norm_f = make_norm(config.norm, config.d_model) if config.norm_position == "pre" else None
        self.unembed = nn.Linear(config.d_model, vocab_out, bias=False)
        if config.init != "torch":  # the modules above were built with PyTorch's defaults
            self.apply(self._init_weights)

    def _init_weights(self, module: nn.Module) -> None:
        """Normal init of `config.init` (module doc): gpt2 = N(0, 0.02²) everywhere, scaled = the two stds."""
        cfg = self.config
        if isinstance(module, (nn.Linear, nn.Embedding)):
            std = cfg.init_std if isinstance(module, nn.Linear) else cfg.embedding_init_std
            nn.init.normal_(module.weight, mean=0.0, std=std if cfg.init == "scaled" else GPT2_STD)
            if getattr(module, "bias", None) is not None:
                nn.init.zeros_(module.bias)

    def forward(self, ids: torch.Tensor) -> tuple[torch.Tensor, list[LayerTrace]]:
        """ids (B, T) -> (logits (B, T, vocab_out), one `LayerTrace` per layer)."""
        x = self.tok_emb(ids)  # (B, T, d)
        if self.pos_emb is not None:
            x = x + self.pos_emb(torch.arange(ids.shape[1], device=ids.device))
        traces = []
        for block in self.blocks:
            x, trace = block(x)
            traces.append(trace)
        if self.norm_f is not None:
            x = self.norm_f(x)
        return self.unembed(x), traces
