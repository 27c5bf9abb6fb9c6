"""Massive-activation statistics when a model's layers sit on different devices (`--device-map auto`): each
batch's per-layer parts are moved to the first layer's device before they are stacked (draw 56's
`massive_activations.end_batch_10`). The `meta` device stands in for an accelerator on a CPU-only machine."""

from __future__ import annotations

import torch

from sinkscope.statistics.massive_activations import MassiveActivations


def test_layers_on_two_devices_are_stacked_on_the_first_layers_device() -> None:
    stat = MassiveActivations(2, 3, device="meta")
    h = torch.arange(12.0).reshape(1, 4, 3)
    stat.on_layer_input(0, h.to("meta"), h.to("meta"))  # layer 0 on the "accelerator"
    stat.on_layer_input(1, h, h)  # layer 1 on the CPU
    stat.end_batch(1)  # with the parts stacked where they are: "Tensor on device cpu is not on the expected device"
    assert stat.bos.value.device.type == "meta" and tuple(stat.bos.value.shape) == (2, 3)
    assert stat.rest.value.device.type == "meta" and stat.histogram.value.device.type == "meta"
