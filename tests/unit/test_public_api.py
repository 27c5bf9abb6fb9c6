"""The top-level API names stay what the README says, whatever submodules were imported before."""

import importlib

import sinkscope


def test_public_names_are_the_functions_not_modules():
    importlib.import_module("sinkscope.pipelines.analysis")
    importlib.import_module("sinkscope.pipelines.run")
    for name in ("analyze", "load_model", "windows"):
        assert callable(getattr(sinkscope, name)) and not isinstance(getattr(sinkscope, name), type(sinkscope))
    assert isinstance(sinkscope.Run, type) and isinstance(sinkscope.AnalyzeConfig, type)
