"""cudnn_rnn.nn's drop-ins against torch.nn's on wrong arguments, the oracle: a grid of wrong
inputs, states, dtypes, devices, state tuples and PackedSequences for every class (LSTM with
and without projection, GRU, RNN with both nonlinearities, batch_first, bidirectional, several
layers, the three cells), batched and unbatched.

For each case torch.nn is called first: where it returns, ours returns the same values (and
parameter gradients); where it raises, ours raises an instance of the same exception type,
with torch.nn's own message where the check is torch.nn's Python code (which ours borrows),
and with a message of ours naming the class where torch.nn's kernel found the mistake. No case
reaches an engine's "please report it". Where torch.nn cannot be the oracle, the case says so:
its packed LSTM skips its own checks (and crashes on a misshapen state), so there the oracle
is its own ``check_forward_args``; a PackedSequence whose batch_sizes do not describe its data
corrupts the heap in ``pad_packed_sequence``, so those cases name what ours raises; and where
torch.nn returns a result by accident (``TORCH_ACCIDENTS``) ours refuses, as named there.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any, NamedTuple

import pytest
import torch
from torch import nn as tnn
from torch.nn.utils.rnn import PackedSequence, pack_padded_sequence

import cudnn_rnn
import cudnn_rnn.nn as cnn
from cudnn_rnn.nn._checks import RNNArgumentError
from tests.nn.pairs import IN, H, pair

T, B = 3, 2

MODULES = {
    "lstm": (cnn.LSTM, tnn.LSTM, {}),
    "lstm-proj": (cnn.LSTM, tnn.LSTM, {"proj_size": 2}),
    "lstm-bf-bi-2": (
        cnn.LSTM,
        tnn.LSTM,
        {"batch_first": True, "bidirectional": True, "num_layers": 2},
    ),
    "gru": (cnn.GRU, tnn.GRU, {}),
    "gru-bf-bi": (cnn.GRU, tnn.GRU, {"batch_first": True, "bidirectional": True}),
    "rnn-tanh": (cnn.RNN, tnn.RNN, {}),
    "rnn-relu-2": (cnn.RNN, tnn.RNN, {"nonlinearity": "relu", "num_layers": 2}),
}
CELLS = {
    "lstm-cell": (cnn.LSTMCell, tnn.LSTMCell, {}),
    "gru-cell": (cnn.GRUCell, tnn.GRUCell, {}),
    "rnn-cell-tanh": (cnn.RNNCell, tnn.RNNCell, {}),
    "rnn-cell-relu": (cnn.RNNCell, tnn.RNNCell, {"nonlinearity": "relu"}),
}

#: The messages of torch.nn's own Python checks (its methods, which ours borrows, and its
#: forward's): ours says the same (it may add a hint after it).
TORCH_OWN = re.compile(
    r"^(input must have \d dimensions|input\.size\(-1\) must be equal to input_size|"
    r"Expected hidden(\[\d\])? size|For (un)?batched \d-D input, hx|"
    r"\w+: Expected (input|hx\[\d\]|hidden) to be|"
    r"RNN input dtype \(torch\.(float\d+|bfloat16)\) does not match weight dtype|"
    r"input has inconsistent input_size|Input batch size \d+ doesn't match hidden\d|"
    r"hidden\d has inconsistent hidden_size)"
)
BUG = "please report"
OMIT = object()  # (no hx argument)

#: Where torch.nn returns a result by accident, ours refuses: (case, what ours raises, why).
TORCH_ACCIDENTS = [
    (
        r"^lstm[\w-]*, .*hx\[1\] (float64|float16|int32)$",
        (RuntimeError, r"hx\[1\] is torch\.\w+ but the input and the weights are torch\.float32"),
        "torch.nn's unfused kernels (LSTMCell; LSTM with proj_size or a packed input, on the "
        "CPU) type-promote a c_0 of another dtype, which its fused kernels and cuDNN refuse",
    ),
    (
        r"^(rnn-cell-\w+, unbatched, hx\[0\]|lstm-cell, unbatched, hx\[1\]) of shape \(4, 4\)$",
        (RNNArgumentError, r"for a 1-D \(unbatched\) input, hx(\[1\])? must be 1-D"),
        "torch.nn's cells broadcast an unbatched input's [H, H] state (a batch of H) to an "
        "[H, H] result",
    ),
]
_BAD_SIZES = r"batch_sizes must be non-increasing, not negative, and add up to its data's rows"
_SIZES_KIND = r"batch_sizes must be a 1-D CPU int64 tensor"


class Case(NamedTuple):
    label: str
    input: Any
    hx: Any = OMIT
    #: None: torch.nn is the oracle; else the exception type and message of ours.
    ours: tuple[type[BaseException], str] | None = None


def _states(m: Any, batch: int | None) -> list[torch.Tensor]:
    """The right states of ``m`` for a batch (None: unbatched), as a list."""
    lead = (m.num_layers * (2 if m.bidirectional else 1),) + (() if batch is None else (batch,))
    if isinstance(m, (cnn.LSTM, tnn.LSTM)):
        return [torch.randn(*lead, m.proj_size or H), torch.randn(*lead, H)]
    return [torch.randn(*lead, H)]


def _hx(m: Any, states: list[Any]) -> Any:
    return tuple(states) if isinstance(m, (cnn.LSTM, cnn.LSTMCell)) else states[0]


def _input(m: Any, steps: int, batch: int | None, features: int = IN) -> torch.Tensor:
    if batch is None:
        return torch.randn(steps, features)
    return torch.randn(*((batch, steps) if m.batch_first else (steps, batch)), features)


def _wrong_tensors(t: torch.Tensor) -> list[tuple[str, torch.Tensor]]:
    """Each way one tensor can be wrong: a size off by one on each axis, one dimension
    fewer or more, another dtype (floating, integer) or device."""
    out = []
    for axis in range(t.dim()):
        shape = list(t.shape)
        shape[axis] += 1
        out.append((f"axis {axis} +1", torch.randn(shape)))
    return [
        *out,
        ("a dimension fewer", t[0]),
        ("a dimension more", t.unsqueeze(0)),
        ("float64", t.double()),
        ("float16", t.half()),
        ("int32", t.int()),
        ("on meta", t.to("meta")),
    ]


def _state_cases(m: Any, form: str, x: Any, right: list[torch.Tensor]) -> list[Case]:
    """Each state replaced by each of its wrong tensors, the others right."""
    cases = []
    for k in range(len(right)):
        for what, wrong in _wrong_tensors(right[k]):
            states = list(right)
            states[k] = wrong
            cases.append(Case(f"{form}, hx[{k}] {what}", x, _hx(m, states)))
    return cases


def _kind_cases(m: Any, form: str, x: Any, right: list[torch.Tensor]) -> list[Case]:
    """hx of the wrong kind: a tensor where a tuple is expected and the reverse, tuples of
    the wrong length, other objects."""
    h = right[0]
    kinds: list[tuple[str, Any]] = [("int", 3), ("a class", torch.Tensor), ("(h, None)", (h, None))]
    if len(right) == 2:
        kinds += [
            ("h alone", h),
            ("tuple of 1", (h,)),
            ("tuple of 3", (*right, h)),
            ("list of 2", list(right)),
            ("dict", dict(enumerate(right))),
            ("empty tuple", ()),
        ]
        if right[0].shape == right[1].shape:
            kinds.append(("stacked (h, c)", torch.stack(right)))
    else:
        kinds += [("(h,)", (h,)), ("[h]", [h]), ("(h, h)", (h, h))]
    return [Case(f"{form}, hx {what}", x, value) for what, value in kinds]


def module_cases(m: Any) -> list[Case]:
    cases: list[Case] = []
    for batch in (B, None):
        form = "batched" if batch else "unbatched"
        x = _input(m, T, batch)
        right = _states(m, batch)
        cases += [
            Case(f"{form}, no hx", x),
            Case(f"{form}, hx", x, _hx(m, right)),
            Case(f"{form}, one step", _input(m, 1, batch), _hx(m, right)),
            Case(f"{form}, no steps", _input(m, 0, batch)),
            Case(f"{form}, no steps, hx", _input(m, 0, batch), _hx(m, right)),
            Case(f"{form}, 4-D input", x.reshape(1, *[1] * (3 - x.dim()), *x.shape)),
            Case(f"{form}, 1-D input", x.reshape(-1)),
            Case(f"{form}, features +1", _input(m, T, batch, IN + 1)),
            Case(f"{form}, no features", _input(m, T, batch, 0)),
            Case(f"{form}, input on meta", x.to("meta")),
        ]
        for dtype in (torch.float64, torch.float16, torch.int64, torch.bool):
            cases.append(Case(f"{form}, {dtype} input", x.to(dtype)))
        cases += _state_cases(m, form, x, right)
        cases += _kind_cases(m, form, x, right)
    cases += [  # a batch of no sequences: torch.nn returns empty results
        Case("no sequences", _input(m, T, 0)),
        Case("no sequences, hx", _input(m, T, 0), _hx(m, _states(m, 0))),
        Case("no sequences, no steps", _input(m, 0, 0)),
        Case("one sequence", _input(m, T, 1), _hx(m, _states(m, 1))),
    ]
    return cases + packed_cases(m)


def _packed(sorted_: bool) -> PackedSequence:
    lengths = torch.tensor([3, 2, 1] if sorted_ else [3, 1, 2])
    return pack_padded_sequence(torch.randn(T, 3, IN), lengths, enforce_sorted=sorted_)


def packed_cases(m: Any) -> list[Case]:
    cases: list[Case] = []
    for sorted_ in (True, False):
        p = _packed(sorted_)
        right = _states(m, 3)
        form = f"packed{' sorted' if sorted_ else ''}"
        cases += [
            Case(f"{form}, no hx", p),
            Case(f"{form}, hx", p, _hx(m, right)),
            Case(f"{form}, float64 data", p._replace(data=p.data.double())),
            Case(f"{form}, int64 data", p._replace(data=p.data.long())),
            Case(f"{form}, features +1", p._replace(data=torch.randn(p.data.size(0), IN + 1))),
            Case(f"{form}, 3-D data", p._replace(data=p.data.unsqueeze(1))),
        ]
        cases += _state_cases(m, form, p, right)
        cases += _kind_cases(m, form, p, right)
    # batch_sizes that do not describe the data: torch.nn reads outside it (or corrupts the
    # heap), so it cannot be the oracle; ours refuses them.
    data = torch.randn(3, IN)
    for sizes, expect in (
        (torch.tensor([2, 0, 1]), (RuntimeError, _BAD_SIZES)),
        (torch.tensor([1, 2]), (RuntimeError, _BAD_SIZES)),
        (torch.tensor([2, 2]), (RuntimeError, _BAD_SIZES)),
        (torch.tensor([2]), (RuntimeError, _BAD_SIZES)),
        (torch.tensor([4, -1]), (RuntimeError, _BAD_SIZES)),
        (torch.tensor([2.0, 1.0]), (TypeError, _SIZES_KIND)),
        (torch.tensor([2, 1], dtype=torch.int32), (RuntimeError, _SIZES_KIND)),
        (torch.tensor([[2, 1]]), (TypeError, _SIZES_KIND)),
        (torch.tensor([], dtype=torch.int64), (IndexError, "no time steps")),
    ):
        label = f"batch_sizes {sizes.tolist()} {sizes.dtype}"
        cases.append(Case(label, PackedSequence(data, sizes), ours=expect))
    return [  # trailing zeros, and no sequences at all: torch.nn runs them
        *cases,
        Case("batch_sizes [2, 1, 0]", PackedSequence(data, torch.tensor([2, 1, 0]))),
        Case("batch_sizes [0, 0]", PackedSequence(torch.randn(0, IN), torch.tensor([0, 0]))),
    ]


def cell_cases(m: Any) -> list[Case]:
    n = 2 if isinstance(m, cnn.LSTMCell) else 1
    cases: list[Case] = []
    for batch in (B, 1, None):
        form = "unbatched" if batch is None else f"batch {batch}"
        lead = () if batch is None else (batch,)
        x = torch.randn(*lead, IN)
        right = [torch.randn(*lead, H) for _ in range(n)]
        cases += [
            Case(f"{form}, no hx", x),
            Case(f"{form}, hx", x, _hx(m, right)),
            Case(f"{form}, 3-D input", x.reshape(1, 1, -1)),
            Case(f"{form}, 0-D input", torch.tensor(1.0)),
            Case(f"{form}, features +1", torch.randn(*lead, IN + 1)),
            Case(f"{form}, no features", torch.randn(*lead, 0)),
            Case(f"{form}, float64 input", x.double()),
            Case(f"{form}, int32 input", x.int()),
            Case(f"{form}, input on meta", x.to("meta")),
        ]
        cases += _state_cases(m, form, x, right)
        for k in range(n):  # batched states for an unbatched input and the reverse
            for shape in ((H,), (1, H), (2, H), (H, H)):
                states = list(right)
                states[k] = torch.randn(shape)
                cases.append(Case(f"{form}, hx[{k}] of shape {shape}", x, _hx(m, states)))
        cases += _kind_cases(m, form, x, right)
    return [*cases, Case("no sequences", torch.randn(0, IN), _hx(m, [torch.randn(0, H)] * n))]


def _call(module: Any, case: Case) -> tuple[Any, Exception | None]:
    try:
        if case.hx is OMIT:
            return module(case.input), None
        return module(case.input, case.hx), None
    except Exception as e:
        return None, e


def _torch_outcome(theirs: Any, case: Case) -> tuple[Any, Exception | None]:
    """What torch.nn does with ``case``; for its packed LSTM, which skips check_forward_args
    (and crashes on a misshapen state), what its own check says first, on the state reordered
    as its GRU and RNN reorder it."""
    if isinstance(theirs, tnn.LSTM) and isinstance(case.input, PackedSequence):
        p = case.input
        hx = case.hx if case.hx is not OMIT else None
        try:
            if hx is None:
                hx = tuple(_states(theirs, int(p.batch_sizes[0])))
            else:
                hx = theirs.permute_hidden(hx, p.sorted_indices)
            theirs.check_forward_args(p.data, hx, p.batch_sizes)
        except Exception as e:
            return None, e
    return _call(theirs, case)


def _tensors(result: Any) -> list[torch.Tensor]:
    if isinstance(result, PackedSequence):
        return [result.data]
    if isinstance(result, torch.Tensor):
        return [result]
    return [t for r in result for t in _tensors(r)]


def _judge(where: str, owner: str, err: Exception | None, want_err: Exception) -> str | None:
    """What is wrong with ours raising ``err`` where torch.nn raised ``want_err``."""
    theirs_msg, ours_msg = str(want_err), str(err)
    ours_own = ours_msg.startswith(owner + ": ")
    if not isinstance(err, type(want_err)):
        return f"{where}: torch.nn raised {want_err!r}, ours {err!r}"
    if ours_msg == theirs_msg:
        return None  # torch.nn's own check (borrowed)
    if TORCH_OWN.match(theirs_msg):
        # torch.nn's check with a hint added, or ours first where torch.nn's check would
        # only see the state reordered (a packed input's)
        if ours_msg.startswith(theirs_msg) or (isinstance(err, RNNArgumentError) and ours_own):
            return None
        return f"{where}: torch.nn's check says {theirs_msg!r}, ours {ours_msg!r}"
    if not ours_own:
        return f"{where}: torch.nn's kernel said {theirs_msg!r}; ours {ours_msg!r} is not ours"
    return None


def _compare(kinds: dict[str, Any], kind: str, make_cases: Callable[[Any], list[Case]]) -> None:
    ours, theirs = pair(kinds, kind)
    owner = type(ours).__name__
    torch.manual_seed(5)
    problems: list[str | None] = []
    for case in make_cases(ours):
        got, err = _call(ours, case)
        where = f"{kind}, {case.label}"
        if err is not None and BUG in str(err):
            problems.append(f"{where}: reached the engine: {err}")
            continue
        expect = case.ours
        if expect is None:
            want, want_err = _torch_outcome(theirs, case)
            if want_err is not None:
                problems.append(_judge(where, owner, err, want_err))
                continue
            if err is not None:
                accidents = [w for pattern, w, _ in TORCH_ACCIDENTS if re.search(pattern, where)]
                if not accidents:
                    problems.append(f"{where}: torch.nn returned, ours raised {err!r}")
                    continue
                expect = accidents[0]
        if expect is not None:
            if not isinstance(err, expect[0]) or not re.search(expect[1], str(err)):
                problems.append(f"{where}: want {expect[0].__name__} /{expect[1]}/, got {err!r}")
            continue
        a, b = _tensors(got), _tensors(want)
        if [t.shape for t in a] != [t.shape for t in b]:
            problems.append(f"{where}: shapes {[t.shape for t in a]} != {[t.shape for t in b]}")
            continue
        for u, v in zip(a, b):
            torch.testing.assert_close(u, v, atol=2e-5, rtol=2e-5, msg=where)
        ga = torch.autograd.grad(sum(t.sum() for t in a), list(ours.parameters()))
        gb = torch.autograd.grad(sum(t.sum() for t in b), list(theirs.parameters()))
        for g, w in zip(ga, gb):
            torch.testing.assert_close(g, w, atol=1e-4, rtol=1e-4, msg=where)
    found = [p for p in problems if p is not None]
    assert not found, "\n".join(found)


@pytest.mark.filterwarnings("ignore:LSTM with projections is not supported with oneDNN")
@pytest.mark.parametrize("kind", MODULES)
def test_modules_refuse_what_torch_nn_refuses_and_run_what_it_runs(kind: str) -> None:
    _compare(MODULES, kind, module_cases)


@pytest.mark.parametrize("kind", CELLS)
def test_cells_refuse_what_torch_nn_refuses_and_run_what_it_runs(kind: str) -> None:
    _compare(CELLS, kind, cell_cases)


def test_the_grid_is_generated_and_covers_every_kind_of_mistake() -> None:
    labels = [c.label for c in module_cases(cnn.LSTM(IN, H))]
    assert len(labels) > 150 and len(set(labels)) == len(labels)
    for word in ("no steps", "float64", "int32", "meta", "tuple of 3", "axis 2", "batch_sizes"):
        assert any(word in label for label in labels), word
    cells = [c.label for c in cell_cases(cnn.LSTMCell(IN, H))]
    assert len(cells) > 80 and len(set(cells)) == len(cells)


# -- the messages of ours (where torch.nn's kernel speaks, or nothing does) ---------------------


def test_no_time_steps_is_torch_nns_runtime_error_with_the_shape() -> None:
    """The defect reported: a length-0 sequence reached the engine's "please report it"."""
    shapes = {
        (0, 2, IN): r"\(0, 2, 5\) \(\[time, batch, features\]\)",
        (0, IN): r"\(0, 5\) \(\[time, features\] \(unbatched\)\)",
    }
    for m in (cnn.LSTM(IN, H), cnn.GRU(IN, H, batch_first=True), cnn.RNN(IN, H)):
        name = type(m).__name__
        for shape, shown in shapes.items():
            if m.batch_first and len(shape) == 3:
                shape, shown = (2, 0, IN), r"\(2, 0, 5\) \(\[batch, time, features\] \(batch_first"
            message = (
                rf"^{name}: Expected sequence length to be larger than 0 in RNN: the input of "
                rf"shape {shown}.* has no time steps; an RNN needs at least one step"
            )
            with pytest.raises(RuntimeError, match=message):
                m(torch.randn(shape))


