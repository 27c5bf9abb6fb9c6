"""The generalized bigram-backcopy (gBB) task of SPEC §7, with its Bayes-optimal next-token distribution.

Vocabulary `0..V-1` plus BOS (id V). The triggers are ids `0..K-1` (for a corpus bigram the ids are sorted by
frequency, so the triggers are the K most frequent tokens). A sequence is `s_0 = BOS`, `s_1` uniform over the
non-triggers, then for t ≥ 1: if `s_t` is a trigger, `t-k ≥ 1` and `u < p_copy`, `s_{t+1} = s_{t-k}`; else
`s_{t+1} ~ P(s_t, ·)`. Guo et al. 2024's bigram-backcopy is k=1, p_copy=1, K=3.

`length` L counts the positions `s_0..s_{L-1}` including BOS. With `bos=False` the model sees `s_1..s_{L-1}`
(L-1 positions): the data is the same, only the BOS token is removed.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from sinkscope.errors import SinkscopeError


@dataclass(frozen=True)
class GBBConfig:
    """Parameters of the gBB task (SPEC §7)."""

    vocab_size: int = 64  # V, not counting BOS
    n_triggers: int = 3  # K; the triggers are ids 0..K-1
    copy_offset: int = 1  # k: after a trigger at t the next token copies s_{t-k}
    p_copy: float = 1.0
    dirichlet_alpha: float = 0.1  # rows of P ~ Dirichlet(alpha·1); ignored with bigram_text
    bigram_text: str = ""  # a text file whose character bigram is P (see `character_bigram`); "" = Dirichlet
    length: int = 33  # L, positions s_0..s_{L-1}, BOS included
    bos: bool = True  # False removes s_0 = BOS from the model's input
    seed: int = 0  # seeds the bigram matrix (not the sequences)

    def __post_init__(self) -> None:
        if self.vocab_size < 2:
            raise SinkscopeError(f"gBB vocab_size={self.vocab_size}: use at least 2 tokens")
        if not 1 <= self.n_triggers < self.vocab_size:
            raise SinkscopeError(
                f"gBB n_triggers={self.n_triggers}: use 1 ≤ K < vocab_size={self.vocab_size}"
            )
        if self.copy_offset < 1:
            raise SinkscopeError(f"gBB copy_offset={self.copy_offset}: the copy offset k must be ≥ 1")
        if not 0.0 <= self.p_copy <= 1.0:
            raise SinkscopeError(f"gBB p_copy={self.p_copy}: use a probability in [0, 1]")
        if not 0 < self.dirichlet_alpha < math.inf:  # NaN and inf fail too
            raise SinkscopeError(f"gBB dirichlet_alpha={self.dirichlet_alpha}: use a positive concentration")
        if self.length < self.copy_offset + 3:
            raise SinkscopeError(
                f"gBB length={self.length}: use at least copy_offset + 3 = {self.copy_offset + 3} positions "
                "so that a copy can happen"
            )

    @property
    def bos_id(self) -> int:
        return self.vocab_size


@dataclass(frozen=True)
class GBBBatch:
    """A batch of gBB sequences as the model sees them (model positions p = 0..T-1).

    `inputs` (B, T) token ids (BOS = V); `targets` (B, T) the next token (never BOS);
    `oracle` (B, T, V) the Bayes-optimal distribution of the target given the prefix;
    `is_copy` (B, T) queries whose token is a trigger with a copy source (t-k ≥ 1);
    `copy_key` (B, T) the model position of that source (p - k), -1 elsewhere;
    `is_plain` (B, T) "non-trigger queries": neither BOS nor a trigger, at model position ≥ 1 (SPEC §7: without
    BOS, model position 0 can only attend to itself, so it says nothing about a head's choice of pattern);
    `copy_offset` k, so that the copy pattern's key of any query p is p - k.
    """

    inputs: torch.Tensor
    targets: torch.Tensor
    oracle: torch.Tensor
    is_copy: torch.Tensor
    copy_key: torch.Tensor
    is_plain: torch.Tensor
    copy_offset: int


def dirichlet_bigram(config: GBBConfig) -> torch.Tensor:
    """Bigram matrix P (V, V), rows ~ Dirichlet(alpha), seeded by `config.seed`."""
    rng = np.random.default_rng(config.seed)
    alpha = np.full(config.vocab_size, config.dirichlet_alpha)
    rows = rng.dirichlet(alpha, size=config.vocab_size)
    return torch.from_numpy(rows / rows.sum(axis=1, keepdims=True))


def bigram_from_ids(ids: torch.Tensor, vocab_size: int, pseudo_count: float = 0.1) -> torch.Tensor:
    """Bigram matrix (V, V) estimated from a 1-D id sequence: transition counts plus `pseudo_count`, row-normalised."""
    ids = ids.long().flatten()
    if ids.numel() < 2 or int(ids.min()) < 0 or int(ids.max()) >= vocab_size:
        raise SinkscopeError(f"bigram ids: need ≥ 2 ids in [0, {vocab_size}), got {ids.numel()} ids")
    counts = torch.full((vocab_size, vocab_size), pseudo_count, dtype=torch.float64)
    counts.index_put_((ids[:-1], ids[1:]), torch.ones(ids.numel() - 1, dtype=torch.float64), accumulate=True)
    return counts / counts.sum(dim=1, keepdim=True)


def character_bigram(text: str, vocab_size: int, pseudo_count: float = 0.1) -> tuple[torch.Tensor, list[str]]:
    """Character bigram of `text` over its `vocab_size` most frequent characters (the rest are dropped).

    Returns (P (V, V), the characters by id). Ids are sorted by frequency, so the gBB triggers 0..K-1 are the
    K most frequent characters.
    """
    chars = [c for c, _ in Counter(text).most_common(vocab_size)]
    if len(chars) < vocab_size:
        raise SinkscopeError(
            f"bigram text: has only {len(chars)} distinct characters, fewer than vocab_size={vocab_size}; "
            "use a smaller vocab_size or a longer text"
        )
    index = {c: i for i, c in enumerate(chars)}
    ids = torch.tensor([index[c] for c in text if c in index])
    return bigram_from_ids(ids, vocab_size, pseudo_count), chars


class GBBTask:
    """A gBB task: config plus bigram matrix; samples batches with their oracle distributions."""

    def __init__(self, config: GBBConfig, bigram: torch.Tensor | None = None) -> None:
        v = config.vocab_size
        if bigram is None:
            bigram = dirichlet_bigram(config)
        if bigram.shape != (v, v) or not torch.allclose(bigram.sum(1), torch.ones(v, dtype=bigram.dtype)):
            raise SinkscopeError(f"gBB bigram: need a row-stochastic ({v}, {v}) matrix, got {tuple(bigram.shape)}")
        self.config = config
        self.bigram = bigram.double()
        self._cdf = self.bigram.cumsum(dim=1)
        self._cdf[:, -1] = 1.0  # guard against round-off so that searchsorted never runs off the end

    @classmethod
    def from_config(cls, config: GBBConfig) -> GBBTask:
        """The task with P from `config.bigram_text` when given, else Dirichlet rows."""
        if not config.bigram_text:
            return cls(config)
        path = Path(config.bigram_text)
        if not path.is_file():
            raise SinkscopeError(f"gBB bigram_text={config.bigram_text!r}: not a file; give a plain-text file")
        bigram, _ = character_bigram(path.read_text(encoding="utf-8", errors="replace"), config.vocab_size)
        return cls(config, bigram)

    @property
    def seq_len(self) -> int:
        """Number of model positions T (L-1 targets; one fewer without BOS)."""
        return self.config.length - 1 - (0 if self.config.bos else 1)

    def sample_tokens(self, batch_size: int, generator: torch.Generator) -> torch.Tensor:
        """Raw sequences `s_0..s_{L-1}` (B, L), s_0 = BOS, by the SPEC §7 recursion (vectorised over B)."""
        cfg = self.config
        k, n_trig = cfg.copy_offset, cfg.n_triggers
        s = torch.empty(batch_size, cfg.length, dtype=torch.long)
        s[:, 0] = cfg.bos_id
        s[:, 1] = n_trig + torch.randint(0, cfg.vocab_size - n_trig, (batch_size,), generator=generator)
        for t in range(1, cfg.length - 1):
            u_bigram = torch.rand(batch_size, 1, generator=generator, dtype=torch.float64)
            u_copy = torch.rand(batch_size, generator=generator, dtype=torch.float64)
            nxt = torch.searchsorted(self._cdf[s[:, t]], u_bigram).squeeze(1)
            if t - k >= 1:
                copy = (s[:, t] < n_trig) & (u_copy < cfg.p_copy)
                nxt = torch.where(copy, s[:, t - k], nxt)
            s[:, t + 1] = nxt
        return s

    def oracle(self, s: torch.Tensor) -> torch.Tensor:
        """Bayes-optimal distribution of `s_{t+1}` given `s_0..s_t`, for t = 0..L-2: (B, L-1, V) float64."""
        cfg = self.config
        b, length = s.shape
        dist = torch.empty(b, length - 1, cfg.vocab_size, dtype=torch.float64)
        dist[:, 0] = 0.0
        dist[:, 0, cfg.n_triggers:] = 1.0 / (cfg.vocab_size - cfg.n_triggers)
        dist[:, 1:] = self.bigram[s[:, 1:-1]]
        t = torch.arange(length - 1)
        eligible = (s[:, :-1] < cfg.n_triggers) & (t - cfg.copy_offset >= 1)  # BOS id V is never a trigger
        source = torch.where(eligible, s[:, (t - cfg.copy_offset).clamp_min(0)], 0)  # 0: any valid id
        copy_mass = torch.zeros_like(dist).scatter_(2, source.unsqueeze(2), 1.0)
        mixed = cfg.p_copy * copy_mass + (1 - cfg.p_copy) * dist
        return torch.where(eligible.unsqueeze(2), mixed, dist)

    def sample(self, batch_size: int, generator: torch.Generator) -> GBBBatch:
        """A batch as the model sees it, with oracle and query masks (see `GBBBatch`)."""
        cfg = self.config
        s = self.sample_tokens(batch_size, generator)
        oracle = self.oracle(s)
        t = torch.arange(cfg.length - 1)
        trig = s[:, :-1] < cfg.n_triggers
        is_copy = trig & (t - cfg.copy_offset >= 1)
        first = 0 if cfg.bos else 1  # raw index of model position 0
        is_plain = ~trig & (t >= first + 1)  # model position ≥ 1 (with BOS: raw t ≥ 1 is not BOS)
        copy_key = torch.where(is_copy, (t - cfg.copy_offset - first).expand_as(is_copy), -1)
        return GBBBatch(
            inputs=s[:, first:-1],
            targets=s[:, first + 1:],
            oracle=oracle[:, first:],
            is_copy=is_copy[:, first:],
            copy_key=copy_key[:, first:],
            is_plain=is_plain[:, first:],
            copy_offset=cfg.copy_offset,
        )

    def unigram_loss(self, batch: GBBBatch) -> float:
        """Cross-entropy (nats) of the best position-independent unigram predictor fitted on `batch` itself."""
        freq = torch.bincount(batch.targets.flatten(), minlength=self.config.vocab_size).double()
        p = freq / freq.sum()
        return float(-(p[batch.targets].log()).mean())
