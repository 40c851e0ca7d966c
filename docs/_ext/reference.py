"""A griffe extension: each public class's reference entry as torch.nn's pages show one.

mkdocstrings reads the package's source; a few things the source says for ``help()`` or for
torch's machinery would read wrongly on the site. After the package is loaded, for every class
of the package this:

- gives a class whose constructor is ``(*args, **kwargs)`` and that names the torch.nn class
  it wraps (``_torch_class = tnn.LSTM``) that class's signature, read from torch's source
  (its typed ``@overload``, as torch's own pages show it), with the types torch leaves out of
  ``device`` and ``dtype``: the drop-ins take exactly torch.nn's arguments;
- gives a constructor without a docstring its base constructor's (the layer classes share
  one), and keeps of a shared constructor's ``Args:`` the arguments its signature has
  (``CudnnGRU`` has no ``num_proj``), without the "(``CudnnLSTM`` only)" marks;
- moves the constructor's sections (``Args:``, ``Raises:``) into the class's docstring before
  its ``Inputs:``, ``Outputs:``, ``Attributes:`` and ``Example:``, the order of torch.nn's
  pages, and leaves out the constructor's prose before them: that is its summary for
  ``help()``, which the class's own docstring says (mkdocstrings' ``ignore_init_summary``
  drops only a summary's first line, leaving the rest as a fragment);
- removes the members that are torch's or pickle's machinery, not the class's API
  (:data:`PLUMBING`).

The source files are not changed. Loaded by mkdocs.yml (``extensions:`` of the Python handler),
after :mod:`sphinx_markup`.
"""

from __future__ import annotations

import importlib.util
import re
from functools import cache
from pathlib import Path
from typing import Any

import griffe

#: Members that are the machinery of torch.nn or pickle, not what a user calls.
PLUMBING = frozenset(
    {
        "__getstate__",
        "__setstate__",
        "__reduce__",
        "__reduce_ex__",
        "extra_repr",
        "check_input",
        "check_hidden_size",
        "check_forward_args",
        "get_expected_hidden_size",
        "get_expected_cell_size",
        "permute_hidden",
    }
)

#: Types for torch's unannotated factory arguments (torch's pages say them in prose).
TYPES = {"device": "torch.device | str | None", "dtype": "torch.dtype | None"}

SECTION = re.compile(r"^\s*[A-Z][\w ]*:\s*$")
#: The sections of a class's docstring that come after its constructor's arguments.
AFTER_ARGS = re.compile(r"^(Inputs|Outputs|Attributes|Example|Examples):\s*$")
ONLY = re.compile(r"\((keyword; )?``(\w+)`` only\) ?")


@cache
def _torch_rnn() -> griffe.Module:
    """torch's ``torch/nn/modules/rnn.py``, read (not imported) as griffe reads ours."""
    spec = importlib.util.find_spec("torch")
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError("docs: torch is not installed; the reference needs its signatures")
    path = Path(spec.submodule_search_locations[0]) / "nn" / "modules" / "rnn.py"
    return griffe.visit("rnn", filepath=path, code=path.read_text())


def _variadic(function: griffe.Function) -> bool:
    kinds = {griffe.ParameterKind.var_positional, griffe.ParameterKind.var_keyword}
    return any(p.kind in kinds for p in function.parameters)


def _torch_parameters(name: str) -> griffe.Parameters:
    """The parameters of ``torch.nn.<name>``'s constructor, without ``self``."""
    init = _torch_rnn().members[name].members["__init__"]
    assert isinstance(init, griffe.Function)
    typed = [o for o in (init.overloads or []) if not _variadic(o)]
    chosen = typed[0] if _variadic(init) and typed else init
    if _variadic(chosen):
        raise RuntimeError(f"docs: torch.nn.{name}'s constructor has no typed signature")
    return griffe.Parameters(
        *(
            griffe.Parameter(
                p.name,
                annotation=p.annotation if p.annotation is not None else TYPES.get(p.name),
                kind=p.kind,
                default=p.default,
            )
            for p in chosen.parameters
            if p.name != "self"
        )
    )


def _base_init(cls: griffe.Class) -> griffe.Function | None:
    """The nearest constructor above ``cls``'s own (by its resolved bases)."""
    try:
        mro = cls.mro()
    except Exception:  # a base outside the package (torch's) ends the search
        return None
    for base in mro:
        init = base.members.get("__init__")
        if isinstance(init, griffe.Function):
            return init
    return None


def _sections(text: str) -> str:
    """``text`` from its first section on (the prose before it is the summary)."""
    lines = text.split("\n")
    for i, line in enumerate(lines):
        if SECTION.match(line):
            return "\n".join(lines[i:])
    return ""


