"""TF1 checkpoints of TF's standard RNN cells, read as pure data.

Most TF1 models did not use ``CudnnLSTM``: they ran TF's step-by-step cells through
``dynamic_rnn`` and its relatives, and a ``tf.train.Saver`` wrote each cell's variables under its
scope. :func:`find_cells` finds those RNNs from a checkpoint's names and shapes alone (the index);
:func:`read_cells` reads one as cuDNN's canonical tensors (:class:`~cudnn_rnn.io.found.
ReadRNN`). The cells and their variables (``<cell>`` is the cell's own scope, ``K`` = input width
+ ``Hout``, ``Hout`` = ``num_proj`` or ``H``)::

    cell scope          TF class                         variables
    lstm_cell           LSTMCell, LSTMBlockCell          kernel [K, 4H], bias [4H],
                        (and LSTMBlockFusedCell of        LSTMCell: projection/kernel [H, P],
                        some TF 1.x releases)            peepholes w_f_diag, w_i_diag, w_o_diag [H]
    basic_lstm_cell     BasicLSTMCell                    kernel [K, 4H], bias [4H]
    lstm_fused_cell     LSTMBlockFusedCell               kernel [K, 4H], bias [4H]
    lstm_block_wrapper  LSTMBlockFusedCell (early 1.x)   kernel [K, 4H], bias [4H]
    basic_rnn_cell      BasicRNNCell                     kernel [K, H], bias [H]
    gru_cell            GRUCell, GRUBlockCellV2          gates/kernel [K, 2H], gates/bias [2H],
                                                         candidate/kernel [K, H],
                                                         candidate/bias [H]
    gru_cell            GRUBlockCell                     w_ru [K, 2H], b_ru [2H],
                                                         w_c [K, H], b_c [H]

TF 1.0 named every ``kernel`` ``weights`` and every ``bias`` ``biases`` (``projection/weights``,
``gates/biases``, ...); both generations are read. How the variables become cuDNN's canonical
tensors (one bias per gate as the input bias, TF's gate orders, ``forget_bias``, the peepholes) is
:mod:`~cudnn_rnn.io.tf1.cell_blocks`.

Where the cells sit (``<c>`` a cell scope and its variables as above)::

    one cell              <S>/<c>/...                   dynamic_rnn (S = rnn, or its scope)
    MultiRNNCell          <P>/multi_rnn_cell/cell_<l>/<c>/...
    bidirectional pair    <Q>/fw/<unit>, <Q>/bw/<unit>   bidirectional_dynamic_rnn (Q =
                                                         bidirectional_rnn, or its scope)
    stacked pairs         <R>/cell_<l>/bidirectional_rnn/{fw,bw}/<c>/...
                          (static: <R>/cell_<l>/{fw,bw}/<c>/...)   stack_bidirectional_*_rnn

A ``MultiRNNCell`` is one record of its ``num_layers``; a fw/bw pair one bidirectional record; the
stacked pairs one bidirectional record of one layer per ``cell_<l>``, which is cuDNN's
bidirectional stack exactly (layer ``l + 1`` reads both directions' outputs of layer ``l``).

What TF computes beyond cuDNN's math is read as a variant of the mode
(:class:`~cudnn_rnn.core.variant.Variant`), which the record's notes and ``details["variant"]``
say: LSTM cells with peepholes (``w_i_diag, w_f_diag, w_o_diag``: ``peepholes``; in a stack where
only some cells have them, the others' are zero), the GRU cells (TF applies the reset gate to the
state before the recurrent product: ``reset_after=False``), and a pair whose directions are each
a ``MultiRNNCell`` of several layers (each direction runs its own stack, merged at the top:
``stacks="separate"``). What the cells computed and the checkpoint does not store, ``read_cells``
takes as options, and the record's notes say so: ``forget_bias``, ``cell_clip``, ``proj_clip``
and the activation. An RNN whose tensors are not all of one float dtype (an int32 or string
kernel: the dtypes are the reason, where the index's dtypes are given) is listed as one that
cannot be read, which :func:`read_cells` refuses with the same reason.

Names that are something else are not read as cells: an optimizer's slots and moving averages
(``.../kernel/Adam``: a further component after a variable's name), ``global_step``,
``beta1_power``. A cell scope holding a variable no TF cell has (a Keras cell's
``recurrent_kernel``) is not a TF cell, and left to other readers. So are the names of
``tf.contrib.cudnn_rnn``'s saveables, which :func:`cudnn_rnn.io.detect.detect_models`
interprets: a ``MultiRNNCell`` of ``BasicRNNCell`` run by ``dynamic_rnn``
(``rnn/multi_rnn_cell/cell_<l>/basic_rnn_cell/...``) has exactly the names of ``CudnnRNNTanh``'s
saveable, and the stacked pairs of ``BasicRNNCell`` those of its bidirectional one; every group of
names that ``detect_models`` interprets is skipped here, so no RNN is listed twice.

Four modules read them: :mod:`~cudnn_rnn.io.tf1.cell_kinds` finds the cell scopes and reads each
cell's sizes by its kind, :mod:`~cudnn_rnn.io.tf1.cell_stacks` groups the cells into RNNs,
:mod:`~cudnn_rnn.io.tf1.cell_blocks` turns one cell's variables into canonical tensors, and this
one says what each RNN is (:func:`find_cells`) and reads one (:func:`read_cells`).

>>> found = find_cells({
...     "rnn/multi_rnn_cell/cell_0/lstm_cell/kernel": (7, 16),
...     "rnn/multi_rnn_cell/cell_0/lstm_cell/bias": (16,),
...     "rnn/multi_rnn_cell/cell_0/lstm_cell/kernel/Adam": (7, 16),
...     "rnn/multi_rnn_cell/cell_1/lstm_cell/kernel": (8, 16),
...     "rnn/multi_rnn_cell/cell_1/lstm_cell/bias": (16,),
...     "global_step": (),
... }, "tf1")
>>> [(f.name, f.mode, f.num_layers, f.num_units, f.input_size) for f in found]
[('rnn', 'lstm', 2, 4, 3)]
"""

