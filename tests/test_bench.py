"""cudnn_rnn.cli.bench: timing a model against its peers (``cudnn-rnn bench``; the suite uses it).

Timings themselves are never asserted; what is checked is what runs, on which weights and inputs,
how outputs are compared, and what the notes say.
"""

from __future__ import annotations

import argparse
import re
from pathlib import Path

import numpy as np
import pytest
import torch

import cudnn_rnn
from cudnn_rnn import convert
from cudnn_rnn.cli import bench
from cudnn_rnn.cli import runtime_peer as _runtime_peer
from cudnn_rnn.core.variant import Variant
from tests.support.timing import FakeClock

TINY = bench.Timing(repeats=1, block=0.001, warmup=0.0)
pytestmark = [
    pytest.mark.filterwarnings(
        "ignore:You are using the legacy TorchScript-based ONNX export:DeprecationWarning"
    ),
    # Keras' torch backend converts with np.array(tensor), which NumPy 2 flags for torch's
    # __array__ (as in tests/converters/test_keras.py).
    pytest.mark.filterwarnings(
        "ignore:__array__ implementation doesn't accept a copy keyword:DeprecationWarning"
    ),
]


def test_alternating_timer_measures_each_function(monkeypatch: pytest.MonkeyPatch) -> None:
    clock = FakeClock()  # each call takes exactly its time, however busy the machine
    monkeypatch.setattr(_runtime_peer, "time", clock)

    def sleeper(seconds: float) -> object:
        return lambda: clock.sleep(seconds)

    times = bench.time_alternating(
        {"short": sleeper(0.002), "long": sleeper(0.006)},  # type: ignore[dict-item]
        repeats=3,
        block=0.02,
        warmup=0.01,
    )
    assert times == {"short": pytest.approx(0.002), "long": pytest.approx(0.006)}


def test_the_warm_up_makes_at_least_warmup_calls_untimed() -> None:
    calls: list[int] = []
    bench.time_alternating({"f": lambda: calls.append(1)}, repeats=1, block=1e-9, warmup=0.0)
    # WARMUP_CALLS untimed, one to size the block, then per repeat one untimed and the block.
    assert len(calls) == bench.WARMUP_CALLS + 1 + 1 + 1


def test_lighter_timing() -> None:
    assert bench.Timing(5, 0.2, 1.0).lighter() == bench.Timing(3, 0.1, 0.5)
    assert bench.Timing(1, 0.02, 0.0).lighter() == bench.Timing(1, 0.01, 0.0)


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--repeats", "0"], "--repeats must be an integer >= 1, got 0."),
        (["--repeats", "-3"], "--repeats must be an integer >= 1, got -3."),
        (["--block", "0"], "--block must be a number of seconds > 0, got 0.0."),
        (["--block", "nan"], "--block must be a number of seconds > 0, got nan."),
        (["--warmup", "-1"], "--warmup must be a number of seconds >= 0, got -1.0."),
        (["--device", "gpu"], "--device 'gpu' is not a device; use cpu, cuda or cuda:N."),
        (["--device", "meta"], "--device must be cpu, cuda or cuda:N, got 'meta'."),
    ],
)
def test_timing_options_are_checked(argv: list[str], message: str) -> None:
    parser = argparse.ArgumentParser()
    bench.add_timing_arguments(parser)
    defaults = parser.parse_args([])
    assert (defaults.repeats, defaults.block, defaults.warmup) == (5, 0.2, 1.0)
    bench.check_timing_arguments(defaults)
    with pytest.raises(ValueError, match=re.escape(message)):
        bench.check_timing_arguments(parser.parse_args(argv))


def test_random_batches_are_seeded_and_shaped() -> None:
    batches = bench.random_batches(3, 5, [4, 2], [None, [2, 1, 1]])
    assert [x.shape for x, _ in batches] == [(4, 3, 5), (2, 3, 5)]
    assert batches[0][1] is None and batches[1][1] is not None
    assert batches[1][1].dtype == np.int32 and batches[1][1].tolist() == [2, 1, 1]
    again = bench.random_batches(3, 5, [4, 2], [None, [2, 1, 1]])
    assert all(np.array_equal(a[0], b[0]) for a, b in zip(batches, again))
    assert not np.array_equal(batches[0][0][:2], batches[1][0])  # one generator, drawn on
    with pytest.raises(ValueError, match="2 batch lengths in steps but 1 in lengths"):
        bench.random_batches(3, 5, [4, 2], [None])


