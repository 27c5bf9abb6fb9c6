"""Package versions saved with every result (STYLE practice 5), so a number can be traced to its software."""

from __future__ import annotations

import platform
from importlib.metadata import PackageNotFoundError, version

PACKAGES = ("sinkscope", "torch", "transformers", "numpy", "pandas", "scipy", "cvxpy", "clarabel", "scs")


def package_versions() -> dict[str, str]:
    """Versions of Python and of the packages sinkscope's numbers depend on ("not installed" when absent)."""
    versions = {"python": platform.python_version()}
    for name in PACKAGES:
        try:
            versions[name] = version(name)
        except PackageNotFoundError:
            versions[name] = "not installed"
    return versions