from __future__ import annotations

import math
import numbers
import os
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

import numpy as np
import torch

from cudnn_rnn.core.constants import (
    CUDNN_GRU,
    CUDNN_LSTM,
    CUDNN_RNN_BIDIRECTION,
    CUDNN_RNN_TANH,
    CUDNN_RNN_UNIDIRECTION,
)
from cudnn_rnn.core.layout import layout_of
from cudnn_rnn.core.spec import RNNSpec
from cudnn_rnn.core.variant import ACTIVATIONS, CUDNN, Activation, Variant, activation_of
from cudnn_rnn.io import files
from cudnn_rnn.io.found import FoundRNN, ReadRNN
from cudnn_rnn.io.tf1 import bundle as tf1_bundle
from cudnn_rnn.io.tf1.cell_blocks import cell_blocks
from cudnn_rnn.io.tf1.cell_kinds import Cell
from cudnn_rnn.io.tf1.cell_stacks import Record, class_names, records_of

__all__ = [
    "ACTIVATION_NOTE",
    "FORGET_BIAS_NOTE",
    "GRU_NOT_STORED_NOTE",
    "LSTM_NOT_STORED_NOTE",
    "TF1CellsError",
    "find_cells",
    "read_cells",
]

#: What an LSTM's record says about ``forget_bias`` (``details["forget_bias"]``).
FORGET_BIAS_NOTE = (
    "forget_bias is not stored in a checkpoint: TF's default 1.0 is assumed; pass forget_bias= "
    "to change it"
)
#: What an LSTM's record says about the rest TF's LSTM cells take and a checkpoint does not
#: store (``details["not_stored"]``).
LSTM_NOT_STORED_NOTE = (
    "cell_clip, proj_clip and the activation are not stored in a checkpoint: no clip and TF's "
    "default tanh are assumed; pass cell_clip=, proj_clip= (with num_proj) or activation= if the "
    "cells were built with them"
)
#: What a GRU's record says about its activation (``details["not_stored"]``).
GRU_NOT_STORED_NOTE = (
    "the activation is not stored in a checkpoint: TF's default tanh is assumed; pass "
    "activation= if the cells were built with another"
)
#: What a BasicRNNCell's record says about its activation (``details["activation"]``).
ACTIVATION_NOTE = (
    "the activation is not stored in a checkpoint: TF's default tanh is assumed; pass "
    "activation='relu' if the cell used relu (or activation= another)"
)


class TF1CellsError(files.FormatError):
    """An RNN of TF's standard cells that cannot be read: no RNN of that name in the checkpoint,
    one that cannot be read as one RNN (the reasons are in the message: inconsistent stacks,
    shapes that describe no cell), or tensors of a dtype that is no float."""


