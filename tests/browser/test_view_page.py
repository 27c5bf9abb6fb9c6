"""`sinkscope view` pages in a real headless Chromium: clean load, head maps, exact hover values, keyboard.

The page comes from a tiny random Llama with sharpened queries; the reference attention is that model's own
`output_attentions=True` under eager attention (tests/integration/view_model.py), computed without sinkscope.
"""

import pytest

from integration.view_model import TEXT, eager_attention, save_sharp_llama
from sinkscope.explorer.page import shown_error, view

pytestmark = pytest.mark.browser
FLOAT32 = 1e-6  # differences between sinkscope's capture path and eager attention, both float32
TOLERANCE = shown_error(16) + FLOAT32  # quantisation + display rounding


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    model_dir = save_sharp_llama(tmp_path_factory.mktemp("view") / "model")
    return model_dir, eager_attention(model_dir, TEXT)[1]


@pytest.fixture(scope="module")
def built(model):
    model_dir, attn = model
    return view(str(model_dir), TEXT, out=model_dir.parent / "view16.html", bits=16), attn


@pytest.fixture(scope="module")
def built_8bit(model):
    model_dir, attn = model
    return view(str(model_dir), TEXT, out=model_dir.parent / "view8.html"), attn  # the default: 8-bit codes


def ready(open_page, page):
    loaded = open_page(page.path, viewport=(1400, 1000))
    loaded.page.wait_for_selector("body[data-ready='1']")
    return loaded


def drawn(pw_page, l: int, h: int) -> None:
    """Wait until the map of head (l, h) is on the canvas (maps decode asynchronously)."""
    pw_page.wait_for_selector(f"#map[data-layer='{l}'][data-head='{h}']", state="attached")


def redrawn(pw_page, action) -> None:
    """Run `action` and wait for the map to be drawn again."""
    before = int(pw_page.locator("#map").get_attribute("data-draws"))
    action()
    pw_page.wait_for_function(f"() => +document.getElementById('map').dataset.draws > {before}")


def hover_cell(pw_page, t: int, k: int) -> dict:
    canvas = pw_page.locator("#map")
    geo = canvas.evaluate("c => ({cell: +c.dataset.cell, left: +c.dataset.left, top: +c.dataset.top})")
    x, y = geo["left"] + (k + 0.5) * geo["cell"], geo["top"] + (t + 0.5) * geo["cell"]
    canvas.hover(position={"x": x, "y": y})
    return pw_page.locator("#tip").evaluate("e => ({...e.dataset, text: e.textContent, shown: e.style.display})")


def test_page_loads_clean(open_page, built):
    page, attn = built
    loaded = ready(open_page, page)
    loaded.assert_clean()
    L, H = attn.shape[:2]
    assert loaded.page.locator("#grid .cell").count() == L * H
    assert loaded.page.locator(".tok").count() == attn.shape[-1]


