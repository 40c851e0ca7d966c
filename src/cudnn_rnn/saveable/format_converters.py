"""The format converters: an opaque cuDNN parameter buffer <-> the tensors of TF's cells.

``CudnnParamsFormatConverter{LSTM,GRU,Tanh,Relu}``, as in ``tf.contrib.cudnn_rnn`` r1.15, turn
an opaque buffer into the tensors of TF's step-by-step cells (``CudnnCompatibleLSTMCell``,
``CudnnCompatibleGRUCell``, ``BasicRNNCell``) and back. They know the tensors' names relative to
a cell and their shapes, not where a checkpoint puts them: the full names are the saveables'
(:mod:`cudnn_rnn.saveable.saveables`).

The cuDNN-canonical <-> opaque step is always the layout table's ``Layout.unpack`` / ``pack``
(:mod:`cudnn_rnn.core.layout` is the only place that knows offsets; no op object is built), and
every gate reordering is :func:`~cudnn_rnn.core.gates.permute_gates` with ``GATE_ORDERS``.

Transforms per layer-direction (``[A|B]`` joins columns, ``rows(...)`` stacks rows; ``W_g``/``R_g``
the cuDNN input/recurrent matrices ``[H, in]``/``[H, Hout]``, ``bW_g``/``bR_g`` their biases)::

    LSTM   kernel [in+Hout, 4H] = rows([W_i|R_i], [W_c|R_c], [W_f|R_f], [W_o|R_o])^T   (i,c,f,o)
           bias   [4H]          = (bW_i+bR_i, bW_c+bR_c, bW_f+bR_f, bW_o+bR_o)
           projection/kernel [H, P] = W_proj^T                        (num_proj only)
    GRU    gates/kernel [in+H, 2H]  = rows([W_r|R_r], [W_u|R_u])^T      (r,u)
           gates/bias   [2H]        = (bW_r+bR_r, bW_u+bR_u)
           candidate/input_projection/kernel  [in, H] = W_h^T,  .../bias = bW_h
           candidate/hidden_projection/kernel [H, H]  = R_h^T,  .../bias = bR_h
    tanh,  kernel [in+H, H] = [W|R]^T
    relu   bias   [H]       = bW + bR
    LSTM with peepholes (a variant), after the bias:
           w_i_diag, w_f_diag, w_o_diag [H] = P_i, P_f, P_o              (exact)

Back to cuDNN, kernels are transposed, split and reordered exactly. A summed bias ``B`` comes back
as ``bW = bR = B / 2``: TF's cells have one bias where cuDNN has two, and only the sum enters the
math, so this is lossless for the outputs but not for the individual ``bW``/``bR`` (the GRU
candidate biases are kept apart and round-trip exactly).

A variant (:class:`~cudnn_rnn.core.variant.Variant`, ``variant=``) changes no tensor of the mode,
only adds the peepholes where it has them: its other settings are no tensors, and the metadata of
our checkpoints holds them (:mod:`cudnn_rnn.checkpoint`). TF's cuDNN-compatible cells, whose
names these are, compute cuDNN's math only, so a TF1 checkpoint never holds a variant.

``skip_input``: layer 0 has no stored input matrices; this library's canonical form holds identity
matrices in their place (``Layout.unpack`` returns them, ``Layout.pack`` requires them). So the
layer-0 TF kernels of a skip_input model contain identity blocks where the input matrices would
be, and restoring requires exactly those blocks. This is intended: the checkpoint describes the
full math, and TF's compatible cells reproduce skip_input with them.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any, ClassVar, NamedTuple

import numpy as np
import torch
from torch import Tensor

from cudnn_rnn.core.constants import (
    CUDNN_GRU,
    CUDNN_INPUT_LINEAR_MODE,
    CUDNN_LSTM,
    CUDNN_RNN_RELU,
    CUDNN_RNN_TANH,
    CUDNN_RNN_UNIDIRECTION,
)
from cudnn_rnn.core.gates import CUDNN_GATES, GATE_ORDERS, permute_gates
from cudnn_rnn.core.layout import (
    INPUT,
    INPUT_BIAS,
    PEEPHOLE,
    PEEPHOLE_GATES,
    PROJECTION,
    RECURRENT,
    RECURRENT_BIAS,
    Layout,
    Param,
    layout_of,
)
from cudnn_rnn.core.spec import RNNSpec, SpecProperties, check_variant_mode
from cudnn_rnn.core.tf_names import (
    BIAS_NAMES,
    DIRECTIONS,
    KERNEL_NAMES,
    PEEPHOLE_NAMES,
    PROJECTION_KERNEL,
)
from cudnn_rnn.core.variant import CUDNN, Variant
from cudnn_rnn.validation import DTYPES, NUMPY_TO_TORCH, check_dtype, check_one_device

__all__ = [
    "CudnnParamsFormatConverter",
    "CudnnParamsFormatConverterGRU",
    "CudnnParamsFormatConverterLSTM",
    "CudnnParamsFormatConverterRelu",
    "CudnnParamsFormatConverterTanh",
]

_Canon = dict[tuple[str, str | None], Tensor]


class _TFParam(NamedTuple):
    """One TF canonical tensor of a layer-direction; ``name`` is relative to the cell scope."""

    layer: int
    direction: int
    name: str
    shape: tuple[int, ...]

    @property
    def label(self) -> str:
        return f"layer {self.layer} {DIRECTIONS[self.direction]} {self.name}"


def _describe(spec: RNNSpec) -> str:
    proj = f", num_proj={spec.num_proj}" if spec.num_proj is not None else ""
    variant = f", {spec.variant.describe()}" if not spec.variant.is_cudnn else ""
    return (
        f"{spec.mode} (num_layers={spec.num_layers}, num_units={spec.num_units}, "
        f"input_size={spec.input_size}, {spec.input_mode}, {spec.direction}{proj}{variant})"
    )


def _as_tensor(owner: str, what: str, value: object) -> Tensor:
    """A torch tensor of a supported floating dtype (NumPy arrays are copied into one)."""
    if isinstance(value, np.ndarray):
        if value.dtype not in NUMPY_TO_TORCH:
            raise TypeError(
                f"{owner}: {what} must be a float16/float32/float64 array, got dtype {value.dtype}."
            )
        return torch.tensor(value)  # a copy: read-only arrays are fine, no aliasing surprises
    if not isinstance(value, Tensor):
        raise TypeError(
            f"{owner}: {what} must be a torch.Tensor or numpy.ndarray, got {type(value).__name__}."
        )
    if value.dtype not in DTYPES:
        raise TypeError(
            f"{owner}: {what} must have a float16, bfloat16, float32 or float64 dtype, got "
            f"{value.dtype}."
        )
    return value


def _own(t: Tensor) -> Tensor:
    # A contiguous copy: results never alias the opaque buffer (a saved snapshot must not move
    # when training goes on) and serialise without surprises.
    return t.clone(memory_format=torch.contiguous_format)


def _check_sequence(owner: str, what: str, value: object) -> Sequence[Any]:
    if isinstance(value, (Tensor, np.ndarray, str)) or not isinstance(value, Sequence):
        raise TypeError(
            f"{owner}: {what} must be a list of tensors or arrays, got {type(value).__name__}."
        )
    return value


class CudnnParamsFormatConverter(SpecProperties):
    """Base of the converters between an opaque buffer and TF canonical tensors (abstract).

    The mode is data: ``_rnn_mode``, which picks the TF names of one layer-direction's weights
    and biases (:mod:`cudnn_rnn.core.tf_names`). Gates of the mode that TF keeps in one kernel
    are ``GATE_ORDERS["tf"][mode]``; the remaining cuDNN gates (the GRU candidate ``h``) are
    saved apart as transposed input and hidden matrices with their two biases.

    ``dtype=None`` computes in the dtype of the given tensors; a dtype converts them to it.

    >>> import torch
    >>> conv = CudnnParamsFormatConverterLSTM(1, 2, 3)
    >>> weights, biases = conv.opaque_to_tf_canonical(torch.zeros(56))
    >>> [tuple(w.shape) for w in weights], [tuple(b.shape) for b in biases]
    ([(5, 8)], [(8,)])
    """

    _rnn_mode: ClassVar[str]

    def __init__(
        self,
        num_layers: int,
        num_units: int,
        input_size: int,
        num_proj: int | None = None,
        input_mode: str = CUDNN_INPUT_LINEAR_MODE,
        direction: str = CUDNN_RNN_UNIDIRECTION,
        *,
        dtype: torch.dtype | str | None = None,
        variant: Variant | None = None,
    ) -> None:
        """Describe the model whose buffers this converts; TF's argument order (``num_proj``
        fourth). The four converter classes share this constructor; the base is abstract.

        Args:
            num_layers: ``L``, the number of stacked layers: an int >= 1.
            num_units: ``H``, the hidden size of every layer and direction: an int >= 1.
            input_size: ``I``, the inputs' last dimension: an int >= 1.
            num_proj: (``CudnnParamsFormatConverterLSTM`` only) ``P``, the size of the
                recurrent projection, an int in ``[1, num_units]``; its ``projection/kernel
                [H, P]`` is converted too. Default None: no projection.
            input_mode: ``"linear_input"`` (``CUDNN_INPUT_LINEAR_MODE``, the default),
                ``"skip_input"`` (``CUDNN_INPUT_SKIP_MODE``; needs ``input_size ==
                num_units``; layer 0's kernel then holds identity blocks, see the module) or
                ``"auto_select"`` (``CUDNN_INPUT_AUTO_MODE``: skip when ``input_size ==
                num_units``).
            direction: ``"unidirectional"`` (``CUDNN_RNN_UNIDIRECTION``, the default) or
                ``"bidirectional"`` (``CUDNN_RNN_BIDIRECTION``: the tensors of the forward
                then the backward direction of each layer).
            dtype: (keyword) the dtype results are computed in: ``torch.float16``,
                ``torch.bfloat16``, ``torch.float32`` or ``torch.float64`` (or its name).
                Default None: that of the given tensors.
            variant: (keyword) what the model computes beyond the mode's cuDNN math
                (:class:`~cudnn_rnn.core.variant.Variant`); an LSTM's peepholes are converted
                too (``w_i_diag, w_f_diag, w_o_diag [H]`` after each layer-direction's bias).
                Default None: cuDNN's own.

        Raises:
            TypeError: the abstract base class; an argument of the wrong type (a size that
                is not an int, a mode or direction that is not a str, a dtype that is not a
                ``torch.dtype``).
            ValueError: a value out of range: a size below 1, ``num_proj > num_units`` or
                ``num_proj`` for another mode than LSTM (r1.15 ignored it), an
                ``input_mode`` or ``direction`` not among the constants, a dtype other than
                the four, ``"skip_input"`` with ``input_size != num_units``, a variant field
                the mode or direction does not have.
        """
        owner = type(self).__name__
        if not hasattr(self, "_rnn_mode"):
            raise TypeError(
                f"{owner} is abstract; use CudnnParamsFormatConverterLSTM, "
                "CudnnParamsFormatConverterGRU, CudnnParamsFormatConverterTanh or "
                "CudnnParamsFormatConverterRelu."
            )
        # Unlike r1.15 (whose GRU/basic converters silently ignored num_proj), the spec rejects
        # num_proj for modes other than LSTM.
        self._spec = RNNSpec(
            self._rnn_mode,
            num_layers,
            num_units,
            input_size,
            input_mode,
            direction,
            num_proj,
            variant=CUDNN if variant is None else variant,
            owner=owner,
        )
        check_variant_mode(owner, self._rnn_mode, self._spec)
        self._dtype = None if dtype is None else check_dtype(owner, dtype)
        self._layout: Layout = layout_of(self._spec)
        mode = self._spec.mode
        self._tf_gates = GATE_ORDERS["tf"][mode]
        # The kernel's gates in cuDNN order: the source order of every permutation.
        self._cudnn_gates = tuple(g for g in CUDNN_GATES[mode] if g in self._tf_gates)
        self._candidate_gates = tuple(g for g in CUDNN_GATES[mode] if g not in self._tf_gates)
        self._tf_weights, self._tf_biases, self._tf_proj = self._tf_table()

    # -- description ------------------------------------------------------------------------------
    @property
    def _owner(self) -> str:
        return type(self).__name__

    def _described_spec(self) -> RNNSpec:
        return self._spec

    @property
    def spec(self) -> RNNSpec:
        """The validated configuration."""
        return self._spec

    @property
    def dtype(self) -> torch.dtype | None:
        """The dtype results are computed in; None: that of the inputs."""
        return self._dtype

    def _pseudo_layers(self) -> list[tuple[int, int]]:
        spec = self._spec
        return [(layer, d) for layer in range(spec.num_layers) for d in range(spec.num_dirs)]

    def _tf_table(self) -> tuple[list[_TFParam], list[_TFParam], list[_TFParam]]:
        """Names and shapes of the TF weights, biases and projections, in output order."""
        spec, h = self._spec, self._spec.num_units
        hout = spec.output_units
        weights, biases, proj = [], [], []
        # The kernel (bias) first, then an input and a hidden entry per gate kept out of it.
        weight_names, bias_names = KERNEL_NAMES[spec.mode], BIAS_NAMES[spec.mode]
        for layer, d in self._pseudo_layers():
            in_w = spec.layer_input_size(layer)
            w_shapes = [(in_w + hout, len(self._tf_gates) * h)]
            b_shapes = [(len(self._tf_gates) * h,)]
            for _ in self._candidate_gates:
                w_shapes += [(in_w, h), (hout, h)]
                b_shapes += [(h,), (h,)]
            weights += [
                _TFParam(layer, d, n, s) for n, s in zip(weight_names, w_shapes, strict=True)
            ]
            biases += [_TFParam(layer, d, n, s) for n, s in zip(bias_names, b_shapes, strict=True)]
            if spec.variant.peepholes:
                biases += [_TFParam(layer, d, PEEPHOLE_NAMES[g], (h,)) for g in PEEPHOLE_GATES]
            if spec.num_proj is not None:
                proj.append(_TFParam(layer, d, PROJECTION_KERNEL, (h, spec.num_proj)))
        return weights, biases, proj

    def _target_dtype(self, tensors: Sequence[Tensor], what: str) -> torch.dtype:
        if self._dtype is not None:
            return self._dtype
        found = {t.dtype for t in tensors}
        if len(found) > 1:
            raise TypeError(
                f"{self._owner}: {what} mix dtypes {sorted(map(str, found))}; convert them to one "
                "dtype or pass dtype= to the converter."
            )
        return found.pop()

    def _group(self, table: Sequence[Param], tensors: Sequence[Tensor]) -> dict[Any, _Canon]:
        """Canonical tensors keyed by pseudo-layer, then by the layout's (kind, gate) tags."""
        out: dict[Any, _Canon] = {}
        for p, t in zip(table, tensors, strict=True):
            out.setdefault((p.layer, p.direction), {})[p.kind, p.gate] = t
        return out

    # -- opaque -> TF ---------------------------------------------------------------------------
    def opaque_to_tf_canonical(
        self, opaque: Tensor | np.ndarray
    ) -> tuple[list[Tensor], list[Tensor]] | tuple[list[Tensor], list[Tensor], list[Tensor]]:
        """The TF canonical ``(weights, biases)`` of ``opaque`` (``+ projections`` with num_proj).

        Lists run layer 0 fw, layer 0 bw, layer 1 fw, ...; per layer-direction LSTM/RNN
        ``[kernel]``/``[bias]``, GRU ``[gates/kernel, candidate/input_projection/kernel,
        candidate/hidden_projection/kernel]`` and the biases in the same order (an LSTM with
        peepholes: ``[bias, w_i_diag, w_f_diag, w_o_diag]``); projections ``[H, P]`` one per
        layer-direction. Results are new tensors (differentiable).
        """
        owner, spec = self._owner, self._spec
        flat = _as_tensor(owner, "opaque", opaque)
        flat = flat.to(self._target_dtype([flat], "opaque"))
        if tuple(flat.shape) != (self._layout.size,):
            raise ValueError(
                f"{owner}: opaque must be a 1-D buffer of {self._layout.size} elements (the "
                f"params_size of {_describe(spec)}), got shape {tuple(flat.shape)}."
            )
        weights, biases = self._layout.unpack(flat)
        cw = self._group(self._layout.weights, weights)
        cb = self._group(self._layout.biases, biases)
        src, dst = self._cudnn_gates, self._tf_gates
        tf_w: list[Tensor] = []
        tf_b: list[Tensor] = []
        tf_p: list[Tensor] = []
        for key in self._pseudo_layers():
            w, b = cw[key], cb[key]
            rows = torch.cat([torch.cat([w[INPUT, g], w[RECURRENT, g]], dim=1) for g in src])
            tf_w.append(_own(permute_gates(rows, src, dst).T))
            # TF's cells have one bias per gate; only the sum bW + bR enters the math.
            summed = torch.cat([b[INPUT_BIAS, g] + b[RECURRENT_BIAS, g] for g in src])
            tf_b.append(_own(permute_gates(summed, src, dst)))
            for g in self._candidate_gates:
                # bR_h sits inside the GRU reset product, so the candidate biases stay apart.
                tf_w += [_own(w[INPUT, g].T), _own(w[RECURRENT, g].T)]
                tf_b += [_own(b[INPUT_BIAS, g]), _own(b[RECURRENT_BIAS, g])]
            if spec.variant.peepholes:
                tf_b += [_own(b[PEEPHOLE, g]) for g in PEEPHOLE_GATES]
            if spec.num_proj is not None:
                tf_p.append(_own(w[PROJECTION, None].T))
        if spec.num_proj is not None:
            return tf_w, tf_b, tf_p
        return tf_w, tf_b

    # -- TF -> opaque ---------------------------------------------------------------------------
    def tf_canonical_to_opaque(
        self,
        tf_canonicals: Sequence[Tensor | np.ndarray],
        weights_proj: Sequence[Tensor | np.ndarray] | None = None,
    ) -> Tensor:
        """The opaque buffer of TF canonical tensors (all weights, then all biases).

        ``weights_proj`` (``[H, P]`` per layer-direction) is required with num_proj and refused
        without. Summed biases come back halved into ``bW = bR = B / 2``. Count, dtypes and
        shapes are checked first; the result is differentiable with respect to tensor inputs.
        """
        owner, spec = self._owner, self._spec
        given = list(_check_sequence(owner, "tf_canonicals", tf_canonicals))
        nw, nb = len(self._tf_weights), len(self._tf_biases)
        if len(given) != nw + nb:
            raise ValueError(
                f"{owner}: expected {nw + nb} TF canonical tensors ({nw} weights, then {nb} "
                f"biases) for {_describe(spec)}, got {len(given)}."
            )
        proj: list[Any] = []
        if spec.num_proj is None:
            if weights_proj is not None:
                raise ValueError(
                    f"{owner}: weights_proj must be None without num_proj, got "
                    f"{type(weights_proj).__name__}; build the converter with num_proj=P."
                )
        else:
            if weights_proj is None:
                raise ValueError(
                    f"{owner}: num_proj={spec.num_proj} needs weights_proj, the "
                    f"{len(self._tf_proj)} projection kernels [num_units, num_proj]; got None."
                )
            proj = list(_check_sequence(owner, "weights_proj", weights_proj))
            if len(proj) != len(self._tf_proj):
                raise ValueError(
                    f"{owner}: expected {len(self._tf_proj)} weights_proj (one per layer and "
                    f"direction), got {len(proj)}."
                )
        named = [(f"tf_canonicals[{i}]", t) for i, t in enumerate(given)]
        named += [(f"weights_proj[{i}]", t) for i, t in enumerate(proj)]
        tensors = [_as_tensor(owner, what, t) for what, t in named]
        check_one_device(owner, "tf_canonicals and weights_proj", tensors)
        dtype = self._target_dtype(tensors, "tf_canonicals and weights_proj")
        tensors = [t.to(dtype) for t in tensors]
        table = self._tf_weights + self._tf_biases + self._tf_proj
        bad = [
            f"{what} ({p.label}) expected {p.shape}, got {tuple(t.shape)}"
            for (what, _), p, t in zip(named, table, tensors, strict=True)
            if tuple(t.shape) != p.shape
        ]
        if bad:
            raise ValueError(
                f"{owner}: wrong shape of TF canonical tensors: " + "; ".join(bad) + "."
            )
        canon = self._to_cudnn(
            iter(tensors[:nw]), iter(tensors[nw : nw + nb]), iter(tensors[nw + nb :])
        )
        weights = [canon[p.layer, p.direction][p.kind, p.gate] for p in self._layout.weights]
        biases = [canon[p.layer, p.direction][p.kind, p.gate] for p in self._layout.biases]
        try:
            flat: Tensor = self._layout.pack(weights, biases, owner=owner)
        except ValueError as e:  # skip_input kernels without identity input blocks
            why = str(e).removeprefix(f"{owner}: ")
            raise ValueError(
                f"{owner}: the TF canonical tensors do not fit the model: {why}"
            ) from e
        return flat

    def _to_cudnn(
        self, weights: Iterator[Tensor], biases: Iterator[Tensor], proj: Iterator[Tensor]
    ) -> dict[tuple[int, int], _Canon]:
        """cuDNN canonical tensors per pseudo-layer, consuming the TF lists in their order."""
        spec, h = self._spec, self._spec.num_units
        src, dst = self._cudnn_gates, self._tf_gates
        out: dict[tuple[int, int], _Canon] = {}
        for layer, d in self._pseudo_layers():
            c: _Canon = out.setdefault((layer, d), {})
            rows = permute_gates(next(weights).T, dst, src)
            split = [spec.layer_input_size(layer), spec.output_units]
            for g, block in zip(src, torch.split(rows, h), strict=True):
                c[INPUT, g], c[RECURRENT, g] = torch.split(block, split, dim=1)
            # Any split with the same sum computes the same; halves are TF's convention.
            halves = permute_gates(next(biases), dst, src) * 0.5
            for g, half in zip(src, torch.split(halves, h), strict=True):
                c[INPUT_BIAS, g] = c[RECURRENT_BIAS, g] = half
            for g in self._candidate_gates:
                c[INPUT, g], c[RECURRENT, g] = next(weights).T, next(weights).T
                c[INPUT_BIAS, g], c[RECURRENT_BIAS, g] = next(biases), next(biases)
            if spec.variant.peepholes:
                for g in PEEPHOLE_GATES:
                    c[PEEPHOLE, g] = next(biases)
            if spec.num_proj is not None:
                c[PROJECTION, None] = next(proj).T
        return out


class CudnnParamsFormatConverterLSTM(CudnnParamsFormatConverter):
    """LSTM: ``kernel [in+Hout, 4H]`` (i, c, f, o), ``bias [4H]``, ``projection [H, P]``.

    >>> import torch
    >>> from cudnn_rnn.core.layout import params_size
    >>> conv = CudnnParamsFormatConverterLSTM(2, 4, 3, 2, direction="bidirectional")
    >>> n = params_size(conv.spec)
    >>> weights, biases, projections = conv.opaque_to_tf_canonical(torch.randn(n))
    >>> [tuple(w.shape) for w in weights], tuple(projections[0].shape)
    ([(5, 16), (5, 16), (6, 16), (6, 16)], (4, 2))
    >>> opaque = conv.tf_canonical_to_opaque(weights + biases, projections)
    >>> again = conv.opaque_to_tf_canonical(opaque)
    >>> all(bool((a == b).all()) for a, b in zip(again[0] + again[1], weights + biases))
    True
    """

    _rnn_mode = CUDNN_LSTM


class CudnnParamsFormatConverterGRU(CudnnParamsFormatConverter):
    """GRU: ``gates/kernel [in+H, 2H]`` (r, u), candidate input/hidden kernels and exact biases.

    >>> import numpy as np
    >>> conv = CudnnParamsFormatConverterGRU(1, 2, 3)
    >>> weights, biases = conv.opaque_to_tf_canonical(np.zeros(42))
    >>> [tuple(w.shape) for w in weights], [tuple(b.shape) for b in biases]
    ([(5, 4), (3, 2), (2, 2)], [(4,), (2,), (2,)])
    """

    _rnn_mode = CUDNN_GRU


class CudnnParamsFormatConverterTanh(CudnnParamsFormatConverter):
    """RNN-tanh: ``kernel = [W | R]^T`` ``[in+H, H]``, ``bias = bW + bR``.

    >>> import torch
    >>> conv = CudnnParamsFormatConverterTanh(1, 1, 1)
    >>> weights, biases = conv.opaque_to_tf_canonical(torch.tensor([2.0, 3.0, 0.5, 1.5]))
    >>> weights[0].tolist(), biases[0].tolist()
    ([[2.0], [3.0]], [2.0])
    >>> conv.tf_canonical_to_opaque(weights + biases).tolist()
    [2.0, 3.0, 1.0, 1.0]
    """

    _rnn_mode = CUDNN_RNN_TANH


class CudnnParamsFormatConverterRelu(CudnnParamsFormatConverter):
    """RNN-relu: the same transform as tanh. Under skip_input the kernel holds ``[I | R]^T``.

    >>> import torch
    >>> conv = CudnnParamsFormatConverterRelu(1, 2, 2, input_mode="skip_input")
    >>> weights, biases = conv.opaque_to_tf_canonical(torch.tensor([1.0, 2, 3, 4, 0, 0, 0, 0]))
    >>> weights[0].tolist()
    [[1.0, 0.0], [0.0, 1.0], [1.0, 3.0], [2.0, 4.0]]
    """

    _rnn_mode = CUDNN_RNN_RELU
