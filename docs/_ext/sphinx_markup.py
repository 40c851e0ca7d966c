"""A griffe extension: the package's reST-flavoured docstrings as the markdown mkdocstrings renders.

The docstrings are written for ``help()`` and Sphinx habits: roles (``:func:`load```), literal
blocks after ``::``, doctest blocks (``>>>``) and reST simple tables. mkdocstrings reads
markdown, where these would run together into paragraphs, so before the docstrings are parsed
this rewrites, outside code:

- a role into code that links to the object when the reference documents it (an optional
  cross-reference: a target that is not documented stays plain code, and the strict build
  does not fail on it);
- a ``::`` literal block and a doctest block into fenced code;
- a simple table (``====  ====`` borders) into fenced text, as it reads in ``help()``.

The source files are not changed. Loaded by mkdocs.yml (``extensions:`` of the Python handler).
"""

from __future__ import annotations

import html
import re
from typing import Any

import griffe

ROLE = re.compile(r":(?:py:)?(func|class|meth|mod|attr|data|exc|obj|const):`([^`]+)`")
TITLED = re.compile(r"^(.*?)\s*<([^>]+)>$")
BORDER = re.compile(r"^\s*=+(\s+=+)+\s*$")
FENCE = re.compile(r"^\s*(```|~~~)")


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip())


def _fenced(lines: list[str], language: str, at: int | None = None) -> list[str]:
    """``lines`` as one fenced block, dedented to their least indent; the fences at ``at``
    columns (default: that indent), and the lines at the fences' indent."""
    body = [line for line in lines if line.strip()]
    cut = min((_indent(line) for line in body), default=0)
    pad = " " * (cut if at is None else at)
    return [f"{pad}```{language}", *(pad + line[cut:] for line in lines), f"{pad}```"]


def _blocks(text: str) -> str:
    """Literal blocks, doctest blocks and simple tables as fenced code (see the module)."""
    lines = text.split("\n")
    out: list[str] = []
    i = 0
    in_fence = False
    while i < len(lines):
        line = lines[i]
        if FENCE.match(line):
            in_fence = not in_fence
            out.append(line)
            i += 1
            continue
        if in_fence:
            out.append(line)
            i += 1
            continue
        if BORDER.match(line):  # a simple table: three borders (top, under the head, bottom)
            j, borders = i, 0
            while j < len(lines) and lines[j].strip() and borders < 3:
                borders += bool(BORDER.match(lines[j]))
                j += 1
            out.extend(_fenced(lines[i:j], "text"))
            i = j
            continue
        if line.lstrip().startswith(">>>"):  # a doctest block: up to the next blank line
            j = i
            while j < len(lines) and lines[j].strip():
                j += 1
            out.extend(_fenced(lines[i:j], "pycon"))
            i = j
            continue
        if line.rstrip().endswith("::") and not line.rstrip().endswith(":::"):
            head = line.rstrip()[:-2].rstrip()
            j = i + 1
            while j < len(lines) and not lines[j].strip():
                j += 1
            start, base = j, _indent(line)
            while j < len(lines) and (not lines[j].strip() or _indent(lines[j]) > base):
                j += 1
            while j > start and not lines[j - 1].strip():
                j -= 1
            if j > start:  # a literal block follows: "Text::" reads "Text:", "::" alone goes
                if head:
                    out.append(head + ":")
                out.append("")
                out.extend(_fenced(lines[start:j], "text", at=base))
                out.append("")
                i = j
                continue
        out.append(line)
        i += 1
    return "\n".join(out)


def _roles(text: str, obj: griffe.Object) -> str:
    """Roles outside fenced blocks as optional cross-references (see the module)."""

    def link(match: re.Match[str]) -> str:
        target = match.group(2).strip()
        titled = TITLED.match(target)
        if titled:
            title, target = titled.group(1), titled.group(2)
        else:
            target = target.lstrip("!")
            short = target.startswith("~")
            target = target.lstrip("~")
            title = target.rsplit(".", 1)[-1] if short else target
        title = title.rstrip("()") + ("()" if match.group(1) in ("func", "meth") else "")
        path = target.lstrip(".")
        try:
            path = obj.resolve(path.split(".", 1)[0]) + path[len(path.split(".", 1)[0]) :]
        except (griffe.NameResolutionError, ValueError, AttributeError, KeyError):
            pass
        code = f"<code>{html.escape(title)}</code>"
        return f'<autoref identifier="{html.escape(path)}" optional>{code}</autoref>'

    parts = re.split(r"(^\s*```.*?^\s*```)", text, flags=re.S | re.M)
    return "".join(p if i % 2 else ROLE.sub(link, p) for i, p in enumerate(parts))


class SphinxMarkup(griffe.Extension):
    """Rewrite every docstring of the package once it is loaded (see the module)."""

    def on_package(self, *, pkg: griffe.Module, **kwargs: Any) -> None:
        seen: set[int] = set()
        stack: list[griffe.Object] = [pkg]
        while stack:
            obj = stack.pop()
            if id(obj) in seen:
                continue
            seen.add(id(obj))
            if obj.docstring is not None:
                obj.docstring.value = _roles(_blocks(obj.docstring.value), obj)
            stack.extend(m for m in obj.members.values() if not m.is_alias)
