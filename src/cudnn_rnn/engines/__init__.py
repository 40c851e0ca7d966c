"""The kernel dispatch point: which engine runs a call, chosen by rule, never by timing.

The rule looks only at what is fixed before the call runs (a :class:`~.base.Call`: the spec,
device, dtype, whether a gradient is needed, whether lengths are given, whether the call is
being traced, the dropout in force), so the operator's fake implementation knows what the engine
keeps for its backward pass. The first row that fits runs the call:

==============================  ==========================================================
CPU, float32, no projection,    ``native``: our C engine (the forward's input projection,
the native engine loaded;       both time loops and the backward's products), with or
cuDNN's math or any variant     without gradient, traced or not (:mod:`.native`; the
                                variants: :mod:`.native_variant`)
any other variant (CUDA, other  ``variant``: the variants beyond cuDNN's four modes
dtypes, a projection; with or   (:mod:`cudnn_rnn.core.variant`) in torch operators, the
without gradient)               backward by autograd on the forward run again (:mod:`.variant`)
CUDA, float16/32/64, cuDNN      ``cudnn``: cuDNN through aten's ``_cudnn_rnn`` and
available and enabled,          ``_cudnn_rnn_backward`` on the opaque buffer in place, with
projection narrower than        or without gradient, traced or not; cuDNN's own dropout
the cell (or none)              masks (:mod:`.cudnn`)
no gradient needed              ``torch``: torch's fused kernels (oneDNN or native on CPU,
                                cuDNN on CUDA), nothing kept (:mod:`.torch_kernels`)
gradient needed, CPU, LSTM,     ``onednn``: oneDNN's LSTM layer and its backward, as
float32, no projection, no      torch.nn.LSTM trains on CPU (:mod:`.onednn`); only when
sequence_lengths, not traced    the native engine is not loaded
gradient needed, otherwise      ``loop``: our time loop on torch operators with our own
                                back-propagation through time (:mod:`.loop`)
==============================  ==========================================================

"Traced" means the call is being compiled or exported. oneDNN's workspace has a length only
oneDNN knows, which a graph can only carry as a data-dependent size, and ``torch.compile``
without ``fullgraph`` breaks the graph there; so traced CPU calls keep our loop's workspace,
whose length follows from the shapes. cuDNN's reserve is such a size too, and CUDA has no other
fast engine, so traced CUDA calls take it: ``torch.compile(fullgraph=True)`` and
``torch.export`` carry it as a data-dependent size; without ``fullgraph`` the graph breaks at
the RNN, which then runs eagerly. The engines agree to float rounding (tests/test_operator.py,
tests/engines/test_native.py, tests/engines/test_cudnn_engine.py).

Bits across thread counts: ``native`` computes every element the same way on any number of
threads and at AVX2 and AVX-512 alike (tests/engines/test_same_bits.py), so a call gives the
same bits on 1 to 16 threads. ``cudnn`` repeats its bits call to call on one GPU
(tests/engines/test_cuda_engine.py); CPU threads play no part there. ``torch``, ``onednn``,
``loop`` and ``variant`` run MKL's or oneDNN's products, whose split of a sum across threads
follows the thread count: they repeat their bits at one thread count, and may differ in the
last place between counts. Those rows serve what the native engine does not (float64,
float16, bfloat16, projection on CPU, the variants, or the engine not built).

float64, float16 and bfloat16 on CPU, projection on CPU, bfloat16 on CUDA and CUDA without cuDNN
stay on torch's kernels and the loop. Set ``CUDNN_RNN_NATIVE=0`` to run CPU float32 calls on
the other rows as well; ``cudnn_rnn.cpu_engine()`` says which engine CPU float32 calls run.
Every engine has the entry points of :class:`~.base.Engine`; adding one is one module and one
row here.
"""

from __future__ import annotations

import torch

from cudnn_rnn.core.layout import layout_of
from cudnn_rnn.core.spec import RNNSpec
from cudnn_rnn.engines import cudnn, loop, native, onednn, torch_kernels, variant
from cudnn_rnn.engines.base import Call, Engine

#: The rule table, in the order of the module docstring: the first engine that supports a call
#: runs it (the last supports every call).
RULES: tuple[Engine, ...] = (
    native.ENGINE,
    variant.ENGINE,
    cudnn.ENGINE,
    torch_kernels.ENGINE,
    onednn.ENGINE,
    loop.ENGINE,
)

NATIVE = native.NAME
CUDNN = cudnn.NAME
TORCH = torch_kernels.ENGINE.name
ONEDNN = onednn.NAME
LOOP = loop.NAME
VARIANT = variant.NAME
ENGINES = tuple(e.name for e in RULES)


def engine_for(call: Call) -> Engine:
    """The engine that runs ``call``: the first row of the rule table that supports it."""
    for engine in RULES:
        if engine.supports(call):
            return engine
    raise AssertionError("the last rule supports every call")


def select(
    spec: RNNSpec,
    device: torch.device,
    dtype: torch.dtype,
    need_grad: bool,
    lengths: bool,
    traced: bool = False,
    dropout: float = 0.0,
) -> str:
    """The name of the engine for a call with these properties (see the table above)."""
    call = Call(layout_of(spec), device, dtype, 0, 0, need_grad, lengths, traced, dropout)
    return engine_for(call).name
