"""Sink-rate sweeps across models × corpora × window lengths T × thresholds ε (the shapes of Gu et al. 2025's
figures): `sweep(config, out)`.

Each (model, corpus, T) cell is one `analyze` pass whose `WindowSinkRate` statistic counts the per-window
exceedances at every ε at once (`AnalyzeConfig.epsilons`), so the ε sweep never re-runs the model and never
stores per-window scores:
its state stays constant in the number of windows. A cell is a run directory under `out/cells/`; a finished
cell (its run.json exists, computed with the same settings) is skipped, so an interrupted sweep continues where
it stopped (from any cell). The sweep holds `out`'s lock (as analyze does), so a second sweep on the same `out` is
refused instead of computing every cell again. The tidy table `sweep.parquet` / `sweep.csv` has one row per
model × corpus × T × ε.
"""

from __future__ import annotations

import hashlib
import json
import re
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

import pandas as pd

from sinkscope.errors import SinkscopeError
from sinkscope.ownership import is_workspace, stamped
from sinkscope.staging import child, claimed_output, real_target, staged_file_bytes

# A sweep's folder carries the ownership marker of SWEEP_KIND; an unstamped folder of an older sweep is one holding
# only these top-level names and folders of sinkscope results (its cells/).
SWEEP_KIND = "sweep"
SWEEP_FILES = ("sweep.json", "sweep.parquet", "sweep.csv", "report.html", "figures")
ROW_COLUMNS = (
    "model", "corpus", "seq_len", "epsilon", "windows", "sink_rate", "sink_rate_of_mean", "mean_sink_score",
    "mean_diag_score", "analyze_seconds", "cell",
)  # fmt: skip


@dataclass(frozen=True)
class SweepConfig:
    """What a sweep runs: every model × corpus × T cell on `max_windows` windows, sink rates at every ε.

    `models`: embedded names, model directories, .gguf files or hub ids; `corpora`: corpus sources (SPEC §1);
    `seq_lens`: window lengths T; `epsilons`: sink-rate thresholds (the cell's tables use 0.3 when listed, else
    the first). The half-space certificates are skipped (`geometry_cap` 0): a sweep is about sink rates.
    """

    models: tuple[str, ...]
    corpora: tuple[str, ...]
    seq_lens: tuple[int, ...]
    epsilons: tuple[float, ...] = (0.1, 0.3, 0.5, 0.8)
    max_windows: int = 64
    batch_size: int = 8
    seed: int = 0
    device: str = "cpu"
    dtype: str = "float32"

    def __post_init__(self) -> None:
        from sinkscope.corpus.sources import check_source

        for name in ("models", "corpora", "seq_lens", "epsilons"):
            values = tuple(getattr(self, name))
            if not values:
                raise SinkscopeError(f"--{name.replace('_', '-')} is empty; give at least one value")
            if len(set(values)) != len(values):
                raise SinkscopeError(f"--{name.replace('_', '-')} lists a value twice: {', '.join(map(str, values))}")
            for value in values:
                try:
                    str(value).encode("utf-8")
                except UnicodeEncodeError:  # e.g. a file name that is not UTF-8 (Python gives it surrogates)
                    raise SinkscopeError(
                        f"--{name.replace('_', '-')} {value!r} is not valid UTF-8 text; rename it"
                    ) from None
            object.__setattr__(self, name, values)
        for seq_len in self.seq_lens:
            if seq_len < 2:
                raise SinkscopeError(f"--seq-lens {seq_len} is too short: a window needs BOS plus at least 1 token")
        for epsilon in self.epsilons:
            if not 0 < epsilon < 1:
                raise SinkscopeError(f"--epsilons {epsilon} must lie strictly between 0 and 1")
        if self.max_windows < 1 or self.batch_size < 1:
            raise SinkscopeError("--max-windows and --batch-size must be at least 1")
        for corpus in self.corpora:
            check_source(corpus)  # a missing corpus file fails before any model loads

    @property
    def table_epsilon(self) -> float:
        """The ε of each cell's own tables (heads, layers, positions, tokens): 0.3 (Gu et al.) when swept."""
        return 0.3 if 0.3 in self.epsilons else self.epsilons[0]

    def cell_settings(self, model: str, corpus: str, seq_len: int) -> dict:
        """What a finished cell must have been computed with to be reused."""
        return {
            "model": model, "corpus": corpus, "seq_len": seq_len, "epsilons": list(self.epsilons),
            "max_windows": self.max_windows, "seed": self.seed, "dtype": self.dtype,
        }  # fmt: skip


