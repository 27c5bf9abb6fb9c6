"""Survivors of the per-module mutmut draw 54 over reproduction/ (issue 50, item 1), closed by kind.

Each test checks numbers against a hand computation or an exact identity, never the code path it guards:

- `strata`: Spearman's ρ on two points (ranks 1, 2: a rank spread of exactly 1), a row holding a NaN (left out of
  the per-row mean, the other rows kept), and the permutation p-value's two directions (`greater=False` on `v` is
  `greater=True` on `−v`, permutation for permutation, ties within 1e-12 included).
- `verdicts`: the failed share a `not measurable here` names counts only the failed resamples (not the `not
  supported` ones beside them); `stratified_indices`' documented defaults (1000 resamples, seed 0).
- `files`: a section's stamp whose list of stored files holds an entry of the wrong length is damaged (one whole
  line, then the section is computed again); a section with four damaged files names the first three, whole line.
"""

import hashlib
import json
import math
import re
import warnings

import numpy as np
import pytest

from sinkscope.reproduction import files, strata, verdicts


def test_spearman_of_two_points_is_plus_or_minus_one_and_nan_only_without_spread():
    # two distinct points: ranks (1, 2), a rank spread of exactly 1 — a perfect monotone relation
    assert strata.spearman(np.array([1.0, 2.0]), np.array([3.0, 5.0])) == pytest.approx(1.0, abs=1e-15)
    assert strata.spearman(np.array([1.0, 2.0]), np.array([5.0, 3.0])) == pytest.approx(-1.0, abs=1e-15)
    # ties share their mean rank: x ranks (1, 2, 3), y ranks (1.5, 1.5, 3): ρ = Pearson of those = √3/2
    assert strata.spearman(np.array([1.0, 2.0, 3.0]), np.array([7.0, 7.0, 9.0])) == pytest.approx(math.sqrt(3) / 2)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no spread is answered before any correlation is computed (no 0/0 warning)
        assert math.isnan(strata.spearman(np.array([1.0, 2.0, 3.0]), np.array([4.0, 4.0, 4.0])))
        assert math.isnan(strata.spearman(np.array([2.0, 2.0, 2.0]), np.array([1.0, 5.0, 4.0])))


def test_rowwise_spearman_leaves_out_a_row_holding_a_nan_and_keeps_the_others():
    x = np.array([[1.0, 2.0, 3.0], [1.0, np.nan, 3.0], [3.0, 1.0, 2.0]])
    y = np.array([[1.0, 2.0, 3.0], [3.0, 2.0, 1.0], [1.0, 2.0, 3.0]])
    # row 0: ρ = 1; row 1 has no rank (NaN): left out; row 2: ranks (3, 1, 2) vs (1, 2, 3): d = (2, −1, −1),
    # ρ = 1 − 6 Σd² / (n (n² − 1)) = 1 − 6·6/24 = −0.5; the mean of the two rows kept: 0.25
    rho, used = strata.rowwise_spearman(x, y)
    assert used == 2
    assert rho == pytest.approx(0.25)


def test_the_permutation_p_value_of_either_direction_is_the_other_on_negated_values():
    # two layers of one sink and one other head; the sink is lower in both (by 1 and by 7.5e-13). With the sink
    # expected lower (greater=False) a permutation that swaps only layer 1's labels gives a difference 7.5e-13 short
    # of the observed one: within the 1e-12 tie tolerance it counts as reaching it, so every permutation that keeps
    # layer 0's labels is a hit (about half of them), not only those that keep both (a quarter)
    values = np.array([0.0, 1.0, 0.0, 7.5e-13])
    is_sink = np.array([True, False, True, False])
    layers = np.array([0, 0, 1, 1])
    lower = strata.within_layer_permutation_p(values, is_sink, layers, greater=False, n_perm=400, seed=3)
    assert lower == strata.within_layer_permutation_p(-values, is_sink, layers, greater=True, n_perm=400, seed=3)
    assert 0.4 < lower < 0.6


def test_the_failed_share_counts_only_the_failed_resamples():
    # 5 of 100 resamples fail (above the 2.5 % allowed); 10 more are `not supported`, which is not a failure
    resampled = ["not measurable here"] * 5 + ["not supported"] * 10 + ["supported"] * 85
    assert verdicts.capped("supported", resampled) == (
        "not measurable here", "the effect or its control fails in 5.0% of the bootstrap resamples")


def test_stratified_indices_defaults_to_1000_resamples_of_seed_0():
    strata_ = np.array([0, 0, 1, 1, 1])
    drawn = verdicts.stratified_indices(strata_)
    assert drawn.shape == (1000, 5)
    np.testing.assert_array_equal(drawn, verdicts.stratified_indices(strata_, 1000, 0))
    # within their stratum: units 0-1 draw from {0, 1}, units 2-4 from {2, 3, 4}
    assert set(drawn[:, :2].ravel()) == {0, 1} and set(drawn[:, 2:].ravel()) == {2, 3, 4}


def _line(err: str) -> str:
    """The one progress line on stderr, without its `[reproduce HH:MM:SS] ` prefix."""
    lines = err.splitlines()
    assert len(lines) == 1 and re.match(r"\[reproduce \d\d:\d\d:\d\d\] ", lines[0]), err
    return lines[0][len("[reproduce 00:00:00] "):]


