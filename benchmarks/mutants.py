"""Mutation check of the statistics: apply one-line bugs, one at a time, and see whether the tests catch each.

Every mutant is (file, exact old text, new text, what it breaks). The committed tree (`git archive HEAD`) is copied
to a temporary directory and mutated there, never in the checkout, and each file is restored in `finally`; the
tests run against the copy (`PYTHONPATH=<copy>/src`, run from the copy). A mutant whose old text no longer occurs
exactly once is reported as "does not apply" (the code moved on: rewrite it). The first four are the survivors
of issue 25's review; the rest exercise capture/, statistics/ and functional/.

    .venv/bin/python benchmarks/mutants.py                 # every mutant, the statistics subset (TESTS)
    .venv/bin/python benchmarks/mutants.py --only 1,5,9    # some of them
    .venv/bin/python benchmarks/mutants.py --fast-tier     # the whole fast tier per mutant (slow: ~5 min each)
    .venv/bin/python benchmarks/mutants.py --tests tests/unit  # other tests

Prints one line per mutant (killed / SURVIVED / does not apply, seconds, the first failing test) and the kill rate;
`--json PATH` writes them too. Exit status 1 when a mutant survives. docs/testing.md says how to read the result.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PY = Path(sys.executable)
# The tests that cover the statistics, quick ones first; -x stops at the first failure, so a killed mutant costs
# seconds to a minute.
TESTS = (
    "tests/unit/test_threshold_boundaries.py",
    "tests/unit/test_patterns.py",
    "tests/unit/test_switch_geometry.py",
    "tests/unit/test_blocked_attention.py",
    "tests/unit/test_statistic_state.py",
    "tests/integration/test_guards.py",
    "tests/integration/test_reference_columns.py",
    "tests/integration/test_fused_attention.py",
    "tests/integration/test_capture_families.py",
    # issue 34's gap tests (thresholds at δ ≠ 1 − δ, uneven blocks, non-degenerate cells, verdict quantiles, every
    # family through the ablations, the sink-query table, the resume identity)
    "tests/unit/test_gaps_stats.py",
    "tests/unit/test_gaps_verdicts.py",
    "tests/integration/test_gaps_blocks.py",
    "tests/integration/test_gaps_query_ablation.py",
    "tests/integration/test_gaps_resume.py",
    "tests/integration/test_gaps_families.py::test_every_family_through_both_ablations",
)
FAST_TIER = ("-m", "not slow and not browser", "tests")

CAPTURE, STATISTICS, STATS = "src/sinkscope/capture", "src/sinkscope/statistics", "src/sinkscope/functional"


@dataclass(frozen=True)
class Mutant:
    path: str
    old: str
    new: str
    what: str


MUTANTS = (
    # issue 25's four survivors
    Mutant(f"{CAPTURE}/blocks.py", "diagonal(offset=-1 if start == 0 else 0,", "diagonal(offset=-1 if start == 0 else 1,",
           "rows path: previous-token entry off by one in query blocks after the first"),
    Mutant(f"{STATISTICS}/switch_counts.py", "self._value_norms[layer], rows.hard_sink, rows.start",
           "self._value_norms[layer], rows.hard_diag, rows.start", "switch table built from hard_diag, not hard_sink"),
    Mutant(f"{STATISTICS}/bos_geometry.py", 'value(f"{kind}_cos_nonpos") / n_ctx', 'value(f"{kind}_cos_nonpos") / W',
           "bos_cos_nonpos_frac divided by windows, not context tokens"),
    Mutant(f"{STATISTICS}/pattern_scores.py", "if row_error > 1e-4 or upper > 1e-6:", "if row_error > 1e-4 and upper > 1e-6:",
           "the not-a-causal-softmax guard needs both conditions"),
    # capture/
    Mutant(f"{CAPTURE}/blocks.py", "entropy = total.squeeze(-1).log() - torch.einsum(",
           "entropy = total.squeeze(-1).log() + torch.einsum(", "block path: wrong sign in the row entropy"),
    Mutant(f"{CAPTURE}/blocks.py", "columns[..., :stop] += probs.sum(-2)", "columns[..., :stop] = probs.sum(-2)",
           "rows path: column sums of the last query block only"),
    Mutant(f"{CAPTURE}/blocks.py", "best_logit = torch.where(use_sink, logits[..., 0], corner.diagonal(dim1=-2, dim2=-1))",
           "best_logit = torch.where(use_sink, corner.diagonal(dim1=-2, dim2=-1), logits[..., 0])",
           "rows path: log-normaliser from the wrong entry"),
    Mutant(f"{CAPTURE}/fused.py", "prev[..., 1:] = entries(k[:, :, :-1], slice(1, None))",
           "prev[..., 1:] = entries(k[:, :, 1:], slice(1, None))", "fused path: previous-token entry is the diagonal"),
    Mutant(f"{CAPTURE}/blocks.py", "corner.masked_fill_(torch.ones(Q, Q, dtype=torch.bool, device=query.device).triu(1), floor)",
           "corner.masked_fill_(torch.ones(Q, Q, dtype=torch.bool, device=query.device).triu(2), floor)",
           "block path: each query also sees the next key"),
    Mutant(f"{CAPTURE}/feed.py", "kv_head = tuple(h // self.group for h in", "kv_head = tuple(h % norms.shape[-2] for h in",
           "GQA: query head h reads kv head h mod KV"),
    Mutant(f"{CAPTURE}/feed.py", "self._diagonal[layer][..., start : start + diagonal.shape[-1]] = diagonal",
           "self._diagonal[layer][..., : diagonal.shape[-1]] = diagonal", "feed: every block's diagonal written at 0"),
    Mutant(f"{CAPTURE}/feed.py", "pattern_row_sums(sink, diag, prev, 0, self.delta)",
           "pattern_row_sums(sink, prev, diag, 0, self.delta)", "rows/fused paths: diagonal and previous swapped"),
    # capture/flex.py (the CUDA path; the fused-attention test forces it on the CPU)
    Mutant(f"{CAPTURE}/flex.py", "kv_idx, q_idx) - lse[b, h, kv_idx]", "kv_idx, q_idx) - lse[b, h, q_idx]",
           "flex path: the transposed call subtracts the wrong row's lse"),
    Mutant(f"{CAPTURE}/flex.py", "picked = [torch.zeros_like(t), t, (t - 1).clamp(min=0)]",
           "picked = [torch.zeros_like(t), t, t]", "flex path: previous-token entry is the diagonal"),
    Mutant(f"{CAPTURE}/flex.py", "return entropy_weights(0, seq_len, device),", "return entropy_weights(1, seq_len, device),",
           "flex path: entropy weights shifted by one row"),
    Mutant(f"{CAPTURE}/feed.py", "check, window = (~finite).nonzero()[0].tolist()",
           "check, window = (~finite).nonzero()[-1].tolist()", "feed: non-finite error names the last layer and window"),
    # functional/
    Mutant(f"{STATS}/patterns.py", "torch.stack([torch.ones_like(valid), valid, valid])", "torch.stack([valid, valid, valid])",
           "sink score without the BOS row t = 0"),
    Mutant(f"{STATS}/patterns.py", "1 / torch.log((rows + 1).clamp_min(2))", "1 / torch.log(rows.clamp_min(2))",
           "entropy normalised by log t instead of log(t+1)"),
    Mutant(f"{STATS}/patterns.py", "hard = (entries[:2] >= 1 - delta)", "hard = (entries[:2] > 1 - delta)",
           "hard sink and diagonal need A > 1-δ (the boundary)"),
    Mutant(f"{STATS}/patterns.py", "hard_sink, hard_diag = hard.unbind(0)", "hard_diag, hard_sink = hard.unbind(0)",
           "hard-sink and hard-diagonal masks swapped"),
    Mutant(f"{STATS}/patterns.py", '"diag_score": sums["diag"] / n_ctx,', '"diag_score": sums["diag"] / n_all,',
           "diagonal score divided by T, not T-1"),
    Mutant(f"{STATS}/patterns.py", "return torch.arange(n, 0, -1,", "return torch.arange(n + 1, 1, -1,",
           "α_k divided by T-k+1"),
    Mutant(f"{STATS}/patterns.py", "later = (columns - diagonal)[..., 1 : T - 1]", "later = columns[..., 1 : T - 1]",
           "received_k includes self-attention"),
    Mutant(f"{STATS}/patterns.py", "above = scores > epsilons", "above = scores >= epsilons",
           "per-window sink rate counts α = ε (the boundary)"),
    Mutant(f"{STATS}/patterns.py", "above = torch.ones(Q, Q, dtype=torch.bool, device=probs.device).triu(1)",
           "above = torch.ones(Q, Q, dtype=torch.bool, device=probs.device).triu(2)",
           "guard: mass just above the diagonal not counted"),
    Mutant(f"{STATS}/patterns.py", "prev = probs.gather(-1, (rows - 1).clamp_min(0)", "prev = probs.gather(-1, (rows - 2).clamp_min(0)",
           "block path: previous-token entry two back"),
    Mutant(f"{STATS}/switch.py", "return value_norms[..., 0] / value_norms[..., 1:].mean(-1)",
           "return value_norms[..., 0] / value_norms.mean(-1)", "value drain's mean includes BOS"),
    Mutant(f"{STATS}/switch.py", "return torch.arange(1, n + 1,", "return torch.arange(2, n + 2,",
           "switch: visible mean divided by t+2"),
    Mutant(f"{STATS}/patterns.py", "return torch.arange(q_start, q_start + Q, device=device) >= 1",
           "return torch.arange(q_start, q_start + Q, device=device) >= 0", "switch table and pattern sums count t = 0"),
    Mutant(f"{STATS}/switch.py", '"ahon_ln": ahon / ahon.mean(),', '"ahon_ln": ahon / ahon.max(),',
           "AHON-LN divided by the layer's max"),
    Mutant(f"{STATS}/switch.py", 'sums["n_off_sink"] / n_off.clamp_min(1)', 'sums["n_on_sink"] / n_off.clamp_min(1)',
           "switch agreement from the on-sink count"),
    Mutant(f"{STATS}/switch.py", 'ahon = sums["ahon"] / (windows * seq_len)', 'ahon = sums["ahon"] / (windows * (seq_len - 1))',
           "AHON divided by T-1"),
    Mutant(f"{STATS}/geometry.py", "return norms[..., 0] / norms[..., 1:].mean(-1)", "return norms[..., 0] / norms.mean(-1)",
           "BOS norm ratio's mean includes BOS"),
    Mutant(f"{STATS}/geometry.py", '"cos_max": cos.amax((-2, -1))', '"cos_max": cos.amin((-2, -1))', "bos_cos_max is the minimum"),
    # statistics/
    Mutant(f"{STATISTICS}/window_sink_rate.py", '"sink_rate": rates[0, ..., 0].mean(1).numpy()',
           '"sink_rate": rates[0, ..., 0].amax(1).numpy()', "layer sink rate is its heads' max"),
    Mutant(f"{STATISTICS}/window_sink_rate.py", 'str(e): float(rates[i, ..., 0].mean())', 'str(e): float(rates[0, ..., 0].mean())',
           "summary sink_rates: every ε gets the first ε's rate"),
    Mutant(f"{STATISTICS}/pattern_scores.py", '"max_key_score": key_scores.amax(1)', '"max_key_score": key_scores.amin(1)',
           "max_key_score is the minimum over heads"),
    Mutant(f"{STATISTICS}/pattern_scores.py", 'heads.groupby("layer")["sink_score"]', 'heads.groupby("layer")["diag_score"]',
           "layers' sink_rate_of_mean from diagonal scores"),
    Mutant(f"{STATISTICS}/key_tokens.py", "keys = ids[:, 1 : self.seq_len - 1]", "keys = ids[:, 0 : self.seq_len - 2]",
           "key-token table: occurrences shifted one position left"),
    Mutant(f"{STATISTICS}/key_tokens.py", '"received_mean": received.sum(1) / (n * L * H)', '"received_mean": received.sum(1) / (n * H)',
           "tokens.received_mean not averaged over layers"),
    Mutant(f"{STATISTICS}/key_tokens.py", '"sink_frac": (exceed / (n[:, None] * H)).flatten()', '"sink_frac": (exceed / (n[:, None] * L)).flatten()',
           "token_layers.sink_frac divided by layers, not heads"),
    Mutant(f"{STATISTICS}/key_tokens.py", '.sort_values(["sink_frac", "received_mean"], ascending=False',
           '.sort_values(["sink_frac", "received_mean"], ascending=True', "tokens sorted ascending"),
    Mutant(f"{STATISTICS}/switch_counts.py", "every_head = (rows.hard_sink | rows.hard_diag).all(dim=-2)",
           "every_head = (rows.hard_sink | rows.hard_diag).any(dim=-2)", "MLP-like when any head (not every) is hard"),
    Mutant(f"{STATISTICS}/switch_counts.py", "(self.mlp_like.value.cpu() / (W * (T - 1)))", "(self.mlp_like.value.cpu() / (W * T))",
           "mlp_like_frac divided by T, not T-1"),
    # issue 34: one-line bugs the tests before its gap tests let through (docs/testing.md, "Gap tests of issue 34")
    Mutant(f"{STATS}/switch.py", '"switch_off_frac": n_off / (windows * (seq_len - 1)),',
           '"switch_off_frac": n_off / (windows * seq_len),', "switch_off_frac over W·T, not W·(T−1)"),
    Mutant(f"{STATS}/patterns.py", "return torch.arange(q_start, q_start + Q, device=device)", "return torch.arange(0, Q, device=device)",
           "switch and pattern sums: a later block's queries numbered from 0"),
    Mutant(f"{STATS}/head_classes.py", "if row_mass < th.switched_off:", "if row_mass <= th.switched_off:",
           "a row mass equal to the switch-off threshold is null"),
    Mutant(f"{STATS}/geometry.py", "(cos <= 0)", "(cos < 0)", "an orthogonal token is not non-positive"),
    Mutant(f"{STATISTICS}/window_evidence.py", "self.tau * scale, rows.start) & valid", "self.tau * scale, 0) & valid",
           "window evidence: a later block's τ test reads the first queries' visible means"),
    Mutant("src/sinkscope/reproduction/verdicts.py", "low = int(ranks[int(math.floor(tail * (ranks.size - 1)))])",
           "low = int(ranks[int(math.ceil(tail * (ranks.size - 1)))])", "bootstrap cap: lower quantile index rounded up"),
    Mutant("src/sinkscope/pipelines/query_ablation.py", 'current["cells"] = cells', 'current["cells"] = {}',
           "sink-query ablation: the cells are never applied"),
    Mutant("src/sinkscope/pipelines/analysis.py", 'fingerprint["corpus"].pop("windows", None)',
           'fingerprint["corpus"].get("windows", None)', "resume identity: a longer corpus is refused"),
    Mutant("src/sinkscope/capture/head_ablation.py", "first_values[:, head // group, None]",
           "first_values[:, head % layout.n_kv_heads, None]", "BOS ablation: query head h reads kv head h mod KV"),
)  # fmt: skip


def first_failure(output: str) -> str:
    """The first failing test id in pytest's output, or the last line."""
    found = re.search(r"^(FAILED|ERROR) (\S+)", output, re.MULTILINE)
    if found:
        return found.group(2)
    lines = [line for line in output.strip().splitlines() if line.strip()]
    return lines[-1][:120] if lines else ""


