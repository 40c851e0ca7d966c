"""What every layer of :mod:`cudnn_rnn.layers` shares: ``_CudnnRNN``, an ``nn.Module`` that owns
its opaque kernel (the construction and its checks, the lazy build and its initialisation, the
call through :mod:`cudnn_rnn.ops`, the Keras-style weights and config, the state dict and
pickling); :mod:`cudnn_rnn.layers` has the four public classes, their documentation and the
mode table. The contract (shapes, build, initialisation) is that module's docstring.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np
import torch
from torch import Tensor, nn
from torch.nn.parameter import UninitializedParameter, is_lazy
from torch.nn.utils.rnn import PackedSequence
from typing_extensions import Self

from cudnn_rnn import ops, unbuilt
from cudnn_rnn.core.constants import (
    CUDNN_INPUT_LINEAR_MODE,
    CUDNN_LSTM,
    CUDNN_RNN_UNIDIRECTION,
)
from cudnn_rnn.core.layout import layout_of
from cudnn_rnn.core.spec import (
    RNNSpec,
    SpecProperties,
    check_input_mode,
    check_int,
    check_variant_mode,
)
from cudnn_rnn.core.variant import CUDNN, Variant
from cudnn_rnn.initializers import glorot_uniform
from cudnn_rnn.ops import PaddedOrPacked
from cudnn_rnn.validation import check_dtype

if TYPE_CHECKING:
    from cudnn_rnn.saveable.saveables import CudnnOpaqueParamsSaveable

__all__: list[str] = []

Initializer = Callable[[tuple[int, ...]], Any]


class _CudnnRNN(nn.Module, SpecProperties):
    """Base of the layer classes; the mode is class data, the code is shared."""

    _rnn_mode: ClassVar[str]
    _op_cls: ClassVar[type[ops._CudnnRNN]]
    _saveable_cls_name: ClassVar[str]
    opaque_kernel: nn.Parameter

    def __init__(
        self,
        num_layers: int,
        num_units: int,
        input_mode: str = CUDNN_INPUT_LINEAR_MODE,
        direction: str = CUDNN_RNN_UNIDIRECTION,
        dropout: float = 0.0,
        seed: int | None = None,
        dtype: torch.dtype | str = torch.float32,
        kernel_initializer: Initializer | None = None,
        bias_initializer: Initializer | None = None,
        name: str | None = None,
        *,
        input_size: int | None = None,
        num_proj: int | None = None,
        scope: str | None = None,
        device: torch.device | str | None = None,
        variant: Variant | None = None,
    ) -> None:
        """Configure the layer; its parameter is sized and initialised at the build (see the
        module: now with ``input_size``, else on the first call). The four layer classes share
        this constructor; ``CudnnGRU``, ``CudnnRNNTanh`` and ``CudnnRNNRelu`` take no ``num_proj``.

        Args:
            num_layers: ``L``, the number of stacked layers: an int >= 1.
            num_units: ``H``, the hidden size of every layer and direction: an int >= 1.
            input_mode: ``"linear_input"`` (``CUDNN_INPUT_LINEAR_MODE``, the default),
                ``"skip_input"`` (``CUDNN_INPUT_SKIP_MODE``) or ``"auto_select"``
                (``CUDNN_INPUT_AUTO_MODE``): whether layer 0 multiplies its input by matrices
                ``W`` (linear), adds it to every gate as is (skip: no input matrices, and the
                build requires ``input_size == num_units``), or skips exactly when the input
                size is ``num_units`` (auto).
            direction: ``"unidirectional"`` (``CUDNN_RNN_UNIDIRECTION``, the default) or
                ``"bidirectional"`` (``CUDNN_RNN_BIDIRECTION``: ``D = 2``, each layer's output
                the forward then the backward direction's).
            dropout: the probability in ``[0, 1]`` of zeroing each output of a layer before the
                next layer takes it, in training only (so without effect for one layer); default
                0.
            seed: an int makes the initial values and the dropout masks reproducible (drawn
                from generators of the layer's own); None (the default) draws the initial values
                from torch's global RNG and the masks' seed from the OS.
            dtype: the parameter's dtype: ``torch.float16``, ``torch.bfloat16``,
                ``torch.float32`` (the default) or ``torch.float64``, or its name
                (``"float32"``).
            kernel_initializer: ``f(shape) -> tensor or array``, called once per canonical
                weight matrix (input, recurrent and projection matrices) at the build; its result
                is converted to ``dtype``. Default (None): Glorot-uniform per matrix.
            bias_initializer: the same for each canonical bias vector ``[H]`` (``bW`` and
                ``bR`` of every gate). Default (None): zeros.
            name: the layer's name: :attr:`name`, and its saveable's
                ``<name>/opaque_kernel_saveable``. Default: the class name in snake case
                (``"cudnn_lstm"``).
            input_size: (keyword) ``I``, the inputs' last dimension: builds the layer now rather
                than on the first call. Default None.
            num_proj: (keyword; ``CudnnLSTM`` only) ``P``, the size of the recurrent
                projection ``h = W_proj (o * tanh(c))``, an int in ``[1, num_units]``. Default
                None: no projection.
            variant: (keyword) what the layer computes beyond its mode's cuDNN math
                (:class:`~cudnn_rnn.core.variant.Variant`: a GRU's reset gate before the
                product, other activations, peepholes, clips, coupled gates, reverse time, how
                the directions merge). Default None: cuDNN's own. A variant runs on the
                ``variant`` engine (any device, with training); our ``.safetensors``
                checkpoints hold it, TF1's (TF's cuDNN-compatible cells) cannot.
            scope: (keyword) the variable scope that prefixes the names of the TF canonical
                checkpoint (:attr:`saveable`, :mod:`cudnn_rnn.checkpoint`). Default None: the
                names start with ``rnn/`` (``stack_bidirectional_rnn/`` when bidirectional).
            device: (keyword) where the parameter is made. Default None: torch's default
                device.

        Raises:
            TypeError: an argument of the wrong type: a size that is not an int (``True`` and
                ``2.0`` included), a mode, direction or scope that is not a str, a dtype that
                is not a ``torch.dtype``, an initializer that is not callable.
            ValueError: a value out of range: ``num_layers``, ``num_units`` or ``num_proj``
                below 1, ``num_proj > num_units``, an ``input_mode`` or ``direction`` not
                among the constants, ``dropout`` outside ``[0, 1]``, a dtype other than the
                four, ``"skip_input"`` with ``input_size != num_units`` (at the build where
                the input size comes then), an initializer's result of the wrong shape (at the
                build).
        """
        super().__init__()
        cls = type(self).__name__
        # Validate everything now, with a placeholder input size (the real one comes at build).
        self._base_spec = RNNSpec(
            self._rnn_mode,
            num_layers,
            num_units,
            1 if input_size is None else input_size,
            CUDNN_INPUT_LINEAR_MODE if input_size is None else input_mode,
            direction,
            num_proj,
            dropout,
            CUDNN if variant is None else variant,
            owner=cls,
        )
        check_variant_mode(cls, self._rnn_mode, self._base_spec)
        self._input_mode = check_input_mode(cls, input_mode)
        dtype = check_dtype(cls, dtype)
        if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int)):
            raise TypeError(
                f"{cls}: seed must be an int or None, got {type(seed).__name__} {seed!r}."
            )
        for arg, value in (
            ("kernel_initializer", kernel_initializer),
            ("bias_initializer", bias_initializer),
        ):
            if value is not None and not callable(value):
                raise TypeError(
                    f"{cls}: {arg} must be a callable from a shape to a tensor, got "
                    f"{type(value).__name__}."
                )
        if scope is not None and not isinstance(scope, str):
            raise TypeError(f"{cls}: scope must be a str or None, got {type(scope).__name__}.")
        self._seed = seed
        self._kernel_initializer = kernel_initializer
        self._bias_initializer = bias_initializer
        self._name = name if name is not None else _snake(cls)
        self._scope = scope
        self._spec: RNNSpec | None = None
        self._op: ops._CudnnRNN | None = None
        self._saveable: CudnnOpaqueParamsSaveable | None = None
        # Counts the calls with dropout (call k draws the masks of seed k). A CPU tensor on
        # every device (the seed is read on the host: no GPU synchronisation) and no buffer:
        # not in state_dict, not moved by .to(), and not broadcast by DistributedDataParallel,
        # whose NCCL backend refuses CPU tensors (every replica counts the same calls).
        self._dropout_step = torch.zeros((), dtype=torch.int64)
        # Registered now, sized by the build: an optimizer or DDP made before then sees it.
        self.opaque_kernel = UninitializedParameter(  # type: ignore[call-arg,assignment]
            device=device, dtype=dtype
        )  # (torch's stub has neither these arguments nor the Parameter base)
        if input_size is not None:
            self.build((None, None, input_size))

    # -- build ----------------------------------------------------------------------------------
    @property
    def built(self) -> bool:
        return self._spec is not None

    def build(self, input_shape: Sequence[int | None] | torch.Size) -> None:
        """Size and initialise ``opaque_kernel`` for inputs ``[T, B, input_size]``, in place, in
        its dtype and on its device (those of the constructor or of a later ``.to()``); no-op if
        built."""
        if self._spec is not None:
            return
        cls = type(self).__name__
        shape = tuple(input_shape)
        if len(shape) != 3:
            raise ValueError(f"{cls}: expecting input_shape with 3 dims, got {len(shape)}.")
        if shape[-1] is None:
            raise ValueError(
                f"{cls}: the last dimension of the inputs should be defined. Found `None`."
            )
        size = check_int(cls, "input_size", shape[-1], 1)
        spec = self._base_spec.with_input(size, self._input_mode, owner=cls)
        kernel = self.opaque_kernel
        dtype = kernel.dtype
        op = self._op_cls(
            spec.num_layers,
            spec.num_units,
            spec.input_size,
            spec.input_mode,
            spec.direction,
            dtype,
            spec.dropout,
            self._seed,
            **({"num_proj": spec.num_proj} if spec.num_proj is not None else {}),
            variant=spec.variant,
        )._retyped(dtype, cls)
        weights, biases = self._initial_canonical(spec, dtype)
        opaque = op.canonical_to_params(weights, biases)
        # Everything that can refuse has run: the layer is built only now, the same object.
        with torch.no_grad():
            if is_lazy(kernel):
                kernel.materialize(opaque.shape)
            else:  # torch's swap_module_params_on_conversion turns it into an empty Parameter
                kernel.data = kernel.new_empty(opaque.shape)
            kernel.copy_(opaque)
        self._spec, self._op = spec, op

    def _initial_canonical(
        self, spec: RNNSpec, dtype: torch.dtype
    ) -> tuple[list[Tensor], list[Tensor]]:
        layout = layout_of(spec)
        # A seed gives a generator of its own; without one, torch's global RNG as torch.nn does.
        gen = torch.Generator().manual_seed(self._seed) if self._seed is not None else None

        def glorot(shape: tuple[int, ...]) -> Tensor:
            return glorot_uniform(shape, dtype, gen)

        def made(
            init: Initializer | None,
            default: Callable[[tuple[int, ...]], Tensor],
            shape: tuple[int, ...],
            what: str,
        ) -> Tensor:
            if init is None:
                return default(shape)
            value = init(shape)
            t = (
                torch.as_tensor(value).to(dtype)
                if not isinstance(value, Tensor)
                else (value.detach().to(dtype))
            )
            if tuple(t.shape) != shape:
                raise ValueError(
                    f"{type(self).__name__}: {what} returned shape "
                    f"{tuple(t.shape)} for shape {shape}."
                )
            return t.cpu()

        weights = [
            torch.eye(p.shape[0], dtype=dtype)
            if p.offset is None
            else made(self._kernel_initializer, glorot, p.shape, "kernel_initializer")
            for p in layout.weights
        ]
        biases = [
            made(
                self._bias_initializer,
                lambda s: torch.zeros(s, dtype=dtype),
                p.shape,
                "bias_initializer",
            )
            for p in layout.biases
        ]
        return weights, biases

    def _built_spec(self, what: str, error: type[Exception] = RuntimeError) -> RNNSpec:
        if self._spec is None:
            raise error(
                f"{type(self).__name__}.{what} invoked before input shape is known; "
                "call the layer once, call build(input_shape) or pass input_size."
            )
        return self._spec

    # -- properties of the original --------------------------------------------------------------

    def _described_spec(self) -> RNNSpec:
        return self._base_spec  # known before build; its input_mode is a placeholder till then

    @property
    def input_mode(self) -> str:
        return self._input_mode

    @property
    def seed(self) -> int | None:
        return self._seed

    @property
    def name(self) -> str:
        return self._name

    @property
    def dtype(self) -> torch.dtype:
        """The parameter's dtype (the constructor's, then following ``.to(dtype)``)."""
        return self.opaque_kernel.dtype

    @property
    def input_size(self) -> int:
        if self._spec is None:
            raise ValueError("'input_size' is unknown since layer has not been built.")
        return self._spec.input_size

    @property
    def spec(self) -> RNNSpec:
        return self._built_spec("spec")

    @property
    def canonical_weight_shapes(self) -> list[tuple[int, ...]]:
        """Shapes of the canonical weights, in canonical order (tuples, as the original)."""
        return [p.shape for p in layout_of(self._built_spec("canonical_weight_shapes")).weights]

    @property
    def canonical_bias_shapes(self) -> list[list[int]]:
        """Shapes of the canonical biases (lists ``[H]``, as the original); known before build."""
        b = self._base_spec
        per = 2 * b.num_gates + (3 if b.variant.peepholes else 0)
        return [[b.num_units] for _ in range(b.num_layers * b.num_dirs * per)]

    def state_shape(self, batch_size: int) -> tuple[list[int], ...]:
        """Shapes of the initial state tuple for ``batch_size``."""
        b = self._base_spec
        h = [b.num_states, batch_size, b.output_units]
        return (h, [b.num_states, batch_size, b.num_units]) if b.mode == CUDNN_LSTM else (h,)

    @property
    def saveable(self) -> CudnnOpaqueParamsSaveable:
        """The canonical-format saveable bound to ``opaque_kernel`` (scope: the ``scope`` given).

        A variant's saveable serves our ``.safetensors`` checkpoints (the variant in their
        metadata, an LSTM's peepholes as ``w_i_diag, w_f_diag, w_o_diag``); its ``specs``, what
        TF's saver writes for TF's cuDNN-compatible cells, refuse it, as
        ``checkpoint.save(..., format="tf1")`` does."""
        spec = self._built_spec("saveable")
        from cudnn_rnn.saveable import saveables as saveable_module

        if self._saveable is None or self._saveable.opaque_params is not self.opaque_kernel:
            cls: type[CudnnOpaqueParamsSaveable] = getattr(saveable_module, self._saveable_cls_name)
            self._saveable = cls(
                self.opaque_kernel,
                spec.num_layers,
                spec.num_units,
                spec.input_size,
                spec.input_mode,
                spec.direction,
                scope=self._scope,
                name=f"{self._name}/opaque_kernel_saveable",
                **({"num_proj": spec.num_proj} if spec.num_proj is not None else {}),
                variant=spec.variant,
            )
        return self._saveable

    # -- forward --------------------------------------------------------------------------------
    def forward(
        self,
        inputs: PaddedOrPacked,
        initial_state: tuple[Tensor, ...] | None = None,
        sequence_lengths: Any = None,
        time_major: bool = True,
        training: bool | None = None,
    ) -> tuple[PaddedOrPacked, tuple[Tensor, ...]]:
        """Run the stack; returns ``(outputs, (h, c))`` for LSTM, ``(outputs, (h,))`` otherwise.

        ``inputs`` may be a ``PackedSequence``: the outputs are then one too (with the input's
        batch sizes and order), and the states are in the original batch order, as torch.nn.
        (To a type checker: a ``Tensor`` in gives ``tuple[Tensor, tuple[Tensor, ...]]``, a
        ``PackedSequence`` gives ``tuple[PackedSequence, tuple[Tensor, ...]]``.)
        """
        cls = type(self).__name__
        if initial_state is not None and not isinstance(initial_state, tuple):
            raise TypeError(
                f"{cls}: invalid initial_state type: {type(initial_state).__name__}, "
                "expecting tuple."
            )
        packed = isinstance(inputs, PackedSequence)
        if not packed and not isinstance(inputs, Tensor):
            raise TypeError(
                f"{cls}: inputs must be a torch.Tensor or a PackedSequence, got "
                f"{type(inputs).__name__}."
            )
        data = inputs.data if isinstance(inputs, PackedSequence) else inputs
        if not self.built:
            if torch.compiler.is_compiling():
                unbuilt.refuse_under_compile(cls)
            if not packed and data.dim() != 3:
                raise ValueError(
                    f"{cls}: expecting inputs with 3 dims, got shape {tuple(data.shape)}."
                )
            self.build((None, None, data.shape[-1]))
        if training is None:
            training = self.training
        kernel = self.opaque_kernel
        op = self._op_for(kernel.dtype)
        if initial_state is None and sequence_lengths is None:  # the common call, planned
            planned = op._forward_zero_state(inputs, kernel, training, time_major)
            if planned is not None:
                y, h_n, c_n = planned
                return y, ((h_n, c_n) if c_n is not None else (h_n,))
        spec = op.spec
        n_states = 2 if spec.mode == CUDNN_LSTM else 1
        if initial_state is None:
            if isinstance(inputs, PackedSequence):
                batch = int(inputs.batch_sizes[0]) if inputs.batch_sizes.numel() else 0
            else:
                batch = data.shape[1 if time_major else 0] if data.dim() == 3 else 0
            initial_state = tuple(
                data.new_zeros(shape, dtype=kernel.dtype) for shape in self.state_shape(batch)
            )
        elif len(initial_state) != n_states:
            raise ValueError(
                f"{cls}: initial_state must be a tuple of {n_states} tensor(s) "
                f"({'(h, c)' if n_states == 2 else '(h,)'}), got "
                f"{len(initial_state)}."
            )
        h = initial_state[0]
        c = initial_state[1] if n_states == 2 else None
        out, h_n, c_n = op._forward(
            inputs,
            h,
            c,
            kernel,
            training,
            sequence_lengths,
            time_major,
            dropout_step=self._dropout_step,
        )
        return out, ((h_n, c_n) if c_n is not None else (h_n,))

    if TYPE_CHECKING:  # torch types Module.__call__ as returning Any; calling it is forward
        __call__ = forward

    def _op_for(self, dtype: torch.dtype) -> ops._CudnnRNN:
        assert self._op is not None
        if self._op.dtype != dtype:  # after .to(dtype): same math and generators, new dtype
            self._op = self._op._retyped(dtype, type(self).__name__)
        return self._op

    # -- Keras-style helpers ----------------------------------------------------------------------
    def get_weights(self) -> list[np.ndarray]:
        """``[opaque_kernel]`` as a NumPy array (float32 for bfloat16, which NumPy lacks)."""
        self._built_spec("get_weights")
        w = self.opaque_kernel.detach().cpu()
        return [(w.float() if w.dtype == torch.bfloat16 else w).numpy().copy()]

    def set_weights(self, weights: Sequence[Any]) -> None:
        """Set ``opaque_kernel`` in place from ``[array]`` (as ``get_weights`` returns)."""
        spec = self._built_spec("set_weights")
        cls = type(self).__name__
        if isinstance(weights, (Tensor, np.ndarray)) or len(weights) != 1:
            got = "an array" if isinstance(weights, (Tensor, np.ndarray)) else f"{len(weights)}"
            raise ValueError(
                f"{cls}: set_weights expects a list of 1 array (the opaque kernel), got {got}."
            )
        value = torch.as_tensor(
            np.asarray(weights[0]) if not isinstance(weights[0], Tensor) else weights[0]
        )
        size = layout_of(spec).size
        if tuple(value.shape) != (size,):
            raise ValueError(
                f"{cls}: set_weights expects an array of shape ({size},), got {tuple(value.shape)}."
            )
        with torch.no_grad():
            self.opaque_kernel.copy_(value)

    def count_params(self) -> int:
        return layout_of(self._built_spec("count_params")).size

    def get_config(self) -> dict[str, Any]:
        """Constructor arguments (initializers are not serialisable and are left out)."""
        b = self._base_spec
        config: dict[str, Any] = {
            "num_layers": b.num_layers,
            "num_units": b.num_units,
            "input_mode": self._input_mode,
            "direction": b.direction,
            "dropout": b.dropout,
            "seed": self._seed,
            "dtype": str(self.dtype).replace("torch.", ""),
            "name": self._name,
            "input_size": self._spec.input_size if self._spec else None,
            "scope": self._scope,
        }
        if self._rnn_mode == CUDNN_LSTM:
            config["num_proj"] = b.num_proj
        if not b.variant.is_cudnn:
            config["variant"] = b.variant.as_dict()
        return config

    @classmethod
    def from_config(cls, config: Mapping[str, Any]) -> Self:
        config = dict(config)
        if isinstance(config.get("variant"), Mapping):
            config["variant"] = Variant.from_dict(config["variant"])
        return cls(**config)

    # -- checkpoint protocol (delegates to the saveable) -------------------------------------------
    def checkpoint_entries(self) -> dict[str, Tensor]:
        return self.saveable.checkpoint_entries()

    def checkpoint_shapes(self) -> dict[str, tuple[int | None, ...]]:
        return self.saveable.checkpoint_shapes()

    def checkpoint_load(self, tensors: Mapping[str, Tensor]) -> None:
        self.saveable.checkpoint_load(tensors)

    def checkpoint_spec(self) -> dict[str, Any]:
        return {**self.saveable.checkpoint_spec(), "kind": "layer", "layer": type(self).__name__}

    def extra_repr(self) -> str:
        b = self._base_spec
        size = self._spec.input_size if self._spec else "?"
        proj = f", num_proj={b.num_proj}" if b.num_proj else ""
        return (
            f"num_layers={b.num_layers}, num_units={b.num_units}, input_size={size}, "
            f"input_mode={self._input_mode!r}, direction={b.direction!r}, "
            f"dropout={b.dropout}{proj}"
            + (f", variant=<{b.variant.describe()}>" if not b.variant.is_cudnn else "")
        )

    # -- state_dict, pickle: the unbuilt layer's uninitialised parameter ---------------------------
    def _save_to_state_dict(
        self, destination: dict[str, Any], prefix: str, keep_vars: bool
    ) -> None:
        if is_lazy(self.opaque_kernel):  # it cannot be detached; torch's lazy modules save it so
            destination[prefix + "opaque_kernel"] = self.opaque_kernel
        else:
            super()._save_to_state_dict(destination, prefix, keep_vars)

    def _load_from_state_dict(
        self, state_dict: Mapping[str, Any], prefix: str, *args: Any, **kwargs: Any
    ) -> None:
        # An unbuilt layer is built from the stored buffer's length, then loaded by torch, in
        # place: the parameter an optimizer holds gets the values.
        value = state_dict.get(prefix + "opaque_kernel")
        lazy = isinstance(value, Tensor) and is_lazy(value)
        if lazy and self.built:
            raise RuntimeError(
                f"{type(self).__name__}: the state_dict's {prefix}opaque_kernel is uninitialised "
                "(saved from a layer that was not built) and this layer is built; load it into "
                "an unbuilt layer, or save the source layer after its first call."
            )
        if not self.built and isinstance(value, Tensor) and not lazy:
            self._build_from_size(int(value.numel()))
        super()._load_from_state_dict(state_dict, prefix, *args, **kwargs)

    def __getstate__(self) -> dict[str, Any]:
        state = dict(super().__getstate__())  # type: ignore[no-untyped-call]
        kernel = self.opaque_kernel
        if is_lazy(kernel):  # torch pickles an uninitialised parameter without dtype or device
            state["_lazy_kernel_like"] = (kernel.dtype, kernel.device)
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        like = state.pop("_lazy_kernel_like", None)
        super().__setstate__(state)  # type: ignore[no-untyped-call]
        if like is not None:
            dtype, device = like
            self.opaque_kernel.data = torch.empty(0, dtype=dtype, device=device)

    def _build_from_size(self, size: int) -> None:
        b = self._base_spec
        for candidate in (b.num_units, *self._sizes_solving(size)):
            try:
                spec = b.with_input(candidate, self._input_mode)
            except ValueError:
                continue
            if layout_of(spec).size == size:
                self.build((None, None, candidate))
                return
        raise ValueError(
            f"{type(self).__name__}: no input_size gives an opaque_kernel of {size} "
            "elements for this configuration."
        )

    def _sizes_solving(self, size: int) -> list[int]:
        # params_size is affine in input_size under linear_input: solve it from two points.
        b = self._base_spec
        at = [layout_of(b.with_input(i, CUDNN_INPUT_LINEAR_MODE)).size for i in (1, 2)]
        slope = at[1] - at[0]
        i, rem = divmod(size - at[0], slope)
        return [i + 1] if rem == 0 and i >= 0 else []


def _snake(name: str) -> str:
    out = []
    for i, ch in enumerate(name):
        if (
            ch.isupper()
            and i
            and (not name[i - 1].isupper() or (i + 1 < len(name) and name[i + 1].islower()))
        ):
            out.append("_")
        out.append(ch.lower())
    return "".join(out)