#: The dtypes an RNN's tensors may have (one of them, the same for all).
_FLOATS = ("float16", "bfloat16", "float32", "float64")
#: What an LSTM record of ``lstm_block_wrapper`` cells says (``details["cell_clip"]``).
_CLIP_NOTE = (
    "lstm_block_wrapper is LSTMBlockFusedCell's scope in early TF 1.x releases, which clipped "
    "the cell state to [-3, 3] unless cell_clip was given; pass cell_clip=3.0 (or the one given) "
    "to compute that, else the outputs differ wherever the cell state went beyond it"
)


# -- the record -------------------------------------------------------------------------------


def _summary(record: Record, dtypes: Mapping[str, str] | None) -> tuple[dict[str, Any], list[str]]:
    """The record's sizes and every reason it cannot be read as one RNN (``dtypes``: the
    tensors' dtype names, where known)."""
    cells = [c for layer in record.layers for c in layer]
    first = cells[0]
    problems = list(record.problems)
    seen = set(problems)
    for c in cells:  # (a set: a stack of thousands of cells repeats their reasons)
        for p in c.problems:
            if p not in seen:
                seen.add(p)
                problems.append(p)
    dtype_problem = _dtype_problem(cells, dtypes)
    if dtype_problem is not None:
        problems.append(dtype_problem)
    modes = sorted({c.mode for c in cells})
    mode: str | None = modes[0] if len(modes) == 1 else None
    if mode is None:
        problems.append(f"its cells are of several kinds ({class_names(cells)})")
    sizes: dict[str, Any] = {
        "num_units": first.num_units,
        "input_size": first.input_size,
        "num_proj": first.num_proj,
    }
    if all(c.num_units is not None for c in cells):
        units = sorted({c.num_units for c in cells if c.num_units is not None})
        projs = sorted({c.num_proj or 0 for c in cells})
        if len(units) > 1:
            problems.append(f"its cells differ in num_units ({', '.join(map(str, units))})")
        if len(projs) > 1:
            problems.append(f"its cells differ in num_proj ({', '.join(map(str, projs))})")
        problems += _input_problems(record)
    return {"mode": mode, **sizes}, problems


def _dtype_problem(cells: Sequence[Cell], dtypes: Mapping[str, str] | None) -> str | None:
    """Why the cells' tensors cannot be read as one RNN's floats (int32 kernels, strings, mixed
    float dtypes), or None; None too where the dtypes are not known."""
    if dtypes is None:
        return None
    found = sorted({dtypes[n] for c in cells for n in c.names.values() if n in dtypes})
    if len(found) <= 1 and all(d in _FLOATS for d in found):
        return None
    return (
        f"the RNN's tensors are {', '.join(found)}; expected one of {', '.join(_FLOATS)}, the "
        "same for all"
    )


def _input_problems(record: Record) -> list[str]:
    """Each layer's input width against what cuDNN feeds it: the input for layer 0, both
    directions' outputs of the layer below after (a pair of separate stacks: its own)."""
    problems = []
    width = record.layers[0][0].input_size
    for k, layer in enumerate(record.layers):
        for d, cell in enumerate(layer):
            expected = width
            if record.separate_stacks and k > 0:
                expected = record.layers[k - 1][d].output_size
            if cell.input_size != expected:
                problems.append(
                    f"{cell.scope} reads inputs of width {cell.input_size}, but "
                    + (
                        f"the input is {expected} wide"
                        if k == 0
                        else f"the layer below gives {expected}"
                    )
                )
        width = sum(c.output_size or 0 for c in layer)
    return problems


def _variant(record: Record, mode: str | None) -> Variant:
    """What the checkpoint says its cells compute beyond ``mode``'s cuDNN math: peepholes
    (any cell's: the others' are zero), TF's GRU (the reset gate before the product), separate
    fw and bw stacks."""
    if mode is None:
        return CUDNN
    return Variant(
        peepholes=any(c.peepholes for layer in record.layers for c in layer),
        reset_after=mode != CUDNN_GRU,
        stacks="separate" if record.separate_stacks else "layers",
    )


