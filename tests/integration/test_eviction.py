"""Keep-the-sink evaluation: the keep mask over the full window against token-by-token decoding with a KV cache
that really evicts (Hugging Face's DynamicCache, entries dropped after every step, absolute positions kept), on tiny
random Llama (GQA) and Gemma-3 models."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from transformers import DynamicCache, Gemma3ForCausalLM, Gemma3TextConfig, LlamaConfig, LlamaForCausalLM

from sinkscope.errors import SinkscopeError
from sinkscope.models.families import family_for
from sinkscope.models.load import LoadedModel
from sinkscope.pipelines.eviction import EvictConfig, evaluate, keep_mask, summarize, token_losses

VOCAB, BOS, T = 64, 0, 14


def _wrap(model) -> LoadedModel:
    model.eval().requires_grad_(False)
    return LoadedModel(model=model, tokenizer=None, family=family_for(model.config.model_type), identity={})


def _llama() -> LoadedModel:
    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=VOCAB, hidden_size=32, intermediate_size=48, num_hidden_layers=3,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64, bos_token_id=BOS,
                         eos_token_id=1, attn_implementation="sdpa")  # fmt: skip
    return _wrap(LlamaForCausalLM(config))


def _gemma3() -> LoadedModel:
    torch.manual_seed(0)
    config = Gemma3TextConfig(vocab_size=VOCAB, hidden_size=32, intermediate_size=48, num_hidden_layers=2,
                              num_attention_heads=4, num_key_value_heads=1, head_dim=8, max_position_embeddings=64,
                              sliding_window=64, bos_token_id=BOS, eos_token_id=1, pad_token_id=2,
                              attn_implementation="sdpa")  # fmt: skip
    return _wrap(Gemma3ForCausalLM(config))


def streamed_losses(lm: LoadedModel, ids: torch.Tensor, window: int, kept: list[int]) -> torch.Tensor:
    """Decode one token at a time (eager attention) with a cache from which, after each step, every entry that the
    next query may not see is deleted: the plain loop over an evicting KV cache. Float[T-1]."""
    model = lm.model
    previous = model.config._attn_implementation
    model.set_attn_implementation("eager")
    cache, held, losses = DynamicCache(config=model.config), [], []
    try:
        for t in range(ids.shape[1] - 1):
            logits = model(input_ids=ids[:, t:t + 1], position_ids=torch.tensor([[t]]), cache=cache,
                           use_cache=True).logits  # fmt: skip
            losses.append(F.cross_entropy(logits[0, -1].float(), ids[0, t + 1]))
            held.append(t)
            keep = [i for i, p in enumerate(held) if p in kept or (t + 1) - p < window]
            for layer in cache.layers:
                layer.keys, layer.values = layer.keys[:, :, keep], layer.values[:, :, keep]
                if hasattr(layer, "cumulative_length"):  # Gemma-3's sliding layers size their mask by it
                    layer.cumulative_length = len(keep)
            held = [held[i] for i in keep]
    finally:
        model.set_attn_implementation(previous)
    return torch.stack(losses)


def test_keep_mask_against_a_loop():
    kept = torch.tensor([[0, 5], [2, 3]])
    mask = keep_mask(9, 3, kept)
    for b in range(2):
        for t in range(9):
            for j in range(9):
                assert bool(mask[b, t, j]) == (j <= t and (t - j < 3 or j in kept[b].tolist())), (b, t, j)


@pytest.mark.parametrize("build", [_llama, _gemma3], ids=["llama", "gemma3"])
@pytest.mark.parametrize("kept", [[], [0], [0, 1], [0, 6]], ids=["recent", "first1", "first2", "bos+6"])
def test_mask_equals_decoding_with_an_evicting_cache(build, kept):
    lm = build()
    ids = torch.randint(3, VOCAB, (1, T), generator=torch.Generator().manual_seed(1))
    ids[:, 0] = BOS
    window = 4
    masked = token_losses(lm, ids, keep_mask(T, window, torch.tensor([kept], dtype=torch.long)))[0]
    looped = streamed_losses(lm, ids, window, kept)
    torch.testing.assert_close(masked, looped, atol=2e-5, rtol=1e-4)
    full = token_losses(lm, ids)[0]
    assert (masked - full)[window:].abs().max() > 1e-4  # eviction changed the late queries' losses
    torch.testing.assert_close(masked[:window], full[:window], atol=2e-5, rtol=1e-4)  # early ones see everything


def test_evaluate_rows_and_summary():
    lm = _llama()
    ids = torch.randint(3, VOCAB, (3, T), generator=torch.Generator().manual_seed(2))
    ids[:, 0] = BOS
    config = EvictConfig(window=4, ks=(0, 1, 2))
    losses = evaluate(lm, [ids[:2], ids[2:]], config)
    assert sorted(set(zip(losses["policy"], losses["k"]))) == [("first", 1), ("first", 2), ("full", 0),
                                                              ("recent", 0), ("top-mass", 1), ("top-mass", 2)]
    full = F.cross_entropy(lm.model(input_ids=ids).logits[:, :-1].transpose(1, 2), ids[:, 1:], reduction="none")
    got = losses[losses["policy"] == "full"].sort_values("window")["loss"].to_numpy()
    torch.testing.assert_close(torch.tensor(got), full[:, 4:].double().mean(1), atol=1e-5, rtol=1e-5)
    first2 = losses[(losses["policy"] == "first") & (losses["k"] == 2)]
    assert set(first2["kept"]) == {"0,1"}
    summary = summarize(losses).set_index(["policy", "k"])
    delta = (losses[losses["policy"] == "recent"]["loss"].to_numpy() - got)
    assert summary.loc[("recent", 0), "delta_full"] == pytest.approx(delta.mean())
    half = 1.959963984540054 * delta.std(ddof=1) / 3 ** 0.5
    assert summary.loc[("recent", 0), "delta_full_hi"] == pytest.approx(delta.mean() + half)


def test_bad_window_is_one_clear_error():
    with pytest.raises(SinkscopeError, match="--window 0"):
        EvictConfig(window=0)
    with pytest.raises(SinkscopeError, match="no evicted query"):
        EvictConfig(window=13).check_seq_len(14)
