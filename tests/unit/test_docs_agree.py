"""Every page a user reads says the same about the corpus's last tokens (the tail that fills no whole window):
what the default does, read from the parser of `sinkscope analyze`, not from the docs, and which setting
reproduces Gu et al.'s census (`--tail drop`).

The pages: README.md, every Markdown page of docs/, the tutorial notebook's cells and every subcommand's --help."""

import json
import re
from pathlib import Path

import pytest

from sinkscope.cli.main import SUBCOMMANDS, build_parser
from sinkscope.corpus.windows import Windows

ROOT = Path(__file__).resolve().parents[2]
DESCRIBE_WINDOWS = ("README.md", "docs/statistics.md")  # the two pages that describe how a corpus becomes windows


def help_texts(capsys) -> dict[str, str]:
    texts = {}
    parser = build_parser()
    for name in ("", *(s.replace("_", "-") for s in SUBCOMMANDS)):
        with pytest.raises(SystemExit):
            parser.parse_args([name, "--help"] if name else ["--help"])
        texts[f"sinkscope {name} --help"] = capsys.readouterr().out
    return texts


def pages(capsys) -> dict[str, str]:
    texts = {str(p.relative_to(ROOT)): p.read_text() for p in [ROOT / "README.md", *(ROOT / "docs").rglob("*.md")]}
    notebook = json.loads((ROOT / "docs" / "tutorial.ipynb").read_text())
    texts["docs/tutorial.ipynb"] = "\n".join("".join(cell["source"]) for cell in notebook["cells"])
    return texts | help_texts(capsys)


def sentences(text: str) -> list[str]:
    """Sentences of a page, its line breaks joined (a sentence ends at '. ' or '; ' or a blank line)."""
    return [s for block in re.split(r"\n\s*\n", text) for s in re.split(r"(?<=[.;])\s+", " ".join(block.split()))]


def analyze_tail_default() -> str:
    """What `sinkscope analyze` does with the tail when no --tail is given."""
    return build_parser().parse_args(["analyze", "--model", "m", "--corpus", "c", "--out", "o"]).tail


def test_the_tail_default_is_one_setting_in_code():
    assert analyze_tail_default() == Windows.__dataclass_fields__["tail"].default


def test_no_page_says_the_tail_is_dropped_unless_it_names_the_setting(capsys):
    """A sentence that speaks of the tail being dropped must name `--tail drop` or say no token is: with the default
    (overlap) no token is dropped, so "the incomplete tail is dropped" on its own contradicts the README."""
    assert analyze_tail_default() == "overlap"  # what the sentences below must agree with
    wrong = [(where, s) for where, text in pages(capsys).items() for s in sentences(text)
             if re.search(r"\btail\b", s, re.I) and re.search(r"\b(dropped|discarded|left out)\b", s, re.I)
             and "--tail drop" not in s and not re.search(r"\b(no|none|not|never)\b[^.;]*\bdropped", s, re.I)]  # fmt: skip
    assert not wrong, wrong


def test_pages_that_describe_the_windows_state_the_default_and_gu_et_al_setting(capsys):
    default = analyze_tail_default()
    texts = pages(capsys)
    for where in DESCRIBE_WINDOWS:
        said = sentences(texts[where])
        if default == "overlap":
            assert any(re.search(r"no token is dropped", s, re.I) for s in said), where
        else:
            assert not any(re.search(r"no token is dropped", s, re.I) for s in said), where
        assert any("--tail drop" in s and "Gu et al.'s census exactly" in s for s in said), where
