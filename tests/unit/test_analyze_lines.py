"""What analyze says about its tokens and the geometry step (issue 35), from the numbers it is given."""

from sinkscope.cli.analyze import (
    GEOMETRY_SECONDS_PER_LAYER,
    geometry_note,
    tail_words,
    token_line,
    whole_seq_len,
)


def tokens(read, overlap=0, dropped=0, windows=6, complete=True):
    return {"read": read, "analysed": read - dropped, "overlap": overlap, "dropped": dropped, "windows": windows,
            "complete": complete}  # fmt: skip


def test_token_line_says_analysed_twice_dropped_and_unread():
    assert token_line(tokens(81, overlap=9), "c.txt", 16, 50) == (
        "analysed all 81 tokens of c.txt in 6 windows of T=16, 9 of them twice (the last window ends at the "
        "corpus's end); none dropped")  # fmt: skip
    assert token_line(tokens(81, dropped=6, windows=5), "c.txt", 16, 50) == (
        "analysed all 75 tokens of c.txt in 5 windows of T=16; the last 6 dropped (--tail drop)")
    assert token_line(tokens(16128, windows=256, complete=False), "builtin:prose", 64, 256) == (
        "analysed 16128 tokens in 256 windows of T=64; stopped at --max-windows 256, so the rest of builtin:prose "
        "was not read")  # fmt: skip
    assert tail_words(tokens(81, overlap=9)) == " (the last starts 9 tokens early, so no token is dropped)"
    assert tail_words(tokens(81, dropped=6)) == " (the last 6 tokens are dropped: --tail drop)"
    assert tail_words(tokens(90)) == "" and tail_words(tokens(81, overlap=9, complete=False)) == ""


def test_whole_seq_len_is_the_text_plus_bos_up_to_the_context(capsys):
    assert whole_seq_len(81, 128) == 82 and "the corpus is 81 tokens: one window" in capsys.readouterr().err
    assert whole_seq_len(300, 128) == 128
    assert "longer than the model's context: windows of T=128" in capsys.readouterr().err
    assert whole_seq_len(300, None, announce=False) == 301


def test_geometry_note_says_what_why_how_long_and_how_to_skip():
    quiet = geometry_note(30, 256)
    assert "--geometry-cap 0 skips it" in quiet and "docs/theory/geometry.md" in quiet
    assert quiet.endswith(f"about {max(1, round(30 * GEOMETRY_SECONDS_PER_LAYER))} s for 30 layers")
    busy = geometry_note(300, 128, slowdown=8.0)  # a quarter of the work per layer (∝ inputs²), 8 times slower
    quarter = 300 * GEOMETRY_SECONDS_PER_LAYER / 4
    assert busy.endswith(f"about {round(quarter)} s for 300 layers (up to {round(quarter * 8)} s on this busy machine)")
