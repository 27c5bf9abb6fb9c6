"""Massive activations (Sun et al. 2024): the few residual-stream entries that are orders of magnitude larger than
the rest, where they sit (token position, channel) and whether BOS carries them.

For the residual stream `h` entering layer l (B, T, d), per channel c: the largest `|h[t, c]|` over windows at
BOS (t = 0) and over t ≥ 1 (with the position where it occurred), and a histogram of `log2 |h|` over every entry
(bins of 1/8 octave over 2^-20..2^20, entries outside land in the end bins), from which `compute` reads the
layer's median magnitude. Sizes are L × d and L × bins: nothing grows with the number of windows.

Per layer (`layers` table): `massive_max` = max_{t,c} |h[t,c]|, its `massive_position` and `massive_channel`,
`massive_median` (the histogram's median, to within a factor 2^(1/16) ≈ 1.044), `massive_ratio` = max / median,
`massive_bos_max` and `massive_rest_max` (largest |h| at BOS / at t ≥ 1) and `massive_on_bos` (the largest entry
is at BOS). The extra table `massive_activations`: the `TOP` channels of each layer by their largest |h|, with
value, position and BOS's |h| in that channel.

Cost per layer and batch: six kernels on (B, T, d) (abs, two max reductions, log2, clamp, a histogram), about a
dozen dispatched operations; the small results (d,) and (bins,) are kept until `end_batch`, which stacks them over
the layers and updates the states once per batch (benchmarks/launch_budget.py counts them); no host read.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import torch
from torch import Tensor

from sinkscope.statistics.state import Max, State, Sum
from sinkscope.statistics.statistic import Statistic, Tables

TOP = 4  # channels listed per layer in the extra table
LOG2_RANGE = (-20.0, 20.0)
BINS_PER_OCTAVE = 8
BINS = int((LOG2_RANGE[1] - LOG2_RANGE[0]) * BINS_PER_OCTAVE)


class ArgMax(State):
    """A float64 maximum of `shape` (starts at −∞) with the position where it occurred; merges by keeping the
    larger of the two (ties keep this state's position)."""

    def __init__(self, shape: tuple[int, ...], device: torch.device | str = "cpu") -> None:
        self.shape, self.device = tuple(shape), device
        self.value = torch.full(shape, -torch.inf, dtype=torch.float64, device=device)
        self.position = torch.full(shape, -1, dtype=torch.long, device=device)

    def add(self, value: Tensor, position: Tensor, index: tuple = ()) -> None:
        value = value.detach().to(self.value.device, torch.float64)
        larger = value > self.value[index]
        self.value[index] = torch.where(larger, value, self.value[index])
        self.position[index] = torch.where(larger, position.to(self.position.device), self.position[index])

    def tensors(self) -> dict[str, Tensor]:
        return {"value": self.value.cpu(), "position": self.position.cpu()}

    def load(self, tensors: dict[str, Tensor]) -> None:
        self.value = tensors["value"].to(self.value.device, torch.float64)
        self.position = tensors["position"].to(self.position.device, torch.long)

    def merge(self, other: State) -> None:
        self.add(other.value, other.position)

    def fresh(self) -> ArgMax:
        return type(self)(self.shape, self.device)


def magnitude_median(counts: np.ndarray) -> np.ndarray:
    """The median magnitude per layer from histograms `counts` (L, BINS) of log2 |h|: the geometric centre of the
    bin where the cumulative count first reaches half the total (NaN for a layer with no entry)."""
    cumulative = counts.cumsum(-1)
    total = cumulative[:, -1:]
    index = (cumulative >= total / 2).argmax(-1)
    centre = LOG2_RANGE[0] + (index + 0.5) / BINS_PER_OCTAVE
    return np.where(total[:, 0] > 0, 2.0**centre, np.nan)


class MassiveActivations(Statistic):
    """Streaming massive-activation statistics of the residual inputs of `n_layers` layers of width `d_model`."""

    name = "massive_activations"

    def __init__(self, n_layers: int, d_model: int, device="cpu") -> None:
        super().__init__()
        self.bos = self.add_state("bos", Max((n_layers, d_model), device))
        self.rest = self.add_state("rest", ArgMax((n_layers, d_model), device))
        self.histogram = self.add_state("histogram", Sum((n_layers, BINS), device))
        self._batch: dict[int, list[Tensor]] = {}  # layer -> BOS max, histogram[, max over t ≥ 1, its flat index]
        self._rest_positions = 0  # T − 1 of this batch

    def on_layer_input(self, layer: int, h: Tensor, z: Tensor) -> None:
        magnitude = h.abs().float()  # (B, T, d)
        B, T, d = magnitude.shape
        logs = magnitude.log2().clamp_(LOG2_RANGE[0], LOG2_RANGE[1] - 1e-3)
        self._batch[layer] = [magnitude[:, 0].amax(0), torch.histc(logs, BINS, *LOG2_RANGE)]
        if T > 1:  # the largest |h| over t ≥ 1 and its flat index b·(T−1) + (t − 1)
            self._batch[layer] += magnitude[:, 1:].reshape(B * (T - 1), d).max(0)
        self._rest_positions = T - 1

    def end_batch(self, batch_size: int) -> None:
        if not self._batch:
            return
        layers, parts = tuple(self._batch), list(self._batch.values())
        self._batch.clear()
        device = parts[0][0].device  # layers may sit on other devices (--device-map auto)
        stacked = [torch.stack([part[i].to(device) for part in parts]) for i in range(len(parts[0]))]  # (L', ·)
        self.bos.add(stacked[0], (layers,))
        self.histogram.add(stacked[1], (layers,))
        if len(stacked) == 4:
            self.rest.add(stacked[2], stacked[3] % self._rest_positions + 1, (layers,))

    def compute(self, windows: int) -> Tables:
        bos, rest = self.bos.value.cpu().numpy(), self.rest.value.cpu().numpy()
        rest_position = self.rest.position.cpu().numpy()
        largest = np.maximum(bos, rest)  # (L, d) per channel, over every position
        position = np.where(bos >= rest, 0, rest_position)
        L = len(bos)
        channel = largest.argmax(-1)
        layer_max = largest[np.arange(L), channel]
        median = magnitude_median(self.histogram.value.cpu().numpy())
        layers = pd.DataFrame({
            "layer": np.arange(L),
            "massive_max": layer_max,
            "massive_position": position[np.arange(L), channel],
            "massive_channel": channel,
            "massive_median": median,
            "massive_ratio": layer_max / median,
            "massive_bos_max": bos.max(-1),
            "massive_rest_max": rest.max(-1),
            "massive_on_bos": bos.max(-1) >= rest.max(-1),
        })  # fmt: skip
        top = []
        for layer in range(L):
            for rank, c in enumerate(np.argsort(-largest[layer], kind="stable")[:TOP]):
                top.append({"layer": layer, "rank": rank, "channel": int(c), "value": float(largest[layer, c]),
                            "position": int(position[layer, c]), "bos_value": float(bos[layer, c]),
                            "ratio": float(largest[layer, c] / median[layer])})  # fmt: skip
        return Tables(layers=layers, extra={"massive_activations": pd.DataFrame(top)})
