"""Streaming state declared with its reduction: what a statistic keeps between batches, and how two of them merge.

A statistic's state over disjoint sets of windows merges into the state of their union; that one rule gives
checkpoints (a state is a dict of named tensors), data parallelism (every rank's state, merged) and a resumed
run (the saved state, continued) with no per-statistic code. The kinds:

- `Sum`: float64 tensor, merges by `+`;  `Max`: float64 tensor (starts at −∞), merges by elementwise max; both
  keep the values added at plain integer indices (a layer, a layer and a head) until their value is read, then
  fold them in with one stacked operation per shape (a statistic's per-layer updates of a batch cost a few tensor
  operations instead of a few per layer: on an accelerator each is a kernel launch);
- `KeyedSum`: float64 rows indexed by integer keys (token ids) as they appear, rows of equal keys add (adds kept
  and folded in together, as `Sum`'s: the fold's `unique` waits for the device on an accelerator);
- `PrioritySample`: per layer, the `cap` rows of smallest priority (a uniform sample without replacement when the
  priorities are uniform random numbers), merges by keeping the smallest priorities of both;
- `FirstValue`: per layer, one tensor that is the same in every window (e.g. BOS's input), merges by keeping one;
- `ShiftedMoments`: per layer, the count, sum and sum of outer products of rows taken relative to a shift (the
  first batch's mean, for numerical stability); two states with different shifts merge exactly by re-shifting
  (`Σ(x−a)(x−a)ᵀ = Σ(x−b)(x−b)ᵀ + S_b δᵀ + δ S_bᵀ + n δδᵀ`, δ = b − a, `S_b = Σ(x−b)`).

Sizes depend on the model and T (and, for `KeyedSum`, on the distinct keys seen), never on the number of windows.
The protocol is written here rather than taken from torchmetrics: torchmetrics' `Metric` reduces by sum, mean, max,
min or concatenation only (none of the sample, keyed or moment merges above), and would be a dependency for
sixty lines of bookkeeping.
"""

from __future__ import annotations

import functools
import warnings
from abc import ABC, abstractmethod
from collections import defaultdict

import torch
from torch import Tensor

from sinkscope.errors import SinkscopeError


class State(ABC):
    """One piece of streaming state: `tensors()` / `load()` round-trip it, `merge` folds in another's."""

    @abstractmethod
    def tensors(self) -> dict[str, Tensor]:
        """The state as named CPU tensors (checkpoints, gathering across ranks)."""

    @abstractmethod
    def load(self, tensors: dict[str, Tensor]) -> None:
        """Replace the state by one saved with `tensors()`."""

    @abstractmethod
    def merge(self, other: State) -> None:
        """Fold in the state of the same declaration over other, disjoint windows."""

    @abstractmethod
    def fresh(self) -> State:
        """An empty state of the same declaration."""

    def all_reduce(self) -> None:
        """Replace this rank's state by the merge of every `torch.distributed` rank's, in rank order."""
        import torch.distributed as dist

        gathered: list[dict[str, Tensor]] = [{}] * dist.get_world_size()
        dist.all_gather_object(gathered, self.tensors())
        merged = self.fresh()
        for tensors in gathered:
            part = self.fresh()
            part.load(tensors)
            merged.merge(part)
        self.load(merged.tensors())


KEEP = 256  # adds a `Sum` keeps before folding them in (a few batches of a 30-layer model)
KEEP_KEYED = 8  # adds a `KeyedSum` keeps (one per batch for the key-token table: at most B·T rows each)


