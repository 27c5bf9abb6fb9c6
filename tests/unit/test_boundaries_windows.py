"""Windows cut at their boundary and one token beside it, on inputs small enough to count by hand: the corpus's
BOS-prefixed windows (a stream of exactly k·(T−1) tokens, one more, one fewer than a window), shards and resumes,
the recent window and kept sets of `evict`, and the sink + recent window of a streaming KV head (`kv-plan`).

Each test names in its docstring the one-line bug it was seen to fail on."""

import math

import numpy as np
import pytest
import torch

from sinkscope.corpus.windows import TokenWindows, windows
from sinkscope.errors import SinkscopeError
from sinkscope.pipelines.eviction import EvictConfig, kept_sets
from sinkscope.pipelines.kv_plan import far_mass
from sinkscope.pipelines.kv_plan_eval import EvalConfig, memory_share, probe
from unit.word_tokenizer import WORDS, word_tokenizer


@pytest.fixture(scope="module")
def tokenizer():
    return word_tokenizer()


def _corpus(tmp_path, n: int) -> tuple[str, list[int]]:
    """A one-document corpus of `n` tokens a b c d e f g a b …; returns its path and its ids."""
    words = [WORDS[3 + i % 7] for i in range(n)]
    path = tmp_path / f"c{n}.txt"
    path.write_text(" ".join(words))
    return str(path), [WORDS.index(w) for w in words]


def test_a_stream_of_exactly_whole_windows_has_no_tail_and_one_more_token_is_a_tail(tmp_path, tokenizer):
    """T = 4 (bodies of 3): 6 tokens are two windows and nothing else; 7 tokens add a last window of the final 3
    (2 of them analysed twice), or drop the 1 with `tail="drop"`. Killed by `if buffer and last` →
    `if len(buffer) > 1 and last` (a tail of one token ignored)."""
    six, ids6 = _corpus(tmp_path, 6)
    exact = windows(six, tokenizer, seq_len=4)
    assert torch.cat(list(exact)).tolist() == [[0, 3, 4, 5], [0, 6, 7, 8]]
    assert exact.tokens() == {"read": 6, "analysed": 6, "overlap": 0, "dropped": 0, "windows": 2, "complete": True}
    seven, ids7 = _corpus(tmp_path, 7)
    tail = windows(seven, tokenizer, seq_len=4)
    assert torch.cat(list(tail)).tolist() == [[0, 3, 4, 5], [0, 6, 7, 8], [0, 7, 8, 9]]
    assert tail.tokens() == {"read": 7, "analysed": 7, "overlap": 2, "dropped": 0, "windows": 3, "complete": True}
    dropped = windows(seven, tokenizer, seq_len=4, tail="drop")
    assert torch.cat(list(dropped)).tolist() == [[0, 3, 4, 5], [0, 6, 7, 8]]
    assert dropped.tokens() == {"read": 7, "analysed": 6, "overlap": 0, "dropped": 1, "windows": 2, "complete": True}


def test_a_corpus_of_exactly_one_window_body_is_one_window_and_one_token_fewer_is_none(tmp_path, tokenizer):
    """4 tokens fill one window at T = 5 exactly (no tail window), none at T = 6; T = 2, the shortest window, cuts
    them into 4 windows of one token. Killed by `while len(buffer) >= body` → `while len(buffer) > body`."""
    path, ids = _corpus(tmp_path, 4)
    one = windows(path, tokenizer, seq_len=5)
    assert torch.cat(list(one)).tolist() == [[0, 3, 4, 5, 6]]
    assert one.tokens()["overlap"] == 0 and one.count == 1
    with pytest.raises(SinkscopeError, match="gave 4 tokens; one window of --seq-len 6 needs 5"):
        list(windows(path, tokenizer, seq_len=6))
    assert torch.cat(list(windows(path, tokenizer, seq_len=2))).tolist() == [[0, 3], [0, 4], [0, 5], [0, 6]]


