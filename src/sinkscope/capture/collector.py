"""The streaming state of an analysis: folds every attention block and layer input into accumulators.

What it keeps grows with layers × heads × T (and a capped sample of attention inputs per layer, and a key-token
table bounded by the vocabulary), never with the number of windows; no layer's attention outlives its block
(STYLE practice 7). Per-window quantities (Gu et al.'s per-window thresholds, the attention each key receives)
need a window's whole column sums, which the query blocks of one layer build up: the collector keeps them for
the current batch and layer only, and reduces them to counts when the layer's last block arrives.
"""

from __future__ import annotations

import torch
from torch import Tensor

from sinkscope.capture.accumulator import Accumulator, KeyedAccumulator
from sinkscope.capture.attention import LayerRows
from sinkscope.errors import SinkscopeError
from sinkscope.stats.geometry import bos_geometry_sums
from sinkscope.stats.patterns import (
    exceed_counts,
    key_scores_from_columns,
    pattern_block_sums,
    pattern_row_sums,
    received_from_columns,
)
from sinkscope.stats.switch import switch_block_sums, value_drain

HEAD_SUMS = (
    "sink", "diag", "prev", "entropy", "hard_sink", "hard_diag", "upper_mass", "row_total",
    "ahon", "n_off_sink", "n_off_nosink", "n_on_sink", "n_on_nosink", "value_drain",
)  # fmt: skip
GEOMETRY_SUMS = ("cos_sum", "cos_max", "cos_nonpos", "norm_ratio_sum")


