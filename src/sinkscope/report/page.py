"""The one page builder: every HTML page sinkscope writes (analyze, compare, sweep, reproduce, train-bb, view, ablate, cost)
is a Jinja2 template in `report/templates/` that extends `base.html.j2`, rendered by `render_page`.

Code builds the data (cell texts, figures as PNG bytes); templates build the markup. One `Environment`: autoescape
on for every HTML template (token texts, paths and model names are arbitrary user text; the Markdown
`.md.j2` templates escape each user field with the `md` filter, `markdown_text`), `StrictUndefined` (a misspelt or missing field fails the render instead of
printing nothing), `trim_blocks`/`lstrip_blocks` (block tags leave no blank lines). The templates live in the report
layer so that it imports no pipeline; the pipelines call into it.
"""

from __future__ import annotations

import base64
import re
from functools import cache
from pathlib import Path

from jinja2 import Environment, PackageLoader, StrictUndefined, select_autoescape

from sinkscope.staging import staged_file


@cache
def environment() -> Environment:
    """The Jinja2 environment of every page (built once, on first use: importing this module loads no template)."""
    env = Environment(
        loader=PackageLoader("sinkscope.report", "templates"),
        # `.j2` is not an extension select_autoescape knows, so escaping is on by default and off for Markdown.
        autoescape=select_autoescape(disabled_extensions=("md.j2",), default_for_string=True, default=True),
        undefined=StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters["md"] = markdown_text
    return env


# What Markdown (CommonMark, GitHub's tables, strike-through and math) acts on inside a line: escaped with a
# backslash, which CommonMark allows before any ASCII punctuation. `_` is left as written: inside a word (the
# evidence keys' `middle_layers_holding`) it emphasises nothing, and a name cannot forge structure with it.
_MARKDOWN_PUNCTUATION = re.compile(r"([\\`*\[\]|~$])")


def markdown_text(value: object) -> str:
    """`value` as literal text inside one line of Markdown (the `md` filter of the `.md.j2` templates): line breaks
    become spaces (a name cannot start a heading or a table row), `&`, `<` and `>` become entities (no live HTML in a
    viewer that renders it), and `\\ ` * [ ] | ~ $` are backslash-escaped (no code span, emphasis, link, image,
    table cell, strike-through or math from a name)."""
    text = " ".join(str(value).splitlines())
    text = text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    return _MARKDOWN_PUNCTUATION.sub(r"\\\1", text)


def render_page(template: str, **context) -> str:
    """The page `template` (a name in `report/templates/`) rendered with `context`, as one string."""
    return environment().get_template(template).render(**context)


def write_page(path: str | Path, template: str, **context) -> Path:
    """Render `template` with `context` and write it to `path` whole or not at all (staged, then renamed)."""
    path = Path(path)
    page = render_page(template, **context)
    with staged_file(path) as tmp:
        tmp.write_text(page, encoding="utf-8")
    return path


def png_figure(png: bytes, caption: str, alt: str | None = None) -> dict[str, str]:
    """A figure for the templates' `figure` macro: the PNG inlined as base64 (the page stays one self-contained
    file), its caption and alt text (the caption unless given)."""
    return {"data": base64.b64encode(png).decode(), "caption": caption, "alt": caption if alt is None else alt}


def cell_text(value) -> str:
    """A table cell's text: missing values show as an en dash, never as 'None' or 'nan' (the template escapes it)."""
    return "–" if value is None or (isinstance(value, float) and value != value) else str(value)
