"""Pickled objects of any kind, read without importing, calling or running anything they name:
torch.save files that pickle more than tensors (Lightning checkpoints, ``torch.save(model)``,
optimizer state beside the weights, lists of state_dicts) and plain pickles (``pickle.dump`` of a
dict of NumPy arrays, a ``.pkl``), and every tensor inside them, named by its path.

Three kinds of file are read, each checked before a byte of it is unpickled:

================  ===========================================================================
kind              what is read
================  ===========================================================================
torch_zip         ``ROOT/data.pkl`` of the archive (the folder of its first member, as torch
                  reads it), through the one zip reader (:func:`cudnn_rnn.io.files.zip_archive`);
                  storages are the members ``ROOT/data/KEY``, read only when a tensor on them
                  is asked for; ``ROOT/byteorder`` must be this machine's
torch_pickle      a legacy torch.save file: five pickles (magic number, protocol 1001, system
                  info, the object, its storages' keys; at most 64 MiB in all), then each
                  storage as an int64 element count and its bytes; the counts are checked
                  against what the object claims and the file's size, the bytes read when asked
pickle            a plain pickle of any protocol (the file's first one), at most
                  :data:`MAX_PLAIN_PICKLE_BYTES`; its data is inside it
================  ===========================================================================

Every pickle is first walked by the bounded pickle reader (:func:`cudnn_rnn.io.pickles.check`:
memo, opcode count, the depth of every object it builds, lengths; no extension-registry or
out-of-band-buffer opcodes), then
unpickled by :class:`cudnn_rnn.io.pickles.Unpickler` with a ``find_class`` that never imports a
module and never hands the pickle anything of the interpreter's:

* every global the pickle names becomes an inert class of this module (:class:`Opaque`, one
  subclass per ``module.name``, holding no code of the file's); calling it (``REDUCE``,
  ``NEWOBJ``, ``INST``, ``OBJ``) makes a record of the call (``args``, ``kwargs``), ``BUILD``
  keeps the state it gives (``state``: a module's ``__dict__``, slots), and the items and
  elements pickle adds (``SETITEMS``, ``APPENDS``, ``ADDITEMS``) are kept too, so that tensors
  inside any object stay reachable; ``os.system``, ``builtins.eval`` or ``subprocess.call`` so
  become a record of the call they asked for, never made;
* only these globals are honoured, each by a small function of this module that checks its
  arguments and builds plain data (any other use of them is recorded like an unknown global),
  chosen because torch.save, Lightning and ``pickle.dump`` of NumPy arrays need them and none
  can run code or import:

  =====================================================  =====================================
  global                                                 built here as
  =====================================================  =====================================
  ``torch._utils._rebuild_tensor_v2``, ``_rebuild_       a tensor reference (storage key,
  tensor``                                               dtype, offset, size, stride), checked
                                                         against its storage's size
                                                         (:class:`~cudnn_rnn.io.
                                                         torchscript.TensorRef`); none is read
  ``torch._utils._rebuild_parameter``,                   the tensor it wraps
  ``_rebuild_parameter_with_state``, ``torch._tensor.
  _rebuild_from_type_v2`` (tensor subclasses)
  ``torch.FloatStorage`` ... ``BFloat16Storage``,        the dtype of a storage's persistent id
  ``UntypedStorage``, the quantized ones                 (a quantized tensor, or one of the
                                                         dtypes torch rebuilds with
                                                         ``_rebuild_tensor_v3``, stays a record)
  ``torch.storage._load_from_bytes``                     a storage of a legacy torch.save file
                                                         inside the pickle (``pickle.dumps`` of
                                                         a tensor), read as above
  ``numpy.core.multiarray._reconstruct``, ``numpy.       a NumPy array over the pickle's bytes
  dtype``, ``numpy.core.numeric._frombuffer``,           (no copy), of a numeric dtype only
  ``...multiarray.scalar`` (``numpy._core`` too)         (others stay records)
  ``collections.OrderedDict``                            a dict (``BUILD`` may set its
                                                         ``_metadata``, as torch's state_dicts
                                                         do)
  ``builtins.set``, ``frozenset``, ``slice``,            those, of hashable items, numbers,
  ``complex``, ``bytes``, ``bytearray``, ``_codecs.      bytes or latin-1 text only (never
  encode``                                               ``bytearray(N)``: it would allocate N)
  ``copyreg._reconstructor``, ``__newobj__``,            a record of the (inert) class named
  ``__newobj_ex__``
  =====================================================  =====================================

  (Python 2's ``__builtin__`` and ``copy_reg`` name the same.) A tensor whose view reaches past
  its storage, a storage whose member or bytes do not hold what its persistent id claims, or an
  array whose bytes do not fill its shape refuses the file: it is corrupt or made to mislead.
  torch 1.0 pickled a tensor's ``_backward_hooks`` as they were, None without hooks (later
  versions an empty OrderedDict): both are read;
* a pickle may call a rebuilder again and again on one memoized object at six bytes a call,
  each call copying it (``bytearray``, ``set``, ``OrderedDict``, ``_codecs.encode``,
  ``_reconstructor``, a record's arguments, a nested legacy file): every rebuilder, record,
  global looked up and name made is charged to the read's one budget
  (:class:`cudnn_rnn.io.pickles.Budget`: :data:`~cudnn_rnn.io.pickles.REBUILT_PER_BYTE` times the
  bytes of the file's pickles plus :data:`~cudnn_rnn.io.pickles.REBUILT_GRACE`; real torch.save
  files, Lightning checkpoints and pickles of arrays take 2 to 15 a byte), across all its
  calls and nested pickles; past it the file is refused as made to exhaust its reader.

Then :class:`Pickled` names every tensor (and NumPy array of a numeric dtype) by its path: dict
keys joined with dots (``state_dict.model.encoder.lstm.weight_ih_l0``, int keys as ``[3]``),
list and tuple elements and a call's arguments as ``[0]``, an object's attributes (its state)
with dots, and a pickled ``torch.nn.Module`` (a record whose state holds ``_parameters`` and
``_modules``) by its state_dict names (``encoder.lstm.weight_ih_l0``: parameters, persistent
buffers, submodules). A container met twice is walked once (its first path), by a loop, at
every depth the pickle reader lets through (:data:`MAX_DEPTH`; a deeper one, which only a
container filled after it was put into another can make, refuses the file); a path longer than
:data:`MAX_NAME` characters, or under a key that is neither a str nor an int, is left out and
counted (the message of a file holding no RNN says how many), and a file naming more than
:data:`MAX_TENSORS` tensors or :data:`MAX_NAME_CHARACTERS` characters of paths is refused (a
pickle repeating a memo reference in two bytes could ask for far more). Values of the file are
shown in messages by :func:`cudnn_rnn.io.pickles.shown` (a few levels, a few items); no walk of the
data recurses, and a RecursionError from anywhere in a read becomes a :class:`TorchFileError`
naming the file.
The RNNs among the names are then found as in any state_dict
(:func:`cudnn_rnn.io.torch.state.find_groups`).

Bounds: the pickles as above; listing reads no storage; :meth:`Pickled.read` reads each storage
of the tensors asked for once and copies each tensor once. A plain pickle is held whole with
the bytes objects made from it: at most about twice the file. What is rebuilt: the budget
above. What pickle's unpickler makes of the opcodes themselves: a few hundred bytes an opcode
at most (an empty set, 232 bytes, is the largest object one opcode makes), at most
:data:`~cudnn_rnn.io.pickles.MAX_PICKLE_OPCODES` opcodes.

>>> import os, pickle, tempfile, numpy as np
>>> path = os.path.join(tempfile.mkdtemp(), "arrays.pkl")
>>> with open(path, "wb") as f:
...     pickle.dump({"rnn.weight_ih_l0": np.ones((8, 3), np.float32), "step": 3}, f)
>>> with open_pickled(path, "pickle") as pickled:
...     pickled.shapes(), pickled.read(["rnn.weight_ih_l0"])["rnn.weight_ih_l0"].dtype
({'rnn.weight_ih_l0': ((8, 3), 'float32')}, torch.float32)
"""

