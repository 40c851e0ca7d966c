"""TF1 training checkpoints: a layer's opaque kernel and its optimizer slots, restored exactly.

A ``tf.contrib.cudnn_rnn`` layer's checkpoint holds its canonical tensors (each gate's two biases
only as their sum) and also the layer's own variable ``<scope>/<layer>/opaque_kernel``, in the
layout cuDNN used on the GPU that trained it, plus the optimizer's slots of that variable in the
same layout (``/Adam`` and ``/Adam_1``, ``/Momentum``, ``/RMSProp`` and ``/RMSProp_1``,
``/Adagrad``) and Adam's ``beta1_power``/``beta2_power``. :func:`plan` finds that variable,
discovers its layout from the canonical tensors (:mod:`cudnn_rnn.io.cudnn_layout`), and
prepares the exact buffer in our layout (both biases of every gate) and the torch optimizer state
mapped through the same layout; :meth:`Plan.apply` writes them. ``checkpoint.restore(...,
optimizer=, opaque_name=)`` is the user's door.

Which variable: ``opaque_name`` when given (one layer or saveable only); else the layer's own
``<scope>/<name>/opaque_kernel``; else the only ``*/opaque_kernel`` of the file whose size is in
``[params_size, 4 * params_size + 4096]`` (cuDNN pads by a fraction of a percent); none found: the
canonical tensors alone, as before; several: refused (name one, or pass ``opaque_name=False``).

Optimizer slots -> torch state (``t`` = Adam steps taken: TF stores ``beta1_power = beta1**(t+1)``,
updated after each step)::

    Adam      /Adam -> exp_avg, /Adam_1 -> exp_avg_sq, step = t        (torch.optim.Adam, AdamW)
    Momentum  /Momentum -> momentum_buffer                              (SGD, momentum > 0)
    RMSProp   /RMSProp -> square_avg, /RMSProp_1 / lr -> momentum_buffer (RMSprop, not centered)
    Adagrad   /Adagrad -> sum                                            (Adagrad)

``step`` of RMSprop and Adagrad is the file's ``global_step`` (0 without one). The update rules
differ in their epsilon and initial values; ``docs/migration.md`` lists each difference and the
torch settings that come closest.

What no training leaves is refused, naming the tensor, before anything is written: a beta power
that is not a finite float scalar in (0, 1); a ``global_step`` (where it is used) that is not a
finite non-negative integer scalar; a slot with a NaN or infinite value, or a second-moment slot
(``/Adam_1``, ``/RMSProp``, ``/Adagrad``: sums of squared gradients) with a negative one. Slots are
checked in our layout: the padding of a foreign buffer holds no parameter and is not looked at.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from torch import Tensor

from cudnn_rnn.core.gates import GATE_ORDERS
from cudnn_rnn.core.layout import INPUT_BIAS, layout_of
from cudnn_rnn.io.cudnn_layout import LayoutNotFound, discover
from cudnn_rnn.io.files import Claims
from cudnn_rnn.io.files.escaping import quote
from cudnn_rnn.io.files.opening import FormatError
from cudnn_rnn.layers import _CudnnRNN
from cudnn_rnn.saveable.saveables import CudnnOpaqueParamsSaveable

__all__ = ["OpaqueRestoreError", "Plan", "plan"]

Reader = Callable[[Sequence[str]], Mapping[str, Tensor]]

_SUFFIX = "opaque_kernel"
_FLOATS = ("float16", "float32", "float64")
_INTEGERS = ("int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64")
#: Slots that accumulate squared gradients: never negative.
_SECOND_MOMENTS = ("Adam_1", "RMSProp", "Adagrad")
_WEIGHTS_ALONE = "restore without optimizer= to take the weights alone"
#: TF's default slot names of each supported torch optimizer, in the order they are used.
_SLOTS = {
    "Adam": ("Adam", "Adam_1"),
    "SGD": ("Momentum",),
    "RMSprop": ("RMSProp", "RMSProp_1"),
    "Adagrad": ("Adagrad",),
}


class OpaqueRestoreError(FormatError):
    """The opaque kernel or its slots cannot be restored (``problems`` lists why)."""

    def __init__(self, problems: Sequence[str]) -> None:
        self.problems = list(problems)
        super().__init__("; ".join(self.problems))


class OpaqueKernelSkipped(UserWarning):
    """An opaque kernel picked by its size alone (not named, not at the layer's own path) does
    not fit the layer's canonical tensors: it was skipped, and the restore used those tensors."""


@dataclass
class Plan:
    """What a restore writes: exact buffers (instead of the canonical load) and optimizer
    states."""

    writes: list[tuple[Tensor, Tensor]] = field(default_factory=list)
    states: list[tuple[torch.optim.Optimizer, Tensor, dict[str, Any]]] = field(default_factory=list)
    #: opaque variable name -> (alignment, unit, padding) of the layout found, for messages.
    found: dict[str, tuple[int, str, int]] = field(default_factory=dict)
    #: Every variable of the file the writes and states come from (opaque kernels, their
    #: slots, Adam's beta powers): expected tensors for a strict restore.
    used: set[str] = field(default_factory=set)

    def apply_states(self) -> None:
        """Give each optimizer its state (the buffers are written by the restore itself)."""
        for optimizer, param, state in self.states:
            optimizer.state[param] = state


@dataclass
class _Target:
    saveable: CudnnOpaqueParamsSaveable
    param: Tensor
    default: str | None
    label: str


def plan(
    claims: Claims,
    read: Reader,
    objects: Sequence[Any],
    canonical: Mapping[str, Tensor],
    *,
    opaque_name: str | bool | None = None,
    optimizer: torch.optim.Optimizer | None = None,
) -> Plan:
    """The exact writes for ``objects`` from a TF1 file (``claims``, ``read``), whose canonical
    tensors ``canonical`` were already read and checked. Raises :class:`OpaqueRestoreError`."""
    if opaque_name is True or not isinstance(opaque_name, (str, bool, type(None))):
        raise TypeError(
            "checkpoint.restore: opaque_name must be the name of the opaque variable, None "
            f"(find it) or False (ignore it), got {opaque_name!r}."
        )
    if optimizer is not None and not isinstance(optimizer, torch.optim.Optimizer):
        raise TypeError(
            "checkpoint.restore: optimizer must be a torch.optim.Optimizer, got "
            f"{type(optimizer).__name__}."
        )
    targets = [t for t in map(_target, objects) if t is not None]
    if opaque_name is False:
        if optimizer is not None:
            raise OpaqueRestoreError(
                ["optimizer= restores the slots of the opaque kernel; opaque_name=False ignores it"]
            )
        return Plan()
    if isinstance(opaque_name, str) and len(targets) != 1:
        raise OpaqueRestoreError(
            [
                f"opaque_name={opaque_name!r} names one variable, but {len(targets)} layers or "
                "saveables are restored; restore them one at a time"
            ]
        )
    problems: list[str] = []
    chosen: list[tuple[_Target, str]] = []
    by_size: set[str] = set()  # picked by their size alone: skipped when they do not fit
    for t in targets:
        name = _choose(t, claims, opaque_name, problems)
        if name is not None:
            chosen.append((t, name))
            if name != opaque_name and name != t.default:
                by_size.add(name)
    if optimizer is not None and not chosen and not problems:
        problems.append(
            "optimizer= needs the opaque kernel's slots, but the file holds no opaque kernel "
            "of the restored layers"
        )
    if problems:
        raise OpaqueRestoreError(problems)
    wanted = _names_to_read(chosen, claims, optimizer, problems)
    if problems:
        raise OpaqueRestoreError(problems)
    arrays = {n: t.numpy() for n, t in read(sorted(wanted)).items()}
    out = Plan(used=set(wanted))
    for t, name in chosen:
        mine: list[str] = []
        fits = _plan_one(t, name, arrays, canonical, optimizer, out, mine)
        if not fits and name in by_size and optimizer is None:
            # Nothing named it this layer's: it may well belong to another model of the file.
            warnings.warn(
                f"checkpoint.restore: {t.label}: skipped {name!r}, an opaque kernel picked by "
                f"its size alone, which does not fit the canonical tensors ({mine[0]}); the "
                "restore uses the canonical tensors (each summed bias split in halves). Pass "
                "opaque_name= to require a kernel, or opaque_name=False to silence this.",
                OpaqueKernelSkipped,
                stacklevel=4,
            )
            out.used -= {name, *(f"{name}/{slot}" for slots in _SLOTS.values() for slot in slots)}
            continue
        problems += mine
    if problems:
        raise OpaqueRestoreError(problems)
    return out


def _target(obj: Any) -> _Target | None:
    if isinstance(obj, _CudnnRNN):
        if not obj.built:
            return None
        saveable = obj.saveable
        label = f"{type(obj).__name__} {obj.name!r}"
        param: Tensor = obj.opaque_kernel
    elif isinstance(obj, CudnnOpaqueParamsSaveable):
        saveable, param, label = obj, obj.opaque_params, type(obj).__name__
    else:
        return None
    default = None
    if saveable.name.endswith(f"{_SUFFIX}_saveable"):
        default = "/".join(filter(None, [saveable.scope, saveable.name.removesuffix("_saveable")]))
    return _Target(saveable, param, default, label)


def _choose(
    t: _Target, claims: Claims, given: str | bool | None, problems: list[str]
) -> str | None:
    size = layout_of(t.saveable.spec).size
    if isinstance(given, str):
        if given not in claims:
            problems.append(f"opaque_name {given!r} is not in the file")
            return None
        return given
    if t.default is not None and t.default in claims:
        return t.default
    fits = [
        n
        for n, (shape, dtype) in claims.items()
        if (n == _SUFFIX or n.endswith("/" + _SUFFIX))
        and len(shape) == 1
        and size <= shape[0] <= 4 * size + 4096
    ]
    if len(fits) > 1:
        problems.append(
            f"{t.label}: the file holds several opaque kernels that could be its own "
            f"({', '.join(map(quote, sorted(fits)))}); pass opaque_name= to pick one, or "
            "opaque_name=False to restore from the canonical tensors alone"
        )
        return None
    return fits[0] if fits else None


def _kind(optimizer: torch.optim.Optimizer) -> str | None:
    for cls in (torch.optim.Adam, torch.optim.SGD, torch.optim.RMSprop, torch.optim.Adagrad):
        if isinstance(optimizer, cls):
            return cls.__name__
    return None


def _group(optimizer: torch.optim.Optimizer, param: Tensor) -> dict[str, Any] | None:
    for group in optimizer.param_groups:
        if any(p is param for p in group["params"]):
            return group
    return None


def _beta_power(claims: Claims, which: str) -> str | None:
    if which in claims:
        return which
    found = [n for n in claims if n.endswith("/" + which)]
    return found[0] if len(found) == 1 else None


def _names_to_read(
    chosen: Sequence[tuple[_Target, str]],
    claims: Claims,
    optimizer: torch.optim.Optimizer | None,
    problems: list[str],
) -> set[str]:
    wanted: set[str] = set()
    kind = None if optimizer is None else _kind(optimizer)
    if optimizer is not None and kind is None:
        problems.append(
            f"optimizer {type(optimizer).__name__} has no TF1 counterpart here; supported: "
            "torch.optim.Adam (TF AdamOptimizer), SGD with momentum (MomentumOptimizer), "
            "RMSprop (RMSPropOptimizer), Adagrad (AdagradOptimizer)"
        )
    for t, name in chosen:
        shape, dtype = claims[name]
        if dtype not in _FLOATS or len(shape) != 1:
            problems.append(
                f"{quote(name)} is {dtype} {list(shape)}, not a 1-D float16/32/64 buffer"
            )
            continue
        wanted.add(name)
        if kind is None or optimizer is None:
            continue
        if _group(optimizer, t.param) is None:
            problems.append(
                f"optimizer {kind} does not hold the opaque_kernel of {t.label}; build it with "
                "the layer's parameters"
            )
            continue
        slots = [f"{name}/{s}" for s in _SLOTS[kind]]
        missing = [s for s in slots if s not in claims]
        bad = [s for s in slots if s in claims and claims[s] != (shape, dtype)]
        problems += [
            f"missing optimizer slot {quote(s)} (TF's {kind} slot of {quote(name)})"
            for s in missing
        ]
        problems += [f"slot {quote(s)} is {claims[s]}, expected {(shape, dtype)}" for s in bad]
        wanted.update(s for s in slots if s in claims)
    if kind == "Adam" and chosen:
        for which in ("beta1_power", "beta2_power"):
            found = _beta_power(claims, which)
            if found is None:
                problems.append(f"the file holds no {which}: Adam's step count is unknown")
                continue
            shape, dtype = claims[found]
            if shape != () or dtype not in (*_FLOATS, "bfloat16"):
                problems.append(
                    f"{found!r} is {dtype} {list(shape)}, expected a float scalar (TF's "
                    f"AdamOptimizer stores {which[:5]}**(t+1) after t steps); the file is corrupt: "
                    f"{_WEIGHTS_ALONE}"
                )
                continue
            wanted.add(found)
    if kind in ("RMSprop", "Adagrad") and chosen and "global_step" in claims:
        shape, dtype = claims["global_step"]
        if shape != () or dtype not in (*_INTEGERS, *_FLOATS, "bfloat16"):
            problems.append(
                f"'global_step' is {dtype} {list(shape)}, expected an integer scalar (the steps "
                f"trained, which {kind}'s state counts); the file is corrupt: {_WEIGHTS_ALONE}"
            )
        else:
            wanted.add("global_step")
    return wanted


def _canonical_arrays(
    saveable: CudnnOpaqueParamsSaveable, canonical: Mapping[str, Tensor], dtype: np.dtype
) -> tuple[list[np.ndarray], list[np.ndarray | None], dict[tuple[int, int, str], np.ndarray]]:
    """Our canonical weights, the exactly known biases, and the sums of the others."""
    spec = saveable.spec
    tf_list = [canonical[n].to(torch.float64) for n in saveable.checkpoint_shapes()]
    # In float64 every halving and re-summing of a float16/32 bias is exact.
    flat = saveable.format_converter.tf_canonical_to_opaque(tf_list)
    weights, biases = layout_of(spec).unpack(flat.numpy())
    summed_gates = GATE_ORDERS["tf"][spec.mode]
    known: list[np.ndarray | None] = []
    sums: dict[tuple[int, int, str], np.ndarray] = {}
    for p, b in zip(layout_of(spec).biases, biases):
        if p.gate not in summed_gates:  # the GRU candidate's two biases are saved apart
            known.append(b.astype(dtype))
            continue
        known.append(None)
        if p.kind == INPUT_BIAS:  # the converter halved the sum: bW = bR = B / 2
            sums[p.layer, p.direction, str(p.gate)] = (b * 2).astype(dtype)
    return [w.astype(dtype) for w in weights], known, sums


def _plan_one(
    t: _Target,
    name: str,
    arrays: Mapping[str, np.ndarray],
    canonical: Mapping[str, Tensor],
    optimizer: torch.optim.Optimizer | None,
    out: Plan,
    problems: list[str],
) -> bool:
    """Plan the writes of one kernel; False when it does not fit the canonical tensors (another
    dtype, or no layout), True otherwise (other problems go to ``problems``)."""
    spec = t.saveable.spec
    buffer = arrays[name]
    if spec.num_proj is not None:
        problems.append(
            f"{quote(name)}: TF1 layers have no projection; restore num_proj models alone"
        )
        return True
    dtypes = {
        str(canonical[n].dtype).removeprefix("torch.") for n in t.saveable.checkpoint_shapes()
    }
    if dtypes != {str(buffer.dtype)}:
        problems.append(
            f"{quote(name)} is {buffer.dtype} but the canonical tensors are "
            f"{', '.join(sorted(dtypes))}; they cannot describe the same buffer"
        )
        return False
    weights, known, sums = _canonical_arrays(t.saveable, canonical, buffer.dtype)
    kind = None if optimizer is None else _kind(optimizer)
    slot_names = [] if kind is None else [f"{name}/{s}" for s in _SLOTS[kind]]
    try:
        layout = discover(
            spec, buffer, weights, known, sums, companions=[arrays[s] for s in slot_names]
        )
    except LayoutNotFound as err:
        problems.append(
            f"{quote(name)}: no cuDNN layout of its {buffer.size} values fits the canonical "
            f"tensors of {t.label} ({err}); pass opaque_name=False to restore from the "
            "canonical tensors alone (each summed bias split in halves)"
        )
        return False
    out.found[name] = (layout.alignment, layout.unit, layout.padding)
    param = t.param

    def ours(array: np.ndarray) -> Tensor:
        return torch.from_numpy(array).to(param.device, param.dtype)

    out.writes.append((param, ours(layout.to_ours(buffer))))
    if optimizer is None or kind is None:
        return True
    group = _group(optimizer, param)
    assert group is not None  # checked in _names_to_read
    mapped = [layout.to_ours(arrays[s]) for s in slot_names]
    before = len(problems)
    for slot, values in zip(slot_names, mapped):
        _check_slot(slot, values, problems)
    if len(problems) > before:
        return True
    slots = [ours(values) for values in mapped]
    state = _state(kind, group, param, slots, arrays, name, problems)
    if state is not None:
        out.states.append((optimizer, param, state))
    return True


def _check_slot(name: str, values: np.ndarray, problems: list[str]) -> None:
    """A slot's values (in our layout) are finite, and a second moment's never negative."""
    bad = ~np.isfinite(values)
    if bad.any():
        problems.append(
            f"optimizer slot {name!r} holds {int(bad.sum())} non-finite value(s) (first: "
            f"{float(values[bad][0])!r}); training had diverged or the file is corrupt: "
            f"{_WEIGHTS_ALONE}"
        )
        return
    if name.rsplit("/", 1)[-1] in _SECOND_MOMENTS:
        negative = values < 0
        if negative.any():
            problems.append(
                f"optimizer slot {name!r} holds {int(negative.sum())} negative value(s) (first: "
                f"{float(values[negative][0])!r}); it accumulates squared gradients, which no step "
                f"makes negative, so the file is corrupt: {_WEIGHTS_ALONE}"
            )


def _global_step(arrays: Mapping[str, np.ndarray], problems: list[str]) -> float | None:
    """The file's ``global_step`` (0 without one), or None (and a problem) if it is no count."""
    if "global_step" not in arrays:
        return 0.0
    value = arrays["global_step"]
    number = float(value)
    if value.dtype.kind in "iu" and number >= 0:
        return number
    if math.isfinite(number) and number >= 0 and number == int(number):
        return number
    problems.append(
        f"'global_step' is {value.item()!r}, expected a finite non-negative integer (the steps "
        f"trained); the file is corrupt: {_WEIGHTS_ALONE}"
    )
    return None


def _scalar(value: float, group: Mapping[str, Any], param: Tensor) -> Tensor:
    dtype = torch.float64 if torch.get_default_dtype() == torch.float64 else torch.float32
    on_device = group.get("capturable") or group.get("fused")
    return torch.tensor(value, dtype=dtype, device=param.device if on_device else None)


def _state(
    kind: str,
    group: Mapping[str, Any],
    param: Tensor,
    slots: Sequence[Tensor],
    arrays: Mapping[str, np.ndarray],
    name: str,
    problems: list[str],
) -> dict[str, Any] | None:
    if kind == "Adam":
        if group.get("amsgrad"):
            problems.append("TF1's AdamOptimizer has no amsgrad; use Adam(amsgrad=False)")
            return None
        step = _adam_steps(group, arrays, problems)
        if step is None:
            return None
        return {"step": _scalar(step, group, param), "exp_avg": slots[0], "exp_avg_sq": slots[1]}
    if kind == "SGD":
        if not group["momentum"]:
            problems.append(
                f"{quote(name + '/Momentum')} is a momentum accumulator; build SGD with "
                "momentum > 0 (TF's momentum) and dampening=0"
            )
            return None
        return {"momentum_buffer": slots[0]}
    global_step = _global_step(arrays, problems)
    if global_step is None:
        return None
    if kind == "RMSprop":
        if group["centered"]:
            problems.append("centered RMSprop needs TF's mean-gradient slot; use centered=False")
            return None
        state = {"step": _scalar(global_step, group, param), "square_avg": slots[0]}
        if group["momentum"]:
            # TF's momentum slot holds lr * (what torch accumulates): var -= mom.
            state["momentum_buffer"] = slots[1] / group["lr"]
        return state
    return {"step": _scalar(global_step, group, param), "sum": slots[0]}


def _adam_steps(
    group: Mapping[str, Any], arrays: Mapping[str, np.ndarray], problems: list[str]
) -> int | None:
    """Adam steps TF took: it stores ``beta**(t+1)`` (the power its next step uses)."""
    names = {
        which: next(n for n in arrays if n.split("/")[-1] == which)
        for which in ("beta1_power", "beta2_power")
    }
    powers = {which: float(arrays[n]) for which, n in names.items()}
    bad = [which for which, p in powers.items() if not 0.0 < p < 1.0]  # NaN included
    for which in bad:
        problems.append(
            f"{names[which]!r} is {powers[which]!r}, expected a finite value in (0, 1) (TF's "
            f"AdamOptimizer stores {which[:5]}**(t+1) after t steps); the file is corrupt: "
            f"{_WEIGHTS_ALONE}"
        )
    if bad:
        return None
    beta1, beta2 = (float(b) for b in group["betas"])
    estimates = {}
    for which, beta in (("beta1_power", beta1), ("beta2_power", beta2)):
        power = powers[which]
        if 0.0 < power < 1.0 and 0.0 < beta < 1.0:
            estimates[which] = math.log(power) / math.log(beta) - 1
    if not estimates:
        problems.append(
            f"beta1_power {powers['beta1_power']} and beta2_power {powers['beta2_power']} do not "
            f"give a step count with the optimizer's betas {beta1}, {beta2}"
        )
        return None
    t = estimates.get("beta1_power", estimates.get("beta2_power", 0.0))
    steps = round(t)
    # beta2 is closer to 1, so its float32 power carries more relative error per step.
    slack = {"beta1_power": 0.01 + 1e-6 * steps, "beta2_power": 0.5 + 1e-4 * steps}
    off = [w for w, e in estimates.items() if abs(e - steps) > slack[w]]
    if off or steps < 0:
        problems.append(
            f"beta1_power {powers['beta1_power']!r} and beta2_power {powers['beta2_power']!r} "
            f"are not beta**(t+1) for one step count t with the optimizer's betas ({beta1}, "
            f"{beta2}); build Adam with TF's beta1 and beta2"
        )
        return None
    return steps
