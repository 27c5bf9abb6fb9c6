"""Run mutmut (the mutation tool; `[tool.mutmut]` in pyproject.toml) on every mutant or on a seeded sample of each
unit, and print the kill rate per unit with the surviving mutants.

mutmut writes every mutant of the configured files into `mutants/` (a copy of src/ with all mutants compiled in,
switched on one at a time), records once which fast-tier tests call each mutated function, and runs, per mutant,
only those tests (`-x`: a killed mutant stops at its first failing test). Units are the folders and files the
issue names (capture/, functional/, statistics/, reproduction/, synthetic/, pipelines/query_ablation.py,
pipelines/analysis.py),
or any one module named by its path under sinkscope/ (`--units reproduction/strata,reproduction/files`).

    .venv/bin/python benchmarks/mutmut_sample.py                      # every mutant (hours on 2 cores)
    .venv/bin/python benchmarks/mutmut_sample.py --per-unit 40        # 40 seeded random mutants of each unit
    .venv/bin/python benchmarks/mutmut_sample.py --units functional --per-unit 60 --seed 1
    .venv/bin/python benchmarks/mutmut_sample.py --units reproduction/verdicts --per-unit 40 --seed 5   # one module
    .venv/bin/python benchmarks/mutmut_sample.py --report-only        # summarise the results mutmut has stored
    .venv/bin/python benchmarks/mutmut_sample.py --per-unit 40 --seed 35 --exclude earlier.txt   # a disjoint draw

The summary counts `killed`, `survived`, `no tests` (no fast-tier test calls the function), `timeout` (counted as
killed, as mutmut does), `not checked` (left when `--time-box` stops the run; mutmut checks the mutants whose tests
are quickest first, so a time-boxed sample leans towards well-covered code) and the rest; the kill rate is
killed / (checked mutants). `--json PATH` keeps it.
docs/testing.md ("Mutation tool") says how to read it and lists the survivors argued equivalent.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
UNITS = {
    "capture": "sinkscope.capture.",
    "functional": "sinkscope.functional.",
    "statistics": "sinkscope.statistics.",
    "reproduction": "sinkscope.reproduction.",
    "query_ablation": "sinkscope.pipelines.query_ablation.",
    "analysis": "sinkscope.pipelines.analysis.",
    "synthetic": "sinkscope.synthetic.",
}
STATUS = {1: "killed", 3: "killed", 0: "survived", 5: "no tests", 33: "no tests", 34: "skipped", 36: "timeout",
          24: "timeout", -24: "timeout", 152: "timeout", 255: "timeout", 37: "type check", None: "not checked"}  # fmt: skip


# mutmut's entry point with two changes. (1) Its clean run (the selected tests, unmutated, before the first mutant)
# is left out: the recorded run that maps tests to functions runs the same tests unmutated. (2) That recorded run
# goes on past a failing test (mutmut stops at the first), and the tests that fail unmutated are taken out of every
# mutant's tests and listed in mutants/failing-tests.txt: they would kill every mutant they touch. Each saves a pass
# over the selection when another change is in flight in a shared checkout.
MUTMUT_RUN = """
import sys
from mutmut.__main__ import cli
from mutmut.runners import harness
from mutmut.state import state
from mutmut.workers import isolation

for runner in (isolation.ForkServerRunner, isolation.ForkRunner):
    runner.run_clean_tests = lambda self, tests: 0
record, arguments, execute = (harness.PytestRunner.run_stats, harness.PytestRunner._pytest_args_regular_run,
                              harness.PytestRunner.execute_pytest)


def run_stats(self, *, tests):
    failed = set()

    class Failures:
        def pytest_runtest_logreport(self, report):
            if report.failed:
                failed.add(report.nodeid.removeprefix("mutants/"))

    self._pytest_args_regular_run = lambda t: [a for a in arguments(self, t) if a != "-x"]
    self.execute_pytest = lambda params, plugins=(), **kw: execute(self, params, plugins=[*plugins, Failures()], **kw)
    try:
        code = record(self, tests=tests)
    finally:
        del self._pytest_args_regular_run, self.execute_pytest
    for names in state().tests_by_mangled_function_name.values():
        names -= failed
    with open("mutants/failing-tests.txt", "a") as out:
        out.writelines(name + "\\n" for name in sorted(failed))
    print(f"{len(failed)} tests fail unmutated: left out (mutants/failing-tests.txt)")
    return 0 if code == 1 else code