from __future__ import annotations

import contextlib
import io
import math
import os
import pickletools
import sys
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any, ClassVar, Final, cast

import numpy as np
import torch
from torch import Tensor

from cudnn_rnn.io import files, pickles
from cudnn_rnn.io.files import quote
from cudnn_rnn.io.pickles import shown
from cudnn_rnn.io.torch.state import StateGroup, TorchFileError
from cudnn_rnn.io.torch.torchscript import (
    _STORAGES,
    TensorRef,
    _Refused,
    _said,
    _Storage,
    _StorageKind,
)
from cudnn_rnn.io.torch.torchscript import _rebuild_tensor_v2 as _checked_tensor

__all__ = [
    "MAX_DEPTH",
    "MAX_NAME",
    "MAX_NAME_CHARACTERS",
    "MAX_PLAIN_PICKLE_BYTES",
    "MAX_TENSORS",
    "Opaque",
    "Pickled",
    "PickledModule",
    "data_pkl",
    "open_pickled",
]

#: The largest plain pickle read (it is held whole: its data is inside it).
MAX_PLAIN_PICKLE_BYTES: Final = 1 << 31
#: The deepest path walked for tensors (dict, list, object and module levels): as deep as the
#: bounded pickle reader lets a pickle nest its objects; a deeper one (which only a container
#: filled after it was put into another can make) refuses the file.
MAX_DEPTH: Final = pickles.MAX_PICKLE_DEPTH
#: The longest path of a tensor or container named (a longer one is left out).
MAX_NAME: Final = 1024
#: The most tensor names, and characters of names, made of one file.
MAX_TENSORS: Final = 1_000_000
MAX_NAME_CHARACTERS: Final = 1 << 27
_MAX_CLASSES = 100_000
_MAX_DIMS = 64
_MAX_DIM = 1 << 62
_LEGACY_MAGIC = 0x1950A86A20F9469CFC6C
_LEGACY_PROTOCOL = 1001
_LEGACY_PICKLES = 5
_LEGACY_FIRST_READ = 1 << 20
_SHOWN = 6  # entries of the top-level object a message names
# What the budget is charged (cudnn_rnn.io.pickles.Budget says why)
_CALL, _FOUND, _RECORD = pickles.Budget.CALL, pickles.Budget.GLOBAL, pickles.Budget.RECORD
_POINTER, _PAIR, _tuple = pickles.Budget.POINTER, pickles.Budget.PAIR, pickles.Budget.tuple_bytes
_NAME = pickles.Budget.NAME