def test_token_windows_of_two_tokens_are_accepted_and_of_one_refused():
    """Killed by `self.ids.shape[1] < 2` → `self.ids.shape[1] <= 2`."""
    assert TokenWindows(torch.tensor([[0, 5]])).seq_len == 2
    with pytest.raises(SinkscopeError):
        TokenWindows(torch.tensor([[0]]))


def test_windows_seq_len_two_is_accepted_and_one_refused(tmp_path, tokenizer):
    """Killed by `if self.seq_len < 2` → `if self.seq_len <= 2`."""
    path, _ = _corpus(tmp_path, 3)
    assert windows(path, tokenizer, seq_len=2).seq_len == 2
    with pytest.raises(SinkscopeError, match="--seq-len 1 is too short"):
        windows(path, tokenizer, seq_len=1)


def test_a_shard_resumed_after_skip_windows_starts_at_the_next_one_of_its_own(tmp_path, tokenizer):
    """12 tokens at T = 3 are 6 windows (0…5); shard (1, 2) holds 1, 3, 5; after skipping 1 of them, 3 and 5; after
    skipping 3, none. `max_windows = 4` stops after window 3. Killed by `if mine > skip` → `if mine >= skip`."""
    path, ids = _corpus(tmp_path, 12)
    stream = windows(path, tokenizer, seq_len=3, batch_size=8)
    body = [[0, *ids[2 * i: 2 * i + 2]] for i in range(6)]
    assert torch.cat(list(stream.batches((1, 2), skip=1))).tolist() == [body[3], body[5]]
    assert torch.cat(list(stream.batches((1, 2), skip=0))).tolist() == [body[1], body[3], body[5]]
    assert list(stream.batches((1, 2), skip=3)) == []
    limited = windows(path, tokenizer, seq_len=3, max_windows=4, batch_size=8)
    assert torch.cat(list(limited.batches((0, 2)))).tolist() == [body[0], body[2]] and limited.count == 4


def test_evict_accepts_the_longest_window_and_the_largest_kept_set_and_refuses_one_more():
    """T = 10: the recent window w = 8 leaves query 8 (target 9) evicted; w = 9 leaves none. A kept set of 9 of the
    10 positions fits, 10 does not. Killed by `seq_len - 1 <= self.window` → `seq_len - 1 < self.window`, and by
    `max(self.ks) >= seq_len` → `max(self.ks) > seq_len`."""
    EvictConfig(window=8, ks=(0, 9)).check_seq_len(10)
    with pytest.raises(SinkscopeError, match="--window 9 leaves no evicted query in windows of 10 tokens"):
        EvictConfig(window=9).check_seq_len(10)
    with pytest.raises(SinkscopeError, match="--ks 10 keeps more tokens than a window of 10"):
        EvictConfig(window=2, ks=(10,)).check_seq_len(10)
    EvictConfig(window=1, ks=(0,))  # w = 1: the query alone; k = 0: the recent window alone
    for bad in ({"window": 0}, {"ks": (-1,)}, {"ks": ()}):
        with pytest.raises(SinkscopeError):
            EvictConfig(**bad)


def test_kept_sets_take_the_k_largest_columns_of_each_window_in_position_order():
    """Column masses of B = 2 windows of T = 5, written so the top-k indices come out of order: window 0's three
    largest are 2 (5), 0 (4), 4 (3) → kept {0, 2, 4}; window 1's are 1, 3, 4. The first-k set is 0..k−1 in every
    window; k = 0 is the recent window alone. Killed by dropping `.sort(dim=1).values` and by `topk(..., dim=1)` →
    `dim=0`-style reads (`mass.shape[1]` → `mass.shape[0]` caps k at B = 2)."""
    mass = torch.tensor([[4.0, 1.0, 5.0, 2.0, 3.0], [0.0, 9.0, 1.0, 8.0, 2.0]])
    sets = {(p, k): kept.tolist() for p, k, kept in kept_sets(EvictConfig(window=2, ks=(3, 0, 1)), mass)}
    assert sets == {("recent", 0): [[], []], ("first", 1): [[0], [0]], ("top-mass", 1): [[2], [1]],
                    ("first", 3): [[0, 1, 2], [0, 1, 2]], ("top-mass", 3): [[0, 2, 4], [1, 3, 4]]}  # fmt: skip


