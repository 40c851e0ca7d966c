"""TorchScript archives (``torch.jit.save``): their tensors and module attributes, read without
running, importing or calling anything the archive names.

An archive is a zip of one folder ``ROOT/`` holding ``data.pkl`` (the pickled module tree: one
object of a ``__torch__.*`` class per module, whose state is a dict of its attributes; tensors
are ``torch._utils._rebuild_tensor_v2`` calls on storages named by persistent ids
``("storage", torch.FloatStorage, KEY, LOCATION, NUMEL)``, or, as torch 1.3 to 1.5 wrote them,
with a sixth field ``view_metadata`` that is always None), the storages' raw bytes in
``ROOT/data/KEY``, the modules' code in ``ROOT/code/`` and the code's constants in
``constants.pkl``. ``torch.jit.load`` compiles and may run that code; this reader never does, and
never uses ``pickle``'s own lookup of classes:

* The archive is read by the one zip reader (:func:`cudnn_rnn.io.files.open_zip`: its central
  directory checked before anything is inflated, every member inflated to exactly its size).
* Only ``data.pkl`` is unpickled (a module's attributes are all there; constants.pkl holds the
  code's constants, not read), by the one bounded pickle reader (:class:`cudnn_rnn.io.pickles.
  Unpickler`): its opcodes are first walked, bounded (memo indices, opcodes, nesting, lengths)
  and checked against a list of data-only ones (no ``INST``/``OBJ``, extension registry,
  out-of-band buffers or text persistent ids), then it is unpickled with a ``find_class`` that
  knows a closed table: ``__torch__.*`` classes become
  inert attribute holders (no code of theirs exists here), the storage types become dtype markers,
  and ``_rebuild_tensor_v2``, ``collections.OrderedDict``, ``torch.device`` and
  ``torch.jit._pickle``'s list builders and type tags become small functions of this module
  that rebuild plain values and tensor *references*. Any other global is refused
  (:class:`~cudnn_rnn.io.torch.state.TorchFileError` naming it), as is any ``BUILD`` on
  something that is not a module object.
* Nothing of torch runs while the pickle is read: a tensor is a :class:`TensorRef` (storage key,
  dtype, offset, shape, stride) checked as it is made: its storage's member exists, is stored
  uncompressed within the file, and holds exactly the ``NUMEL`` elements the persistent id claims;
  the view stays inside the storage. Listing reads no tensor data; :meth:`Archive.read` reads the
  storages of the tensors asked for, and refuses a view of more elements than its storage holds
  (an expanded tensor that would allocate more than the file's bytes).
* Bounds: ``data.pkl`` at most :data:`MAX_PICKLE_BYTES` (and its zip entry within the file),
  objects in it nested at most :data:`cudnn_rnn.io.pickles.MAX_PICKLE_DEPTH` deep (a tree of
  :data:`MAX_DEPTH` modules needs about 410), module nesting at most :data:`MAX_DEPTH`, at most
  64 dimensions a tensor. Every global looked up, rebuilder called (a tensor reference, a
  ``torch.device`` name joined of its arguments, ...), object and storage made is charged to
  the read's budget (:class:`cudnn_rnn.io.pickles.Budget`: 32 times ``data.pkl``'s bytes plus
  64 MiB), so that a pickle calling one on a memoized argument again and again is refused.
  Values of the file are shown in messages by :func:`cudnn_rnn.io.pickles.shown`; a RecursionError
  from anywhere in the read becomes a :class:`TorchFileError` naming the file.

A module's plain attributes (str, int, float, bool, None) are kept: ``nn.RNN`` records
``nonlinearity`` there. What TorchScript compiles into a class as a constant (``nn.RNNCell``'s
``nonlinearity : Final[str] = "relu"``) is read from the class's code as text, never run.

>>> import io, tempfile, torch, warnings
>>> path = tempfile.mkdtemp() + "/scripted.pt"
>>> with warnings.catch_warnings():
...     warnings.simplefilter("ignore")  # torch.jit is deprecated: the producer, not the reader
...     torch.jit.save(torch.jit.script(torch.nn.RNNCell(3, 2, nonlinearity="relu")), path)
>>> with open_archive(path) as archive:
...     sorted(archive.shapes()), archive.nonlinearity("")
(['bias_hh', 'bias_ih', 'weight_hh', 'weight_ih'], 'relu')
"""