#: Every opcode but the extension registry's (process state) and out-of-band buffers'.
_OPCODES = frozenset(
    op.name
    for op in pickletools.opcodes
    if op.name not in ("EXT1", "EXT2", "EXT4", "NEXT_BUFFER", "READONLY_BUFFER")
)
#: Python 2's module names of the globals honoured.
_PY2_MODULES = {"__builtin__": "builtins", "copy_reg": "copyreg"}
_RNN_CLASSES = ("LSTM", "GRU", "RNN", "LSTMCell", "GRUCell", "RNNCell")


# -- inert records --------------------------------------------------------------------------


class Opaque:
    """An object of a class the file names (``module``, ``name``), which is never imported:
    what it was made with (``args``, ``kwargs``), the state a ``BUILD`` gave it (``state``),
    the key-value pairs (``items``) and elements (``elements``) pickle added to it. One
    subclass is made per name read; none has code of the file's."""

    __slots__ = ("args", "elements", "items", "kwargs", "state")
    module: ClassVar[str] = ""
    name: ClassVar[str] = ""
    context: ClassVar[_Context | None] = None  # charged for what its records take
    args: tuple[Any, ...]
    kwargs: dict[str, Any]
    state: Any
    items: list[tuple[Any, Any]]
    elements: list[Any]

    def __new__(cls, *args: Any, **kwargs: Any) -> Opaque:
        if cls.context is not None:
            cls.context.charge(_RECORD + _POINTER * (len(args) + 3 * len(kwargs)))
        obj = super().__new__(cls)
        obj.args, obj.kwargs, obj.state, obj.items, obj.elements = args, kwargs, None, [], []
        return obj

    def _charge(self, made: int) -> None:
        context = type(self).context
        if context is not None:
            context.charge(made)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        """Nothing runs: what it was made with is kept by ``__new__``."""

    @property
    def qualname(self) -> str:
        """``module.name`` of its class, as the file names it."""
        return f"{self.module}.{self.name}"

    def __setstate__(self, state: Any) -> None:
        self.state = state

    def __setitem__(self, key: Any, value: Any) -> None:
        self._charge(_PAIR)
        self.items.append((key, value))

    def append(self, value: Any) -> None:
        """``APPEND`` on it."""
        self._charge(_POINTER)
        self.elements.append(value)

    def extend(self, values: list[Any]) -> None:
        """``APPENDS`` on it."""
        self._charge(_POINTER * len(values))
        self.elements.extend(values)

    def add(self, value: Any) -> None:
        """``ADDITEMS`` on it."""
        self._charge(_POINTER)
        self.elements.append(value)

    def __call__(self, *args: Any, **kwargs: Any) -> Opaque:
        context = type(self).context
        called = (context.called if context is not None else _Called)(*args, **kwargs)
        called.callee = self
        return called

    def __repr__(self) -> str:
        return f"<{self.qualname} object>"


class _Called(Opaque):
    """A call of a record (``getattr(x, "f")(...)``): made, never run."""

    __slots__ = ("callee",)
    callee: Opaque

    @property
    def qualname(self) -> str:
        """The first record's name and a ``(...)`` a call (a chain of calls is walked, not
        recursed through; more than three calls are shown as ``...``)."""
        calls, first = 0, self.callee
        while isinstance(first, _Called):
            calls, first = calls + 1, first.callee
        return first.qualname + "(...)" * min(calls + 1, 3) + ("..." if calls >= 3 else "")


class _Unexpected(Exception):
    """An honoured global called otherwise than its producer calls it: recorded, not built."""


class _Inert:
    """What find_class hands the pickle besides records: no BUILD changes it."""

    __slots__ = ()

    def __setstate__(self, state: object) -> None:
        raise _Refused(f"a BUILD on {self!r}")


class _Dict(dict):  # type: ignore[type-arg]
    """``collections.OrderedDict()``: a dict whose ``BUILD`` state (torch's ``_metadata``) is
    kept aside."""

    __slots__ = ("state",)

    def __setstate__(self, state: object) -> None:
        self.state = state


class _DType(_Inert):
    """``numpy.dtype(code, align, copy)`` and the byte order its BUILD gives; ``numpy()`` is
    the NumPy dtype, or None for one this reader does not rebuild (records, objects, ...)."""

    __slots__ = ("built", "code", "order")

    def __init__(self, code: str) -> None:
        self.code, self.order, self.built = code, "|", False

    def __setstate__(self, state: object) -> None:
        if self.built:
            raise _Refused(f"a second BUILD on numpy.dtype({self.code!r})")
        self.built = True
        if (
            type(state) is tuple
            and len(state) >= 5
            and state[1] in ("<", ">", "|", "=")
            and state[2:5] == (None, None, None)
        ):
            self.order = state[1]
        else:
            self.code = ""  # a structured or sub-array dtype: not rebuilt

    def numpy(self) -> np.dtype[Any] | None:
        if len(self.code) < 2 or self.code[0] not in "fiucb" or not self.code[1:].isdigit():
            return None
        try:
            dtype = np.dtype(self.order.replace("|", "=") + self.code)
        except TypeError:
            return None
        return dtype if dtype.kind in "fiucb" else None

    def __repr__(self) -> str:
        return f"numpy.dtype({self.code!r})"