def test_far_mass_starts_at_the_first_query_that_loses_a_key():
    """sink_size = 1, recent_size = 2 at T = 4: only query t = 3 loses a key (key 1: j ≥ 1 and t − j ≥ 2), so far mass
    is A[3, 1], averaged over the B = 2 windows per head (H = 3 heads, each its own value). At T = 3 no query loses
    a key: NaN. Killed by `[..., sink_size + recent_size:]` → `[..., sink_size + recent_size - 1:]` (query 2 counted)
    and by `t - j >= recent_size` → `t - j > recent_size`."""
    attn = torch.zeros(2, 3, 4, 4, dtype=torch.float64)
    attn[..., 0, 0] = 1.0
    attn[..., 1, :2] = 0.5
    attn[..., 2, :3] = 1 / 3
    for b, h in np.ndindex(2, 3):
        a31 = 0.1 * (1 + h) + 0.05 * b  # head h, window b: 0.1, 0.2, 0.3 (+0.05 in window 1)
        attn[b, h, 3] = torch.tensor([0.1, a31, 0.0, 0.9 - a31], dtype=torch.float64)
    assert far_mass(attn, 1, 2).tolist() == pytest.approx([0.125, 0.225, 0.325], abs=1e-15)
    assert far_mass(attn, 0, 3).tolist() == pytest.approx([0.1] * 3, abs=1e-15)  # sink 0: key 0 lost at t = 3
    assert all(math.isnan(v) for v in far_mass(attn[..., :3, :3], 1, 2).tolist())


def test_kv_plan_probe_copies_from_position_one_without_sinks_and_from_the_sink_size_with_them():
    """T = 8, span 3: the probe is ids[:5] followed by ids[a:a+3], a = max(sink_size, 1). Killed by
    `max(sink_size, 1)` → `sink_size` in `probe`."""
    ids = torch.arange(10, 18)[None]
    assert probe(ids, 3, 0).tolist() == [[10, 11, 12, 13, 14, 11, 12, 13]]
    assert probe(ids, 3, 1).tolist() == [[10, 11, 12, 13, 14, 11, 12, 13]]
    assert probe(ids, 3, 2).tolist() == [[10, 11, 12, 13, 14, 12, 13, 14]]


def test_kv_plan_eval_length_at_its_minimum_and_one_below():
    """span 4, sink 2, recent 3: the copy starts at a = 2 and its copy queries start at P = T − 4, so P − a − 1 ≥ 3
    needs T ≥ 10. Killed by `P - start - 1 < recent_size` → `P - start - 1 <= recent_size`."""
    config = EvalConfig(span=4)
    config.check_lengths(10, 2, 3)
    with pytest.raises(SinkscopeError, match="--seq-len 9 leaves the copied span"):
        config.check_lengths(9, 2, 3)
    config.check_lengths(9, 0, 3)  # no sinks: the copy starts at a = 1, one position earlier


def test_kv_plan_eval_refusal_names_the_shortest_length_that_passes():
    """span 4, sink 2, recent 3: T = 10 passes (previous test), so the refusal of T = 9 should advise 10, not 11. Fix:
    `{self.span + start + recent_size + 1}` in `EvalConfig.check_lengths`'s message."""
    with pytest.raises(SinkscopeError, match="use --seq-len ≥ 10$"):
        EvalConfig(span=4).check_lengths(9, 2, 3)


def test_memory_share_when_the_streaming_window_reaches_the_whole_window_and_one_short_of_it():
    """1 full KV head of 4 at T = 6: a streaming head keeps min(6, sink + recent) keys, so sink + recent = 7 or 6 keep
    everything (share 1) and 5 keeps 5 of 6: (6 + 3·5) / 24 = 7/8. Killed by dropping the `min(seq_len, …)`."""
    assert memory_share(1, 4, 6, 2, 5) == 1.0
    assert memory_share(1, 4, 6, 2, 4) == 1.0
    assert memory_share(1, 4, 6, 2, 3) == 21 / 24
    assert memory_share(0, 4, 6, 0, 1) == 4 / 24