from __future__ import annotations

import contextlib
import math
import os
import re
import sys
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any, ClassVar

import torch
from torch import Tensor

from cudnn_rnn.io import pickles
from cudnn_rnn.io.files.escaping import clip, first_line, quote
from cudnn_rnn.io.files.zip_reader import STORED, ZipArchive, ZipEntry, ZipError, open_zip
from cudnn_rnn.io.pickles import shown
from cudnn_rnn.io.torch.state import TorchFileError

__all__ = [
    "MAX_CODE_BYTES",
    "MAX_DEPTH",
    "MAX_PICKLE_BYTES",
    "Archive",
    "ScriptModule",
    "TensorRef",
    "open_archive",
]

#: The largest ``data.pkl`` read (uncompressed); a module tree's pickle is a few KiB a module.
MAX_PICKLE_BYTES = pickles.MAX_PICKLE_BYTES
#: The largest code file read (as text) for a class constant.
MAX_CODE_BYTES = 16 << 20
#: The deepest module nesting walked.
MAX_DEPTH = 200
_MAX_DIMS = 64
_MAX_CLASSES = 100_000
# What the read's budget is charged (cudnn_rnn.io.pickles.Budget says why)
_CALL, _FOUND, _tuple = pickles.Budget.CALL, pickles.Budget.GLOBAL, pickles.Budget.tuple_bytes

#: The storage types of persistent ids -> dtypes.
_STORAGES: dict[str, torch.dtype] = {
    "FloatStorage": torch.float32,
    "DoubleStorage": torch.float64,
    "HalfStorage": torch.float16,
    "BFloat16Storage": torch.bfloat16,
    "LongStorage": torch.int64,
    "IntStorage": torch.int32,
    "ShortStorage": torch.int16,
    "CharStorage": torch.int8,
    "ByteStorage": torch.uint8,
    "BoolStorage": torch.bool,
    "ComplexFloatStorage": torch.complex64,
    "ComplexDoubleStorage": torch.complex128,
}

#: Opcodes that build data (and, through find_class, only what this module allows); anything
#: else is refused before the pickle is read.
_OPCODES = frozenset(
    """PROTO FRAME STOP MARK POP POP_MARK DUP PUT BINPUT LONG_BINPUT MEMOIZE GET BINGET
    LONG_BINGET NONE NEWTRUE NEWFALSE INT BININT BININT1 BININT2 LONG LONG1 LONG4 FLOAT BINFLOAT
    STRING BINSTRING SHORT_BINSTRING UNICODE BINUNICODE SHORT_BINUNICODE BINUNICODE8 BINBYTES
    SHORT_BINBYTES BINBYTES8 EMPTY_TUPLE TUPLE TUPLE1 TUPLE2 TUPLE3 EMPTY_LIST APPEND APPENDS
    LIST EMPTY_DICT DICT SETITEM SETITEMS EMPTY_SET ADDITEMS FROZENSET GLOBAL STACK_GLOBAL REDUCE
    NEWOBJ NEWOBJ_EX BUILD BINPERSID""".split()
)


@dataclass(frozen=True)
class TensorRef:
    """A tensor of the archive, not read: its storage (``ROOT/data/KEY``) and the view on it."""

    key: str
    dtype: torch.dtype
    storage_numel: int
    offset: int
    shape: tuple[int, ...]
    stride: tuple[int, ...]

    def __setstate__(self, state: object) -> None:  # a BUILD on it in the pickle
        raise _Refused("a BUILD on a tensor")


@dataclass(frozen=True)
class ScriptModule:
    """One module object of the archive: its class (``__torch__.torch.nn.modules.rnn.LSTM``)
    and its plain attributes (str, int, float, bool, None)."""

    qualname: str
    attributes: dict[str, str | int | float | bool | None]


class _Refused(Exception):
    """What the pickle asked for and this reader does not do (becomes a TorchFileError)."""


# -- what the pickle may build ---------------------------------------------------------------


class _Inert:
    """Base of everything find_class hands the pickle: no BUILD changes it."""

    __slots__ = ()

    def __setstate__(self, state: object) -> None:
        raise _Refused(f"a BUILD on {self!r}")


