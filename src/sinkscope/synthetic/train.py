"""Training of the gBB lab (SPEC §7): AdamW, deterministic on CPU, periodic evaluation, checkpoints, report.

A run directory holds `config.json` (task, model, training configs and package versions), `metrics.parquet` (one row per eval step,
layer and head; see `evaluation.METRIC_COLUMNS`), `summary.json` (final numbers and the copy head's pattern),
`checkpoints/step_XXXXXX.safetensors`, `figures/*.png` and a self-contained `report.html`. It is written to a
temporary sibling directory and renamed at the end.
"""

from __future__ import annotations

import json
import math
import time
from pathlib import Path
from typing import Any

import pandas as pd
import torch
from safetensors.torch import load_file, save_file
from torch.nn import functional as F

from sinkscope.errors import SinkscopeError
from sinkscope.provenance import package_versions
from sinkscope.staging import staged_directory
from sinkscope.synthetic.bigram_backcopy import GBBBatch, GBBTask
from sinkscope.synthetic.config import RunConfig, TrainConfig
from sinkscope.synthetic.evaluation import evaluate
from sinkscope.synthetic.summary import summarize
from sinkscope.synthetic.tiny_transformer import TinyTransformer


def build_model(config: RunConfig) -> TinyTransformer:
    """The lab model for `config`, initialised from `config.train.seed`."""
    torch.manual_seed(config.train.seed)
    t = config.task
    n_positions = t.length - (0 if t.bos else 1)
    return TinyTransformer(config.model, vocab_in=t.vocab_size + 1, vocab_out=t.vocab_size, max_len=n_positions)


def make_optimizer(model: TinyTransformer, train: TrainConfig) -> torch.optim.AdamW:
    """AdamW with weight decay on matrices (dim ≥ 2) only."""
    decay = [p for p in model.parameters() if p.dim() >= 2]
    other = [p for p in model.parameters() if p.dim() < 2]
    groups = [{"params": decay, "weight_decay": train.weight_decay}, {"params": other, "weight_decay": 0.0}]
    return torch.optim.AdamW(groups, lr=train.lr, betas=(0.9, train.beta2))


def learning_rate(step: int, train: TrainConfig) -> float:
    """Linear warmup over `warmup_steps`, then cosine decay to `final_lr_ratio · lr` at the last step."""
    if step <= train.warmup_steps:
        return train.lr * step / train.warmup_steps
    progress = (step - train.warmup_steps) / max(1, train.steps - train.warmup_steps)
    ratio = train.final_lr_ratio + (1 - train.final_lr_ratio) * 0.5 * (1 + math.cos(math.pi * progress))
    return train.lr * ratio


def load_trained_model(run_dir: Path, step: int | None = None) -> tuple[RunConfig, TinyTransformer]:
    """Config and model of a run directory, at `step` (default: the last checkpoint)."""
    run_dir = Path(run_dir)
    config = RunConfig.from_dict(json.loads((run_dir / "config.json").read_text()))
    paths = sorted((run_dir / "checkpoints").glob("step_*.safetensors"))
    if step is not None:
        paths = [p for p in paths if p.stem == f"step_{step:06d}"]
    if not paths:
        raise SinkscopeError(f"checkpoint: no step {step} in {run_dir / 'checkpoints'}; list the folder for steps")
    model = build_model(config)
    model.load_state_dict(load_file(paths[-1]))
    return config, model


def _train_loop(
    config: RunConfig, task: GBBTask, eval_batch: GBBBatch, run_dir: Path, log: bool
) -> tuple[pd.DataFrame, TinyTransformer]:
    train = config.train
    model = build_model(config)
    optimizer = make_optimizer(model, train)
    data_gen = torch.Generator().manual_seed(train.seed)
    rows = evaluate(model, eval_batch, step=0)
    (run_dir / "checkpoints").mkdir()
    start = time.perf_counter()
    for step in range(1, train.steps + 1):
        for group in optimizer.param_groups:
            group["lr"] = learning_rate(step, train)
        batch = task.sample(train.batch_size, data_gen)
        logits, _ = model(batch.inputs)
        loss = F.cross_entropy(logits.transpose(1, 2), batch.targets)
        if not math.isfinite(loss.item()):
            raise SinkscopeError(f"train: loss became {loss.item()} at step {step}; lower train.lr")
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        if step % train.eval_every == 0 or step == train.steps:
            rows += evaluate(model, eval_batch, step=step)
            if log:
                last = rows[-1]
                print(
                    f"step {step:5d}  loss {last['loss']:.4f} (bayes {last['bayes_loss']:.4f})  "
                    f"copy_acc {last['copy_acc']:.3f}  excess_noncopy {last['excess_loss_noncopy']:.4f}  "
                    f"{time.perf_counter() - start:.0f}s",
                    flush=True,
                )
        if step % train.checkpoint_every == 0 or step == train.steps:
            state = {name: t.detach().contiguous() for name, t in model.state_dict().items()}
            save_file(state, str(run_dir / "checkpoints" / f"step_{step:06d}.safetensors"))
    return pd.DataFrame(rows), model


def config_record(config: RunConfig) -> dict[str, Any]:
    """What a run's config.json holds: the task, model and training configs, the sha256 of the files the run reads
    (`RunConfig.inputs`, compared with the configs by `experiments.trained_with`) and the package versions."""
    return {**config.to_dict(), "inputs": config.inputs(), "versions": package_versions()}


def train_bb(config: RunConfig, out_dir: Path, overwrite: bool = False, log: bool = True) -> dict[str, Any]:
    """Train one lab model on the gBB task and write its run directory (see module doc); returns the summary."""
    from sinkscope.synthetic.report_page import write_figures, write_report

    out_dir = Path(out_dir)
    if out_dir.exists() and any(out_dir.iterdir()) and not overwrite:
        raise SinkscopeError(f"--out {out_dir}: exists and is not empty; choose another folder or pass --overwrite")
    task = GBBTask.from_config(config.task)
    previous_threads = torch.get_num_threads()
    torch.set_num_threads(config.train.threads)
    started = time.perf_counter()
    try:
        with staged_directory(out_dir) as tmp:
            (tmp / "config.json").write_text(json.dumps(config_record(config), indent=2))
            eval_batch = task.sample(config.train.eval_batch_size, torch.Generator().manual_seed(config.train.seed + 1))
            metrics, model = _train_loop(config, task, eval_batch, tmp, log)
            metrics.to_parquet(tmp / "metrics.parquet", index=False)
            summary = summarize(metrics, config, seconds=time.perf_counter() - started)
            (tmp / "summary.json").write_text(json.dumps(summary, indent=2, allow_nan=False, default=str))
            figures = write_figures(metrics, model, eval_batch, tmp / "figures", config)
            write_report(tmp / "report.html", config, summary, figures)
    finally:
        torch.set_num_threads(previous_threads)
    return summary
