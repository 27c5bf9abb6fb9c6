"""The built wheel, installed (not editable) into a fresh venv outside the source tree, runs the CLI end to end.

This is how a `pip install sinkscope` user meets the package: a file left out of the wheel (package data), or
an import that only resolves from `src/`, fails here. Building is `python -m build --no-isolation` (sdist, then
the wheel from the sdist, with the setuptools already installed: offline and a few seconds). The fresh venv gets
the wheel with `--no-deps`; its dependencies come from the test interpreter's site-packages through a `.pth`
path line. A path line adds only that directory: the editable install's own `.pth` there (which puts `src/` on
the path) is not processed, and the test checks `sinkscope.__file__` lies inside the fresh venv.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import sysconfig
import tarfile
import zipfile
from pathlib import Path

import pytest

import sinkscope
from integration.waiting import HANG_GUARD

ROOT = Path(__file__).resolve().parents[2]
SDIST_EXTRAS = ("LICENSE", "README.md", "CHANGELOG.md", "CITATION.cff", "pyproject.toml")


def _tiny_checkpoint():
    # tests/ is not a package (a tests/packaging package would shadow the `packaging` library): load by path.
    spec = importlib.util.spec_from_file_location("tiny_checkpoint", ROOT / "tests/integration/tiny_checkpoint.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def dist(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("dist")
    subprocess.run([sys.executable, "-m", "build", "--no-isolation", "--outdir", str(out), str(ROOT)],
                   check=True, capture_output=True, text=True)
    return out


@pytest.fixture(scope="module")
def venv(dist, tmp_path_factory) -> Path:
    """A fresh venv outside the source tree holding the wheel (not editable); deps visible through a .pth line."""
    home = tmp_path_factory.mktemp("fresh") / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(home)], check=True)
    python = home / "bin" / "python"
    wheel = next(dist.glob("sinkscope-*.whl"))
    subprocess.run([sys.executable, "-m", "pip", "--python", str(python), "install", "-q", "--no-deps",
                    "--no-index", str(wheel)], check=True, capture_output=True, text=True)
    purelib = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                             check=True, capture_output=True, text=True).stdout.strip()
    (Path(purelib) / "sinkscope_test_deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    return home


def _run(venv: Path, *args: str, cwd: Path) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME")}
    env.update(PATH=f"{venv / 'bin'}{os.pathsep}{env.get('PATH', '')}", HF_HUB_OFFLINE="1")
    result = subprocess.run(list(args), cwd=cwd, env=env, capture_output=True, text=True, timeout=HANG_GUARD)
    assert result.returncode == 0, f"{' '.join(args)} exited {result.returncode}:\n{result.stdout}\n{result.stderr}"
    return result


def test_wheel_holds_every_package_file_and_the_sdist_the_project_files(dist):
    wheel = next(dist.glob("sinkscope-*.whl"))
    names = set(zipfile.ZipFile(wheel).namelist())
    source = {p.relative_to(ROOT / "src").as_posix() for p in (ROOT / "src" / "sinkscope").rglob("*")
              if p.is_file() and "__pycache__" not in p.parts and p.suffix != ".pyc"}
    assert source - names == set(), "files under src/sinkscope missing from the wheel (add them to package-data)"
    assert "sinkscope/py.typed" in names
    assert f"sinkscope-{sinkscope.__version__}.dist-info/licenses/LICENSE" in names
    assert wheel.name.startswith(f"sinkscope-{sinkscope.__version__}-py3-none-any")
    sdist = next(dist.glob("sinkscope-*.tar.gz"))
    members = {Path(m).relative_to(f"sinkscope-{sinkscope.__version__}").as_posix()
               for m in tarfile.open(sdist).getnames() if "/" in m}
    assert set(SDIST_EXTRAS) <= members


def test_installed_wheel_runs_help_models_and_analyze(venv, tmp_path):
    python = str(venv / "bin" / "python")
    probe = _run(venv, python, "-c",
                 "import importlib.metadata as m, importlib.resources as r, sinkscope; "
                 "print(sinkscope.__file__); print(m.version('sinkscope')); "
                 "print(r.files('sinkscope').joinpath('py.typed').is_file())", cwd=tmp_path)
    file, version, typed = probe.stdout.split()
    assert Path(file).is_relative_to(venv), f"sinkscope imported from {file}, not the fresh venv"
    assert version == sinkscope.__version__ and typed == "True"

    sinkscope_cli = str(venv / "bin" / "sinkscope")
    assert "analyze" in _run(venv, sinkscope_cli, "--help", cwd=tmp_path).stdout
    assert "smollm2-135m" in _run(venv, sinkscope_cli, "models", cwd=tmp_path).stdout

    tiny = _tiny_checkpoint()
    model = tiny.save_tiny_llama(tmp_path / "tiny-llama")
    corpus = tiny.write_corpus(tmp_path / "corpus.txt", documents=20)
    _run(venv, sinkscope_cli, "analyze", "--model", str(model), "--corpus", str(corpus), "--seq-len", "16",
         "--max-windows", "4", "--batch-size", "4", "--out", "run", "--quiet", cwd=tmp_path)
    meta = json.loads((tmp_path / "run" / "run.json").read_text())
    assert meta["versions"]["sinkscope"] == sinkscope.__version__
    assert (tmp_path / "run" / "heads.parquet").is_file() and (tmp_path / "run" / "report.html").is_file()
