"""The keep-the-sink mask at its boundary in a real forward pass (a tiny random Llama with GQA): a recent window of
w = T − 1 keys hides key 0 only from query T − 1, which has no target, so every loss equals the full cache's; w = T − 2
hides key 0 from query T − 2 as well, whose loss alone changes — unless key 0 is kept. The full cache's losses are
plain `transformers` logits and cross-entropy computed here.

Each test names in its docstring the one-line bug it was seen to fail on."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from transformers import LlamaConfig, LlamaForCausalLM

from sinkscope.models.families import family_for
from sinkscope.models.load import LoadedModel
from sinkscope.pipelines.eviction import keep_mask, token_losses

VOCAB, BOS, T = 64, 0, 9


def _llama() -> LoadedModel:
    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=VOCAB, hidden_size=32, intermediate_size=48, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64, bos_token_id=BOS,
                         eos_token_id=1, attn_implementation="sdpa")  # fmt: skip
    model = LlamaForCausalLM(config).eval().requires_grad_(False)
    return LoadedModel(model=model, tokenizer=None, family=family_for("llama"), identity={})


def test_a_recent_window_changes_only_the_queries_at_or_beyond_it():
    """Windows 0 and 1 keep {0} and {1} (per-window kept sets); at w = T − 1 nothing with a target changes, at
    w = T − 2 only window 1's last target (key 0 evicted, key 1 in the window anyway). Killed by `(t - j < window)`
    → `(t - j <= window)` in `keep_mask` (nothing evicted at w = T − 2), by `allowed & (…)` → `allowed | (…)` in
    `masked_sdpa` (the model's causal mask lost: future keys seen) and by `extra[:, None, :]` →
    `extra[:1, None, :]` (window 0's kept set for both)."""
    lm = _llama()
    ids = torch.randint(3, VOCAB, (2, T), generator=torch.Generator().manual_seed(4))
    ids[:, 0] = BOS
    logits = lm.model(input_ids=ids).logits  # plain transformers, the full cache
    full = F.cross_entropy(logits[:, :-1].transpose(1, 2), ids[:, 1:], reduction="none")  # (B, T − 1)
    kept = torch.tensor([[0], [1]])
    last = token_losses(lm, ids, keep_mask(T, T - 1, kept))
    torch.testing.assert_close(last, full, atol=2e-5, rtol=1e-4)
    before = token_losses(lm, ids, keep_mask(T, T - 2, kept))
    torch.testing.assert_close(before[0], full[0], atol=2e-5, rtol=1e-4)  # key 0 kept
    torch.testing.assert_close(before[1, :-1], full[1, :-1], atol=2e-5, rtol=1e-4)
    assert abs(float(before[1, -1] - full[1, -1])) > 1e-4  # query T − 2 lost key 0
