"""The top-level API names stay what the README says, whatever submodules were imported before."""

import importlib

import sinkscope


def test_public_names_are_the_functions_not_modules():
    importlib.import_module("sinkscope.pipelines.analysis")
    importlib.import_module("sinkscope.pipelines.run")
    for name in ("analyze", "load_model", "windows"):
        assert callable(getattr(sinkscope, name)) and not isinstance(getattr(sinkscope, name), type(sinkscope))
    assert isinstance(sinkscope.Run, type) and isinstance(sinkscope.AnalyzeConfig, type)


def test_every_command_has_its_entry_point_and_config_at_the_top():
    """analyze, smoothing, ablate, cost, sweep, train-bb, reproduce and view: a function each, configs as classes."""
    for name in ("analyze", "smoothing_analysis", "run_ablation", "run_cost_sweep", "sweep", "train_bb", "reproduce",
                 "view"):  # fmt: skip
        assert callable(getattr(sinkscope, name)) and not isinstance(getattr(sinkscope, name), type), name
    for name in ("AnalyzeConfig", "AblateConfig", "CostSweepConfig", "SweepConfig", "RunConfig", "TrainConfig",
                 "ReproduceConfig"):  # fmt: skip
        assert isinstance(getattr(sinkscope, name), type), name
    assert set(sinkscope.__all__) >= {"analyze", "train_bb", "SweepConfig", "__version__"}