class _Array(_Inert):
    """A NumPy array of the file, over its bytes (``array``; None until its BUILD, or for a
    dtype not rebuilt)."""

    __slots__ = ("array", "pending")

    def __init__(self, array: np.ndarray[Any, Any] | None, pending: bool = False) -> None:
        self.array, self.pending = array, pending

    def __setstate__(self, state: object) -> None:
        if not self.pending:
            raise _Refused("a BUILD on a NumPy array that has its data")
        self.pending = False
        if type(state) is tuple and len(state) == 5:
            state = state[1:]  # (version, shape, dtype, is_fortran, data)
        if type(state) is not tuple or len(state) != 4:
            return
        shape, dtype, fortran, data = state
        if isinstance(dtype, _DType) and isinstance(data, (bytes, bytearray)):
            with contextlib.suppress(_Unexpected):  # a shape of another kind: not rebuilt
                self.array = _array(data, dtype, shape, "F" if fortran else "C")

    def __repr__(self) -> str:
        return "numpy.ndarray"


#: A tensor of the file: a reference into a storage, or a NumPy array with its data.
Tensorish = TensorRef | _Array


class _Allowed(_Inert):
    """One honoured global, as the pickle calls it (``REDUCE``)."""

    __slots__ = ("arity", "context", "function", "qualname")

    def __init__(
        self,
        qualname: str,
        function: Callable[..., Any],
        arity: tuple[int, int],
        context: _Context,
    ) -> None:
        self.qualname, self.function, self.arity, self.context = qualname, function, arity, context

    def __call__(self, *args: Any) -> Any:
        low, high = self.arity
        self.context.charge(_CALL)
        try:
            if not low <= len(args) <= high:
                raise _Unexpected
            return self.function(self.context, *args)
        except _Unexpected:
            module, _, name = self.qualname.rpartition(".")
            return self.context.opaque_class(module, name)(*args)

    def __repr__(self) -> str:
        return self.qualname


# -- the honoured globals -------------------------------------------------------------------


def _shape(value: object) -> tuple[int, ...]:
    if not isinstance(value, (tuple, list)) or len(value) > _MAX_DIMS:
        raise _Unexpected
    dims: list[Any] = list(value)
    if not all(type(d) is int and 0 <= d < _MAX_DIM for d in dims):
        raise _Refused(f"an array of shape {shown(value)}")
    return tuple(dims)


def _array(data: bytes | bytearray, dtype: _DType, shape: object, order: object) -> Any:
    """The array of ``shape`` over ``data`` (no copy), or None for a dtype not rebuilt."""
    numpy_dtype = dtype.numpy()
    dims = _shape(shape)
    if numpy_dtype is None or order not in ("C", "F"):
        return None
    if len(data) != math.prod(dims) * numpy_dtype.itemsize:
        raise _Refused(
            f"a NumPy array of shape {list(dims)} and dtype {numpy_dtype.name} over {len(data)} "
            "bytes"
        )
    return np.frombuffer(data, dtype=numpy_dtype).reshape(dims, order="F" if order == "F" else "C")


def _np_reconstruct(context: _Context, subtype: object, shape: object, code: object) -> _Array:
    return _Array(None, pending=True)


def _np_dtype(
    context: _Context, code: object, align: object = False, copy: object = True
) -> _DType:
    if type(code) is not str or len(code) > 8:
        raise _Unexpected
    return _DType(code)


def _np_scalar(context: _Context, dtype: object, data: object = None) -> _Array:
    if not isinstance(dtype, _DType) or not isinstance(data, (bytes, bytearray)):
        raise _Unexpected
    return _Array(_array(data, dtype, (), "C"))


def _np_frombuffer(
    context: _Context, data: object, dtype: object, shape: object, order: object
) -> _Array:
    if not isinstance(dtype, _DType) or not isinstance(data, (bytes, bytearray)):
        raise _Unexpected
    return _Array(_array(data, dtype, shape, order))


def _tensor_v2(
    context: _Context,
    storage: object,
    offset: object,
    size: object,
    stride: object,
    requires_grad: object,
    hooks: object,
    metadata: object = None,
) -> TensorRef:
    # torch < 1.1 pickled a tensor's _backward_hooks as they were: None without hooks
    if not isinstance(storage, _Storage) or not (hooks is None or isinstance(hooks, dict)):
        raise _Unexpected  # a storage of another kind (quantized, ...): kept as a record
    if metadata is not None and (not isinstance(metadata, dict) or metadata):
        raise _Unexpected
    ref = _checked_tensor(storage, offset, size, stride, requires_grad, {}, None)
    context.charge(2 * _tuple(len(ref.shape)))
    return ref


def _tensor_v1(
    context: _Context, storage: object, offset: object, size: object, stride: object
) -> TensorRef:
    return _tensor_v2(context, storage, offset, size, stride, False, {})


def _parameter(context: _Context, data: object, *rest: object) -> object:
    return data


def _from_type(
    context: _Context, function: object, cls: object, args: object, state: object
) -> Any:
    if not isinstance(function, (_Allowed, type)) or type(args) is not tuple:
        raise _Unexpected
    if isinstance(function, type) and not issubclass(function, Opaque):
        raise _Unexpected
    return function(*args)


def _ordered_dict(context: _Context, items: object = ()) -> _Dict:
    if not isinstance(items, (list, tuple)):
        raise _Unexpected
    pairs: list[Any] = list(items)
    if not all(type(i) in (list, tuple) and len(i) == 2 for i in pairs):
        raise _Unexpected
    out = _Dict()
    try:
        out.update(pairs)
    except TypeError:  # an unhashable key
        raise _Unexpected from None
    context.charge(sys.getsizeof(out))
    return out


def _set(context: _Context, items: object = ()) -> set[Any]:
    if not isinstance(items, (list, tuple, set, frozenset)):
        raise _Unexpected
    try:
        out = set(items)
    except TypeError:  # an unhashable item
        raise _Unexpected from None
    context.charge(sys.getsizeof(out))
    return out


