"""The release files agree with each other: one version, the declared licence's full text, a valid citation."""

from __future__ import annotations

import re
from pathlib import Path

import tomllib
import yaml

import sinkscope

ROOT = Path(__file__).resolve().parents[2]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())


def test_version_is_written_once_in_the_package():
    project = PYPROJECT["project"]
    assert "version" not in project and "version" in project["dynamic"]
    assert PYPROJECT["tool"]["setuptools"]["dynamic"]["version"] == {"attr": "sinkscope.__version__"}
    assert re.fullmatch(r"\d+\.\d+\.\d+", sinkscope.__version__)
    assert f"## [{sinkscope.__version__}]" in (ROOT / "CHANGELOG.md").read_text()


def test_licence_file_is_the_full_apache_2_text_pyproject_declares():
    text = (ROOT / "LICENSE").read_text()
    assert PYPROJECT["project"]["license"] == "Apache-2.0" and PYPROJECT["project"]["license-files"] == ["LICENSE"]
    assert text.split()[:4] == ["Apache", "License", "Version", "2.0,"]
    assert "END OF TERMS AND CONDITIONS" in text and "9. Accepting Warranty or Additional Liability." in text


def test_python_versions_stated_match_the_classifiers():
    project = PYPROJECT["project"]
    assert project["requires-python"] == ">=3.10"
    stated = {c.rsplit(" :: ", 1)[1] for c in project["classifiers"] if re.search(r"Python :: 3\.\d+$", c)}
    assert stated == {"3.10", "3.11", "3.12", "3.13"}


def test_citation_cites_the_paper_and_the_software():
    cff = yaml.safe_load((ROOT / "CITATION.cff").read_text())
    assert cff["cff-version"] == "1.2.0" and cff["type"] == "software" and cff["license"] == "Apache-2.0"
    assert cff.get("version", sinkscope.__version__) == sinkscope.__version__
    paper = cff["preferred-citation"]
    assert paper == cff["references"][0]
    assert paper["title"] == ("Sink vs. diagonal patterns as mechanisms for attention switch and oversmoothing "
                              "prevention")
    assert {i["value"] for i in paper["identifiers"]} == {"arXiv:2605.08453", "10.48550/arXiv.2605.08453"}
    assert all(a["family-names"] and a["given-names"] for a in paper["authors"])