def run_tests(copy: Path, args: list[str], timeout: int) -> tuple[int, str]:
    env = dict(os.environ, PYTHONPATH=str(copy / "src"), HF_HUB_OFFLINE="1", PYTHONDONTWRITEBYTECODE="1")
    command = [str(PY), "-m", "pytest", "-x", "-q", "-p", "no:cacheprovider", "-p", "no:randomly", *args]
    try:
        done = subprocess.run(command, cwd=copy, env=env, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return 124, "timed out"
    return done.returncode, done.stdout + done.stderr


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--only", help="comma-separated mutant numbers (1-based), default all")
    parser.add_argument("--fast-tier", action="store_true", help="run the whole fast tier per mutant, not TESTS")
    parser.add_argument("--tests", nargs="+", help="run these test paths per mutant instead of TESTS")
    parser.add_argument("--timeout", type=int, default=1800, help="seconds per test run (a hang counts as killed)")
    parser.add_argument("--json", type=Path, help="also write the results here")
    parser.add_argument("--list", action="store_true", help="print the mutants and exit")
    args = parser.parse_args(argv)
    chosen = [int(i) for i in args.only.split(",")] if args.only else list(range(1, len(MUTANTS) + 1))
    if args.list:
        for i in chosen:
            print(f"{i:3d}  {MUTANTS[i - 1].path.removeprefix('src/sinkscope/')}: {MUTANTS[i - 1].what}")
        return 0
    tests = list(FAST_TIER if args.fast_tier else args.tests or TESTS)
    with tempfile.TemporaryDirectory(prefix="sinkscope-mutants-") as root:
        copy = Path(root) / "tree"
        copy.mkdir()
        archive = subprocess.run(["git", "archive", "HEAD"], cwd=ROOT, capture_output=True, check=True).stdout
        subprocess.run(["tar", "-x", "-C", str(copy)], input=archive, check=True)
        probe = subprocess.run([str(PY), "-c", "import sinkscope; print(sinkscope.__file__)"], cwd=copy, text=True,
                               capture_output=True, env=dict(os.environ, PYTHONPATH=str(copy / "src")))  # fmt: skip
        if not probe.stdout.strip().startswith(str(copy)):
            print(f"the copy's sinkscope is not the one imported ({probe.stdout.strip()}); stopping", file=sys.stderr)
            return 2
        started = time.perf_counter()
        code, output = run_tests(copy, tests, args.timeout)
        print(f"baseline: {'passes' if code == 0 else 'FAILS'} ({time.perf_counter() - started:.0f} s)", flush=True)
        if code != 0:
            print(output[-3000:], file=sys.stderr)
            return 2
        results = []
        for i in chosen:
            mutant = MUTANTS[i - 1]
            target = copy / mutant.path
            original = target.read_text()
            where = f"{mutant.path.removeprefix('src/sinkscope/')}: {mutant.what}"
            if original.count(mutant.old) != 1:
                results.append({"id": i, "mutant": where, "result": "does not apply"})
                print(f"{i:3d} does not apply ({original.count(mutant.old)} matches)  {where}", flush=True)
                continue
            started = time.perf_counter()
            try:
                target.write_text(original.replace(mutant.old, mutant.new))
                code, output = run_tests(copy, tests, args.timeout)
            finally:
                target.write_text(original)
            seconds = time.perf_counter() - started
            result = "SURVIVED" if code == 0 else "killed"
            results.append({"id": i, "mutant": where, "result": result, "seconds": round(seconds, 1),
                            "by": "" if code == 0 else first_failure(output)})  # fmt: skip
            print(f"{i:3d} {result:8s} {seconds:5.0f} s  {where}  {results[-1]['by']}", flush=True)
        shutil.rmtree(copy, ignore_errors=True)
    applied = [r for r in results if r["result"] != "does not apply"]
    killed = sum(r["result"] == "killed" for r in applied)
    print(f"killed {killed} of {len(applied)} applied mutants ({len(results) - len(applied)} do not apply); "
          f"tests: {' '.join(tests)}")  # fmt: skip
    if args.json:
        args.json.write_text(json.dumps({"tests": tests, "results": results}, indent=1))
    return 0 if killed == len(applied) else 1


if __name__ == "__main__":
    sys.exit(main())