def _frozenset(context: _Context, items: object = ()) -> frozenset[Any]:
    out = frozenset(_set(context, items))
    context.charge(sys.getsizeof(out))
    return out


def _slice(context: _Context, *args: object) -> slice:
    if not all(a is None or type(a) is int for a in args):
        raise _Unexpected
    return slice(*args)


def _complex(context: _Context, *args: object) -> complex:
    numbers = [a for a in args if type(a) in (int, float)]
    if len(numbers) != len(args):
        raise _Unexpected
    return complex(*cast(list[float], numbers))


def _latin1(context: _Context, data: object, encoding: object = None) -> bytes:
    """The bytes of ``bytes``/``bytearray``, or of text in latin-1 (Python 3's pickles of
    bytes at protocol 2), never of a count (``bytes(10**12)`` would allocate); a copy is
    charged (``bytes`` of ``bytes`` is the same object)."""
    if isinstance(data, (bytes, bytearray)) and encoding is None:
        if type(data) is not bytes:
            context.charge(len(data))
        return bytes(data)
    if type(data) is str and encoding in ("latin1", "latin-1"):
        context.charge(len(data))
        try:
            return data.encode("latin-1")
        except UnicodeEncodeError:
            raise _Unexpected from None
    raise _Unexpected


def _bytes(context: _Context, *args: object) -> bytes:
    return _latin1(context, *args) if args else b""


def _bytearray(context: _Context, *args: object) -> bytearray:
    if not args:
        return bytearray()
    data = _latin1(context, *args)
    context.charge(len(data))
    return bytearray(data)


def _encode(context: _Context, text: object, encoding: object = "utf-8") -> bytes:
    return _latin1(context, text, encoding)


def _reconstructor(context: _Context, cls: object, base: object, state: object) -> Opaque:
    """``copyreg._reconstructor``: protocol 0 and 1's object of ``cls`` (a dict or list
    subclass's contents as ``state``)."""
    if not (isinstance(cls, type) and issubclass(cls, Opaque)):
        raise _Unexpected
    obj = cls()
    if isinstance(state, dict):
        context.charge(_PAIR * len(state))
        obj.items.extend(state.items())
    elif isinstance(state, list):
        context.charge(_POINTER * len(state))
        obj.elements.extend(state)
    elif state is not None:
        obj.args = (state,)
    return obj


def _newobj(context: _Context, cls: object, *args: object) -> Opaque:
    if not (isinstance(cls, type) and issubclass(cls, Opaque)):
        raise _Unexpected
    return cls(*args)


def _newobj_ex(context: _Context, cls: object, args: object, kwargs: object) -> Opaque:
    if type(args) is not tuple or type(kwargs) is not dict:
        raise _Unexpected
    return _newobj(context, cls, *args)


def _load_from_bytes(context: _Context, data: object) -> Any:
    """``torch.storage._load_from_bytes``: the storage of a legacy torch.save file inside the
    pickle (what ``pickle.dumps`` of a tensor holds)."""
    if not isinstance(data, (bytes, bytearray)):
        raise _Unexpected
    context.charge(len(data))  # its leading pickles are read out of it
    return context.nested(data)


_NUMPY = ("numpy.core", "numpy._core")
_ALLOWED: dict[tuple[str, str], tuple[Callable[..., Any], tuple[int, int]]] = {
    ("torch._utils", "_rebuild_tensor_v2"): (_tensor_v2, (6, 7)),
    ("torch._utils", "_rebuild_tensor"): (_tensor_v1, (4, 4)),
    ("torch._utils", "_rebuild_parameter"): (_parameter, (3, 3)),
    ("torch._utils", "_rebuild_parameter_with_state"): (_parameter, (4, 4)),
    ("torch._tensor", "_rebuild_from_type_v2"): (_from_type, (4, 4)),
    ("torch._tensor", "_rebuild_from_type"): (_from_type, (4, 4)),
    ("torch.storage", "_load_from_bytes"): (_load_from_bytes, (1, 1)),
    ("collections", "OrderedDict"): (_ordered_dict, (0, 1)),
    ("builtins", "set"): (_set, (0, 1)),
    ("builtins", "frozenset"): (_frozenset, (0, 1)),
    ("builtins", "slice"): (_slice, (1, 3)),
    ("builtins", "complex"): (_complex, (0, 2)),
    ("builtins", "bytes"): (_bytes, (0, 2)),
    ("builtins", "bytearray"): (_bytearray, (0, 2)),
    ("_codecs", "encode"): (_encode, (1, 2)),
    ("copyreg", "_reconstructor"): (_reconstructor, (3, 3)),
    ("copyreg", "__newobj__"): (_newobj, (1, 1 << 16)),
    ("copyreg", "__newobj_ex__"): (_newobj_ex, (3, 3)),
    ("numpy", "dtype"): (_np_dtype, (1, 3)),
    **{(f"{p}.multiarray", "_reconstruct"): (_np_reconstruct, (3, 3)) for p in _NUMPY},
    **{(f"{p}.multiarray", "scalar"): (_np_scalar, (1, 2)) for p in _NUMPY},
    **{(f"{p}.numeric", "_frombuffer"): (_np_frombuffer, (4, 4)) for p in _NUMPY},
}
#: Storage types of persistent ids beyond the TorchScript reader's: untyped (bytes) and
#: quantized ones (their tensors stay records; their sizes are known, so a legacy file's
#: storages after them are found).
_MORE_STORAGES: dict[tuple[str, str], torch.dtype] = {
    ("torch", "UntypedStorage"): torch.uint8,
    ("torch.storage", "UntypedStorage"): torch.uint8,
    ("torch", "QInt8Storage"): torch.qint8,
    ("torch", "QUInt8Storage"): torch.quint8,
    ("torch", "QInt32Storage"): torch.qint32,
    ("torch", "QUInt4x2Storage"): torch.quint4x2,
    ("torch", "QUInt2x4Storage"): torch.quint2x4,
}


