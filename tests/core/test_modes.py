"""The mode table (cudnn_rnn.core.modes): every place that knows a fact about a mode takes it
from there, and the C engine agrees with it on what each code means."""

from __future__ import annotations

import pytest

from cudnn_rnn.core.gates import CUDNN_GATES, GATE_ORDERS
from cudnn_rnn.core.modes import MODES, mode_of_code
from cudnn_rnn.core.spec import RNNSpec


def test_each_framework_orders_exactly_the_mode_s_gates() -> None:
    for name, mode in MODES.items():
        assert CUDNN_GATES[name] == mode.gates
        assert RNNSpec(name, 1, 2, 3).num_gates == mode.num_gates
        for framework, order in mode.gate_orders.items():
            gates = set(mode.gates) - ({"h"} if framework == "tf" and name == "gru" else set())
            assert sorted(order) == sorted(gates), (name, framework)
            assert GATE_ORDERS[framework][name] == order
        assert mode_of_code(mode.code) is mode
    assert sorted(m.code for m in MODES.values()) == [0, 1, 2, 3]  # cuDNN's cudnnRNNMode_t
    with pytest.raises(KeyError):
        mode_of_code(4)


def test_the_engines_codes_are_the_table_s_and_the_c_engine_agrees() -> None:
    from cudnn_rnn.engines import cudnn, native, native_library

    for name, mode in MODES.items():
        assert native.MODE_CODES[name] == cudnn.MODE_CODES[name] == mode.code
    if not native.available():
        pytest.skip(f"the native engine is not loaded: {native.describe()}")
    lib = native_library._library().lib
    for mode in MODES.values():
        assert lib.cr_mode_gates(mode.code) == mode.num_gates


def test_onnx_operators_follow_the_table() -> None:
    from cudnn_rnn.export import ONNX_OPS

    assert {name: op.op_type for name, op in ONNX_OPS.items()} == {
        name: m.onnx_op for name, m in MODES.items()
    }
    assert ONNX_OPS["rnn_relu"].activations == ("Relu",)
    assert ONNX_OPS["lstm"].activations == ("Sigmoid", "Tanh", "Tanh")
