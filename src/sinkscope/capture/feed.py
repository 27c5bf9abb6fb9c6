"""The feed: hands everything one forward pass shows to the registered statistics, and keeps their state together.

Inside `feed.hooks(lm)`, each forward pass of `lm.base` reports the layer inputs (`capture.layer_inputs`), the
attention (`capture.attention`: blocks of probabilities, or the `AttentionReadout` of the rows or fused path) and,
where a statistic asks for them, the attention outputs (`capture.outputs`). The feed turns the attention into the events of
`statistics.statistic` once for all statistics — per-head row sums and hard-pattern masks (`QueryBlock`), and after a
layer's last block its per-window column sums (`Columns`, kept for the current batch and layer only) — and
checks each block for non-finite values: on the device, read once per batch (a host read per layer would stall an
accelerator 30 times a forward pass). `state_dict`, `load_state_dict` and `all_reduce` cover every statistic.

The `AttentionReadout` of the map-free paths (and their layers' value norms) are kept until `end_batch`, then stacked
over the layers and handed on at once: statistics that declare `stacked` take every such layer in one call of
each event (a few tensor operations per batch instead of per layer: on an accelerator each operation is a kernel
launch of several microseconds of host time), the others one call per layer, as before.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import ExitStack, contextmanager

import torch
from torch import Tensor

from sinkscope.capture.attention import padding_free_forwards, watch_attention
from sinkscope.capture.layer_inputs import layer_input_hooks
from sinkscope.capture.outputs import attention_output_hooks
from sinkscope.capture.readout import READOUT_FIELDS, AttentionReadout, PackedReadout
from sinkscope.errors import SinkscopeError
from sinkscope.functional.patterns import pattern_block_sums, pattern_row_sums
from sinkscope.models.families import attention_module, softmax_layers
from sinkscope.models.load import LoadedModel
from sinkscope.statistics.state import Sum, device_index
from sinkscope.statistics.statistic import Columns, QueryBlock, Statistic

ATTENTION_EVENTS = ("on_values", "on_query_block", "on_columns")


class Feed:
    """Streams forward passes of a model into `statistics` (distinct `name`s) over windows of `seq_len` tokens.

    `group`: query heads per key/value head (GQA); `delta`: the hard-pattern threshold of the `QueryBlock` masks;
    `shard` = (rank, world): window i of this process is window rank + world·i of the corpus; `dtype_name` only
    words the non-finite error. Attention is captured only when some statistic overrides an attention event.
    Call `begin_batch(ids)` before and `end_batch(len(ids))` after each forward pass.
    """

    def __init__(
        self,
        statistics: Sequence[Statistic],
        seq_len: int,
        group: int = 1,
        delta: float = 0.1,
        shard: tuple[int, int] = (0, 1),
        dtype_name: str = "float32",
    ) -> None:
        names = [s.name for s in statistics]
        if len(set(names)) != len(names):
            raise ValueError(f"statistics need distinct names, got {names}")
        self.statistics = list(statistics)
        self.seq_len, self.group, self.delta, self.shard, self.dtype_name = seq_len, group, delta, shard, dtype_name
        self._count = 0  # windows folded in: a host-side count (a tensor add per batch would be a kernel launch)
        self._columns: dict[int, Tensor] = {}
        self._diagonal: dict[int, Tensor] = {}
        self._learned_sink: dict[int, Tensor] = {}
        self._readout_mass: list[Tensor] = []  # learned-sink masses of the deferred map-free layers, in order
        self._value_norms: dict[int, Tensor] = {}  # a layer's ||v_j|| (B, KV, T) until its attention reports
        self._deferred: list[tuple[int, AttentionReadout | PackedReadout, Tensor]] = []  # map-free layers, in forward order
        self._watched_layers: set[int] = set()  # layers whose attention function must report every forward pass
        self._attended: set[int] = set()  # layers whose attention function reported in this forward pass
        self._finite: list[tuple[list[int], Tensor]] = []  # (layers, their per-window sums), on the device
        self._in_batch = False

    @property
    def windows(self) -> int:
        """Windows folded in so far (a host-side count, so reading it never waits on the device)."""
        return self._count

    def _wanting(self, *events: str) -> list[Statistic]:
        return [s for s in self.statistics if any(getattr(type(s), e) is not getattr(Statistic, e) for e in events)]

    @contextmanager
    def hooks(self, lm: LoadedModel, layers: Sequence[int] | None = None) -> Iterator[None]:
        """Capture inside the block: layer inputs of `layers` (default: all), their attention if a statistic reads
        it, and their attention outputs if a statistic `needs_outputs`; every hook is removed on exit."""
        layers = list(range(len(lm.layers))) if layers is None else list(layers)
        with ExitStack() as stack:
            stack.enter_context(layer_input_hooks(lm, self.on_layer_input, layers))
            if self._wanting(*ATTENTION_EVENTS):
                modules = {index: attention_module(lm.family, lm.layers[index]) for index in layers
                           if index in softmax_layers(lm.family, lm.layers)}  # none in linear-attention layers
                self._watched_layers = set(modules)
                stack.enter_context(padding_free_forwards(lm.base))
                stack.enter_context(watch_attention(lm.model, modules, self.on_block, self.on_values, self.on_readout,
                                                    self.on_learned_sink))
            if any(s.needs_outputs for s in self.statistics):
                stack.enter_context(
                    attention_output_hooks(lm, layers, self.on_attention_output, self.on_post_norm_output)
                )
            try:
                yield
            finally:
                self._watched_layers = set()

    def begin_batch(self, ids: Tensor) -> None:
        """The token ids (B, T) of the next forward pass; statistics also get the windows' corpus indices."""
        if self._in_batch:
            raise SinkscopeError("begin_batch called twice without end_batch")
        self._in_batch = True
        rank, world = self.shard
        first = rank + world * self._count
        window_ids = torch.arange(first, first + world * len(ids), world)  # rank + world·(count + i)
        for statistic in self.statistics:
            statistic.begin_batch(ids, window_ids)

    def end_batch(self, batch_size: int) -> None:
        self._flush_layers()
        self._raise_if_not_finite()
        skipped = sorted(self._watched_layers - self._attended)
        self._attended = set()
        if skipped:
            raise SinkscopeError(
                f"layers {skipped} never called the attention function in a forward pass (their attention module "
                "computes attention outside transformers' attention interface), so their statistics cannot be "
                "measured; this model is not supported"
            )
        self._count += batch_size
        self._in_batch = False
        if self._columns:
            raise SinkscopeError(f"layers {sorted(self._columns)} never reached their last query block")
        for statistic in self.statistics:
            statistic.end_batch(batch_size)

    def on_layer_input(self, layer: int, h: Tensor, z: Tensor) -> None:
        for statistic in self.statistics:
            statistic.on_layer_input(layer, h, z)

    def on_values(self, layer: int, value: Tensor) -> None:
        """Value vectors (B, KV, T, Dv) of a layer, before its attention: their norms, kept until the layer's
        attention reports (its first block, or its `AttentionReadout` at the end of the batch)."""
        self._attended.add(layer)
        self._value_norms[layer] = value.float().norm(dim=-1)

    def _head_norms(self, norms: Tensor) -> Tensor:
        """Value norms (..., KV, T) per query head (..., H, T): query head h reads kv head h // group."""
        if self.group == 1:
            return norms
        kv_head = tuple(h // self.group for h in range(norms.shape[-2] * self.group))
        return norms.index_select(-2, device_index(kv_head, str(norms.device)))

    def _emit_values(self, layer: int) -> None:
        if layer not in self._value_norms:  # blocks handed in directly (no attention function ran)
            return
        norms = self._head_norms(self._value_norms.pop(layer))
        for statistic in self.statistics:
            statistic.on_values(layer, norms)

    def on_learned_sink(self, layer: int, start: int, mass: Tensor) -> None:
        """The learned-sink mass `m_t` (B, H, Q) of the block of `layer` that `on_block` receives next."""
        self._learned_sink[layer] = mass

    def on_block(self, layer: int, start: int, probs: Tensor, entropy: Tensor, out: Tensor) -> None:
        """One block of queries of one layer: probs (B, H, Q, K), entropy (B, H, Q) nats, out (B, H, Q, Dv)."""
        if start == 0:
            self._emit_values(layer)
        self._check_finite([layer], (entropy.sum((1, 2)) + out.sum((1, 2, 3)))[None])
        sums, hard_sink, hard_diag = pattern_block_sums(probs, start, self.delta, entropy)
        self._fold_columns(layer, start, sums.pop("columns"), sums.pop("diagonal"))
        learned = self._learned_sink.pop(layer, None)
        if learned is not None:  # the rows of A then sum to 1 − m_t
            sums["learned_sink"] = learned.double().sum((0, 2))
        self._rows(layer, QueryBlock(start, sums, hard_sink, hard_diag, out.norm(dim=-1), learned))

    def on_readout(self, layer: int, rows: AttentionReadout | PackedReadout) -> None:
        """One layer's whole attention over the batch from a map-free path (`AttentionReadout`, or packed as the flex path
        leaves them): kept until `end_batch`."""
        self._deferred.append((layer, rows, self._value_norms.pop(layer)))
        mass = self._learned_sink.pop(layer, None)  # a learned sink's m_t (B, H, T), reported just before
        if mass is not None:
            self._readout_mass.append(mass)

    def _flush_layers(self) -> None:
        """The batch's map-free layers, stacked (L', B, H, ·): `on_values`, `on_query_block` and `on_columns` once for
        statistics that take several layers (`stacked`, with the tuple of layers), once per layer for the rest."""
        if not self._deferred:
            return
        layers = tuple(layer for layer, _, _ in self._deferred)
        sink, diag, prev, columns, entropy, out_norms = self._stacked_rows([rows for _, rows, _ in self._deferred])
        norms = self._head_norms(torch.stack([norms.to(sink.device) for *_, norms in self._deferred]))
        self._deferred.clear()
        mass = torch.stack(self._readout_mass) if self._readout_mass else None  # (L', B, H, T): learned sinks
        self._readout_mass.clear()
        self._check_finite(list(layers), entropy.sum(-1) + out_norms.sum((-2, -1)))
        sums, hard_sink, hard_diag = pattern_row_sums(sink, diag, prev, 0, self.delta)
        # The map-free paths mask causally by construction (no mass above the diagonal); the rows' total mass is
        # checked through the column sums (on the fused and flex paths a second kernel call computes them from the
        # first's normalisers).
        sums |= {"entropy": entropy.sum(-2), "row_total": columns.sum((-3, -1))}
        if mass is not None:  # the rows of A then sum to 1 − m_t
            sums["learned_sink"] = mass.double().sum((-3, -1))
        rows, complete = QueryBlock(0, sums, hard_sink, hard_diag, out_norms, mass), Columns(columns, diag.double())
        wanting = self._wanting(*ATTENTION_EVENTS)
        for statistic in (s for s in wanting if s.stacked):
            statistic.on_values(layers, norms)
            statistic.on_query_block(layers, rows)
            statistic.on_columns(layers, complete)
        one_by_one = [s for s in wanting if not s.stacked]
        for i, layer in enumerate(layers if one_by_one else ()):
            layer_rows = QueryBlock(0, {k: v[i] for k, v in sums.items()}, hard_sink[i], hard_diag[i], out_norms[i],
                                    None if mass is None else mass[i])
            layer_columns = Columns(columns[i], complete.diagonal[i])
            for statistic in one_by_one:
                statistic.on_values(layer, norms[i])
                statistic.on_query_block(layer, layer_rows)
                statistic.on_columns(layer, layer_columns)

    @staticmethod
    def _stacked_rows(items: list[AttentionReadout | PackedReadout]) -> list[Tensor]:
        """The `AttentionReadout` fields of several layers, each (L', B, H, ·): packed rows of one kind are stacked and
        unpacked at once, anything else unpacked layer by layer and stacked field by field."""
        first = items[0]
        device = first.parts.device if isinstance(first, PackedReadout) else first.sink.device  # --device-map auto
        if isinstance(first, PackedReadout) and all(isinstance(i, PackedReadout) and i.unpack is first.unpack for i in items):
            rows = first.unpack(torch.stack([item.parts.to(device) for item in items]))
            return [getattr(rows, name) for name in READOUT_FIELDS]
        unpacked = [item.unpack(item.parts) if isinstance(item, PackedReadout) else item for item in items]
        return [torch.stack([getattr(rows, name).to(device) for rows in unpacked]) for name in READOUT_FIELDS]

    def _rows(self, layer: int, rows: QueryBlock) -> None:
        for statistic in self.statistics:
            statistic.on_query_block(layer, rows)

    def _fold_columns(self, layer: int, start: int, columns: Tensor, diagonal: Tensor) -> None:
        """Add a block's column sums (B, H, K) and diagonal (B, H, Q) to the layer's per-window buffers; after the
        layer's last block (blocks arrive in order, the first at `start` 0), hand them on as `Columns`."""
        B, H, K = columns.shape
        if start == 0:
            self._columns[layer] = columns.new_zeros(B, H, self.seq_len)
            self._diagonal[layer] = columns.new_zeros(B, H, self.seq_len)
        self._columns[layer][..., :K] += columns
        self._diagonal[layer][..., start : start + diagonal.shape[-1]] = diagonal
        if start + diagonal.shape[-1] == self.seq_len:
            complete = Columns(self._columns.pop(layer), self._diagonal.pop(layer))
            for statistic in self.statistics:
                statistic.on_columns(layer, complete)

    def on_attention_output(self, layer: int, out: Tensor) -> None:
        for statistic in self.statistics:
            statistic.on_attention_output(layer, out)

    def on_post_norm_output(self, layer: int, update: Tensor) -> None:
        for statistic in self.statistics:
            statistic.on_post_norm_output(layer, update)

    def _check_finite(self, layers: list[int], window_sums: Tensor) -> None:
        """NaN and ±inf survive a sum, so one sum per window (len(layers), B) checks whole blocks or layers
        cheaply; the sums stay on the device until `end_batch`."""
        self._finite.append((layers, window_sums))

    def _raise_if_not_finite(self) -> None:
        """One host read per batch: the first window and layer (in forward order) with a non-finite value. A sum
        `x` is finite iff `x − x == 0` (NaN and ±inf give NaN): two operations where `isfinite` dispatches four."""
        if not self._finite:
            return
        sums = torch.cat([s for _, s in self._finite]) if len(self._finite) > 1 else self._finite[0][1]
        checked = [layer for layers, _ in self._finite for layer in layers]
        self._finite.clear()
        if not bool((sums - sums == 0).all()):
            order = sorted(range(len(checked)), key=checked.__getitem__)  # forward order: a layer's blocks stay in order
            layers = [checked[i] for i in order]
            finite = torch.isfinite(sums)[order]  # (checks, B)
            check, window = (~finite).nonzero()[0].tolist()
            layer = layers[check]
            rank, world = self.shard
            first = rank + world * (self.windows + window)
            hint = "check the model's weights" if self.dtype_name == "float32" else "rerun with --dtype float32"
            raise SinkscopeError(
                f"window {first} gave non-finite attention in layer {layer} (NaN or overflow in "
                f"{self.dtype_name}); {hint}"
            )

    def state_dict(self) -> dict[str, Tensor]:
        """Every statistic's state as `"{statistic}.{state}.{tensor}"`, and the window count."""
        state = {"windows": torch.tensor(float(self._count), dtype=torch.float64)}
        for statistic in self.statistics:
            state |= {f"{statistic.name}.{key}": value for key, value in statistic.state_dict().items()}
        return state

    def load_state_dict(self, state: dict[str, Tensor]) -> None:
        """Restore a `state_dict()` of the same statistics (same model, T and thresholds)."""
        if "windows" not in state:
            raise SinkscopeError("the saved state has no window count (written by an older sinkscope); rerun without --resume")
        for statistic in self.statistics:
            prefix = f"{statistic.name}."
            statistic.load_state_dict({k[len(prefix) :]: v for k, v in state.items() if k.startswith(prefix)})
        self._count = int(state["windows"])

    def all_reduce(self) -> None:
        """Merge the statistics of every `torch.distributed` rank into every rank's."""
        for statistic in self.statistics:
            statistic.all_reduce()
        windows = Sum(())
        windows.value = torch.tensor(float(self._count), dtype=torch.float64)
        windows.all_reduce()
        self._count = int(windows.value)
