"""docs/tutorial.ipynb executes top to bottom with the embedded SmolLM2 (nbclient, a real Jupyter kernel), so the
notebook never goes stale: no cell raises (the notebook's own asserts included), the viewer is displayed inline,
and the per-head table and the comparison's per-window summary come out with the model's shape."""

from pathlib import Path

import pytest

from integration.waiting import HANG_GUARD

pytestmark = pytest.mark.slow
NOTEBOOK = Path(__file__).resolve().parents[2] / "docs" / "tutorial.ipynb"


def test_tutorial_notebook_executes(tmp_path, monkeypatch):
    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    notebook = nbformat.read(NOTEBOOK, as_version=4)
    assert not any(cell.get("outputs") for cell in notebook.cells if cell.cell_type == "code")  # stored clean
    nbclient.NotebookClient(notebook, timeout=HANG_GUARD, kernel_name="python3",
                            resources={"metadata": {"path": str(tmp_path)}}).execute()  # fmt: skip
    outputs = [cell.outputs for cell in notebook.cells if cell.cell_type == "code"]

    def text(index: int) -> str:
        return "".join(o.get("text", "") + o.get("data", {}).get("text/plain", "") for o in outputs[index]
                       if o.get("name") != "stderr")  # (progress bars and warnings go to stderr)

    assert text(0).startswith("smollm2-135m 30 layers × 9 heads")
    assert "(30, 9, 32, 32)" in text(1)
    html = "".join(o.get("data", {}).get("text/html", "") for o in outputs[2])
    assert html.startswith("<iframe srcdoc=") and "sinkscope view" in html  # the viewer, inline
    assert text(3).startswith("sink rate 0.")
    assert "compare.html" in text(5) and "random" in text(5)