def test_runtime_outputs_are_compared_over_the_valid_steps_only() -> None:
    want = np.zeros((3, 2, 1), np.float32)
    got = want.copy()
    got[2, 1] = 5.0  # past sequence 1's length
    got[0, 0] = 1e-3
    diff, padding = bench.compare(got, want, np.array([3, 2], np.int32))
    assert diff == pytest.approx(1e-3) and padding == 5.0
    assert bench.compare(got, want, None) == (5.0, 0.0)


def test_a_missing_runtime_is_skipped_with_a_note(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytest.importorskip("onnx")
    monkeypatch.setattr(bench, "installed", lambda package: package != "openvino")
    layer = cudnn_rnn.CudnnLSTM(1, 3, input_size=3, seed=0)
    x = torch.randn(4, 2, 3)
    notes: list[str] = []
    jobs = bench.runtime_jobs(layer, x, str(tmp_path), notes, varlen=False)
    assert [peer for peer, _, _ in jobs] == [bench.ORT_OURS, bench.ORT_TORCH]
    assert all(Path(path).is_file() for _, path, _ in jobs)
    assert notes == ["openvino not installed (pip install openvino)"]
    notes = []
    jobs = bench.runtime_jobs(layer, x, str(tmp_path), notes, varlen=True)
    assert [peer for peer, _, _ in jobs] == [bench.ORT_OURS]  # torch's export: full length only
    assert notes[-1] == "torch.onnx.export: full-length sequences only (no packed sequences)"
    monkeypatch.setattr(bench, "installed", lambda package: False)
    notes = []
    assert bench.runtime_jobs(layer, x, str(tmp_path), notes, varlen=False) == []
    assert notes == [
        "onnxruntime not installed (pip install onnxruntime)",
        "openvino not installed (pip install openvino)",
    ]


def test_measure_runs_every_peer_on_the_same_weights_and_inputs() -> None:
    pytest.importorskip("onnxruntime")
    layer = cudnn_rnn.CudnnGRU(2, 4, direction="bidirectional", input_size=3, seed=0)
    batches = bench.random_batches(3, 3, [5])
    result = bench.measure(layer, batches, timing=TINY, training=True, label="gru")
    assert list(result.inference)[:2] == [bench.OURS, bench.TORCH_NN]
    assert {bench.ORT_OURS, bench.ORT_TORCH} <= set(result.inference)
    assert set(result.training) == {bench.OURS, bench.TORCH_NN}
    assert all(t > 0 for t in [*result.inference.values(), *result.training.values()])
    # Every peer that ran computed what ours computes on these inputs.
    ran = set(result.inference) - {bench.OURS}
    assert set(result.max_abs_diff) == ran
    assert max(result.max_abs_diff.values()) < 1e-5
    assert not any("differs from ours" in n for n in result.notes)
    assert bench.installed("openvino") == (bench.OPENVINO in result.inference)


def test_measure_with_lengths_leaves_out_what_cannot_take_them() -> None:
    pytest.importorskip("onnxruntime")
    layer = cudnn_rnn.CudnnLSTM(1, 4, input_size=3, seed=0)
    batches = bench.random_batches(3, 3, [6, 4], [[6, 2, 5], [4, 4, 1]])
    result = bench.measure(layer, batches, timing=TINY, label="lstm")
    assert bench.ORT_OURS in result.inference and bench.ORT_TORCH not in result.inference
    assert bench.KERAS not in result.inference and not result.training
    assert "Keras: full-length sequences only here, not compared" in result.notes
    assert result.max_abs_diff[bench.TORCH_NN] < 1e-5  # packed sequences: the valid steps agree
    assert result.max_abs_diff[bench.ORT_OURS] < 1e-5


def test_a_peer_that_computes_something_else_gets_a_note(monkeypatch: pytest.MonkeyPatch) -> None:
    """The comparison is real: a torch.nn module off by 1e-3 in one bias is reported."""
    to_torch = convert.to_torch

    def off(layer: object) -> torch.nn.Module:
        module: torch.nn.Module = to_torch(layer)
        with torch.no_grad():
            module.bias_ih_l0[0] += 1e-2  # type: ignore[operator, index]
        return module

    monkeypatch.setattr(convert, "to_torch", off)
    layer = cudnn_rnn.CudnnRNNTanh(1, 3, input_size=2, seed=0)
    result = bench.measure(
        layer, bench.random_batches(2, 2, [3]), timing=TINY, keras=False, runtimes=False, label="m"
    )
    assert result.max_abs_diff[bench.TORCH_NN] > bench.OUTPUT_TOLERANCE
    assert any(
        n.startswith("torch.nn differs from ours on m: max |output - ours| = ")
        for n in result.notes
    )


def test_a_model_torch_nn_cannot_hold_is_timed_alone() -> None:
    layer = cudnn_rnn.CudnnLSTM(1, 4, input_size=3, num_proj=4, seed=0)
    result = bench.measure(
        layer, bench.random_batches(2, 3, [3]), timing=TINY, training=True, label="proj"
    )
    assert set(result.inference) == {bench.OURS} and set(result.training) == {bench.OURS}
    assert result.notes[0].startswith("torch.nn: not compared (to_torch: CudnnLSTM has num_proj=4")
    assert any(
        n.startswith("no ONNX export (to_onnx: CudnnLSTM has num_proj=4") for n in result.notes
    )


def test_a_variant_meets_the_runtimes_that_compute_it() -> None:
    """A reset-before GRU: torch.nn holds no such module (a note, no crash), onnxruntime runs
    our ONNX export of it and agrees with ours."""
    pytest.importorskip("onnxruntime")
    layer = cudnn_rnn.CudnnGRU(1, 4, input_size=3, seed=0, variant=Variant(reset_after=False))
    result = bench.measure(
        layer, bench.random_batches(2, 3, [5]), timing=TINY, keras=False, label="gru0"
    )
    assert bench.TORCH_NN not in result.inference and bench.ORT_TORCH not in result.inference
    assert bench.ORT_OURS in result.inference
    assert result.max_abs_diff[bench.ORT_OURS] < 1e-5
    assert any(n.startswith("torch.nn: not compared (to_torch:") for n in result.notes)
    assert any(n.startswith("torch.onnx.export of torch.nn: not compared") for n in result.notes)


def test_other_dtypes_meet_torch_nn_only() -> None:
    layer = cudnn_rnn.CudnnGRU(1, 3, input_size=2, seed=0, dtype=torch.float64)
    result = bench.measure(layer, bench.random_batches(2, 2, [3]), timing=TINY)
    assert set(result.inference) == {bench.OURS, bench.TORCH_NN}
    assert result.max_abs_diff[bench.TORCH_NN] < 1e-6
    assert result.notes == ["onnxruntime, OpenVINO and Keras: compared on float32 models only"]


def _remote(tmp_path: Path, model: str | None = None) -> bench.RemotePeer:
    """onnxruntime on a small LSTM's export (or on the file ``model``), in its own process."""
    pytest.importorskip("onnxruntime")
    layer = cudnn_rnn.CudnnLSTM(1, 4, input_size=3, seed=0)
    batches = bench.random_batches(2, 3, [5])
    path = str(tmp_path / "m.onnx")
    if model is None:
        convert.to_onnx(layer, path)
    else:
        Path(path).write_text(model)
    with torch.no_grad():
        want = layer(torch.from_numpy(batches[0][0]))[0].numpy()
    np.savez(tmp_path / "in.npz", x0=batches[0][0])
    np.savez(tmp_path / "want.npz", want)
    return bench.RemotePeer(
        bench.ORT_OURS, path, "X", str(tmp_path / "in.npz"), str(tmp_path / "want.npz")
    )


def test_a_runtime_in_its_own_process_is_timed_on_command(tmp_path: Path) -> None:
    remote = _remote(tmp_path)
    try:
        remote.ready()
        assert remote.max_abs_diff < 1e-6 and remote.max_abs_padding == 0.0
        assert remote.warm(0.0) > 0
        assert remote.block(3) > 0
    finally:
        remote.close()
    assert remote._proc.returncode == 0  # it left on "quit"


def test_a_runtimes_process_runs_without_torch(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Importing torch would add about 2 s to each of the suite's runtime processes."""
    launch = "import sys; sys.modules['torch'] = None; " + _runtime_peer.LAUNCH
    monkeypatch.setattr(_runtime_peer, "LAUNCH", launch)
    remote = _remote(tmp_path)
    try:
        remote.ready()  # an import of torch would have failed here
        assert remote.max_abs_diff < 1e-6
        assert remote.block(2) > 0
    finally:
        remote.close()
    assert remote._proc.returncode == 0
    assert remote._proc.args[2] == launch


def test_a_runtime_that_refuses_its_model_or_dies_says_why(tmp_path: Path) -> None:
    remote = _remote(tmp_path, model="not an onnx file")
    with pytest.raises(bench.RemotePeerError, match=r"^onnxruntime \(our export\): \w+"):
        remote.ready()
    remote.close()
    remote = _remote(tmp_path)
    try:
        remote.ready()
        remote._proc.kill()
        with pytest.raises(bench.RemotePeerError, match="its process ended"):
            remote.block(1)
    finally:
        remote.close()


def test_the_runtimes_alternate_with_ours_block_by_block(monkeypatch: pytest.MonkeyPatch) -> None:
    """A runtime's blocks come between ours, not after all of them: a machine whose speed drifts
    moves every implementation alike."""
    pytest.importorskip("onnxruntime")
    events: list[str] = []
    block = bench.RemotePeer.block

    def logged_block(self: bench.RemotePeer, count: int) -> float:
        events.append(self.peer)
        return block(self, count)

    monkeypatch.setattr(bench.RemotePeer, "block", logged_block)
    call = bench.layer_call
    monkeypatch.setattr(bench, "layer_call", lambda *a: (events.append(bench.OURS), call(*a))[1])
    layer = cudnn_rnn.CudnnGRU(1, 4, input_size=3, seed=0)
    timing = bench.Timing(repeats=3, block=0.001, warmup=0.0)
    result = bench.measure(layer, bench.random_batches(2, 3, [4]), timing=timing, keras=False)
    assert bench.ORT_OURS in result.inference
    runtimes = [p for p in bench.RUNTIMES if p in result.inference]
    # per repeat: ours' untimed call and block, then each runtime's block (and no other order)
    runs = [e for i, e in enumerate(events) if i == 0 or e != events[i - 1]]
    assert runs[-3 * (1 + len(runtimes)) :] == 3 * [bench.OURS, *runtimes]


def test_a_failing_fresh_process_says_why() -> None:
    with pytest.raises(RuntimeError, match=r"AttributeError: .*'no_such_function'"):
        bench.in_fresh_process("cudnn_rnn.cli.bench", "no_such_function", [], timeout=120)
    assert bench.in_fresh_process("json", "dumps", [[1, "a"]], timeout=120) == '[1, "a"]'


def test_report_lists_times_ratios_distances_and_notes() -> None:
    result = bench.Measurement(
        inference={bench.OURS: 0.002, bench.TORCH_NN: 0.004, bench.ORT_OURS: 0.001},
        training={bench.OURS: 0.01, bench.TORCH_NN: 0.02},
        max_abs_diff={bench.TORCH_NN: 0.0, bench.ORT_OURS: 3e-8},
        notes=["a note", "a note", "another"],
    )
    lines = bench.report(result)
    assert lines == [
        "inference (forward under torch.no_grad()), median ms per call:",
        "  implementation                ms  ours / it  max |output - ours|",
        "  ours                           2       1.00                    -",
        "  torch.nn                       4       0.50              0.0e+00",
        "  onnxruntime (our export)       1       2.00              3.0e-08",
        "training step (forward + backward), median ms per call:",
        "  implementation      ms  ours / it",
        "  ours                10       1.00",
        "  torch.nn            20       0.50",
        "notes:",
        "  - a note",  # each note once
        "  - another",
    ]
