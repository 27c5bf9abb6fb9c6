"""A `sinkscope view` page of a model with a linear-attention layer (tiny random Qwen3-Next: layer 0 linear, layer 1
full attention) in a real headless Chromium: it opens clean on the full-attention layer, the linear layer's row is one
tile labelled "linear attention: no softmax map", selecting it (click or keys) says so instead of drawing a map, and
the token panel's grids label that layer's row the same way."""

import pytest

from integration.test_view_linear_layers import TEXT, with_tokenizer
from sinkscope.explorer.page import view

pytestmark = pytest.mark.browser
NO_MAP = "linear attention: no softmax map"


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    return view(with_tokenizer("sdpa"), TEXT, out=tmp_path_factory.mktemp("view_linear") / "q3n.html")


def test_the_linear_layer_is_a_labelled_row_and_the_full_layer_is_drawn(open_page, built):
    loaded = open_page(built.path, viewport=(1400, 1000))
    pw = loaded.page
    pw.wait_for_selector("body[data-ready='1']")
    pw.wait_for_selector("body[data-decoded='1']")
    loaded.assert_clean()
    H = int(pw.evaluate("() => JSON.parse(document.getElementById('data').textContent).n_heads"))
    row = pw.locator("#grid tr[data-layer='0'] .cell")
    assert row.count() == 1 and row.text_content().strip() == NO_MAP
    assert pw.locator("#grid tr[data-layer='1'] .cell").count() == H
    assert "Layer 0 is linear attention" in pw.locator("#linear-note").text_content()
    title = pw.locator("#map-title")
    assert title.get_attribute("data-layer") == "1" and "Layer 1, head" in title.text_content()
    assert pw.locator("#map").is_visible() and pw.locator("#map").get_attribute("data-layer") == "1"

    row.click()
    assert title.get_attribute("data-linear") == "1" and title.text_content() == f"Layer 0: {NO_MAP}"
    assert not pw.locator("#map").is_visible()
    assert pw.locator("#grid tr[data-layer='0'] .cell.sel").count() == 1
    pw.keyboard.press("ArrowRight")  # one step crosses the linear row into layer 1's first head
    pw.wait_for_selector("#map-title[data-layer='1'][data-head='0']")
    assert pw.locator("#map").is_visible() and "Layer 1, head 0" in title.text_content()
    pw.keyboard.press("ArrowUp")
    assert title.get_attribute("data-linear") == "1"

    pw.click(".tok[data-t='3']")
    pw.wait_for_selector("#token-panel[data-token='3']")
    for grid in ("#grid-row", "#grid-col"):
        assert pw.locator(f"{grid} .cell[data-layer='0']").text_content() == NO_MAP
        assert pw.locator(f"{grid} .cell[data-layer='1']").count() == H
    loaded.assert_clean()
