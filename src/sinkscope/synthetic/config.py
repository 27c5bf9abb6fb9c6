"""The configuration of one gBB lab run (SPEC §7): task, model and training, saved as `config.json`."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields, replace
from typing import Any

from sinkscope.errors import SinkscopeError
from sinkscope.synthetic.bigram_backcopy import GBBConfig
from sinkscope.synthetic.tiny_transformer import TinyTransformerConfig


@dataclass(frozen=True)
class TrainConfig:
    """Optimisation and bookkeeping of one run. Weight decay applies to matrices only (not norms, gates' bias,
    sink logits); on W_Q and W_K it is the nuclear-norm pressure on W_QK (min ||A||²+||B||² over A Bᵀ = W is
    2||W||_*)."""

    steps: int = 3000
    batch_size: int = 64
    lr: float = 3e-3
    weight_decay: float = 0.1
    beta2: float = 0.99
    warmup_steps: int = 100
    final_lr_ratio: float = 0.1  # cosine decay from lr to final_lr_ratio·lr after the warmup
    eval_every: int = 100
    eval_batch_size: int = 256
    checkpoint_every: int = 1000
    seed: int = 0  # model init and training data; the eval batch uses seed + 1
    threads: int = 1

    def __post_init__(self) -> None:
        for name in ("steps", "batch_size", "eval_every", "eval_batch_size", "checkpoint_every", "threads"):
            if getattr(self, name) < 1:
                raise SinkscopeError(f"train {name}={getattr(self, name)}: use a positive integer")
        if self.lr <= 0 or self.weight_decay < 0 or self.warmup_steps < 0 or not 0 <= self.final_lr_ratio <= 1:
            raise SinkscopeError(
                f"train lr={self.lr}, weight_decay={self.weight_decay}, warmup_steps={self.warmup_steps}, "
                f"final_lr_ratio={self.final_lr_ratio}: need lr > 0, wd ≥ 0, warmup ≥ 0, ratio in [0, 1]"
            )


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
