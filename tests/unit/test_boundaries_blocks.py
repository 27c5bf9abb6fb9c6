"""Query blocks and attention windows on the capture paths, cut at their boundaries: the rows path over blocks of
3, 3 and 1 queries (a block starting past 0 reads A[t, t−1] from the key just before it; the last block is one
row), which packed logits of the flex path fall outside a sliding window (at t = W and t = W − 1, W = 1 and 2), the
window predicates themselves at t − j = W − 1 and W, and the row shift of an additive mask over the causally
visible keys only.

Expected values are loops over queries and keys written here, or worked out by hand in the comments. Each test
names in its docstring the one-line bug it was seen to fail on."""

import math

import pytest
import torch

import sinkscope.capture.blocks as blocks
import sinkscope.capture.flex_masks as flex_masks

B, H, KV, T, D = 2, 4, 2, 7, 3  # query heads 0, 1 read KV head 0; 2, 3 read KV head 1


def test_row_attention_over_blocks_of_three_three_and_one_query_equals_loops(monkeypatch):
    """A budget of B·H·T·3 logits: blocks [0, 3), [3, 6), [6, 7). Every readout field against a float64 softmax
    per (window, head, query) over keys j ≤ t: sink A[t,0], diag A[t,t], prev A[t,t−1] (0 at t = 0), columns
    Σ_t A[t,j], entropy Σ_{t≥1} H_t / log(t+1), output Σ_j A[t,j] v_j. Killed by `max(start - 1, 0)` →
    `max(start, 0)` (a later block's prev read off the diagonal), by `offset=-1 if start == 0 else 0` →
    `offset=-1`, and by `corner.masked_fill_(above[:Q, :Q], floor)` → `corner.masked_fill_(above[:Q, :Q].T, floor)`
    (the block's future keys seen)."""
    monkeypatch.setattr(blocks, "BLOCK_ELEMENTS", B * H * T * 3)
    assert blocks.row_block_rows(B, H, T, torch.device("cpu")) == 3
    generator = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(B, n, T, D, generator=generator) for n in (H, KV, KV))
    out, readout = blocks.row_attention(q, k, v, scaling=0.5)
    for b in range(B):
        for h in range(H):
            kv = h // 2
            entropy = 0.0
            columns = [0.0] * T
            for t in range(T):
                logits = [0.5 * float(q[b, h, t].double() @ k[b, kv, j].double()) for j in range(t + 1)]
                top = max(logits)
                weights = [math.exp(x - top) for x in logits]
                probs = [w / sum(weights) for w in weights]
                assert float(readout.sink[b, h, t]) == pytest.approx(probs[0], abs=1e-5)
                assert float(readout.diag[b, h, t]) == pytest.approx(probs[t], abs=1e-5)
                assert float(readout.prev[b, h, t]) == pytest.approx(probs[t - 1] if t else 0.0, abs=1e-5)
                for j in range(t + 1):
                    columns[j] += probs[j]
                if t >= 1:
                    entropy += -sum(p * math.log(p) for p in probs) / math.log(t + 1)
                expected = sum(probs[j] * v[b, kv, j].double() for j in range(t + 1))
                torch.testing.assert_close(out[b, t, h].double(), expected, atol=1e-5, rtol=1e-5)
            assert readout.columns[b, h].tolist() == pytest.approx(columns, abs=1e-5)
            assert float(readout.entropy[b, h]) == pytest.approx(entropy, abs=1e-5)


def test_packed_logits_outside_a_sliding_window_at_its_edge():
    """Packed logits per query: S[t,0], S[t,t], S[t,t−1], and two always-visible ones. W = 2: key 0 leaves the
    window at t = 2 (t − 0 = W), still in it at t = 1; key t − 1 is always in. W = 1: key 0 is out from t = 1 and key
    t − 1 everywhere. Killed by `rows >= window` → `rows > window` and by `window < 2` → `window < 1`."""
    flex_masks._outside_window.cache_clear()
    two = flex_masks._outside_window(5, 2, "cpu")
    assert two.tolist() == [[False] * 5, [False] * 5] + [[True, False, False, False, False]] * 3
    one = flex_masks._outside_window(4, 1, "cpu")
    assert one.tolist() == [[False, False, True, False, False]] + [[True, False, True, False, False]] * 3


def test_sliding_window_predicates_at_distance_w_minus_one_and_w():
    """W = 3: query t sees key j iff 0 ≤ t − j < 3; the transposed predicate of call 2 (key k sees query t) is the
    same relation with the indices swapped. Killed by `(q_idx - kv_idx < window)` → `(q_idx - kv_idx <= window)`
    and by `(kv_idx - q_idx < window)` → `(kv_idx - q_idx <= window)`."""
    causal, anti_causal = flex_masks._window_masks(3)
    q = torch.arange(6)[:, None]
    j = torch.arange(6)[None, :]
    seen = causal(0, 0, q, j)
    expected = [[0 <= t - s < 3 for s in range(6)] for t in range(6)]
    assert seen.tolist() == expected
    assert anti_causal(0, 0, q, j).tolist() == [[expected[s][t] for s in range(6)] for t in range(6)]
    assert bool(causal(0, 0, torch.tensor(5), torch.tensor(3))) and not bool(causal(0, 0, torch.tensor(5),
                                                                                    torch.tensor(2)))  # fmt: skip


def test_additive_mask_shift_is_the_largest_visible_bias_of_each_row():
    """Bias (B = 2, 1, 3, 3), the dtype's minimum where hidden. Window 0: rows (0 | ·, 50 in the causally
    hidden corner), (−1, 0), (−2, 5, −1): shifts 0, 0, 5 (the 50 above the diagonal is not a visible key); packed
    entries (bias[t,0], bias[t,t], bias[t,t−1]) − shift: (0, 0, 0), (−1, 0, −1), (−7, −6, 0). Window 1: row 0
    hidden entirely (left padding): seen 0. Killed by `rows.masked_fill(~visible, -torch.inf)` → `rows` (the
    shift reads the hidden corner) and by `previous = torch.cat([diagonal[..., :1], …` → `torch.cat([rows[..., :1, 1],
    …` (t = 0's entry no longer its own bias)."""
    low = torch.finfo(torch.float32).min
    bias = torch.full((2, 1, 3, 3), low)
    bias[0, 0] = torch.tensor([[0.0, low, 50.0], [-1.0, 0.0, low], [-2.0, 5.0, -1.0]])
    bias[1, 0] = torch.tensor([[low, low, low], [-1.0, 0.0, low], [-3.0, -2.0, 0.0]])
    flex_masks._last_additive = None
    (full, shift, seen), entries = flex_masks.additive_parts(bias, batch=2, heads=3)
    assert full.shape == (2, 3, 3, 3) and shift.shape == seen.shape == (2, 3, 3)
    assert shift[0, 0].tolist() == [0.0, 0.0, 5.0] and shift[1, 2, 1:].tolist() == [0.0, 0.0]
    assert seen.tolist() == [[[1.0, 1.0, 1.0]] * 3, [[0.0, 1.0, 1.0]] * 3]
    assert entries[0, 0].tolist() == [[0.0, 0.0, 0.0], [-1.0, 0.0, -1.0], [-7.0, -6.0, 0.0]]
    assert entries[1, 0, 1:].tolist() == [[-1.0, 0.0, -1.0], [-3.0, 0.0, -2.0]]
