"""The API reference reads as torch.nn's pages do: checked on the built HTML, not only built.

For each public class of ``cudnn_rnn``, ``cudnn_rnn.nn`` and ``cudnn_rnn.ops`` (issue 49, item 1)
its entry shows the real signature (parameter names with their defaults, no ``*args`` or
``**kwargs``), marks no argument that has a default "required", opens with a sentence (not the
middle of one), has a runnable example (the docstrings' examples run as doctests) and none of
torch's or pickle's plumbing; a class that computes on sequences has Inputs and Outputs with
their shapes, and its equations; the pages open with their main classes. Parsed with
``html.parser`` from a site built once for this module (no browser: ``make docs-check`` is the
browser's check).
"""

from __future__ import annotations

import html
import importlib
import inspect
import re
from dataclasses import dataclass, field
from html.parser import HTMLParser
from pathlib import Path

import pytest
import torch

from tests.test_docs import site as built_site

site = built_site  # test_docs' fixture (module-scoped: one build for this module)

#: Reference page -> the module whose public classes it documents.
PAGES = {"reference/nn.html": "cudnn_rnn.nn", "reference/cudnn_rnn.html": "cudnn_rnn",
         "reference/ops.html": "cudnn_rnn.ops"}  # fmt: skip

#: Members that are torch's or pickle's machinery, never in an entry.
PLUMBING = ("__getstate__", "__setstate__", "check_input", "permute_hidden", "extra_repr",
            "check_forward_args", "get_expected_hidden_size")  # fmt: skip


@dataclass
class Entry:
    """One documented object of a page: its id, signature text and the HTML of its entry."""

    ident: str
    kind: str
    signature: str = ""
    html: list[str] = field(default_factory=list)
    members: list[str] = field(default_factory=list)

    @property
    def body(self) -> str:
        return "".join(self.html)


