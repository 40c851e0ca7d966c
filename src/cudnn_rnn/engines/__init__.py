"""The kernel dispatch point: which engine runs a call, chosen by rule, never by timing.

The rule looks only at what is fixed before the call runs (so the operator's fake
implementation knows the shapes of what the engine keeps for its backward pass):

==============================  ==========================================================
CPU, float32, no projection,    ``native``: our C engine (the forward's input projection
the native engine loaded        and both time loops; torch's GEMMs for the weight
                                gradients), with or without gradient, traced or not
                                (:mod:`.native`)
no gradient needed              ``torch``: torch's fused kernels (oneDNN or native on CPU,
                                cuDNN on CUDA), nothing kept (:mod:`cudnn_rnn.functional`)
gradient needed, CPU, LSTM,     ``onednn``: oneDNN's LSTM layer and its backward, as
float32, no projection, no      torch.nn.LSTM trains on CPU (:mod:`.onednn`); only when
sequence_lengths, not traced    the native engine is not loaded
gradient needed, otherwise      ``loop``: our time loop on torch operators with our own
                                back-propagation through time (:mod:`.loop`)
==============================  ==========================================================

"Traced" means the call is being compiled or exported: oneDNN's workspace has a length only
oneDNN knows, which a graph could only carry as a data-dependent size (a graph break in
``torch.compile`` without ``fullgraph``), so traced calls keep our loop's workspace, whose length
follows from the shapes. The native engine's workspace has the loop's layout (its length
follows from the shapes too). The engines agree to float32 rounding (tests/test_operator.py,
tests/test_native.py).

float64, float16 and bfloat16, projection and CUDA stay on torch's kernels and the loop.
Set ``CUDNN_RNN_NATIVE=0`` to run CPU float32 calls on the other rows as well;
``cudnn_rnn.cpu_engine()`` says which engine CPU float32 calls run.
"""

from __future__ import annotations

from typing import Any

import torch

from cudnn_rnn.core.constants import CUDNN_LSTM
from cudnn_rnn.core.spec import RNNSpec
from cudnn_rnn.engines import common, loop, native, onednn

TORCH = "torch"
ONEDNN = onednn.NAME
LOOP = loop.NAME
NATIVE = native.NAME
ENGINES = (NATIVE, TORCH, ONEDNN, LOOP)


def select(
    spec: RNNSpec,
    device: torch.device,
    dtype: torch.dtype,
    need_grad: bool,
    lengths: bool,
    traced: bool = False,
) -> str:
    """The engine for a call (see the table in this module's docstring)."""
    if native.supports(spec, device, dtype):
        return NATIVE
    if not need_grad:
        return TORCH
    if (
        not traced
        and device.type == "cpu"
        and spec.mode == CUDNN_LSTM
        and dtype == torch.float32
        and spec.num_proj is None
        and not lengths
        and onednn.available()
    ):
        return ONEDNN
    return LOOP


def workspace_numel(
    engine: str, spec: RNNSpec, steps: Any, batch: Any, need_grad: bool = True
) -> Any:
    """Length of the workspace the engine keeps for backward (symbolic sizes work)."""
    if not need_grad:
        return 0
    if engine == ONEDNN:
        return onednn.workspace_numel(spec, steps, batch)
    if engine in (LOOP, NATIVE):
        return common.workspace_numel(spec, steps, batch)
    return 0


def has_reserve(engine: str) -> bool:
    """Whether the engine keeps bytes whose length only the kernel knows (oneDNN's workspace)."""
    return engine == ONEDNN