def test_a_float64_state_of_a_float32_module_is_named_with_its_fix() -> None:
    """The defect reported: an LSTM given a float64 h0 (module float32) reached the engine."""
    m = cnn.LSTM(IN, H)
    x, h = torch.randn(3, 2, IN), torch.zeros(1, 2, H)
    message = (
        r"^LSTM: hx\[0\] is torch\.float64 but the input and the weights are torch\.float32; "
        r"convert it with \.to\(torch\.float32\)\.$"
    )
    with pytest.raises(RuntimeError, match=message):
        m(x, (h.double(), h))
    with pytest.raises(RuntimeError, match=r"^LSTM: hx\[1\] is torch\.int32 but the input"):
        m(x, (h, h.int()))
    message = r"^GRU: hx is torch\.float32 but the input and the weights are torch\.float64"
    with pytest.raises(RuntimeError, match=message):
        cnn.GRU(IN, H).double()(x.double(), h)


def test_a_state_of_the_wrong_kind_names_what_is_taken() -> None:
    """The defect reported: ``LSTMCell(x, (h,))`` reached the engine. The error is each
    builtin torch.nn raises for such mistakes (RuntimeError batched, IndexError unbatched,
    AttributeError for a tuple given to a GRU)."""
    cell = cnn.LSTMCell(IN, H)
    message = (
        r"^LSTMCell: hx must be a tuple \(h_0, c_0\) of two tensors \(an LSTM's hidden and cell "
        r"states\), got a tuple of 1 \(Tensor\)\.$"
    )
    for x, h in ((torch.randn(2, IN), torch.randn(2, H)), (torch.randn(IN), torch.randn(H))):
        with pytest.raises(RNNArgumentError, match=message) as info:
            cell(x, (h,))
        assert isinstance(info.value, (RuntimeError, IndexError, TypeError))
    with pytest.raises(TypeError, match=r"got a tensor of shape \(2, 4\) \(torch\.float32\)\.$"):
        cell(torch.randn(2, IN), torch.randn(2, H))
    message = (
        r"^GRUCell: hx must be one tensor h_0, got a tuple of 2 \(Tensor, Tensor\); a tuple "
        r"\(h_0, c_0\) is an LSTM's state\.$"
    )
    with pytest.raises(AttributeError, match=message):
        cnn.GRUCell(IN, H)(torch.randn(2, IN), (torch.randn(2, H),) * 2)
    lstm, x = cnn.LSTM(IN, H), torch.randn(3, 2, IN)
    with pytest.raises(RuntimeError, match=r"^LSTM: hx must be a tuple .*, got a tuple of 3"):
        lstm(x, (torch.zeros(1, 2, H),) * 3)
    with pytest.raises(AttributeError, match=r"^RNN: hx must be one tensor h_0, got int 3\.$"):
        cnn.RNN(IN, H)(x, 3)
    message = (
        r"hx and cx should also be 3-D but got \(2-D, 2-D\) tensors \(hx is one tensor of "
        r"shape \(2, 2, 4\): an LSTM's state is a tuple \(h_0, c_0\)\)$"
    )
    with pytest.raises(RuntimeError, match=message):
        lstm(x, torch.zeros(2, 2, H))


