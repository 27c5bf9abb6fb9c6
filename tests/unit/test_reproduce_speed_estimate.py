"""`reproduce` says each section's expected time before it starts (`plan.walk`, `plan.Pace`): the section's size
in forward-pass tokens over the rate this walk measured on the sections it computed before, read here off a fake
clock, with every expected figure worked out by hand."""

from __future__ import annotations

import re
import types

from sinkscope.reproduction import plan
from sinkscope.reproduction.sections import Section


class _Clock:
    """`time.perf_counter` handing out the given readings in order (two per computed section: start, end)."""

    def __init__(self, *times: float) -> None:
        self.times = list(times)

    def perf_counter(self) -> float:
        return self.times.pop(0)


def _sections(tmp_path, works) -> list[Section]:
    def compute(_lm, directory):
        directory.mkdir(parents=True)

    return [Section(f"s{index}", tmp_path / f"s{index}", {"k": index}, compute, lambda d: d.name, work)
            for index, work in enumerate(works)]  # fmt: skip


def _computing_lines(err: str) -> dict[str, str]:
    """{label: what follows 'computing'} of every computing line."""
    return dict(re.findall(r"\] m: (s\d): computing(.*)\n", err))


def test_each_line_says_work_over_the_rate_of_the_sections_before(tmp_path, monkeypatch, capsys):
    # s0: 1000 tokens in 10 s (100 tok/s); s1: 6000 tokens → 60 s expected, takes 50 s: 7000 tokens in 60 s;
    # s2: no work (no estimate, and its 500 s do not enter the rate); s3: 24000 tokens → 24000 × 60 / 7000 =
    # 205.7 s, "3 min", takes 40 s: 31000 tokens in 100 s; s4: work of the model, 14000 → 45.2 s
    clock = _Clock(0.0, 10.0, 10.0, 60.0, 60.0, 560.0, 560.0, 600.0, 600.0, 601.0)
    monkeypatch.setattr(plan, "time", types.SimpleNamespace(perf_counter=clock.perf_counter))
    sections = _sections(tmp_path, [1000.0, 6000.0, 0.0, 24000.0, lambda lm: 14000.0 if lm == "lm" else 0.0])
    plan.walk("m", sections, lambda: "lm")
    assert not clock.times
    assert _computing_lines(capsys.readouterr().err) == {
        "s0": "", "s1": " (about 60 s)", "s2": "", "s3": " (about 3 min)", "s4": " (about 45 s)"}  # fmt: skip


def test_the_estimate_scales_with_the_sections_size(tmp_path, monkeypatch, capsys):
    # the same measured rate (2000 tokens in 40 s: 50 tok/s), a second section of 2000 and of 4000 tokens
    said = []
    for size in (2000.0, 4000.0):
        clock = _Clock(0.0, 40.0, 40.0, 41.0)
        monkeypatch.setattr(plan, "time", types.SimpleNamespace(perf_counter=clock.perf_counter))
        plan.walk("m", _sections(tmp_path / f"{size:g}", [2000.0, size]), lambda: "lm")
        said.append(_computing_lines(capsys.readouterr().err)["s1"])
    assert said == [" (about 40 s)", " (about 80 s)"]


def test_reused_sections_measure_nothing(tmp_path, monkeypatch, capsys):
    # s0 computed (100 tok/s), s1 reused (its stamp written by a first walk), s2 computed: 3000 tokens → 30 s
    first = _sections(tmp_path, [1000.0, 1000.0, 3000.0])
    monkeypatch.setattr(plan, "time", types.SimpleNamespace(perf_counter=_Clock(0.0, 1.0).perf_counter))
    plan.walk("m", first[1:2], lambda: "lm")
    capsys.readouterr()
    clock = _Clock(0.0, 10.0, 10.0, 11.0)
    monkeypatch.setattr(plan, "time", types.SimpleNamespace(perf_counter=clock.perf_counter))
    walked = plan.walk("m", first, lambda: "lm")
    assert walked.reused == ["s1"] and not clock.times
    assert _computing_lines(capsys.readouterr().err) == {"s0": "", "s2": " (about 30 s)"}
