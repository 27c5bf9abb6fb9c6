"""The interface every streaming statistic implements, and the events the pipeline hands it.

A statistic declares its state (`add_state`, each piece with its reduction: `statistics.state`), folds the events
of each forward pass into it, and turns it into table columns (`compute`). Checkpoints (`state_dict` /
`load_state_dict`), the merge of runs over disjoint windows (`merge`) and the distributed reduction
(`all_reduce`) are written once, here, for every statistic. The events (all no-ops unless overridden), in the
order of one forward pass:

    begin_batch(ids, window_ids)                    the batch's token ids (B, T) and corpus window indices (B,)
    per layer:  on_layer_input(layer, h, z)         residual input h and attention input z (B, T, d)
                on_values(layer, value_norms)       ||v_j|| per head (B, H, T) (GQA groups repeated)
                on_query_block(layer, rows)         one block of query rows: `QueryBlock`
                on_columns(layer, columns)          after the layer's last block: `Columns`
                on_attention_output(layer, out)     the attention module's output (B, T, d) (`needs_outputs`)
                on_post_norm_output(layer, update)  the post-attention norm's output, where the family has one
    end_batch(batch_size)

A statistic that sets `stacked` takes the layers of the map-free paths all at once, at the end of the batch:
`on_values`, `on_query_block` and `on_columns` then get a tuple of layers for `layer` and tensors with a leading layer
axis (value norms (L', B, H, T), `QueryBlock` and `Columns` fields (L', B, H, T), row sums (L', H)); for the layers of the
block path, and for statistics that do not set it, one layer per call as above.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pandas as pd
from torch import Tensor

from sinkscope.errors import SinkscopeError
from sinkscope.statistics.state import State


@dataclass(frozen=True)
class QueryBlock:
    """One block of query rows `start..start+Q-1` of one layer over the batch (SPEC §2–§3 ingredients).

    `sums`: per-head (H,) float64 sums of the block (`sink`, `diag`, `prev`, `entropy`, `hard_sink`, `hard_diag`,
    `upper_mass`, `row_total`: `stats.patterns.pattern_block_sums`; with a learned sink also `learned_sink`, the
    sum of `m_t`); `hard_sink`, `hard_diag`: (B, H, Q) booleans (false at t = 0); `out_norms`: `||o_t||` per head
    before the output projection, (B, H, Q); `learned_sink`: the mass `m_t` on the learned sink column (gpt-oss's
    `s_aux`), (B, H, Q), None for models without one.
    """

    start: int
    sums: dict[str, Tensor]
    hard_sink: Tensor
    hard_diag: Tensor
    out_norms: Tensor
    learned_sink: Tensor | None = None


@dataclass(frozen=True)
class Columns:
    """One layer's complete per-window column sums `c_k = Σ_{t≥k} A[t,k]` and diagonal `A[k,k]`, (B, H, T) float64."""

    columns: Tensor
    diagonal: Tensor


@dataclass
class Tables:
    """What a statistic contributes to a run: columns of the heads (keyed by layer, head), layers (layer) and
    positions (layer, position) tables, whole extra tables, and model-level numbers for the summary."""

    heads: pd.DataFrame | None = None
    layers: pd.DataFrame | None = None
    positions: pd.DataFrame | None = None
    extra: dict[str, pd.DataFrame] = field(default_factory=dict)
    summary: dict = field(default_factory=dict)


class Statistic:
    """Base class of a streaming statistic; subclasses set `name` and declare their state in `__init__`."""

    name: str = "statistic"
    needs_outputs: bool = False  # whether it reads the attention (and post-norm) outputs
    stacked: bool = False  # whether its attention events accept several layers at once (module doc)

    def __init__(self) -> None:
        self._states: dict[str, State] = {}

    def add_state(self, name: str, state: State) -> State:
        """Declare a piece of state (with its reduction, by its kind); returns it for the subclass to keep."""
        if "." in name or name in self._states:
            raise ValueError(f"state name {name!r} must be unique and contain no '.'")
        self._states[name] = state
        return state

    def state_dict(self) -> dict[str, Tensor]:
        """Every state as `"{state}.{tensor}"` → CPU tensor."""
        return {f"{name}.{key}": tensor for name, state in self._states.items() for key, tensor in state.tensors().items()}

    def load_state_dict(self, tensors: dict[str, Tensor]) -> None:
        """Restore a `state_dict()`; a state with no tensor at all is refused for the kinds that always have one."""
        for name, state in self._states.items():
            prefix = f"{name}."
            own = {key[len(prefix) :]: value for key, value in tensors.items() if key.startswith(prefix)}
            if not own and state.tensors():
                raise SinkscopeError(
                    f"the saved state of {self.name} lacks {name!r} (written by another sinkscope version); "
                    "rerun without --resume"
                )
            state.load(own)

    def merge(self, other: Statistic) -> None:
        """Fold in the same statistic computed over other, disjoint windows."""
        for name, state in self._states.items():
            state.merge(other._states[name])

    def all_reduce(self) -> None:
        """Merge every `torch.distributed` rank's state into every rank's."""
        for state in self._states.values():
            state.all_reduce()

    def begin_batch(self, ids: Tensor, window_ids: Tensor) -> None: ...

    def on_layer_input(self, layer: int, h: Tensor, z: Tensor) -> None: ...

    def on_values(self, layer: int, value_norms: Tensor) -> None: ...

    def on_query_block(self, layer: int, rows: QueryBlock) -> None: ...

    def on_columns(self, layer: int, columns: Columns) -> None: ...

    def on_attention_output(self, layer: int, out: Tensor) -> None: ...

    def on_post_norm_output(self, layer: int, update: Tensor) -> None: ...

    def end_batch(self, batch_size: int) -> None: ...

    def compute(self, windows: int) -> Tables:
        """The statistic's table columns after `windows` windows."""
        raise NotImplementedError
