"""The streaming state of an analysis: folds every attention block and layer input into accumulators.

What it keeps grows with layers × heads × T (and a capped sample of attention inputs per layer), never with the
number of windows; no layer's attention outlives its block (STYLE practice 7).
"""

from __future__ import annotations

import torch
from torch import Tensor

from sinkscope.capture.accumulator import Accumulator
from sinkscope.errors import SinkscopeError
from sinkscope.stats.geometry import bos_geometry_sums
from sinkscope.stats.patterns import pattern_block_sums
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
    holds the sums.
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
    ) -> None:
        L, H, T = n_layers, n_heads, seq_len
        shapes = {name: (L, H) for name in HEAD_SUMS}
        shapes |= {"keys": (L, H, T), "mlp_like": (L,), "windows": ()}
        shapes |= {f"{kind}_{name}": (L,) for kind in "hz" for name in GEOMETRY_SUMS}
        # Sums live on the model's device, so a GPU run never waits on a host copy per block.
        self.acc = Accumulator(shapes, maxima=frozenset({"h_cos_max", "z_cos_max"}), device=device)
        self.group, self.seq_len, self.delta, self.tau = group, seq_len, delta, tau
        self.sample_cap, self.seed = sample_cap, seed
        self.samples: dict[int, tuple[Tensor, Tensor]] = {}  # layer -> (priorities (n,), unit z rows (n, d))
        self.sink_inputs: dict[int, Tensor] = {}  # layer -> z_0 (d,), identical in every window
        self.dtype_name = "float32"
        self.shard = (0, 1)  # (rank, world): window i of this shard is window rank + world·i of the corpus
        self._value_norms: dict[int, Tensor] = {}
        self._windows = 0

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
        # NaN and ±inf survive a sum, so one reduction per window checks the whole block cheaply.
        finite = torch.isfinite(entropy.sum((1, 2)) + out.sum((1, 2, 3)))  # (B,)
        if not finite.all():
            bad = (~finite).nonzero().flatten().tolist()
            rank, world = self.shard
            first = rank + world * (self.windows + bad[0])
            hint = "check the model's weights" if self.dtype_name == "float32" else "rerun with --dtype float32"
            raise SinkscopeError(
                f"window {first} gave non-finite attention in layer {layer} (NaN or overflow in "
                f"{self.dtype_name}); {hint}"
            )
        sums, hard_sink, hard_diag = pattern_block_sums(probs, start, self.delta, entropy)
        keys = sums.pop("keys")
        self.acc.add("keys", (layer, slice(None), slice(0, keys.shape[-1])), keys)
        sums |= switch_block_sums(out.norm(dim=-1), self._value_norms[layer], hard_sink, start, self.tau)
        for name, value in sums.items():
            self.acc.add(name, (layer,), value)
        rows = torch.arange(start, start + probs.shape[2], device=probs.device)
        every_head = (hard_sink | hard_diag).all(dim=1) & (rows >= 1)  # (B, Q): the layer acts like an MLP
        self.acc.add("mlp_like", (layer,), every_head.sum().double())

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

    def state(self) -> dict[str, Tensor]:
        """Everything needed to continue exactly where this collector stands (for checkpoints)."""
        state = {f"acc.{name}": tensor.cpu() for name, tensor in self.acc.tensors.items()}
        for layer, (priorities, rows) in self.samples.items():
            state[f"sample_priorities.{layer}"], state[f"sample_rows.{layer}"] = priorities, rows
        state |= {f"sink_input.{layer}": z0 for layer, z0 in self.sink_inputs.items()}
        return state

    def load_state(self, state: dict[str, Tensor]) -> None:
        """Restore a `state()` (same model, T and thresholds)."""
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
