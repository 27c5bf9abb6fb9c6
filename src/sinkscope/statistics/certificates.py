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
        self._candidates: tuple[Tensor, Tensor, Tensor] | None = None  # priorities, windows, positions
        self._pending: dict[int, tuple[Tensor, Tensor]] = {}  # layer -> (z_0, candidate rows), on the device

    def begin_batch(self, ids: Tensor, window_ids: Tensor) -> None:
        """Draw the batch's priorities (on the CPU, seeded per window) and keep only its `cap` smallest: no other
        token of the batch can enter the sample, so only those rows are ever gathered from the device."""
        positions = ids.shape[1] - 1
        priorities = torch.cat([
            torch.rand(positions, generator=torch.Generator().manual_seed(self.seed * 1_000_003 + int(w)))
            for w in window_ids.cpu()
        ])  # fmt: skip
        keep = priorities.topk(min(self.cap, len(priorities)), largest=False).indices
        device = ids.device
        self._candidates = (priorities[keep], (keep // positions).to(device), (keep % positions + 1).to(device))

    def on_layer_input(self, layer: int, h: Tensor, z: Tensor) -> None:
        _, windows, positions = self._candidates
        rows = z[windows, positions].detach().float()
        self._pending[layer] = (z[0, 0].detach().float(), rows / rows.norm(dim=-1, keepdim=True).clamp_min(1e-30))

    def end_batch(self, batch_size: int) -> None:
        """Move the batch's candidate rows to the CPU sample: one wait on the device per batch, not per layer."""
        priorities = self._candidates[0]
        for layer, (sink_input, rows) in self._pending.items():
            self.sink_inputs.offer(layer, sink_input)
            self.sample.offer(layer, priorities.clone(), rows.cpu())  # own tensors: checkpoints refuse shared ones
        self._pending.clear()

    def compute(self, windows: int) -> Tables:
        from tqdm.auto import tqdm

        from sinkscope.theory.halfspace import layer_geometry

        samples = {
            layer: (self.sink_inputs.layers[layer].double().numpy(), rows.double().numpy())
            for layer, (_, rows) in self.sample.layers.items()
        }
        with tqdm(total=len(samples), desc="geometry", unit="layer", disable=not self.progress) as bar:
            table = layer_geometry(samples, cap=self.cap, seed=self.seed, on_readout=lambda _: bar.update())
        return Tables(layers=table.drop(columns=["n_contexts"]))
