"""Named float64 tensors that merge by sum (or by max): the streaming state of a run (STYLE practice 7).

Their size depends on the model and T only, never on the number of windows, so a run over any corpus holds
constant memory; accumulators over disjoint windows combine (sum or max) into the accumulator of their union,
which is what data-parallel ranks rely on. `KeyedAccumulator` does the same for sums indexed by token id, whose
size grows with the distinct tokens seen (bounded by the vocabulary).
"""

from __future__ import annotations

import torch
from torch import Tensor


class Accumulator:
    """A dict of float64 tensors; names in `maxima` merge by elementwise max, the rest by sum."""

    def __init__(
        self,
        shapes: dict[str, tuple[int, ...]],
        maxima: frozenset[str] = frozenset(),
        device: torch.device | str = "cpu",
    ) -> None:
        self.maxima = maxima
        self.tensors: dict[str, Tensor] = {
            name: torch.full(shape, -torch.inf if name in maxima else 0.0, dtype=torch.float64, device=device)
            for name, shape in shapes.items()
        }

    def add(self, name: str, index: tuple, value: Tensor) -> None:
        """Fold `value` into `tensors[name][index]` (sum, or max for a maximum)."""
        target = self.tensors[name]
        value = value.detach().to(device=target.device, dtype=torch.float64)
        if name in self.maxima:
            target[index] = torch.maximum(target[index], value)
        else:
            target[index] += value

    def all_reduce(self) -> None:
        """Combine the accumulators of every `torch.distributed` rank in place (sum / max)."""
        import torch.distributed as dist

        for name, tensor in self.tensors.items():
            op = dist.ReduceOp.MAX if name in self.maxima else dist.ReduceOp.SUM
            dist.all_reduce(tensor, op=op)


class KeyedAccumulator:
    """Float64 sums indexed by integer keys (token ids) that appear as the data streams in.

    `shapes[name]` is the shape of one key's entry; a row is added the first time a key is seen, so the state
    grows with the distinct keys seen (at most the vocabulary), never with the number of windows. Accumulators
    over disjoint windows merge by summing the rows of equal keys.
    """

    def __init__(self, shapes: dict[str, tuple[int, ...]], device: torch.device | str = "cpu") -> None:
        self.shapes = shapes
        self.keys = torch.empty(0, dtype=torch.long, device=device)  # sorted, unique
        self.tensors: dict[str, Tensor] = {
            name: torch.zeros(0, *shape, dtype=torch.float64, device=device) for name, shape in shapes.items()
        }

    def add(self, keys: Tensor, values: dict[str, Tensor]) -> None:
        """Fold `values[name]` (M, *shapes[name]) into the rows of `keys` (M,); repeated keys add up."""
        keys = keys.to(self.keys.device, torch.long)
        merged = torch.unique(torch.cat([self.keys, keys]))  # sorted
        if len(merged) != len(self.keys):  # new keys: grow every table, old rows keep their sums
            rows = torch.searchsorted(merged, self.keys)
            for name, tensor in self.tensors.items():
                grown = tensor.new_zeros(len(merged), *self.shapes[name])
                grown[rows] = tensor
                self.tensors[name] = grown
            self.keys = merged
        rows = torch.searchsorted(self.keys, keys)
        for name, value in values.items():
            self.tensors[name].index_add_(0, rows, value.detach().to(self.keys.device, torch.float64))

    def state(self, prefix: str) -> dict[str, Tensor]:
        """The keys and sums as named CPU tensors (for checkpoints)."""
        state = {f"{prefix}.keys": self.keys.cpu()}
        return state | {f"{prefix}.{name}": tensor.cpu() for name, tensor in self.tensors.items()}

    def load_state(self, state: dict[str, Tensor], prefix: str) -> None:
        """Restore a `state(prefix)`."""
        device = self.keys.device
        self.keys = state[f"{prefix}.keys"].to(device, torch.long)
        self.tensors = {name: state[f"{prefix}.{name}"].to(device, torch.float64) for name in self.shapes}

    def all_reduce(self) -> None:
        """Combine the accumulators of every `torch.distributed` rank in place (rows of equal keys sum)."""
        import torch.distributed as dist

        gathered: list[dict[str, Tensor]] = [{}] * dist.get_world_size()
        dist.all_gather_object(gathered, self.state("all"))
        device = self.keys.device
        self.keys = torch.empty(0, dtype=torch.long, device=device)
        self.tensors = {n: torch.zeros(0, *s, dtype=torch.float64, device=device) for n, s in self.shapes.items()}
        for state in gathered:
            self.add(state["all.keys"], {name: state[f"all.{name}"] for name in self.shapes})