def _found(record: Record, kind: str, dtypes: Mapping[str, str] | None) -> FoundRNN:
    summary, problems = _summary(record, dtypes)
    cells = [c for layer in record.layers for c in layer]
    mode = summary["mode"]
    generations = sorted({c.generation for c in cells if c.generation})
    details: dict[str, Any] = {
        "tf_classes": sorted({c.classes for c in cells}),
        # None: every name is of both generations (GRUBlockCell's w_ru, b_ru, w_c, b_c).
        "naming": generations[0] if len(generations) == 1 else "mixed" if generations else None,
        "cells": [c.scope for c in cells],
    }
    notes: list[str] = []
    variant = _variant(record, mode)
    if not variant.is_cudnn:
        details["variant"] = variant.as_dict()
        notes.append(f"it computes {mode} with a variant: {variant.describe()}")
    where = record.where
    if mode == CUDNN_LSTM:
        details["forget_bias"] = FORGET_BIAS_NOTE
        details["not_stored"] = LSTM_NOT_STORED_NOTE
        if any(c.kind == "lstm_block_wrapper" for c in cells):
            details["cell_clip"] = _CLIP_NOTE
    if mode == CUDNN_GRU:
        details["not_stored"] = GRU_NOT_STORED_NOTE
    if mode == CUDNN_RNN_TANH:
        details["activation_known"] = False
        details["activation"] = ACTIVATION_NOTE
        where += " (tanh or relu is not stored: tanh shown, pass activation='relu' if so)"
    notes += [
        details[k] for k in ("forget_bias", "not_stored", "activation", "cell_clip") if k in details
    ]
    return FoundRNN(
        record.name,
        where,
        kind,
        mode,
        num_layers=len(record.layers),
        num_units=summary["num_units"],
        input_size=summary["input_size"],
        direction=CUDNN_RNN_BIDIRECTION if record.bidirectional else CUDNN_RNN_UNIDIRECTION,
        num_proj=summary["num_proj"],
        computable=not problems,
        reasons=tuple(problems),
        details=details,
        notes=tuple(notes),
    )


def find_cells(
    shapes: Mapping[str, tuple[int, ...]], kind: str, dtypes: Mapping[str, str] | None = None
) -> list[FoundRNN]:
    """Every RNN of TF's standard cells that a TF1 checkpoint's names and shapes describe, one
    :class:`~cudnn_rnn.io.found.FoundRNN` each, sorted by name (see the module for the
    cells, their stacks and pairs, and the names left to other readers).

    ``shapes`` is name -> shape of every tensor of the checkpoint (its index: no tensor is
    read); ``kind`` is the file's kind, the records' ``format``; ``dtypes`` (name -> dtype name,
    as the index says) makes an RNN whose tensors are not all of one float dtype (an int32 or
    string kernel) one that cannot be read, with that reason, as :func:`read_cells` refuses
    it. A record's ``name`` is the scope that identifies it (``rnn``,
    ``encoder/bidirectional_rnn``, ``stack_bidirectional_rnn``; where two would read the same,
    their full paths such as ``rnn/lstm_cell`` and ``rnn/multi_rnn_cell``), what
    :func:`read_cells` takes. Records of RNNs that cannot be read (inconsistent stacks, shapes
    that describe no cell) are listed with their sizes and every reason. What TF computes
    beyond cuDNN's math (peepholes, TF's GRU, separate fw and bw stacks) is a variant, which the
    first note says (``details["variant"]``: its changed fields). ``details`` has the TF
    classes, the naming generation, the cells' scopes, and what the checkpoint does not store
    (``forget_bias``; ``not_stored``: the clips and the activation; a BasicRNNCell's
    activation: ``activation_known`` False), which the notes say too.
    """
    return [_found(r, kind, dtypes) for r in records_of(shapes)]


# -- reading one ------------------------------------------------------------------------------

_OWNER = "read_cells"


