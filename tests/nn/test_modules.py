"""cudnn_rnn.nn's LSTM, GRU and RNN against torch.nn's, the oracle: values and every gradient in
float64 (1e-10) over every constructor option and input form, the same initialisation, the
same state_dict, the same errors; the one buffer behind the parameters; float32 on the engines."""

from __future__ import annotations

import copy
import itertools
import pickle
import warnings
from typing import Any

import pytest
import torch
from torch import nn as tnn
from torch.nn.utils.rnn import PackedSequence, pack_padded_sequence

import cudnn_rnn.nn as cnn
from cudnn_rnn.nn import _flat
from tests.nn.pairs import IN, H, pair

#: (ours, torch.nn's, extra constructor arguments)
KINDS = {
    "lstm": (cnn.LSTM, tnn.LSTM, {}),
    "lstm-proj": (cnn.LSTM, tnn.LSTM, {"proj_size": 3}),
    "gru": (cnn.GRU, tnn.GRU, {}),
    "rnn-tanh": (cnn.RNN, tnn.RNN, {}),
    "rnn-relu": (cnn.RNN, tnn.RNN, {"nonlinearity": "relu"}),
}


def _pair(kind: str, seed: int = 0, **options: Any) -> tuple[Any, Any]:
    return pair(KINDS, kind, seed, **options)


def _flatten(result: Any) -> list[torch.Tensor]:
    out, state = result
    data = out.data if isinstance(out, PackedSequence) else out
    return [data, *(state if isinstance(state, tuple) else (state,))]


def _states(kind: str, module: Any, batch: int | None, dtype: torch.dtype) -> Any:
    dirs = 2 if module.bidirectional else 1
    hout = module.proj_size or module.hidden_size
    lead = (module.num_layers * dirs,) + ((batch,) if batch is not None else ())
    h = torch.randn(*lead, hout, dtype=dtype, requires_grad=True)
    if kind.startswith("lstm"):
        return (h, torch.randn(*lead, module.hidden_size, dtype=dtype, requires_grad=True))
    return h


def _inputs(form: str, batch_first: bool, dtype: torch.dtype) -> tuple[Any, int | None]:
    """An input of ``form`` and its batch (None: unbatched)."""
    steps, batch = 6, 3
    if form == "unbatched":
        return torch.randn(steps, IN, dtype=dtype, requires_grad=True), None
    x = torch.randn(steps, batch, IN, dtype=dtype, requires_grad=True)
    if form == "packed":
        return pack_padded_sequence(x, torch.tensor([6, 2, 4]), enforce_sorted=False), batch
    return (x.transpose(0, 1) if batch_first else x), batch


def _compare(
    kind: str, a: Any, b: Any, form: str, hx: bool, dtype: torch.dtype, tol: float
) -> None:
    torch.manual_seed(11)
    x, batch = _inputs(form, a.batch_first, dtype)
    states = _states(kind, a, batch, dtype) if hx else None
    ra, rb = a(x, states), b(x, states)
    assert type(ra[0]) is type(rb[0]) and type(ra[1]) is type(rb[1])
    fa, fb = _flatten(ra), _flatten(rb)
    for u, v in zip(fa, fb):
        assert u.shape == v.shape
        torch.testing.assert_close(u, v, atol=tol, rtol=tol)
    if isinstance(ra[0], PackedSequence):
        for name in ("batch_sizes", "sorted_indices", "unsorted_indices"):
            assert torch.equal(getattr(ra[0], name), getattr(rb[0], name))
    weights = [torch.randn(t.shape, dtype=dtype) for t in fa]
    leaves = [x.data if isinstance(x, PackedSequence) else x]
    leaves += list(states) if isinstance(states, tuple) else [states] if states is not None else []
    got = torch.autograd.grad(
        sum((t * w).sum() for t, w in zip(fa, weights)), [*leaves, *a.parameters()]
    )
    want = torch.autograd.grad(
        sum((t * w).sum() for t, w in zip(fb, weights)), [*leaves, *b.parameters()]
    )
    for g, w in zip(got, want):
        torch.testing.assert_close(g, w, atol=tol, rtol=tol)