class _StorageKind(_Inert):
    __slots__ = ("dtype", "name")

    def __init__(self, name: str, dtype: torch.dtype) -> None:
        self.name = name
        self.dtype = dtype

    def __repr__(self) -> str:
        return f"torch.{self.name}"


@dataclass(frozen=True)
class _Storage:
    key: str
    dtype: torch.dtype
    numel: int

    def __setstate__(self, state: object) -> None:
        raise _Refused("a BUILD on a storage")


class _Function(_Inert):
    """One of this module's rebuild functions, as the pickle calls it (REDUCE): each call is
    charged to the read's budget, with what the function makes beyond a small object."""

    __slots__ = ("budget", "function", "name")

    def __init__(self, name: str, function: Callable[..., Any], budget: pickles.Budget) -> None:
        self.name = name
        self.function = function
        self.budget = budget

    def __call__(self, *args: Any) -> Any:
        self.budget.charge(_CALL)
        made = self.function(*args)
        if isinstance(made, TensorRef):
            self.budget.charge(2 * _tuple(len(made.shape)))
        elif type(made) is str:  # a torch.device's name, joined of its arguments
            self.budget.charge(len(made))
        return made

    def __repr__(self) -> str:
        return self.name


class _ScriptObject:
    """A module (or other TorchScript object) of the archive: the class name and the state its
    one BUILD gave; subclassed once per class name, with no code of the archive's."""

    __slots__ = ("state",)
    qualname: ClassVar[str] = ""
    budget: ClassVar[pickles.Budget | None] = None  # charged for each object made
    state: object

    def __new__(cls, *args: Any, **kwargs: Any) -> _ScriptObject:
        if args or kwargs:
            raise _Refused(f"{quote(cls.qualname)} made with arguments")
        if cls.budget is not None:
            cls.budget.charge(_CALL)
        obj = super().__new__(cls)
        obj.state = _UNSET
        return obj

    def __setstate__(self, state: object) -> None:
        if self.state is not _UNSET:
            raise _Refused(f"a second BUILD on a {quote(self.qualname)}")
        self.state = state


_UNSET = object()


def _int(value: object, what: str) -> int:
    if type(value) is not int or value < 0:
        raise _Refused(f"{what} {shown(value)}, not a non-negative integer")
    return value


def _ints(value: object, what: str) -> tuple[int, ...]:
    if not isinstance(value, (tuple, list)) or len(value) > _MAX_DIMS:
        raise _Refused(f"{what} {shown(value)}, not a tuple of at most {_MAX_DIMS} integers")
    return tuple(_int(v, what) for v in value)


def _rebuild_tensor_v2(
    storage: object,
    offset: object,
    size: object,
    stride: object,
    requires_grad: object,
    hooks: object,
    metadata: object = None,
) -> TensorRef:
    if not isinstance(storage, _Storage):
        raise _Refused(f"a tensor on {shown(storage)}, not on a storage of the archive")
    shape = _ints(size, "a tensor size")
    strides = _ints(stride, "a tensor stride")
    start = _int(offset, "a storage offset")
    if len(strides) != len(shape) or type(requires_grad) is not bool:
        raise _Refused(f"a tensor of size {shown(size)} and stride {shown(stride)}")
    # torch < 1.1 pickled a tensor's _backward_hooks as they were: None without hooks
    if not (hooks is None or isinstance(hooks, dict)) or not (
        metadata is None or (isinstance(metadata, dict) and not metadata)
    ):
        raise _Refused("a tensor with backward hooks or metadata")
    if math.prod(shape):
        last = start + sum((n - 1) * s for n, s in zip(shape, strides))
        if last >= storage.numel:
            raise _Refused(
                f"a tensor of size {list(shape)}, stride {list(strides)} and offset {start} that "
                f"reaches past its storage of {storage.numel} elements"
            )
    elif start > storage.numel:
        raise _Refused(f"a tensor at offset {start} of a storage of {storage.numel} elements")
    return TensorRef(storage.key, storage.dtype, storage.numel, start, shape, strides)


def _same_list(value: object) -> object:
    if type(value) is not list:
        raise _Refused(f"a list builder on {shown(value)}")
    return value


def _type_tag(value: object, tag: object) -> object:
    if type(tag) is not str:
        raise _Refused(f"a type tag {shown(tag)}")
    return value


