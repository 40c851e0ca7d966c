"""Stacks of compatible cells and their checkpoint names.

TF1 documents how to run a ``CudnnLSTM`` model without cuDNN: save it, then restore the
checkpoint into ``MultiRNNCell([CudnnCompatibleLSTMCell(H) ...])`` run by ``dynamic_rnn`` (or
into the cells of ``stack_bidirectional_dynamic_rnn`` for a bidirectional model). The stacks here
own their cells and give their variables TF's full names (the ``Checkpointable`` protocol of
:mod:`cudnn_rnn.checkpointable`; the names are built by :mod:`cudnn_rnn.core.tf_names`)::

    [<scope>/]rnn/multi_rnn_cell/cell_<l>/<cell scope>/<variable>                    MultiRNNCell
    [<scope>/]stack_bidirectional_rnn/cell_<l>/bidirectional_rnn/{fw,bw}/<cell scope>/<variable>
                                                                              BidirectionalStack

with ``<cell scope>`` a cell's ``scope_name`` (``cudnn_compatible_lstm_cell``,
``cudnn_compatible_gru_cell``, ``basic_rnn_cell``), and all kernels listed before all biases, as
TF's saveables write them.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import torch
from torch import Tensor, nn

from cudnn_rnn.cells.compatible import State, StateSize, _Cell, _describe, _RNNCell, _Var
from cudnn_rnn.cells.drivers import _check_same_depth, stack_bidirectional_dynamic_rnn
from cudnn_rnn.checkpointable import Shape
from cudnn_rnn.core import tf_names

__all__ = ["BidirectionalStack", "MultiRNNCell"]


def _check_scope(owner: str, scope: object) -> str | None:
    if scope is None or scope == "":
        return None
    if not isinstance(scope, str):
        raise TypeError(f"{owner}: scope must be a str or None, got {_describe(scope)}.")
    return scope


def _check_cells(owner: str, name: str, cells: object) -> list[_Cell]:
    if isinstance(cells, (_Cell, MultiRNNCell)) or not isinstance(cells, Sequence):
        raise TypeError(f"{owner}: {name} must be a list of cells, got {_describe(cells)}.")
    if not cells:
        raise ValueError(f"{owner}: {name} must hold at least one cell, got an empty list.")
    for i, cell in enumerate(cells):
        if not isinstance(cell, _Cell):
            raise TypeError(
                f"{owner}: {name}[{i}] must be a CudnnCompatibleLSTMCell, CudnnCompatibleGRUCell "
                f"or BasicRNNCell, got {type(cell).__name__}."
            )
    return list(cells)


def _check_distinct(owner: str, cells: Sequence[_Cell]) -> None:
    # A cell listed twice would save its variables under two names and restore them twice.
    if len({id(c) for c in cells}) != len(cells):
        raise ValueError(
            f"{owner}: the same cell object appears more than once; every layer (and direction) "
            "needs its own cell."
        )


class _CellStack(nn.Module):
    """The Checkpointable protocol for a stack of cells, from ``_named_cells``."""

    _scope: str | None

    def _named_cells(self) -> list[tuple[str, _Cell, int | None]]:
        """(full variable prefix, cell, input depth that the stack implies or None), in order."""
        raise NotImplementedError

    @property
    def built(self) -> bool:
        return all(cell.built for _, cell, _ in self._named_cells())

    def _ordered(self, value: Callable[[str, _Cell, int | None, _Var], Any]) -> dict[str, Any]:
        # TF's saveables list every kernel of every cell, then every bias.
        named = self._named_cells()
        return {
            f"{prefix}/{var.name}": value(prefix, cell, depth, var)
            for kernels in (True, False)
            for prefix, cell, depth in named
            for var in cell._variables
            if var.is_kernel == kernels
        }

    def checkpoint_entries(self) -> dict[str, Tensor]:
        """Full TF name -> detached variable (no copy), all kernels first, then all biases."""
        owner = type(self).__name__
        for prefix, cell, _ in self._named_cells():
            if not cell.built:
                raise RuntimeError(
                    f"{owner}: {prefix} has no variables yet (its input depth is known only on "
                    "the first call); run the model once or call build(input_depth) before "
                    "saving."
                )
        return self._ordered(lambda _p, cell, _d, var: cell._param(var.name).detach())

    def checkpoint_shapes(self) -> dict[str, Shape]:
        """Full TF name -> shape; None for the input depth of an unbuilt first layer."""
        return self._ordered(lambda _p, cell, depth, var: cell.tf_variable_shapes(depth)[var.name])

    def checkpoint_load(self, tensors: Mapping[str, Tensor]) -> None:
        """Copy the tensors in place; builds unbuilt cells from the stored shapes first.

        Everything is checked before anything changes, so a failed load leaves the model as it
        was.
        """
        owner = f"{type(self).__name__}.checkpoint_load"
        expected = self.checkpoint_shapes()
        missing = [n for n in expected if n not in tensors]
        unexpected = [n for n in tensors if n not in expected]
        misshapen = [
            f"{n} {tuple(tensors[n].shape)} (expected {expected[n]})"
            for n in expected
            if n in tensors
            and (
                len(expected[n]) != tensors[n].dim()
                or any(e is not None and e != s for e, s in zip(expected[n], tensors[n].shape))
            )
        ]
        if missing or unexpected or misshapen:
            problems = [
                f"{label}: {', '.join(items)}"
                for label, items in (
                    ("missing", missing),
                    ("unexpected", unexpected),
                    ("misshapen", misshapen),
                )
                if items
            ]
            raise ValueError(f"{owner}: the tensors do not fit this model; {'; '.join(problems)}.")
        plan = []
        for prefix, cell, _ in self._named_cells():
            shapes = {v.name: tuple(tensors[f"{prefix}/{v.name}"].shape) for v in cell._variables}
            plan.append((prefix, cell, cell._input_depth_from(owner, prefix, shapes)))
        for prefix, cell, depth in plan:
            cell._build(depth, cell.device)
            with torch.no_grad():
                for name, param in cell.tf_variables().items():
                    param.copy_(tensors[f"{prefix}/{name}"])


class MultiRNNCell(_CellStack, _RNNCell):
    """TF's ``MultiRNNCell``: cells stacked in depth, each layer's output the next one's input.

    The state is a tuple with one entry per cell. With :func:`dynamic_rnn` this is the model
    that restores a unidirectional cuDNN checkpoint; ``scope`` is the variable scope that was
    current around ``dynamic_rnn`` (names start with ``<scope>/rnn/``, or ``rnn/`` without one).
    Each cell computes its own equations (see its class); layer ``k``'s output is layer
    ``k + 1``'s input.

    Inputs:
        ``inputs, state``: ``inputs`` ``(B, I)``, one step of a batch of ``B``; ``state`` a
        tuple with one state per cell, each as that cell takes it (``LSTMStateTuple(c, h)``
        of ``(B, H_k)`` tensors, or one ``(B, H_k)``); zeros: :meth:`zero_state`.

    Outputs:
        ``output, state``: the last cell's output ``(B, H_last)`` and the tuple of the cells'
        next states.

    Example:

    >>> import torch
    >>> from cudnn_rnn.cells import CudnnCompatibleLSTMCell
    >>> stack = MultiRNNCell([CudnnCompatibleLSTMCell(4), CudnnCompatibleLSTMCell(4)])
    >>> out, state = stack(torch.ones(2, 3), stack.zero_state(2))
    >>> tuple(out.shape), len(state), stack.state_size[1]
    ((2, 4), 2, LSTMStateTuple(c=4, h=4))
    >>> for name in list(stack.checkpoint_entries())[:3]:
    ...     print(name)
    rnn/multi_rnn_cell/cell_0/cudnn_compatible_lstm_cell/kernel
    rnn/multi_rnn_cell/cell_1/cudnn_compatible_lstm_cell/kernel
    rnn/multi_rnn_cell/cell_0/cudnn_compatible_lstm_cell/bias
    """

    def __init__(
        self,
        cells: Sequence[_Cell],
        state_is_tuple: bool = True,
        *,
        scope: str | None = None,
    ) -> None:
        """Stack ``cells`` in depth.

        Args:
            cells: the cells, first layer first: a non-empty list of
                ``CudnnCompatibleLSTMCell``, ``CudnnCompatibleGRUCell`` or ``BasicRNNCell``
                objects, each listed once (every layer owns its variables); modes and sizes
                may differ.
            state_is_tuple: TF's flag; only True (the default, TF's too) is supported: the state
                is a tuple with one entry per cell.
            scope: (keyword) the variable scope that was current around ``dynamic_rnn``:
                names start with ``<scope>/rnn/multi_rnn_cell/cell_<i>/``. Default None (or
                ``""``): ``rnn/multi_rnn_cell/...``.

        Raises:
            TypeError: ``cells`` that is not a list of those cells (a single cell or a
                ``MultiRNNCell`` included), a ``scope`` that is not a str.
            ValueError: an empty ``cells``, a cell listed twice, ``state_is_tuple=False``.
        """
        super().__init__()
        owner = "MultiRNNCell"
        if not state_is_tuple:
            raise ValueError(
                f"{owner}: state_is_tuple=False (all states concatenated into one tensor) is not "
                "supported; the state is a tuple with one entry per cell, so pass "
                "state_is_tuple=True."
            )
        layers = _check_cells(owner, "cells", cells)
        _check_distinct(owner, layers)
        self.cells = nn.ModuleList(layers)
        self._layers = tuple(layers)  # typed view of the same modules
        self._scope = _check_scope(owner, scope)

    @property
    def scope(self) -> str | None:
        return self._scope

    @property
    def state_size(self) -> tuple[StateSize, ...]:
        return tuple(cell.state_size for cell in self._layers)

    @property
    def output_size(self) -> int:
        return self._layers[-1].output_size

    def zero_state(
        self,
        batch_size: int,
        dtype: torch.dtype | None = None,
        *,
        device: torch.device | str | None = None,
    ) -> tuple[State, ...]:
        return tuple(cell.zero_state(batch_size, dtype, device=device) for cell in self._layers)

    def build(self, input_depth: int) -> None:
        """Build every cell: the first for ``input_depth``, the others for their input."""
        for cell in self._layers:
            cell.build(input_depth)
            input_depth = cell.output_size

    def _check_state(self, state: object) -> Sequence[State]:
        if not isinstance(state, (tuple, list)) or len(state) != len(self._layers):
            raise ValueError(
                f"MultiRNNCell: state must be a tuple with one entry per cell "
                f"({len(self._layers)}), got {_describe(state)}."
            )
        return state

    def forward(self, inputs: Tensor, state: State) -> tuple[Tensor, tuple[State, ...]]:
        output, new_state = inputs, []
        for cell, layer_state in zip(self._layers, self._check_state(state)):
            output, s = cell(output, layer_state)
            new_state.append(s)
        return output, tuple(new_state)

    if TYPE_CHECKING:  # torch types Module.__call__ as returning Any; calling it is forward
        __call__ = forward

    def _depth_layers(self, state: State) -> tuple[Sequence[_Cell], Sequence[State]]:
        return self._layers, self._check_state(state)

    def _final_state(self, finals: Sequence[State]) -> State:
        return tuple(finals)

    def _named_cells(self) -> list[tuple[str, _Cell, int | None]]:
        out: list[tuple[str, _Cell, int | None]] = []
        depth: int | None = None  # the first layer's depth comes from its inputs (or the file)
        for layer, cell in enumerate(self._layers):
            prefix = tf_names.cell_scope(layer, cell.scope_name, scope=self._scope)
            out.append((prefix, cell, depth))
            depth = cell.output_size
        return out

    def checkpoint_spec(self) -> dict[str, Any]:
        return {
            "kind": "multi_rnn_cell",
            "scope": self._scope,
            "cells": [cell._spec() for cell in self._layers],
        }


class BidirectionalStack(_CellStack):
    """TF's ``stack_bidirectional_dynamic_rnn`` as a module: forward and backward cells per layer.

    ``forward`` is :func:`stack_bidirectional_dynamic_rnn` over the two lists; this module owns
    the cells and their checkpoint names (``[<scope>/]stack_bidirectional_rnn/...``), which
    restore a bidirectional cuDNN checkpoint. Each layer runs its forward cell over the
    sequence and its backward cell over it reversed, and concatenates their outputs, which
    the next layer takes.

    Inputs:
        ``inputs, initial_states_fw=None, initial_states_bw=None, sequence_length=None,
        time_major=False``: ``inputs`` ``(B, T, I)`` (``(T, B, I)`` with
        ``time_major=True``); the initial states, one per layer (each as its cell takes it,
        zeros when None); ``sequence_length`` ``(B,)`` ints in ``[1, T]``.

    Outputs:
        ``outputs, states_fw, states_bw``: ``outputs`` ``(B, T, H_fw + H_bw)`` of the last
        layer (``(T, B, ...)`` with ``time_major=True``); the final states of each layer's
        forward and backward cell.

    Example:

    >>> import torch
    >>> from cudnn_rnn.cells import BasicRNNCell
    >>> stack = BidirectionalStack([BasicRNNCell(2)], [BasicRNNCell(2)])
    >>> out, fw, bw = stack(torch.ones(3, 5, 4))  # [B, T, I], time_major=False as in TF
    >>> tuple(out.shape), tuple(fw[0].shape)
    ((3, 5, 4), (3, 2))
    >>> list(stack.checkpoint_shapes().items())[1]
    ('stack_bidirectional_rnn/cell_0/bidirectional_rnn/bw/basic_rnn_cell/kernel', (6, 2))
    """

    def __init__(
        self,
        cells_fw: Sequence[_Cell],
        cells_bw: Sequence[_Cell],
        *,
        scope: str | None = None,
    ) -> None:
        """Pair ``cells_fw[i]`` and ``cells_bw[i]`` as layer ``i``.

        Args:
            cells_fw: the forward cells, first layer first: a non-empty list of
                ``CudnnCompatibleLSTMCell``, ``CudnnCompatibleGRUCell`` or ``BasicRNNCell``
                objects.
            cells_bw: the backward cells, as many as ``cells_fw``; no cell object may appear
                twice in the two lists (every layer and direction owns its variables).
            scope: (keyword) the variable scope that was current around
                ``stack_bidirectional_dynamic_rnn``: names start with
                ``<scope>/stack_bidirectional_rnn/cell_<i>/bidirectional_rnn/{fw,bw}/``.
                Default None (or ``""``): ``stack_bidirectional_rnn/...``.

        Raises:
            TypeError: a list that is not a list of those cells (a single cell included), a
                ``scope`` that is not a str.
            ValueError: an empty list, lists of different lengths, a cell listed twice.
        """
        super().__init__()
        owner = "BidirectionalStack"
        fw = _check_cells(owner, "cells_fw", cells_fw)
        bw = _check_cells(owner, "cells_bw", cells_bw)
        _check_same_depth(owner, len(fw), len(bw))
        _check_distinct(owner, fw + bw)
        self.cells_fw = nn.ModuleList(fw)
        self.cells_bw = nn.ModuleList(bw)
        self._fw, self._bw = tuple(fw), tuple(bw)  # typed views of the same modules
        self._scope = _check_scope(owner, scope)

    @property
    def scope(self) -> str | None:
        return self._scope

    @property
    def output_size(self) -> int:
        return self._fw[-1].output_size + self._bw[-1].output_size

    def build(self, input_depth: int) -> None:
        """Build every cell: layer 0 for ``input_depth``, later layers for ``fw + bw`` outputs."""
        for fw, bw in zip(self._fw, self._bw):
            fw.build(input_depth)
            bw.build(input_depth)
            input_depth = fw.output_size + bw.output_size

    def forward(
        self,
        inputs: Tensor,
        initial_states_fw: Sequence[State | None] | None = None,
        initial_states_bw: Sequence[State | None] | None = None,
        sequence_length: Any = None,
        time_major: bool = False,
    ) -> tuple[Tensor, tuple[State, ...], tuple[State, ...]]:
        return stack_bidirectional_dynamic_rnn(
            self._fw,
            self._bw,
            inputs,
            initial_states_fw,
            initial_states_bw,
            sequence_length,
            time_major,
        )

    if TYPE_CHECKING:  # torch types Module.__call__ as returning Any; calling it is forward
        __call__ = forward

    def _named_cells(self) -> list[tuple[str, _Cell, int | None]]:
        out: list[tuple[str, _Cell, int | None]] = []
        depth: int | None = None
        for layer, pair in enumerate(zip(self._fw, self._bw)):
            for direction, cell in zip(tf_names.DIRECTIONS, pair):
                prefix = tf_names.cell_scope(
                    layer, cell.scope_name, direction=direction, scope=self._scope
                )
                out.append((prefix, cell, depth))
            depth = sum(cell.output_size for cell in pair)
        return out

    def checkpoint_spec(self) -> dict[str, Any]:
        return {
            "kind": "stack_bidirectional_rnn",
            "scope": self._scope,
            "cells_fw": [cell._spec() for cell in self._fw],
            "cells_bw": [cell._spec() for cell in self._bw],
        }
