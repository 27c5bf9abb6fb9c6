"""`SinkscopeCallback`: sinkscope's default statistics of a fixed probe batch, every N steps of a 🤗 `Trainer`.

    from sinkscope.integrations import SinkscopeCallback
    from sinkscope.pipelines.trajectory import TrajectoryConfig, probe_windows
    probe = probe_windows(TrajectoryConfig(corpus="builtin:code", seq_len=64, max_windows=32), tokenizer)
    trainer = Trainer(model, args, train_dataset=data, processing_class=tokenizer)
    SinkscopeCallback(probe, "runs/x/sinkscope", every=500).attach(trainer)
    trainer.train()          # then: sinkscope trajectory --from-log runs/x/sinkscope

At step 0 (with `at_start`) and every `every` steps, the callback runs `analysis.analyze` on the probe with the
model being trained, on its device, under `torch.no_grad()`, in eval mode (no dropout), and afterwards restores
each module's train/eval mode and the random states of Python, NumPy, torch and every CUDA device, so training
continues exactly as without it. It adds scalars to the Trainer's logs (`sinkscope/sink_rate`, ... and the sink
rate of each layer), which `report_to` forwards to TensorBoard, W&B or MLflow, and writes `trajectory.parquet` and
`trajectory.json` in `out` after each analysis (the page, `report.html`, at the end of training), the same files
`sinkscope trajectory` writes. Under `torch.distributed` every rank analyses its share of the probe and the
statistics are all-reduced (as `analyze` does); only the main process writes.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

import numpy as np
import pandas as pd
import torch
from transformers import TrainerCallback

from sinkscope.corpus.windows import TokenWindows
from sinkscope.errors import SinkscopeError
from sinkscope.models.families import family_for
from sinkscope.models.load import LoadedModel
from sinkscope.pipelines.analysis import AnalyzeConfig, analyze
from sinkscope.pipelines.trajectory import KEYS, probe_identity, trajectory_rows, write_trajectory
from sinkscope.provenance import package_versions
from sinkscope.staging import staged_file_bytes

PREFIX = "sinkscope/"


class SinkscopeCallback(TrainerCallback):
    """Analyse `probe` (token ids (N, T), each row BOS first, or `TokenWindows`) every `every` optimizer steps and
    at step 0 when `at_start`; thresholds from `config` (default: ε 0.3, no half-space certificates); `tokenizer`
    names the secondary sinks (default: the Trainer's `processing_class`). Files go to `out` (module doc)."""

    def __init__(self, probe: torch.Tensor | TokenWindows, out: str | Path, *, every: int = 500,
                 config: AnalyzeConfig | None = None, tokenizer=None, at_start: bool = True) -> None:  # fmt: skip
        if every < 1:
            raise SinkscopeError(f"SinkscopeCallback(every={every}): the interval must be at least 1 step")
        self.probe = probe if isinstance(probe, TokenWindows) else TokenWindows(torch.as_tensor(probe))
        self.out, self.every, self.at_start, self.tokenizer = Path(out), every, at_start, tokenizer
        self.config = config or AnalyzeConfig(geometry_cap=0)
        self.parts: list[pd.DataFrame] = []
        self.pending: dict[str, float] = {}
        self.meta: dict = {}

    def attach(self, trainer) -> SinkscopeCallback:
        """Add the callback to `trainer` ahead of its reporting callbacks, so that the scalars it adds to a log
        reach TensorBoard, W&B or MLflow in that same log; returns the callback."""
        trainer.callback_handler.callbacks.insert(0, self)
        return self

    def on_train_begin(self, args, state, control, model=None, processing_class=None, **kwargs):
        self.tokenizer = self.tokenizer if self.tokenizer is not None else processing_class
        self.parts = self._earlier_steps(state.global_step) if state.is_world_process_zero else []
        if self.at_start and state.global_step == 0:
            self._analyse(model, state, control, log=False)  # the Trainer logs nothing before step 1

    def on_step_end(self, args, state, control, model=None, **kwargs):
        if state.global_step % self.every == 0:
            self._analyse(model, state, control)

    def on_log(self, args, state, control, logs=None, **kwargs):
        """Put the last analysis' scalars into this log (and its entry of `state.log_history`)."""
        if self.pending and logs is not None:
            logs.update(self.pending)
            if state.log_history:
                state.log_history[-1].update(self.pending)
            self.pending = {}

    def on_train_end(self, args, state, control, **kwargs):
        if self.parts and state.is_world_process_zero:
            write_trajectory(pd.concat(self.parts, ignore_index=True), self.meta, self.out)

    def _analyse(self, model: torch.nn.Module, state, control, log: bool = True) -> None:
        """One analysis of the probe at `state.global_step`, leaving the model's modes and every RNG as found;
        `log`: its scalars go out with this step's log."""
        lm = self._loaded(model)
        modes = [(module, module.training) for module in model.modules()]
        rng = random_states()
        try:
            model.eval()
            run = analyze(lm, self.probe, self.config, progress=False)
        finally:
            for module, training in modes:
                module.training = training
            restore_random_states(rng)
        step = int(state.global_step)
        summary = run.meta["summary"]
        if log:
            self.pending = {f"{PREFIX}{key}": float(summary[key]) for key in ("sink_rate", "mean_sink_score",
                                                                               "mean_diag_score")}  # fmt: skip
            self.pending |= {f"{PREFIX}sink_rate/layer_{int(r.layer)}": float(r.sink_rate)
                             for r in run.layers.itertuples()}  # fmt: skip
            control.should_log = True
        if not state.is_world_process_zero:
            return
        self.parts = [p for p in self.parts if p["step"].iloc[0] != step] + [
            trajectory_rows(run.heads, run.layers, step)]
        self.meta = {"config": {"epsilon": self.config.epsilon, "diagonal": self.config.diagonal, "every": self.every},
                     "source": "callback", "command": f"SinkscopeCallback(every={self.every}) in a transformers.Trainer",
                     "probe": probe_identity(self.probe), "model": run.meta["model"],
                     "versions": package_versions()}  # fmt: skip
        self.out.mkdir(parents=True, exist_ok=True)
        table = pd.concat(self.parts, ignore_index=True).sort_values(KEYS)
        staged_file_bytes(self.out / "trajectory.parquet", table.to_parquet(index=False))
        staged_file_bytes(self.out / "trajectory.json", json.dumps(self.meta, indent=2).encode())

    def _loaded(self, model: torch.nn.Module) -> LoadedModel:
        """The model being trained as a `LoadedModel` (the Trainer's unwrapped model, its own device and dtype)."""
        if model is None:
            raise SinkscopeError("SinkscopeCallback got no model from the Trainer; pass it to Trainer(model=...)")
        config = getattr(model.config, "text_config", None) or model.config
        dtype = str(next(model.parameters()).dtype).removeprefix("torch.")
        identity = {"name": getattr(model.config, "name_or_path", "") or type(model).__name__,
                    "source": "trainer", "model_type": config.model_type, "dtype": dtype}  # fmt: skip
        return LoadedModel(model=model, tokenizer=self.tokenizer, family=family_for(config.model_type, config),
                           identity=identity)  # fmt: skip

    def _earlier_steps(self, start: int) -> list[pd.DataFrame]:
        """The rows `out` holds up to step `start` on this probe (training resumed from the checkpoint of step
        `start`: the analysis of that step was of the checkpoint's model), else none."""
        from sinkscope.pipelines.trajectory import read_trajectory

        if start == 0 or not (self.out / "trajectory.parquet").is_file():
            return []
        table, meta = read_trajectory(self.out)
        if meta.get("probe", {}).get("sha256") != probe_identity(self.probe)["sha256"]:
            raise SinkscopeError(f"{self.out} holds a trajectory of another probe; give the callback another out")
        self.meta = meta
        return [part for _, part in table[table["step"] <= start].groupby("step")]


def random_states() -> dict:
    """The states of Python's, NumPy's, torch's and every initialised CUDA device's random generators."""
    states = {"python": random.getstate(), "numpy": np.random.get_state(), "torch": torch.get_rng_state()}
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        states["cuda"] = torch.cuda.get_rng_state_all()
    return states


def restore_random_states(states: dict) -> None:
    """Set every generator back to `states` (`random_states`)."""
    random.setstate(states["python"])
    np.random.set_state(states["numpy"])
    torch.set_rng_state(states["torch"])
    if "cuda" in states:
        torch.cuda.set_rng_state_all(states["cuda"])
