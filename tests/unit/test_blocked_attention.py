"""Blocked attention equals a plain softmax attention."""

import pytest
import torch

from sinkscope.capture.blocks import blocked_attention


def reference(query, key, value, mask, scaling, softcap):
    group = query.shape[1] // key.shape[1]
    k = key.repeat_interleave(group, 1)
    v = value.repeat_interleave(group, 1)
    logits = query @ k.transpose(-1, -2) * scaling
    if softcap is not None:
        logits = torch.tanh(logits / softcap) * softcap
    logits = logits.masked_fill(~mask, -torch.inf)
    probs = logits.softmax(-1)
    return probs, (probs @ v).transpose(1, 2)


@pytest.mark.parametrize("kv, softcap, mask_kind", [(4, None, "none"), (2, None, "bool"), (1, 5.0, "float")])
def test_blocked_attention_matches_softmax(monkeypatch, kv, softcap, mask_kind):
    g = torch.Generator().manual_seed(0)
    B, H, T, D = 2, 4, 11, 8
    q, k, v = (torch.randn(B, n, T, D, generator=g) for n in (H, kv, kv))
    causal = torch.ones(T, T, dtype=torch.bool).tril()
    window = causal & ~torch.ones(T, T, dtype=torch.bool).tril(-4)  # a sliding window of 4
    if mask_kind == "none":
        mask, allowed = None, causal
    elif mask_kind == "bool":
        mask, allowed = window.expand(B, 1, T, T), window
    else:
        mask = torch.zeros(B, 1, T, T).masked_fill(~window, torch.finfo(torch.float32).min)
        allowed = window
    probs_ref, out_ref = reference(q, k, v, allowed, 0.3, softcap)
    monkeypatch.setattr("sinkscope.capture.blocks.BLOCK_ELEMENTS", B * H * T * 3)  # blocks of 3 queries
    seen = []

    def on_block(start, probs, entropy, out):
        seen.append(start)
        Q = probs.shape[2]
        torch.testing.assert_close(probs, probs_ref[:, :, start : start + Q, : probs.shape[-1]])
        p = probs_ref[:, :, start : start + Q]
        ent = -(torch.where(p > 0, p * p.log(), torch.zeros_like(p))).sum(-1)
        torch.testing.assert_close(entropy, ent, atol=1e-5, rtol=1e-5)

    out = blocked_attention(q, k, v, mask, 0.3, softcap, on_block)
    assert seen == [0, 3, 6, 9]
    torch.testing.assert_close(out, out_ref, atol=1e-5, rtol=1e-5)
