"""torch state_dicts in files: ``torch.save`` files, TorchScript archives, and the torch names
of safetensors and ``.npz`` files; every RNN they hold, and the tensors of one.

:func:`find_rnns` lists every ``torch.nn.LSTM``/``GRU``/``RNN`` and ``LSTMCell``/``GRUCell``/
``RNNCell`` of a file, at any prefix (:mod:`cudnn_rnn.io.torch.state` says how names make
a group), and :func:`read_group` reads the tensors of one, checked, for
:func:`cudnn_rnn.converters.torch_nn.from_torch`. The file's kind is told by its content
(:func:`cudnn_rnn.io.files.sniff`), each read safely:

=============  ==============================================================================
kind           how it is read
=============  ==============================================================================
torch_zip,     :mod:`cudnn_rnn.io.torch.pickled`: unpickled without importing or running
torch_pickle,  anything (unknown classes become inert records, tensors are kept), every tensor
pickle         and NumPy array named by its path: dict keys with dots (``{"model":
               state_dict}`` holds ``model.encoder.rnn``; a Lightning checkpoint's
               ``state_dict.model.encoder.lstm``), list and tuple elements as ``[0]``, a pickled
               module's submodules as ``torch.save(model)`` left them (``encoder.lstm``, its
               ``nn.RNN``'s recorded nonlinearity used); storages are read only for a tensor
               asked for
torchscript    :mod:`cudnn_rnn.io.torch.torchscript`: the module tree's tensors and attributes,
               without running the archive's code (``nn.RNN``'s recorded nonlinearity is used)
safetensors    the header, checked against the file as
               :mod:`cudnn_rnn.io.safetensors` checks it (any ``format`` metadata, e.g.
               ``safetensors.torch.save_file``'s); only the group's tensors are read
npz            :mod:`cudnn_rnn.io.npz`: the ``.npy`` headers, checked; only the group's
               arrays are read
=============  ==============================================================================

Content of no known kind goes to the reader its name's extension asks for (``.safetensors``,
``.npz``, ``.pkl``/``.pickle``, else ``torch.load(weights_only=True)``, as below), whose error
says what is wrong. Listing reads no tensor data, except through ``torch.load``, which reads a
file whole.

:func:`read_state` (and content of no known kind) is read by ``torch.load(weights_only=True)``,
which reads nothing unchecked. A torch.save archive is first checked by the one zip
reader (:func:`cudnn_rnn.io.files.zip_archive`: entry count, sizes, ratios, overlaps, zip64; torch's
own reader checks none of it and allocates what an entry declares), and its ``data.pkl`` is
walked by the bounded pickle reader (:func:`cudnn_rnn.io.pickles.check`); a legacy file's leading
pickles are walked the same way. ``torch.load`` then reads the same open file through
:func:`cudnn_rnn.io.files.pinned`, which serves the checked parts (the central directory, the end
records, ``data.pkl`` and its local header; the legacy pickles) from the bytes that were checked:
a file changed or swapped after the check cannot give torch another directory or pickle, and no
path is opened twice. (Rebuilding a checked copy would hold the weights twice in memory; handing
torch the path again would read whatever the path names by then.)

:func:`read_state` and :func:`module_of_state` are the strict reading of a file holding exactly
one module's state_dict at the top level (what ``cudnn-rnn convert`` reads). Everything raises
:class:`TorchFileError` (or, for a broken safetensors header,
:class:`~cudnn_rnn.io.safetensors.CheckpointError`; for a zip archive the zip reader refuses,
:class:`~cudnn_rnn.io.files.ZipError`; for a path that cannot be opened,
:class:`~cudnn_rnn.errors.FileAccessError`) naming the file and what to do.
"""

from __future__ import annotations

import contextlib
import io
import os
import pickle
import re
import warnings
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, cast

import torch

from cudnn_rnn.core.spec import RNNSpec
from cudnn_rnn.io import npz, pickles
from cudnn_rnn.io import safetensors as st
from cudnn_rnn.io.files.escaping import clip, first_line, listed
from cudnn_rnn.io.files.opening import open_regular, pinned, read_at, size_of
from cudnn_rnn.io.files.sniffing import (
    KINDS,
    NPZ,
    PICKLE,
    SAFETENSORS,
    TORCH_PICKLE,
    TORCH_ZIP,
    TORCHSCRIPT,
    UNKNOWN,
    sniff,
)
from cudnn_rnn.io.files.zip_reader import zip_archive
from cudnn_rnn.io.found import FoundRNN
from cudnn_rnn.io.torch import pickled as torch_pickle
from cudnn_rnn.io.torch import torchscript
from cudnn_rnn.io.torch.state import (
    StateGroup,
    TorchFileError,
    find_groups,
    found_rnn,
    plain_mode,
    select,
    torch_state_shapes,
)

