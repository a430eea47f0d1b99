"""Reading Markdown pages as the documentation tests do (tests/unit/test_docs.py,
tests/unit/test_architecture_doc.py)."""

from __future__ import annotations


def unfenced(text: str) -> list[str]:
    """The lines of Markdown ``text`` outside fenced code blocks (the fences left out too)."""
    lines, fenced = [], False
    for line in text.splitlines():
        if line.lstrip().startswith("```"):
            fenced = not fenced
        elif not fenced:
            lines.append(line)
    return lines