def _ordered_dict(*args: object) -> dict[Any, Any]:
    if args:
        raise _Refused("an OrderedDict made with arguments")
    return {}


def _device(*args: object) -> str:
    if not args or not all(type(a) in (str, int) for a in args):
        raise _Refused(f"a torch.device of {shown(args)}")
    return ":".join(str(a) for a in args)


_FUNCTIONS: dict[tuple[str, str], Callable[..., Any]] = {
    ("torch._utils", "_rebuild_tensor_v2"): _rebuild_tensor_v2,
    ("torch.jit._pickle", "build_intlist"): _same_list,
    ("torch.jit._pickle", "build_doublelist"): _same_list,
    ("torch.jit._pickle", "build_boollist"): _same_list,
    ("torch.jit._pickle", "build_tensorlist"): _same_list,
    ("torch.jit._pickle", "restore_type_tag"): _type_tag,
    ("collections", "OrderedDict"): _ordered_dict,
    ("torch", "device"): _device,
}


class _Unpickler(pickles.Unpickler):
    """``data.pkl``'s unpickler: walked and bounded first (its opcodes from the list above), and
    every global from the closed table above."""

    def __init__(
        self, data: bytearray, what: str, storage: Callable[[str, torch.dtype, int], _Storage]
    ) -> None:
        super().__init__(data, what=what, allowed=_OPCODES)
        self._storage = storage
        self._classes: dict[str, type[_ScriptObject]] = {}
        self.budget = pickles.Budget()
        self.budget.allow(len(data))

    def find_class(self, module: str, name: str) -> Any:
        self.budget.charge(_FOUND)
        if module == "__torch__" or module.startswith("__torch__."):
            return self._script_class(f"{module}.{name}")
        if module == "torch" and name in _STORAGES:
            return _StorageKind(name, _STORAGES[name])
        function = _FUNCTIONS.get((module, name))
        if function is None:
            raise _Refused(f"the global {quote(f'{module}.{name}', 80)}")
        return _Function(f"{module}.{name}", function, self.budget)

    def _script_class(self, qualname: str) -> type[_ScriptObject]:
        cls = self._classes.get(qualname)
        if cls is None:
            if len(self._classes) >= _MAX_CLASSES:
                raise _Refused(f"more than {_MAX_CLASSES} TorchScript classes")
            cls = type(
                "ScriptObject",
                (_ScriptObject,),
                {"__slots__": (), "qualname": qualname, "budget": self.budget},
            )
            self._classes[qualname] = cls
        return cls

    def persistent_load(self, pid: Any) -> _Storage:
        """A storage of the archive, named as ``("storage", torch.FloatStorage, KEY, LOCATION,
        NUMEL)``; torch 1.3 to 1.5's TorchScript writer added a sixth field, the storage's
        ``view_metadata``, always None (torch reads the first five and ignores it)."""
        if (
            type(pid) is not tuple
            or len(pid) not in (5, 6)
            or pid[0] != "storage"
            or not isinstance(pid[1], _StorageKind)
            or type(pid[2]) is not str
            or type(pid[3]) is not str
            or (len(pid) == 6 and pid[5] is not None)
        ):
            raise _Refused(f"the persistent id {shown(pid)}")
        self.budget.charge(_CALL)
        return self._storage(pid[2], pid[1].dtype, _int(pid[4], "a storage size"))


# -- the archive ------------------------------------------------------------------------------


