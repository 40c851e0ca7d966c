"""The saveables: TF canonical ("platform-independent") checkpoints of an opaque buffer.

``Cudnn{LSTM,GRU,RNNTanh,RNNRelu}Saveable``, as in ``tf.contrib.cudnn_rnn`` r1.15, give the
tensors of TF's compatible cells their full checkpoint names (built by
:mod:`cudnn_rnn.core.tf_names`: ``rnn/multi_rnn_cell/...`` for one direction,
``stack_bidirectional_rnn/...`` for two), save them, and restore a checkpoint *into* the opaque
``nn.Parameter`` in place. The values go through the format converter of the mode
(:mod:`cudnn_rnn.saveable.format_converters`), which says how the tensors are computed.

A saveable of a variant (``variant=``: a model that is not cuDNN's math,
:class:`~cudnn_rnn.core.variant.Variant`) serves our ``.safetensors`` checkpoints (the
:class:`~cudnn_rnn.checkpointable.Checkpointable` protocol: its entries, shapes, load and
``checkpoint_spec``, whose ``variant`` the metadata keeps), an LSTM's peepholes as three more
tensors ``w_i_diag, w_f_diag, w_o_diag`` per layer-direction. It has no TF checkpoint:
:attr:`specs`, what TF's saver writes for TF's cuDNN-compatible cells (cuDNN's math only),
refuses it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, ClassVar, NamedTuple

import numpy as np
import torch
from torch import Tensor

from cudnn_rnn.checkpointable import Shape
from cudnn_rnn.core.constants import (
    CUDNN_GRU,
    CUDNN_INPUT_LINEAR_MODE,
    CUDNN_LSTM,
    CUDNN_RNN_RELU,
    CUDNN_RNN_TANH,
    CUDNN_RNN_UNIDIRECTION,
)
from cudnn_rnn.core.layout import layout_of
from cudnn_rnn.core.spec import RNNSpec, SpecProperties, check_variant_mode
from cudnn_rnn.core.tf_names import CELL_NAMES, direction_name, variable_name
from cudnn_rnn.core.variant import CUDNN, Variant
from cudnn_rnn.saveable.format_converters import (
    CudnnParamsFormatConverter,
    CudnnParamsFormatConverterGRU,
    CudnnParamsFormatConverterLSTM,
    CudnnParamsFormatConverterRelu,
    CudnnParamsFormatConverterTanh,
    _as_tensor,
    _check_sequence,
    _describe,
    _TFParam,
)
from cudnn_rnn.validation import DTYPES

__all__ = [
    "CudnnGRUSaveable",
    "CudnnLSTMSaveable",
    "CudnnOpaqueParamsSaveable",
    "CudnnRNNReluSaveable",
    "CudnnRNNTanhSaveable",
    "SaveSpec",
]


class SaveSpec(NamedTuple):
    """One saved tensor, as ``saver.BaseSaverBuilder.SaveSpec`` (``slice_spec`` is always "")."""

    tensor: Tensor
    slice_spec: str
    name: str


class _Entry(NamedTuple):
    name: str  # full checkpoint name
    shape: tuple[int, ...]
    group: str  # which converter list it comes from: "weights", "biases" or "proj"
    position: int  # its position in that list


class CudnnOpaqueParamsSaveable(SpecProperties):
    """Saves an opaque buffer as TF canonical tensors and restores them into it (abstract).

    Subclasses set the mode as class data: ``_rnn_mode`` and ``_format_converter_cls``. Names
    are those of TF's compatible cells (:mod:`cudnn_rnn.core.tf_names`, ``_tf_canonical_names``):
    all weights, then all biases, layer 0 fw, layer 0 bw, layer 1 fw, ... ``num_proj`` is an
    extension (r1.15's saveables had none): each LSTM layer-direction's ``projection/kernel``
    ``[H, P]`` follows its kernel in the weight list.

    :meth:`restore` writes into ``opaque_params`` in place (an optimizer holding it keeps
    working). It also implements :class:`~cudnn_rnn.checkpointable.Checkpointable`.

    >>> import torch
    >>> opaque = torch.nn.Parameter(torch.zeros(56))
    >>> saveable = CudnnLSTMSaveable(opaque, 1, 2, 3, scope="main")
    >>> [(s.name, tuple(s.tensor.shape)) for s in saveable.specs]  # doctest: +NORMALIZE_WHITESPACE
    [('main/rnn/multi_rnn_cell/cell_0/cudnn_compatible_lstm_cell/kernel', (5, 8)),
     ('main/rnn/multi_rnn_cell/cell_0/cudnn_compatible_lstm_cell/bias', (8,))]
    """

    _rnn_mode: ClassVar[str]
    _format_converter_cls: ClassVar[type[CudnnParamsFormatConverter]]

    def __init__(
        self,
        opaque_params: Tensor,
        num_layers: int,
        num_units: int,
        input_size: int,
        input_mode: str = CUDNN_INPUT_LINEAR_MODE,
        direction: str = CUDNN_RNN_UNIDIRECTION,
        scope: str | None = None,
        name: str = "cudnn_rnn_saveable",
        *,
        num_proj: int | None = None,
        variant: Variant | None = None,
    ) -> None:
        """Bind the saveable to ``opaque_params``; TF's argument order. The four saveable
        classes share this constructor; the base is abstract.

        Args:
            opaque_params: the opaque buffer saved and restored in place: a 1-D tensor (an
                ``nn.Parameter``, e.g. a layer's ``opaque_kernel``) of ``params_size``
                elements for this configuration, float16, bfloat16, float32 or float64.
            num_layers: ``L``, the number of stacked layers: an int >= 1.
            num_units: ``H``, the hidden size of every layer and direction: an int >= 1.
            input_size: ``I``, the inputs' last dimension: an int >= 1.
            input_mode: ``"linear_input"`` (``CUDNN_INPUT_LINEAR_MODE``, the default),
                ``"skip_input"`` (``CUDNN_INPUT_SKIP_MODE``; needs ``input_size ==
                num_units``) or ``"auto_select"`` (``CUDNN_INPUT_AUTO_MODE``: skip when
                ``input_size == num_units``).
            direction: ``"unidirectional"`` (``CUDNN_RNN_UNIDIRECTION``, the default: names
                under ``rnn/multi_rnn_cell/``) or ``"bidirectional"``
                (``CUDNN_RNN_BIDIRECTION``: names under ``stack_bidirectional_rnn/``).
            scope: the variable scope that prefixes every name (``"main"`` gives
                ``main/rnn/...``; a trailing ``"/"`` is dropped). Default None: no prefix.
            name: the saveable's own name (TF's ``SaveableObject.name``, :attr:`name`); it
                is not part of the tensors' names. Default ``"cudnn_rnn_saveable"``.
            num_proj: (keyword; ``CudnnLSTMSaveable`` only) ``P``, the size of the recurrent
                projection, an int in ``[1, num_units]``; each layer-direction then saves a
                ``projection/kernel [H, P]``. Default None: no projection.
            variant: (keyword) what the model computes beyond the mode's cuDNN math
                (:class:`~cudnn_rnn.core.variant.Variant`): :meth:`checkpoint_spec` holds it,
                an LSTM's peepholes are saved too (``w_i_diag, w_f_diag, w_o_diag [H]`` after
                each layer-direction's bias), and :attr:`specs` (TF's saver) refuses it.
                Default None: cuDNN's own.

        Raises:
            TypeError: the abstract base class; ``opaque_params`` that is not a tensor or
                has another dtype than the four; an argument of the wrong type (a size that
                is not an int, a mode, direction, scope or name that is not a str).
            ValueError: ``opaque_params`` of another shape than ``[params_size]``; a value
                out of range: a size below 1, ``num_proj > num_units`` or ``num_proj`` for
                another mode than LSTM, an ``input_mode`` or ``direction`` not among the
                constants, ``"skip_input"`` with ``input_size != num_units``, a variant field
                the mode or direction does not have.
        """
        owner = type(self).__name__
        if not hasattr(self, "_rnn_mode"):
            raise TypeError(
                f"{owner} is abstract; use CudnnLSTMSaveable, CudnnGRUSaveable, "
                "CudnnRNNTanhSaveable or CudnnRNNReluSaveable."
            )
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
        if scope is not None and not isinstance(scope, str):
            raise TypeError(
                f"{owner}: scope must be a str or None, got {type(scope).__name__} {scope!r}; "
                "pass the scope's name."
            )
        if not isinstance(name, str):
            raise TypeError(f"{owner}: name must be a str, got {type(name).__name__} {name!r}.")
        self._scope = scope.rstrip("/") if scope else ""
        self._name = name
        self._format_converter = self._format_converter_cls(
            num_layers,
            num_units,
            input_size,
            num_proj,
            input_mode=input_mode,
            direction=direction,
            variant=self._spec.variant,
        )
        self._opaque = self._check_opaque(opaque_params)
        self._entries = self._make_entries()

    def _check_opaque(self, opaque: object) -> Tensor:
        owner = type(self).__name__
        size = layout_of(self._spec).size
        if not isinstance(opaque, Tensor):
            raise TypeError(
                f"{owner}: opaque_params must be a 1-D torch.Tensor or nn.Parameter of "
                f"{size} elements, got {type(opaque).__name__}"
                f"{'; wrap it with torch.nn.Parameter' if isinstance(opaque, np.ndarray) else ''}."
            )
        if opaque.dtype not in DTYPES:
            raise TypeError(
                f"{owner}: opaque_params must have a float16, bfloat16, float32 or float64 "
                f"dtype, got {opaque.dtype}."
            )
        if tuple(opaque.shape) != (size,):
            raise ValueError(
                f"{owner}: opaque_params must be a 1-D buffer of {size} elements (the params_size "
                f"of {_describe(self._spec)}), got shape {tuple(opaque.shape)}."
            )
        return opaque

    # -- names ----------------------------------------------------------------------------------
    @property
    def _rnn_cell_name(self) -> str:
        """The cell scope of the names (TF's compatible cell of the mode)."""
        return CELL_NAMES[self._rnn_mode]

    def _full_name(self, p: _TFParam) -> str:
        """The full checkpoint name of one TF canonical tensor."""
        direction = direction_name(p.direction, self._spec.bidirectional)
        cell = self._rnn_cell_name
        return variable_name(p.layer, cell, p.name, direction=direction, scope=self._scope)

    def _make_entries(self) -> tuple[_Entry, ...]:
        conv = self._format_converter
        tagged = [
            (group, i, p)
            for group, table in (
                ("weights", conv._tf_weights),
                ("proj", conv._tf_proj),
                ("biases", conv._tf_biases),
            )
            for i, p in enumerate(table)
        ]
        # Weights, each layer-direction's projection right after its kernel (a stable sort: the
        # weights come before the projections in `tagged`), then biases.
        weights = [t for t in tagged if t[0] != "biases"]
        ordered = sorted(weights, key=lambda t: (t[2].layer, t[2].direction))
        ordered += [t for t in tagged if t[0] == "biases"]
        return tuple(_Entry(self._full_name(p), p.shape, g, i) for g, i, p in ordered)

    def _tf_canonical_names(self) -> list[str]:
        """Full checkpoint names, in save order: all weights, then all biases."""
        return [e.name for e in self._entries]

    # -- save / restore ---------------------------------------------------------------------------
    @property
    def specs(self) -> list[SaveSpec]:
        """The tensors TF's saver writes, computed from the current opaque values (detached).

        Refused for a variant (ValueError): they are the variables of TF's cuDNN-compatible
        cells, which compute cuDNN's math only; :meth:`checkpoint_entries` serves our
        ``.safetensors`` checkpoints, which hold the variant.
        """
        variant = self._spec.variant
        if not variant.is_cudnn:
            raise ValueError(
                f"{type(self).__name__}: specs are what TF's saver writes for TF's "
                f"cuDNN-compatible cells, which compute cuDNN's math only, and this model "
                f"computes a variant ({variant.describe()}): save it with "
                "cudnn_rnn.checkpoint.save to a .safetensors file, which holds the variant."
            )
        return self._save_specs()

    def _save_specs(self) -> list[SaveSpec]:
        with torch.no_grad():
            converted = self._format_converter.opaque_to_tf_canonical(self._opaque.detach())
        groups = dict(zip(("weights", "biases", "proj"), converted))
        return [SaveSpec(groups[e.group][e.position], "", e.name) for e in self._entries]

    def restore(
        self,
        restored_tensors: Sequence[Tensor | np.ndarray],
        restored_shapes: Sequence[Any] | None = None,
    ) -> None:
        """Write TF canonical tensors (in :attr:`specs` order) into the opaque buffer in place.

        ``restored_shapes`` is accepted for TF's signature and not used: the shapes are checked
        against the expected ones. Everything is checked and converted before the one write, so
        an error leaves the parameter unchanged.
        """
        del restored_shapes
        owner = type(self).__name__
        given = list(_check_sequence(owner, "restored_tensors", restored_tensors))
        if len(given) != len(self._entries):
            raise ValueError(
                f"{owner}: expected {len(self._entries)} restored tensors (one per entry of "
                f"specs, in that order) for {_describe(self._spec)}, got {len(given)}."
            )
        opaque = self._opaque
        tensors = [
            _as_tensor(owner, f"restored_tensors[{i}] ({e.name})", t)
            for i, (e, t) in enumerate(zip(self._entries, given))
        ]
        bad = [
            f"{e.name} expected {e.shape}, got {tuple(t.shape)}"
            for e, t in zip(self._entries, tensors)
            if tuple(t.shape) != e.shape
        ]
        if bad:
            raise ValueError(f"{owner}: wrong shape of restored tensors: " + "; ".join(bad) + ".")
        # Back to the converter's lists: each entry knows its list and position there.
        groups: dict[str, list[Tensor]] = {"weights": [], "biases": [], "proj": []}
        for e, t in sorted(
            zip(self._entries, tensors), key=lambda et: (et[0].group, et[0].position)
        ):
            groups[e.group].append(t.to(device=opaque.device, dtype=opaque.dtype))
        with torch.no_grad():
            new = self._format_converter.tf_canonical_to_opaque(
                groups["weights"] + groups["biases"],
                groups["proj"] if self._spec.num_proj is not None else None,
            )
            # In place: the Parameter object (and an optimizer's reference to it) stays.
            opaque.copy_(new)

    # -- Checkpointable ---------------------------------------------------------------------------
    def checkpoint_entries(self) -> dict[str, Tensor]:
        """Full canonical name -> tensor to save (the :attr:`specs`; a variant's too)."""
        return {s.name: s.tensor for s in self._save_specs()}

    def checkpoint_shapes(self) -> dict[str, Shape]:
        """Full canonical name -> shape that :meth:`checkpoint_load` expects."""
        return {e.name: e.shape for e in self._entries}

    def checkpoint_load(self, tensors: Mapping[str, Tensor]) -> None:
        """Restore from a name -> tensor mapping; names of other objects are ignored."""
        owner = type(self).__name__
        if not isinstance(tensors, Mapping):
            raise TypeError(
                f"{owner}: checkpoint_load needs a mapping of name -> tensor, got "
                f"{type(tensors).__name__}."
            )
        missing = [e.name for e in self._entries if e.name not in tensors]
        if missing:
            raise ValueError(f"{owner}: missing tensors: {', '.join(missing)}.")
        self.restore([tensors[e.name] for e in self._entries])

    def checkpoint_spec(self) -> dict[str, Any]:
        """A JSON-able description of the saved model; ``variant`` (its changed fields,
        :meth:`~cudnn_rnn.core.variant.Variant.as_dict`) only where it is not cuDNN's math."""
        spec = self._spec
        described: dict[str, Any] = {
            "kind": "cudnn_saveable",
            "rnn_mode": spec.mode,
            "num_layers": spec.num_layers,
            "num_units": spec.num_units,
            "input_size": spec.input_size,
            "input_mode": spec.input_mode,
            "direction": spec.direction,
            "num_proj": spec.num_proj,
            "scope": self.scope,
        }
        if not spec.variant.is_cudnn:
            described["variant"] = spec.variant.as_dict()
        return described

    # -- properties -------------------------------------------------------------------------------
    @property
    def name(self) -> str:
        return self._name

    @property
    def scope(self) -> str | None:
        """The name prefix without its trailing "/"; None when names have no prefix."""
        return self._scope or None

    def _described_spec(self) -> RNNSpec:
        return self._spec

    @property
    def spec(self) -> RNNSpec:
        return self._spec

    @property
    def format_converter(self) -> CudnnParamsFormatConverter:
        return self._format_converter

    @property
    def opaque_params(self) -> Tensor:
        return self._opaque


class CudnnLSTMSaveable(CudnnOpaqueParamsSaveable):
    """LSTM checkpoints for ``CudnnCompatibleLSTMCell``: ``.../kernel`` and ``.../bias``.

    >>> import torch
    >>> opaque = torch.nn.Parameter(torch.zeros(104))
    >>> saveable = CudnnLSTMSaveable(opaque, 2, 2, 3)
    >>> saveable._tf_canonical_names()[1]
    'rnn/multi_rnn_cell/cell_1/cudnn_compatible_lstm_cell/kernel'
    >>> tensors = [torch.ones(s.tensor.shape) for s in saveable.specs]
    >>> saveable.restore(tensors)  # in place; every summed bias is halved
    >>> opaque[:3].tolist(), opaque[-1].item()
    ([1.0, 1.0, 1.0], 0.5)
    """

    _rnn_mode = CUDNN_LSTM
    _format_converter_cls: ClassVar[type[CudnnParamsFormatConverter]] = (
        CudnnParamsFormatConverterLSTM
    )


class CudnnGRUSaveable(CudnnOpaqueParamsSaveable):
    """GRU checkpoints for ``CudnnCompatibleGRUCell``: ``gates/...`` and ``candidate/...``.

    >>> import torch
    >>> saveable = CudnnGRUSaveable(torch.zeros(42), 1, 2, 3, scope="m1/")
    >>> list(saveable.checkpoint_shapes().items())[:2]  # doctest: +NORMALIZE_WHITESPACE
    [('m1/rnn/multi_rnn_cell/cell_0/cudnn_compatible_gru_cell/gates/kernel', (5, 4)),
     ('m1/rnn/multi_rnn_cell/cell_0/cudnn_compatible_gru_cell/candidate/input_projection/kernel',
      (3, 2))]
    """

    _rnn_mode = CUDNN_GRU
    _format_converter_cls = CudnnParamsFormatConverterGRU


class CudnnRNNTanhSaveable(CudnnLSTMSaveable):
    """RNN-tanh checkpoints for ``BasicRNNCell``: ``basic_rnn_cell/kernel`` and ``.../bias``.

    >>> import torch
    >>> saveable = CudnnRNNTanhSaveable(torch.zeros(20), 1, 2, 1, direction="bidirectional")
    >>> saveable._tf_canonical_names()[:2]  # doctest: +NORMALIZE_WHITESPACE
    ['stack_bidirectional_rnn/cell_0/bidirectional_rnn/fw/basic_rnn_cell/kernel',
     'stack_bidirectional_rnn/cell_0/bidirectional_rnn/bw/basic_rnn_cell/kernel']
    """

    _rnn_mode = CUDNN_RNN_TANH
    _format_converter_cls: ClassVar[type[CudnnParamsFormatConverter]] = (
        CudnnParamsFormatConverterTanh
    )


class CudnnRNNReluSaveable(CudnnLSTMSaveable):
    """RNN-relu checkpoints for ``BasicRNNCell`` (names as RNN-tanh).

    >>> import torch
    >>> saveable = CudnnRNNReluSaveable(torch.zeros(4), 1, 1, 1)
    >>> saveable.checkpoint_spec()["rnn_mode"], saveable.rnn_mode, saveable.scope
    ('rnn_relu', 'rnn_relu', None)
    """

    _rnn_mode = CUDNN_RNN_RELU
    _format_converter_cls: ClassVar[type[CudnnParamsFormatConverter]] = (
        CudnnParamsFormatConverterRelu
    )
