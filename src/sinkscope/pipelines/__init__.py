"""The pipelines: each runs forward passes (or solvers, or training) and writes results. analyze (`analysis`),
ablate, smoothing, cost (`cost_sweep`), sweep, and their I/O (`run`: the run directory, `checkpoint`, `export`).
They sit above `capture/`, `statistics/`, `functional/`, `theory/` and `report/`, which never import them."""