# -- unpickling -----------------------------------------------------------------------------


class _Context:
    """What one file's pickles share: the record classes made, where each storage's bytes are
    (key -> a reader of exactly its bytes), and the one budget of what is rebuilt
    (:class:`cudnn_rnn.io.pickles.Budget`: :meth:`allow` counts a pickle read, every honoured
    global, record and nested pickle :meth:`charge` what it makes)."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.classes: dict[tuple[str, str], type[Opaque]] = {}
        self.storages: dict[str, Callable[[], bytearray]] = {}
        self.budget = pickles.Budget()
        self.called: type[_Called] = type("Opaque", (_Called,), {"__slots__": (), "context": self})
        self._nested = 0

    def allow(self, pickled: int) -> None:
        """Count ``pickled`` bytes of the file's pickles read."""
        self.budget.allow(pickled)

    def charge(self, made: int) -> None:
        """Count ``made`` bytes rebuilt (:attr:`cudnn_rnn.io.pickles.Budget.Exceeded` past the
        budget)."""
        self.budget.charge(made)

    def find(self, module: str, name: str) -> Any:
        self.charge(_FOUND)
        module = _PY2_MODULES.get(module, module)
        if module == "torch" and name in _STORAGES:
            return _StorageKind(name, _STORAGES[name])
        if (module, name) in _MORE_STORAGES:
            return _StorageKind(name, _MORE_STORAGES[module, name])
        allowed = _ALLOWED.get((module, name))
        if allowed is not None:
            return _Allowed(f"{module}.{name}", allowed[0], allowed[1], self)
        return self.opaque_class(module, name)

    def opaque_class(self, module: str, name: str) -> type[Opaque]:
        cls = self.classes.get((module, name))
        if cls is None:
            if len(self.classes) >= _MAX_CLASSES:
                raise _Refused(f"more than {_MAX_CLASSES} classes")
            cls = type(
                "Opaque",
                (Opaque,),
                {"__slots__": (), "module": module, "name": name, "context": self},
            )
            self.classes[(module, name)] = cls
        return cls

    def nested(self, data: bytes | bytearray) -> Any:
        """The object of the legacy torch.save file ``data`` (a storage, for
        ``_load_from_bytes``), its storages' keys kept apart from every other's."""
        self._nested += 1
        prefix = f"<bytes {self._nested}>/"
        view = memoryview(data)

        def read(offset: int, count: int) -> bytes:
            return bytes(view[offset : offset + count])

        def reader(offset: int, count: int) -> Callable[[], bytearray]:
            return lambda: bytearray(view[offset : offset + count])

        what = "a pickled storage"
        head, ends = _leading_pickles(read, len(data), what, self.path)
        return _legacy(self, head, ends, len(data), read, reader, prefix, what)


class _Unpickler(pickles.Unpickler):
    """One pickle of the file: walked first (:func:`cudnn_rnn.io.pickles.check`), then unpickled
    with the context's globals and ``persistent`` for its persistent ids."""

    def __init__(
        self,
        data: bytes | bytearray,
        what: str,
        context: _Context,
        persistent: Callable[[Any], Any],
    ) -> None:
        super().__init__(data, what=what, allowed=_OPCODES)
        self._context = context
        self._persistent = persistent

    def find_class(self, module: str, name: str) -> Any:
        return self._context.find(module, name)

    def persistent_load(self, pid: Any) -> Any:
        return self._persistent(pid)


def _plain_value(data: bytes, what: str) -> Any:
    """A pickle of plain values (no global, no persistent id)."""
    return pickles.Unpickler(data, what=what, allowed=_OPCODES).load()


def _unknown_id(context: _Context) -> Callable[[Any], Any]:
    def persistent(pid: Any) -> Any:
        return context.opaque_class("", "persistent id")(pid)

    return persistent


def _storage_id(pid: Any, length: int) -> tuple[_StorageKind, str, int] | None:
    """(kind, key, element count) of a storage's persistent id of ``length`` fields, or None
    for another persistent id."""
    if type(pid) is not tuple or len(pid) != length or pid[0] != "storage":
        return None
    kind, key, location, numel = pid[1:5]
    if not isinstance(kind, _StorageKind) or type(key) is not str or type(location) is not str:
        return None
    if type(numel) is not int or numel < 0:
        raise _Refused(f"storage {quote(key)} of {shown(numel)} elements")
    return kind, key, numel


