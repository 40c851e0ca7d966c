"""Plain NumPy (float64) forward pass of cuDNN's RNN equations, used as a test oracle.

This module is deliberately simple: explicit loops over layers, directions and time
steps, no dependency on torch or on the rest of the package.  It exists so the
test-suite has an independent, readable statement of what the fast implementation
must compute.

Notation: ``H`` hidden units (read from the bias shapes), ``P`` projection size,
``Hout = P`` with projection else ``H``, ``D = 2`` if bidirectional else ``1``,
``G`` gates per cell (LSTM 4, GRU 3, tanh/relu 1), ``sigma`` the logistic sigmoid.
A matrix ``W`` of shape ``[rows, cols]`` acts as ``W @ x`` on a column vector, so a
batch ``X`` of shape ``[B, cols]`` is computed as ``X @ W.T``.

One step, with ``x`` the layer input, ``h`` / ``c`` the previous hidden / cell state::

    rnn_tanh:  h_t = tanh(W x + b_W + R h + b_R)
    rnn_relu:  h_t = max(0, W x + b_W + R h + b_R)

    lstm:      i   = sigma(W_i x + b_Wi + R_i h + b_Ri)
               f   = sigma(W_f x + b_Wf + R_f h + b_Rf)
               c'  = tanh (W_c x + b_Wc + R_c h + b_Rc)
               o   = sigma(W_o x + b_Wo + R_o h + b_Ro)
               c_t = f * c + i * c'
               m_t = o * tanh(c_t)
               h_t = m_t,  or  h_t = W_proj @ m_t  with projection (no bias)

    gru:       r   = sigma(W_r x + b_Wr + R_r h + b_Rr)
               u   = sigma(W_u x + b_Wu + R_u h + b_Ru)
               h'  = tanh (W_h x + b_Wh + r * (R_h h + b_Rh))
               h_t = (1 - u) * h' + u * h

``skip_input``: in layer 0 only (both directions) every ``W_g x`` is replaced by ``x``
itself (requires ``I == H``); the layer-0 input matrices are present but ignored, the
input biases ``b_Wg`` are still added.

Stacking: layer ``l > 0`` reads the output sequence of layer ``l - 1``, optionally
multiplied by ``dropout_masks[l - 1]`` (time-major ``[T, B, D*Hout]``, already scaled).
Bidirectional layers run direction 0 over ``t = 0..n_b-1`` and direction 1 over
``t = n_b-1..0`` and concatenate ``[forward, backward]`` on the feature axis.  With
``sequence_lengths`` only steps ``t < n_b`` are computed, outputs at ``t >= n_b`` are
exactly ``0.0`` and final states are taken after the last computed step.

Canonical parameter order (a contract with the rest of the package): for each layer
``l`` and, inside it, each direction ``d`` (0 forward, then 1 backward), ``weights``
holds the ``G`` input matrices ``W_g [H, in_l]``, then the ``G`` recurrent matrices
``R_g [H, Hout]``, then (LSTM with projection only) ``W_proj [P, H]``; ``in_0 = I``
and ``in_l = D*Hout`` for ``l > 0``.  ``biases`` holds, in the same order, the ``G``
input biases ``b_Wg [H]`` then the ``G`` recurrent biases ``b_Rg [H]``.  Gate order:
LSTM ``i, f, c, o``; GRU ``r, u, h``; tanh/relu a single gate.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike, NDArray

__all__ = ["rnn_forward"]

Array = NDArray[np.float64]

# Gate names in canonical order; only used for counts and error messages.
_GATES: dict[str, tuple[str, ...]] = {
    "lstm": ("i", "f", "c", "o"),
    "gru": ("r", "u", "h"),
    "rnn_tanh": ("h",),
    "rnn_relu": ("h",),
}


def _f64(value: ArrayLike) -> Array:
    return np.asarray(value, dtype=np.float64)


def _sigmoid(x: Array) -> Array:
    # Written with exp(-|x|) so it never overflows (no RuntimeWarning for large |x|)
    # and stays accurate in both tails.
    e = np.exp(-np.abs(x))
    result: Array = np.where(x >= 0.0, 1.0 / (1.0 + e), e / (1.0 + e))
    return result


def _check_shape(arr: Array, expected: tuple[int, ...], what: str) -> None:
    if arr.shape != expected:
        raise ValueError(f"{what} has shape {arr.shape}, expected {expected}")


@dataclass(frozen=True)
class _DirectionParams:
    """Parameters of one (layer, direction), split out of the canonical lists."""

    w_in: list[Array]  # G input matrices W_g [H, in_l]
    w_rec: list[Array]  # G recurrent matrices R_g [H, Hout]
    b_in: list[Array]  # G input biases b_Wg [H]
    b_rec: list[Array]  # G recurrent biases b_Rg [H]
    w_proj: Array | None  # LSTM projection [P, H], or None


def _step(
    mode: str,
    x_terms: list[Array],
    h: Array,
    c: Array | None,
    p: _DirectionParams,
) -> tuple[Array, Array | None]:
    """One time step for a batch; ``x_terms[g]`` is ``W_g x + b_Wg`` (already computed)."""

    def rec(g: int) -> Array:
        # Recurrent contribution R_g h + b_Rg of gate g.
        out: Array = h @ p.w_rec[g].T + p.b_rec[g]
        return out

    if mode == "rnn_tanh":
        h_new: Array = np.tanh(x_terms[0] + rec(0))
        return h_new, None
    if mode == "rnn_relu":
        h_new = np.maximum(x_terms[0] + rec(0), 0.0)
        return h_new, None
    if mode == "lstm":
        assert c is not None
        i = _sigmoid(x_terms[0] + rec(0))
        f = _sigmoid(x_terms[1] + rec(1))
        c_cand: Array = np.tanh(x_terms[2] + rec(2))
        o = _sigmoid(x_terms[3] + rec(3))
        c_new: Array = f * c + i * c_cand
        m: Array = o * np.tanh(c_new)
        # The projection (no bias) gives both the recurrent state and the output.
        h_new = m if p.w_proj is None else m @ p.w_proj.T
        return h_new, c_new
    # GRU: the reset gate scales R_h h + b_Rh *after* the matrix product, bias included
    # (cuDNN's variant), not R_h (r * h) as in some GRU formulations.
    r = _sigmoid(x_terms[0] + rec(0))
    u = _sigmoid(x_terms[1] + rec(1))
    h_cand: Array = np.tanh(x_terms[2] + r * rec(2))
    h_new = (1.0 - u) * h_cand + u * h
    return h_new, None


def _run_direction(
    mode: str,
    xs: Array,
    h0: Array,
    c0: Array | None,
    p: _DirectionParams,
    *,
    lengths: NDArray[np.int64],
    reverse: bool,
    skip: bool,
) -> tuple[Array, Array, Array | None]:
    """Run one direction of one layer over a time-major sequence ``xs [T, B, in]``.

    Returns the output sequence ``[T, B, Hout]`` (zeros at padded steps) and the final
    ``h`` (and ``c``) after each batch entry's last computed step.
    """
    num_steps, batch = xs.shape[0], xs.shape[1]
    h_out = h0.shape[-1]
    outputs: Array = np.zeros((num_steps, batch, h_out), dtype=np.float64)
    h = h0.copy()
    c = None if c0 is None else c0.copy()
    # The backward direction visits t = T-1..0; entries with n_b < T are simply
    # inactive (state untouched) until t = n_b - 1, so they start there.
    order = range(num_steps - 1, -1, -1) if reverse else range(num_steps)
    for t in order:
        x = xs[t]
        # skip_input: the input itself replaces W_g x for every gate; b_Wg still applies.
        x_terms = [(x if skip else x @ w.T) + b for w, b in zip(p.w_in, p.b_in, strict=True)]
        h_new, c_new = _step(mode, x_terms, h, c, p)
        # Only batch entries with t < n_b advance; the others keep their state and
        # produce an exact 0.0 output.
        active = (t < lengths)[:, None]
        h = np.where(active, h_new, h)
        if c is not None and c_new is not None:
            c = np.where(active, c_new, c)
        outputs[t] = np.where(active, h_new, 0.0)
    return outputs, h, c


def rnn_forward(
    mode: str,
    inputs: ArrayLike,
    h0: ArrayLike,
    c0: ArrayLike | None,
    weights: Sequence[ArrayLike],
    biases: Sequence[ArrayLike],
    *,
    num_layers: int,
    bidirectional: bool = False,
    skip_input: bool = False,
    num_proj: int | None = None,
    sequence_lengths: ArrayLike | None = None,
    time_major: bool = True,
    dropout_masks: Sequence[ArrayLike] | None = None,
) -> tuple[NDArray[np.float64], NDArray[np.float64], NDArray[np.float64] | None]:
    """Reference forward pass of a (multi-layer, optionally bidirectional) cuDNN RNN.

    Args:
        mode: ``"lstm"``, ``"gru"``, ``"rnn_tanh"`` or ``"rnn_relu"``.
        inputs: ``[T, B, I]`` if ``time_major`` else ``[B, T, I]``.
        h0: initial hidden states ``[L*D, B, Hout]`` (this layout in both input layouts).
        c0: LSTM only, initial cell states ``[L*D, B, H]``; must be ``None`` otherwise.
        weights: matrices in canonical order (see the module docstring).
        biases: vectors in canonical order (see the module docstring); ``H`` is read
            from their shape.
        num_layers: ``L``.
        bidirectional: ``D = 2`` if true.
        skip_input: layer 0 adds the input to each gate instead of ``W_g x``.
        num_proj: LSTM projection size ``P``; ``None`` (or ``0``) means no projection.
        sequence_lengths: ``[B]`` integers in ``[1, T]``; ``None`` means all ``T``.
        time_major: layout of ``inputs`` and of the returned ``outputs``.
        dropout_masks: ``L - 1`` arrays ``[T, B, D*Hout]`` (always time-major, already
            scaled) multiplied into the output of layer ``l - 1`` before layer ``l``.

    Returns:
        ``(outputs, h_n, c_n)``: ``outputs`` ``[T, B, D*Hout]`` (``[B, T, D*Hout]`` if not
        ``time_major``), ``h_n`` ``[L*D, B, Hout]``, ``c_n`` ``[L*D, B, H]`` for LSTM
        else ``None``.  Index ``l*D + d`` holds layer ``l`` direction ``d``.

    Raises:
        ValueError: on an unknown mode, a wrong parameter count or shape, bad lengths,
            ``skip_input`` with ``I != H``, or ``c0`` given / missing inappropriately.
    """
    # ---- options -------------------------------------------------------------------
    if mode not in _GATES:
        raise ValueError(f"unknown mode {mode!r}; expected one of {sorted(_GATES)}")
    gate_names = _GATES[mode]
    num_gates = len(gate_names)
    if isinstance(num_layers, bool) or not isinstance(num_layers, int) or num_layers < 1:
        raise ValueError(f"num_layers must be a positive int, got {num_layers!r}")
    if num_proj is not None and num_proj < 0:
        raise ValueError(f"num_proj must be >= 0 (None or 0: no projection), got {num_proj}")
    has_proj = bool(num_proj)
    if has_proj and mode != "lstm":
        raise ValueError(f"num_proj is only supported for mode 'lstm', not {mode!r}")
    num_dirs = 2 if bidirectional else 1
    num_blocks = num_layers * num_dirs

    # ---- parameter counts, then H from the bias shape -------------------------------
    weight_list = [_f64(w) for w in weights]
    per_block = 2 * num_gates + (1 if has_proj else 0)
    if len(weight_list) != num_blocks * per_block:
        raise ValueError(
            f"expected {num_blocks * per_block} weight matrices for mode {mode!r}, "
            f"{num_layers} layer(s), {num_dirs} direction(s)"
            f"{', with projection' if has_proj else ''}, got {len(weight_list)}"
        )
    bias_list = [_f64(b) for b in biases]
    expected_biases = num_blocks * 2 * num_gates
    if len(bias_list) != expected_biases:
        raise ValueError(
            f"expected {expected_biases} bias vectors for mode {mode!r}, "
            f"{num_layers} layer(s), {num_dirs} direction(s), got {len(bias_list)}"
        )
    if bias_list[0].ndim != 1 or bias_list[0].shape[0] < 1:
        raise ValueError(f"biases[0] must have shape [H] with H >= 1, got {bias_list[0].shape}")
    hidden = bias_list[0].shape[0]
    h_out = num_proj if num_proj else hidden

    # ---- inputs and initial states -------------------------------------------------
    x = _f64(inputs)
    if x.ndim != 3:
        raise ValueError(f"inputs must be 3-D, got shape {x.shape}")
    if not time_major:
        # Work time-major internally; only the caller-facing layout changes.
        x = x.transpose(1, 0, 2)
    num_steps, batch, input_size = x.shape
    if num_steps < 1 or batch < 1 or input_size < 1:
        raise ValueError(f"inputs must have T, B, I >= 1, got shape {x.shape} (time-major)")
    if skip_input and input_size != hidden:
        raise ValueError(
            f"skip_input requires input size == num_units, got I={input_size}, H={hidden}"
        )
    h_init = _f64(h0)
    _check_shape(h_init, (num_blocks, batch, h_out), "h0")
    c_init: Array | None = None
    if mode == "lstm":
        if c0 is None:
            raise ValueError("c0 is required for mode 'lstm'")
        c_init = _f64(c0)
        _check_shape(c_init, (num_blocks, batch, hidden), "c0")
    elif c0 is not None:
        raise ValueError(f"c0 must be None for mode {mode!r}")

    # ---- weight shapes, split per (layer, direction) -------------------------------
    params: list[_DirectionParams] = []
    for block in range(num_blocks):
        layer, direction = divmod(block, num_dirs)
        in_size = input_size if layer == 0 else num_dirs * h_out
        where = f"layer {layer}, direction {direction}"
        ws = weight_list[block * per_block : (block + 1) * per_block]
        bs = bias_list[block * 2 * num_gates : (block + 1) * 2 * num_gates]
        for g, name in enumerate(gate_names):
            w_idx = block * per_block
            b_idx = block * 2 * num_gates
            _check_shape(ws[g], (hidden, in_size), f"weights[{w_idx + g}] ({where}, W_{name})")
            _check_shape(
                ws[num_gates + g],
                (hidden, h_out),
                f"weights[{w_idx + num_gates + g}] ({where}, R_{name})",
            )
            _check_shape(bs[g], (hidden,), f"biases[{b_idx + g}] ({where}, b_W{name})")
            _check_shape(
                bs[num_gates + g],
                (hidden,),
                f"biases[{b_idx + num_gates + g}] ({where}, b_R{name})",
            )
        w_proj = None
        if has_proj:
            w_proj = ws[2 * num_gates]
            _check_shape(
                w_proj,
                (h_out, hidden),
                f"weights[{block * per_block + 2 * num_gates}] ({where}, W_proj)",
            )
        params.append(
            _DirectionParams(
                w_in=ws[:num_gates],
                w_rec=ws[num_gates : 2 * num_gates],
                b_in=bs[:num_gates],
                b_rec=bs[num_gates:],
                w_proj=w_proj,
            )
        )

    # ---- sequence lengths ----------------------------------------------------------
    if sequence_lengths is None:
        lengths = np.full(batch, num_steps, dtype=np.int64)
    else:
        raw = np.asarray(sequence_lengths)
        if raw.shape != (batch,):
            raise ValueError(f"sequence_lengths has shape {raw.shape}, expected ({batch},)")
        integral = raw.dtype.kind in "iu" or (
            raw.dtype.kind == "f" and bool(np.all(np.isfinite(raw) & (raw == np.round(raw))))
        )
        if not integral:
            raise ValueError(f"sequence_lengths must be integers, got {raw!r}")
        lengths = raw.astype(np.int64)
        if np.any(lengths < 1) or np.any(lengths > num_steps):
            raise ValueError(
                f"sequence_lengths must lie in [1, T={num_steps}], got {lengths.tolist()}"
            )

    # ---- dropout masks -------------------------------------------------------------
    masks: list[Array] | None = None
    if dropout_masks is not None:
        masks = [_f64(m) for m in dropout_masks]
        if len(masks) != num_layers - 1:
            raise ValueError(
                f"expected {num_layers - 1} dropout masks (one per layer but the last), "
                f"got {len(masks)}"
            )
        for k, mask in enumerate(masks):
            _check_shape(
                mask, (num_steps, batch, num_dirs * h_out), f"dropout_masks[{k}] (time-major)"
            )

    # ---- the forward pass ----------------------------------------------------------
    h_n: Array = np.zeros((num_blocks, batch, h_out), dtype=np.float64)
    c_n: Array | None = None if c_init is None else np.zeros_like(c_init)
    layer_input = x
    layer_output = x
    for layer in range(num_layers):
        dir_outputs = []
        for direction in range(num_dirs):
            block = layer * num_dirs + direction
            out, h_last, c_last = _run_direction(
                mode,
                layer_input,
                h_init[block],
                None if c_init is None else c_init[block],
                params[block],
                lengths=lengths,
                reverse=direction == 1,
                skip=skip_input and layer == 0,
            )
            dir_outputs.append(out)
            h_n[block] = h_last
            if c_n is not None and c_last is not None:
                c_n[block] = c_last
        # Forward direction first on the feature axis.
        layer_output = np.concatenate(dir_outputs, axis=-1)
        # Dropout sits between layers only: never on the last output or the states.
        if masks is not None and layer < num_layers - 1:
            layer_input = layer_output * masks[layer]
        else:
            layer_input = layer_output

    outputs: Array = layer_output if time_major else layer_output.transpose(1, 0, 2)
    return np.ascontiguousarray(outputs), h_n, c_n
