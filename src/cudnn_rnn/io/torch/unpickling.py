"""How each pickle of a torch file is unpickled without importing, calling or running anything
it names: what ``find_class`` hands it (an inert record class for every name, and the few
globals honoured by small functions that check their arguments and build plain data), the
persistent ids of storages, and the unpickler that asks for them.

They all belong to one read, a :class:`Context` (one per file, shared by its pickles), which
:mod:`cudnn_rnn.io.torch.pickled` makes. It is a protocol here because one honoured global, a
storage pickled inside a pickle, is a legacy torch.save file read through it
(:mod:`cudnn_rnn.io.torch.legacy`), and that reader unpickles with this module.

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
"""

from __future__ import annotations

import contextlib
import math
import pickletools
import sys
from collections.abc import Callable
from typing import Any, ClassVar, Protocol, cast

import numpy as np
import torch

from cudnn_rnn.io import pickles
from cudnn_rnn.io.files.escaping import quote
from cudnn_rnn.io.pickles import shown
from cudnn_rnn.io.torch.torchscript import _STORAGES, TensorRef, _Refused, _Storage, _StorageKind
from cudnn_rnn.io.torch.torchscript import _rebuild_tensor_v2 as _checked_tensor

__all__ = ["Context", "Opaque", "Tensorish"]

_MAX_DIMS = 64
_MAX_DIM = 1 << 62
# What the budget is charged (cudnn_rnn.io.pickles.Budget says why)
_CALL, _FOUND, _RECORD = pickles.Budget.CALL, pickles.Budget.GLOBAL, pickles.Budget.RECORD
_POINTER, _PAIR, _tuple = pickles.Budget.POINTER, pickles.Budget.PAIR, pickles.Budget.tuple_bytes

#: Every opcode but the extension registry's (process state) and out-of-band buffers'.
_OPCODES = frozenset(
    op.name
    for op in pickletools.opcodes
    if op.name not in ("EXT1", "EXT2", "EXT4", "NEXT_BUFFER", "READONLY_BUFFER")
)
#: Python 2's module names of the globals honoured.
_PY2_MODULES = {"__builtin__": "builtins", "copy_reg": "copyreg"}


class Context(Protocol):
    """What the records, the honoured globals and the format readers ask of the read they are
    part of (one per file, shared by all its pickles, nested ones included):
    :class:`cudnn_rnn.io.torch.pickled._Context` is the one."""

    #: The file read, for messages.
    path: str
    #: Where each storage's bytes are: key -> a reader of exactly its bytes.
    storages: dict[str, Callable[[], bytearray]]
    #: The class of the records of a record's call (``getattr(x, "f")(...)``).
    called: type[_Called]

    def allow(self, pickled: int) -> None:
        """Count ``pickled`` bytes of the file's pickles read."""

    def charge(self, made: int) -> None:
        """Count ``made`` bytes rebuilt (:attr:`cudnn_rnn.io.pickles.Budget.Exceeded` past the
        budget)."""

    def opaque_class(self, module: str, name: str) -> type[Opaque]:
        """The inert record class of ``module.name``, one per name."""

    def nested(self, data: bytes | bytearray) -> Any:
        """The object of the legacy torch.save file ``data`` (a storage pickled in a pickle)."""


# -- inert records --------------------------------------------------------------------------


class Opaque:
    """An object of a class the file names (``module``, ``name``), which is never imported:
    what it was made with (``args``, ``kwargs``), the state a ``BUILD`` gave it (``state``),
    the key-value pairs (``items``) and elements (``elements``) pickle added to it. One
    subclass is made per name read; none has code of the file's."""

    __slots__ = ("args", "elements", "items", "kwargs", "state")
    module: ClassVar[str] = ""
    name: ClassVar[str] = ""
    context: ClassVar[Context | None] = None  # charged for what its records take
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
        context: Context,
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


def _np_reconstruct(context: Context, subtype: object, shape: object, code: object) -> _Array:
    return _Array(None, pending=True)


def _np_dtype(context: Context, code: object, align: object = False, copy: object = True) -> _DType:
    if type(code) is not str or len(code) > 8:
        raise _Unexpected
    return _DType(code)


def _np_scalar(context: Context, dtype: object, data: object = None) -> _Array:
    if not isinstance(dtype, _DType) or not isinstance(data, (bytes, bytearray)):
        raise _Unexpected
    return _Array(_array(data, dtype, (), "C"))


