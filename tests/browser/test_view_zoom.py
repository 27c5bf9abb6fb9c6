"""`sinkscope view` in a real headless Chromium (issue 35): the tooltip follows the head when the keyboard
changes it, the map zooms at 256 tokens (2 px cells by default) with every token labelled from 12 px, and the
key list shows bare punctuation and whitespace tokens quoted, with visible whitespace.

Reference attention: the tiny model's own `output_attentions=True` (tests/integration/view_model.py).
"""

import json

import pytest

from browser.test_view_page import TOLERANCE, drawn, hand_made_page, hover_cell, ready, redrawn
from integration.view_model import TEXT, eager_attention, save_sharp_llama
from sinkscope.explorer.page import view

pytestmark = pytest.mark.browser
LONG = " ".join(f"w{(7 * i) % 61}" for i in range(300))


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    model_dir = save_sharp_llama(tmp_path_factory.mktemp("zoom") / "model")
    config = json.loads((model_dir / "config.json").read_text())
    config["max_position_embeddings"] = 512  # room for 256 tokens (RoPE has no learned positions)
    (model_dir / "config.json").write_text(json.dumps(config))
    return model_dir


def tip(pw_page) -> dict:
    return pw_page.locator("#tip").evaluate("e => ({...e.dataset, text: e.textContent, shown: e.style.display})")


def test_tooltip_follows_the_head_after_arrow_keys_and_the_scale_key(open_page, model):
    page = view(str(model), TEXT, out=model.parent / "tip.html", bits=16)
    attn = eager_attention(model, TEXT)[1]
    loaded = ready(open_page, page)
    pw_page = loaded.page
    pw_page.click("#grid .cell[data-layer='0'][data-head='1']")
    drawn(pw_page, 0, 1)
    t, k = 17, 9
    first = hover_cell(pw_page, t, k)
    assert abs(float(first["value"]) - float(attn[0, 1, t, k])) <= TOLERANCE
    for key, (l, h) in (("ArrowDown", (1, 1)), ("ArrowRight", (1, 2)), ("ArrowUp", (0, 2)), ("l", (0, 2))):
        redrawn(pw_page, lambda key=key: pw_page.keyboard.press(key))
        drawn(pw_page, l, h)
        now = tip(pw_page)
        assert now["shown"] == "block" and (now["layer"], now["head"]) == (str(l), str(h)), (key, now)
        assert (int(now["query"]), int(now["key"])) == (t, k) and now["text"].startswith(f"L{l} H{h}:")
        assert abs(float(now["value"]) - float(attn[l, h, t, k])) <= TOLERANCE, (key, now)
    assert len({round(float(attn[l, h, t, k]), 4) for l, h in ((0, 1), (1, 1), (1, 2), (0, 2))}) == 4  # all differ
    loaded.assert_clean()


def test_zoom_at_256_tokens_labels_every_token_and_keeps_hover_exact(open_page, model):
    page = view(str(model), LONG, seq_len=256, out=model.parent / "long.html", bits=16)
    attn = eager_attention(model, LONG, seq_len=256)[1]
    loaded = open_page(page.path, viewport=(1280, 900))
    pw_page = loaded.page
    pw_page.wait_for_selector("body[data-ready='1']")
    canvas = pw_page.locator("#map")
    fit = int(canvas.get_attribute("data-cell"))
    assert fit <= 3 and int(canvas.get_attribute("data-labels")) < 256 // 4  # the fitted map: small, sparse labels
    l, h = int(canvas.get_attribute("data-layer")), int(canvas.get_attribute("data-head"))
    for _ in range(4):  # 2 → 3 → 4 → 6 → 8 px (no pointer on the map: the top left stays in place)
        redrawn(pw_page, lambda: pw_page.keyboard.press("+"))
    assert int(canvas.get_attribute("data-cell")) == 8
    t, k = 200, 150
    hover_cell(pw_page, t, k)
    redrawn(pw_page, lambda: pw_page.keyboard.press("+"))  # about the hovered cell: it stays under the pointer
    anchored = tip(pw_page)
    assert (int(anchored["query"]), int(anchored["key"])) == (t, k), anchored
    assert abs(float(anchored["value"]) - float(attn[l, h, t, k])) <= TOLERANCE
    assert int(canvas.get_attribute("data-cell")) == 12 and pw_page.locator("#zoom").input_value() == "12"
    assert int(canvas.get_attribute("data-labels")) == 256  # every token labelled
    wrap = pw_page.evaluate("() => { const w = document.getElementById('map-wrap'); return [w.scrollWidth, w.clientWidth]; }")
    assert wrap[0] > wrap[1]  # the panel scrolls instead of squeezing the map
    for t, k in ((255, 0), (128, 127), (40, 3)):
        shown = hover_cell(pw_page, t, k)
        assert (int(shown["query"]), int(shown["key"])) == (t, k)
        assert abs(float(shown["value"]) - float(attn[l, h, t, k])) <= TOLERANCE, (t, k, shown)
    redrawn(pw_page, lambda: pw_page.keyboard.press("0"))
    assert int(canvas.get_attribute("data-cell")) == fit
    loaded.assert_clean()


def test_key_list_quotes_punctuation_and_shows_whitespace(open_page, model, tmp_path):
    def edit(data):
        data["tokens"][5], data["tokens"][6], data["tokens"][7] = ",", " ", "\t\n"
        data["heads"][1][2]["sinks"] = [[5, 0.4], [6, 0.2], [7, 0.1]]

    hand_made_page(model, tmp_path / "keys.html", edit)
    loaded = open_page(tmp_path / "keys.html")
    pw_page = loaded.page
    pw_page.wait_for_selector("body[data-ready='1']")
    drawn(pw_page, 1, 2)
    keys = pw_page.locator("#head-info .key").all_text_contents()
    assert keys[0].startswith("“,” (pos 5) 0.400") and keys[1].startswith("“·” (pos 6)"), keys
    assert keys[2].startswith("“⇥↵” (pos 7)"), keys
    assert "★" in keys[0] and "★" not in keys[1]  # above ε = 0.3 only the first
    loaded.assert_clean()
