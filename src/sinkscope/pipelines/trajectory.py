"""Statistics through training: `analyze` on every checkpoint of a series with the same probe windows.

`trajectory(series, config, out)` runs the default analysis (`analysis.analyze`, without the half-space
certificates) on one probe set of windows, the same token ids for every checkpoint, and stacks the per-head tables
into `trajectory.parquet`: one row per (step, layer, head), a column per statistic of the heads table and, prefixed
`layer_`, of the layers table. Each checkpoint is a cell, a run directory under `out/cells/checkpoint-<step>/`,
reused only when its checkpoint's content (weight, config and tokenizer files by sha256: `identity.model_identity`),
the probe's token ids and the settings are those it was computed with; an interrupted trajectory resumes at the first missing cell. The live `SinkscopeCallback`
(`sinkscope.integrations.transformers`) writes the same table, so one page (`write_trajectory`) draws both.

The emergence step of a pattern in a head (`emergence`) is the first step from which its score stays above the
threshold to the last step: sink score α = mean_t A[t,0] > ε, diagonal score mean_t A[t,t] > the diagonal
threshold (docs/statistics.md).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import pandas as pd

from sinkscope.errors import SinkscopeError
from sinkscope.functional.head_classes import HeadThresholds
from sinkscope.pipelines.trajectory_series import Checkpoint
from sinkscope.staging import claimed_output, real_target, staged_file_bytes

if TYPE_CHECKING:
    from sinkscope.corpus.windows import TokenWindows
    from sinkscope.pipelines.analysis import AnalyzeConfig

KEYS = ["step", "layer", "head"]
# (pattern, score column, the config field of its threshold): the patterns whose emergence is dated.
PATTERNS = (("sink", "sink_score", "epsilon"), ("diagonal", "diag_score", "diagonal"))


@dataclass(frozen=True)
class TrajectoryConfig:
    """The probe windows and thresholds of a trajectory: `max_windows` windows of `seq_len` tokens of `corpus`
    (seed `seed`), fed `batch_size` at a time; `epsilon` the sink threshold ε (Gu et al.: 0.3) and `diagonal` the
    diagonal-head threshold, both of the head classes and of `emergence`."""

    corpus: str = "builtin:prose"
    seq_len: int = 64
    max_windows: int = 32
    batch_size: int = 8
    seed: int = 0
    bos_id: int | None = None
    epsilon: float = 0.3
    diagonal: float = HeadThresholds.diagonal
    device: str = "cpu"
    dtype: str = "float32"

    def __post_init__(self) -> None:
        if self.seq_len < 2:
            raise SinkscopeError(f"--seq-len {self.seq_len} is too short: a window needs BOS plus at least 1 token")
        if self.max_windows < 1 or self.batch_size < 1:
            raise SinkscopeError("--max-windows and --batch-size must be at least 1")
        self.analyze_config()  # ε and the diagonal threshold: refused here, before any model loads

    def analyze_config(self) -> AnalyzeConfig:
        """The `AnalyzeConfig` of every checkpoint: these thresholds, no half-space certificates (a trajectory is
        about patterns; the certificates' convex programs would cost more than the forward passes)."""
        from sinkscope.pipelines.analysis import AnalyzeConfig

        return AnalyzeConfig(epsilon=self.epsilon, diagonal=self.diagonal, geometry_cap=0, seed=self.seed)


def probe_windows(config: TrajectoryConfig, tokenizer) -> TokenWindows:
    """The probe: the corpus's first `max_windows` BOS-prefixed windows, as token ids fixed once (`TokenWindows`)."""
    import torch

    from sinkscope.corpus.windows import TokenWindows, windows

    stream = windows(config.corpus, tokenizer, config.seq_len, config.max_windows, bos_id=config.bos_id,
                     batch_size=config.batch_size, seed=config.seed)  # fmt: skip
    return TokenWindows(torch.cat(list(stream)), batch_size=config.batch_size, source=config.corpus)


def probe_identity(probe: TokenWindows) -> dict:
    """What the probe is: its source, window length, window count and sha256 of its token ids (int64, row-major)."""
    import torch

    ids = probe.ids.to("cpu", dtype=torch.int64).contiguous().numpy()
    return {"source": probe.source, "seq_len": probe.seq_len, "windows": probe.count,
            "sha256": hashlib.sha256(ids.tobytes()).hexdigest()}  # fmt: skip


def trajectory_rows(heads: pd.DataFrame, layers: pd.DataFrame, step: int) -> pd.DataFrame:
    """One step's rows of `trajectory.parquet`: the heads table, the layers table's columns prefixed `layer_` beside
    each of the layer's heads, and the step first."""
    per_layer = layers.rename(columns={c: f"layer_{c}" for c in layers.columns if c != "layer"})
    rows = heads.merge(per_layer, on="layer", how="left")
    rows.insert(0, "step", int(step))
    return rows


def emergence(table: pd.DataFrame, epsilon: float, diagonal: float) -> pd.DataFrame:
    """Per head and pattern (`PATTERNS`) that holds at the last step: the first step after which the score stays
    above its threshold (`emergence_step`), whether it already held at the first step (`from_first`), and the score
    at the last step. A head whose score is at or below the threshold at the last step has no row."""
    thresholds = {"epsilon": epsilon, "diagonal": diagonal}
    rows = []
    for (layer, head), part in table.sort_values("step").groupby(["layer", "head"], sort=True):
        steps = part["step"].to_list()
        for pattern, column, field in PATTERNS:
            above = (part[column] > thresholds[field]).to_list()
            if not above[-1]:
                continue
            start = len(above) - next(i for i, held in enumerate(reversed(above)) if not held) \
                if not all(above) else 0  # fmt: skip
            rows.append({"layer": int(layer), "head": int(head), "pattern": pattern, "threshold": thresholds[field],
                         "emergence_step": int(steps[start]), "from_first": start == 0,
                         "final_score": float(part[column].iloc[-1])})  # fmt: skip
    return pd.DataFrame(rows, columns=["layer", "head", "pattern", "threshold", "emergence_step", "from_first",
                                       "final_score"])  # fmt: skip


def write_trajectory(table: pd.DataFrame, meta: dict, out: Path) -> pd.DataFrame:
    """`trajectory.parquet`, `trajectory.json` (`meta`), `emergence.csv` and the page (`report.html`, `figures/`)
    of a trajectory in `out` (created if missing), each file written whole or not at all; returns the emergence
    table."""
    from sinkscope.report.trajectory_page import write_trajectory_page

    out.mkdir(parents=True, exist_ok=True)
    table = table.sort_values(KEYS).reset_index(drop=True)
    config = meta["config"]
    dated = emergence(table, config["epsilon"], config["diagonal"])
    staged_file_bytes(out / "trajectory.parquet", table.to_parquet(index=False))
    staged_file_bytes(out / "trajectory.json", json.dumps(meta, indent=2, default=str).encode())
    staged_file_bytes(out / "emergence.csv", dated.to_csv(index=False).encode())
    write_trajectory_page(table, dated, meta, out / "report.html", figures_dir=out / "figures")
    return dated


def read_trajectory(directory: str | Path) -> tuple[pd.DataFrame, dict]:
    """The table and meta a trajectory or a `SinkscopeCallback` wrote to `directory`, or one line saying what is
    missing."""
    directory = Path(directory)
    table_path, meta_path = directory / "trajectory.parquet", directory / "trajectory.json"
    if not table_path.is_file() or not meta_path.is_file():
        raise SinkscopeError(f"{directory} holds no trajectory.parquet and trajectory.json: pass the folder a "
                             "SinkscopeCallback or `sinkscope trajectory` wrote")  # fmt: skip
    try:
        table, meta = pd.read_parquet(table_path), json.loads(meta_path.read_text(encoding="utf-8"))
    except Exception as err:  # pyarrow's ArrowInvalid, OSError, JSONDecodeError: a damaged file
        raise SinkscopeError(f"{directory}'s trajectory files are damaged ({type(err).__name__}); rerun") from None
    missing = [c for c in (*KEYS, "sink_score", "diag_score", "head_class") if c not in table.columns]
    if missing or not isinstance(meta.get("config"), dict):
        raise SinkscopeError(f"{table_path} lacks {', '.join(missing) or 'its config'}: it was not written by "
                             "sinkscope; rerun")  # fmt: skip
    return table, meta


def trajectory(series: list[Checkpoint], config: TrajectoryConfig, out: str | Path, *, progress: bool = True,
               echo: Callable[[str], None] = print, command: str = "") -> pd.DataFrame:  # fmt: skip
    """Analyse every checkpoint of `series` (`trajectory_series`) into `out/cells/` (module doc), then write the
    trajectory's files (`write_trajectory`); returns `trajectory.parquet`'s table."""
    out = real_target(Path(out))
    if out.is_file() or (out.is_dir() and any(out.iterdir()) and not (out / "cells").is_dir()):
        raise SinkscopeError(f"--out {out} exists and is not a trajectory folder; choose another folder")
    with claimed_output(out, resume=True):
        return _trajectory(series, config, out, progress, echo, command)


def _trajectory(series: list[Checkpoint], config: TrajectoryConfig, out: Path, progress: bool,
                echo: Callable[[str], None], command: str) -> pd.DataFrame:  # fmt: skip
    from transformers import AutoTokenizer

    from sinkscope.identity import describe_changes
    from sinkscope.models.load import load_model, weights_identity
    from sinkscope.pipelines.analysis import analyze, check_seq_len
    from sinkscope.pipelines.run import Run

    probe = probe_windows(config, AutoTokenizer.from_pretrained(series[0].path))
    settings = {**asdict(config), "probe": probe_identity(probe)}
    settings.pop("device")  # where a cell ran changes its numbers by float rounding only: a cell moves between them
    parts = []
    for index, checkpoint in enumerate(series):
        cell = out / "cells" / f"checkpoint-{checkpoint.step}"
        key = {**settings, "model": weights_identity(str(checkpoint.path))}  # weights, config, tokenizer by sha256
        label = f"[{index + 1}/{len(series)}] step {checkpoint.step}"
        saved = _cell_key(cell)
        if saved == key:
            echo(f"{label}: finished before, reused")
        else:
            if saved is not None:
                echo(f"{label}: {describe_changes(saved, key)} since it was computed: recomputing")
            lm = load_model(str(checkpoint.path), device=config.device, dtype=config.dtype)
            check_seq_len(lm, config.seq_len)
            run = analyze(lm, probe, config.analyze_config(), progress=progress)
            run.meta["trajectory_cell"] = key
            run.save(cell, overwrite=True, report=False)
            echo(f"{label}: sink rate {run.meta['summary']['sink_rate']:.3f}, mean diagonal score "
                 f"{run.meta['summary']['mean_diag_score']:.3f} ({run.meta['timings']['analyze_seconds']:.1f} s)")
        run = Run.load(cell)
        parts.append(trajectory_rows(run.heads, run.layers, checkpoint.step))
    meta = {"config": asdict(config), "source": "checkpoints", "command": command, "probe": settings["probe"],
            "model": run.meta["model"], "checkpoints": [{"step": c.step, "path": str(c.path)} for c in series],
            "versions": run.meta["versions"]}  # fmt: skip
    table = pd.concat(parts, ignore_index=True)
    write_trajectory(table, meta, out)
    return table


def _cell_key(cell: Path) -> dict | None:
    """The key a cell's run.json records (None: no finished cell there, or one that is unreadable)."""
    try:
        return json.loads((cell / "run.json").read_text(encoding="utf-8")).get("trajectory_cell")
    except (OSError, UnicodeDecodeError, json.JSONDecodeError, AttributeError):
        return None
