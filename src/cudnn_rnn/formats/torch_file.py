"""Files of ``torch.save``: the state_dict of one ``torch.nn.LSTM``, ``GRU`` or ``RNN``.

:func:`read_state` loads one with ``torch.load(weights_only=True)`` (never arbitrary objects),
from a regular file only; :func:`module_of_state` builds the ``torch.nn`` module a state_dict
describes, after every key, shape and dtype was checked against the module its layer-0 tensors
imply. Either raises :class:`TorchFileError` naming the file and what to do. (The module itself is
converted to our layer by :mod:`cudnn_rnn.formats.torch_nn`.)
"""

from __future__ import annotations

import pickle
import re
import warnings

import torch

from cudnn_rnn import files
from cudnn_rnn.core.spec import RNNSpec
from cudnn_rnn.files import clip, first_line, listed
from cudnn_rnn.formats.torch_nn import torch_state_shapes

__all__ = ["TorchFileError", "module_of_state", "read_state"]


class TorchFileError(files.FormatError):
    """A torch file that is not the readable state_dict of one ``torch.nn`` RNN module."""


#: The floating dtypes a model's tensors may have (what every converter casts from).
_FLOATING = (torch.float16, torch.bfloat16, torch.float32, torch.float64)
_TORCH_KEY = re.compile(
    r"^(?:weight_ih|weight_hh|bias_ih|bias_hh|weight_hr)_l(\d{1,9})(?:_reverse)?$"
)
_GATES_MODE = {4: "lstm", 3: "gru", 1: "rnn_tanh"}


def read_state(path: str) -> dict[str, torch.Tensor]:
    """The state_dict in the torch file ``path`` (zip or legacy pickle), names to tensors, on the
    CPU. Only a regular file is opened (:class:`cudnn_rnn.files.NotRegularFile`)."""
    with files.open_regular(path) as f, warnings.catch_warnings():
        # A corrupt file can make torch's unpickler warn on its way to refusing it; the CLI's
        # answer is the one line below, not the warning.
        warnings.simplefilter("ignore")
        try:
            state = torch.load(f, map_location="cpu", weights_only=True)
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
    if not isinstance(state, dict) or not all(
        isinstance(k, str) and isinstance(v, torch.Tensor) for k, v in state.items()
    ):
        raise TorchFileError(f"{path}: not a torch state_dict (a dict of names to tensors).")
    return state


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