def _np_frombuffer(
    context: Context, data: object, dtype: object, shape: object, order: object
) -> _Array:
    if not isinstance(dtype, _DType) or not isinstance(data, (bytes, bytearray)):
        raise _Unexpected
    return _Array(_array(data, dtype, shape, order))


def _tensor_v2(
    context: Context,
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
    context: Context, storage: object, offset: object, size: object, stride: object
) -> TensorRef:
    return _tensor_v2(context, storage, offset, size, stride, False, {})


def _parameter(context: Context, data: object, *rest: object) -> object:
    return data


def _from_type(context: Context, function: object, cls: object, args: object, state: object) -> Any:
    if not isinstance(function, (_Allowed, type)) or type(args) is not tuple:
        raise _Unexpected
    if isinstance(function, type) and not issubclass(function, Opaque):
        raise _Unexpected
    return function(*args)


def _ordered_dict(context: Context, items: object = ()) -> _Dict:
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


def _set(context: Context, items: object = ()) -> set[Any]:
    if not isinstance(items, (list, tuple, set, frozenset)):
        raise _Unexpected
    try:
        out = set(items)
    except TypeError:  # an unhashable item
        raise _Unexpected from None
    context.charge(sys.getsizeof(out))
    return out


def _frozenset(context: Context, items: object = ()) -> frozenset[Any]:
    out = frozenset(_set(context, items))
    context.charge(sys.getsizeof(out))
    return out


def _slice(context: Context, *args: object) -> slice:
    if not all(a is None or type(a) is int for a in args):
        raise _Unexpected
    return slice(*args)


def _complex(context: Context, *args: object) -> complex:
    numbers = [a for a in args if type(a) in (int, float)]
    if len(numbers) != len(args):
        raise _Unexpected
    return complex(*cast(list[float], numbers))


def _latin1(context: Context, data: object, encoding: object = None) -> bytes:
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


def _bytes(context: Context, *args: object) -> bytes:
    return _latin1(context, *args) if args else b""


def _bytearray(context: Context, *args: object) -> bytearray:
    if not args:
        return bytearray()
    data = _latin1(context, *args)
    context.charge(len(data))
    return bytearray(data)


def _encode(context: Context, text: object, encoding: object = "utf-8") -> bytes:
    return _latin1(context, text, encoding)


def _reconstructor(context: Context, cls: object, base: object, state: object) -> Opaque:
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


def _newobj(context: Context, cls: object, *args: object) -> Opaque:
    if not (isinstance(cls, type) and issubclass(cls, Opaque)):
        raise _Unexpected
    return cls(*args)


def _newobj_ex(context: Context, cls: object, args: object, kwargs: object) -> Opaque:
    if type(args) is not tuple or type(kwargs) is not dict:
        raise _Unexpected
    return _newobj(context, cls, *args)


def _load_from_bytes(context: Context, data: object) -> Any:
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


def _found(context: Context, module: str, name: str) -> Any:
    """What ``find_class`` hands the pickle for the global ``module.name``: a storage type's
    dtype, an honoured global, or else the name's inert record class."""
    context.charge(_FOUND)
    module = _PY2_MODULES.get(module, module)
    if module == "torch" and name in _STORAGES:
        return _StorageKind(name, _STORAGES[name])
    if (module, name) in _MORE_STORAGES:
        return _StorageKind(name, _MORE_STORAGES[module, name])
    allowed = _ALLOWED.get((module, name))
    if allowed is not None:
        return _Allowed(f"{module}.{name}", allowed[0], allowed[1], context)
    return context.opaque_class(module, name)


class _Unpickler(pickles.Unpickler):
    """One pickle of the file: walked first (:func:`cudnn_rnn.io.pickles.check`), then unpickled
    with the globals :func:`_found` hands it and ``persistent`` for its persistent ids."""

    def __init__(
        self,
        data: bytes | bytearray,
        what: str,
        context: Context,
        persistent: Callable[[Any], Any],
    ) -> None:
        super().__init__(data, what=what, allowed=_OPCODES)
        self._context = context
        self._persistent = persistent

    def find_class(self, module: str, name: str) -> Any:
        return _found(self._context, module, name)

    def persistent_load(self, pid: Any) -> Any:
        return self._persistent(pid)


def _unknown_id(context: Context) -> Callable[[Any], Any]:
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