class StatsCollector:
    """Accumulates SPEC §2–§4 sums for `n_layers` layers of `n_heads` heads over windows of `seq_len` tokens.

    `delta` is the hard-pattern threshold, `tau` the switch threshold, `sample_cap` the number of context
    attention inputs kept per layer (a uniform sample without replacement over all windows, by random
    priorities seeded by `seed` and the window index, for the half-space certificates of SPEC §4). `device`
    holds the sums. `epsilons`: sink-rate thresholds counted per window (`key_exceed[e, l, h, k]` = windows
    with `α^w_{l,h,k} > ε_e`); the key-token table (`tokens`: per token id `n`, and per layer the sums over
    heads of `received` and of `[received > ε_0]`) uses the first. Call `begin_batch(ids)` before each forward.
    """

    def __init__(
        self,
        n_layers: int,
        n_heads: int,
        group: int,
        seq_len: int,
        delta: float,
        tau: float,
        sample_cap: int = 512,
        seed: int = 0,
        device: torch.device | str = "cpu",
        epsilons: tuple[float, ...] = (0.3,),
    ) -> None:
        L, H, T = n_layers, n_heads, seq_len
        shapes = {name: (L, H) for name in HEAD_SUMS}
        shapes |= {"keys": (L, H, T), "key_exceed": (len(epsilons), L, H, T), "mlp_like": (L,), "windows": ()}
        shapes |= {f"{kind}_{name}": (L,) for kind in "hz" for name in GEOMETRY_SUMS}
        # Sums live on the model's device, so a GPU run never waits on a host copy per block.
        self.acc = Accumulator(shapes, maxima=frozenset({"h_cos_max", "z_cos_max"}), device=device)
        self.tokens = KeyedAccumulator({"n": (), "received": (L,), "received_exceed": (L,)}, device=device)
        self.epsilons = torch.tensor(epsilons, dtype=torch.float64, device=device)
        self.token_epsilon = float(epsilons[0])
        self.group, self.seq_len, self.delta, self.tau = group, seq_len, delta, tau
        self.sample_cap, self.seed = sample_cap, seed
        self.samples: dict[int, tuple[Tensor, Tensor]] = {}  # layer -> (priorities (n,), unit z rows (n, d))
        self.sink_inputs: dict[int, Tensor] = {}  # layer -> z_0 (d,), identical in every window
        self.dtype_name = "float32"
        self.shard = (0, 1)  # (rank, world): window i of this shard is window rank + world·i of the corpus
        self._value_norms: dict[int, Tensor] = {}
        self._windows = 0
        # The current batch: its column sums and diagonals per layer (B, H, T), until the layer's last block;
        # its distinct token ids at positions 1..T-2, each occurrence's row among them, and their sums (U, L).
        self._columns: dict[int, Tensor] = {}
        self._diagonal: dict[int, Tensor] = {}
        self._batch_ids: Tensor | None = None
        self._batch_rows = torch.empty(0, dtype=torch.long)
        self._batch_tokens: dict[str, Tensor] = {}

    @property
    def windows(self) -> int:
        """Windows folded in so far (a host-side count, so reading it never waits on the device)."""
        return self._windows

    def on_values(self, layer: int, value: Tensor) -> None:
        """Value vectors (B, KV, T, Dv) of a layer, before its attention blocks arrive."""
        norms = value.float().norm(dim=-1).repeat_interleave(self.group, dim=1)  # (B, H, T)
        self._value_norms[layer] = norms
        self.acc.add("value_drain", (layer,), value_drain(norms).sum(0))

    def on_block(self, layer: int, start: int, probs: Tensor, entropy: Tensor, out: Tensor) -> None:
        """One block of queries of one layer: probs (B, H, Q, K), entropy (B, H, Q), out (B, H, Q, Dv)."""
        self._check_finite(layer, entropy.sum((1, 2)) + out.sum((1, 2, 3)))
        sums, hard_sink, hard_diag = pattern_block_sums(probs, start, self.delta, entropy)
        self._fold_columns(layer, start, sums.pop("columns"), sums.pop("diagonal"))
        self._fold_rows(layer, start, sums, hard_sink, hard_diag, out.norm(dim=-1))

    def on_layer(self, layer: int, rows: LayerRows) -> None:
        """One layer's whole attention over the batch, from the fused path (`LayerRows`, no map)."""
        self._check_finite(layer, rows.entropy.sum(1) + rows.out_norms.sum((1, 2)))
        sums, hard_sink, hard_diag = pattern_row_sums(rows.sink, rows.diag, rows.prev, 0, self.delta)
        # The kernel masks causally by construction (no mass above the diagonal); the rows' total mass is checked
        # through the column sums, which the second kernel call computes from the first call's normalisers.
        sums |= {"entropy": rows.entropy.sum(0), "row_total": rows.columns.sum((0, 2))}
        self._fold_columns(layer, 0, rows.columns, rows.diag.double())
        self._fold_rows(layer, 0, sums, hard_sink, hard_diag, rows.out_norms)

    def _check_finite(self, layer: int, window_sums: Tensor) -> None:
        """NaN and ±inf survive a sum, so one sum (B,) per window checks a whole block or layer cheaply."""
        finite = torch.isfinite(window_sums)
        if not finite.all():
            bad = (~finite).nonzero().flatten().tolist()
            rank, world = self.shard
            first = rank + world * (self.windows + bad[0])
            hint = "check the model's weights" if self.dtype_name == "float32" else "rerun with --dtype float32"
            raise SinkscopeError(
                f"window {first} gave non-finite attention in layer {layer} (NaN or overflow in "
                f"{self.dtype_name}); {hint}"
            )

    def _fold_rows(
        self, layer: int, start: int, sums: dict[str, Tensor], hard_sink: Tensor, hard_diag: Tensor, out_norms: Tensor
    ) -> None:
        """Add per-head sums of queries `start..` and the switch and MLP-like counts of their rows (B, H, Q)."""
        sums |= switch_block_sums(out_norms, self._value_norms[layer], hard_sink, start, self.tau)
        for name, value in sums.items():
            self.acc.add(name, (layer,), value)
        rows = torch.arange(start, start + out_norms.shape[2], device=out_norms.device)
        every_head = (hard_sink | hard_diag).all(dim=1) & (rows >= 1)  # (B, Q): the layer acts like an MLP
        self.acc.add("mlp_like", (layer,), every_head.sum().double())

    def begin_batch(self, ids: Tensor) -> None:
        """The token ids (B, T) of the next forward pass, for the key-token table."""
        if self._batch_ids is not None:
            raise SinkscopeError("begin_batch called twice without end_batch")
        keys = ids[:, 1 : self.seq_len - 1].to(self.epsilons.device)  # positions 1..T-2 (SPEC §2)
        self._batch_ids, rows = torch.unique(keys, return_inverse=True)
        self._batch_rows = rows.flatten()  # (B·(T-2),) occurrence → row of its id
        n_layers = self.acc.tensors["keys"].shape[0]
        counts = torch.bincount(self._batch_rows, minlength=len(self._batch_ids)).double()
        self._batch_tokens = {name: counts.new_zeros(len(counts), n_layers) for name in ("received", "received_exceed")}
        self._batch_tokens["n"] = counts

    def _fold_columns(self, layer: int, start: int, columns: Tensor, diagonal: Tensor) -> None:
        """Add a block's column sums (B, H, K) and diagonal (B, H, Q) to the layer's per-window buffers; after the
        layer's last block, reduce them (the blocks of a layer arrive in order, first at `start` 0)."""
        B, H, K = columns.shape
        if start == 0:
            self._columns[layer] = columns.new_zeros(B, H, self.seq_len)
            self._diagonal[layer] = columns.new_zeros(B, H, self.seq_len)
        self._columns[layer][..., :K] += columns
        self._diagonal[layer][..., start : start + diagonal.shape[-1]] = diagonal
        if start + diagonal.shape[-1] == self.seq_len:
            self._end_layer(layer, self._columns.pop(layer), self._diagonal.pop(layer))

    def _end_layer(self, layer: int, columns: Tensor, diagonal: Tensor) -> None:
        """Per-window reductions of one layer's complete column sums and diagonal (B, H, T) (SPEC §2)."""
        self.acc.add("keys", (layer,), columns.sum(0))
        scores = key_scores_from_columns(columns)  # (B, H, T): α^w_{l,h,k}
        self.acc.add("key_exceed", (slice(None), layer), exceed_counts(scores, self.epsilons))
        if self.seq_len < 3:
            return  # no key has both a predecessor (BOS) and a later query
        if self._batch_ids is None:
            raise SinkscopeError("the collector needs begin_batch(ids) before each forward pass")
        received = received_from_columns(columns, diagonal)  # (B, H, T-2)
        per_occurrence = {
            "received": received.sum(1).flatten(),  # summed over heads
            "received_exceed": (received > self.token_epsilon).sum(1).flatten().double(),
        }
        for name, value in per_occurrence.items():  # layers may sit on other devices (--device-map auto)
            self._batch_tokens[name][:, layer].index_add_(0, self._batch_rows, value.to(self._batch_rows.device))

    def on_layer_input(self, layer: int, h: Tensor, z: Tensor) -> None:
        """Residual input `h` and attention input `z` (B, T, d) of a layer (SPEC §4)."""
        for kind, x in (("h", h), ("z", z)):
            for name, value in bos_geometry_sums(x).items():
                self.acc.add(f"{kind}_{name}", (layer,), value)
        if self.sample_cap > 0:
            self._sample(layer, z)

    def _sample(self, layer: int, z: Tensor) -> None:
        if layer not in self.sink_inputs:
            self.sink_inputs[layer] = z[0, 0].detach().float().cpu()
        rows = z[:, 1:].detach().float().reshape(-1, z.shape[-1]).cpu()
        rows = rows / rows.norm(dim=-1, keepdim=True).clamp_min(1e-30)
        # A token's priority depends only on the seed and its window's index in the corpus, so the sample is
        # the same however windows are sharded across ranks or split by a resume.
        rank, world = self.shard
        priorities = torch.cat([
            torch.rand(z.shape[1] - 1, generator=torch.Generator().manual_seed(
                self.seed * 1_000_003 + rank + world * (self.windows + b)))
            for b in range(z.shape[0])
        ])  # fmt: skip
        if layer in self.samples:
            old_priorities, old_rows = self.samples[layer]
            priorities, rows = torch.cat([old_priorities, priorities]), torch.cat([old_rows, rows])
        if len(priorities) > self.sample_cap:
            keep = priorities.topk(self.sample_cap, largest=False).indices
            priorities, rows = priorities[keep], rows[keep]
        self.samples[layer] = (priorities, rows)

    def end_batch(self, batch_size: int) -> None:
        self.acc.tensors["windows"] += batch_size
        self._windows += batch_size
        self._value_norms.clear()
        if self._columns:
            raise SinkscopeError(f"layers {sorted(self._columns)} never reached their last query block")
        if self._batch_ids is not None:
            self.tokens.add(self._batch_ids, self._batch_tokens)
        self._batch_ids, self._batch_tokens = None, {}

    def state(self) -> dict[str, Tensor]:
        """Everything needed to continue exactly where this collector stands (for checkpoints)."""
        state = {f"acc.{name}": tensor.cpu() for name, tensor in self.acc.tensors.items()}
        for layer, (priorities, rows) in self.samples.items():
            state[f"sample_priorities.{layer}"], state[f"sample_rows.{layer}"] = priorities, rows
        state |= {f"sink_input.{layer}": z0 for layer, z0 in self.sink_inputs.items()}
        return state | self.tokens.state("tokens")

    def load_state(self, state: dict[str, Tensor]) -> None:
        """Restore a `state()` (same model, T and thresholds)."""
        missing = sorted({f"acc.{name}" for name in self.acc.tensors} - set(state))
        if missing:
            raise SinkscopeError(
                f"the checkpoint lacks {', '.join(missing)} (written by an older sinkscope); rerun without --resume"
            )
        self.tokens.load_state(state, "tokens")
        for name, tensor in self.acc.tensors.items():
            tensor.copy_(state[f"acc.{name}"].to(tensor.device))
        self.samples = {
            int(key.split(".")[1]): (value, state[f"sample_rows.{key.split('.')[1]}"])
            for key, value in state.items()
            if key.startswith("sample_priorities.")
        }
        self.sink_inputs = {int(k.split(".")[1]): v for k, v in state.items() if k.startswith("sink_input.")}
        self._windows = int(self.acc.tensors["windows"])

    def all_reduce(self) -> None:
        """Combine the collectors of every `torch.distributed` rank: sums add, maxima max, and the attention-input
        samples merge by keeping the smallest priorities (still a uniform sample of all windows)."""
        import torch.distributed as dist

        self.acc.all_reduce()
        self.tokens.all_reduce()
        self._windows = int(self.acc.tensors["windows"])
        gathered: list[tuple[dict, dict]] = [({}, {})] * dist.get_world_size()
        dist.all_gather_object(gathered, (self.samples, self.sink_inputs))
        merged: dict[int, tuple[Tensor, Tensor]] = {}
        for samples, sink_inputs in gathered:
            for layer, (priorities, rows) in samples.items():
                if layer in merged:
                    priorities, rows = torch.cat([merged[layer][0], priorities]), torch.cat([merged[layer][1], rows])
                keep = priorities.topk(min(self.sample_cap, len(priorities)), largest=False).indices
                merged[layer] = (priorities[keep], rows[keep])
            for layer, z0 in sink_inputs.items():
                self.sink_inputs.setdefault(layer, z0)
        self.samples = merged