def test_cells_name_a_state_batched_unlike_the_input() -> None:
    cell = cnn.GRUCell(IN, H)
    message = (
        r"^GRUCell: for a 1-D \(unbatched\) input, hx must be 1-D \[hidden_size\] too, got a "
        r"tensor of shape \(1, 4\)\.$"
    )
    with pytest.raises(RNNArgumentError, match=message):
        cell(torch.randn(IN), torch.randn(1, H))
    message = (
        r"^GRUCell: for a 2-D \(batched\) input, hx must be 2-D \[batch, hidden_size\] too, "
        r"got a tensor of shape \(4,\)\.$"
    )
    with pytest.raises(RNNArgumentError, match=message):
        cell(torch.randn(4, IN), torch.randn(H))


def test_devices_are_named_as_aten_names_them_with_the_move() -> None:
    message = (
        r"^RNN: Input and hidden tensors are not at the same device, found input tensor at cpu "
        r"and hidden tensor hx at meta; move it with \.to\('cpu'\)\.$"
    )
    with pytest.raises(RuntimeError, match=message):
        cnn.RNN(IN, H)(torch.randn(3, 2, IN), torch.zeros(1, 2, H, device="meta"))
    message = (
        r"^RNNCell: Input and parameter tensors are not at the same device, found input tensor "
        r"at meta and parameter tensor at cpu; move the input with \.to\('cpu'\) or the cell "
        r"with \.to\('meta'\)\.$"
    )
    with pytest.raises(RuntimeError, match=message):
        cnn.RNNCell(IN, H)(torch.randn(2, IN, device="meta"))