def _legacy(
    context: _Context,
    head: bytes,
    ends: list[int],
    size: int,
    read: Callable[[int, int], bytes],
    reader: Callable[[int, int], Callable[[], bytearray]],
    prefix: str,
    what: str,
) -> Any:
    """The object of a legacy torch.save file whose five pickles are ``head[:ends[4]]`` and
    whose storages follow (``read``: bytes of the file; ``reader``: a reader of a storage's)."""
    starts = [0, *ends[:-1]]
    parts = [head[a:b] for a, b in zip(starts, ends)]
    magic, protocol, info = (_plain_value(p, what) for p in parts[:3])
    if magic != _LEGACY_MAGIC or protocol != _LEGACY_PROTOCOL or type(info) is not dict:
        raise _Refused(
            f"a magic number {shown(magic)} and protocol {shown(protocol)}, not those of a "
            "legacy torch.save file"
        )
    if info.get("little_endian") is not (sys.byteorder == "little"):
        raise _Refused("storages of another byte order than this machine's")
    claimed: dict[str, _Storage] = {}
    unknown: dict[str, str] = {}  # key -> the storage type no size is known of

    def persistent(pid: Any) -> Any:
        if type(pid) is tuple and len(pid) == 4 and pid[0] == "module":
            return pid[1]  # torch.nn module classes of old torch.save(model) files
        found = _storage_id(pid, 6)
        if found is None or pid[5] is not None:  # pid[5]: a view of a storage (torch < 0.4)
            if type(pid) is tuple and len(pid) == 6 and type(pid[2]) is str:
                unknown[pid[2]] = shown(pid[1])
            return _unknown_id(context)(pid)
        kind, key, numel = found
        storage = _Storage(prefix + key, kind.dtype, numel)
        if claimed.setdefault(key, storage) != storage:
            raise _Refused(f"storage {quote(key)} with two dtypes or sizes")
        return storage

    top = _Unpickler(parts[3], what, context, persistent).load()
    keys = _plain_value(parts[4], what)
    if type(keys) is not list or not all(type(k) is str for k in keys):
        raise _Refused(f"storage keys {shown(keys)}, not a list of names")
    offset = ends[4]
    for key in keys:
        storage = claimed.pop(key, None)
        if key in unknown and storage is None:
            raise _Refused(
                f"storage {quote(key)} of type {unknown[key]}, whose element size "
                "this reader does not know (so not where the storages after it are)"
            )
        if storage is None:
            raise _Refused(f"data for storage {quote(key)}, which no tensor names")
        count = read(offset, 8)
        nbytes = storage.numel * storage.dtype.itemsize
        if len(count) != 8 or offset + 8 + nbytes > size:
            raise _Refused(
                f"storage {quote(key)} of {nbytes} bytes at byte {offset}, past the end of the "
                f"file ({size} bytes)"
            )
        if int.from_bytes(count, "little", signed=True) != storage.numel:
            raise _Refused(
                f"storage {quote(key)} of {storage.numel} elements, whose data says "
                f"{int.from_bytes(count, 'little', signed=True)}"
            )
        context.storages[storage.key] = reader(offset + 8, nbytes)
        offset += 8 + nbytes
    if claimed:
        raise _Refused(f"storage {quote(next(iter(claimed)))}, whose data the file does not hold")
    return top


# -- the files ------------------------------------------------------------------------------


def data_pkl(path: str, archive: files.ZipArchive) -> files.ZipEntry:
    """The member ``ROOT/data.pkl`` of a torch.save archive (``ROOT``: the folder of its first
    member, as torch reads it), at most :data:`cudnn_rnn.io.pickles.MAX_PICKLE_BYTES` once
    inflated; a :class:`TorchFileError` otherwise."""
    first = archive.entries[0].name if archive.entries else ""
    entry = archive.get(f"{first.split('/', 1)[0]}/data.pkl") if "/" in first else None
    if entry is None:
        raise TorchFileError(
            f"{path}: no data.pkl in the folder of its first member {quote(first)}; not a "
            "torch.save archive. Save it with torch.save(module.state_dict(), path)."
        )
    if entry.size > pickles.MAX_PICKLE_BYTES:
        raise TorchFileError(
            f"{path}: member {quote(entry.name)} claims {entry.size} bytes once inflated; at "
            f"most {pickles.MAX_PICKLE_BYTES} are read."
        )
    return entry


def _zip(path: str, f: io.BufferedReader, context: _Context) -> tuple[Any, str]:
    archive = files.zip_archive(f, "torch file (zip archive)")
    entry = data_pkl(path, archive)
    root = entry.name.removesuffix("data.pkl")
    order = archive.get(f"{root}byteorder")
    if order is not None and (order.size > 16 or archive.read(order).strip() != b"little"):
        raise TorchFileError(
            f"{path}: written on a machine of another byte order; load it there and save "
            "module.state_dict() with torch.save."
        )
    data = archive.read(entry)
    context.allow(len(data))
    claimed: dict[str, _Storage] = {}

    def persistent(pid: Any) -> Any:
        found = _storage_id(pid, 5)
        if found is None:
            return _unknown_id(context)(pid)
        kind, key, numel = found
        storage = _Storage(key, kind.dtype, numel)
        if key in claimed:
            if claimed[key] != storage:
                raise _Refused(f"storage {quote(key)} with two dtypes or sizes")
            return storage
        member = archive.get(f"{root}data/{key}")
        if member is None:
            raise _Refused(f"storage {quote(key)}, which the archive does not hold")
        if member.size != numel * kind.dtype.itemsize:
            raise _Refused(
                f"storage {quote(key)} of {numel} {str(kind.dtype).removeprefix('torch.')} "
                f"elements, whose member holds {member.size} bytes"
            )
        claimed[key] = storage
        context.storages[key] = lambda: archive.read(member)
        return storage

    return _Unpickler(data, entry.name, context, persistent).load(), entry.name