harness.PytestRunner.run_stats = run_stats
sys.argv = ["mutmut", *sys.argv[1:]]
sys.exit(cli())
"""


def generate() -> None:
    """Write every mutant into mutants/ without running a test (mutmut's own generation step)."""
    os.chdir(ROOT)
    from mutmut.__main__ import copy_also_copy_files, copy_src_dir, create_mutants, setup_source_paths
    from mutmut.mutation.trampoline import set_mutant_under_test

    set_mutant_under_test("mutant_generation")
    (ROOT / "mutants").mkdir(exist_ok=True)
    copy_src_dir()
    copy_also_copy_files()
    setup_source_paths()
    create_mutants(1)


def stored_results() -> dict[str, int | None]:
    """`{mutant name: exit code or None}` from mutmut's .meta files."""
    out: dict[str, int | None] = {}
    for meta in (ROOT / "mutants" / "src").rglob("*.py.meta"):
        out |= json.loads(meta.read_text())["exit_code_by_key"]
    return out


def prefix(unit: str) -> str:
    """A unit's mutant-name prefix: from UNITS, or a module path ("reproduction/strata": its dotted name)."""
    return UNITS.get(unit) or "sinkscope." + unit.removesuffix(".py").replace("/", ".") + "."


def unit_of(name: str, units: list[str]) -> str | None:
    """The unit of `units` whose prefix is the longest that `name` starts with (a module before its folder)."""
    return max((u for u in units if name.startswith(prefix(u))), key=lambda u: len(prefix(u)), default=None)


def summary(results: dict[str, int | None], names: list[str], units: list[str]) -> dict[str, dict]:
    """Per unit: status counts, kill rate over checked mutants, survivors."""
    out: dict[str, dict] = {}
    for unit in units:
        mine = [n for n in names if unit_of(n, units) == unit]
        if not mine:
            continue
        counts = Counter(STATUS.get(results.get(n), "suspicious") for n in mine)
        killed = counts["killed"] + counts["timeout"]
        checked = sum(v for k, v in counts.items() if k != "not checked")
        out[unit] = {"mutants": len(mine), **counts, "kill_rate": killed / checked if checked else None,
                     "survivors": sorted(n for n in mine if STATUS.get(results.get(n)) == "survived"),
                     "no_tests": sorted(n for n in mine if STATUS.get(results.get(n)) == "no tests")}  # fmt: skip
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--units", default=",".join(UNITS),
                        help=f"comma-separated, of {', '.join(UNITS)} or module paths (reproduction/strata)")
    parser.add_argument("--per-unit", type=int, default=0, help="seeded random mutants per unit (0: every mutant)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--report-only", action="store_true", help="summarise stored results, run nothing")
    parser.add_argument("--time-box", type=int, default=0, help="stop mutmut after this many seconds (0: never)")
    parser.add_argument("--nice", type=int, default=10, help="niceness of the mutmut process (default 10)")
    parser.add_argument("--workers", type=int, default=1, help="mutants checked at once (default 1)")
    parser.add_argument("--json", type=Path, help="also write the summary here")
    parser.add_argument("--exclude", type=Path, help="a file of mutant names (one a line) left out before drawing: "
                        "a sample disjoint from an earlier one")  # fmt: skip
    args = parser.parse_args()
    units = args.units.split(",")
    modules = ROOT / "src" / "sinkscope"
    if unknown := {u for u in units if u not in UNITS and not (modules / f"{u.removesuffix('.py')}.py").is_file()}:
        sys.exit(f"--units: unknown {sorted(unknown)}; choose from {', '.join(UNITS)} or a module under src/sinkscope/")
    if not list((ROOT / "mutants" / "src").rglob("*.py.meta")):
        generate()
    results = stored_results()
    excluded = set(args.exclude.read_text().split()) if args.exclude else set()
    names = []
    for unit in units:
        mine = sorted(n for n in results if unit_of(n, units) == unit and n not in excluded)
        if args.per_unit and len(mine) > args.per_unit:
            mine = sorted(random.Random(f"{args.seed}:{unit}").sample(mine, args.per_unit))
        names += mine
    start = time.monotonic()
    if not args.report_only:
        env = os.environ | {"HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
        command = [sys.executable, "-c", MUTMUT_RUN, "run", "--max-children", str(args.workers), *names]
        process = subprocess.Popen(["nice", "-n", str(args.nice), *command], cwd=ROOT, env=env, start_new_session=True)
        try:
            process.wait(timeout=args.time_box or None)
        except subprocess.TimeoutExpired:  # mutmut stores each result as it comes: the checked ones count
            os.killpg(process.pid, signal.SIGTERM)
            process.wait()
            print(f"time box of {args.time_box} s reached: the mutants not checked yet are reported as such")
        results = stored_results()
    table = summary(results, names, units)
    for unit, row in table.items():
        rate = "n/a" if row["kill_rate"] is None else f"{100 * row['kill_rate']:.1f} %"
        counts = ", ".join(f"{k} {v}" for k, v in row.items() if isinstance(v, int) and k != "mutants")
        print(f"{unit:15s} {row['mutants']:5d} mutants: {counts}; kill rate {rate}")
        for name in row["survivors"]:
            print(f"    survived: {name}")
    print(f"{time.monotonic() - start:.0f} s")
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps({"units": table, "per_unit": args.per_unit, "seed": args.seed}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
