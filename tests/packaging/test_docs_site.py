"""The documentation site builds with every warning an error (`mkdocs build --strict`, mkdocs.yml): every page of
docs/ is in the navigation (an omitted page warns), every link and anchor resolves, every formula becomes MathML,
and the API reference is generated from the docstrings."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from integration.waiting import HANG_GUARD

ROOT = Path(__file__).resolve().parents[2]


def test_docs_site_builds_strict_with_formulas_and_api(tmp_path):
    pytest.importorskip("mkdocs")
    pytest.importorskip("mkdocstrings_handlers.python")
    site = tmp_path / "site"
    done = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(site)], cwd=ROOT,
                          capture_output=True, text=True, timeout=HANG_GUARD)  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    assert "WARNING" not in done.stderr, done.stderr[-3000:]
    pages = sorted(p.relative_to(ROOT / "docs").with_suffix(".html") for p in (ROOT / "docs").rglob("*.md"))
    assert all((site / page).is_file() for page in pages), [p for p in pages if not (site / p).is_file()]
    index = (site / "index.html").read_text()
    for page in pages:  # the index links every page (directly, not only through the navigation)
        if page.name != "index.html":
            assert f'href="{page.as_posix()}"' in index.split('role="main"')[1], page
    for source in sorted((ROOT / "docs").rglob("*.md")):  # formulas: as many MathML elements as $…$ / $$…$$ in the source
        text = re.sub(r"```.*?```|`[^`\n]*`", "", source.read_text(), flags=re.S)
        formulas = len(re.findall(r"\$\$.+?\$\$|\$[^$\n]+\$", text))
        built = (site / source.relative_to(ROOT / "docs")).with_suffix(".html").read_text()
        assert built.count("<math") == formulas, (source.name, built.count("<math"), formulas)
        assert "arithmatex" not in built
    assert (site / "theory" / "oversmoothing.html").read_text().count("<math") >= 3
    api = (site / "api.html").read_text()
    for name in ("models.load.load_model", "pipelines.analysis.analyze", "pipelines.analysis.AnalyzeConfig",
                 "pipelines.attention_maps.attention", "explorer.page.view", "pipelines.run.Run", "errors.SinkscopeError"):
        assert f'id="sinkscope.{name}"' in api, name
    assert "Every head's attention map on one text" in api  # a docstring, rendered
    assert (site / "tutorial.ipynb").is_file()  # the notebook the tutorial page links