def cell_name(model: str, corpus: str, seq_len: int) -> str:
    """A directory name for a cell: `MODEL__CORPUS__T<T>`, readable and safe on every file system, and distinct for
    distinct cells. When a model or corpus holds a character other than `A-Za-z0-9.+-` (each run of them shows as
    `-`), or is long, the name ends in `-` and 10 hex digits of sha256 of the pair, so `корпус.txt` and `语料.txt`
    (both `.txt` when read) get two cells."""
    name = _legacy_cell_name(model, corpus, seq_len)
    if name == f"{model}__{corpus}__T{seq_len}" and not name.startswith(".") and len(name) <= 120:
        return name
    parts = (re.sub(r"[^A-Za-z0-9.+-]+", "-", part).strip("-.")[:40] for part in (model, corpus))
    digest = hashlib.sha256(json.dumps([model, corpus]).encode()).hexdigest()[:10]
    return f"{'__'.join(parts)}__T{seq_len}-{digest}"


def _legacy_cell_name(model: str, corpus: str, seq_len: int) -> str:
    """The name sweeps before issue 26 gave a cell (not unique: 'корпус.txt' and '语料.txt' shared one)."""
    slug = "__".join(re.sub(r"[^A-Za-z0-9.+-]+", "-", part).strip("-") for part in (model, corpus))
    return f"{slug}__T{seq_len}"


def cell_directory(out: Path, model: str, corpus: str, seq_len: int, settings: dict) -> Path:
    """Where a cell lives under `out/cells/`: its `cell_name`, or the name an earlier sinkscope gave it when that
    folder holds exactly this cell (its run.json records the model and corpus as given), so old sweeps resume."""
    directory = child(out / "cells", cell_name(model, corpus, seq_len))
    legacy = child(out / "cells", _legacy_cell_name(model, corpus, seq_len))
    if legacy != directory and not directory.exists() and _saved_settings(legacy) == settings:
        return legacy
    return directory