__all__ = [
    "TorchFileError",
    "find_rnns",
    "flatten_state",
    "module_of_state",
    "read_group",
    "read_state",
    "tensor_shapes",
]


#: The floating dtypes a model's tensors may have (what every converter casts from).
_FLOATING = (torch.float16, torch.bfloat16, torch.float32, torch.float64)
_TORCH_KEY = re.compile(
    r"^(?:weight_ih|weight_hh|bias_ih|bias_hh|weight_hr)_l(\d{1,9})(?:_reverse)?$"
)
_MANGLE = re.compile(r"___torch_mangle_\d+\.")
_GATES_MODE = {4: "lstm", 3: "gru", 1: "rnn_tanh"}


def read_state(path: str | os.PathLike[str]) -> dict[str, torch.Tensor]:
    """The state_dict in the torch file ``path`` (zip or legacy pickle), names to tensors, on the
    CPU. Only a regular file is opened (:class:`cudnn_rnn.io.files.NotRegularFile`)."""
    path = os.fspath(path)
    state = _torch_load(path)
    if not isinstance(state, dict) or not all(
        isinstance(k, str) and isinstance(v, torch.Tensor) for k, v in state.items()
    ):
        raise TorchFileError(f"{path}: not a torch state_dict (a dict of names to tensors).")
    return state


def _torch_load(path: str) -> Any:
    """What ``torch.load(weights_only=True)`` makes of ``path``, on the CPU, once checked (see
    the module)."""
    with open_regular(path) as f:
        if read_at(f, 0, 4) == b"PK\x03\x04":
            checked = _checked_zip(path, f)
        else:
            checked = _checked_legacy(path, f)
        return _load_checked(path, checked)


def _load_checked(path: str, checked: io.RawIOBase) -> Any:
    with warnings.catch_warnings():
        # A corrupt file can make torch's unpickler warn on its way to refusing it; the CLI's
        # answer is the one line below, not the warning.
        warnings.simplefilter("ignore")
        try:
            # torch reads any object with read/readinto/seek/tell (it needs no fileno)
            state = torch.load(cast(IO[bytes], checked), map_location="cpu", weights_only=True)
        except pickle.UnpicklingError as err:
            raise TorchFileError(
                f"{path}: torch.load(weights_only=True) refuses it: it holds objects other than "
                "tensors; save a plain torch.save(module.state_dict(), path)."
            ) from err
        except Exception as err:  # a truncated or corrupt file fails in many ways
            raise TorchFileError(
                f"{path}: not a readable torch file ({type(err).__name__}: "
                f"{clip(first_line(err))}); save it with torch.save(module.state_dict(), path)."
            ) from err
    return state


#: A legacy torch.save file's leading pickles: magic number, protocol, system info, the object,
#: its storages' keys (the storages' bytes follow).
_LEGACY_PICKLES = 5
_LEGACY_FIRST_READ = 1 << 20


def _checked_zip(path: str, f: io.BufferedReader) -> io.RawIOBase:
    """The torch.save archive in ``f``, checked (zip reader, then its ``data.pkl``), as
    ``torch.load`` is to read it."""
    archive = zip_archive(f, "torch file (zip archive)")
    entry = torch_pickle.data_pkl(path, archive)
    data = archive.read(entry, pin=True)
    try:
        pickles.check(data, what=entry.name)
    except pickles.PickleError as err:
        raise _refused(path, err, entry.name) from err
    return archive.view()


def _checked_legacy(path: str, f: io.BufferedReader) -> io.RawIOBase:
    """The legacy torch.save file in ``f``, its leading pickles checked (read from its start,
    at most 64 MiB), as ``torch.load`` is to read it."""
    size = size_of(f)
    most = min(size, pickles.MAX_PICKLE_BYTES)
    want = min(most, _LEGACY_FIRST_READ)
    while True:
        head = read_at(f, 0, want)
        try:
            end = pickles.check(head, what="its pickles", count=_LEGACY_PICKLES)
        except pickles.PickleError as err:
            if err.short and want < most:
                want = min(most, 4 * want)
                continue
            raise _refused(path, err, "its pickles", cut=err.short and most < size) from err
        return pinned(f, size, [(0, head[:end])])


