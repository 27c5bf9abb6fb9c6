"""`sinkscope view` of SmolLM2 on 256 tokens of real text: page size, open time, values equal to transformers.

Python's LICENSE.txt (English prose present wherever Python is) is the text. At the default 8-bit codes the page
is about 2.5 MB (`python benchmarks/view_page.py` prints it with the open times).
"""

import statistics
import sysconfig
import time
from pathlib import Path

import pytest
import torch

from integration.waiting import load_slowdown
from sinkscope.explorer.page import shown_error, view
from sinkscope.models.load import load_model

pytestmark = [pytest.mark.slow, pytest.mark.browser]
TEXT = Path(sysconfig.get_paths()["stdlib"]) / "LICENSE.txt"


@pytest.fixture(scope="module")
def smollm2_page(tmp_path_factory):
    lm = load_model("smollm2-135m")
    page = view(lm, file=TEXT, seq_len=256, out=tmp_path_factory.mktemp("view") / "smollm2.html")
    lm.model.set_attn_implementation("eager")
    with torch.no_grad():
        out = lm.base(input_ids=torch.tensor([page_ids(page)]), output_attentions=True, use_cache=False)
    return page, torch.stack(out.attentions)[:, 0].double()  # (L, H, T, T)


def page_ids(page) -> list[int]:
    import json
    import re

    return json.loads(re.search(r'<script id="data" type="application/json">(.*?)</script>', page.html, re.S)[1])["ids"]


def test_smollm2_page_is_small_and_opens_in_under_2s(open_page, smollm2_page):
    page, attn = smollm2_page
    assert page.n_tokens == 256 and attn.shape == (30, 9, 256, 256)
    assert page.size_bytes < 3.5e6, f"page is {page.size_bytes / 1e6:.2f} MB"
    open_page(page.path).page.wait_for_selector("body[data-ready='1']")  # warm-up: the renderer's first start
    seconds, in_page = [], []  # wall clock from the test; navigation start to ready inside the page
    slowdown = load_slowdown()
    for _ in range(3):
        started = time.perf_counter()
        loaded = open_page(page.path)
        loaded.page.wait_for_selector("body[data-ready='1']")
        seconds.append(time.perf_counter() - started)
        in_page.append(loaded.page.evaluate("performance.getEntriesByName('sinkscope-ready')[0].startTime") / 1e3)
        loaded.assert_clean()
    print(f"smollm2 256 tokens: {page.size_bytes / 1e6:.2f} MB, open to ready {[round(s, 2) for s in seconds]} s, "
          f"in the page {[round(s, 2) for s in in_page]} s")
    # The page's own clock (navigation start → maps decoded, grid and first map drawn) is what a reader waits;
    # the wall clock adds Playwright's new browser context and round trips (about 1 s more on a loaded machine).
    # 2 s on a quiet machine; the renderer shares the CPUs with the load, so the bound grows with it.
    slowdown = max(slowdown, load_slowdown())
    assert statistics.median(in_page) < 2.0 * slowdown, (in_page, seconds, f"load slowdown {slowdown:.2f}")


def test_smollm2_hover_values_equal_eager_attention(open_page, smollm2_page):
    page, attn = smollm2_page
    loaded = open_page(page.path)
    pw_page = loaded.page
    pw_page.wait_for_selector("body[data-ready='1']")
    layer, head = 5, 4
    pw_page.click(f"#grid .cell[data-layer='{layer}'][data-head='{head}']")
    pw_page.wait_for_selector(f"#map[data-layer='{layer}'][data-head='{head}']", state="attached")
    canvas = pw_page.locator("#map")
    geo = canvas.evaluate("c => ({cell: +c.dataset.cell, left: +c.dataset.left, top: +c.dataset.top})")
    for t, k in [(255, 0), (255, 254), (100, 37), (10, 10)]:
        canvas.hover(position={"x": geo["left"] + (k + 0.5) * geo["cell"], "y": geo["top"] + (t + 0.5) * geo["cell"]})
        tip = pw_page.locator("#tip").evaluate("e => ({...e.dataset})")
        assert (int(tip["query"]), int(tip["key"])) == (t, k)
        assert abs(float(tip["value"]) - float(attn[layer, head, t, k])) <= shown_error(8) + 1e-5, (t, k, tip)
    loaded.assert_clean()


def test_smollm2_page_opens_on_a_sink_head_by_its_stated_rule(open_page, smollm2_page):
    """The rule of docs/view.md against the eager maps: the largest α = mean_t A[t,0] among heads with fewer than
    half their queries at ≥ 0.9 on BOS; that head is a sink (not the dense layer-0 head); 256 tokens are drawn at
    2 px, the panel scrolling at most a few cells' worth."""
    page, attn = smollm2_page
    alpha = attn[..., :, 0].mean(-1).clone()
    alpha[(attn[..., 1:, 0] >= 0.9).double().mean(-1) >= 0.5] = -1.0
    expected = divmod(int(alpha.flatten().argmax()), alpha.shape[1])
    loaded = open_page(page.path)
    pw_page = loaded.page
    pw_page.wait_for_selector("body[data-ready='1']")
    title = pw_page.locator("#map-title")
    assert (int(title.get_attribute("data-layer")), int(title.get_attribute("data-head"))) == expected
    assert ": sink" in title.text_content()
    wrap = pw_page.evaluate("() => { const w = document.getElementById('map-wrap'); return [w.scrollWidth, w.clientWidth]; }")
    assert int(pw_page.locator("#map").get_attribute("data-cell")) == 2 and wrap[0] <= wrap[1] + 60, wrap
    loaded.assert_clean()
