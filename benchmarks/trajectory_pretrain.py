"""Pretrain a tiny Llama on `builtin:code` with `transformers.Trainer`, watched by `SinkscopeCallback`.

    nice -n 10 .venv/bin/python benchmarks/trajectory_pretrain.py --out runs/pretrain --steps 600 \
        --weight-decays 0.0,0.5 --every 25
    sinkscope trajectory --from-log runs/pretrain/bos-wd0.5/sinkscope     # the page of one run

Four runs (a fixed first token or none × each weight decay) of the same model, data order and seed. The tokenizer
is byte-level (256 byte tokens, `<bos>`, `<eos>`), so no downloaded vocabulary is needed. Training windows are
the corpus's BOS-prefixed windows of 64 tokens (`corpus.windows`); without a fixed first token the BOS is dropped
and every sequence starts wherever the text was cut (63 tokens), as in Gu et al. 2025's no-BOS setting. The probe
is 16 held-out windows, cut the same way for each setting. Each run writes `DIR/<bos|nobos>-wd<γ>/sinkscope/`
(trajectory.parquet, report.html) and a line of `DIR/emergence.csv` per run: the first step after which some head
stays a sink to the end (`first_sink_step`), the final loss, sink rate, mean sink score and number of sink heads.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import pandas as pd
import torch

SEQ_LEN, PROBE_WINDOWS = 64, 16


def byte_tokenizer():
    """A byte-level tokenizer: every byte one token (ids 0-255), then `<bos>` 256 and `<eos>` 257."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    alphabet = sorted(pre_tokenizers.ByteLevel.alphabet())
    vocab = {c: i for i, c in enumerate(alphabet)} | {"<bos>": 256, "<eos>": 257}
    core = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    core.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    core.decoder = decoders.ByteLevel()
    return PreTrainedTokenizerFast(tokenizer_object=core, bos_token="<bos>", eos_token="<eos>")


class Windows(torch.utils.data.Dataset):
    def __init__(self, ids: torch.Tensor) -> None:
        self.ids = ids

    def __len__(self) -> int:
        return len(self.ids)

    def __getitem__(self, index: int) -> dict:
        return {"input_ids": self.ids[index], "labels": self.ids[index]}


def train_run(out: Path, ids: torch.Tensor, probe: torch.Tensor, tokenizer, weight_decay: float, steps: int,
              every: int | None) -> dict:  # fmt: skip
    """One Trainer run; `every` None: without the callback. Returns its wall time and losses."""
    from transformers import LlamaConfig, LlamaForCausalLM, Trainer, TrainingArguments, default_data_collator

    from sinkscope.integrations import SinkscopeCallback

    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=258, hidden_size=64, intermediate_size=256, num_hidden_layers=4,
                         num_attention_heads=4, num_key_value_heads=4, max_position_embeddings=128,
                         bos_token_id=256, eos_token_id=257, tie_word_embeddings=True)  # fmt: skip
    args = TrainingArguments(output_dir=str(out), max_steps=steps, per_device_train_batch_size=16,
                             learning_rate=3e-3, warmup_steps=min(50, steps // 10), lr_scheduler_type="cosine",
                             weight_decay=weight_decay, logging_steps=every or 50, save_strategy="no",
                             report_to="none", use_cpu=True, seed=0, dataloader_num_workers=0,
                             disable_tqdm=True)  # fmt: skip
    trainer = Trainer(model=LlamaForCausalLM(config), args=args, train_dataset=Windows(ids),
                      processing_class=tokenizer, data_collator=default_data_collator)  # fmt: skip
    if every is not None:
        SinkscopeCallback(probe, out / "sinkscope", every=every).attach(trainer)
    started = time.perf_counter()
    trainer.train()
    seconds = time.perf_counter() - started
    losses = [e["loss"] for e in trainer.state.log_history if "loss" in e]
    return {"seconds": seconds, "final_loss": losses[-1], "losses": losses}


def first_sink_step(table: pd.DataFrame, epsilon: float = 0.3) -> int | None:
    """The first analysed step after which some head of the model stays a sink (window-mean α > ε) to the end."""
    from sinkscope.pipelines.trajectory import emergence

    dated = emergence(table, epsilon, 0.5)
    sinks = dated[dated["pattern"] == "sink"]
    return None if sinks.empty else int(sinks["emergence_step"].min())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--steps", type=int, default=600)
    parser.add_argument("--every", type=int, default=25)
    parser.add_argument("--weight-decays", default="0.0,0.5")
    parser.add_argument("--windows", type=int, default=1200, help="training windows (before the held-out probe)")
    args = parser.parse_args()
    torch.set_num_threads(1)
    from sinkscope.corpus.windows import windows

    tokenizer = byte_tokenizer()
    cut = torch.cat(list(windows("builtin:code", tokenizer, SEQ_LEN, args.windows + PROBE_WINDOWS, batch_size=64)))
    train_ids, probe_ids = cut[:-PROBE_WINDOWS], cut[-PROBE_WINDOWS:]
    rows = []
    for bos in (True, False):
        for weight_decay in (float(w) for w in args.weight_decays.split(",")):
            name = f"{'bos' if bos else 'nobos'}-wd{weight_decay}"
            ids, probe = (train_ids, probe_ids) if bos else (train_ids[:, 1:], probe_ids[:, 1:])
            result = train_run(args.out / name, ids, probe, tokenizer, weight_decay, args.steps, args.every)
            table = pd.read_parquet(args.out / name / "sinkscope" / "trajectory.parquet")
            last = table[table["step"] == table["step"].max()]
            rows.append({"run": name, "bos": bos, "weight_decay": weight_decay, "steps": args.steps,
                         "seconds": round(result["seconds"], 1), "final_loss": round(result["final_loss"], 3),
                         "first_sink_step": first_sink_step(table),
                         "final_sink_rate": round(float(last["sink_rate"].mean()), 3),
                         "final_mean_sink": round(float(last["sink_score"].mean()), 3),
                         "final_sink_heads": int((last["head_class"] == "sink").sum())})  # fmt: skip
            print(json.dumps(rows[-1]), flush=True)
    pd.DataFrame(rows).to_csv(args.out / "emergence.csv", index=False)


if __name__ == "__main__":
    main()
