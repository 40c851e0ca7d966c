"""An MkDocs hook: the ``cudnn-rnn`` command's own ``--help``, written into the pages at build time.

A page line ``<!-- cli-help -->`` becomes the text of ``cudnn-rnn --help``, and
``<!-- cli-help: inspect -->`` that of ``cudnn-rnn inspect --help``, so that the site shows
what the installed command says rather than a copy that drifts. The parser is
:func:`cudnn_rnn.cli.build_parser` (it imports no torch). Loaded by mkdocs.yml (``hooks:``).
"""

from __future__ import annotations

import argparse
import os
import re
import sys
from pathlib import Path
from typing import Any

MARKER = re.compile(r"^<!-- cli-help(?::\s*([a-z-]+))? -->$", re.M)
WIDTH = "88"  # argparse wraps to $COLUMNS


def _help(command: str | None) -> str:
    src = str(Path(__file__).resolve().parents[2] / "src")
    if src not in sys.path:
        sys.path.insert(0, src)
    from cudnn_rnn.cli import build_parser

    old = os.environ.get("COLUMNS")
    os.environ["COLUMNS"] = WIDTH
    try:
        parser = build_parser()
        if command is None:
            return parser.format_help()
        for action in parser._actions:  # the subcommands' parsers, by name
            if isinstance(action, argparse._SubParsersAction) and command in action.choices:
                return str(action.choices[command].format_help())
        raise ValueError(f"docs: `cudnn-rnn {command}` is no command (a <!-- cli-help --> line)")
    finally:
        if old is None:
            del os.environ["COLUMNS"]
        else:
            os.environ["COLUMNS"] = old


def on_page_markdown(markdown: str, **kwargs: Any) -> str:
    """Each marker line replaced by the help it names, as fenced text."""
    return MARKER.sub(lambda m: f"```text\n{_help(m.group(1)).rstrip()}\n```", markdown)