def _refused(
    path: str, err: pickles.PickleError, what: str, *, cut: bool = False
) -> TorchFileError:
    why = (
        f"run past the first {pickles.MAX_PICKLE_BYTES >> 20} MiB, which is all that is read"
        if cut
        else f"at byte {err.offset}: {err.problem}"
    )
    return TorchFileError(
        f"{path}: torch.load(weights_only=True) refuses it: {what} {why} (checked before any of "
        "it is unpickled); the file is corrupt, made to exhaust its reader, or not a torch.save "
        "file. Save it with torch.save(module.state_dict(), path)."
    )


def module_of_state(
    state: dict[str, torch.Tensor], path: str, activation: str | None
) -> torch.nn.RNNBase:
    """The torch.nn module of ``state``, built only after every key, shape and dtype of
    ``state`` was checked against the module its layer-0 tensors imply."""
    w_ih, w_hh = state.get("weight_ih_l0"), state.get("weight_hh_l0")
    if w_ih is None or w_hh is None:
        raise TorchFileError(
            f"{path}: no weight_ih_l0/weight_hh_l0; expected the state_dict of a "
            "torch.nn.LSTM, GRU or RNN."
        )
    odd = [
        f"{k} ({str(v.dtype).removeprefix('torch.')})"
        for k, v in state.items()
        if v.dtype not in _FLOATING
    ]
    if odd:
        raise TorchFileError(
            f"{path}: tensors must be float16, bfloat16, float32 or float64, got {listed(odd)}."
        )
    w_hr = state.get("weight_hr_l0")
    if w_ih.dim() != 2 or w_hh.dim() != 2 or (w_hr is not None and w_hr.dim() != 2):
        raise TorchFileError(
            f"{path}: weight_ih_l0, weight_hh_l0 (and weight_hr_l0) must be matrices, got "
            f"shapes {list(w_ih.shape)}, {list(w_hh.shape)}"
            f"{'' if w_hr is None else f', {list(w_hr.shape)}'}."
        )
    proj = w_hr.shape[0] if w_hr is not None else 0
    units = w_hr.shape[1] if w_hr is not None else w_hh.shape[1]
    gates = w_ih.shape[0] // units if units else 0
    if gates not in _GATES_MODE or w_ih.shape[0] != gates * units:
        raise TorchFileError(
            f"{path}: weight_ih_l0 {list(w_ih.shape)} is not 4, 3 or 1 gates of "
            f"{units} units; expected the state_dict of a torch.nn.LSTM, GRU or RNN."
        )
    indices = [m and int(m[1]) for m in map(_TORCH_KEY.match, state)]
    layers = 1 + max((i for i in indices if i is not None), default=0)
    bidirectional = "weight_ih_l0_reverse" in state
    bias = "bias_ih_l0" in state
    # Each layer-direction has at least two tensors: refuse a claim of more layers than the
    # file can hold before naming them all.
    if layers * (2 if bidirectional else 1) * 2 > len(state):
        raise TorchFileError(
            f"{path}: a key names layer {layers - 1}, but the state_dict holds only "
            f"{len(state)} tensors; it is not the state_dict of one torch.nn module."
        )
    try:
        spec = RNNSpec(
            _GATES_MODE[gates],
            layers,
            units,
            w_ih.shape[1],
            direction="bidirectional" if bidirectional else "unidirectional",
            num_proj=proj or None,
            owner="cudnn-rnn",
        )
    except (TypeError, ValueError) as err:
        raise TorchFileError(f"{path}: {clip(first_line(err))}") from err
    expected = torch_state_shapes(spec, bias=bias)
    problems = [f"missing {k}" for k in expected if k not in state]
    problems += [f"unexpected {k}" for k in state if k not in expected]
    problems += [
        f"{k} has shape {list(state[k].shape)}, expected {list(shape)}"
        for k, shape in expected.items()
        if k in state and tuple(state[k].shape) != shape
    ]
    if problems:
        raise TorchFileError(
            f"{path}: not the state_dict of the torch.nn module its weight_ih_l0 implies "
            f"({_GATES_MODE[gates]}, {layers} layer(s), {units} units): {listed(problems)}."
        )
    if proj and proj >= units:
        raise TorchFileError(f"{path}: weight_hr_l0 has proj_size {proj} >= hidden_size {units}.")
    common = dict(
        input_size=w_ih.shape[1],
        hidden_size=units,
        num_layers=layers,
        bias=bias,
        bidirectional=bidirectional,
        dtype=w_ih.dtype,
    )
    if gates == 4:
        module: torch.nn.RNNBase = torch.nn.LSTM(proj_size=proj, **common)
    elif gates == 3:
        module = torch.nn.GRU(**common)
    else:
        if activation is None:
            raise TorchFileError(
                f"{path}: a torch.nn.RNN state_dict does not say tanh or relu; pass "
                "--activation tanh or --activation relu."
            )
        module = torch.nn.RNN(nonlinearity=activation, **common)
    module.load_state_dict(state)
    return module


