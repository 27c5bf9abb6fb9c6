"""What `SinkscopeCallback` costs a training run at its default interval (every 500 steps).

    nice -n 10 .venv/bin/python benchmarks/callback_overhead.py --steps 200 --every 50

Trains the tiny Llama of `trajectory_pretrain.py` (4 layers, d = 64, byte tokens, batch 16 × 64) for `--steps`
steps with the callback every `--every` steps (16 probe windows of 64 tokens) and times, in that one run, every
analysis (the callback's whole work at a step: the forward passes, the tables, the parquet written) and every
training step (its wall time less the analysis in it). The overhead at the default interval is one analysis per
500 steps, `median analysis / (500 × median step)`; medians, because on a shared machine a neighbour's burst of
work lands on a few steps. The first analysis (step 0) also pays one-off imports and is reported apart, as is the
page drawn once at the end of training (`page_seconds`). Timing both in one run keeps the machine's load the same
for both: two separate runs (with and without the callback) differed by a factor of three on the loaded
2-core machine, in either direction.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path
from tempfile import TemporaryDirectory

import torch
from transformers import TrainerCallback

from trajectory_pretrain import PROBE_WINDOWS, SEQ_LEN, Windows, byte_tokenizer

DEFAULT_EVERY = 500  # SinkscopeCallback's default interval


class StepTimer(TrainerCallback):
    """Wall time of every training step, from its start to its end (the callbacks' on_step_end included)."""

    def __init__(self) -> None:
        self.seconds: list[float] = []

    def on_step_begin(self, args, state, control, **kwargs):
        self.started = time.perf_counter()

    def on_step_end(self, args, state, control, **kwargs):
        self.seconds.append(time.perf_counter() - self.started)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--every", type=int, default=50)
    args = parser.parse_args()
    torch.set_num_threads(1)
    from transformers import LlamaConfig, LlamaForCausalLM, Trainer, TrainingArguments, default_data_collator

    from sinkscope.corpus.windows import windows
    from sinkscope.integrations import SinkscopeCallback

    tokenizer = byte_tokenizer()
    cut = torch.cat(list(windows("builtin:code", tokenizer, SEQ_LEN, 400 + PROBE_WINDOWS, batch_size=64)))
    ids, probe = cut[:-PROBE_WINDOWS], cut[-PROBE_WINDOWS:]
    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=258, hidden_size=64, intermediate_size=256, num_hidden_layers=4,
                         num_attention_heads=4, num_key_value_heads=4, max_position_embeddings=128,
                         bos_token_id=256, eos_token_id=257, tie_word_embeddings=True)  # fmt: skip
    with TemporaryDirectory() as tmp:
        train_args = TrainingArguments(output_dir=tmp, max_steps=args.steps, per_device_train_batch_size=16,
                                       learning_rate=3e-3, logging_steps=args.every, save_strategy="no",
                                       report_to="none", use_cpu=True, seed=0, disable_tqdm=True)  # fmt: skip
        timer = StepTimer()
        trainer = Trainer(model=LlamaForCausalLM(config), args=train_args, train_dataset=Windows(ids),
                          processing_class=tokenizer, data_collator=default_data_collator, callbacks=[timer])
        callback = SinkscopeCallback(probe, Path(tmp) / "sinkscope", every=args.every).attach(trainer)
        analyses: dict[int, float] = {}
        analyse, finish = callback._analyse, callback.on_train_end

        def timed(model, state, control, log=True):
            started = time.perf_counter()
            analyse(model, state, control, log)
            analyses[state.global_step] = time.perf_counter() - started

        page: list[float] = []

        def timed_end(*a, **k):
            started = time.perf_counter()
            finish(*a, **k)
            page.append(time.perf_counter() - started)

        callback._analyse, callback.on_train_end = timed, timed_end
        trainer.train()
    later = [seconds for step, seconds in analyses.items() if step > 0]
    steps = [seconds - analyses.get(i + 1, 0.0) for i, seconds in enumerate(timer.seconds)]
    step, analysis = statistics.median(steps), statistics.median(later)
    print(json.dumps({
        "steps": args.steps, "every": args.every, "median_step_seconds": round(step, 4),
        "analysis_seconds": [round(analyses[s], 3) for s in sorted(analyses)],
        "median_analysis_seconds": round(analysis, 3), "page_seconds": round(page[0], 2),
        "overhead_at_every_500": round(analysis / (DEFAULT_EVERY * step), 4),
    }))  # fmt: skip


if __name__ == "__main__":
    main()
