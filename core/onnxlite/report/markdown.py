"""The Markdown our report sections are written in, as HTML: paragraphs, ``-`` lists, pipe tables,
`code` and **bold**.

A section may run a sentence straight into its list or table ("Worst nodes:" then ``- ...`` lines, no blank
line between), so blocks are split by line kind, not only by blank lines; nothing of the Markdown syntax is
left in the page's text.
"""

from __future__ import annotations

import re
from html import escape

_INLINE = [
    (re.compile(r"`([^`]+)`"), r"<code>\1</code>"),
    (re.compile(r"\*\*([^*]+)\*\*"), r"<strong>\1</strong>"),
]
_RULE = re.compile(r"^\|?\s*:?-{3,}:?\s*(\|\s*:?-{3,}:?\s*)*\|?$")


def inline(text: str) -> str:
    """One line's text, escaped, with `code` and **bold** as tags."""
    text = escape(text)
    for pattern, repl in _INLINE:
        text = pattern.sub(repl, text)
    return text


def _kind(line: str) -> str:
    stripped = line.strip()
    if not stripped:
        return "blank"
    if stripped.startswith(("- ", "* ")):
        return "item"
    if stripped.startswith("|") and stripped.endswith("|"):
        return "row"
    return "text"


def _cells(line: str) -> list[str]:
    return [c.strip() for c in re.split(r"(?<!\\)\|", line.strip().strip("|"))]


def _table(lines: list[str]) -> str:
    rows = [ln for ln in lines if not _RULE.match(ln.strip())]
    has_head = len(lines) > 1 and bool(_RULE.match(lines[1].strip()))
    head = ""
    if has_head:
        head = "<thead><tr>" + "".join(f"<th>{inline(c)}</th>" for c in _cells(rows[0])) + "</tr></thead>"
        rows = rows[1:]
    body = "".join("<tr>" + "".join(f"<td>{inline(c.replace(chr(92) + '|', '|'))}</td>" for c in _cells(r))
                   + "</tr>" for r in rows)
    return f'<div class="table-wrap"><table class="md">{head}<tbody>{body}</tbody></table></div>'


def markdown_to_html(text: str) -> str:
    """Consecutive lines of one kind make one block: a paragraph, a list or a table."""
    blocks: list[str] = []
    group: list[str] = []
    kind = "blank"

    def flush() -> None:
        if not group:
            return
        if kind == "item":
            blocks.append("<ul>" + "".join(f"<li>{inline(ln.strip()[2:])}</li>" for ln in group) + "</ul>")
        elif kind == "row":
            blocks.append(_table(group))
        else:
            blocks.append(f"<p>{inline(' '.join(ln.strip() for ln in group))}</p>")
        group.clear()

    for line in text.strip().splitlines():
        this = _kind(line)
        if this == "row" and kind != "row" and _RULE.match(line.strip()):
            this = "text"                    # a lone rule line is not a table
        if this != kind or this == "blank":
            flush()
        kind = this
        if this != "blank":
            group.append(line)
    flush()
    return "".join(blocks)