def read_cells(
    path: str | os.PathLike[str] | tf1_bundle.BundleIndex,
    name: str,
    *,
    forget_bias: float = 1.0,
    activation: str | Activation | None = None,
    cell_clip: float | None = None,
    proj_clip: float | None = None,
) -> ReadRNN:
    """The RNN ``name`` (as :func:`find_cells` lists it) of the TF1 checkpoint ``path`` (its
    prefix, its ``.index``, or its index from :func:`~cudnn_rnn.io.tf1.bundle.open_bundle`)
    as pure data: its spec (with the variant the checkpoint says: peepholes, TF's GRU,
    separate stacks) and canonical tensors in cuDNN's gate order, CPU tensors of the
    checkpoint's dtype, and ``notes``. Only that RNN's tensors are read.

    What the cells computed and the checkpoint does not store: ``forget_bias`` (an LSTM's;
    TF's default 1.0) is added to the forget gate's input bias, as TF added it at run time (the
    other cells have none and ignore it). ``activation`` is the cells' ``activation`` (None:
    TF's default tanh), one of :data:`~cudnn_rnn.core.variant.ACTIVATIONS` or an
    :class:`~cudnn_rnn.core.variant.Activation`: an LSTM's candidate and output activation, a
    GRU's candidate's, a BasicRNNCell's (``"relu"``: ``rnn_relu``). ``cell_clip`` and
    ``proj_clip`` (an LSTM's; ``proj_clip`` with a projection only; None: no clip, TF's
    default) clip the cell state and the projected output to ``[-clip, clip]``.

    Raises :class:`TF1CellsError` for a name the checkpoint does not hold (the message lists
    those it holds) and for an RNN that cannot be read (with every reason);
    :class:`~cudnn_rnn.io.tf1.bundle.TF1BundleError` for a corrupt checkpoint;
    ``TypeError``/``ValueError`` for a bad option, or one the RNN does not have (a clip of a
    GRU, ``proj_clip`` without a projection).
    """
    forget_bias = _check_forget_bias(forget_bias)
    chosen = _check_activation(activation)
    clips = {"cell_clip": _check_clip("cell_clip", cell_clip)}
    clips["proj_clip"] = _check_clip("proj_clip", proj_clip)
    index = path if isinstance(path, tf1_bundle.BundleIndex) else tf1_bundle.open_bundle(path)
    where = f"TF1 checkpoint {index.prefix}"
    entries = index.entries
    shapes = {n: e.shape for n, e in entries.items()}
    records = records_of(shapes)
    record = next((r for r in records if r.name == name), None)
    if record is None:
        held = files.names([r.name for r in records], 8) if records else "none"
        raise TF1CellsError(
            f"{_OWNER}: {where} holds no RNN of TF's standard cells named {files.quote(name)}; "
            f"it holds {held}."
        )
    cells = [c for layer in record.layers for c in layer]
    wanted = [n for c in cells for n in c.names.values()]
    found = _found(record, files.TF1, {n: entries[n].dtype for n in wanted})
    if not found.computable:
        raise TF1CellsError(f"{_OWNER}: {where}: {found.describe()}.")
    mode = found.mode or CUDNN_LSTM
    spec = RNNSpec(
        mode,
        found.num_layers or 1,
        found.num_units or 1,
        found.input_size or 1,
        direction=found.direction or CUDNN_RNN_UNIDIRECTION,
        num_proj=found.num_proj,
        variant=_asked(found, _variant(record, mode), chosen, clips),
        owner=_OWNER,
    )
    dtype: torch.dtype = getattr(torch, entries[wanted[0]].dtype)  # one float: checked
    arrays = tf1_bundle.read_bundle(index, names=wanted)
    peepholes = spec.variant.peepholes
    blocks = {
        (k, d): cell_blocks(cell, arrays, forget_bias=forget_bias, peepholes=peepholes)
        for k, layer in enumerate(record.layers)
        for d, cell in enumerate(layer)
    }
    table = layout_of(spec)
    weights = [_tensor(blocks[p.layer, p.direction][p.kind, p.gate], dtype) for p in table.weights]
    biases = [_tensor(blocks[p.layer, p.direction][p.kind, p.gate], dtype) for p in table.biases]
    if mode == CUDNN_RNN_TANH and chosen is not None:
        found = _activation_given(found, spec.mode)
    return ReadRNN(found, spec, weights, biases, _notes(record, spec, forget_bias, chosen))


