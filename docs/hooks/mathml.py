"""MkDocs hooks of the documentation site.

`on_page_content`: the formulas of the pages ($…$ inline, $$…$$ displayed, marked by pymdownx.arithmatex) become
MathML at build time, which browsers draw natively: no script and no network, so the site works offline. A formula
latex2mathml cannot convert fails the build with its page and text.

`on_page_markdown`: Python-Markdown reads two bracketed tags side by side, "[S] [G]" (docs/reproduction.md's run
labels), as a reference link to "G"; the second bracket is escaped so they stay text, as GitHub shows them.
"""

from __future__ import annotations

import html
import re

from latex2mathml.converter import convert

INLINE = re.compile(r'<span class="arithmatex">\\\((.+?)\\\)</span>', re.S)
TAGS = re.compile(r"\[([A-Z])\] \[([A-Z])\]")
DISPLAY = re.compile(r'<div class="arithmatex">\\\[(.+?)\\\]</div>', re.S)


def _mathml(match: re.Match, display: bool, page) -> str:
    latex = html.unescape(match.group(1)).strip()
    try:
        return convert(latex, display="block" if display else "inline")
    except Exception as error:  # latex2mathml raises several kinds; the build must stop on any of them
        raise SystemExit(f"{page.file.src_path}: formula {latex!r} cannot be rendered: {error}") from error


def on_page_content(content: str, page, **_) -> str:
    content = DISPLAY.sub(lambda m: _mathml(m, True, page), content)
    return INLINE.sub(lambda m: _mathml(m, False, page), content)


def on_page_markdown(markdown: str, **_) -> str:
    return TAGS.sub(r"[\1] \\[\2]", markdown)
