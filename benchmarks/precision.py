"""The flex path's two precisions against float64: error of every `AttentionReadout` field (and a learned sink's mass).

A tiny random Llama in bfloat16 (2 layers, d = 256, 4 heads of head_dim 64, 2 KV heads; query and key projections
scaled by `--sharpen` so that heads form sharp rows, and BOS's embedding by 4 so that it draws attention) runs one
window of `builtin:random`-like token ids of length T; the q, k, v that its last layer's attention function
receives (bfloat16) go through `capture.flex.flex_parts` in each precision ("exact": float32 copies; "model":
bfloat16 with float32 accumulation, what the CUDA kernel does: the CPU's eager flex_attention rounds the
probabilities and the output to the inputs' dtype as the Triton kernel does) and through float64 softmax maps of
the same bfloat16 values. The learned-sink mass comes from a second call with sink logits (−2, 0, 2, 4) per head.

Errors: max |got − float64| over all heads and rows; relative: max |got − float64| / |float64| over the entries
with |float64| ≥ 1e-3; "× tol": max |got − float64| / (atol + 1e-5 |float64|) with the tests' tolerance (atol
1e-5, for the entropy sum 1e-5 · T), ≤ 1 meets it.

    HF_HUB_OFFLINE=1 .venv/bin/python benchmarks/precision.py --seq-lens 256,1024,4096 --out runs/bench/precision.json
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import torch
from transformers import LlamaConfig, LlamaForCausalLM

from sinkscope.capture import flex

FIELDS = ("sink", "diag", "prev", "columns", "entropy", "out_norms", "mass")
SINKS = (-2.0, 0.0, 2.0, 4.0)


def tiny_bf16_llama(seq_len: int, sharpen: float) -> LlamaForCausalLM:
    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=128, hidden_size=256, intermediate_size=512, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, head_dim=64,
                         max_position_embeddings=seq_len)  # fmt: skip
    model = LlamaForCausalLM(config)
    with torch.no_grad():
        model.get_input_embeddings().weight[0].mul_(4.0)  # BOS: a token that draws attention
        for layer in model.model.layers:
            layer.self_attn.q_proj.weight.mul_(sharpen)
            layer.self_attn.k_proj.weight.mul_(sharpen)
    return model.to(torch.bfloat16).eval().requires_grad_(False)


def last_layer_inputs(model: LlamaForCausalLM, seq_len: int) -> tuple[torch.Tensor, ...]:
    """The q, k, v (bfloat16) and scale that the last layer's attention function receives on one window."""
    from transformers import AttentionInterface
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    seen = {}

    def recording(module, query, key, value, *args, **kwargs):
        seen["qkv"] = (query, key, value, module.scaling)
        return sdpa_attention_forward(module, query, key, value, *args, **kwargs)

    AttentionInterface.register("recording", recording)
    model.set_attn_implementation("recording")
    ids = torch.randint(1, 128, (1, seq_len), generator=torch.Generator().manual_seed(seq_len))
    ids[:, 0] = 0
    with torch.no_grad():
        model.model(input_ids=ids, use_cache=False)
    return seen["qkv"]


def float64_rows(q, k, v, scale, sinks=None) -> dict[str, torch.Tensor]:
    """Every field from float64 maps, one head at a time (a T×T map of float64 per head)."""
    B, H, T, _ = q.shape
    group = H // k.shape[1]
    t = torch.arange(T)
    weights = torch.zeros(T, dtype=torch.float64)
    weights[1:] = 1 / torch.log(t[1:] + 1.0).double()
    rows = {name: torch.zeros(B, H, T, dtype=torch.float64) for name in FIELDS if name != "entropy"}
    rows["entropy"] = torch.zeros(B, H, dtype=torch.float64)
    causal = torch.ones(T, T, dtype=torch.bool).tril()
    for h in range(H):
        S = scale * q[:, h].double() @ k[:, h // group].double().transpose(-1, -2)
        S = S.masked_fill(~causal, -torch.inf)
        if sinks is not None:
            S = torch.cat([S, torch.full((B, T, 1), sinks[h], dtype=torch.float64)], -1)
        A = S.softmax(-1)
        rows["mass"][:, h] = A[..., T] if sinks is not None else 0
        A = A[..., :T]
        out = A @ v[:, h // group].double()
        rows["sink"][:, h], rows["diag"][:, h] = A[..., 0], A[..., t, t]
        rows["prev"][:, h, 1:] = A[..., t[1:], t[:-1]]
        rows["columns"][:, h] = A.sum(-2)
        plogp = torch.where(A > 0, A * A.clamp_min(1e-300).log(), torch.zeros_like(A))
        rows["entropy"][:, h] = (-plogp.sum(-1) * weights).sum(-1)
        rows["out_norms"][:, h] = out.norm(dim=-1)
        del S, A, plogp
    return rows


def errors(got: torch.Tensor, ref: torch.Tensor, atol: float) -> dict[str, float]:
    diff = (got.double() - ref).abs()
    large = ref.abs() >= 1e-3
    return {"max_abs": float(diff.max()),
            "max_rel": float((diff[large] / ref.abs()[large]).max()) if large.any() else 0.0,
            "x_tol": float((diff / (atol + 1e-5 * ref.abs())).max())}  # fmt: skip


def measure(seq_len: int, sharpen: float) -> list[dict]:
    q, k, v, scale = last_layer_inputs(tiny_bf16_llama(seq_len, sharpen), seq_len)
    sinks = torch.tensor(SINKS)
    ref = float64_rows(q, k, v, scale) | {"mass": float64_rows(q, k, v, scale, SINKS)["mass"]}
    results = []
    for precision in flex.PRECISIONS:
        started = time.perf_counter()
        _, rows = flex.flex_rows(q, k, v, scale, precision=precision)
        _, packed = flex.flex_parts(q, k, v, scale, sinks=sinks, precision=precision)
        got = {name: getattr(rows, name) for name in FIELDS if name != "mass"}
        got["mass"] = flex.learned_sink_mass(packed.parts)
        for name in FIELDS:
            atol = 1e-5 * seq_len if name == "entropy" else 1e-5
            results.append({"T": seq_len, "precision": precision, "field": name, **errors(got[name], ref[name], atol)})
        print(f"T = {seq_len} {precision}: {time.perf_counter() - started:.1f} s", flush=True)
    return results


def table(results: list[dict]) -> str:
    lines = ["| field | T | exact: max abs | exact: max rel | exact: × tol | model: max abs | model: max rel | "
             "model: × tol |", "|---|---|---|---|---|---|---|---|"]  # fmt: skip
    by = {(r["field"], r["T"], r["precision"]): r for r in results}
    for field in FIELDS:
        for seq_len in sorted({r["T"] for r in results}):
            cells = [f"{by[field, seq_len, p][key]:.1e}" for p in flex.PRECISIONS for key in ("max_abs", "max_rel",
                                                                                               "x_tol")]  # fmt: skip
            lines.append(f"| {field} | {seq_len} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seq-lens", default="256,1024,4096", help="window lengths T, comma-separated")
    parser.add_argument("--sharpen", type=float, default=6.0, help="factor on the query and key projections")
    parser.add_argument("--out", default=None, help="JSON of every measurement")
    args = parser.parse_args()
    torch.manual_seed(0)
    results = [r for seq_len in map(int, args.seq_lens.split(",")) for r in measure(seq_len, args.sharpen)]
    print(table(results))
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