class _Entries(HTMLParser):
    """The ``doc-object`` divs of an mkdocstrings page, each with its HTML (nested members'
    ids recorded as its members)."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.entries: list[Entry] = []
        self.open: list[tuple[int, Entry]] = []  # (div depth where it opened, entry)
        self.depth = 0
        self.in_signature = 0

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = dict(attrs)
        cls = a.get("class") or ""
        raw = self.get_starttag_text() or ""
        for _, e in self.open:
            e.html.append(raw)
        if tag == "div":
            self.depth += 1
            if "doc-object" in cls.split():
                kind = next((c[4:] for c in cls.split() if c.startswith("doc-") and c not in
                             ("doc-object",)), "")  # fmt: skip
                self.open.append((self.depth, Entry("", kind)))
            if "doc-signature" in cls.split() and self.open:
                self.in_signature = self.depth
        if re.fullmatch(r"h[1-6]", tag) and "doc-heading" in cls and self.open:
            ident = a.get("id") or ""
            entry = self.open[-1][1]
            if not entry.ident:
                entry.ident = ident
                for _, outer in self.open[:-1]:
                    outer.members.append(ident)

    def handle_endtag(self, tag: str) -> None:
        for _, e in self.open:
            e.html.append(f"</{tag}>")
        if tag == "div":
            if self.in_signature == self.depth:
                self.in_signature = 0
            if self.open and self.open[-1][0] == self.depth:
                self.entries.append(self.open.pop()[1])
            self.depth -= 1

    def handle_data(self, data: str) -> None:
        for _, e in self.open:
            e.html.append(html.escape(data))
        if self.in_signature and self.open:
            self.open[-1][1].signature += data


def entries(root: Path, page: str) -> list[Entry]:
    text = (root / page).read_text()
    parser = _Entries()
    parser.feed(text)
    found = [e for e in parser.entries if e.ident]
    # The order of the page (an entry closes after its members).
    return sorted(found, key=lambda e: text.index(f'id="{e.ident}"'))


def public_classes(module: str) -> list[str]:
    mod = importlib.import_module(module)
    return [n for n in mod.__all__ if inspect.isclass(getattr(mod, n))]


def computes(module: str, name: str) -> bool:
    """A class whose call runs an RNN on inputs: a module, or an op-level class."""
    cls = getattr(importlib.import_module(module), name)
    called = any("__call__" in vars(k) for k in cls.__mro__ if k is not object)
    return issubclass(cls, torch.nn.Module) or called


def has_mode(module: str, name: str) -> bool:
    """A class of one RNN mode (its entry states the equations)."""
    return computes(module, name) and name not in ("MultiRNNCell", "BidirectionalStack")


CASES = [(page, name) for page, module in PAGES.items() for name in public_classes(module)]


def text_of(fragment: str) -> str:
    return html.unescape(re.sub(r"<[^>]+>", "", fragment))


def own_part(entry: Entry) -> str:
    """The entry's HTML without its members' entries (its own docstring and tables)."""
    body = entry.body
    cut = body.find('<div class="doc doc-children">')
    return body if cut < 0 else body[:cut]


@pytest.fixture(scope="module")
def pages(site: Path) -> dict[str, dict[str, Entry]]:
    return {page: {e.ident: e for e in entries(site, page)} for page in PAGES}


def entry_of(pages: dict[str, dict[str, Entry]], page: str, name: str) -> Entry:
    ident = f"{PAGES[page]}.{name}"
    assert ident in pages[page], f"{page} has no entry {ident}"
    return pages[page][ident]


@pytest.mark.parametrize(("page", "name"), CASES)
def test_signature_is_the_real_one(pages: dict[str, dict[str, Entry]], page: str,
                                   name: str) -> None:  # fmt: skip
    entry = entry_of(pages, page, name)
    signature = " ".join(entry.signature.split())
    cls = getattr(importlib.import_module(PAGES[page]), name)
    if issubclass(cls, (tuple, Exception)):
        return  # (a NamedTuple's or an exception's: Python's constructor)
    assert signature.startswith(name), (name, signature)
    assert "*args" not in signature and "**kwargs" not in signature, signature
    params = [p for p in re.findall(r"[(,]\s*(\w+)\s*[:=,)]", signature) if p != "self"]
    assert params, f"{name}: no parameter names in its signature {signature!r}"


@pytest.mark.parametrize(("page", "name"), CASES)
def test_no_default_is_marked_required(pages: dict[str, dict[str, Entry]], page: str,
                                       name: str) -> None:  # fmt: skip
    entry = entry_of(pages, page, name)
    signature = " ".join(entry.signature.split())
    defaults = set(re.findall(r"(\w+)(?:\s*:\s*[^=,()]+(?:\([^)]*\))?)?\s*=", signature))
    table = own_part(entry)
    for row in re.findall(r'<tr class="doc-section-item">(.*?)</tr>', table, flags=re.S):
        cells = [text_of(c).strip() for c in re.findall(r"<td>(.*?)</td>", row, flags=re.S)]
        if cells and cells[0] in defaults:
            assert cells[-1] != "required", f"{name}: {cells[0]} has a default, shown required"
        if signature and cells and cells[-1] == "required":  # (a NamedTuple shows none)
            assert re.search(rf"[(,]\s*{cells[0]}\b(?![^,()]*=)", signature), (
                f"{name}: {cells[0]} is shown required, but the signature {signature!r} has no "
                "such parameter without a default"
            )


@pytest.mark.parametrize(("page", "name"), CASES)
def test_entry_has_an_example_and_no_plumbing(pages: dict[str, dict[str, Entry]], page: str,
                                              name: str) -> None:  # fmt: skip
    entry = entry_of(pages, page, name)
    assert "&gt;&gt;&gt;" in own_part(entry), f"{name}: its entry has no example"
    shown = {m.rsplit(".", 1)[-1] for m in entry.members}
    assert not shown & set(PLUMBING), f"{name} documents {sorted(shown & set(PLUMBING))}"
    assert not any(m.startswith("_") and not m.startswith("__") for m in shown), shown


@pytest.mark.parametrize(("page", "name"), CASES)
def test_entry_opens_with_a_sentence(pages: dict[str, dict[str, Entry]], page: str,
                                     name: str) -> None:  # fmt: skip
    """Each paragraph of the class's own text starts as a sentence starts (a capital, a
    code name, a digit or a bracket), not in the middle of one (a constructor docstring's
    summary cut after its first line left "messages and warnings they get):")."""
    own = own_part(entry_of(pages, page, name))
    contents = own[own.find('<div class="doc doc-contents') :]
    # Paragraphs at the top level of the docstring: not in tables, lists or admonitions.
    top = re.sub(r"<(table|ul|ol|details|pre)\b.*?</\1>", "", contents, flags=re.S)
    paragraphs = re.findall(r"<p>(.*?)</p>", top, flags=re.S)
    assert paragraphs, f"{name}: no description"
    for p in paragraphs:
        if 'class="doc-section-title"' in p:
            continue
        start = p.lstrip()
        # (a capital, a code name, a digit, a bracket, or a name such as cuDNN)
        assert re.match(r"(<code>|<a |<autoref|[A-Z0-9(\"`*]|[a-z]+[A-Z])", start), (
            f"{name}: a paragraph starts mid-sentence: {text_of(start)[:80]!r}"
        )


@pytest.mark.parametrize(
    ("page", "name"), [c for c in CASES if computes(PAGES[c[0]], c[1])]
)  # fmt: skip
def test_rnn_entry_has_inputs_outputs_and_equations(pages: dict[str, dict[str, Entry]],
                                                    page: str, name: str) -> None:  # fmt: skip
    own = own_part(entry_of(pages, page, name))
    for section in ("inputs", "outputs"):
        block = re.search(rf'<details class="{section}"[^>]*>(.*?)</details>', own, flags=re.S)
        assert block, f"{name}: no {section.title()} section"
        assert re.search(r"[(\[]\s*\w+\s*(,|\*)", text_of(block.group(1))), (
            f"{name}: its {section.title()} give no shapes"
        )
    if has_mode(PAGES[page], name):
        code = " ".join(text_of(b) for b in re.findall(r"<pre\b.*?</pre>", own, flags=re.S))
        assert re.search(r"\bh_?t\b|\bh'? = ", code), f"{name}: no equations"


@pytest.mark.parametrize(("page", "first"), [("reference/nn.html", "LSTM"),
                                             ("reference/cudnn_rnn.html", "CudnnLSTM"),
                                             ("reference/ops.html", "CudnnLSTM")])  # fmt: skip
def test_pages_open_with_their_main_classes(site: Path, page: str, first: str) -> None:
    found = [e for e in entries(site, page) if e.kind != "module"]
    assert found[0].ident == f"{PAGES[page]}.{first}", [e.ident for e in found[:5]]
    kinds = [e.kind for e in found if e.ident.count(".") == PAGES[page].count(".") + 1]
    if "attribute" in kinds:  # constants after every class
        assert max(i for i, k in enumerate(kinds) if k == "class") < kinds.index("attribute")