def test_a_stored_file_entry_of_the_wrong_length_makes_the_stamp_damaged(tmp_path, capsys):
    key = {"a": 1}
    (tmp_path / "table.csv").write_text("x\n")
    files.write_key(tmp_path, key)
    assert files.is_fresh(tmp_path, key)
    stamp = json.loads((tmp_path / files.KEY_FILE).read_text())
    assert stamp["stored"] == {"table.csv": [2, hashlib.sha256(b"x\n").hexdigest()]}  # [size, sha256]
    stamp["stored"]["table.csv"] = [2]  # a list, but not [size, sha256]
    (tmp_path / files.KEY_FILE).write_text(json.dumps(stamp))
    capsys.readouterr()
    assert not files.is_fresh(tmp_path, key)
    assert _line(capsys.readouterr().err) == (
        f"{tmp_path}: its stored key reproduce-key.json is damaged (its list of stored files): computing the section "
        "again")


def test_a_section_with_four_damaged_files_names_the_first_three(tmp_path, capsys):
    key = {"a": 1}
    for name in ("a.csv", "b.csv", "c.csv", "d.csv"):
        (tmp_path / name).write_text(name)
    files.write_key(tmp_path, key)
    for name in ("a.csv", "b.csv", "c.csv", "d.csv"):
        (tmp_path / name).unlink()
    capsys.readouterr()
    assert not files.is_fresh(tmp_path, key)
    assert _line(capsys.readouterr().err) == (
        f"{tmp_path}: stored files are missing or changed since they were written (a.csv, b.csv, c.csv): computing "
        "the section again")


def test_an_exact_verdict_keeps_what_the_measurement_fixed_and_never_shows_decide_an_undeclared_field():
    # an exact test (no units): x = 0.6 against cut = 0.5 is supported; doubling cut (1.0) would not be, but the
    # measurement fixed cut × 2, so that record is not varied and the verdict stays supported. decide may read only
    # the declared field x, never the p-value beside it: at the point and at every varied threshold
    def effects(units, th):
        assert units == {}
        return {"x": 0.6, "p": 0.01}

    def decide(e, th):
        assert set(e) == {"x"}, e
        return "supported" if e["x"] >= th["cut"] else "not supported"

    result = verdicts.judge("c", "m", {}, effects, decide, {"cut": 0.5, "other": 2.0}, over="closed form",
                            fixed={"cut×2": "only one cut was measured"}, evidence={"n": 3}, decides_on=("x",))
    assert result == verdicts.Verdict(
        "c", "m", "supported", {"n": 3, "x": 0.6, "p": 0.01, "interval_note": "closed form"},
        {"cut": 0.5, "other": 2.0}, "", sensitivity=[
            {"threshold": "cut", "scale": 0.5, "value": 0.25, "verdict": "supported"},
            {"threshold": "cut", "scale": 2.0, "value": 1.0, "verdict": None, "not_varied": "only one cut was measured"},
            {"threshold": "other", "scale": 0.5, "value": 1.0, "verdict": "supported"},
            {"threshold": "other", "scale": 2.0, "value": 4.0, "verdict": "supported"}])


def test_a_stored_file_changed_in_place_at_the_same_size_makes_the_section_stale(tmp_path, capsys):
    # the stamp records [size, sha256]: "abc" → "abd" keeps the size (3 bytes), so only the hash can tell
    key = {"a": 1}
    (tmp_path / "a.csv").write_text("abc")
    (tmp_path / "b.csv").write_text("kept")
    files.write_key(tmp_path, key)
    (tmp_path / "a.csv").write_text("abd")
    capsys.readouterr()
    assert not files.is_fresh(tmp_path, key)
    assert _line(capsys.readouterr().err) == (
        f"{tmp_path}: stored files are missing or changed since they were written (a.csv): computing the section "
        "again")
    (tmp_path / "a.csv").write_text("abc")  # the same bytes again: fresh
    assert files.is_fresh(tmp_path, key)


def test_the_stamp_joins_the_ownership_record_laid_out_as_every_marker(tmp_path):
    from sinkscope.ownership import MARKER, write_marker

    (tmp_path / "a.csv").write_text("x")
    write_marker(tmp_path, "reproduce-section")
    before = json.loads((tmp_path / MARKER).read_text())
    files.write_key(tmp_path, {"a": 1})
    text = (tmp_path / MARKER).read_text()
    # the record gains the stamp's name, nothing else changes, and it keeps the one-space layout write_marker uses
    assert json.loads(text) == before | {"entries": ["a.csv", "reproduce-key.json"]}
    assert text == json.dumps(before | {"entries": ["a.csv", "reproduce-key.json"]}, indent=1)
    assert text.startswith('{\n "')


def test_stratified_difference_without_spread_and_with_0_1_labels():
    # one layer, sinks [1, 1] and others [0, 0]: difference 1 by hand; no spread within either class (sd = 0), so
    # the standardised difference is NaN, answered without dividing by zero
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        diff, standardised, used = strata.stratified_difference(np.array([1.0, 1.0, 0.0, 0.0]),
                                                                np.array([True, True, False, False]), np.zeros(4))
    assert (diff, used) == (1.0, 1) and math.isnan(standardised)
    # labels given as 0/1 mean the same classes as booleans: layer 0 sinks [3] vs [1, 2] (w = 2/3, diff 1.5), layer 1
    # sinks [5, 7] vs [4] (w = 2/3, diff 2): pooled 1.75; squares 0.5 + 2, dof 1 + 1, sd = √1.25
    values, layers = np.array([3.0, 1.0, 2.0, 5.0, 7.0, 4.0]), np.array([0, 0, 0, 1, 1, 1])
    diff, standardised, used = strata.stratified_difference(values, np.array([1, 0, 0, 1, 1, 0]), layers)
    assert diff == pytest.approx(1.75) and standardised == pytest.approx(1.75 / math.sqrt(2.5 / 2)) and used == 2
