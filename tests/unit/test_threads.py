"""The automatic thread count (issue 35): the CPUs this process may use, less the load they carry."""

from __future__ import annotations

import os

import pytest

from sinkscope import threads
from sinkscope.threads import auto_threads, choose_threads, usable_cpus


@pytest.mark.parametrize(
    "cpus, load, expected",
    [(2, 0.0, 2), (2, 0.4, 2), (2, 0.6, 1), (2, 1.0, 1), (2, 7.3, 1), (2, 10.0, 1), (16, 3.2, 13), (16, 3.6, 12),
     (1, 0.0, 1), (8, -1.0, 8)],
)  # fmt: skip
def test_auto_threads_is_the_free_cpus_rounded(cpus, load, expected):
    assert auto_threads(cpus, load) == expected


def machine(monkeypatch, tmp_path, affinity: int, cpu_count: int, load: float, cpu_max: str | None):
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(affinity)))
    monkeypatch.setattr(os, "cpu_count", lambda: cpu_count)
    monkeypatch.setattr(os, "getloadavg", lambda: (load, 0.0, 0.0))
    path = tmp_path / "cpu.max"
    if cpu_max is not None:
        path.write_text(cpu_max + "\n")
    monkeypatch.setattr(threads, "CPU_MAX", path)
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    monkeypatch.delenv("LOCAL_WORLD_SIZE", raising=False)


def test_choose_threads_shares_the_machine_load_over_this_process_cpus(monkeypatch, tmp_path):
    # 4 of 16 CPUs, machine load 8: a quarter of it (2.0) on ours, 2 free
    machine(monkeypatch, tmp_path, affinity=4, cpu_count=16, load=8.0, cpu_max="max 100000")
    choice = choose_threads()
    assert choice.threads == 2 and "may use 4 CPUs, which carry a load of 2.0" in choice.reason
    assert choice.line().startswith("2 CPU threads (auto: ")
    # the busy 2-core machine of issue 35 (load 7–10): one thread
    machine(monkeypatch, tmp_path, affinity=2, cpu_count=2, load=7.3, cpu_max=None)
    assert choose_threads("auto").threads == 1 and choose_threads("auto").line().startswith("1 CPU thread (")
    assert choose_threads(3) == threads.ThreadChoice(3, "--threads 3")  # an explicit count is kept
    # four torchrun ranks on a quiet 16-CPU machine: 4 threads each
    machine(monkeypatch, tmp_path, affinity=16, cpu_count=16, load=0.0, cpu_max=None)
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "4")
    assert choose_threads().threads == 4 and "shared by 4 torchrun ranks" in choose_threads().reason


def test_slowdown_is_one_cpus_share_under_load(monkeypatch, tmp_path):
    machine(monkeypatch, tmp_path, affinity=2, cpu_count=2, load=15.0, cpu_max=None)
    assert threads.slowdown() == 8.0  # 16 runnable threads on 2 CPUs: each gets 1/8 of one
    machine(monkeypatch, tmp_path, affinity=2, cpu_count=2, load=0.3, cpu_max=None)
    assert threads.slowdown() == 1.0


def test_a_cgroup_quota_caps_the_cpus_and_omp_num_threads_wins(monkeypatch, tmp_path):
    machine(monkeypatch, tmp_path, affinity=8, cpu_count=8, load=0.0, cpu_max="150000 100000")  # 1.5 CPUs of quota
    assert usable_cpus(threads.CPU_MAX) == 2 and choose_threads().threads == 2
    machine(monkeypatch, tmp_path, affinity=8, cpu_count=8, load=0.0, cpu_max="garbage")
    assert usable_cpus(threads.CPU_MAX) == 8
    monkeypatch.setenv("OMP_NUM_THREADS", "3")
    assert choose_threads() == threads.ThreadChoice(3, "OMP_NUM_THREADS=3; --threads N to choose")
    assert choose_threads(omp="x").threads == 8  # not a count: the estimate


def test_the_cli_applies_the_choice_and_analyze_prints_it_first(monkeypatch, tmp_path, capsys):
    import torch

    from sinkscope.cli.main import main

    machine(monkeypatch, tmp_path, affinity=2, cpu_count=2, load=9.0, cpu_max=None)
    for name in threads.BLAS_VARIABLES:  # absent again after the test
        monkeypatch.setenv(name, "0")
        monkeypatch.delenv(name)
    before = torch.get_num_threads()
    try:
        torch.set_num_threads(2)
        # analyze refuses the missing corpus after printing its first line, before any model loads
        assert main(["analyze", "--corpus", str(tmp_path / "none.txt"), "--out", str(tmp_path / "run")]) == 2
        assert torch.get_num_threads() == 1 and os.environ["OPENBLAS_NUM_THREADS"] == "1"  # numpy's BLAS too
        first = capsys.readouterr().err.splitlines()[0]
        assert first == ("sinkscope analyze: 1 CPU thread (auto: this process may use 2 CPUs, which carry a load of "
                         "9.0; --threads N to choose)")  # fmt: skip
        assert main(["analyze", "--threads", "2", "--corpus", str(tmp_path / "none.txt"), "--out", "r"]) == 2
        assert torch.get_num_threads() == 2
        assert capsys.readouterr().err.splitlines()[0] == "sinkscope analyze: 2 CPU threads (--threads 2)"
    finally:
        torch.set_num_threads(before)
