"""The lab trained on both sides of Figure 3's predicted cost boundary: where the closed forms say the diagonal is
the cheaper `W_QK`, does training find a diagonal?

The boundary (`theory.cost_closed_forms.predicted_winner`) is stated for T contexts whose attention inputs have
rank r: the diagonal where Wendel's P(H1) < ½, the sink where r ≥ T + 1. In the lab a setting is (vocabulary V,
contexts T, width d): the model sees T + 1 positions (BOS and T contexts, `task.length = T + 1`), and its attention
input is a pre-LayerNorm output, which lies in the (d − 1)-dimensional image of the mean-free hyperplane
(`x − mean(x)`, scaled by the gain), so r = d − 1. Everything else is the regime map's base (`regimes.REGIME_BASE`:
one attention-only layer and head, GPT-2-like init, BOS on, AdamW 3e-3, wd 1e-4, batch 32), with `steps` steps.

`run_boundary` trains every (setting, seed) as an ordinary `train_bb` run under `out_dir/<setting>/seed_<s>/`
(reused when its `summary.json` exists) and returns one row per run (`BOUNDARY_COLUMNS`): the prediction beside
the pattern the lab's classifier gives the switch head (`summary.row_pattern`: sink / diagonal / … on non-trigger
queries, ≥ 0.5 of the row's mass).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from sinkscope.errors import SinkscopeError
from sinkscope.synthetic.config import RunConfig
from sinkscope.synthetic.regimes import REGIME_BASE
from sinkscope.synthetic.train import train_bb
from sinkscope.theory.cost_closed_forms import predicted_winner, wendel_probability


@dataclass(frozen=True)
class BoundarySetting:
    """One lab setting: vocabulary V (besides BOS), T contexts (positions after BOS), residual width d."""

    vocab_size: int
    contexts: int
    width: int

    def __post_init__(self) -> None:
        if self.width < 2 or self.contexts < 3 or self.vocab_size < 4:
            raise SinkscopeError(f"boundary setting {self}: use width ≥ 2, contexts ≥ 3, vocab_size ≥ 4")

    @property
    def rank(self) -> int:
        """Rank of the attention inputs: d − 1 (a LayerNorm output lies in the mean-free hyperplane)."""
        return self.width - 1

    @property
    def name(self) -> str:
        return f"V{self.vocab_size}_T{self.contexts}_d{self.width}"

    @property
    def predicted(self) -> str:
        return predicted_winner(self.contexts, self.rank)


# Two settings firmly on each side: P(H1) = 4.4e-4 (T = 32, r = 7) and 5.6e-6 (T = 64, r = 15) on the diagonal
# side; r = 15 ≥ T + 1 = 9 and r = 31 ≥ 17 on the sink side.
BOUNDARY_SETTINGS = (BoundarySetting(32, 32, 8), BoundarySetting(32, 64, 16), BoundarySetting(32, 8, 16),
                     BoundarySetting(32, 16, 32))  # fmt: skip
BOUNDARY_SEEDS = (0, 1, 2)
BOUNDARY_STEPS = 2000

BOUNDARY_COLUMNS = ("setting", "vocab_size", "contexts", "width", "rank", "p_h1", "predicted", "seed", "pattern",
                    "matches", "bos_mass", "diag_mass", "entropy", "copy_acc", "steps", "seconds")  # fmt: skip


def boundary_config(setting: BoundarySetting, seed: int, steps: int = BOUNDARY_STEPS) -> RunConfig:
    """The run of `setting` and `seed` (module doc)."""
    return RunConfig().with_overrides({
        **REGIME_BASE, "task.vocab_size": setting.vocab_size, "task.length": setting.contexts + 1,
        "model.d_model": setting.width, "train.steps": steps, "train.seed": seed, "train.eval_every": steps,
        "train.checkpoint_every": steps, "train.threads": 1})  # fmt: skip


def boundary_row(setting: BoundarySetting, seed: int, summary: dict, steps: int) -> dict:
    """One row of `run_boundary`'s table from a run's summary (its dominant switch head)."""
    head = summary["switch_head_final"]
    pattern = summary["switch_head"]["pattern"]
    return {"setting": setting.name, "vocab_size": setting.vocab_size, "contexts": setting.contexts,
            "width": setting.width, "rank": setting.rank, "p_h1": wendel_probability(setting.contexts, setting.rank),
            "predicted": setting.predicted, "seed": seed, "pattern": pattern, "matches": pattern == setting.predicted,
            "bos_mass": head["bos_attn"], "diag_mass": head["diag_attn"], "entropy": head["entropy"],
            "copy_acc": summary["copy_acc"], "steps": steps, "seconds": summary["seconds"]}  # fmt: skip


def _train(config: RunConfig, run_dir: Path) -> dict:
    return train_bb(config, run_dir, overwrite=True, log=False)


def run_boundary(out_dir: Path | str, settings: tuple[BoundarySetting, ...] = BOUNDARY_SETTINGS,
                 seeds: tuple[int, ...] = BOUNDARY_SEEDS, steps: int = BOUNDARY_STEPS,
                 progress: Callable[[str], None] | None = None, workers: int = 1) -> pd.DataFrame:  # fmt: skip
    """Train (or reuse) every (setting, seed) and return the table (module doc); `workers` runs at once, each in its
    own process (a run's numbers are its own: its seed, one thread)."""
    from concurrent.futures import ProcessPoolExecutor
    from contextlib import nullcontext
    from multiprocessing import get_context

    out_dir = Path(out_dir)
    jobs = [(setting, seed, out_dir / setting.name / f"seed_{seed}") for setting in settings for seed in seeds]
    todo = {run_dir: boundary_config(setting, seed, steps) for setting, seed, run_dir in jobs
            if not (run_dir / "summary.json").is_file()}  # fmt: skip
    parallel = workers > 1 and len(todo) > 1
    with ProcessPoolExecutor(workers, mp_context=get_context("spawn")) if parallel else nullcontext() as pool:
        pending = {run_dir: pool.submit(_train, config, run_dir) for run_dir, config in todo.items()} if pool else {}
        rows = []
        for setting, seed, run_dir in jobs:
            if run_dir in pending:
                summary = pending[run_dir].result()
            elif run_dir in todo:
                summary = _train(todo[run_dir], run_dir)
            else:
                summary = json.loads((run_dir / "summary.json").read_text())
            rows.append(boundary_row(setting, seed, summary, steps))
            if progress is not None:
                row = rows[-1]
                progress(f"{setting.name} seed {seed}: predicted {row['predicted']}, trained {row['pattern']} "
                         f"(BOS {row['bos_mass']:.2f}, diagonal {row['diag_mass']:.2f}), {row['seconds']:.0f} s")
    return pd.DataFrame(rows, columns=list(BOUNDARY_COLUMNS))