def test_dtype_advice_never_suggests_an_integer_dtype() -> None:
    """Converting a model to the input's dtype is advice only where that dtype is one RNNs
    compute in: our cells, the compatible cells and the modules' non-floating inputs."""
    note = r" \(RNNs compute in float16, bfloat16, float32 or float64, not torch\.int32\)\.?$"
    message = (
        r"^LSTMCell: input is torch\.int32 but the weights are torch\.float32; convert it with "
        r"\.to\(torch\.float32\)" + note
    )
    with pytest.raises(RuntimeError, match=message):
        cnn.LSTMCell(IN, H)(torch.zeros(2, IN, dtype=torch.int32))
    with pytest.raises(RuntimeError, match=r"or the cell with \.to\(torch\.float64\)\.$"):
        cnn.LSTMCell(IN, H)(torch.zeros(2, IN, dtype=torch.float64))
    message = (
        r"^GRU: RNN input dtype \(torch\.int32\) does not match weight dtype \(torch\.float32\)\. "
        r"Convert input: input\.to\(torch\.float32\)" + note
    )
    with pytest.raises(ValueError, match=message):
        cnn.GRU(IN, H)(torch.zeros(3, 2, IN, dtype=torch.int32))
    for cell in (cudnn_rnn.CudnnCompatibleLSTMCell(H), cudnn_rnn.CudnnCompatibleGRUCell(H)):
        message = (
            rf"^{type(cell).__name__}: inputs have dtype torch\.int32 but the cell's variables "
            r"are torch\.float32; convert the inputs with \.to\(torch\.float32\)" + note
        )
        with pytest.raises(TypeError, match=message):
            cell(torch.zeros(2, IN, dtype=torch.int32), cell.zero_state(2))
        with pytest.raises(TypeError, match=r"or make the cell with dtype=torch\.float64\.$"):
            cell(torch.zeros(2, IN, dtype=torch.float64), cell.zero_state(2))


