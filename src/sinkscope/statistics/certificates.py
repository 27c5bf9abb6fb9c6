"""Half-space certificates per layer (SPEC §4): a uniform sample of attention inputs, solved after the pass."""

from __future__ import annotations

import torch
from torch import Tensor

from sinkscope.statistics.state import FirstValue, PrioritySample
from sinkscope.statistics.statistic import Statistic, Tables


class HalfSpaceCertificates(Statistic):
    """Keeps, per layer, BOS's attention input `z_0` (the same in every window) and a uniform sample without
    replacement of at most `cap` unit context inputs `z_t / ||z_t||` (t ≥ 1) over all windows: each token's
    priority is a uniform draw seeded by `seed` and its window's index in the corpus, so the sample does not
    depend on batching, sharding or resuming. `compute` runs `theory.halfspace.layer_geometry` on it (γ1, γ2,
    representability and the span assumptions of SPEC §3), with a progress bar when `progress`."""

    name = "certificates"

    def __init__(self, cap: int, seed: int = 0, progress: bool = False) -> None:
        super().__init__()
        self.cap, self.seed, self.progress = cap, seed, progress
        self.sample = self.add_state("sample", PrioritySample(cap))
        self.sink_inputs = self.add_state("sink_inputs", FirstValue())
        self._window_ids = torch.empty(0, dtype=torch.long)

    def begin_batch(self, ids: Tensor, window_ids: Tensor) -> None:
        self._window_ids = window_ids.cpu()

    def on_layer_input(self, layer: int, h: Tensor, z: Tensor) -> None:
        self.sink_inputs.offer(layer, z[0, 0].float())
        rows = z[:, 1:].detach().float().reshape(-1, z.shape[-1]).cpu()
        rows = rows / rows.norm(dim=-1, keepdim=True).clamp_min(1e-30)
        priorities = torch.cat([
            torch.rand(z.shape[1] - 1, generator=torch.Generator().manual_seed(self.seed * 1_000_003 + int(w)))
            for w in self._window_ids
        ])  # fmt: skip
        self.sample.offer(layer, priorities, rows)

    def compute(self, windows: int) -> Tables:
        from tqdm.auto import tqdm

        from sinkscope.theory.halfspace import layer_geometry

        samples = {
            layer: (self.sink_inputs.layers[layer].double().numpy(), rows.double().numpy())
            for layer, (_, rows) in self.sample.layers.items()
        }
        with tqdm(total=len(samples), desc="geometry", unit="layer", disable=not self.progress) as bar:
            table = layer_geometry(samples, cap=self.cap, seed=self.seed, on_layer=lambda _: bar.update())
        return Tables(layers=table.drop(columns=["n_contexts"]))
