"""The `kv_plan_measures` verdict on hand-made per-window losses: the effects against their definitions worked out
by hand, `supported` where the measures' plan avoids most of the random plans' loss increase, `not supported`
where it loses more than they do, not measurable where streaming costs nothing."""

from __future__ import annotations

import numpy as np
import pytest

from sinkscope.reproduction import verdicts as v
from sinkscope.reproduction.kv_plan_claims import kv_plan_table, kv_plan_verdict

W, D = 10, 20
RNG = np.random.default_rng(0)


def _losses(plan_increase: float, random_increase: float) -> dict[str, np.ndarray]:
    full = 3.0 + RNG.normal(0, 0.1, W)
    return {"full": full, "plan": full + plan_increase + RNG.normal(0, 0.005, W),
            "random": full[:, None] + random_increase + RNG.normal(0, 0.02, (W, D))}  # fmt: skip


def test_effects_against_their_definitions():
    full = np.arange(W, dtype=float)
    random = full[:, None] + np.tile(np.linspace(0.1, 0.3, D), (W, 1))  # draws raise the loss by 0.1 … 0.3
    losses = {"full": full, "plan": full + 0.15, "random": random}
    result = kv_plan_verdict("m", losses)
    assert result.evidence["saved_share"] == pytest.approx(1 - 0.15 / 0.2)  # mean random increase 0.2
    # draw d raises the loss by 0.1 + 0.2·d/19: above 0.15 from d = 5 on, 15 of 20 draws
    assert result.evidence["beats_random"] == pytest.approx(15 / 20)
    assert result.evidence["delta_vs_random"] == pytest.approx(0.15 - 0.2)
    assert result.interval["over"] == "windows × draws" and result.interval["n"] == W
    table = kv_plan_table(losses)
    assert table["plan_beats_share"].tolist() == [0.75] * W


def test_supported_where_the_plan_avoids_most_of_the_random_increase():
    result = kv_plan_verdict("m", _losses(0.02, 0.2))
    assert result.verdict == v.SUPPORTED, result.reason
    assert result.interval["low"] > 0.8


def test_not_supported_where_the_plan_loses_more_than_random():
    result = kv_plan_verdict("m", _losses(0.3, 0.2))
    assert result.verdict == v.NOT_SUPPORTED, result.reason
    assert result.interval["high"] < 0


def test_not_measurable_where_streaming_costs_nothing():
    result = kv_plan_verdict("m", _losses(0.0, -0.1))
    assert result.verdict == v.NOT_MEASURABLE


def test_too_few_draws_or_windows():
    losses = _losses(0.02, 0.2)
    assert kv_plan_verdict("m", {**losses, "random": losses["random"][:, :19]}).verdict == v.NOT_MEASURABLE
    short = {name: value[:7] for name, value in losses.items()}
    assert "too few" in kv_plan_verdict("m", short).reason
