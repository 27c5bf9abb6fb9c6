"""The gBB sampler against its SPEC §7 definition: copies, bigram rows (χ²), first token, oracle, no-BOS view."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from scipy import stats

from sinkscope.errors import SinkscopeError
from sinkscope.synthetic.bigram_backcopy import (
    GBBConfig,
    GBBTask,
    bigram_from_ids,
    character_bigram,
)


def sample(config: GBBConfig, batch: int, seed: int = 0) -> tuple[GBBTask, torch.Tensor]:
    task = GBBTask(config)
    return task, task.sample_tokens(batch, torch.Generator().manual_seed(seed))


@pytest.mark.parametrize("k", [1, 3])
def test_triggers_always_copy_with_p_copy_one(k: int) -> None:
    cfg = GBBConfig(vocab_size=10, n_triggers=3, copy_offset=k, p_copy=1.0, length=40)
    _, s = sample(cfg, 500)
    assert (s[:, 0] == cfg.bos_id).all()
    n_checked = 0
    for b in range(s.shape[0]):
        for t in range(1, cfg.length - 1):
            if s[b, t] < cfg.n_triggers and t - k >= 1:
                assert s[b, t + 1] == s[b, t - k]
                n_checked += 1
    assert n_checked > 1000


def test_bigram_rows_chi_square() -> None:
    cfg = GBBConfig(vocab_size=8, n_triggers=2, p_copy=1.0, dirichlet_alpha=1.0, length=65, seed=3)
    task, s = sample(cfg, 3000, seed=1)
    counts = np.zeros((8, 8))
    prev, nxt = s[:, 1:-1].flatten().numpy(), s[:, 2:].flatten().numpy()
    plain = prev >= cfg.n_triggers  # after a non-trigger the next token is a bigram draw
    np.add.at(counts, (prev[plain], nxt[plain]), 1)
    bigram = task.bigram.numpy()
    for a in range(cfg.n_triggers, 8):
        expected = bigram[a] * counts[a].sum()
        assert expected.min() > 5
        assert stats.chisquare(counts[a], expected).pvalue > 1e-3, a


def test_copy_probability_matches_mixture() -> None:
    cfg = GBBConfig(vocab_size=6, n_triggers=2, copy_offset=2, p_copy=0.5, dirichlet_alpha=1.0, length=50)
    task, s = sample(cfg, 2000, seed=2)
    bigram = task.bigram.numpy()
    s = s.numpy()
    hits, mean, var = 0, 0.0, 0.0
    for t in range(3, cfg.length - 1):  # t - k ≥ 1
        trig = s[:, t] < cfg.n_triggers
        src = s[trig, t - 2]
        p = 0.5 + 0.5 * bigram[s[trig, t], src]  # copy, or a bigram draw that lands on the source
        hits += int((s[trig, t + 1] == src).sum())
        mean += p.sum()
        var += (p * (1 - p)).sum()
    assert abs(hits - mean) / np.sqrt(var) < 4


def test_first_token_uniform_over_non_triggers() -> None:
    cfg = GBBConfig(vocab_size=12, n_triggers=4, length=5)
    _, s = sample(cfg, 8000)
    first = s[:, 1].numpy()
    assert first.min() >= cfg.n_triggers
    counts = np.bincount(first, minlength=12)[cfg.n_triggers:]
    assert stats.chisquare(counts).pvalue > 1e-3


def oracle_by_loop(task: GBBTask, s: torch.Tensor) -> np.ndarray:
    cfg, bigram = task.config, task.bigram.numpy()
    out = np.zeros((s.shape[0], s.shape[1] - 1, cfg.vocab_size))
    for b in range(s.shape[0]):
        for t in range(s.shape[1] - 1):
            if t == 0:
                out[b, t, cfg.n_triggers:] = 1 / (cfg.vocab_size - cfg.n_triggers)
                continue
            out[b, t] = bigram[s[b, t]]
            if s[b, t] < cfg.n_triggers and t - cfg.copy_offset >= 1:
                out[b, t] *= 1 - cfg.p_copy
                out[b, t, s[b, t - cfg.copy_offset]] += cfg.p_copy
    return out


def test_oracle_matches_definition_loop() -> None:
    cfg = GBBConfig(vocab_size=7, n_triggers=2, copy_offset=2, p_copy=0.7, length=20)
    task, s = sample(cfg, 16)
    np.testing.assert_allclose(task.oracle(s).numpy(), oracle_by_loop(task, s), atol=1e-12)


def test_oracle_entropy_is_the_monte_carlo_loss_of_the_oracle() -> None:
    cfg = GBBConfig(vocab_size=16, n_triggers=3, p_copy=0.8, length=33)
    task, s = sample(cfg, 4000)
    oracle = task.oracle(s)
    nll = -oracle.gather(2, s[:, 1:].unsqueeze(2)).log().mean()
    entropy = -(oracle * oracle.clamp_min(1e-300).log()).sum(-1).mean()
    assert abs(float(nll - entropy)) < 0.02


def test_batch_without_bos_is_the_same_data_shifted() -> None:
    on = GBBTask(GBBConfig(vocab_size=10, length=30)).sample(8, torch.Generator().manual_seed(5))
    off = GBBTask(GBBConfig(vocab_size=10, length=30, bos=False)).sample(8, torch.Generator().manual_seed(5))
    assert (on.inputs[:, 0] == 10).all() and not (off.inputs == 10).any()
    assert torch.equal(off.inputs, on.inputs[:, 1:]) and torch.equal(off.targets, on.targets[:, 1:])
    assert torch.equal(off.oracle, on.oracle[:, 1:]) and torch.equal(off.is_copy, on.is_copy[:, 1:])
    keys_on, keys_off = on.copy_key[:, 1:], off.copy_key
    assert torch.equal(keys_off[off.is_copy], keys_on[on.is_copy[:, 1:]] - 1)
    # the copy key points at the token to copy, in model positions
    src = off.inputs.gather(1, off.copy_key.clamp_min(0))
    assert torch.equal(src[off.is_copy], off.targets[off.is_copy])  # p_copy = 1


def test_bigram_from_ids_counts_transitions() -> None:
    ids = torch.tensor([0, 1, 1, 2, 0, 1, 2, 2, 0])
    counts = np.full((3, 3), 0.5)
    for a, b in zip(ids[:-1].tolist(), ids[1:].tolist()):
        counts[a, b] += 1
    np.testing.assert_allclose(bigram_from_ids(ids, 3, 0.5).numpy(), counts / counts.sum(1, keepdims=True))


def test_character_bigram_orders_ids_by_frequency() -> None:
    bigram, chars = character_bigram("aaaabbbcc d", 3)
    assert chars == ["a", "b", "c"] and bigram.shape == (3, 3)
    with pytest.raises(SinkscopeError, match="vocab_size"):
        character_bigram("ab", 3)


def test_task_reads_its_bigram_from_a_text_file(tmp_path) -> None:
    text = "the cat sat on the mat; a bat ate the rat.\n" * 20
    (tmp_path / "t.txt").write_text(text)
    task = GBBTask.from_config(GBBConfig(vocab_size=6, n_triggers=1, bigram_text=str(tmp_path / "t.txt")))
    torch.testing.assert_close(task.bigram, character_bigram(text, 6)[0])
    with pytest.raises(SinkscopeError, match="not a file"):
        GBBTask.from_config(GBBConfig(bigram_text=str(tmp_path / "missing.txt")))


@pytest.mark.parametrize(
    "bad", [{"n_triggers": 0}, {"copy_offset": 0}, {"p_copy": 1.5}, {"length": 3}, {"dirichlet_alpha": 0.0}]
)
def test_config_rejects_bad_values(bad: dict) -> None:
    with pytest.raises(SinkscopeError):
        GBBConfig(**bad)
