"""The paper's theory as pure numpy/SciPy functions: no model, no I/O, no `transformers`.

    from sinkscope.theory import sink_geometry, smoothing_condition, pattern_cost, orthonormal_cost

- `halfspace`: sink representability (H1), (H2), γ1·γ2 and their certificates (docs/theory/geometry.md);
- `oversmoothing`: the exact second moments of one attention step and the smoothing condition
  (docs/theory/oversmoothing.md);
- `cost`, `cost_closed_forms`: the representation cost of sink vs diagonal patterns, exact convex programs and
  closed forms (docs/theory/cost.md).
"""

from sinkscope.theory.cost import CostResult, gbb_pattern_cost, margin_cost, pattern_cost
from sinkscope.theory.cost_closed_forms import (
    gbb_cost,
    kappa_for_mass,
    mass_for_kappa,
    noncausal_sink_cost,
    orthonormal_cost,
    wendel_probability,
)
from sinkscope.theory.halfspace import SinkGeometry, layer_geometry, min_norm_point, sink_geometry
from sinkscope.theory.oversmoothing import (
    peak_lambda,
    predicted_curve,
    second_moments,
    smoothing_condition,
    smoothing_traces,
)

__all__ = [
    "CostResult", "SinkGeometry", "gbb_cost", "gbb_pattern_cost", "kappa_for_mass", "layer_geometry",
    "margin_cost", "mass_for_kappa", "min_norm_point", "noncausal_sink_cost", "orthonormal_cost",
    "pattern_cost", "peak_lambda", "predicted_curve", "second_moments", "sink_geometry", "smoothing_condition",
    "smoothing_traces", "wendel_probability",
]  # fmt: skip
