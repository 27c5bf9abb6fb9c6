"""The key-token table (SPEC §2): which tokens receive attention, per token id and per (token id, layer)."""

from __future__ import annotations

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
    distinct id and folded in at `end_batch`. `compute` gives `tokens` (per id: `token` decoded alone, `n`,
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
        self._batch: dict[str, Tensor] = {}

    def begin_batch(self, ids: Tensor, window_ids: Tensor) -> None:
        keys = ids[:, 1 : self.seq_len - 1].to(self.device)  # positions 1..T-2 (SPEC §2)
        self._batch_ids, rows = torch.unique(keys, return_inverse=True)
        self._batch_rows = rows.flatten()  # (B·(T-2),) occurrence → row of its id
        counts = torch.bincount(self._batch_rows, minlength=len(self._batch_ids)).double()
        self._batch = {name: counts.new_zeros(len(counts), self.n_layers) for name in ("received", "received_exceed")}
        self._batch["n"] = counts

    def on_columns(self, layer: int, columns: Columns) -> None:
        if self.seq_len < 3:
            return  # no key has both a predecessor (BOS) and a later query
        if self._batch_ids is None:
            raise SinkscopeError("the key-token table needs begin_batch(ids) before each forward pass")
        received = received_from_columns(columns.columns, columns.diagonal)  # (..., B, H, T-2)
        per_occurrence = {
            "received": received.sum(-2).flatten(-2),  # summed over heads: (..., B·(T-2))
            "received_exceed": (received > self.epsilon).sum(-2).flatten(-2).double(),
        }
        rows = self._batch_rows.view(-1, 1)  # (B·(T-2), 1) occurrence → row of its id
        layers = device_index(layer if isinstance(layer, tuple) else (layer,), str(rows.device)).view(1, -1)  # (1, L')
        for name, value in per_occurrence.items():  # layers may sit on other devices (--device-map auto)
            value = value.to(rows.device).view(-1, rows.shape[0]).T  # (B·(T-2), L')
            self._batch[name].index_put_((rows, layers), value, accumulate=True)

    def end_batch(self, batch_size: int) -> None:
        if self._batch_ids is not None:
            self.table.add(self._batch_ids, self._batch)
        self._batch_ids, self._batch = None, {}

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