def _keep_args(text: str, names: set[str], owner: str) -> str:
    """``text`` with its ``Args:`` entries limited to ``names``, and without the marks
    "(``<owner>`` only)" (marks naming another class stay)."""

    def mark(m: re.Match[str]) -> str:
        if m.group(2) != owner:
            return m.group(0)
        return "(keyword) " if m.group(1) else ""

    out: list[str] = []
    in_args, indent, keep = False, 0, True
    for line in text.split("\n"):
        stripped = line.strip()
        depth = len(line) - len(line.lstrip())
        if SECTION.match(line):
            in_args, keep = stripped == "Args:", True
            indent = depth + 4
            out.append(line)
            continue
        if in_args and stripped and depth == indent:
            entry = re.match(r"(\w+)", stripped)
            keep = bool(entry) and entry.group(1) in names  # type: ignore[union-attr]
        if not in_args or keep or not stripped:
            out.append(ONLY.sub(mark, line))
    return "\n".join(out)


def _entry(cls: griffe.Class) -> None:
    """``cls``'s constructor as its reference entry shows it (see the module)."""
    own = cls.members.get("__init__")
    base = _base_init(cls) if not isinstance(own, griffe.Function) else None
    init = own if isinstance(own, griffe.Function) else base
    if init is None:
        return
    parameters = init.parameters
    torch_class = cls.members.get("_torch_class") or next(
        (b.members["_torch_class"] for b in _mro(cls) if "_torch_class" in b.members), None
    )
    if _variadic(init) and isinstance(torch_class, griffe.Attribute) and cls.name[0] != "_":
        parameters = _torch_parameters(str(torch_class.value).rsplit(".", 1)[-1])
    docstring = init.docstring
    if docstring is None and isinstance(own, griffe.Function):
        docstring = (base or _base_init(cls) or own).docstring
    text = _sections(docstring.value) if docstring is not None else ""
    names = {p.name for p in parameters if p.name != "self"}
    text = _keep_args(text, names, cls.name)
    new = griffe.Function(
        "__init__",
        parameters=parameters,
        returns=init.returns,
        lineno=init.lineno,
        endlineno=init.endlineno,
    )
    cls.set_member("__init__", new)
    if text.strip():  # into the class's docstring, where torch.nn's pages have its arguments
        if cls.docstring is None:
            cls.docstring = griffe.Docstring(text, parent=cls)
        else:
            cls.docstring.value = _splice(cls.docstring.value, text)


def _splice(doc: str, sections: str) -> str:
    """``sections`` into ``doc`` before its first of :data:`AFTER_ARGS`, else at its end; the
    entries of their ``Args:`` at the end of ``doc``'s own, where it has one (a class that
    documents the arguments its constructor adds to its base's)."""
    lines = doc.split("\n")
    extra = sections.split("\n")
    if "Args:" in lines and "Args:" in extra:
        start = extra.index("Args:") + 1
        end = next((i for i in range(start, len(extra)) if SECTION.match(extra[i])), len(extra))
        entries = [line for line in extra[start:end] if line.strip()]
        extra = extra[: start - 1] + extra[end:]
        at = lines.index("Args:") + 1
        while at < len(lines) and (not lines[at].strip() or lines[at].startswith(" ")):
            at += 1
        while not lines[at - 1].strip():
            at -= 1
        lines[at:at] = entries
    at = next((i for i, line in enumerate(lines) if AFTER_ARGS.match(line)), len(lines))
    head = "\n".join(lines[:at]).rstrip()
    tail = "\n".join(lines[at:])
    rest = "\n".join(extra).strip()
    return f"{head}\n\n{rest}\n\n{tail}".rstrip() + "\n"


def _mro(cls: griffe.Class) -> list[griffe.Class]:
    try:
        return cls.mro()
    except Exception:
        return []


class ReferenceEntries(griffe.Extension):
    """Fix every class of the package once it is loaded (see the module)."""

    def on_package(self, *, pkg: griffe.Module, **kwargs: Any) -> None:
        seen: set[int] = set()
        stack: list[griffe.Object] = [pkg]
        classes: list[griffe.Class] = []
        while stack:
            obj = stack.pop()
            if id(obj) in seen:
                continue
            seen.add(id(obj))
            if isinstance(obj, griffe.Class):
                classes.append(obj)
            stack.extend(m for m in obj.members.values() if isinstance(m, griffe.Object))
        for cls in classes:
            for name in PLUMBING & set(cls.members):
                cls.del_member(name)
        for cls in classes:
            _entry(cls)