def _legacy_file(path: str, f: io.BufferedReader, context: _Context) -> tuple[Any, str]:
    size = files.size_of(f)
    what = "its pickles"

    def read(offset: int, count: int) -> bytes:
        return files.read_at(f, offset, count)

    def reader(offset: int, count: int) -> Callable[[], bytearray]:
        return lambda: _read_exact(f, path, offset, count)

    head, ends = _leading_pickles(read, size, what, path)
    context.allow(ends[-1])
    return _legacy(context, head, ends, size, read, reader, "", what), what


def _leading_pickles(
    read: Callable[[int, int], bytes], size: int, what: str, path: str
) -> tuple[bytes, list[int]]:
    """A legacy torch.save file's five leading pickles (from ``read``, of a file of ``size``
    bytes) and where each ends: read 1 MiB first, then more as they need, up to 64 MiB."""
    most = min(size, pickles.MAX_PICKLE_BYTES)
    want = min(most, _LEGACY_FIRST_READ)
    while True:
        head = read(0, want)
        try:
            return head, pickles.ends(head, what=what, allowed=_OPCODES, count=_LEGACY_PICKLES)
        except pickles.PickleError as err:
            if err.short and want < most:
                want = min(most, 4 * want)
                continue
            if err.short and most < size:
                raise TorchFileError(
                    f"{path}: {what} run past the first {pickles.MAX_PICKLE_BYTES >> 20} MiB, "
                    "which is all that is read; the file is corrupt or made to exhaust its "
                    "reader."
                ) from err
            raise


def _read_exact(f: io.BufferedReader, path: str, offset: int, count: int) -> bytearray:
    buffer = bytearray(count)
    try:
        f.seek(offset)
        got = f.readinto(buffer)
    except OSError as err:
        raise files.FileAccessError.from_os_error(err, path) from err
    if got != count:
        raise TorchFileError(f"{path}: ends inside a storage; the file is shorter than it was.")
    return buffer


def _plain(path: str, f: io.BufferedReader, context: _Context) -> tuple[Any, str]:
    what = "the pickle"
    data = files.read_at(f, 0, files.size_of(f))  # the pickle holds its data: all of it
    context.allow(len(data))
    return _Unpickler(data, what, context, _unknown_id(context)).load(), what


_READERS: dict[str, Callable[[str, io.BufferedReader, _Context], tuple[Any, str]]] = {
    files.TORCH_ZIP: _zip,
    files.TORCH_PICKLE: _legacy_file,
    files.PICKLE: _plain,
}


@contextlib.contextmanager
def open_pickled(path: str | os.PathLike[str], kind: str) -> Iterator[Pickled]:
    """The file ``path`` of ``kind`` (``torch_zip``, ``torch_pickle`` or ``pickle``, as
    :func:`cudnn_rnn.io.files.sniff` tells them) read as the module says; its storages stay
    readable until the block ends. Raises :class:`TorchFileError` naming the file and what it
    asks for that is not read (:class:`~cudnn_rnn.io.files.ZipError` for an archive the zip
    reader refuses, :class:`~cudnn_rnn.io.files.FileTooLarge` for a plain pickle over
    :data:`MAX_PLAIN_PICKLE_BYTES`)."""
    name = os.fspath(path)
    read = _READERS[kind]
    limit = MAX_PLAIN_PICKLE_BYTES if kind == files.PICKLE else None
    with files.open_regular(name, max_size=limit) as f:
        context = _Context(name)
        top = _unpickled(name, lambda: read(name, f, context))
        try:
            pickled = Pickled(name, kind, top, context.storages, context.budget)
        except pickles.Budget.Exceeded as err:
            raise _exhausting(name, err) from None
        except RecursionError:  # the last net: every walk of the data is bounded or iterative
            raise _too_deep(name) from None
        yield pickled


def _exhausting(path: str, err: files.FormatError) -> TorchFileError:
    return TorchFileError(
        f"{path}: {err}; the file is made to exhaust its reader (a pickle calling a function "
        "on one object again and again, or naming one object again and again)."
    )


def _too_deep(path: str) -> TorchFileError:
    return TorchFileError(
        f"{path}: its objects nest too deep to be read; the file is corrupt or made to "
        "exhaust its reader."
    )


def _unpickled(path: str, load: Callable[[], tuple[Any, str]]) -> Any:
    """What ``load`` reads, its failures as one TorchFileError naming ``path``."""
    try:
        return load()[0]
    except pickles.PickleError as err:
        if err.opcode is not None:
            raise TorchFileError(
                f"{path}: {err.what} uses the pickle opcode {err.opcode}, which this reader "
                "does not read (the extension registry and out-of-band buffers are the "
                "process's, not the file's)."
            ) from err
        raise TorchFileError(
            f"{path}: refused before anything is unpickled: {err.what} at byte {err.offset}: "
            f"{err.problem}; the file is corrupt, made to exhaust its reader, or no pickle."
        ) from err
    except pickles.Budget.Exceeded as err:
        raise _exhausting(path, err) from None
    except _Refused as why:
        raise TorchFileError(
            f"{path}: it asks for {why}, which this reader does not rebuild; the file is "
            "corrupt or made to mislead its reader."
        ) from None
    except RecursionError:
        raise _too_deep(path) from None
    except (TorchFileError, files.FormatError, files.FileAccessError):
        raise
    except Exception as err:  # a corrupt pickle fails in many ways
        raise TorchFileError(
            f"{path}: not a readable pickle ({type(err).__name__}: {_said(err)}); "
            "the file is corrupt."
        ) from None


# -- what the file holds --------------------------------------------------------------------


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
