"""The configuration of one gBB lab run (SPEC §7): task, model and training, saved as `config.json`."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field, fields, replace
from pathlib import Path
from typing import Any

from sinkscope.errors import SinkscopeError
from sinkscope.synthetic.bigram_backcopy import GBBConfig
from sinkscope.synthetic.tiny_transformer import TinyTransformerConfig

# Help of the task and model fields, whose dataclasses live in bigram_backcopy.py and tiny_transformer.py
# (TrainConfig's fields carry theirs as metadata); `sinkscope train-bb` shows them with one flag per field.
FIELD_HELP: dict[str, str] = {
    "task.vocab_size": "V, tokens besides BOS",
    "task.n_triggers": "K, number of triggers (ids 0..K-1)",
    "task.copy_offset": "k, a trigger at t copies s_{t-k}",
    "task.p_copy": "probability that a trigger copies",
    "task.dirichlet_alpha": "Dirichlet concentration of the bigram rows",
    "task.bigram_text": "text file whose character bigram replaces the Dirichlet rows",
    "task.length": "L, positions per sequence including BOS",
    "task.bos": "BOS as the model's first input (--no-bos removes it)",
    "task.seed": "seed of the bigram matrix (not of the sequences)",
    "model.n_layers": "transformer layers",
    "model.n_heads": "heads per layer",
    "model.d_model": "residual width",
    "model.mlp": "an MLP in every block (--no-mlp: attention-only blocks)",
    "model.mlp_ratio": "MLP hidden width as a multiple of d_model",
    "model.norm": "layernorm | rmsnorm",
    "model.norm_position": "pre | post",
    "model.positional": "learned | rope | none",
    "model.attention": "softmax | softmax_sink | relu | sigmoid_gate | softmax1 | sigmoid | softpick | output_gate",
    "model.init": "gpt2 = N(0, 0.02²) | torch = PyTorch defaults | scaled (the two stds below)",
    "model.init_std": "std of Linear weights with --init scaled",
    "model.embedding_init_std": "std of embeddings with --init scaled",
}


@dataclass(frozen=True)
class TrainConfig:
    """Optimisation and bookkeeping of one run. Weight decay applies to matrices only (not norms, gates' bias,
    sink logits); on W_Q and W_K it is the nuclear-norm pressure on W_QK (min ||A||²+||B||² over A Bᵀ = W is
    2||W||_*)."""

    steps: int = field(default=3000, metadata={"help": "training steps"})
    batch_size: int = field(default=64, metadata={"help": "sequences per step"})
    lr: float = field(default=3e-3, metadata={"help": "AdamW learning rate"})
    weight_decay: float = field(default=0.1, metadata={"help": "AdamW weight decay on matrices"})
    beta2: float = field(default=0.99, metadata={"help": "AdamW β₂ (β₁ is 0.9)"})
    warmup_steps: int = field(default=100, metadata={"help": "steps of linear learning-rate warmup"})
    final_lr_ratio: float = field(  # cosine decay from lr to final_lr_ratio·lr after the warmup
        default=0.1, metadata={"help": "learning rate at the last step, as a fraction of lr (cosine decay)"}
    )
    eval_every: int = field(default=100, metadata={"help": "steps between evaluations"})
    eval_batch_size: int = field(default=256, metadata={"help": "sequences of the evaluation batch (seed + 1)"})
    checkpoint_every: int = field(default=1000, metadata={"help": "steps between saved checkpoints"})
    seed: int = field(  # model init and training data; the eval batch uses seed + 1
        default=0, metadata={"help": "seed of the model init and the data"}
    )
    threads: int = field(default=1, metadata={"help": "torch CPU threads"})

    def __post_init__(self) -> None:
        for name in ("steps", "batch_size", "eval_every", "eval_batch_size", "checkpoint_every", "threads"):
            if getattr(self, name) < 1:
                raise SinkscopeError(f"train {name}={getattr(self, name)}: use a positive integer")
        for name in ("lr", "weight_decay", "beta2", "final_lr_ratio"):
            if not math.isfinite(getattr(self, name)):  # NaN passes every comparison below; torch refuses it late
                raise SinkscopeError(f"train {name}={getattr(self, name)}: use a finite number")
        if self.lr <= 0 or self.weight_decay < 0 or self.warmup_steps < 0 or not 0 <= self.final_lr_ratio <= 1:
            raise SinkscopeError(
                f"train lr={self.lr}, weight_decay={self.weight_decay}, warmup_steps={self.warmup_steps}, "
                f"final_lr_ratio={self.final_lr_ratio}: need lr > 0, wd ≥ 0, warmup ≥ 0, ratio in [0, 1]"
            )
        if not 0 <= self.beta2 < 1:
            raise SinkscopeError(f"train beta2={self.beta2}: AdamW's β₂ lies in [0, 1)")


@dataclass(frozen=True)
class RunConfig:
    """Everything that defines a lab run; saved as config.json."""

    task: GBBConfig = field(default_factory=GBBConfig)
    model: TinyTransformerConfig = field(default_factory=TinyTransformerConfig)
    train: TrainConfig = field(default_factory=TrainConfig)

    def to_dict(self) -> dict[str, dict[str, Any]]:
        return {"task": asdict(self.task), "model": asdict(self.model), "train": asdict(self.train)}

    @classmethod
    def from_dict(cls, data: dict[str, dict[str, Any]]) -> RunConfig:
        return cls(GBBConfig(**data["task"]), TinyTransformerConfig(**data["model"]), TrainConfig(**data["train"]))

    def inputs(self) -> dict[str, str]:
        """The sha256 of the files the run reads (`identity.content_sha256`): `{"bigram_text": …}` when the task's
        bigram is read from a text file that exists, else {}; a grid reuses a run only for the same content."""
        if not self.task.bigram_text or not Path(self.task.bigram_text).expanduser().is_file():
            return {}
        from sinkscope.identity import content_sha256

        return {"bigram_text": content_sha256(self.task.bigram_text)}

    def with_overrides(self, overrides: dict[str, Any]) -> RunConfig:
        """A copy with dotted overrides, e.g. {"model.attention": "relu", "train.weight_decay": 1.0}."""
        parts = {"task": self.task, "model": self.model, "train": self.train}
        changes: dict[str, dict[str, Any]] = {section: {} for section in parts}
        for key, value in overrides.items():
            section, _, name = key.partition(".")
            if section not in parts or name not in {f.name for f in fields(parts[section])}:
                raise SinkscopeError(
                    f"override {key!r}: use section.field with section in task/model/train and a field of it"
                )
            changes[section][name] = value
        # one replace per section, so that fields checked together (model.init with its stds) change together
        return RunConfig(**{section: replace(parts[section], **changes[section]) for section in parts})