def _saved_settings(directory: Path) -> dict | None:
    """The `sweep_cell` settings a cell's run.json records (None without one); a corrupt run.json is one line."""
    meta_path = directory / "run.json"
    if not meta_path.is_file():
        return None
    try:
        meta = json.loads(meta_path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        raise SinkscopeError(
            f"sweep cell {meta_path} is unreadable ({err}); delete the folder {directory} and rerun to recompute it"
        ) from None
    if not isinstance(meta, dict) or not isinstance(meta.get("sweep_cell"), dict):
        raise SinkscopeError(
            f"sweep cell {meta_path} is not a sweep cell's run.json; delete the folder {directory} and rerun"
        )
    return meta["sweep_cell"]


def finished_cell(directory: Path, settings: dict, content: dict | None = None) -> bool:
    """Whether `directory` holds a cell computed with `settings` on inputs of this `content` (`cell_content`); a
    cell computed with other settings is refused, one whose model or corpus changed since is not finished."""
    if not (directory / "run.json").is_file():
        return False
    saved = _same_epsilons(dict(_saved_settings(directory) or {}))
    saved_content = saved.pop("content", None)
    settings = _same_epsilons(settings)
    if saved != settings:
        changed = sorted(k for k in settings if saved.get(k) != settings[k])
        raise SinkscopeError(
            f"{directory} was computed with other settings ({', '.join(changed)}); use another --out or delete it"
        )
    return content is None or saved_content == content


def _same_epsilons(settings: dict) -> dict:
    """`settings` with its ε list as what a cell's numbers depend on: the set of ε (each has its own count, listed
    by value) and the ε of the cell's own tables (`SweepConfig.table_epsilon`), so `--epsilons` in another order
    reuses the cell."""
    epsilons = settings.get("epsilons")
    if not isinstance(epsilons, list) or not epsilons:
        return settings
    return {**settings, "epsilons": [0.3 if 0.3 in epsilons else epsilons[0], sorted(epsilons, key=str)]}


def cell_content(model: str, corpus: str) -> dict:
    """The content of a cell's inputs: its model (weights, config and tokenizer files) and its corpus's text
    (`models.load.weights_identity`, `identity.corpus_identity`), so a rerun after either changed recomputes the cell
    instead of reusing it."""
    from sinkscope.identity import corpus_identity
    from sinkscope.models.load import weights_identity

    return {"model": weights_identity(model), "corpus": corpus_identity(corpus)}


def content_change(directory: Path, content: dict) -> str:
    """What changed in a finished cell's inputs since it was computed ('model.files.tokenizer.json changed'), for
    the line that says why it is computed again."""
    from sinkscope.identity import describe_changes

    return describe_changes((_saved_settings(directory) or {}).get("content"), content)


def cell_rows(meta: dict, epsilons: tuple[float, ...], cell: str) -> list[dict]:
    """One tidy row per ε from a cell's run.json."""
    summary, settings = meta["summary"], meta["sweep_cell"]
    return [
        {
            "model": settings["model"], "corpus": settings["corpus"], "seq_len": settings["seq_len"],
            "epsilon": epsilon, "windows": meta["corpus"]["windows"],
            "sink_rate": summary["sink_rates"][str(epsilon)],
            "sink_rate_of_mean": summary["sink_rates_of_mean"][str(epsilon)],
            "mean_sink_score": summary["mean_sink_score"], "mean_diag_score": summary["mean_diag_score"],
            "analyze_seconds": meta["timings"]["analyze_seconds"], "cell": cell,
        }  # fmt: skip
        for epsilon in epsilons
    ]


def sweep(config: SweepConfig, out: str | Path, *, progress: bool = True, echo: Callable[[str], None] = print
          ) -> pd.DataFrame:  # fmt: skip
    """Run every missing cell of `config` into `out/cells/`, then write `out/sweep.parquet`, `out/sweep.csv`,
    `out/figures/*.png` and `out/report.html`; returns the tidy table. `echo` gets one line per cell."""
    out = real_target(Path(out))
    check_sweep_folder(out)
    cells = [(m, c, t) for m in config.models for c in config.corpora for t in config.seq_lens]
    names = [cell_name(*cell) for cell in cells]
    if len({name.casefold() for name in names}) != len(names):
        raise SinkscopeError(f"two sweep cells would share a folder ({', '.join(names)}); rename a corpus or model")
    with claimed_output(out, resume=True):  # the lock analyze takes: a second sweep on `out` is refused
        check_sweep_folder(out)  # again under the lock, then stamped as the sweep's own folder
        with stamped(out, SWEEP_KIND):
            return _sweep(config, out, cells, progress, echo)


def check_sweep_folder(out: Path) -> None:
    """Refuse an existing `out` that is not a sweep's own folder (`ownership.is_workspace`): a sweep rewrites its
    tables, figures and page there, so a user's folder that merely has a `cells/` subfolder is never taken over."""
    if out.exists() and not out.is_dir():
        raise SinkscopeError(f"--out {out} exists and is not a directory; choose another --out")
    if out.is_dir() and not is_workspace(out, SWEEP_KIND, SWEEP_FILES):
        raise SinkscopeError(
            f"--out {out} exists and is not a sweep directory: it holds files no sweep wrote (a folder a sweep makes "
            "carries sinkscope's marker), so the sweep will not write into it; choose another --out"
        )


def _sweep(config: SweepConfig, out: Path, cells: list[tuple[str, str, int]], progress: bool,
           echo: Callable[[str], None]) -> pd.DataFrame:  # fmt: skip
    from sinkscope.corpus.windows import windows
    from sinkscope.models.load import load_model
    from sinkscope.pipelines.analysis import AnalyzeConfig, analyze, check_seq_len

    directories = {cell: cell_directory(out, *cell, config.cell_settings(*cell)) for cell in cells}
    contents = {pair: cell_content(*pair) for pair in dict.fromkeys((m, c) for m, c, _ in cells)}
    done = {cell: finished_cell(directories[cell], config.cell_settings(*cell), contents[cell[:2]]) for cell in cells}
    analyze_config = AnalyzeConfig(epsilon=config.table_epsilon, epsilons=config.epsilons, geometry_cap=0,
                                   seed=config.seed)  # fmt: skip
    rows: list[dict] = []
    lm, loaded = None, None
    for index, cell in enumerate(cells):
        model, corpus, seq_len = cell
        directory = directories[cell]
        label = f"[{index + 1}/{len(cells)}] {model} · {corpus} · T={seq_len}"
        if done[cell]:
            echo(f"{label}: finished before, skipped")
        else:
            if (directory / "run.json").is_file():
                change = content_change(directory, contents[cell[:2]])
                echo(f"{label}: its inputs changed since it was computed ({change}): recomputing")
            if loaded != model:  # each model loads once, for its first missing cell (whichever that is)
                started = time.perf_counter()
                lm, loaded = load_model(model, device=config.device, dtype=config.dtype), model
                for length in config.seq_lens:
                    check_seq_len(lm, length)
                echo(f"loaded {model} in {time.perf_counter() - started:.1f} s")
            stream = windows(corpus, lm.tokenizer, seq_len, config.max_windows, batch_size=config.batch_size,
                             seed=config.seed)  # fmt: skip
            available = stream.available()  # a short corpus gives fewer windows than asked: say so, and how many
            short = "" if available is None or available >= config.max_windows else \
                f" (the corpus gives {available} of the {config.max_windows} asked for)"
            echo(f"{label}: analysing {config.max_windows if available is None else available} windows{short}")
            run = analyze(lm, stream, analyze_config, progress=progress)
            run.meta["sweep_cell"] = {**config.cell_settings(*cell), "content": contents[cell[:2]]}
            run.save(directory, overwrite=True, report=False)
            rates = ", ".join(f"{e}: {run.meta['summary']['sink_rates'][str(e)]:.3f}" for e in config.epsilons)
            echo(f"{label}: sink rate by ε {rates} ({run.meta['timings']['analyze_seconds']:.1f} s)")
        meta = json.loads((directory / "run.json").read_text(encoding="utf-8"))
        rows += cell_rows(meta, config.epsilons, directory.name)
    table = pd.DataFrame(rows, columns=list(ROW_COLUMNS))
    write_sweep(table, out, config)
    return table


def write_sweep(table: pd.DataFrame, out: Path, config: SweepConfig) -> None:
    """The tidy table (parquet and CSV), the figures and the report page of a sweep, each written atomically."""
    from sinkscope.report.sweep_page import write_sweep_report

    staged_file_bytes(out / "sweep.json", json.dumps({"config": asdict(config)}, indent=2).encode())
    staged_file_bytes(out / "sweep.parquet", table.to_parquet(index=False))
    staged_file_bytes(out / "sweep.csv", table.to_csv(index=False).encode())
    write_sweep_report(table, out / "report.html", figures_dir=out / "figures", epsilon=config.table_epsilon)