def _check_forget_bias(value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(
            f"{_OWNER}: forget_bias must be a float, got {type(value).__name__} {value!r}."
        )
    if not math.isfinite(float(value)):
        raise ValueError(f"{_OWNER}: forget_bias must be finite, got {value!r}.")
    return float(value)


def _check_clip(name: str, value: object) -> float | None:
    """A clip given: a finite float > 0; None: no clip (TF's default)."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(
            f"{_OWNER}: {name} must be a float > 0 or None (no clip), got "
            f"{type(value).__name__} {value!r}."
        )
    clip = float(value)
    if not math.isfinite(clip) or clip <= 0:
        raise ValueError(
            f"{_OWNER}: {name} must be a finite float > 0 or None (no clip), got {value!r}."
        )
    return clip


def _check_activation(value: object) -> Activation | None:
    """The cells' activation: None (TF's default, tanh), a name of ours or an Activation."""
    if value is None:
        return None
    if isinstance(value, str) and value not in ACTIVATIONS:
        raise ValueError(
            f"{_OWNER}: activation must be None (TF's default tanh) or one of "
            f"{', '.join(map(repr, ACTIVATIONS))}, got {files.quote(value)}."
        )
    try:
        return activation_of(value)
    except (TypeError, ValueError) as err:
        raise type(err)(f"{_OWNER}: activation: {err}") from err


def _asked(
    found: FoundRNN, variant: Variant, activation: Activation | None, clips: dict[str, float | None]
) -> Variant:
    """The file's ``variant`` with what the caller said of the cells: their activation and
    clips; ValueError for a clip the RNN does not have."""
    mode = found.mode
    given = [k for k, v in clips.items() if v is not None]
    if given and mode != CUDNN_LSTM:
        raise ValueError(
            f"{_OWNER}: {' and '.join(given)} {'is' if len(given) == 1 else 'are'} TF's LSTM "
            f"cells'; {files.quote(found.name)} is {'a GRU' if mode == CUDNN_GRU else 'an RNN'} "
            "of TF's cells: pass None."
        )
    if clips["proj_clip"] is not None and found.num_proj is None:
        raise ValueError(
            f"{_OWNER}: proj_clip clips the projection's output, and {files.quote(found.name)} "
            "has no projection (TF's LSTMCell ignores proj_clip without num_proj): pass None."
        )
    variant = replace(variant, cell_clip=clips["cell_clip"], proj_clip=clips["proj_clip"])
    if activation is None:
        return variant
    if mode == CUDNN_LSTM:
        return replace(variant, cell_activation=activation, output_activation=activation)
    return replace(variant, cell_activation=activation)


def _tensor(array: np.ndarray[Any, Any], dtype: torch.dtype) -> torch.Tensor:
    return torch.from_numpy(np.ascontiguousarray(array)).to(dtype)


def _activation_given(found: FoundRNN, mode: str) -> FoundRNN:
    """A BasicRNNCell's record once the caller said its activation: ``rnn_relu`` for relu."""
    return FoundRNN(
        found.name,
        found.where,
        found.format,
        mode,
        num_layers=found.num_layers,
        num_units=found.num_units,
        input_size=found.input_size,
        direction=found.direction,
        num_proj=found.num_proj,
        details={**found.details, "activation_known": True},
        notes=found.notes,
    )


def _notes(
    record: Record, spec: RNNSpec, forget_bias: float, activation: Activation | None
) -> tuple[str, ...]:
    cells = [c for layer in record.layers for c in layer]
    variant = spec.variant
    notes = [
        "TF's cells have one bias per gate: it is the input bias here, the recurrent bias zero."
    ]
    if not variant.is_cudnn:
        notes.append(f"it computes {spec.mode} with a variant: {variant.describe()}.")
    chosen = "tanh" if activation is None else activation.describe()
    said = "TF's default" if activation is None else "as passed"
    if spec.mode == CUDNN_LSTM:
        given = "TF's default" if forget_bias == 1.0 else "as passed"
        notes.append(
            f"forget_bias {forget_bias} ({given}; not stored in a checkpoint) added to the forget "
            "gate's input bias; pass forget_bias= if the cells were built with another."
        )
        names = ("cell_clip", "proj_clip") if spec.num_proj is not None else ("cell_clip",)
        values = {"cell_clip": variant.cell_clip, "proj_clip": variant.proj_clip}
        clipped = ", ".join(
            f"{n} {'none' if values[n] is None else f'{values[n]:g}'}" for n in names
        )
        notes.append(
            f"{clipped} and activation {chosen}: TF's defaults (no clip, tanh) where not passed, "
            f"as none is stored in a checkpoint; pass {', '.join(n + '=' for n in names)} or "
            "activation= if the cells were built with others, else the outputs differ."
        )
        if any(c.kind == "lstm_block_wrapper" for c in cells):
            notes.append(_CLIP_NOTE + ".")
    else:
        notes.append(
            f"activation {chosen} ({said}; not stored in a checkpoint); pass activation= to "
            "choose" + (" ('relu' for a relu BasicRNNCell)." if spec.mode != CUDNN_GRU else ".")
        )
    if any(c.kind in ("lstm_fused_cell", "lstm_block_wrapper") for c in cells):
        notes.append("LSTMBlockFusedCell took time-major input ([time, batch, features]).")
    else:
        notes.append(
            "TF's dynamic_rnn took batch-major input by default (time_major=False): call the "
            "layer with time_major=False for such input."
        )
    if record.bidirectional:
        notes.append(
            "the output is [fw, bw] on the feature axis: TF's (output_fw, output_bw) concatenated."
        )
    return tuple(notes)