OPTIONS = list(itertools.product((1, 2), (True, False), (False, True), (False, True)))


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize(("layers", "bias", "batch_first", "bidirectional"), OPTIONS)
def test_values_and_every_gradient_equal_torch_nn_in_float64(
    kind: str, layers: int, bias: bool, batch_first: bool, bidirectional: bool
) -> None:
    a, b = _pair(kind, num_layers=layers, bias=bias, batch_first=batch_first,
                 bidirectional=bidirectional, dtype=torch.float64)  # fmt: skip
    for form, hx in (("batched", False), ("batched", True), ("unbatched", True), ("packed", True)):
        _compare(kind, a, b, form, hx, torch.float64, 1e-10)


@pytest.mark.filterwarnings("ignore:LSTM with projections is not supported with oneDNN")
@pytest.mark.parametrize("kind", KINDS)
def test_float32_on_the_engines_agrees_with_torch_nn(kind: str) -> None:
    a, b = _pair(kind, num_layers=2, bidirectional=True)
    for form in ("batched", "packed"):
        _compare(kind, a, b, form, True, torch.float32, 2e-5)


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("placement", [{}, {"device": "cpu", "dtype": torch.float64}])
def test_initialisation_parameters_state_dict_and_repr_are_torch_nns(
    kind: str, placement: dict[str, Any]
) -> None:
    a, b = _pair(kind, seed=7, num_layers=2, bidirectional=True, **placement)
    assert [n for n, _ in a.named_parameters()] == [n for n, _ in b.named_parameters()]
    for (n, p), q in zip(a.named_parameters(), b.parameters()):
        assert type(p) is tnn.Parameter and torch.equal(p, q), n  # the same values drawn
    assert list(a.state_dict()) == list(b.state_dict())
    assert repr(a) == repr(b)
    assert [[n for n in w] for w in a._all_weights] == [[n for n in w] for w in b._all_weights]
    assert all(
        torch.equal(p, q) for w, v in zip(a.all_weights, b.all_weights) for p, q in zip(w, v)
    )
    for name in ("input_size", "hidden_size", "num_layers", "bias", "batch_first", "dropout",
                 "bidirectional", "proj_size", "mode"):  # fmt: skip
        assert getattr(a, name) == getattr(b, name), name
    # state_dict loads both ways
    torch.manual_seed(8)
    other = KINDS[kind][1](IN, H, num_layers=2, bidirectional=True, **KINDS[kind][2], **placement)
    a.load_state_dict(other.state_dict())
    assert all(torch.equal(p, q) for p, q in zip(a.parameters(), other.parameters()))
    b.load_state_dict(a.state_dict())
    assert all(torch.equal(p, q) for p, q in zip(a.parameters(), b.parameters()))


def _blocks_of(module: Any) -> bool:
    return _flat.aliases(module._flat, list(module.parameters()), module._blocks)


def test_the_parameters_are_views_of_one_buffer_and_an_optimizer_trains_them() -> None:
    m = cnn.LSTM(IN, H, num_layers=2, bidirectional=True)
    assert _blocks_of(m) and m._flat.numel() == sum(p.numel() for p in m.parameters())
    opt = torch.optim.Adam(m.parameters(), lr=0.1)
    before = [p.detach().clone() for p in m.parameters()]
    m(torch.randn(4, 2, IN))[0].sum().backward()
    opt.step()
    assert _blocks_of(m)  # the step wrote into the buffer, through the views
    assert all(not torch.equal(p, q) for p, q in zip(m.parameters(), before))
    flat_before = m._flat.clone()
    with torch.no_grad():
        m.weight_hh_l0.mul_(2)  # in place: the buffer (the operator's input) sees it
    assert not torch.equal(m._flat, flat_before)


def test_a_parameter_replaced_or_its_data_reassigned_is_flattened_again() -> None:
    a, b = _pair("gru", num_layers=2)
    x = torch.randn(5, 2, IN)
    new = tnn.Parameter(torch.randn(3 * H, IN))
    a.weight_ih_l1 = a.weight_ih_l1  # (the same one: nothing changes)
    a.weight_ih_l0, b.weight_ih_l0 = new, tnn.Parameter(new.detach().clone())
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # replaced through setattr: flattened quietly
        torch.testing.assert_close(a(x)[0], b(x)[0])
    assert a.weight_ih_l0 is new and _blocks_of(a)
    data = torch.randn(3 * H, H)
    a.weight_hh_l0.data, b.weight_hh_l0.data = data, data.clone()
    with pytest.warns(UserWarning, match="not part of single contiguous chunk of memory"):
        torch.testing.assert_close(a(x)[0], b(x)[0])
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # once: the next call is flat again
        a(x)
    assert _blocks_of(a)