class Sum(State):
    """A float64 tensor of `shape` that merges by `+`; `add(value, index)` folds a batch in.

    An `add` at an index of plain non-negative ints (the first may be a tuple of them: several layers at once, the
    value then has a leading axis of that length) whose value has the shape of the indexed part is kept as it is
    until `value` is next read, or until `KEEP` adds are kept (so that a long run holds a bounded number of them);
    the kept values are then folded in together (`flush`: per index length, one concatenation and one
    `index_add_`). Any other index is folded in at once (by one `index_add_` on axis d for d full slices then plain
    ints)."""

    def __init__(self, shape: tuple[int, ...] = (), device: torch.device | str = "cpu") -> None:
        self.shape, self.device = tuple(shape), device
        self._pending: list[tuple[tuple, Tensor]] = []
        self.value = torch.zeros(shape, dtype=torch.float64, device=device)

    @property
    def value(self) -> Tensor:
        """The state, with every kept `add` folded in."""
        self.flush()
        return self._value

    @value.setter
    def value(self, tensor: Tensor) -> None:  # a replaced state drops what was kept for the old one
        self._pending.clear()
        self._value = tensor

    def add(self, value: Tensor, index: tuple = ()) -> None:
        first = index[0] if isinstance(index, tuple) and index else None
        lead = (len(first),) if isinstance(first, tuple) else ()
        if _plain(index) and tuple(value.shape) == lead + self.shape[len(index) :]:
            value = value.to(self._value.device)  # layers may sit on other devices (--device-map auto)
            self._pending.append((index, value if lead else value.unsqueeze(0)))
            if len(self._pending) >= KEEP:
                self.flush()
        elif along := _along(index, value, self.shape):  # full slices, then rows: one indexed fold on that axis
            rows, value, dim = along
            self._fold_rows(device_index(rows, str(self._value.device)), self.value, value.detach().to(self._value), dim)
        else:
            self._fold(index, value.detach().to(device=self._value.device, dtype=torch.float64))

    def _fold(self, index: tuple, value: Tensor) -> None:
        self.value[index] += value

    def _fold_rows(self, rows: Tensor, flat: Tensor, values: Tensor, dim: int = 0) -> None:
        flat.index_add_(dim, rows, values)

    def flush(self) -> None:
        """Fold in the values kept by `add`: per (index length, shape), one stacked update of the indexed rows."""
        if not self._pending:
            return
        groups: dict[int, list[tuple[tuple, Tensor]]] = defaultdict(list)
        for index, value in self._pending:
            groups[len(index)].append((index, value))
        self._pending.clear()
        for k, entries in groups.items():
            flat = self._value.view(-1, *self.shape[k:])  # the first k dimensions as rows
            strides = [int(torch.Size(self.shape[i + 1 : k]).numel()) for i in range(k)]
            rows = []
            for index, _ in entries:
                first = index[0] if isinstance(index[0], tuple) else (index[0],)
                rest = sum(i * s for i, s in zip(index[1:], strides[1:]))
                rows += [f * strides[0] + rest for f in first]
            values = torch.cat([value for _, value in entries]).detach()
            device = self._value.device
            self._fold_rows(device_index(tuple(rows), str(device)), flat, values.to(device=device, dtype=torch.float64))

    def tensors(self) -> dict[str, Tensor]:
        return {"value": self.value.cpu()}

    def load(self, tensors: dict[str, Tensor]) -> None:
        self.value = _checked(tensors["value"], self.shape).to(self.value.device, torch.float64)

    def merge(self, other: State) -> None:
        self.value += other.value.to(self.value.device)

    def fresh(self) -> Sum:
        return type(self)(self.shape, self.device)

    def all_reduce(self) -> None:
        import torch.distributed as dist

        dist.all_reduce(self.value, op=dist.ReduceOp.SUM)


class Max(Sum):
    """A float64 tensor of `shape` that starts at −∞ and merges by elementwise max; `add` keeps the larger (kept
    and folded in as `Sum.add` is)."""

    def __init__(self, shape: tuple[int, ...] = (), device: torch.device | str = "cpu") -> None:
        super().__init__(shape, device)
        self.value.fill_(-torch.inf)

    def _fold(self, index: tuple, value: Tensor) -> None:
        self.value[index] = torch.maximum(self.value[index], value)

    def _fold_rows(self, rows: Tensor, flat: Tensor, values: Tensor, dim: int = 0) -> None:
        with warnings.catch_warnings():  # torch marks index_reduce_ "beta" (its API may change), once per process
            warnings.simplefilter("ignore", UserWarning)
            flat.index_reduce_(dim, rows, values, "amax")

    def merge(self, other: State) -> None:
        torch.maximum(self.value, other.value.to(self.value.device), out=self.value)

    def all_reduce(self) -> None:
        import torch.distributed as dist

        dist.all_reduce(self.value, op=dist.ReduceOp.MAX)