class Archive:
    """An open TorchScript archive whose module tree was read: ``tensors`` (state_dict names ->
    :class:`TensorRef`) and ``modules`` (module path, ``""`` for the top, ->
    :class:`ScriptModule`). A module shared by several parents is listed under its first path.
    """

    def __init__(
        self,
        path: str,
        archive: ZipArchive,
        root: str,
        tensors: dict[str, TensorRef],
        modules: dict[str, ScriptModule],
    ) -> None:
        self.path = path
        self._zip = archive
        self._root = root
        self.tensors = tensors
        self.modules = modules

    def shapes(self) -> dict[str, tuple[tuple[int, ...], str]]:
        """Name -> (shape, dtype name) of every tensor, as the pickle says (nothing read)."""
        return {n: (t.shape, str(t.dtype).removeprefix("torch.")) for n, t in self.tensors.items()}

    def read(self, names: Iterable[str]) -> dict[str, Tensor]:
        """The tensors ``names`` (keys of ``tensors``), each its own contiguous CPU tensor."""
        out: dict[str, Tensor] = {}
        storages: dict[str, Tensor] = {}
        for name in names:
            ref = self.tensors[name]
            if math.prod(ref.shape) > ref.storage_numel:
                raise TorchFileError(
                    f"{self.path}: tensor {quote(name)} of shape {list(ref.shape)} has more "
                    f"elements than its storage ({ref.storage_numel}); it is not read."
                )
            flat = storages.get(ref.key)
            if flat is None:
                flat = storages[ref.key] = self._storage(ref)
            view = torch.as_strided(flat, ref.shape, ref.stride, ref.offset)
            out[name] = view.clone(memory_format=torch.contiguous_format)
        return out

    def _storage(self, ref: TensorRef) -> Tensor:
        data = self._zip.read(self._zip.entry(f"{self._root}data/{ref.key}"))
        if not data:
            return torch.empty(0, dtype=ref.dtype)
        return torch.frombuffer(data, dtype=ref.dtype)

    def nonlinearity(self, prefix: str) -> str | None:
        """The ``nonlinearity`` the module at ``prefix`` records (``"tanh"``/``"relu"``): its
        attribute (``nn.RNN``), else its class's ``Final[str]`` constant read from the code
        (``nn.RNNCell``); None where neither says."""
        module = self.modules.get(prefix)
        if module is None:
            return None
        value = module.attributes.get("nonlinearity")
        if value is None:
            value = self._constant(module.qualname, "nonlinearity")
        return value if value in ("tanh", "relu") else None

    def _constant(self, qualname: str, attribute: str) -> str | None:
        """A ``Final[str]`` class constant, as text in ``ROOT/code/<module path>.py``."""
        module, _, cls = qualname.rpartition(".")
        entry = self._zip.get(f"{self._root}code/{module.replace('.', '/')}.py")
        if entry is None or entry.size > MAX_CODE_BYTES:
            return None
        try:
            text = self._zip.read(entry).decode("utf-8")
        except (ZipError, UnicodeDecodeError):
            return None
        start = re.search(rf"^class {re.escape(cls)}\(", text, flags=re.M)
        if start is None:
            return None
        body = re.match(r"[^\n]*\n((?:[ \t][^\n]*\n|\n)*)", text[start.start() :])
        if body is None:
            return None
        found = re.search(
            rf'^[ \t]+{re.escape(attribute)} : Final\[str\] = "([A-Za-z0-9_]{{1,32}})"$',
            body.group(1),
            flags=re.M,
        )
        return found.group(1) if found else None


def _read_member(path: str, archive: ZipArchive, entry: ZipEntry, limit: int) -> bytearray:
    """The bytes of a member of at most ``limit`` bytes once read (the archive's own checks
    apply: its size is exact, its CRC is checked)."""
    if entry.size > limit:
        raise TorchFileError(
            f"{path}: member {quote(entry.name)} claims {entry.size} bytes once inflated; at most "
            f"{limit} are read."
        )
    return archive.read(entry)


@contextlib.contextmanager
def open_archive(path: str | os.PathLike[str]) -> Iterator[Archive]:
    """The TorchScript archive ``path``, its module tree read as the module docstring says
    (:class:`~cudnn_rnn.io.torch.state.TorchFileError` for anything else, or
    :class:`~cudnn_rnn.io.files.ZipError` for an archive the zip reader refuses); closed when the
    block ends. Only a regular file is opened."""
    name = os.fspath(path)
    with open_zip(name, "TorchScript archive (torch.jit.save)") as archive:
        yield _read_tree(name, archive)


