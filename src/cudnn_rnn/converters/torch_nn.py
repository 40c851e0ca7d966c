"""``torch.nn.LSTM`` / ``GRU`` / ``RNN`` (and their cells, and their state_dicts in files) <->
our layers, lossless both ways.

torch.nn computes cuDNN's math (it hands its weights to cuDNN on a GPU): the same gate order
(LSTM i, f, g(=c), o; GRU r, z(=u), n(=h)), two biases per gate (``bias_ih`` = cuDNN's ``bW``,
``bias_hh`` = ``bR``), the GRU's reset gate applied after the recurrent matmul, and LSTM projection
as ``weight_hr``. Per layer ``l`` and direction (``_reverse`` for the backward one) a module holds::

    weight_ih_l{l}  [G*H, in_l]    the G input matrices stacked, in torch's gate order
    weight_hh_l{l}  [G*H, Hout]    the G recurrent matrices
    bias_ih_l{l}    [G*H]          input biases       (absent with bias=False: zeros here)
    bias_hh_l{l}    [G*H]          recurrent biases   (absent with bias=False: zeros here)
    weight_hr_l{l}  [P, H]         LSTM projection    (proj_size > 0)

so a conversion only regroups the canonical tensors by the layout table's (layer, direction, kind)
tags and stacks gate blocks with :func:`~cudnn_rnn.core.gates.permute_gates`. Two things have no
exact counterpart:

* ``skip_input``: torch always multiplies the input by ``weight_ih_l0``. :func:`to_torch` writes
  the identity matrices that the canonical form already holds there, so the outputs are exactly
  equal (``x * 1 + 0``); the torch module then has a trainable ``weight_ih_l0`` that starts as the
  identity: lossless for inference, a different model if trained further.
  ``from_torch(module, input_mode="skip_input")`` takes such a module back (it checks the identity).
* ``num_proj == num_units``: torch requires ``proj_size < hidden_size``, so :func:`to_torch`
  refuses it.

Weights do not depend on ``batch_first``: a ``batch_first=True`` module converts like any other,
and the caller runs our layer with ``time_major=False``.

:func:`from_torch` also takes an ``nn.LSTMCell``/``GRUCell``/``RNNCell``: a cell is one
unidirectional layer, and one step of it is our layer over ``T = 1``::

    h1, c1 = cell(x, (h0, c0))                                  # x [B, I], h0, c0 [B, H]
    y, (h, c) = layer(x[None], (h0[None], c0[None]))            # y[0] == h[0] == h1, c[0] == c1

(and over ``T`` steps it is the cell stepped ``T`` times, ``y[t]`` the ``h`` after step ``t``).
It takes a state_dict (at any prefix, ``prefix=`` picking one of several) and a file's path:
torch.save files (state_dicts, and what pickles more: Lightning checkpoints, ``torch.save(model)``,
lists of state_dicts), plain pickles (``.pkl``, NumPy arrays too), TorchScript archives (all read
without importing or running anything of theirs), and safetensors or ``.npz`` files of torch
names; :func:`cudnn_rnn.io.torch.file.find_rnns` lists what a file holds, each RNN named by
its path (``state_dict.model.encoder.lstm``, ``[0].lstm``).

>>> import torch
>>> from cudnn_rnn import CudnnGRU
>>> layer = CudnnGRU(2, 4, input_size=3, direction="bidirectional", dtype=torch.float64)
>>> module = to_torch(layer)
>>> module
GRU(3, 4, num_layers=2, bidirectional=True)
>>> x = torch.randn(5, 2, 3, dtype=torch.float64)
>>> torch.allclose(module(x)[0], layer(x)[0], rtol=0, atol=1e-12)
True
>>> back = from_torch(module)
>>> torch.equal(back.opaque_kernel, layer.opaque_kernel)
True
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import Tensor, nn

from cudnn_rnn.converters.canonical import layer_canonical, layer_from_canonical
from cudnn_rnn.core.constants import (
    CUDNN_GRU,
    CUDNN_INPUT_LINEAR_MODE,
    CUDNN_LSTM,
    CUDNN_RNN_BIDIRECTION,
    CUDNN_RNN_RELU,
    CUDNN_RNN_TANH,
    CUDNN_RNN_UNIDIRECTION,
)
from cudnn_rnn.core.layout import layout_of
from cudnn_rnn.core.spec import RNNSpec, check_input_mode
from cudnn_rnn.io.files.escaping import listed, quote
from cudnn_rnn.io.files.escaping import names as quoted_names
from cudnn_rnn.io.gate_blocks import BlockKey, stack_gates, unstack_gates
from cudnn_rnn.io.torch import file as torch_file
from cudnn_rnn.io.torch.state import (
    TOP,
    TORCH_NAMES,
    find_groups,
    name_of,
    plain_mode,
    prefix_of,
    select,
    torch_name,
    torch_state_shapes,
)
from cudnn_rnn.layers import LAYER_CLASSES, _CudnnRNN

__all__ = [
    "LAYER_CLASSES",
    "TORCH_MODES",
    "TORCH_NAMES",
    "BlockKey",
    "from_torch",
    "layer_canonical",
    "layer_from_canonical",
    "stack_gates",
    "to_torch",
    "torch_state_shapes",
    "unstack_gates",
]


@dataclass(frozen=True)
class TorchMode:
    """How one of our modes is spelled in torch.nn."""

    cls: Callable[..., nn.RNNBase]
    torch_mode: str  # RNNBase.mode
    kwargs: Mapping[str, Any] = field(default_factory=dict)


#: Our mode -> the torch.nn class (and constructor arguments) that computes the same math.
TORCH_MODES: dict[str, TorchMode] = {
    CUDNN_LSTM: TorchMode(nn.LSTM, "LSTM"),
    CUDNN_GRU: TorchMode(nn.GRU, "GRU"),
    CUDNN_RNN_TANH: TorchMode(nn.RNN, "RNN_TANH", {"nonlinearity": "tanh"}),
    CUDNN_RNN_RELU: TorchMode(nn.RNN, "RNN_RELU", {"nonlinearity": "relu"}),
}
_MODE_OF_TORCH = {m.torch_mode: mode for mode, m in TORCH_MODES.items()}

# -- the converters ------------------------------------------------------------------------------


def to_torch(layer: _CudnnRNN) -> nn.RNNBase:
    """A ``torch.nn.LSTM``/``GRU``/``RNN`` computing exactly what ``layer`` computes.

    Same dtype, device, sizes, layers, direction, projection (``proj_size``), dropout and
    train/eval mode; ``batch_first=False`` (time-major, as our default). Under ``skip_input``
    ``weight_ih_l0`` holds identity matrices (see the module docstring).

    Raises TypeError for anything but our layer, RuntimeError for an unbuilt one, ValueError for
    ``num_proj == num_units`` (torch needs ``proj_size < hidden_size``).
    """
    spec, weights, biases = layer_canonical(layer, "to_torch")
    if not spec.variant.is_cudnn:
        raise ValueError(
            f"to_torch: {type(layer).__name__} computes a variant ({spec.variant.describe()}); "
            "torch.nn's RNNs compute cuDNN's four modes only, so no torch.nn module holds it."
        )
    if spec.num_proj is not None and spec.num_proj >= spec.num_units:
        raise ValueError(
            f"to_torch: {type(layer).__name__} has num_proj={spec.num_proj} == num_units="
            f"{spec.num_units}, but torch.nn.LSTM requires proj_size < hidden_size; there is no "
            "torch.nn module with this projection."
        )
    kind = TORCH_MODES[spec.mode]
    kwargs: dict[str, Any] = {"proj_size": spec.num_proj or 0} if spec.mode == CUDNN_LSTM else {}
    # torch warns about dropout with one layer, where (as here) it has no effect.
    dropout = spec.dropout if spec.num_layers > 1 else 0.0
    # Built on the meta device, so torch's own random init neither runs nor touches the global
    # RNG; every parameter is written below.
    module = kind.cls(
        spec.input_size,
        spec.num_units,
        num_layers=spec.num_layers,
        bias=True,
        batch_first=False,
        dropout=dropout,
        bidirectional=spec.bidirectional,
        device="meta",
        dtype=layer.opaque_kernel.dtype,
        **kind.kwargs,
        **kwargs,
    ).to_empty(device=layer.opaque_kernel.device)
    blocks = {torch_name(*k): v for k, v in stack_gates(spec, weights, biases, "torch").items()}
    names = {name for name, _ in module.named_parameters()}
    if names != set(blocks):  # pragma: no cover - the layout and torch agree by construction
        raise AssertionError(f"to_torch: parameters {sorted(names ^ set(blocks))} do not match")
    with torch.no_grad():
        for name, value in blocks.items():
            getattr(module, name).copy_(value)
    module.train(layer.training)
    return module


#: The torch.nn cells -> our mode (RNNCell: by its nonlinearity).
_CELL_MODES: tuple[tuple[type[nn.RNNCellBase], str | None], ...] = (
    (nn.LSTMCell, CUDNN_LSTM),
    (nn.GRUCell, CUDNN_GRU),
    (nn.RNNCell, None),
)
_RNN_TYPES = (nn.RNNBase, nn.RNNCellBase)


def from_torch(
    source: nn.Module | Mapping[str, Any] | str | os.PathLike[str],
    prefix: str | None = None,
    *,
    activation: str | None = None,
    input_mode: str = CUDNN_INPUT_LINEAR_MODE,
) -> _CudnnRNN:
    """Our layer (``CudnnLSTM``/``CudnnGRU``/``CudnnRNNTanh``/``CudnnRNNRelu``) computing exactly
    what a torch.nn RNN computes, given as any of:

    * a ``torch.nn.LSTM``/``GRU``/``RNN``: input size, hidden size, layers, direction,
      ``proj_size`` (as ``num_proj``), dropout, dtype, device and train/eval mode are carried over;
    * a ``torch.nn.LSTMCell``/``GRUCell``/``RNNCell``: one unidirectional layer, whose run over
      ``T`` steps is the cell stepped ``T`` times (one step: ``T = 1``; see the module);
    * a module holding one of those (``prefix`` names it, e.g. ``"encoder.rnn"``, when it holds
      several);
    * a state_dict (nested dicts flattened with dots), whose RNN or cell sits at ``prefix``
      (``"."``, or ``""``, for the top level; needed when it holds several);
    * the path of a file holding one: a torch.save file (a Lightning checkpoint and a pickled
      module too), a plain pickle, a TorchScript archive (none of them imports or runs anything
      of the file's), or a safetensors or ``.npz`` file of torch names; ``prefix`` is the name
      :func:`cudnn_rnn.io.torch.file.find_rnns` lists.

    Both biases are kept as they are (``bias=False`` gives zero biases: the same math). A plain
    RNN's tanh or relu comes from the module or what a file records (TorchScript, a pickled
    module); a state_dict does not say it, so ``activation="tanh"``/``"relu"`` must; a
    contradiction is refused.
    Layers from a state_dict or file are in train mode with no dropout (neither is in a
    state_dict), on the tensors' device and dtype. For a ``batch_first=True`` module call the
    layer with ``time_major=False``. ``input_mode="skip_input"`` (or ``"auto_select"``) takes
    back a module whose ``weight_ih_l0`` is identity matrices, as :func:`to_torch` writes for
    skip_input layers; a ValueError says so if it is not.

    Raises TypeError for another kind of source, ValueError for a choice that is missing or does
    not exist (the message lists what there is) or tensors that are not one module's state (a
    :class:`~cudnn_rnn.io.torch.state.TorchFileError` for a file).
    """
    owner = "from_torch"
    input_mode = check_input_mode(owner, input_mode)
    if isinstance(source, nn.Module):
        module = source if isinstance(source, _RNN_TYPES) else _submodule(source, prefix, owner)
        if module is source and prefix not in (None, "", TOP):
            raise ValueError(
                f"{owner}: prefix={quote(prefix)} picks an RNN inside a module or a state_dict; "
                f"{type(source).__name__} is one itself, so leave prefix out."
            )
        return _from_module(module, activation, input_mode, owner)
    if isinstance(source, (str, os.PathLike)):
        group, mode, tensors = torch_file.read_group(
            source, prefix, activation=activation, owner=owner
        )
        return _from_tensors(group.spec(mode, input_mode, owner), tensors, group.cell, owner)
    if isinstance(source, Mapping):
        return _from_state(source, prefix, activation, input_mode, owner)
    raise TypeError(
        f"{owner}: expected a torch.nn.LSTM, GRU, RNN, LSTMCell, GRUCell or RNNCell, a module "
        f"holding one, a state_dict or a file's path, got {type(source).__name__}."
    )


def _submodule(module: nn.Module, prefix: str | None, owner: str) -> nn.Module:
    """The RNN or cell at ``prefix`` of ``module`` (the only one when None)."""
    found = {n: m for n, m in module.named_modules() if isinstance(m, _RNN_TYPES)}
    names = quoted_names([name_of(n) for n in found], 8)
    if prefix is None:
        if len(found) == 1:
            return next(iter(found.values()))
        raise ValueError(
            f"{owner}: {type(module).__name__} holds "
            + (
                f"{len(found)} RNNs ({names}); pick one with prefix=NAME."
                if found
                else "no torch.nn LSTM, GRU, RNN or RNN cell."
            )
        )
    prefix = prefix if prefix in found else prefix_of(prefix)  # TOP: the top level
    if prefix not in found:
        there = f"it holds {names}" if found else "it holds none"
        raise ValueError(
            f"{owner}: {type(module).__name__} has no RNN or RNN cell at prefix {quote(prefix)}; "
            f"{there}."
        )
    return found[prefix]


def _from_module(
    module: nn.Module, activation: str | None, input_mode: str, owner: str
) -> _CudnnRNN:
    """The layer of a live ``nn.LSTM``/``GRU``/``RNN`` or cell."""
    what = type(module).__name__
    if isinstance(module, nn.RNNCellBase):
        mode = next((m for cls, m in _CELL_MODES if isinstance(module, cls)), "")
        if mode == "":
            raise TypeError(
                f"{owner}: expected a torch.nn.LSTMCell, GRUCell or RNNCell, got {what}."
            )
        if mode is None:
            recorded = getattr(module, "nonlinearity", None)
            mode = plain_mode(
                recorded if isinstance(recorded, str) else None, activation, what, owner
            )[0]
        spec = RNNSpec(mode, 1, module.hidden_size, module.input_size, input_mode, owner=owner)
        cell = True
    elif isinstance(module, nn.RNNBase) and module.mode in _MODE_OF_TORCH:
        mode = _MODE_OF_TORCH[module.mode]
        if mode in (CUDNN_RNN_TANH, CUDNN_RNN_RELU):
            mode = plain_mode(mode.removeprefix("rnn_"), activation, what, owner)[0]
        spec = RNNSpec(
            mode,
            module.num_layers,
            module.hidden_size,
            module.input_size,
            input_mode,
            CUDNN_RNN_BIDIRECTION if module.bidirectional else CUDNN_RNN_UNIDIRECTION,
            module.proj_size or None,
            float(module.dropout),
            owner=owner,
        )
        cell = False
    else:
        raise TypeError(
            f"{owner}: expected a torch.nn.LSTM, GRU, RNN, LSTMCell, GRUCell or RNNCell, got "
            f"{what} (mode {quote(getattr(module, 'mode', None))})."
        )
    tensors = {name: p.detach() for name, p in module.named_parameters()}
    layer = _from_tensors(spec, tensors, cell, owner)
    layer.train(module.training)
    return layer


def _from_state(
    state: Mapping[str, Any],
    prefix: str | None,
    activation: str | None,
    input_mode: str,
    owner: str,
) -> _CudnnRNN:
    """The layer of the RNN at ``prefix`` of a state_dict, checked like a file's."""
    flat = torch_file.flatten_state(state)
    shapes = {n: (tuple(t.shape), torch_file.dtype_name(t)) for n, t in flat.items()}
    group = select(find_groups(shapes), prefix, "the state_dict", owner)
    if group.problems:
        raise ValueError(
            f"{owner}: {group.describe()} is not the state of one such module: "
            f"{listed(list(group.problems), 6)}."
        )
    mode = group.mode
    if mode is None:
        mode, known = plain_mode(None, activation, group.describe(), owner)
        if not known:
            raise ValueError(
                f"{owner}: {group.describe()} is a torch.nn.{group.torch_class}, whose "
                "state_dict does not say tanh or relu; pass activation='tanh' or "
                "activation='relu'."
            )
    tensors = {own: flat[key] for own, key in group.members.items()}
    return _from_tensors(group.spec(mode, input_mode, owner), tensors, group.cell, owner)


def _from_tensors(
    spec: RNNSpec, tensors: Mapping[str, Tensor], cell: bool, owner: str
) -> _CudnnRNN:
    """A layer of ``spec`` from a module's tensors by its own names (``weight_ih_l0``, or a
    cell's ``weight_ih``; biases absent: zeros), on the device and dtype of ``weight_hh``."""
    ref = tensors[torch_name(0, 0, "recurrent", cell=cell)]
    blocks: dict[BlockKey, Tensor] = {}
    for p in (*layout_of(spec).weights, *layout_of(spec).biases):
        key = (p.layer, p.direction, p.kind)
        if key in blocks:
            continue
        value = tensors.get(torch_name(*key, cell=cell))
        # bias=False: torch adds no bias at all, which is a zero bias here.
        blocks[key] = (
            value.detach()
            if value is not None
            else torch.zeros(ref.shape[0], dtype=ref.dtype, device=ref.device)
        )
    weights, biases = unstack_gates(spec, blocks, "torch")
    return layer_from_canonical(
        spec, weights, biases, dtype=ref.dtype, device=ref.device, owner=owner
    )
