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


def test_readme_two_commands_say_what_make_test_installs_on_the_system():
    """The README's set-up section holds exactly two commands, and says `make test` installs Chromium with apt-get
    whenever the Makefile's `test` target does (read from the Makefile, not from the README)."""
    readme = (ROOT / "README.md").read_text()
    section = readme.split("## Two commands", 1)[1].split("\n## ", 1)[0]
    block = section.split("```bash", 1)[1].split("```", 1)[0]
    assert [line.split("#")[0].strip() for line in block.strip().splitlines()] == ["make demo", "make test"]
    makefile = (ROOT / "Makefile").read_text()
    test_target = re.search(r"^test:(.*)$", makefile, re.M).group(1)
    chromium_recipe = makefile.split("$(CHROMIUM):", 1)[1].split("\n\n", 1)[0]
    if "$(CHROMIUM)" in test_target and "apt-get install" in chromium_recipe:
        assert "`apt-get install chromium`" in section and "skipped" in section, section


def test_the_tutorial_time_is_one_measured_number_everywhere(capsys):
    """The notebook, its page and the index give the same measured time, and no page promises more."""
    texts = pages(capsys)
    said = {where: re.findall(r"(\d+) s on (?:a )?2[- ](?:core|busy)", texts[where])
            for where in ("docs/tutorial.ipynb", "docs/tutorial.md", "docs/index.md")}  # fmt: skip
    assert all(said.values()) and len({n for found in said.values() for n in found}) == 1, said
    assert not any(re.search(r"under a minute", text, re.I) for text in texts.values())