def test_clicking_a_head_shows_its_map_and_hover_gives_the_models_attention(open_page, built):
    page, attn = built
    loaded = ready(open_page, page)
    pw_page = loaded.page
    pw_page.click("#grid .cell[data-layer='1'][data-head='2']")
    drawn(pw_page, 1, 2)
    title = pw_page.locator("#map-title")
    assert title.get_attribute("data-layer") == "1" and title.get_attribute("data-head") == "2"
    assert "Layer 1, head 2" in title.text_content()
    T = attn.shape[-1]
    assert pw_page.locator("#map").evaluate("c => c.width") >= T * int(pw_page.locator("#map").get_attribute("data-cell"))
    for t, k in [(0, 0), (5, 0), (17, 9), (T - 1, T - 2), (T - 1, 3), (T // 2, T // 2)]:
        tip = hover_cell(pw_page, t, k)
        assert tip["shown"] == "block" and (int(tip["query"]), int(tip["key"])) == (t, k)
        assert abs(float(tip["value"]) - float(attn[1, 2, t, k])) <= TOLERANCE, (t, k, tip)
    tip = hover_cell(pw_page, 3, 10)
    assert float(tip["value"]) == 0 and "masked" in tip["text"]
    loaded.assert_clean()


def test_default_8bit_page_shows_values_within_its_stated_bound(open_page, built_8bit):
    page, attn = built_8bit
    loaded = ready(open_page, page)
    pw_page = loaded.page
    bound = pw_page.evaluate("() => JSON.parse(document.getElementById('data').textContent).quant.shown_error")
    assert bound == pytest.approx(shown_error(8)) and f"{shown_error(8):.1e}" in pw_page.text_content("body")
    pw_page.click("#grid .cell[data-layer='0'][data-head='3']")
    drawn(pw_page, 0, 3)
    for t, k in [(6, 0), (20, 19), (33, 5)]:
        tip = hover_cell(pw_page, t, k)
        assert abs(float(tip["value"]) - float(attn[0, 3, t, k])) <= bound + FLOAT32, (t, k, tip)
    loaded.assert_clean()


def test_keyboard_moves_between_heads_and_layers(open_page, built):
    page, attn = built
    L, H = attn.shape[:2]
    loaded = ready(open_page, page)
    pw_page = loaded.page
    title = pw_page.locator("#map-title")

    def at() -> tuple[int, int]:
        layer, head = int(title.get_attribute("data-layer")), int(title.get_attribute("data-head"))
        drawn(pw_page, layer, head)
        return layer, head

    pw_page.click("#grid .cell[data-layer='0'][data-head='0']")
    assert at() == (0, 0)
    pw_page.keyboard.press("ArrowRight")
    assert at() == (0, 1)
    pw_page.keyboard.press("ArrowDown")
    assert at() == (1, 1)
    pw_page.keyboard.press("ArrowUp")
    pw_page.keyboard.press("ArrowLeft")
    pw_page.keyboard.press("ArrowLeft")
    assert at() == (L - 1, H - 1)  # ← from the first head wraps to the last head of the previous layer
    assert pw_page.locator(f"#grid .cell[data-layer='{L - 1}'][data-head='{H - 1}']").get_attribute("class").endswith("sel")
    tip = hover_cell(pw_page, 8, 2)
    assert abs(float(tip["value"]) - float(attn[L - 1, H - 1, 8, 2])) <= TOLERANCE
    drawn_log = pw_page.locator("#scale-info").get_attribute("data-log") == "1"
    redrawn(pw_page, lambda: pw_page.keyboard.press("l"))  # the other scale than the one drawn
    assert pw_page.locator("#scale").input_value() == ("linear" if drawn_log else "log")
    loaded.assert_clean()


def test_token_strip_shows_where_a_token_attends_across_heads(open_page, built):
    page, attn = built
    loaded = ready(open_page, page)
    pw_page = loaded.page
    pw_page.click("#grid .cell[data-layer='0'][data-head='0']")
    drawn(pw_page, 0, 0)
    s = 12
    pw_page.click(f".tok[data-t='{s}']")
    pw_page.wait_for_selector(f"#token-panel[data-token='{s}']")
    assert pw_page.locator("#token-panel").is_visible()
    # The strip is shaded by the current head's (0, 0) row s; each token's title holds the value.
    for k in (0, 4, s):
        value = float(pw_page.locator(f".tok[data-t='{k}']").get_attribute("title").split(": ")[1])
        assert abs(value - float(attn[0, 0, s, k])) <= TOLERANCE
    L, H = attn.shape[:2]
    for l in range(L):
        for h in range(H):
            tip = pw_page.locator(f"#grid-row .cell[data-layer='{l}'][data-head='{h}']").get_attribute("title")
            best = int(tip.split("attends most to ")[1].split(" ")[0])
            assert float(attn[l, h, s, best]) == pytest.approx(float(attn[l, h, s].max()), abs=2 * TOLERANCE)
            received = pw_page.locator(f"#grid-col .cell[data-layer='{l}'][data-head='{h}']").get_attribute("title")
            mean = float(received.split("receives ")[1].split(" ")[0])
            assert mean == pytest.approx(float(attn[l, h, s + 1 :, s].mean()), abs=1e-4)
    redrawn(pw_page, lambda: pw_page.select_option("#token-mode", "col"))
    value = float(pw_page.locator(".tok[data-t='20']").get_attribute("title").split(": ")[1])
    assert abs(value - float(attn[0, 0, 20, s])) <= TOLERANCE
    # Clicking a head in the token panel opens its map.
    pw_page.click("#grid-col .cell[data-layer='1'][data-head='3']")
    drawn(pw_page, 1, 3)
    loaded.assert_clean()


def test_threshold_hides_small_entries_and_log_scale_redraws(open_page, built):
    page, _ = built
    loaded = ready(open_page, page)
    pw_page = loaded.page

    def brightness() -> float:  # mean red channel of the map area: white is 255, dark blue 8
        return pw_page.locator("#map").evaluate(
            """c => { const d = c.getContext('2d').getImageData(+c.dataset.left, +c.dataset.top,
                 c.width - c.dataset.left, c.height - c.dataset.top).data;
               let sum = 0; for (let i = 0; i < d.length; i += 4) sum += d[i];
               return sum / (d.length / 4); }"""
        )

    redrawn(pw_page, lambda: pw_page.select_option("#scale", "linear"))
    before = brightness()
    redrawn(pw_page, lambda: pw_page.fill("#threshold", "0.5"))
    assert brightness() > before  # entries below 0.5 are drawn white
    redrawn(pw_page, lambda: pw_page.fill("#threshold", "0"))
    assert brightness() == before
    redrawn(pw_page, lambda: pw_page.select_option("#scale", "log"))
    assert brightness() < before  # the log scale lifts small entries off white
    loaded.assert_clean()


def test_token_text_is_never_parsed_as_html(open_page, model):
    model_dir, _ = model
    text = " ".join(["<script>alert(1)</script>" if i % 3 == 0 else f"w{i}" for i in range(30)])
    page = view(str(model_dir), text, out=model_dir.parent / "markup.html")
    loaded = ready(open_page, page)
    pw_page = loaded.page
    assert "<unk>" in pw_page.locator("#tokens").text_content()  # the tokenizer's unknown token, shown as text
    for t in (1, 2, 9):
        pw_page.click(f".tok[data-t='{t}']")
        pw_page.wait_for_selector(f"#token-panel[data-token='{t}']")
    for layer in range(2):
        for head in range(4):
            pw_page.click(f"#grid .cell[data-layer='{layer}'][data-head='{head}']")
            drawn(pw_page, layer, head)
            assert pw_page.locator("unk, script:not([id]):not([type])").count() == 1  # only the page's own script
    loaded.assert_clean()


def hand_made_page(model_dir, path, edit=None, tokens: int = 30):
    """A page of the tiny model on `tokens` tokens whose head (1, 2) is replaced by a hand-made sink: 0.8 of every
    row t ≥ 1 on BOS (below the 0.9 of a hard sink: the map is more than one column), 0.2 spread over keys 1..t. `edit(data)` may change the page data before rendering."""
    import torch

    from sinkscope.capture.text_maps import capture_text, text_ids
    from sinkscope.explorer.page import page_data, render
    from sinkscope.explorer.quantise import quantise_maps
    from sinkscope.models.load import load_model

    lm = load_model(str(model_dir))
    capture = capture_text(lm, text_ids(lm.tokenizer, [TEXT], tokens))
    T = capture.attn.shape[-1]
    sink = torch.zeros(T, T)
    sink[0, 0] = 1.0
    for t in range(1, T):
        sink[t, 0], sink[t, 1 : t + 1] = 0.8, 0.2 / t
    capture.attn[1, 2] = sink
    data = page_data(lm, capture, 0.3, 0.1, 8)
    maps, data["quant"]["offsets"] = quantise_maps(capture.attn, 8)
    if edit is not None:
        edit(data)
    path.write_text(render(data, maps), encoding="utf-8")
    return capture.attn


def coloured_share(pw_page) -> float:
    """Share of the map's causal cells not drawn (nearly) white: how much of the map a reader can see."""
    return pw_page.locator("#map").evaluate(
        """c => { const n = +document.getElementById('map').dataset.cell, T = (c.width - c.dataset.left) / n;
           const ctx = c.getContext('2d'); let seen = 0, all = 0;
           for (let t = 1; t < T; t++) for (let k = 0; k <= t; k++) {
             const p = ctx.getImageData(+c.dataset.left + k * n + n / 2, +c.dataset.top + t * n + n / 2, 1, 1).data;
             all += 1; if (p[0] < 240) seen += 1; }
           return seen / all; }"""
    )


def test_viewer_opens_on_the_strongest_sink_with_a_readable_scale_and_the_map_fits(open_page, model, tmp_path):
    """The rule: open on the largest sink score α = mean_t A[t,0] among heads that are not pure BOS columns (here
    the hand-made head, α ≈ 0.8, against the random heads' ≈ 0.13); its map's median entry (≈ 0.2/t) is far below
    its largest, so the automatic scale is log and most of the map is visibly coloured, where a linear scale
    leaves it near white; 30 tokens fit."""
    model_dir, _ = model
    attn = hand_made_page(model_dir, tmp_path / "sink.html")
    alpha = attn[..., :, 0].mean(-1)  # (L, H), independently of sinkscope
    expected = divmod(int(alpha.flatten().argmax()), alpha.shape[1])
    assert expected == (1, 2)
    loaded = open_page(tmp_path / "sink.html", viewport=(1280, 900))
    pw_page = loaded.page
    pw_page.wait_for_selector("body[data-ready='1']")
    drawn(pw_page, *expected)
    title = pw_page.locator("#map-title").text_content()
    assert title.startswith("Layer 1, head 2: sink") and "dense" not in title
    assert "largest sink score" in pw_page.locator("#opening").text_content()
    labels = pw_page.locator("#head-info b").evaluate_all("bs => bs.map(b => b.title)")
    assert len(labels) == 7 and all(labels), labels  # each number of the head has its hover definition
    info = pw_page.locator("#scale-info").evaluate("e => ({...e.dataset})")
    assert info["log"] == "1" and float(info["hi"]) == pytest.approx(0.8, abs=1e-3)
    auto = coloured_share(pw_page)
    redrawn(pw_page, lambda: pw_page.select_option("#scale", "linear"))
    assert auto > 0.9 and coloured_share(pw_page) < 0.5 * auto, auto
    geometry = pw_page.evaluate("""() => { const c = document.getElementById('map'), w = document.getElementById('map-wrap');
        return {canvas: c.width, client: w.clientWidth, scroll: w.scrollWidth, right: w.getBoundingClientRect().right}; }""")
    assert geometry["canvas"] <= geometry["client"] and geometry["scroll"] <= geometry["client"], geometry
    assert geometry["right"] <= 1280 and int(pw_page.locator("#map").get_attribute("data-cell")) >= 8
    loaded.assert_clean()


def test_markup_in_a_model_name_and_non_finite_numbers_give_a_working_page(open_page, model, tmp_path):
    """Issue 26 item 13: the data in the <script> element survives every HTML parser state ("<!--", "<script",
    "</script" in a model name), and NaN/inf values show as a dash instead of breaking JSON.parse."""
    model_dir, _ = model
    name = "m<!--<script>x</script><!--"

    def edit(data):
        data["model"]["name"] = name
        data["heads"][1][2]["value_drain"] = float("nan")
        data["layers"][1]["cos_z_mean"] = float("inf")

    hand_made_page(model_dir, tmp_path / "odd.html", edit)
    html = (tmp_path / "odd.html").read_text()
    payload = html.split('<script id="data" type="application/json">')[1].split("</script>")[0]
    assert "NaN" not in payload and "Infinity" not in payload and "<" not in payload  # (the maps are base64)
    loaded = open_page(tmp_path / "odd.html")
    pw_page = loaded.page
    pw_page.wait_for_selector("body[data-ready='1']")
    drawn(pw_page, 1, 2)
    assert name in pw_page.locator("h1").text_content() and name in pw_page.title()
    assert pw_page.evaluate("() => JSON.parse(document.getElementById('data').textContent).model.name") == name
    assert "value drain –" in pw_page.locator("#head-info").text_content()
    assert "mean –" in pw_page.locator("#layer-info").text_content()
    assert pw_page.locator("#grid tr[data-layer='1'] td.lstat").first.text_content() == "–"
    assert pw_page.locator("script").count() == 3  # data, maps and the page's own: none injected
    loaded.assert_clean()
