"""Configuration of `sinkscope reproduce`: which models and corpora, and how much of each measurement."""

from __future__ import annotations

from dataclasses import asdict, dataclass, replace
from pathlib import Path

from sinkscope.errors import SinkscopeError

DELTA_SCALES = (0.5, 1.0, 2.0)  # the hard-pattern δ at half, once and double (the per-window evidence passes)
SINK_QUERY_DELTA = 0.1  # the ablations' sink query of a head: A[t,0] ≥ 1 − δ in the clean model
ANCHOR_CORPORA = ("builtin:prose", "builtin:random", "builtin:repeat")  # Gu et al.'s natural / random / repeated


@dataclass(frozen=True)
class ReproduceConfig:
    """Everything that decides the numbers of a reproduction (saved with every section as its reuse key).

    seq_len: T of every analysis (Gu et al.'s sink rate uses T = 64). windows / anchor_windows: windows per main
    corpus (with the §5 smoothing pass) and per anchor corpus. geometry_cap: attention inputs per layer for the
    half-space certificates. ablation_windows, ablation_fraction, random_draws: the head ablations (one
    fraction of all heads, dormant and sink-like sets against `random_draws` random sets); sensitivity_draws: the
    draws of each control when the ablations are re-measured at the head fraction and sink-query δ × ½ and × 2
    (the sensitivity step; not under `quick`).
    smoothing_layer_stride: the oversmoothing columns of every stride-th layer (1: all), in the capture pass.
    certificate_windows, certificate_controls: the half-space certificates of the middle layers on every raw
    context token of that many windows of the first corpus (more tokens than the model width), with that many
    random context tokens as the control (a verdict needs 20). cost_contexts, cost_windows, cost_layer_stride:
    exact sink/diagonal costs on the model's raw attention inputs (each T of `cost_contexts` context tokens per
    window, every `cost_layer_stride`-th layer; a T = 32 program takes ~30 s on a loaded CPU). cost_exact_Ts: T of the exact programs checked against the
    closed forms. regimes: train the bigram-backcopy regime map (`train-bb --grid regimes`, its quick grid);
    regimes_from: read a regime map that `sinkscope train-bb --grid regimes --out DIR` already wrote instead.
    switch_tau, switch_drain_max: the per-head switch claim's τ (switched off: ‖o_t‖ ≤ τ · mean_{j≤t} ‖v_j‖) and
    its drain cut (a head's BOS value drains in a window when ‖v_0‖ / mean_{j≥1} ‖v_j‖ ≤ the cut), fixed here
    before any data are read; the cut equals τ because a sink query's output is ≈ v_0, below the switch limit
    only when v_0 is (both halved and doubled in the sensitivity).
    """

    models: tuple[str, ...] = ("smollm2-135m", "gemma3-270m")
    corpora: tuple[str, ...] = ("builtin:prose", "builtin:code")
    seq_len: int = 64
    windows: int = 32
    anchor_windows: int = 32
    geometry_cap: int = 256
    ablation_windows: int = 16
    ablation_fraction: float = 0.1
    random_draws: int = 20
    sensitivity_draws: int = 5
    bos_draws: int = 8
    certificate_windows: int = 24
    certificate_controls: int = 20
    cost_contexts: tuple[int, ...] = (8, 16, 32)
    cost_windows: int = 8
    cost_layer_stride: int = 6
    smoothing_layer_stride: int = 1
    cost_exact_Ts: tuple[int, ...] = (2, 4, 8, 16)
    regimes: bool = True
    regimes_from: str | None = None
    switch_tau: float = 0.1
    switch_drain_max: float = 0.1
    quick: bool = False
    seed: int = 0
    device: str = "cpu"
    dtype: str = "float32"

    def __post_init__(self) -> None:
        if not self.models:
            raise SinkscopeError("--models needs at least one model, e.g. --models smollm2-135m")
        if not self.corpora:
            raise SinkscopeError("--corpora needs at least one corpus, e.g. --corpora builtin:prose")
        if self.seq_len < 8:
            raise SinkscopeError(f"--seq-len {self.seq_len} is too short: use at least 8 (Gu et al. use 64)")
        for name in ("windows", "anchor_windows", "ablation_windows", "random_draws", "sensitivity_draws", "bos_draws",
                     "cost_windows", "cost_layer_stride", "smoothing_layer_stride", "certificate_windows",
                     "certificate_controls"):  # fmt: skip
            if getattr(self, name) < 1:
                raise SinkscopeError(f"{name} {getattr(self, name)} must be at least 1")
        if not (0 < self.switch_tau < 1 and self.switch_drain_max > 0):
            raise SinkscopeError(f"switch_tau {self.switch_tau} must lie in (0, 1) and switch_drain_max "
                                 f"{self.switch_drain_max} above 0")  # fmt: skip
        if not 0 < self.ablation_fraction <= 1:
            raise SinkscopeError(f"ablation_fraction {self.ablation_fraction} must lie in (0, 1]")
        if self.regimes_from is not None and not (Path(self.regimes_from) / "regime_cells.parquet").is_file():
            raise SinkscopeError(f"--regimes-from {self.regimes_from}: no regime_cells.parquet there; pass the --out "
                                 "of `sinkscope train-bb --grid regimes`")  # fmt: skip
        if not self.cost_contexts or min(self.cost_contexts) < 2 or max(self.cost_contexts) > 32:
            raise SinkscopeError(f"cost_contexts {self.cost_contexts}: use T in 2..32 (exact programs beyond are slow)")

    @classmethod
    def preset(cls, quick: bool = False, **overrides) -> ReproduceConfig:
        """The full settings, or the `--quick` ones (few windows, small geometry cap, every 6th layer's cost and
        oversmoothing columns):
        every section still runs, on less data."""
        config = cls(**overrides)
        if not quick:
            return config
        small = dict(windows=8, anchor_windows=2, geometry_cap=32, ablation_windows=2, random_draws=2, bos_draws=2,
                     cost_contexts=(8,), cost_windows=1, cost_layer_stride=6, smoothing_layer_stride=6,
                     cost_exact_Ts=(2, 4, 8), certificate_windows=4, certificate_controls=2, quick=True)  # fmt: skip
        return replace(config, **{k: v for k, v in small.items() if k not in overrides})

    def to_dict(self) -> dict:
        return asdict(self)