def test_packed_sequences_that_pack_padded_sequence_cannot_make_are_refused() -> None:
    """torch.nn reads outside the data of these (pad_packed_sequence corrupts the heap);
    ours names them before anything reads the data."""
    m = cnn.LSTM(IN, H)
    message = (
        r"^LSTM: a PackedSequence's batch_sizes must be non-increasing, not negative, and add up "
        r"to its data's rows \(3\), got \[2, 0, 1\] \(sum 3\); make it with "
        r"torch\.nn\.utils\.rnn\.pack_padded_sequence or pack_sequence\.$"
    )
    with pytest.raises(RuntimeError, match=message):
        m(PackedSequence(torch.randn(3, IN), torch.tensor([2, 0, 1])))
    message = (
        r"^LSTM: a PackedSequence's batch_sizes must be a 1-D CPU int64 tensor, got a tensor of "
        r"shape \(2,\) \(torch\.float32\) on cpu"
    )
    with pytest.raises(TypeError, match=message):
        m(PackedSequence(torch.randn(3, IN), torch.tensor([2.0, 1.0])))
    with pytest.raises(IndexError, match=r"^LSTM: the PackedSequence has no time steps"):
        m(PackedSequence(torch.randn(0, IN), torch.tensor([], dtype=torch.int64)))
    # The state of a packed LSTM is checked as torch.nn checks its GRU's (torch.nn's LSTM
    # crashes), and before it is reordered where the sequences were sorted (torch.nn's
    # index_select reorders whatever dimension 1 holds).
    hx = (torch.zeros(3, H), torch.zeros(1, 3, H))
    message = r"^Expected hidden\[0\] size \(1, 3, 4\), got \[3, 4\]$"
    with pytest.raises(RuntimeError, match=message):
        m(_packed(True), hx)
    message = (
        r"^LSTM: for a PackedSequence input, hx and cx should be 3-D \[num_layers \* "
        r"num_directions, batch, hidden\] but got \(2-D, 3-D\) tensors of shapes "
        r"\[\(3, 4\), \(1, 3, 4\)\]\.$"
    )
    with pytest.raises(RNNArgumentError, match=message):
        m(_packed(False), hx)


def test_autocast_casts_a_state_of_another_dtype_instead_of_refusing_it() -> None:
    """Under autocast torch.nn skips its dtype checks; ours computes in the parameters' dtype,
    the states included (they reached the engine uncast before)."""
    m = cnn.LSTM(IN, H)
    x, h = torch.randn(3, 2, IN), torch.randn(1, 2, H)
    want = m(x, (h, h))
    with torch.autocast("cpu", dtype=torch.bfloat16):
        got = m(x, (h.double(), h))
    torch.testing.assert_close(got[0], want[0])
