"""The key-token table (SPEC §2): which tokens receive attention, per token id and per (token id, layer)."""

from __future__ import annotations

import functools

import numpy as np
import pandas as pd
import torch
from torch import Tensor

from sinkscope.errors import SinkscopeError
from sinkscope.functional.patterns import received_from_columns
from sinkscope.statistics.state import KeyedSum, device_index
from sinkscope.statistics.statistic import Columns, Statistic, Tables


class KeyTokens(Statistic):
    """Per token id over its occurrences at positions 1..T−2: `n`, and per layer the sums over heads of
    `received_k = mean_{t>k} A[t,k]` and of `[received_k > ε]` (ε = `epsilon`). The batch's sums are built per
    distinct id (one tensor for both sums, one indexed add per event) and folded in at `end_batch`. `compute` gives `tokens` (per id: `token` decoded alone, `n`,
    `received_mean`, `sink_frac`, sorted by `sink_frac`) and `token_layers` (per id and layer); `tokenizer` may be
    None (then `token` is the id)."""

    name = "key_tokens"
    stacked = True

    def __init__(self, n_layers: int, n_heads: int, seq_len: int, epsilon: float, tokenizer=None, device="cpu") -> None:
        super().__init__()
        self.n_layers, self.n_heads, self.seq_len, self.epsilon = n_layers, n_heads, seq_len, epsilon
        self.tokenizer, self.device = tokenizer, device
        self.table = self.add_state("table", KeyedSum({"n": (), "received": (n_layers,), "received_exceed": (n_layers,)}, device))
        self._batch_ids: Tensor | None = None
        self._batch_rows = torch.empty(0, dtype=torch.long)
        self._batch_n = torch.empty(0, dtype=torch.float64)
        self._batch_sums = torch.empty(0, 2, n_layers, dtype=torch.float64)  # per id: received, received_exceed × layer

    def begin_batch(self, ids: Tensor, window_ids: Tensor) -> None:
        keys = ids[:, 1 : self.seq_len - 1].to(self.device)  # positions 1..T-2 (SPEC §2)
        self._batch_ids, rows, counts = torch.unique(keys, return_inverse=True, return_counts=True)
        self._batch_rows = rows.view(-1, 1, 1)  # (B·(T-2), 1, 1) occurrence → row of its id
        self._batch_n = counts.double()
        self._batch_sums = self._batch_n.new_zeros(len(self._batch_n), 2, self.n_layers)

    def on_columns(self, layer: int, columns: Columns) -> None:
        if self.seq_len < 3:
            return  # no key has both a predecessor (BOS) and a later query
        if self._batch_ids is None:
            raise SinkscopeError("the key-token table needs begin_batch(ids) before each forward pass")
        received = received_from_columns(columns.columns, columns.diagonal)  # (..., B, H, T-2)
        # summed over heads, (2, ..., B, T-2): received_k, and [received_k > ε]
        both = torch.stack([received.sum(-2), (received > self.epsilon).sum(-2, dtype=torch.float64)])
        rows = self._batch_rows  # (B·(T-2), 1, 1) occurrence → row of its id
        value = both.to(rows.device).view(2, -1, rows.shape[0]).permute(2, 0, 1)  # (B·(T-2), 2, L')
        layers = layer if isinstance(layer, tuple) else (layer,)  # layers may sit on other devices (--device-map auto)
        self._batch_sums.index_put_((rows, _index((0, 1), 1, str(rows.device)), _index(layers, 2, str(rows.device))),
                                    value, accumulate=True)  # fmt: skip

    def end_batch(self, batch_size: int) -> None:
        if self._batch_ids is not None:
            received, exceed = self._batch_sums.unbind(1)
            self.table.add(self._batch_ids, {"n": self._batch_n, "received": received, "received_exceed": exceed})
        self._batch_ids = None

    def compute(self, windows: int) -> Tables:
        ids = self.table.keys.cpu().numpy()
        n = self.table.values["n"].cpu().numpy()
        received, exceed = (self.table.values[name].cpu().numpy() for name in ("received", "received_exceed"))  # (N, L)
        L, H = self.n_layers, self.n_heads
        decoded = [self.tokenizer.decode([int(i)]) if self.tokenizer is not None else str(int(i)) for i in ids]
        tokens = pd.DataFrame({
            "token_id": ids, "token": decoded, "n": n.astype(np.int64),
            "received_mean": received.sum(1) / (n * L * H), "sink_frac": exceed.sum(1) / (n * L * H),
        }).sort_values(["sink_frac", "received_mean"], ascending=False, ignore_index=True)  # fmt: skip
        token_layers = pd.DataFrame({
            "token_id": np.repeat(ids, L), "layer": np.tile(np.arange(L), len(ids)), "n": np.repeat(n, L).astype(np.int64),
            "received_mean": (received / (n[:, None] * H)).flatten(), "sink_frac": (exceed / (n[:, None] * H)).flatten(),
        })  # fmt: skip
        return Tables(extra={"tokens": tokens, "token_layers": token_layers})


@functools.cache
def _index(values: tuple[int, ...], axis: int, device: str) -> Tensor:
    """`values` as a long tensor along `axis` of three (e.g. (1, n, 1) for axis 1) on `device`, made once."""
    return device_index(values, device).view(*(len(values) if a == axis else 1 for a in range(3)))