# -- every RNN of a file, at any prefix -----------------------------------------------------------

_MAX_NESTING = 32


def flatten_state(state: Mapping[Any, Any]) -> dict[str, torch.Tensor]:
    """The tensors of a state_dict, nested dicts flattened with dots (``{"model": {"rnn.w": t}}``
    gives ``model.rnn.w``); keys that are no str and values that are neither a tensor nor a
    dict are left out, as is a dict nested more than 32 deep or met a second time."""
    out: dict[str, torch.Tensor] = {}
    seen: set[int] = set()

    def walk(mapping: Mapping[Any, Any], prefix: str, depth: int) -> None:
        seen.add(id(mapping))
        for key, value in mapping.items():
            if not isinstance(key, str):
                continue
            name = f"{prefix}.{key}" if prefix else key
            if isinstance(value, torch.Tensor):
                out[name] = value
            elif isinstance(value, Mapping) and depth < _MAX_NESTING and id(value) not in seen:
                walk(value, name, depth + 1)

    walk(state, "", 0)
    return out


def dtype_name(tensor: torch.Tensor) -> str:
    """``"float32"`` for a float32 tensor: the dtype names :mod:`torch_state` compares."""
    return str(tensor.dtype).removeprefix("torch.")


@dataclass
class _Source:
    """One file's tensors as a state_dict: their claims, how to read some, what it records."""

    kind: str
    shapes: dict[str, tuple[tuple[int, ...], str]]
    read: Callable[[list[str]], dict[str, torch.Tensor]]
    nonlinearity: Callable[[str], str | None]
    where: Callable[[StateGroup], str]
    holds: str | None = None  # what the file holds, in words, where it may hold no RNN


#: The pickled kinds (torch_pickle reads them) and the names that ask for a reader when the
#: content proves nothing (else: torch.load).
_PICKLED = (TORCH_ZIP, TORCH_PICKLE, PICKLE)
_BY_SUFFIX = {
    ".safetensors": SAFETENSORS,
    ".npz": NPZ,
    ".pkl": PICKLE,
    ".pickle": PICKLE,
}
_TORCH_LOAD = "torch.load"


def _nothing_recorded(prefix: str) -> str | None:
    return None


@contextlib.contextmanager
def _opened(path: str) -> Iterator[_Source]:
    kind = sniff(path)
    if kind == UNKNOWN:
        kind = _BY_SUFFIX.get(Path(path).suffix.lower(), _TORCH_LOAD)
    if kind in _PICKLED:
        with torch_pickle.open_pickled(path, kind) as pickled:
            yield _Source(
                kind,
                pickled.shapes(),
                pickled.read,
                pickled.nonlinearity,
                pickled.where,
                pickled.holds,
            )
    elif kind == _TORCH_LOAD:  # content of no known kind: torch.load's error says what is wrong
        loaded = _torch_load(path)
        if not isinstance(loaded, Mapping):
            raise TorchFileError(
                f"{path}: holds a {type(loaded).__name__}, not a state_dict (a dict of names to "
                "tensors); save module.state_dict() with torch.save."
            )
        state = flatten_state(loaded)
        yield _Source(
            TORCH_ZIP,
            {n: (tuple(t.shape), dtype_name(t)) for n, t in state.items()},
            lambda names: {n: state[n] for n in names},
            _nothing_recorded,
            lambda g: f"{g.describe()} in the state_dict",
        )
    elif kind == TORCHSCRIPT:
        with torchscript.open_archive(path) as archive:

            def where(g: StateGroup) -> str:
                module = archive.modules.get(g.prefix)
                # TorchScript mangles a class scripted twice in one process (___torch_mangle_N)
                qualname = _MANGLE.sub("", module.qualname) if module else ""
                standard = ("", f"__torch__.torch.nn.modules.rnn.{g.torch_class}")
                own = "" if qualname in standard else f" (class {qualname})"
                return f"{g.describe()}{own} in the TorchScript module tree"

            yield _Source(kind, archive.shapes(), archive.read, archive.nonlinearity, where)
    elif kind == SAFETENSORS:
        with open_regular(path) as f:
            # The header is checked as every safetensors file is; its format metadata is not
            # ours to check (safetensors.torch.save_file may write {"format": "pt"}).
            entries, _ = st._read_header(f, Path(path))
            yield _Source(
                kind,
                {n: (e.shape, e.dtype_name) for n, e in entries.items()},
                lambda names: st._read_tensors(f, Path(path), entries, names),
                _nothing_recorded,
                lambda g: f"{g.describe()} in the safetensors tensors",
            )
    elif kind == NPZ:
        with npz.open_npz(path) as arrays:

            def read(names: list[str]) -> dict[str, torch.Tensor]:
                return {n: torch.from_numpy(a) for n, a in arrays.read(names).items()}

            yield _Source(
                kind,
                arrays.claims(),
                read,
                _nothing_recorded,
                lambda g: f"{g.describe()} in the .npz arrays",
            )
    else:
        raise TorchFileError(
            f"{path}: {KINDS[kind]}; torch state_dicts are read from torch.save files, "
            "TorchScript archives, pickles, safetensors and .npz files."
        )


