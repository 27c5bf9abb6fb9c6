"""The report's secondary-sink section ranks non-BOS tokens with enough occurrences; its template escapes the tokens."""

import pandas as pd

from sinkscope.report.page import environment
from sinkscope.report.tokens_section import MIN_OCCURRENCES, tokens_section, top_sink_tokens


def tables():
    tokens = pd.DataFrame({
        "token_id": [1, 5, 6, 7, 8, 9], "token": ["<s>", " the", ".", "rare", "\n", "<b>&x"],
        "n": [50, 40, MIN_OCCURRENCES, MIN_OCCURRENCES - 1, 30, 25],
        "received_mean": [0.9, 0.2, 0.1, 0.9, 0.3, 0.1234], "sink_frac": [0.95, 0.3, 0.1, 1.0, 0.3, 0.05],
    })  # fmt: skip
    token_layers = pd.DataFrame(
        [{"token_id": t, "layer": layer, "n": 1, "received_mean": 0.1, "sink_frac": 0.1 * layer}
         for t in tokens["token_id"] for layer in range(3)]
    )  # fmt: skip
    return tokens, token_layers


def render(section: dict) -> str:
    return str(environment().get_template("tokens_section.html.j2").module.tokens_section(section))


def test_bos_and_rare_tokens_are_left_out_and_ties_break_on_received_mean():
    tokens, _ = tables()
    top = top_sink_tokens(tokens, bos_id=1)
    assert top["token"].tolist() == ["\n", " the", ".", "<b>&x"]


def test_section_data_is_the_tokens_cell_texts_and_a_depth_figure():
    tokens, token_layers = tables()
    section = tokens_section(tokens, token_layers, bos_id=1, epsilon=0.3)
    assert [cell["text"] for cell in section["header"]] == ["token", "id", "n", "received_mean", "sink_frac"]
    assert section["rows"] == [["'\\n'", "8", "30", "0.300", "0.300"], ["' the'", "5", "40", "0.200", "0.300"],
                               ["'.'", "6", "20", "0.100", "0.100"], ["'<b>&x'", "9", "25", "0.123", "0.050"]]
    assert section["figure"]["caption"] == "Where in depth the listed tokens act" and section["figure"]["data"]
    assert section["epsilon"] == "0.3" and section["min_occurrences"] == MIN_OCCURRENCES
    assert tokens_section(None, None, 1, 0.3) is None
    assert tokens_section(tokens, None, 1, 0.3)["figure"] is None
    rare = tokens_section(tokens[tokens["n"] < MIN_OCCURRENCES], token_layers, 1, 0.3)
    assert rare["rows"] == [] and rare["figure"] is None


def test_the_template_escapes_the_tokens_and_notes_a_run_without_frequent_ones():
    tokens, token_layers = tables()
    page = render(tokens_section(tokens, token_layers, bos_id=1, epsilon=0.3))
    assert "&#39; the&#39;" in page and "&#39;\\n&#39;" in page and "rare" not in page
    assert "&#39;&lt;b&gt;&amp;x&#39;" in page and "<b>" not in page
    assert "<td>&#39; the&#39;</td><td class=\"num\">5</td>" in page  # the token left-aligned, the numbers not
    assert "received &gt; ε = 0.3" in page and page.count("data:image/png;base64") == 1
    rare = render(tokens_section(tokens[tokens["n"] < MIN_OCCURRENCES], token_layers, 1, 0.3))
    assert f"No token other than BOS occurs {MIN_OCCURRENCES} times or more." in rare and "<table>" not in rare
