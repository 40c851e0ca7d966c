"""Model surgery: every torch.nn RNN and RNN cell of a model swapped for ours, or back.

:func:`replace_rnns` walks a model and puts, in place of each ``torch.nn.LSTM``, ``GRU``,
``RNN``, ``LSTMCell``, ``GRUCell`` and ``RNNCell`` (exactly those classes: a subclass may
change their forward, so it is left alone), the module of :mod:`cudnn_rnn.nn` of the same
configuration, with the same weights (the same ``Parameter`` objects, their values moved into
its one buffer), device, dtype, train/eval mode and ``requires_grad`` flags. The names of the
submodules and of their parameters do not change, so the model's ``state_dict`` keys stay the
same: existing checkpoints load, and an optimizer (or a hook) made before the swap holds the
parameters the new module trains. :func:`restore_rnns` is the inverse (for code that needs
torch.nn's own classes: ``torch.jit.script``, quantization).

>>> import torch, cudnn_rnn.nn
>>> model = torch.nn.Sequential(torch.nn.Embedding(10, 4), torch.nn.LSTM(4, 8, batch_first=True))
>>> keys = list(model.state_dict())
>>> model = cudnn_rnn.nn.replace_rnns(model)
>>> type(model[1]).__module__, list(model.state_dict()) == keys
('cudnn_rnn.nn.modules', True)
>>> type(cudnn_rnn.nn.restore_rnns(model)[1]) is torch.nn.LSTM
True
"""

from __future__ import annotations

from typing import Any, TypeVar

import torch
from torch import nn as tnn

from cudnn_rnn.nn import cells, modules

__all__ = ["is_rnn", "replace_rnns", "restore_rnns"]

#: torch.nn's classes and ours, pair by pair.
PAIRS: tuple[tuple[type[tnn.Module], type[tnn.Module]], ...] = (
    (tnn.LSTM, modules.LSTM),
    (tnn.GRU, modules.GRU),
    (tnn.RNN, modules.RNN),
    (tnn.LSTMCell, cells.LSTMCell),
    (tnn.GRUCell, cells.GRUCell),
    (tnn.RNNCell, cells.RNNCell),
)
OURS = {theirs: ours for theirs, ours in PAIRS}
THEIRS = {ours: theirs for theirs, ours in PAIRS}

M = TypeVar("M", bound=tnn.Module)


def is_rnn(module: object) -> bool:
    """Whether ``module`` is one of torch.nn's RNNs or cells, or one of ours."""
    return type(module) in OURS or type(module) in THEIRS


def _arguments(module: Any) -> tuple[dict[str, Any], torch.device, torch.dtype]:
    """The constructor arguments of a torch.nn RNN or cell (ours or torch's)."""
    first = next(module.parameters())
    kwargs: dict[str, Any] = {"input_size": module.input_size, "hidden_size": module.hidden_size}
    kwargs["bias"] = module.bias
    if hasattr(module, "num_layers"):  # the RNNs, not the cells
        kwargs.update(
            num_layers=module.num_layers, batch_first=module.batch_first,
            dropout=module.dropout, bidirectional=module.bidirectional,
        )  # fmt: skip
        if module.proj_size:
            kwargs["proj_size"] = module.proj_size
    if hasattr(module, "nonlinearity"):
        kwargs["nonlinearity"] = module.nonlinearity
    return kwargs, first.device, first.dtype


def _swapped(module: tnn.Module, to: type[tnn.Module]) -> tnn.Module:
    """``module``'s replacement of class ``to``, holding ``module``'s own Parameter objects
    (an optimizer or a hook that holds them keeps working), their values in its storage."""
    kwargs, device, dtype = _arguments(module)
    with torch.device("meta"):  # no random numbers drawn, no memory: the values come next
        new = to(**kwargs, dtype=dtype)
    new = new.to_empty(device=device)
    old = dict(module.named_parameters(recurse=False))
    if list(old) != [name for name, _ in new.named_parameters(recurse=False)]:
        raise RuntimeError(  # (our classes mirror torch.nn's names: a bug, not bad input)
            f"replace_rnns: {type(new).__name__} names its parameters "
            f"{[n for n, _ in new.named_parameters()]}, {type(module).__name__} {list(old)}"
        )
    with torch.no_grad():
        for name, param in old.items():
            param.data = param.detach().clone()  # its own storage, not the old module's buffer
            setattr(new, name, param)
    # The module's list of its weights made again (the RNNs); ours: the values into the one
    # buffer, each parameter its view.
    init = getattr(new, "_init_flat_weights", None) or getattr(new, "flatten_parameters", None)
    if init is not None:
        init()
    new.train(module.training)
    return new


def _swap_all(model: M, table: dict[type[tnn.Module], type[tnn.Module]]) -> M:
    if type(model) in table:
        return _swapped(model, table[type(model)])  # type: ignore[return-value]
    for parent in list(model.modules()):
        for name, child in list(parent.named_children()):
            if type(child) in table:
                setattr(parent, name, _swapped(child, table[type(child)]))
    return model


def replace_rnns(model: M) -> M:
    """Every torch.nn RNN and RNN cell of ``model`` replaced in place by ours (see the module);
    returns ``model`` (or, where ``model`` itself is one, its replacement)."""
    return _swap_all(model, OURS)


def restore_rnns(model: M) -> M:
    """The inverse of :func:`replace_rnns`: ours replaced by torch.nn's, in place."""
    return _swap_all(model, THEIRS)
