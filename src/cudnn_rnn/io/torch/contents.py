"""What a pickled file holds, once unpickled (:class:`Pickled`): every tensor (and NumPy array
of a numeric dtype) named by its path, every pickled ``torch.nn.Module`` with its plain
attributes, and the top-level object in words for messages.

A path joins dict keys with dots (``state_dict.model.encoder.lstm.weight_ih_l0``, int keys as
``[3]``), names list and tuple elements and a call's arguments as ``[0]`` and an object's
attributes (its state) with dots, and names a pickled ``torch.nn.Module`` (a record whose state
holds ``_parameters`` and ``_modules``) by its state_dict names (``encoder.lstm.weight_ih_l0``:
parameters, persistent buffers, submodules). A container met twice is walked once (its first
path), by a loop, at every depth the pickle reader lets through (:data:`MAX_DEPTH`; a deeper
one, which only a container filled after it was put into another can make, refuses the file);
a path longer than :data:`MAX_NAME` characters, or under a key that is neither a str nor an
int, is left out and counted (the message of a file holding no RNN says how many), and a file
naming more than :data:`MAX_TENSORS` tensors or :data:`MAX_NAME_CHARACTERS` characters of paths
is refused (a pickle repeating a memo reference in two bytes could ask for far more). Values of
the file are shown in messages by :func:`cudnn_rnn.io.pickles.shown` (a few levels, a few
items); no walk of the data recurses.

Listing reads no storage; :meth:`Pickled.read` reads each storage of the tensors asked for once
and copies each tensor once.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, Final

import numpy as np
import torch
from torch import Tensor

from cudnn_rnn.io import pickles
from cudnn_rnn.io.files.escaping import quote
from cudnn_rnn.io.pickles import shown
from cudnn_rnn.io.torch.state import StateGroup, TorchFileError
from cudnn_rnn.io.torch.torchscript import TensorRef
from cudnn_rnn.io.torch.unpickling import Opaque, Tensorish, _Array

__all__ = [
    "MAX_DEPTH",
    "MAX_NAME",
    "MAX_NAME_CHARACTERS",
    "MAX_TENSORS",
    "Pickled",
    "PickledModule",
]

#: The deepest path walked for tensors (dict, list, object and module levels): as deep as the
#: bounded pickle reader lets a pickle nest its objects; a deeper one (which only a container
#: filled after it was put into another can make) refuses the file.
MAX_DEPTH: Final = pickles.MAX_PICKLE_DEPTH
#: The longest path of a tensor or container named (a longer one is left out).
MAX_NAME: Final = 1024
#: The most tensor names, and characters of names, made of one file.
MAX_TENSORS: Final = 1_000_000
MAX_NAME_CHARACTERS: Final = 1 << 27
_SHOWN = 6  # entries of the top-level object a message names
# What the budget is charged (cudnn_rnn.io.pickles.Budget says why)
_NAME = pickles.Budget.NAME


@dataclass(frozen=True)
class PickledModule:
    """A pickled ``torch.nn.Module``: its class as the file names it, and its plain attributes
    (str, int, float, bool, None; ``nn.RNN`` keeps ``nonlinearity`` there)."""

    qualname: str
    attributes: dict[str, str | int | float | bool | None]


class Pickled:
    """What a pickled file holds: ``tensors`` (path -> tensor reference or NumPy array, in the
    pickle's order), ``modules`` (path -> :class:`PickledModule`, ``""`` for the top) and
    ``holds`` (the top-level object in words, for messages). The names made are charged to
    ``budget`` (the read's), where one is given."""

    def __init__(
        self,
        path: str,
        kind: str,
        top: Any,
        storages: dict[str, Callable[[], bytearray]],
        budget: pickles.Budget | None = None,
    ) -> None:
        self.path, self.kind = path, kind
        self.tensors, self.modules, left_out = _collect(top, path, budget or pickles.Budget())
        self.holds = _holds(top, len(self.tensors), left_out)
        self._storages = storages

    def shapes(self) -> dict[str, tuple[tuple[int, ...], str]]:
        """Name -> (shape, dtype name) of every tensor (no storage read)."""
        return {name: _claim(t) for name, t in self.tensors.items()}

    def read(self, names: Iterable[str]) -> dict[str, Tensor]:
        """The tensors ``names`` (keys of ``tensors``), each its own contiguous CPU tensor;
        each storage they need is read once."""
        out: dict[str, Tensor] = {}
        storages: dict[str, Tensor] = {}
        for name in names:
            ref = self.tensors[name]
            if isinstance(ref, _Array):
                array = ref.array
                assert array is not None  # only arrays with their data are listed
                native = array.dtype.newbyteorder("=")
                out[name] = torch.from_numpy(np.array(array, dtype=native, order="C", copy=True))
                continue
            if math.prod(ref.shape) > ref.storage_numel:
                raise TorchFileError(
                    f"{self.path}: tensor {quote(name)} of shape {list(ref.shape)} has more "
                    f"elements than its storage ({ref.storage_numel}); it is not read."
                )
            flat = storages.get(ref.key)
            if flat is None:
                data = self._storages[ref.key]()
                flat = storages[ref.key] = (
                    torch.frombuffer(data, dtype=ref.dtype)
                    if data
                    else torch.empty(0, dtype=ref.dtype)
                )
            view = torch.as_strided(flat, ref.shape, ref.stride, ref.offset)
            out[name] = view.clone(memory_format=torch.contiguous_format)
        return out

    def nonlinearity(self, prefix: str) -> str | None:
        """The ``nonlinearity`` a pickled ``nn.RNN``/``RNNCell`` at ``prefix`` records."""
        module = self.modules.get(prefix)
        value = module.attributes.get("nonlinearity") if module else None
        return value if value == "tanh" or value == "relu" else None

    def where(self, group: StateGroup) -> str:
        """The group's place in words: in a pickled module (of another class than torch.nn's
        own: named), or in a state_dict."""
        module = self.modules.get(group.prefix)
        if module is None:
            return f"{group.describe()} in the state_dict"
        standard = f"torch.nn.modules.rnn.{group.torch_class}"
        own = "" if module.qualname == standard else f" (class {quote(module.qualname, 80)})"
        return f"{group.describe()}{own} in the pickled module"


def _claim(tensor: Tensorish) -> tuple[tuple[int, ...], str]:
    if isinstance(tensor, _Array):
        array = tensor.array
        assert array is not None
        return tuple(array.shape), array.dtype.newbyteorder("=").name
    return tensor.shape, str(tensor.dtype).removeprefix("torch.")


_SAME = object()  # a child at its parent's path (a record's state that is no dict)
_KEY_INT = 1 << 63  # int keys named: those of 64 bits


def _join(path: str, key: object) -> str | None:
    """The path of ``key`` under ``path``: ``a.b`` for a str, ``a[3]`` for an int; None
    for another key, or for a path over :data:`MAX_NAME` characters (left out; a long one is
    never made)."""
    if key is _SAME:
        return path
    if type(key) is str:
        if len(path) + 1 + len(key) > MAX_NAME:
            return None
        return f"{path}.{key}" if path else key
    if type(key) is int and -_KEY_INT <= key < _KEY_INT and len(path) + 22 <= MAX_NAME:
        return f"{path}[{key}]"  # (a huge int's digits are never made)
    return None


def _is_tensor(obj: object) -> bool:
    return isinstance(obj, TensorRef) or (isinstance(obj, _Array) and obj.array is not None)


def _is_module(obj: Opaque) -> bool:
    state = obj.state
    return (
        type(state) is dict
        and isinstance(state.get("_parameters"), dict)
        and isinstance(state.get("_modules"), dict)
    )


def _module_children(obj: Opaque) -> list[tuple[object, Any]]:
    """A pickled module's state_dict entries (parameters, persistent buffers) and submodules,
    keyed as ``state_dict()`` names them."""
    state = obj.state
    skipped = state.get("_non_persistent_buffers_set")
    skipped = skipped if isinstance(skipped, (set, frozenset)) else set()
    out: list[tuple[object, Any]] = list(state["_parameters"].items())
    buffers = state.get("_buffers")
    if isinstance(buffers, dict):
        out += [(k, v) for k, v in buffers.items() if k not in skipped]
    return out + list(state["_modules"].items())


def _record_children(obj: Opaque) -> list[tuple[object, Any]]:
    """A record's arguments and elements (``[i]``), its items and attributes (by key)."""
    out: list[tuple[object, Any]] = list(enumerate(obj.args))
    out += list(obj.kwargs.items())
    out += list(enumerate(obj.elements, len(obj.args)))
    out += obj.items
    state = obj.state
    if (
        type(state) is tuple
        and len(state) == 2
        and all(s is None or isinstance(s, dict) for s in state)
    ):  # (__dict__, slots)
        out += [kv for s in state if s for kv in s.items()]
    elif isinstance(state, dict):
        out += list(state.items())
    elif state is not None:
        out.append((_SAME, state))
    return out


def _children(obj: Any, path: str, modules: dict[str, PickledModule]) -> list[tuple[object, Any]]:
    """``(key, child)`` of a container (a module's recorded in ``modules``); [] for another."""
    if isinstance(obj, dict):
        return list(obj.items())
    if type(obj) in (list, tuple):
        return list(enumerate(obj))
    if not isinstance(obj, Opaque):
        return []
    if _is_module(obj):
        attributes = {
            k: v
            for k, v in obj.state.items()
            if type(k) is str and (v is None or type(v) in (str, int, float, bool))
        }
        modules.setdefault(path, PickledModule(obj.qualname, attributes))
        return _module_children(obj)
    return _record_children(obj)


def _collect(
    top: Any, path: str, budget: pickles.Budget
) -> tuple[dict[str, Tensorish], dict[str, PickledModule], int]:
    """Every tensor under ``top`` by its path, every pickled module (see the module), and how
    many tensors and containers were left out (their path over :data:`MAX_NAME` characters,
    or under a key that is neither a str nor an int).

    Names are made only for tensors and containers, each container is queued once, a name is
    at most :data:`MAX_NAME` characters (a longer one is left out, never made), and at most
    :data:`MAX_TENSORS` tensor names and :data:`MAX_NAME_CHARACTERS` characters of names are
    made, each charged to ``budget``: what a pickle of a few bytes an entry (a memo reference
    repeated) would make otherwise is bounded. The walk is a loop (no recursion), at most
    :data:`MAX_DEPTH` containers deep."""
    tensors: dict[str, Tensorish] = {}
    modules: dict[str, PickledModule] = {}
    queued = {id(top)}
    stack: list[tuple[Any, str, int]] = [(top, "", 0)]
    characters = left_out = 0
    while stack:
        obj, name, depth = stack.pop()
        if _is_tensor(obj):
            if len(tensors) >= MAX_TENSORS:
                raise TorchFileError(
                    f"{path}: names more than {MAX_TENSORS} tensors; it is not read."
                )
            tensors.setdefault(name, obj)
            continue
        pushed: list[tuple[Any, str, int]] = []
        for key, child in _children(obj, name, modules):
            tensor = _is_tensor(child)
            if not tensor and (
                id(child) in queued or not isinstance(child, (dict, list, tuple, Opaque))
            ):
                continue
            if not tensor and depth >= MAX_DEPTH:
                raise TorchFileError(
                    f"{path}: nests its containers more than {MAX_DEPTH} deep; it is not read "
                    "(the file is corrupt or made to exhaust its reader)."
                )
            child_name = _join(name, key)
            if child_name is None:
                left_out += 1
                continue
            characters += len(child_name)
            budget.charge(_NAME + len(child_name))
            if characters > MAX_NAME_CHARACTERS:
                raise TorchFileError(
                    f"{path}: the paths of its tensors and containers come to more than "
                    f"{MAX_NAME_CHARACTERS} characters; it is not read."
                )
            if not tensor:
                queued.add(id(child))
            pushed.append((child, child_name, depth + 1))
        stack.extend(reversed(pushed))
    return tensors, modules, left_out


def _kind(obj: Any) -> str:
    """``obj`` in a few words."""
    if isinstance(obj, TensorRef):
        return "a tensor"
    if isinstance(obj, _Array):
        return "a NumPy array" if obj.array is not None else "a NumPy array of another dtype"
    if isinstance(obj, dict):
        return f"a dict of {len(obj)} entr{'y' if len(obj) == 1 else 'ies'}"
    if type(obj) in (list, tuple):
        return f"a {type(obj).__name__} of {len(obj)} item{'' if len(obj) == 1 else 's'}"
    if isinstance(obj, Opaque):
        return f"a {quote(obj.qualname, 80)} object"
    return f"a {type(obj).__name__}"


def _holds(top: Any, count: int, left_out: int = 0) -> str:
    """What the file holds, for a message: the top-level object and its first entries, and
    how many tensors and containers were left out unnamed."""
    what = _kind(top)
    entries: list[str] = []
    if isinstance(top, dict):
        entries = [f"{shown(k, 40)}: {_kind(v)}" for k, v in list(top.items())[: _SHOWN + 1]]
    elif type(top) in (list, tuple):
        entries = [f"[{i}]: {_kind(v)}" for i, v in enumerate(top[: _SHOWN + 1])]
    if entries:
        more = len(top) - _SHOWN
        listed = entries[:_SHOWN] + ([f"{more} more"] if more > 0 else [])
        what += f" ({', '.join(listed)})"
    what += f"; {count} tensor{'' if count == 1 else 's'} in all"
    if left_out:
        what += (
            f" ({left_out} tensor{'' if left_out == 1 else 's'} or container"
            f"{'' if left_out == 1 else 's'} left out: path over {MAX_NAME} characters, or "
            "under a key that is neither a str nor an int)"
        )
    return what
