"""sinkscope: attention sinks, diagonal patterns, attention switches and oversmoothing in transformers.

    import sinkscope
    lm = sinkscope.load_model("smollm2-135m")
    run = sinkscope.analyze(lm, sinkscope.windows("builtin:prose", lm.tokenizer, seq_len=64, max_windows=256))
    run.heads, run.layers, run.positions      # pandas DataFrames (SPEC §8)
    run.save("runs/x")
    maps = sinkscope.attention(lm, "The cat sat on the mat.")   # one text's raw attention as arrays

The public names are imported lazily so that `import sinkscope` (and `sinkscope --help`) stays instant.
"""

from importlib import import_module

__version__ = "0.1.0"

_EXPORTS = {
    "load_model": "sinkscope.models.load",
    "windows": "sinkscope.corpus.windows",
    "SinkscopeError": "sinkscope.errors",
    # one entry point per command, with its configuration
    "analyze": "sinkscope.pipelines.analysis",
    "AnalyzeConfig": "sinkscope.pipelines.analysis",
    "Run": "sinkscope.pipelines.run",
    "smoothing_analysis": "sinkscope.pipelines.smoothing",
    "run_ablation": "sinkscope.pipelines.ablate",
    "AblateConfig": "sinkscope.pipelines.ablate",
    "run_cost_sweep": "sinkscope.pipelines.cost_sweep",
    "CostSweepConfig": "sinkscope.pipelines.cost_sweep",
    "sweep": "sinkscope.pipelines.sweep",
    "SweepConfig": "sinkscope.pipelines.sweep",
    "train_bb": "sinkscope.synthetic.train",
    "RunConfig": "sinkscope.synthetic.config",
    "TrainConfig": "sinkscope.synthetic.config",
    "reproduce": "sinkscope.reproduction.run",
    "ReproduceConfig": "sinkscope.reproduction.config",
    "view": "sinkscope.explorer.page",
    "attention": "sinkscope.pipelines.attention_maps",
    "AttentionMaps": "sinkscope.pipelines.attention_maps",
}
__all__ = [*_EXPORTS, "__version__"]


def __getattr__(name: str):
    if name in _EXPORTS:
        return getattr(import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module 'sinkscope' has no attribute {name!r}")


def __dir__() -> list[str]:
    """The public names too (they are imported lazily, so the module's namespace lacks them until first use):
    `dir(sinkscope)` and tab completion list `analyze`, `load_model`, …"""
    return sorted({*globals(), *__all__})
