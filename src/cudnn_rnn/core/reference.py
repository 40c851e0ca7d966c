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

Variants (``variant=``, the mapping :meth:`cudnn_rnn.core.variant.Variant.as_dict` gives: only
the fields that differ from cuDNN's math; activations as ``{"name", "alpha", "beta"}``), with
``f`` the gates' activation (sigmoid), ``g`` the candidate's (the mode's own), ``h`` the
output's (tanh) and ``clip(z) = min(max(z, -c), c)`` where a gate clip ``c`` is given (every
activation's input: ONNX's ``clip``)::

    lstm:      i   = f(W_i x + b_Wi + R_i h + b_Ri + P_i * c)        (P_*: peepholes, else 0)
               f   = f(W_f x + b_Wf + R_f h + b_Rf + P_f * c)   or 1 - i  (input_forget)
               c'  = g(W_c x + b_Wc + R_c h + b_Rc)
               c_t = f * c + i * c'                then clipped to [-cell_clip, cell_clip]
               o   = f(W_o x + b_Wo + R_o h + b_Ro + P_o * c_t)
               m_t = o * h(c_t)
               h_t = m_t or W_proj @ m_t           then clipped to [-proj_clip, proj_clip]

    gru, reset_after=False (the reset gate before the product):
               h'  = g(W_h x + b_Wh + R_h (r * h) + b_Rh)

    rnn_*:     h_t = g(W x + b_W + R h + b_R)

``time="reverse"`` runs a unidirectional layer as the backward direction runs (over each
sequence's own steps, last first; outputs aligned with the input); ``"go_backwards"`` the same
with the outputs in processing order (``y[k] = reverse[T-1-k]``, Keras). ``merge`` combines a
bidirectional layer's two outputs: ``[fw, bw]`` (concat), ``fw + bw``, ``fw * bw`` or
``(fw + bw) / 2`` (ave). ``stacks="separate"``: direction ``d`` of layer ``l > 0`` reads
direction ``d`` of layer ``l - 1`` only, and the top layer's two outputs are merged.

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
and ``in_l = D*Hout`` for ``l > 0`` (``Hout`` where the directions are summed, multiplied,
averaged or are separate stacks).  ``biases`` holds, in the same order, the ``G``
input biases ``b_Wg [H]`` then the ``G`` recurrent biases ``b_Rg [H]`` (then, with
peepholes, ``P_i, P_f, P_o [H]``).  Gate order:
LSTM ``i, f, c, o``; GRU ``r, u, h``; tanh/relu a single gate.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import ArrayLike, NDArray

__all__ = ["activation", "rnn_forward"]

Array = NDArray[np.float64]

# Gate names in canonical order; only used for counts and error messages.
_GATES: dict[str, tuple[str, ...]] = {
    "lstm": ("i", "f", "c", "o"),
    "gru": ("r", "u", "h"),
    "rnn_tanh": ("h",),
    "rnn_relu": ("h",),
}
_TIMES = ("forward", "reverse", "go_backwards")
_MERGES = ("concat", "sum", "mul", "ave")
# Keras's SELU constants (Klambauer et al.).
_SELU_ALPHA = 1.6732632423543772848170429916717
_SELU_SCALE = 1.0507009873554804934193349852946


def _f64(value: ArrayLike) -> Array:
    return np.asarray(value, dtype=np.float64)


def _sigmoid(x: Array) -> Array:
    # Written with exp(-|x|) so it never overflows (no RuntimeWarning for large |x|)
    # and stays accurate in both tails.
    e = np.exp(-np.abs(x))
    result: Array = np.where(x >= 0.0, 1.0 / (1.0 + e), e / (1.0 + e))
    return result


def _elu(x: Array, alpha: float) -> Array:
    out: Array = np.where(x >= 0.0, x, alpha * np.expm1(np.minimum(x, 0.0)))
    return out


def _activations() -> dict[str, Callable[[Array, Any, Any], Array]]:
    return {
        "sigmoid": lambda x, a, b: _sigmoid(x),
        "tanh": lambda x, a, b: np.tanh(x),
        "relu": lambda x, a, b: np.maximum(x, 0.0),
        "hard_sigmoid": lambda x, a, b: np.clip(a * x + b, 0.0, 1.0),
        "affine": lambda x, a, b: a * x + b,
        "leaky_relu": lambda x, a, b: np.where(x >= 0.0, x, a * x),
        "thresholded_relu": lambda x, a, b: np.where(x > a, x, 0.0),
        "scaled_tanh": lambda x, a, b: a * np.tanh(b * x),
        "elu": lambda x, a, b: _elu(x, a),
        "softsign": lambda x, a, b: x / (1.0 + np.abs(x)),
        "softplus": lambda x, a, b: np.logaddexp(0.0, x),
        "selu": lambda x, a, b: _SELU_SCALE * _elu(x, _SELU_ALPHA),
        "exponential": lambda x, a, b: np.exp(x),
        "silu": lambda x, a, b: x * _sigmoid(x),
    }


_ACTIVATIONS = _activations()
# The parameters of an activation given without them: the ONNX operators' defaults.
_DEFAULTS = {
    "hard_sigmoid": (0.2, 0.5),
    "affine": (1.0, 0.0),
    "leaky_relu": (0.01, None),
    "thresholded_relu": (1.0, None),
    "scaled_tanh": (1.0, 1.0),
    "elu": (1.0, None),
}


def activation(spec: Mapping[str, Any] | str) -> Callable[[Array], Array]:
    """The activation a name or a ``{"name", "alpha", "beta"}`` mapping describes, as a NumPy
    function (written here from the formulas, independent of the package's kernels)."""
    if isinstance(spec, str):
        spec = {"name": spec}
    name = spec["name"]
    if name not in _ACTIVATIONS:
        raise ValueError(f"unknown activation {name!r}; expected one of {sorted(_ACTIVATIONS)}")
    default_alpha, default_beta = _DEFAULTS.get(name, (None, None))
    alpha = default_alpha if spec.get("alpha") is None else spec["alpha"]
    beta = default_beta if spec.get("beta") is None else spec["beta"]
    fn = _ACTIVATIONS[name]
    return lambda x: fn(x, alpha, beta)


@dataclass(frozen=True)
class _Math:
    """A variant's math, resolved once: the three activations, the clips, the switches."""

    f: Callable[[Array], Array]
    g: Callable[[Array], Array]
    h: Callable[[Array], Array]
    clip: Callable[[Array], Array]
    reset_after: bool
    input_forget: bool
    cell_clip: float | None
    proj_clip: float | None


def _math(mode: str, variant: Mapping[str, Any]) -> _Math:
    gate_clip = variant.get("gate_clip")
    own = {"rnn_relu": "relu"}.get(mode, "tanh")
    return _Math(
        f=activation(variant.get("gate_activation", "sigmoid")),
        g=activation(variant.get("cell_activation") or own),
        h=activation(variant.get("output_activation", "tanh")),
        clip=(lambda z: z) if gate_clip is None else (lambda z: np.clip(z, -gate_clip, gate_clip)),
        reset_after=bool(variant.get("reset_after", True)),
        input_forget=bool(variant.get("input_forget", False)),
        cell_clip=variant.get("cell_clip"),
        proj_clip=variant.get("proj_clip"),
    )


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
    peep: list[Array] | None = None  # LSTM peepholes P_i, P_f, P_o [H], or None


def _step(
    mode: str,
    m: _Math,
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

    if mode in ("rnn_tanh", "rnn_relu"):
        h_new: Array = m.g(m.clip(x_terms[0] + rec(0)))
        return h_new, None
    if mode == "lstm":
        assert c is not None
        peep = p.peep if p.peep is not None else [0.0, 0.0, 0.0]
        i = m.f(m.clip(x_terms[0] + rec(0) + peep[0] * c))
        f = 1.0 - i if m.input_forget else m.f(m.clip(x_terms[1] + rec(1) + peep[1] * c))
        c_cand: Array = m.g(m.clip(x_terms[2] + rec(2)))
        c_new: Array = f * c + i * c_cand
        if m.cell_clip is not None:
            c_new = np.clip(c_new, -m.cell_clip, m.cell_clip)
        o = m.f(m.clip(x_terms[3] + rec(3) + peep[2] * c_new))
        out: Array = o * m.h(c_new)
        # The projection (no bias) gives both the recurrent state and the output.
        if p.w_proj is not None:
            out = out @ p.w_proj.T
            if m.proj_clip is not None:
                out = np.clip(out, -m.proj_clip, m.proj_clip)
        return out, c_new
    # GRU: cuDNN's reset gate scales R_h h + b_Rh *after* the matrix product, bias included;
    # reset_after=False (TF's GRUCell, Keras 2, ONNX's default) scales h before it.
    r = m.f(m.clip(x_terms[0] + rec(0)))
    u = m.f(m.clip(x_terms[1] + rec(1)))
    if m.reset_after:
        candidate = x_terms[2] + r * rec(2)
    else:
        candidate = x_terms[2] + (r * h) @ p.w_rec[2].T + p.b_rec[2]
    h_cand: Array = m.g(m.clip(candidate))
    h_new = (1.0 - u) * h_cand + u * h
    return h_new, None


def _run_direction(
    mode: str,
    m: _Math,
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
        h_new, c_new = _step(mode, m, x_terms, h, c, p)
        # Only batch entries with t < n_b advance; the others keep their state and
        # produce an exact 0.0 output.
        active = (t < lengths)[:, None]
        h = np.where(active, h_new, h)
        if c is not None and c_new is not None:
            c = np.where(active, c_new, c)
        outputs[t] = np.where(active, h_new, 0.0)
    return outputs, h, c


def _merged(outs: list[Array], merge: str) -> Array:
    """A layer's output from its directions' outputs (forward first)."""
    if len(outs) == 1 or merge == "concat":
        return np.concatenate(outs, axis=-1)
    if merge == "sum":
        return outs[0] + outs[1]
    if merge == "mul":
        return outs[0] * outs[1]
    return (outs[0] + outs[1]) / 2.0


def _variant_fields(variant: Any) -> dict[str, Any]:
    if variant is None:
        return {}
    if hasattr(variant, "as_dict"):
        variant = variant.as_dict()
    if not isinstance(variant, Mapping):
        raise ValueError(f"variant must be a mapping of changed fields, got {variant!r}")
    return dict(variant)


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
    variant: Any = None,
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
        dropout_masks: ``L - 1`` arrays ``[T, B, width]`` (always time-major, already
            scaled) multiplied into what layer ``l`` reads from layer ``l - 1``: its merged
            output, or the two directions' outputs side by side with separate stacks.
        variant: the fields that differ from cuDNN's math, as
            :meth:`cudnn_rnn.core.variant.Variant.as_dict` gives them (or a ``Variant``);
            None: cuDNN's own.

    Returns:
        ``(outputs, h_n, c_n)``: ``outputs`` ``[T, B, width]`` (``[B, T, width]`` if not
        ``time_major``; width ``D*Hout`` concatenated, else ``Hout``), ``h_n``
        ``[L*D, B, Hout]``, ``c_n`` ``[L*D, B, H]`` for LSTM else ``None``.  Index
        ``l*D + d`` holds layer ``l`` direction ``d``.

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
    fields = _variant_fields(variant)
    math = _math(mode, fields)
    time = fields.get("time", "forward")
    merge = fields.get("merge", "concat")
    separate = fields.get("stacks", "layers") == "separate"
    peepholes = bool(fields.get("peepholes", False))
    if time not in _TIMES or merge not in _MERGES:
        raise ValueError(f"unknown time {time!r} or merge {merge!r}")
    if peepholes and mode != "lstm":
        raise ValueError(f"peepholes are an LSTM's, not {mode!r}'s")

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
    per_bias_block = 2 * num_gates + (3 if peepholes else 0)
    expected_biases = num_blocks * per_bias_block
    if len(bias_list) != expected_biases:
        raise ValueError(
            f"expected {expected_biases} bias vectors for mode {mode!r}, "
            f"{num_layers} layer(s), {num_dirs} direction(s)"
            f"{', with peepholes' if peepholes else ''}, got {len(bias_list)}"
        )
    if bias_list[0].ndim != 1 or bias_list[0].shape[0] < 1:
        raise ValueError(f"biases[0] must have shape [H] with H >= 1, got {bias_list[0].shape}")
    hidden = bias_list[0].shape[0]
    h_out = num_proj if num_proj else hidden
    merged_width = num_dirs * h_out if merge == "concat" else h_out
    upper_width = h_out if separate else merged_width

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
        in_size = input_size if layer == 0 else upper_width
        where = f"layer {layer}, direction {direction}"
        ws = weight_list[block * per_block : (block + 1) * per_block]
        bs = bias_list[block * per_bias_block : (block + 1) * per_bias_block]
        for g, name in enumerate(gate_names):
            w_idx = block * per_block
            b_idx = block * per_bias_block
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
        for k, name in enumerate(("i", "f", "o") if peepholes else ()):
            index = block * per_bias_block + 2 * num_gates + k
            _check_shape(bs[2 * num_gates + k], (hidden,), f"biases[{index}] ({where}, P_{name})")
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
                b_rec=bs[num_gates : 2 * num_gates],
                w_proj=w_proj,
                peep=bs[2 * num_gates :] if peepholes else None,
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
        width = num_dirs * h_out if separate else merged_width
        for k, mask in enumerate(masks):
            _check_shape(mask, (num_steps, batch, width), f"dropout_masks[{k}] (time-major)")

    # ---- the forward pass ----------------------------------------------------------
    h_n: Array = np.zeros((num_blocks, batch, h_out), dtype=np.float64)
    c_n: Array | None = None if c_init is None else np.zeros_like(c_init)
    # What each direction reads: one input for all (stacked layers), or its own stack's.
    reads = [x] * num_dirs
    dir_outputs: list[Array] = []
    for layer in range(num_layers):
        dir_outputs = []
        for direction in range(num_dirs):
            block = layer * num_dirs + direction
            out, h_last, c_last = _run_direction(
                mode,
                math,
                reads[direction],
                h_init[block],
                None if c_init is None else c_init[block],
                params[block],
                lengths=lengths,
                reverse=direction == 1 or time != "forward",
                skip=skip_input and layer == 0,
            )
            if time == "go_backwards":
                out = out[::-1]  # processing order: y[k] is the step at t = T-1-k
            dir_outputs.append(out)
            h_n[block] = h_last
            if c_n is not None and c_last is not None:
                c_n[block] = c_last
        if layer == num_layers - 1:
            break
        # Dropout sits between layers only: never on the last output or the states.
        read = np.concatenate(dir_outputs, -1) if separate else _merged(dir_outputs, merge)
        if masks is not None:
            read = read * masks[layer]
        reads = np.split(read, num_dirs, axis=-1) if separate else [read] * num_dirs

    layer_output = _merged(dir_outputs, merge)
    outputs: Array = layer_output if time_major else layer_output.transpose(1, 0, 2)
    return np.ascontiguousarray(outputs), h_n, c_n