def tensor_shapes(path: str | os.PathLike[str]) -> dict[str, tuple[tuple[int, ...], str]]:
    """Name -> (shape, dtype name) of every tensor of the torch-style file ``path`` (a torch.save
    state_dict, a TorchScript archive, safetensors or ``.npz``), as :func:`find_rnns` sees them;
    a TorchScript archive or ``.npz`` file is listed from its headers, no data read."""
    with _opened(os.fspath(path)) as source:
        return dict(source.shapes)


def find_rnns(path: str | os.PathLike[str], *, activation: str | None = None) -> list[FoundRNN]:
    """Every ``torch.nn`` RNN and RNN cell whose state the file ``path`` holds, at any prefix,
    in the file's order; each record's ``name`` is the prefix that ``from_torch(path,
    prefix=name)`` takes (``""`` at the top level).

    Sizes come from the shapes; a group whose names or shapes are not those of one module is
    listed with ``computable=False`` and every problem. A plain ``nn.RNN``/``RNNCell`` shows
    the nonlinearity the file records (TorchScript), else ``activation`` (``"tanh"``/``"relu"``),
    else ``rnn_tanh`` with ``details["activation_known"] = False``. ``bias=False`` modules are
    computable: cuDNN's math with zero biases is theirs.
    """
    name = os.fspath(path)
    with _opened(name) as source:
        return [
            found_rnn(
                g,
                source.kind,
                source.where(g),
                recorded=source.nonlinearity(g.prefix),
                activation=activation,
            )
            for g in find_groups(source.shapes)
        ]


def read_group(
    path: str | os.PathLike[str],
    prefix: str | None = None,
    *,
    activation: str | None = None,
    owner: str = "from_torch",
) -> tuple[StateGroup, str, dict[str, torch.Tensor]]:
    """``(group, mode, tensors)`` of the RNN at ``prefix`` of the file ``path`` (the only one
    when None): its checked group, its mode (a plain RNN's from the file's record or
    ``activation``) and its tensors by the module's own names (``weight_ih_l0``, or a cell's
    ``weight_ih``), read only after every name, shape and dtype was checked.
    """
    name = os.fspath(path)
    with _opened(name) as source:
        groups = find_groups(source.shapes)
        group = select(groups, prefix, name, owner, TorchFileError, holds=source.holds)
        if group.problems:
            raise TorchFileError(
                f"{owner}: {name}: {source.where(group)} is not the state of one such module: "
                f"{listed(list(group.problems), 6)}."
            )
        mode = group.mode
        if mode is None:
            try:
                mode, known = plain_mode(
                    source.nonlinearity(group.prefix),
                    activation,
                    f"{name}: {group.describe()}",
                    owner,
                )
            except ValueError as err:
                raise TorchFileError(str(err)) from None
            if not known:
                raise TorchFileError(
                    f"{owner}: {name}: {group.describe()} is a torch.nn.{group.torch_class}, "
                    "whose state_dict does not say tanh or relu; pass activation='tanh' or "
                    "activation='relu'."
                )
        tensors = source.read(list(group.members.values()))
        return group, mode, {own: tensors[key] for own, key in group.members.items()}
