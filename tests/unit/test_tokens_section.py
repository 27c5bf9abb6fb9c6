"""The report's secondary-sink section ranks non-BOS tokens with enough occurrences."""

import pandas as pd

from sinkscope.report.tokens_section import MIN_OCCURRENCES, tokens_section, top_sink_tokens


def tables():
    tokens = pd.DataFrame({
        "token_id": [1, 5, 6, 7, 8], "token": ["<s>", " the", ".", "rare", "\n"],
        "n": [50, 40, MIN_OCCURRENCES, MIN_OCCURRENCES - 1, 30],
        "received_mean": [0.9, 0.2, 0.1, 0.9, 0.3], "sink_frac": [0.95, 0.3, 0.1, 1.0, 0.3],
    })  # fmt: skip
    token_layers = pd.DataFrame(
        [{"token_id": t, "layer": layer, "n": 1, "received_mean": 0.1, "sink_frac": 0.1 * layer}
         for t in tokens["token_id"] for layer in range(3)]
    )  # fmt: skip
    return tokens, token_layers


def test_bos_and_rare_tokens_are_left_out_and_ties_break_on_received_mean():
    tokens, _ = tables()
    top = top_sink_tokens(tokens, bos_id=1)
    assert top["token"].tolist() == ["\n", " the", "."]


def test_section_lists_the_tokens_with_a_depth_figure():
    tokens, token_layers = tables()
    page = tokens_section(tokens, token_layers, bos_id=1, epsilon=0.3)
    assert "&#x27; the&#x27;" in page and "&#x27;\\n&#x27;" in page and "rare" not in page
    assert page.count("data:image/png;base64") == 1
    assert tokens_section(None, None, 1, 0.3) == ""
    assert "No token other than BOS" in tokens_section(tokens[tokens["n"] < MIN_OCCURRENCES], token_layers, 1, 0.3)
