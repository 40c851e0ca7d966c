"""TF's drivers: ``dynamic_rnn`` and ``stack_bidirectional_dynamic_rnn`` over compatible cells.

They run a cell (or a ``MultiRNNCell``) over a sequence, as TF's do, with variable lengths. They
run the cells' equations through the fused operator (:func:`cudnn_rnn.operator.rnn`, so the
engine its rule table picks: native on CPU, cuDNN on CUDA) rather than a Python loop over time
wherever the math allows: for the three classes themselves (a subclass may override ``forward``)
with variables and states in the inputs' dtype and on their device, consecutive layers of one
mode and one ``num_units`` are one call, and a bidirectional layer with two such cells is one
bidirectional layer of it. The opaque buffer is made from the TF variables on every call by one
differentiable concatenation (after slicing, transposes and gate reordering), so gradients reach
the same parameters; the engine then uses it as it is. Everything else runs step by step
(``_run_loop``). Both paths check the same things first and give the same results up to float
rounding.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from typing import Any, NamedTuple, TypeAlias, TypeGuard

import torch
from torch import Tensor

from cudnn_rnn.cells.compatible import (
    BasicRNNCell,
    CudnnCompatibleGRUCell,
    CudnnCompatibleLSTMCell,
    LSTMStateTuple,
    State,
    _Cell,
    _describe,
    _RNNCell,
)
from cudnn_rnn.core import tf_names
from cudnn_rnn.core.constants import (
    CUDNN_GRU,
    CUDNN_LSTM,
    CUDNN_RNN_BIDIRECTION,
    CUDNN_RNN_UNIDIRECTION,
)
from cudnn_rnn.core.gates import GATE_ORDERS, permute_gates
from cudnn_rnn.core.layout import layout_of
from cudnn_rnn.core.spec import RNNSpec
from cudnn_rnn.engines.common import reverse_within
from cudnn_rnn.operator import rnn
from cudnn_rnn.validation import check_lengths

__all__ = ["dynamic_rnn", "stack_bidirectional_dynamic_rnn"]


#: What the drivers run: one cell or a MultiRNNCell.
AnyCell: TypeAlias = _RNNCell


def _check_cell(owner: str, name: str, cell: object) -> AnyCell:
    if not isinstance(cell, _RNNCell):
        raise TypeError(
            f"{owner}: {name} must be a CudnnCompatibleLSTMCell, CudnnCompatibleGRUCell, "
            f"BasicRNNCell or MultiRNNCell, got {type(cell).__name__}."
        )
    return cell


def _check_cell_lists(
    owner: str, cells_fw: object, cells_bw: object
) -> tuple[list[AnyCell], list[AnyCell]]:
    lists = []
    for name, cells in (("cells_fw", cells_fw), ("cells_bw", cells_bw)):
        if isinstance(cells, _RNNCell) or not isinstance(cells, Sequence):
            raise TypeError(f"{owner}: {name} must be a list of cells, got {_describe(cells)}.")
        if not cells:
            raise ValueError(f"{owner}: {name} must hold at least one cell, got an empty list.")
        lists.append([_check_cell(owner, f"{name}[{i}]", c) for i, c in enumerate(cells)])
    _check_same_depth(owner, len(lists[0]), len(lists[1]))
    return lists[0], lists[1]


def _check_same_depth(owner: str, num_fw: int, num_bw: int) -> None:
    if num_fw != num_bw:
        raise ValueError(
            f"{owner}: cells_fw and cells_bw must have the same number of layers, got "
            f"{num_fw} and {num_bw}."
        )


def _check_sequences(
    owner: str, inputs: object, sequence_length: Any, time_major: object
) -> tuple[Tensor, Tensor | None]:
    """Time-major inputs ``[T, B, I]`` and lengths (a CPU int64 tensor ``[B]``) or None."""
    if not isinstance(time_major, bool):
        raise TypeError(f"{owner}: time_major must be a bool, got {_describe(time_major)}.")
    if not isinstance(inputs, Tensor):
        raise TypeError(f"{owner}: inputs must be a torch.Tensor, got {_describe(inputs)}.")
    layout = "[time, batch, depth]" if time_major else "[batch, time, depth]"
    if inputs.dim() != 3 or 0 in inputs.shape:
        raise ValueError(
            f"{owner}: inputs must be a 3-D tensor {layout} (time_major={time_major}) with at "
            f"least one step, one sequence and one feature, got shape {tuple(inputs.shape)}."
        )
    x = inputs if time_major else inputs.transpose(0, 1)
    steps, batch = int(x.shape[0]), int(x.shape[1])
    if sequence_length is None:
        return x, None
    return x, check_lengths(owner, "sequence_length", sequence_length, steps, batch)


def _check_initial_states(owner: str, name: str, states: object, layers: int) -> list[State | None]:
    if states is None:
        return [None] * layers
    if not isinstance(states, (tuple, list)) or len(states) != layers:
        raise ValueError(
            f"{owner}: {name} must be None or a list with one state (or None) per layer "
            f"({layers}), got {_describe(states)}."
        )
    return list(states)


def _run(
    cell: AnyCell, x: Tensor, state: State, lengths: Tensor | None, cpu_lengths: Tensor | None
) -> tuple[Tensor, State]:
    """Run ``cell`` over time-major ``x``: the fused kernel where the cells allow, else the loop.

    ``lengths`` on the inputs' device (for the loop), ``cpu_lengths`` the same on the CPU (for
    the kernel). Returns time-major outputs and the final state, structured as the loop's.
    """
    layers = _fused_stack(cell, x, state)
    if layers is None:
        return _run_loop(cell, x, state, lengths)
    outputs, finals = _run_fused([(f,) for f in layers], x, cpu_lengths)
    return outputs, cell._final_state(finals)


def _run_loop(
    cell: AnyCell, x: Tensor, state: State, lengths: Tensor | None
) -> tuple[Tensor, State]:
    """Run ``cell`` step by step over time-major ``x``; time-major outputs and the final state."""
    steps = int(x.shape[0])
    outputs: list[Tensor] = []
    if lengths is None:
        for t in range(steps):
            out, state = cell(x[t], state)
            outputs.append(out)
        return torch.stack(outputs), state
    active = torch.arange(steps, device=x.device)[:, None] < lengths[None, :]  # [T, B]
    # Past the longest sequence nothing changes, so those steps are not run at all.
    for t in range(int(lengths.max())):
        out, new_state = cell(x[t], state)
        mask = active[t].unsqueeze(1)
        # Padded steps output exactly 0 and keep the state of the sequence's last step.
        outputs.append(out.masked_fill(~mask, 0.0))
        state = _select(mask, new_state, state)
    outputs.extend([torch.zeros_like(outputs[0])] * (steps - len(outputs)))
    return torch.stack(outputs), state


def _select(active: Tensor, new: State, old: State) -> State:
    """``new`` where ``active`` (``[B, 1]``), else ``old``, through any state structure."""
    if isinstance(new, Tensor):
        assert isinstance(old, Tensor)  # the cell has checked the structure of ``old``
        return torch.where(active, new, old)
    parts = [_select(active, n, o) for n, o in zip(new, old)]
    return LSTMStateTuple(*parts) if isinstance(new, LSTMStateTuple) else tuple(parts)


# -- the fused path -----------------------------------------------------------------------------

#: The cells whose step is one layer of torch's fused kernel. Exact classes only: a subclass may
#: override ``forward``, so it runs step by step.
_FUSABLE: tuple[type[_Cell], ...] = (CudnnCompatibleLSTMCell, CudnnCompatibleGRUCell, BasicRNNCell)


class _Fused(NamedTuple):
    """A cell checked as its first step checks it, with its initial state tensors."""

    cell: _Cell
    h: Tensor
    c: Tensor | None  # LSTM only

    @property
    def key(self) -> tuple[str, int]:
        """Consecutive layers with one key share an operator call (each reads the last one's h)."""
        return self.cell.rnn_mode, self.cell.num_units


def _fusable(cell: object) -> TypeGuard[_Cell]:
    return type(cell) in _FUSABLE


def _check_fused(cell: _Cell, inputs: Tensor, state: State) -> _Fused | None:
    """The checks of ``cell``'s first step (they build it); None where the kernel cannot serve.

    The kernel needs the variables and the states in the inputs' dtype and on their device; the
    loop type-promotes or raises otherwise, so such cells stay with it. So do cells under
    autocast, which would run the whole kernel in the lower precision where the loop mixes them.
    """
    x, states = cell._check_call(inputs, state)
    tensors = (*states, *cell.tf_variables().values())
    if _autocast(x.device) or any(t.dtype != x.dtype or t.device != x.device for t in tensors):
        return None
    return _Fused(cell, states[-1], states[0] if cell.rnn_mode == CUDNN_LSTM else None)


def _autocast(device: torch.device) -> bool:
    try:
        return torch.is_autocast_enabled(device.type)
    except TypeError:  # torch < 2.4 has one switch for CUDA and one for the CPU
        if device.type == "cpu":
            return bool(torch.is_autocast_cpu_enabled())
        return torch.is_autocast_enabled()


def _fused_stack(cell: AnyCell, x: Tensor, state: State) -> list[_Fused] | None:
    """The layers of ``cell`` checked for the kernel in the loop's order, or None for the loop."""
    cells, states = cell._depth_layers(state)
    if not all(_fusable(c) for c in cells):
        return None
    checked = []
    inputs = x[0]  # what the first step gives the first layer
    for layer, layer_state in zip(cells, states):
        fused = _check_fused(layer, inputs, layer_state)
        if fused is None:
            return None
        checked.append(fused)
        inputs = inputs.new_empty(inputs.shape[0], layer.output_size)  # ... and the next layer
    return checked


def _fused_pair(
    cell_fw: AnyCell, cell_bw: AnyCell, inputs: Tensor, state_fw: State, state_bw: State
) -> tuple[_Fused, _Fused] | None:
    """A bidirectional layer as one layer of the bidirectional kernel, or None.

    It needs both cells of one exact class, mode and ``num_units`` (the kernel has one width).
    """
    if not (
        _fusable(cell_fw)
        and _fusable(cell_bw)
        and cell_fw.rnn_mode == cell_bw.rnn_mode
        and cell_fw.num_units == cell_bw.num_units
    ):
        return None
    fw = _check_fused(cell_fw, inputs, state_fw)
    bw = _check_fused(cell_bw, inputs, state_bw) if fw is not None else None
    return None if fw is None or bw is None else (fw, bw)


def _run_fused(
    layers: Sequence[tuple[_Fused, ...]], x: Tensor, cpu_lengths: Tensor | None
) -> tuple[Tensor, list[State]]:
    """Run checked layers, each ``(cell,)`` or ``(fw, bw)``, over time-major ``x``.

    Consecutive layers with one key are one call of the operator. Returns the outputs
    ``[T, B, D*H]`` and the final states layer by layer (forward before backward), structured as
    the cells' states.
    """
    finals: list[State] = []
    for _, run in itertools.groupby(layers, key=lambda layer: layer[0].key):
        group = list(run)
        flat = [f for layer in group for f in layer]  # the kernel's order: layer-major, fw, bw
        first = flat[0].cell
        spec = RNNSpec(
            first.rnn_mode,
            len(group),
            first.num_units,
            int(x.shape[-1]),
            direction=CUDNN_RNN_BIDIRECTION if len(group[0]) == 2 else CUDNN_RNN_UNIDIRECTION,
        )
        layout = layout_of(spec)
        kernel = [w for f in flat for w in _kernel_weights(f.cell)]
        # One differentiable concatenation into the opaque buffer, which the engine uses as it
        # is (on CUDA cuDNN's own buffer: no second copy of the weights).
        params = torch.cat([kernel[i].reshape(-1) for i in layout.kernel_order])
        h0 = torch.stack([f.h for f in flat])
        c0 = (
            torch.stack([f.c for f in flat if f.c is not None]) if spec.mode == CUDNN_LSTM else None
        )
        x, h_n, c_n = rnn(
            spec, params, x, h0, c0, cpu_lengths, training=False, seed=0, dropout_step=None
        )
        finals += [
            h_n[k] if c_n is None else LSTMStateTuple(c_n[k], h_n[k]) for k in range(len(flat))
        ]
    return x, finals


def _kernel_weights(cell: _Cell) -> list[Tensor]:
    """``[w_ih, w_hh, b_ih, b_hh]`` of a built cell for torch's kernel (cuDNN's gate order).

    Made from the TF variables by concatenation, gate reordering, slicing and transposes, so the
    gradients reach the cell's parameters. The cell sums its input and recurrent products, so its
    one bias is ``b_ih`` and ``b_hh`` is 0 -- except the GRU candidate's hidden bias, which sits
    inside the reset product and so is cuDNN's ``b_Rh`` itself.
    """
    mode, param, units = cell.rnn_mode, cell._param, cell.num_units
    order = GATE_ORDERS["tf"][mode]
    if mode == CUDNN_GRU:
        # gates/kernel holds r and u; the candidate's two projections, stacked [K_in; K_hid], are
        # its column block of a kernel acting on [x, h'].
        n = tf_names
        candidate = tuple(g for g in GATE_ORDERS["cudnn"][mode] if g not in order)
        projections = torch.cat([param(n.CANDIDATE_INPUT_KERNEL), param(n.CANDIDATE_HIDDEN_KERNEL)])
        kernel = torch.cat([param(n.GATES_KERNEL), projections], dim=1)
        bias = torch.cat([param(n.GATES_BIAS), param(n.CANDIDATE_INPUT_BIAS)])
        hidden_bias = torch.cat(
            [bias.new_zeros(len(order) * units), param(n.CANDIDATE_HIDDEN_BIAS)]
        )
        order = order + candidate
    else:
        kernel, bias = param(tf_names.KERNEL), param(tf_names.BIAS)
        hidden_bias = torch.zeros_like(bias)
    kernel = _to_cudnn(kernel, order, mode, axis=1)
    depth = cell.input_depth
    return [
        kernel[:depth].t(),
        kernel[depth:].t(),
        _to_cudnn(bias, order, mode),
        _to_cudnn(hidden_bias, order, mode),
    ]


def _to_cudnn(t: Tensor, order: tuple[str, ...], mode: str, axis: int = 0) -> Tensor:
    cudnn = GATE_ORDERS["cudnn"][mode]
    return t if order == cudnn else permute_gates(t, order, cudnn, axis)


def dynamic_rnn(
    cell: AnyCell,
    inputs: Tensor,
    initial_state: State | None = None,
    sequence_length: Any = None,
    time_major: bool = False,
) -> tuple[Tensor, State]:
    """TF's ``tf.nn.dynamic_rnn``: run ``cell`` over a sequence, one step at a time.

    ``inputs`` is batch-major ``[B, T, I]`` by default, as in TF (``[T, B, I]`` with
    ``time_major=True``, the layout of the fused layers); the outputs ``[B, T, H]`` have the same
    layout. ``initial_state`` defaults to ``cell.zero_state(B, inputs.dtype)``.
    ``sequence_length`` (``[B]`` integers in ``[1, T]``): outputs at ``t >= length`` are exactly
    0 and the final state is the one after step ``length - 1``. Returns ``(outputs,
    final_state)``. Unlike TF, ``sequence_length`` comes after ``initial_state`` when passed by
    position, and TF's ``dtype``, ``parallel_iterations``, ``swap_memory`` and ``scope`` are
    not taken (the zero state has the inputs' dtype; ``MultiRNNCell(scope=...)`` names the
    variables).

    A cell of the three classes themselves (not a subclass), or a ``MultiRNNCell`` of them, runs
    on torch's fused kernel instead of a Python loop over time: consecutive layers with one mode
    and one ``num_units`` are one operator call. The first step's checks run first, with the same
    errors; variables or states in another dtype or on another device than the inputs, and any
    other cell, take the step-by-step loop. Both give the same results up to float rounding.

    >>> import torch
    >>> from cudnn_rnn.cells import MultiRNNCell
    >>> cell = MultiRNNCell([CudnnCompatibleGRUCell(3)])
    >>> out, (h,) = dynamic_rnn(cell, torch.ones(2, 4, 5), sequence_length=[4, 2])  # [B, T, I]
    >>> tuple(out.shape), bool((out[1, 2:] == 0).all()), bool((h[1] == out[1, 1]).all())
    ((2, 4, 3), True, True)
    >>> out, (h,) = dynamic_rnn(cell, torch.ones(4, 2, 5), time_major=True)  # [T, B, I]
    >>> tuple(out.shape), bool((h == out[-1]).all())
    ((4, 2, 3), True)
    """
    owner = "dynamic_rnn"
    cell = _check_cell(owner, "cell", cell)
    x, cpu_lengths = _check_sequences(owner, inputs, sequence_length, time_major)
    lengths = None if cpu_lengths is None else cpu_lengths.to(x.device)
    state = initial_state
    if state is None:
        state = cell.zero_state(int(x.shape[1]), x.dtype, device=x.device)
    outputs, final = _run(cell, x, state, lengths, cpu_lengths)
    return (outputs if time_major else outputs.transpose(0, 1)), final


def stack_bidirectional_dynamic_rnn(
    cells_fw: Sequence[AnyCell],
    cells_bw: Sequence[AnyCell],
    inputs: Tensor,
    initial_states_fw: Sequence[State | None] | None = None,
    initial_states_bw: Sequence[State | None] | None = None,
    sequence_length: Any = None,
    time_major: bool = False,
) -> tuple[Tensor, tuple[State, ...], tuple[State, ...]]:
    """TF's ``stack_bidirectional_dynamic_rnn``: bidirectional layers, each feeding the next.

    Per layer ``l``: the forward cell runs over the layer input; the backward cell runs over each
    sequence reversed within its length (``t -> length-1-t``), and its outputs are reversed
    back; the layer output is ``concat([fw, bw], -1)`` (``[B, T, H_fw + H_bw]``, or ``[T, B,
    H_fw + H_bw]`` with ``time_major=True``). Returns ``(outputs, output_states_fw,
    output_states_bw)``, the states a tuple with one final state per layer. Other arguments as
    in :func:`dynamic_rnn` (batch-major by default, as in TF); ``initial_states_*`` hold one
    state (or None for zeros) per layer. Unlike TF, ``sequence_length`` is the sixth argument
    (TF's is ``dtype``, which is not taken, with ``parallel_iterations``, ``swap_memory`` and
    ``scope``).

    Fused as in :func:`dynamic_rnn`: a layer whose two cells have one class, mode and
    ``num_units`` is a layer of torch's bidirectional kernel (whose backward direction starts
    at each sequence's last valid step, as here), and consecutive such layers of one mode and
    width are one call; another layer runs each direction through :func:`dynamic_rnn`'s path.

    >>> import torch
    >>> fw, bw = [CudnnCompatibleLSTMCell(2)], [CudnnCompatibleLSTMCell(3)]
    >>> out, states_fw, states_bw = stack_bidirectional_dynamic_rnn(fw, bw, torch.ones(1, 4, 2))
    >>> tuple(out.shape), tuple(states_bw[0].h.shape)
    ((1, 4, 5), (1, 3))
    """
    owner = "stack_bidirectional_dynamic_rnn"
    fw, bw = _check_cell_lists(owner, cells_fw, cells_bw)
    x, cpu_lengths = _check_sequences(owner, inputs, sequence_length, time_major)
    lengths = None if cpu_lengths is None else cpu_lengths.to(x.device)
    init_fw = _check_initial_states(owner, "initial_states_fw", initial_states_fw, len(fw))
    init_bw = _check_initial_states(owner, "initial_states_bw", initial_states_bw, len(bw))
    batch = int(x.shape[1])
    states_fw: list[State] = []
    states_bw: list[State] = []
    layer_input = x
    probe = x[0]  # what the layer's cells see first (their checks need its shape and dtype)
    pending: list[tuple[_Fused, _Fused]] = []  # checked layers not run yet
    for cell_fw, cell_bw, s_fw, s_bw in zip(fw, bw, init_fw, init_bw):
        if s_fw is None:
            s_fw = cell_fw.zero_state(batch, x.dtype, device=x.device)
        if s_bw is None:
            s_bw = cell_bw.zero_state(batch, x.dtype, device=x.device)
        pair = _fused_pair(cell_fw, cell_bw, probe, s_fw, s_bw)
        if pair is not None:
            pending.append(pair)
            probe = probe.new_empty(batch, cell_fw.output_size + cell_bw.output_size)
            continue
        layer_input = _run_pending(pending, layer_input, cpu_lengths, states_fw, states_bw)
        out_fw, final_fw = _run(cell_fw, layer_input, s_fw, lengths, cpu_lengths)
        reversed_input = reverse_within(layer_input, lengths)
        out_bw, final_bw = _run(cell_bw, reversed_input, s_bw, lengths, cpu_lengths)
        layer_input = torch.cat([out_fw, reverse_within(out_bw, lengths)], dim=-1)
        states_fw.append(final_fw)
        states_bw.append(final_bw)
        probe = layer_input[0]
    layer_input = _run_pending(pending, layer_input, cpu_lengths, states_fw, states_bw)
    outputs = layer_input if time_major else layer_input.transpose(0, 1)
    return outputs, tuple(states_fw), tuple(states_bw)


def _run_pending(
    pending: list[tuple[_Fused, _Fused]],
    x: Tensor,
    cpu_lengths: Tensor | None,
    states_fw: list[State],
    states_bw: list[State],
) -> Tensor:
    """Run (and empty) the checked bidirectional layers; their final states go to the lists."""
    if not pending:
        return x
    outputs, finals = _run_fused(pending, x, cpu_lengths)
    states_fw += finals[0::2]
    states_bw += finals[1::2]
    pending.clear()
    return outputs