def test_to_half_double_deepcopy_and_pickle_keep_one_buffer() -> None:
    a, b = _pair("lstm", num_layers=2)
    x = torch.randn(4, 2, IN, dtype=torch.float64)
    a.double(), b.double()
    assert a._flat.dtype == torch.float64 and _blocks_of(a)
    torch.testing.assert_close(a(x)[0], b(x)[0], atol=1e-10, rtol=0)
    for copied in (copy.deepcopy(a), pickle.loads(pickle.dumps(a))):
        assert _blocks_of(copied) and copied._flat.data_ptr() != a._flat.data_ptr()
        assert torch.equal(copied(x)[0], a(x)[0])
    a.half()
    assert a._flat.dtype == torch.float16 and _blocks_of(a)
    a.to(torch.float32)
    assert _blocks_of(a) and a(x.float())[0].dtype == torch.float32


def test_functional_call_uses_the_given_weights_and_leaves_the_buffer() -> None:
    a, b = _pair("lstm", num_layers=2, dtype=torch.float64)
    x = torch.randn(4, 2, IN, dtype=torch.float64)
    given = {n: p.detach() * 2 for n, p in a.named_parameters()}
    flat = a._flat.clone()
    got = torch.func.functional_call(a, given, (x,))[0]
    torch.testing.assert_close(got, torch.func.functional_call(b, given, (x,))[0])
    assert torch.equal(a._flat, flat) and _blocks_of(a)


def test_dropout_follows_torchs_global_generator() -> None:
    m = cnn.LSTM(IN, H, num_layers=3, dropout=0.5)
    x = torch.randn(6, 2, IN)
    torch.manual_seed(1)
    first = m(x)[0]
    torch.manual_seed(1)
    assert torch.equal(m(x)[0], first)
    assert not torch.equal(m(x)[0], first)  # the generator moved on
    m.eval()
    assert torch.equal(m(x)[0], m(x)[0])


BAD_CONSTRUCTORS = [
    ((5, 4), {"dropout": 1.5}),
    ((5, 4), {"dropout": "x"}),
    ((5, 4), {"bias": 1}),
    ((5, 4), {"batch_first": None}),
    ((5.0, 4), {}),
    ((0, 4), {}),
    ((5, "4"), {}),
    ((5, 0), {}),
    ((5, 4), {"num_layers": 0}),
    ((5, 4), {"proj_size": -1}),
    ((5, 4), {"proj_size": 4}),
]


