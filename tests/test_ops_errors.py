"""Bad input to the op-level classes: a clear TypeError/ValueError, never a C++ traceback."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch

from cudnn_rnn import ops


def lstm(**kw: Any) -> ops.CudnnLSTM:
    args: dict[str, Any] = dict(num_layers=2, num_units=4, input_size=3)
    args.update(kw)
    return ops.CudnnLSTM(**args)


def call_args(op: ops.CudnnLSTM, t: int = 5, b: int = 2) -> dict[str, Any]:
    return dict(
        input_data=torch.zeros(t, b, 3),
        input_h=torch.zeros(2, b, 4),
        input_c=torch.zeros(2, b, 4),
        params=torch.zeros(op.params_size()),
    )


@pytest.mark.parametrize(
    "kwargs,error,message",
    [
        (dict(direction="sideways"), ValueError, r"ops\.CudnnLSTM: invalid direction 'sideways'"),
        (dict(input_mode="x"), ValueError, r"ops\.CudnnLSTM: invalid input_mode 'x'"),
        (
            dict(dtype=torch.int32),
            ValueError,
            r"ops\.CudnnLSTM: only float16, bfloat16, float32 and "
            r"float64 are supported, provided torch\.int32\.",
        ),
        (dict(dtype="complex64"), ValueError, r"provided 'complex64'"),
        (
            dict(dtype=np.float32),
            TypeError,
            r"ops\.CudnnLSTM: dtype must be a torch\.dtype, got type",
        ),
        (
            dict(seed=1.5),
            TypeError,
            r"ops\.CudnnLSTM: seed must be an int or None, got float 1\.5\.",
        ),
        (
            dict(input_mode="skip_input"),
            ValueError,
            r"ops\.CudnnLSTM: input_mode 'skip_input' .* "
            r"input_size=3 and num_units=4",
        ),
        (dict(num_proj=5), ValueError, r"ops\.CudnnLSTM: num_proj must be in \[1, num_units=4\]"),
        (dict(num_layers=0), ValueError, r"ops\.CudnnLSTM: num_layers must be an int >= 1, got 0"),
    ],
)
def test_constructor_errors(kwargs: dict[str, Any], error: type[Exception], message: str) -> None:
    with pytest.raises(error, match=message):
        lstm(**kwargs)


def test_num_proj_on_other_modes() -> None:
    for cls in (ops.CudnnGRU, ops.CudnnRNNTanh, ops.CudnnRNNRelu):
        with pytest.raises(
            ValueError,
            match=rf"ops\.{cls.__name__}: num_proj is only supported "
            r"for rnn_mode 'lstm'",
        ):
            cls(1, 4, 3, num_proj=2)  # type: ignore[arg-type]


def test_dtype_strings_and_constants_accepted() -> None:
    op = ops.CudnnGRU(1, 2, 2, input_mode="auto_select", direction="bidirectional", dtype="float64")
    assert op.dtype == torch.float64 and op.rnn_mode == "gru" and op.num_dirs == 2


@pytest.mark.parametrize(
    "change,error,message",
    [
        (
            dict(input_data=np.zeros((5, 2, 3))),
            TypeError,
            r"ops\.CudnnLSTM: input_data must be a torch\.Tensor, got ndarray; wrap it with "
            r"torch\.as_tensor\.",
        ),
        (
            dict(input_data=torch.zeros(5, 3)),
            ValueError,
            r"ops\.CudnnLSTM: input_data must be a 3-D tensor \[time, batch, input_size\] with "
            r"input_size=3 .* got shape \(5, 3\)\.",
        ),
        (
            dict(input_data=torch.zeros(5, 2, 4)),
            ValueError,
            r"input_size=3 .* got shape \(5, 2, 4\)",
        ),
        (dict(input_data=torch.zeros(0, 2, 3)), ValueError, r"at least one step .* \(0, 2, 3\)"),
        (
            dict(input_data=torch.zeros(5, 2, 3, dtype=torch.float64)),
            TypeError,
            r"ops\.CudnnLSTM: input_data must have dtype torch\.float32 like the op, got "
            r"torch\.float64; "
            r"convert it with \.to\(torch\.float32\)\.",
        ),
        (
            dict(input_h=torch.zeros(1, 2, 4)),
            ValueError,
            r"ops\.CudnnLSTM: input_h must have shape \[num_layers \* num_dirs, batch, "
            r"num_units\] = "
            r"\(2, 2, 4\), got \(1, 2, 4\)\.",
        ),
        (
            dict(input_h=torch.zeros(2, 3, 4)),
            ValueError,
            r"input_h .* = \(2, 2, 4\), got \(2, 3, 4\)",
        ),
        (
            dict(input_c=torch.zeros(2, 2, 5)),
            ValueError,
            r"input_c .* = \(2, 2, 4\), got \(2, 2, 5\)",
        ),
        (
            dict(input_c=None),
            TypeError,
            r"ops\.CudnnLSTM: input_c must be a torch\.Tensor, got "
            r"NoneType\.",
        ),
        (
            dict(input_h=torch.zeros(2, 2, 4, dtype=torch.float16)),
            TypeError,
            r"input_h must have dtype torch\.float32 like the op, got torch\.float16",
        ),
        (
            dict(params=torch.zeros(3)),
            ValueError,
            r"ops\.CudnnLSTM: params must be a 1-D buffer of params_size\(\) = 304 elements, "
            r"got shape "
            r"\(3,\)\.",
        ),
        (dict(params=torch.zeros(304, 1)), ValueError, r"got shape \(304, 1\)"),
        (
            dict(params=torch.zeros(304, dtype=torch.float64)),
            TypeError,
            r"params must have dtype torch\.float32 like the op, got torch\.float64",
        ),
        (dict(params=[0.0] * 304), TypeError, r"params must be a torch\.Tensor, got list\."),
        (
            dict(sequence_lengths=[1, 6]),
            ValueError,
            r"ops\.CudnnLSTM: sequence_lengths must be in \[1, 5\] \(the number of time "
            r"steps\), got "
            r"values from 1 to 6\.",
        ),
        (dict(sequence_lengths=torch.tensor([0, 5])), ValueError, r"got values from 0 to 5"),
        (
            dict(sequence_lengths=[5, 5, 5]),
            ValueError,
            r"ops\.CudnnLSTM: sequence_lengths must have shape \[batch\] = \(2,\), got \(3,\)\.",
        ),
        (dict(sequence_lengths=[[5, 5]]), ValueError, r"got \(1, 2\)"),
        (
            dict(sequence_lengths=torch.tensor([2.0, 5.0])),
            TypeError,
            r"ops\.CudnnLSTM: sequence_lengths must hold integers, got dtype torch\.float32\.",
        ),
        (
            dict(sequence_lengths=[2.5, 5]),
            TypeError,
            r"sequence_lengths must be integers \(a tensor, array or list\), got list of "
            r"dtype float64",
        ),
        (
            dict(is_training=1),
            TypeError,
            r"ops\.CudnnLSTM: is_training must be a bool, got int 1\.",
        ),
        (dict(time_major=0), TypeError, r"ops\.CudnnLSTM: time_major must be a bool, got int 0\."),
    ],
)
def test_call_errors(change: dict[str, Any], error: type[Exception], message: str) -> None:
    op = lstm()
    args = call_args(op)
    args.update(change)
    with pytest.raises(error, match=message):
        op(**args)


def test_batch_major_shapes_named_in_message() -> None:
    op = lstm()
    args = call_args(op)
    with pytest.raises(ValueError, match=r"\[batch, time, input_size\] .*\(time_major=False\)"):
        op(**{**args, "input_data": torch.zeros(5, 2, 2)}, time_major=False)
    # batch-major: states stay [L*D, B, H] with B from input_data's first axis
    with pytest.raises(ValueError, match=r"input_h .* = \(2, 5, 4\), got \(2, 2, 4\)"):
        op(**args, time_major=False)


def test_projection_state_names_num_proj() -> None:
    op = lstm(num_proj=2)
    args = call_args(op)
    with pytest.raises(
        ValueError,
        match=r"input_h must have shape \[num_layers \* num_dirs, "
        r"batch, num_proj\] = \(2, 2, 2\), got \(2, 2, 4\)",
    ):
        op(**args)


def test_gru_call_errors() -> None:
    op = ops.CudnnGRU(1, 4, 3)
    x, h, p = torch.zeros(2, 1, 3), torch.zeros(1, 1, 4), torch.zeros(op.params_size())
    assert op(x, h, p)[0].shape == (2, 1, 4)
    with pytest.raises(
        ValueError,
        match=r"ops\.CudnnGRU: input_h must have shape \[num_layers "
        r"\* num_dirs, batch, num_units\] = \(1, 1, 4\)",
    ):
        op(x, torch.zeros(2, 1, 4), p)


def test_params_to_canonical_errors() -> None:
    op = lstm()
    with pytest.raises(ValueError, match=r"params must be a 1-D buffer of params_size\(\) = 304"):
        op.params_to_canonical(torch.zeros(10))
    with pytest.raises(
        TypeError,
        match=r"params must have dtype torch\.float32 like the op, got "
        r"float64",
    ):
        op.params_to_canonical(np.zeros(304))
    with pytest.raises(TypeError, match=r"params must be a torch\.Tensor, got str"):
        op.params_to_canonical("params")  # type: ignore[arg-type]
    w, _ = op.params_to_canonical(np.zeros(304, np.float32))
    assert len(w) == 16 and w[0].shape == (4, 3) and isinstance(w[0], np.ndarray)


def test_canonical_to_params_errors() -> None:
    op = lstm()
    w, b = op.params_to_canonical(torch.zeros(op.params_size()))
    with pytest.raises(
        TypeError,
        match=r"ops\.CudnnLSTM: weights must be a list of tensors or "
        r"arrays, got Tensor\.",
    ):
        op.canonical_to_params(torch.zeros(3), b)  # type: ignore[arg-type]
    with pytest.raises(
        TypeError,
        match=r"ops\.CudnnLSTM: biases\[2\] must be a torch\.Tensor or "
        r"numpy\.ndarray, got float\.",
    ):
        op.canonical_to_params(w, [*b[:2], 0.5, *b[3:]])  # type: ignore[list-item]
    with pytest.raises(
        TypeError,
        match=r"weights\[1\] must have dtype torch\.float32 like the op, "
        r"got torch\.float64",
    ):
        op.canonical_to_params([w[0], w[1].double(), *w[2:]], b)
    with pytest.raises(TypeError, match=r"weights\[0\] must be a floating array, got dtype int64"):
        op.canonical_to_params([np.zeros((4, 3), np.int64), *w[1:]], b)
    with pytest.raises(
        ValueError,
        match=r"ops\.CudnnLSTM: expected 16 canonical weights for lstm "
        r"\(num_layers=2, num_units=4, input_size=3, "
        r"unidirectional\), got 15\.",
    ):
        op.canonical_to_params(w[1:], b)
    with pytest.raises(
        ValueError,
        match=r"wrong shape of canonical biases: #0 \(layer 0 fw "
        r"input_bias gate i\) expected \(4,\), got \(5,\)",
    ):
        op.canonical_to_params(w, [torch.zeros(5), *b[1:]])
    skip = ops.CudnnGRU(1, 3, 3, input_mode="skip_input")
    sw, sb = skip.params_to_canonical(torch.zeros(skip.params_size()))
    with pytest.raises(
        ValueError,
        match=r"ops\.CudnnGRU: canonical weight #1 \(layer 0 fw input "
        r"gate u\) must be the identity matrix",
    ):
        skip.canonical_to_params([sw[0], torch.zeros(3, 3), *sw[2:]], sb)


def test_canonical_to_params_numpy_and_mixed() -> None:
    op = ops.CudnnRNNTanh(1, 2, 3, dtype=torch.float64)
    rng = np.random.default_rng(0)
    w = [rng.standard_normal((2, 3)), rng.standard_normal((2, 2))]
    b = [rng.standard_normal(2), torch.tensor(rng.standard_normal(2))]
    params = op.canonical_to_params(w, b)
    assert params.dtype == torch.float64 and params.shape == (op.params_size(),)
    back_w, back_b = op.params_to_canonical(params)
    for x, y in zip(w + b, back_w + back_b):
        np.testing.assert_array_equal(np.asarray(x), y.numpy())


def test_canonical_tensors_on_two_devices() -> None:
    op = ops.CudnnRNNTanh(1, 2, 2)
    w, b = op.params_to_canonical(torch.zeros(op.params_size()))
    with pytest.raises(
        ValueError,
        match=r"ops\.CudnnRNNTanh: canonical tensors must be on one "
        r"device, got \['cpu', 'meta'\]\.",
    ):
        op.canonical_to_params([w[0].to("meta"), w[1]], b)