class KeyedSum(State):
    """Float64 sums indexed by integer keys: `shapes[name]` is one key's entry; a row appears when its key does.
    `add` keeps its keys and values until `keys` or `values` is next read, or until `KEEP_KEYED` adds are kept."""

    def __init__(self, shapes: dict[str, tuple[int, ...]], device: torch.device | str = "cpu") -> None:
        self.shapes, self.device = shapes, device
        self._pending: list[tuple[Tensor, dict[str, Tensor]]] = []
        self._keys = torch.empty(0, dtype=torch.long, device=device)  # sorted, unique
        self._values = {name: torch.zeros(0, *shape, dtype=torch.float64, device=device) for name, shape in shapes.items()}

    @property
    def keys(self) -> Tensor:  # sorted, unique, with every kept `add` folded in
        self.flush()
        return self._keys

    @property
    def values(self) -> dict[str, Tensor]:
        """Each name's rows (len(keys), *shapes[name]), with every kept `add` folded in."""
        self.flush()
        return self._values

    def add(self, keys: Tensor, values: dict[str, Tensor]) -> None:
        """Add `values[name]` (M, *shapes[name]) to the rows of `keys` (M,); repeated keys add up. Kept until read."""
        self._pending.append((keys, values))
        if len(self._pending) >= KEEP_KEYED:
            self.flush()

    def flush(self) -> None:
        """Fold in the kept adds: their keys and values concatenated, one `_fold`."""
        pending, self._pending, device = self._pending, [], self._keys.device
        if pending:
            self._fold(torch.cat([keys.to(device) for keys, _ in pending]),
                       {name: torch.cat([values[name].to(device) for _, values in pending]) for name in pending[0][1]})

    def _fold(self, keys: Tensor, values: dict[str, Tensor]) -> None:
        keys = keys.to(self._keys.device, torch.long)
        merged = torch.unique(torch.cat([self._keys, keys]))  # sorted
        if len(merged) != len(self._keys):  # new keys: grow every table, old rows keep their sums
            rows = torch.searchsorted(merged, self._keys)
            for name, tensor in self._values.items():
                grown = tensor.new_zeros(len(merged), *self.shapes[name])
                grown[rows] = tensor
                self._values[name] = grown
            self._keys = merged
        rows = torch.searchsorted(self._keys, keys)
        for name, value in values.items():
            self._values[name].index_add_(0, rows, value.detach().to(self._keys.device, torch.float64))

    def tensors(self) -> dict[str, Tensor]:
        return {"keys": self.keys.cpu()} | {name: tensor.cpu() for name, tensor in self.values.items()}

    def load(self, tensors: dict[str, Tensor]) -> None:
        self._pending.clear()  # a replaced state drops what was kept for the old one
        self._keys = tensors["keys"].to(self._keys.device, torch.long)
        self._values = {name: tensors[name].to(self._keys.device, torch.float64) for name in self.shapes}

    def merge(self, other: State) -> None:  # at once: the other state's tables may change after this call
        self.flush()
        self._fold(other.keys, other.values)

    def fresh(self) -> KeyedSum:
        return type(self)(self.shapes, self.device)


class PrioritySample(State):
    """Per layer, the at most `cap` rows with the smallest priorities seen (`offer`), kept on the CPU."""

    def __init__(self, cap: int) -> None:
        self.cap = cap
        self.layers: dict[int, tuple[Tensor, Tensor]] = {}  # layer -> (priorities (n,), rows (n, d))

    def offer(self, layer: int, priorities: Tensor, rows: Tensor) -> None:
        if layer in self.layers:
            old_priorities, old_rows = self.layers[layer]
            priorities, rows = torch.cat([old_priorities, priorities]), torch.cat([old_rows, rows])
        if len(priorities) > self.cap:
            keep = priorities.topk(self.cap, largest=False).indices
            priorities, rows = priorities[keep], rows[keep]
        self.layers[layer] = (priorities, rows)

    def tensors(self) -> dict[str, Tensor]:
        return {f"{layer}.{name}": t for layer, pair in self.layers.items() for name, t in zip(("priorities", "rows"), pair)}

    def load(self, tensors: dict[str, Tensor]) -> None:
        layers = [key.split(".")[0] for key in tensors if key.endswith(".priorities")]
        self.layers = {int(layer): (tensors[f"{layer}.priorities"], tensors[f"{layer}.rows"]) for layer in layers}

    def merge(self, other: State) -> None:
        for layer, (priorities, rows) in other.layers.items():
            self.offer(layer, priorities, rows)

    def fresh(self) -> PrioritySample:
        return type(self)(self.cap)


class FirstValue(State):
    """Per layer, one CPU tensor that every window has in common; the first one offered is kept."""

    def __init__(self) -> None:
        self.layers: dict[int, Tensor] = {}

    def offer(self, layer: int, value: Tensor) -> None:
        if layer not in self.layers:
            self.layers[layer] = value.detach().cpu()

    def tensors(self) -> dict[str, Tensor]:
        return {str(layer): value for layer, value in self.layers.items()}

    def load(self, tensors: dict[str, Tensor]) -> None:
        self.layers = {int(key): value for key, value in tensors.items()}

    def merge(self, other: State) -> None:
        for layer, value in other.layers.items():
            self.offer(layer, value)

    def fresh(self) -> FirstValue:
        return type(self)()