@pytest.mark.parametrize(("args", "kwargs"), BAD_CONSTRUCTORS)
def test_constructor_errors_are_torch_nns(args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
    with pytest.raises(Exception) as theirs:
        tnn.LSTM(*args, **kwargs)
    with pytest.raises(
        type(theirs.value), match="^" + __import__("re").escape(str(theirs.value)) + "$"
    ):
        cnn.LSTM(*args, **kwargs)


def test_class_specific_constructor_errors_are_torch_nns() -> None:
    for ours, theirs, kwargs in ((cnn.GRU, tnn.GRU, {"proj_size": 2}),
                                 (cnn.RNN, tnn.RNN, {"nonlinearity": "gelu"})):  # fmt: skip
        with pytest.raises(ValueError) as want:
            theirs(5, 4, **kwargs)
        with pytest.raises(ValueError, match=__import__("re").escape(str(want.value))):
            ours(5, 4, **kwargs)
    with pytest.warns(UserWarning, match="non-zero dropout expects num_layers greater than 1"):
        cnn.LSTM(5, 4, dropout=0.5)


def _bad_calls(kind: str) -> list[tuple[Any, Any]]:
    lstm = kind.startswith("lstm")
    h = torch.zeros(1, 3, H)
    hx = (h, torch.zeros(1, 3, H)) if lstm else h
    wrong = (torch.zeros(1, 2, H), torch.zeros(1, 3, H)) if lstm else torch.zeros(1, 2, H)
    flat2 = (torch.zeros(1, H), torch.zeros(1, H)) if lstm else torch.zeros(1, H)
    return [
        (torch.zeros(2, 3, 4, IN), None),  # 4-D
        (torch.zeros(2, 3, IN + 1), None),  # input size
        (torch.zeros(2, 3, IN), wrong),  # state batch
        (torch.zeros(2, 3, IN), flat2),  # 2-D states for a 3-D input
        (torch.zeros(2, IN), hx),  # 3-D states for a 2-D input
        (torch.zeros(2, 3, IN, dtype=torch.float64), None),  # dtype
    ]


@pytest.mark.parametrize("kind", ["lstm", "gru", "rnn-tanh"])
def test_forward_errors_are_torch_nns(kind: str) -> None:
    a, b = _pair(kind)
    for x, hx in _bad_calls(kind):
        with pytest.raises(Exception) as theirs:
            b(x, hx)
        with pytest.raises(type(theirs.value)) as ours:
            a(x, hx)
        assert str(ours.value) == str(theirs.value)


@pytest.mark.parametrize("kind", ["lstm", "gru", "rnn-relu"])
@pytest.mark.parametrize("batch_first", [False, True])
def test_sequence_lengths_on_a_padded_batch_equal_torch_nns_packed_sequence(
    kind: str, batch_first: bool
) -> None:
    """Ours takes ``sequence_lengths`` with a plain padded tensor; torch.nn needs a
    PackedSequence for the same result: outputs 0 past each length, each sequence's final
    state at its last valid step, and the gradients (float64)."""
    a, b = _pair(kind, num_layers=2, bidirectional=True, batch_first=batch_first,
                 dtype=torch.float64)  # fmt: skip
    lengths = [6, 2, 4]
    x = torch.randn(3, 6, IN, dtype=torch.float64, requires_grad=True)
    xt = x if batch_first else x.transpose(0, 1)
    out, state = a(xt, sequence_lengths=lengths)
    packed = pack_padded_sequence(xt, torch.tensor(lengths), batch_first=batch_first,
                                  enforce_sorted=False)  # fmt: skip
    want, want_state = b(packed)
    want_out = torch.nn.utils.rnn.pad_packed_sequence(want, batch_first=batch_first,
                                                      total_length=6)[0]  # fmt: skip
    torch.testing.assert_close(out, want_out, atol=1e-10, rtol=1e-10)
    got_states = state if isinstance(state, tuple) else (state,)
    want_states = want_state if isinstance(want_state, tuple) else (want_state,)
    for g, w in zip(got_states, want_states):
        torch.testing.assert_close(g, w, atol=1e-10, rtol=1e-10)
    (ga,) = torch.autograd.grad(out.sum() + got_states[0].sum(), x)
    (gb,) = torch.autograd.grad(want_out.sum() + want_states[0].sum(), x)
    torch.testing.assert_close(ga, gb, atol=1e-10, rtol=1e-10)
    with pytest.raises(ValueError, match=r"sequence_lengths must be in \[1, 6\]|must be in"):
        a(xt, sequence_lengths=[7, 2, 4])
    with pytest.raises(ValueError, match="a PackedSequence carries its own lengths"):
        a(packed, sequence_lengths=lengths)
    single = a(xt[0] if batch_first else xt[:, 0], sequence_lengths=3)[0]  # unbatched
    assert single.shape == (6, 2 * H) and not single[3:].any() and single[2].any()


def test_vmap_grad_and_autocast_where_torch_nn_cannot() -> None:
    """torch.func.vmap over a batch of inputs (torch.nn has no batching rule for its RNNs),
    torch.func.grad through functional_call, and torch.autocast (ours computes in the
    parameters' dtype: the same values as without autocast)."""
    a, b = _pair("lstm", batch_first=True, dtype=torch.float64)
    xs = torch.randn(3, 2, 6, IN, dtype=torch.float64)
    got = torch.func.vmap(lambda x: a(x)[0])(xs)
    torch.testing.assert_close(got, torch.stack([b(x)[0] for x in xs]), atol=1e-10, rtol=1e-10)
    with pytest.raises(RuntimeError):
        torch.func.vmap(lambda x: b(x)[0])(xs)
    params = {n: p.detach() for n, p in a.named_parameters()}
    grads = torch.func.grad(lambda p: torch.func.functional_call(a, p, (xs[0],))[0].sum())(params)
    want = torch.autograd.grad(b(xs[0])[0].sum(), list(b.parameters()))
    for (n, g), w in zip(grads.items(), want):
        torch.testing.assert_close(g, w, atol=1e-10, rtol=1e-10, msg=n)
    m = cnn.GRU(IN, H)
    x = torch.randn(6, 2, IN)
    plain = m(x)[0]
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert torch.equal(m(x)[0], plain)
