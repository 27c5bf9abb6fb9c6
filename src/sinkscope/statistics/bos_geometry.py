"""BOS geometry across depth (SPEC §4, first part): cosines and norm ratio of BOS against the other tokens."""

from __future__ import annotations

import numpy as np
import pandas as pd
import torch
from torch import Tensor

from sinkscope.functional.geometry import bos_dots, bos_geometry_sums_from
from sinkscope.statistics.state import Max, Sum
from sinkscope.statistics.statistic import Statistic, Tables

SUMS = ("cos_sum", "cos_nonpos", "norm_ratio_sum")


class BosGeometry(Statistic):
    """Per layer and for `h` (residual input) and `z` (attention input): Σ cos(x_0, x_t), max cos, the count of
    cos ≤ 0 over t ≥ 1, and Σ_w ||x_0|| / mean_{t≥1} ||x_t||; `compute` gives their means (`bos_cos_*`,
    `bos_norm_ratio_*`). Per layer only the norms `||x_t||` and the dot products `x_t·x_0` of h and z are taken
    (B, T each) and kept until `end_batch`, which turns every layer's into the sums at once (each step a few tensor
    operations for all layers: on an accelerator each is a kernel launch)."""

    name = "bos_geometry"

    def __init__(self, n_layers: int, seq_len: int, device="cpu") -> None:
        super().__init__()
        self.seq_len = seq_len
        self.sums = {
            f"{kind}_{name}": self.add_state(f"{kind}_{name}", Sum((n_layers,), device)) for kind in "hz" for name in SUMS
        }
        self.maxima = {f"{kind}_cos_max": self.add_state(f"{kind}_cos_max", Max((n_layers,), device)) for kind in "hz"}
        self._batch: dict[int, tuple[Tensor, Tensor]] = {}  # layer -> norms, dots of h and z (2, B, T), this batch

    def on_layer_input(self, layer: int, h: Tensor, z: Tensor) -> None:
        x = torch.stack([h, z]).float()  # (2, B, T, d)
        self._batch[layer] = (x.norm(dim=-1), bos_dots(x))

    def end_batch(self, batch_size: int) -> None:
        if not self._batch:
            return
        layers = tuple(self._batch)
        device = next(iter(self._batch.values()))[0].device  # layers may sit on other devices (--device-map auto)
        norms, dots = (torch.stack([part[i].to(device) for part in self._batch.values()]) for i in (0, 1))  # (L', 2, B, T)
        self._batch.clear()
        for name, value in bos_geometry_sums_from(norms, dots).items():  # each (L', 2): h, z
            for kind, part in zip("hz", value.unbind(-1), strict=True):
                (self.maxima if name == "cos_max" else self.sums)[f"{kind}_{name}"].add(part, (layers,))

    def compute(self, windows: int) -> Tables:
        W, n_ctx = windows, windows * (self.seq_len - 1)
        value = lambda name: (self.maxima | self.sums)[name].value.cpu()  # noqa: E731
        layers = pd.DataFrame({"layer": np.arange(len(value("h_cos_sum")))})
        for kind in "hz":
            layers[f"bos_cos_mean_{kind}"] = (value(f"{kind}_cos_sum") / n_ctx).numpy()
            layers[f"bos_cos_max_{kind}"] = value(f"{kind}_cos_max").numpy()
            layers[f"bos_cos_nonpos_frac_{kind}"] = (value(f"{kind}_cos_nonpos") / n_ctx).numpy()
            layers[f"bos_norm_ratio_{kind}"] = (value(f"{kind}_norm_ratio_sum") / W).numpy()
        return Tables(layers=layers)