class ShiftedMoments(State):
    """Per layer: `n`, `shift` (dim,), `sum` = Σ(x − shift) (dim,) and `outer` = Σ(x − shift)(x − shift)ᵀ.

    With `mirrored_at` d, the caller stores only the blocks of `outer` on and above the block diagonal at d (the
    block [d:, :d] is the transpose of [:d, d:] and stays zero): `add_outer` takes those blocks; merges keep it so.
    """

    def __init__(self, dim: int, mirrored_at: int | None = None) -> None:
        self.dim, self.mirrored_at = dim, mirrored_at
        self.n: dict[int, int] = {}
        self.shift: dict[int, Tensor] = {}
        self.sum: dict[int, Tensor] = {}
        self.outer: dict[int, Tensor] = {}

    def shift_of(self, layer: int, first: Tensor) -> Tensor:
        """The layer's shift; the first call sets it to `first` (e.g. the first batch's mean)."""
        if layer not in self.shift:
            self.shift[layer] = first.detach()
            self.n[layer] = 0
            self.sum[layer] = torch.zeros(self.dim, dtype=torch.float64)
            self.outer[layer] = torch.zeros(self.dim, self.dim, dtype=torch.float64)
        return self.shift[layer]

    def add(self, layer: int, count: int, centred_sum: Tensor, outer_blocks: list[tuple[tuple[slice, slice], Tensor]]) -> None:
        """Add `count` rows already centred on `shift_of(layer, …)`: their sum and (index, block) pairs of Σ x xᵀ."""
        self.n[layer] += count
        self.sum[layer] += centred_sum.detach().double().cpu()
        for index, block in outer_blocks:
            self.outer[layer][index] += block.detach().double().cpu()

    def tensors(self) -> dict[str, Tensor]:
        parts = lambda layer: {"n": torch.tensor(self.n[layer], dtype=torch.float64), "shift": self.shift[layer].cpu(),  # noqa: E731
                               "sum": self.sum[layer], "outer": self.outer[layer]}  # fmt: skip
        return {f"{layer}.{name}": t for layer in self.shift for name, t in parts(layer).items()}

    def load(self, tensors: dict[str, Tensor]) -> None:
        layers = sorted({int(key.split(".")[0]) for key in tensors})
        self.n = {layer: int(tensors[f"{layer}.n"]) for layer in layers}
        self.shift = {layer: tensors[f"{layer}.shift"] for layer in layers}
        self.sum = {layer: tensors[f"{layer}.sum"].double() for layer in layers}
        self.outer = {layer: tensors[f"{layer}.outer"].double() for layer in layers}

    def merge(self, other: State) -> None:
        for layer in other.shift:
            if layer not in self.shift:
                self.shift[layer], self.n[layer] = other.shift[layer], other.n[layer]
                self.sum[layer], self.outer[layer] = other.sum[layer].clone(), other.outer[layer].clone()
                continue
            delta = (other.shift[layer].double() - self.shift[layer].double()).cpu()  # x − a = (x − b) + δ
            s_b, n_b = other.sum[layer], other.n[layer]
            correction = torch.outer(s_b, delta) + torch.outer(delta, s_b) + n_b * torch.outer(delta, delta)
            if self.mirrored_at is not None:
                d = self.mirrored_at
                correction[d:, :d] = 0
            self.outer[layer] += other.outer[layer] + correction
            self.sum[layer] += s_b + n_b * delta
            self.n[layer] += n_b

    def fresh(self) -> ShiftedMoments:
        return type(self)(self.dim, self.mirrored_at)


def _plain(index: tuple) -> bool:
    """Whether `index` is a non-empty tuple of non-negative Python ints, the first possibly a non-empty tuple of
    them (the indices `Sum.add` keeps for later)."""
    if not isinstance(index, tuple) or not index:
        return False
    first = index[0] if isinstance(index[0], tuple) and index[0] else (index[0],)
    return all(type(i) is int and i >= 0 for i in (*first, *index[1:]))


def _along(index: tuple, value: Tensor, shape: tuple[int, ...]) -> tuple[tuple[int, ...], Tensor, int] | None:
    """(rows, value with the rows' axis, d) for an index of d ≥ 1 full slices then a plain int or tuple of them."""
    full = lambda i: isinstance(i, slice) and i == slice(None)  # noqa: E731
    if not (isinstance(index, tuple) and len(index) >= 2 and all(full(i) for i in index[:-1])):
        return None
    d, last = len(index) - 1, index[-1]
    rows = last if isinstance(last, tuple) else (last,)
    if not rows or not all(type(i) is int and i >= 0 for i in rows):
        return None
    value = value if isinstance(last, tuple) else value.unsqueeze(d)
    return (rows, value, d) if tuple(value.shape) == shape[:d] + (len(rows),) + shape[d + 1 :] else None


@functools.cache
def device_index(rows: tuple[int, ...], device: str) -> Tensor:
    """The indices `rows` as a long tensor on `device`, made once per distinct tuple: a copy from the host each
    batch would make an accelerator wait for its queue."""
    return torch.tensor(rows, dtype=torch.long, device=device)


def _checked(tensor: Tensor, shape: tuple[int, ...]) -> Tensor:
    if tuple(tensor.shape) != shape:
        raise SinkscopeError(
            f"saved state has shape {tuple(tensor.shape)}, expected {shape}: it belongs to another computation"
        )
    return tensor