def _read_tree(path: str, archive: ZipArchive) -> Archive:
    roots = [
        n.removesuffix("data.pkl")
        for n in archive.names()
        if n.endswith("/data.pkl") and n.count("/") == 1
    ]
    if len(roots) != 1:
        raise TorchFileError(
            f"{path}: {'no' if not roots else 'more than one'} ROOT/data.pkl; not a TorchScript "
            "archive as torch.jit.save writes it."
        )
    (root,) = roots
    order = archive.get(f"{root}byteorder")
    if order is not None and _read_member(path, archive, order, 16).strip() != (
        sys.byteorder.encode()
    ):
        raise TorchFileError(
            f"{path}: written on a machine of another byte order; load it there with "
            "torch.jit.load and save module.state_dict() with torch.save."
        )
    data = _read_member(path, archive, archive.entry(f"{root}data.pkl"), MAX_PICKLE_BYTES)

    def storage(key: str, dtype: torch.dtype, numel: int) -> _Storage:
        entry = archive.get(f"{root}data/{key}")
        if entry is None:
            raise _Refused(f"storage {quote(key)}, which the archive does not hold")
        if entry.size != numel * dtype.itemsize or entry.method != STORED:
            raise _Refused(
                f"storage {quote(key)} of {numel} {str(dtype).removeprefix('torch.')} elements, "
                f"whose member holds {entry.size} bytes"
                + ("" if entry.method == STORED else " compressed")
            )
        return _Storage(key, dtype, numel)

    try:
        top = _Unpickler(data, f"{path}: data.pkl", storage).load()
        if not isinstance(top, _ScriptObject):
            raise _Refused(f"a {type(top).__name__} at the top, not a module")
        tensors: dict[str, TensorRef] = {}
        modules: dict[str, ScriptModule] = {}
        _walk(top, "", 0, tensors, modules, set())
    except pickles.PickleError as err:
        if err.opcode is None:
            raise TorchFileError(
                f"{path}: data.pkl is refused before it is unpickled: {err.problem} (byte "
                f"{err.offset}); the archive is corrupt or made to exhaust its reader."
            ) from err
        raise _asks_for(path, f"the pickle opcode {err.opcode}") from None
    except _Refused as why:
        raise _asks_for(path, str(why)) from None
    except pickles.Budget.Exceeded as err:
        raise TorchFileError(
            f"{path}: data.pkl is refused: {err}; the archive is made to exhaust its reader (a "
            "pickle calling a function on one object again and again)."
        ) from None
    except RecursionError:  # the last net: every walk of the data is bounded
        raise TorchFileError(
            f"{path}: data.pkl nests its objects too deep to be read; the archive is corrupt "
            "or made to exhaust its reader."
        ) from None
    except TorchFileError:
        raise
    except Exception as err:  # a corrupt pickle fails in many ways
        raise TorchFileError(
            f"{path}: data.pkl is not a readable pickle ({type(err).__name__}: "
            f"{_said(err)}); the archive is corrupt."
        ) from None
    return Archive(path, archive, root, tensors, modules)


def _said(err: BaseException) -> str:
    """The first line of ``err`` (its class name where even that fails on the data it holds:
    a KeyError's message is the repr of its key)."""
    try:
        return clip(first_line(err))
    except (RecursionError, ValueError):
        return type(err).__name__


def _asks_for(path: str, what: str) -> TorchFileError:
    return TorchFileError(
        f"{path}: data.pkl asks for {what}, which this reader does not rebuild; only module "
        "trees of tensors and plain values are read (never the archive's code). Save "
        "module.state_dict() with torch.save instead."
    )


def _walk(
    obj: _ScriptObject,
    prefix: str,
    depth: int,
    tensors: dict[str, TensorRef],
    modules: dict[str, ScriptModule],
    seen: set[int],
) -> None:
    """Record the tensors and plain attributes of ``obj`` and its submodules (state_dict names,
    in the order the pickle holds them), each object once."""
    if depth > MAX_DEPTH:
        raise _Refused(f"modules nested more than {MAX_DEPTH} deep")
    seen.add(id(obj))
    state = obj.state if isinstance(obj.state, dict) else {}
    attributes: dict[str, str | int | float | bool | None] = {}
    children: list[tuple[str, _ScriptObject]] = []
    for key, value in state.items():
        if type(key) is not str:
            continue
        name = f"{prefix}.{key}" if prefix else key
        if isinstance(value, TensorRef):
            tensors[name] = value
        elif isinstance(value, _ScriptObject):
            children.append((name, value))
        elif value is None or type(value) in (str, int, float, bool):
            attributes[key] = value
    modules[prefix] = ScriptModule(type(obj).qualname, attributes)
    for name, child in children:
        if id(child) not in seen:
            _walk(child, name, depth + 1, tensors, modules, seen)
