"""``convert.find_rnns`` and ``cudnn-rnn inspect``/``convert --model``: every RNN of any file, and
one of them loaded by the name the listing gives (issue 22). Per-format details are tested with
each format's reader (tests/io/); here the one entry point over all of them."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import torch

from cudnn_rnn import CudnnGRU, CudnnLSTM, checkpoint, convert
from cudnn_rnn.cli import main
from cudnn_rnn.converters.loader import load_layer
from cudnn_rnn.io.found import FoundRNN
from tests.support.paths import FIXTURES

KERAS2 = FIXTURES / "keras2"
TF1 = FIXTURES / "tf1"


def test_a_tf1_checkpoint_lists_its_model_by_scope() -> None:
    (found,) = convert.find_rnns(TF1 / "cudnn_lstm.ckpt")
    assert (found.name, found.mode, found.num_layers, found.num_units, found.input_size) == (
        "model",
        "lstm",
        2,
        3,
        2,
    )
    assert found.computable and found.format == "tf1"


def test_our_checkpoint_of_two_layers_lists_both_and_loads_each(tmp_path: Path) -> None:
    a = CudnnLSTM(1, 3, input_size=2, scope="enc")
    b = CudnnGRU(2, 4, input_size=3, direction="bidirectional", scope="dec")
    path = tmp_path / "two.safetensors"
    checkpoint.save(str(path), [a, b])
    found = convert.find_rnns(path)
    assert [(f.name, f.mode, f.num_layers, f.direction) for f in found] == [
        ("enc", "lstm", 1, "unidirectional"),
        ("dec", "gru", 2, "bidirectional"),
    ]
    out = tmp_path / "dec.safetensors"
    assert main(["convert", str(path), str(out), "--model", "dec"]) == 0
    layer = CudnnGRU(2, 4, input_size=3, direction="bidirectional", scope="dec")
    checkpoint.restore(str(out), layer)
    assert torch.equal(layer.opaque_kernel, b.opaque_kernel)


def test_several_models_and_no_choice_is_refused_naming_them(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "two.safetensors"
    checkpoint.save(
        str(path),
        [CudnnLSTM(1, 3, input_size=2, scope="a"), CudnnLSTM(1, 3, input_size=2, scope="b")],
    )
    assert main(["convert", str(path), str(tmp_path / "x.safetensors")]) == 2
    err = capsys.readouterr().err
    assert (
        "holds 2 RNNs that we compute ('a', 'b'); pick one with --model NAME "
        "(cudnn-rnn inspect lists them)."
    ) in err
    assert main(["convert", str(path), str(tmp_path / "x.safetensors"), "--model", "c"]) == 2
    assert "no model 'c'; it holds 'a', 'b'" in capsys.readouterr().err


def test_keras_nested_layers_are_listed_by_path_and_loaded(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    found = convert.find_rnns(KERAS2 / "nested_model.h5")
    names = [f.name for f in found]
    assert "encoder/core/gru" in names, names
    assert all(isinstance(f, FoundRNN) and f.format == "keras_h5" for f in found)
    assert main(["inspect", str(KERAS2 / "nested_model.h5")]) == 0
    out = capsys.readouterr().out
    assert f"found {len(found)} RNN(s)" in out and "'encoder/core/gru': gru" in out
    dst = tmp_path / "gru.safetensors"
    assert (
        main(["convert", str(KERAS2 / "nested_model.h5"), str(dst), "--model", "encoder/core/gru"])
        == 0
    )


def test_keras_layers_we_cannot_compute_are_listed_with_every_reason(tmp_path: Path) -> None:
    h5py = pytest.importorskip("h5py")
    path = tmp_path / "gelu.h5"
    shutil.copy(KERAS2 / "hard_sigmoid_model.h5", path)
    with h5py.File(path, "r+") as f:  # an activation we have no function for
        f.attrs["model_config"] = f.attrs["model_config"].replace('"tanh"', '"gelu"')
    found = convert.find_rnns(path)
    refused = [f for f in found if not f.computable]
    assert refused and all(f.reasons for f in refused)
    assert any(
        "activation 'gelu' is no function we compute" in r for f in refused for r in f.reasons
    )
    (variant,) = convert.find_rnns(KERAS2 / "hard_sigmoid_model.h5")  # once refused: a variant
    assert variant.computable and variant.details["variant"]["gate_activation"]["alpha"] == 0.2


def test_a_record_is_computable_exactly_when_it_has_no_reasons() -> None:
    with pytest.raises(ValueError, match="a computable RNN has no reasons"):
        FoundRNN("x", "there", "onnx", "lstm", computable=True, reasons=("clip",))
    with pytest.raises(ValueError, match="another has at least one"):
        FoundRNN("x", "there", "onnx", None, computable=False)
    line = FoundRNN("x", "node 'x'", "onnx", None, computable=False, reasons=("a", "b")).describe()
    assert line == "'x': not a cuDNN mode at node 'x'; we cannot compute it: a; b"


class _Network(torch.nn.Module):
    """A whole model around two RNNs: what a user's exported or saved network looks like."""

    def __init__(self) -> None:
        super().__init__()
        self.emb = torch.nn.Embedding(10, 4)
        self.lstm = torch.nn.LSTM(4, 3, 2, bidirectional=True)
        self.gru = torch.nn.GRU(6, 5)
        self.head = torch.nn.Linear(5, 2)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        y, _ = self.lstm(self.emb(tokens))
        z, _ = self.gru(y)
        return self.head(z)


def _network_files(tmp_path: Path) -> tuple[_Network, dict[str, tuple[Path, str, str]]]:
    """The network saved three ways, each with the names its listing gives the two RNNs."""
    import warnings

    torch.manual_seed(0)
    net = _Network().eval()
    onnx_path, pt, ts = tmp_path / "net.onnx", tmp_path / "net.pt", tmp_path / "net_ts.pt"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the exporters' deprecation notes: the producers'
        torch.onnx.export(net, (torch.zeros(5, 2, dtype=torch.long),), str(onnx_path), dynamo=False)
        torch.jit.save(torch.jit.script(net), str(ts))
    torch.save(net.state_dict(), pt)
    return net, {
        "onnx": (onnx_path, "/lstm/LSTM+/lstm/LSTM_1", "/gru/GRU"),
        "torch": (pt, "lstm", "gru"),
        "torchscript": (ts, "lstm", "gru"),
    }


def test_a_whole_network_lists_its_rnns_and_each_converts_by_name(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """An exported ONNX network, a torch.save state_dict and a TorchScript archive of the same
    model: inspect lists both RNNs, convert refuses to guess, and --model NAME gives a layer
    that computes what the network's own module computes."""
    net, made = _network_files(tmp_path)
    x, y = torch.randn(5, 2, 4), torch.randn(5, 2, 6)
    want_lstm, want_gru = net.lstm(x)[0].detach(), net.gru(y)[0].detach()
    for kind, (path, lstm, gru) in made.items():
        found = convert.find_rnns(path)
        assert [
            (f.name, f.mode, f.num_layers, f.num_units, f.input_size, f.direction) for f in found
        ] == [
            (lstm, "lstm", 2, 3, 4, "bidirectional"),
            (gru, "gru", 1, 5, 6, "unidirectional"),
        ], kind
        assert main(["inspect", str(path)]) == 0
        assert "found 2 RNN(s), 2 computable" in capsys.readouterr().out
        assert main(["convert", str(path), str(tmp_path / "x.safetensors")]) == 2
        err = capsys.readouterr().err
        says = f"holds 2 RNNs that we compute ({lstm!r}, {gru!r}); pick one with "
        assert says + "--model NAME" in err, kind
        assert not (tmp_path / "x.safetensors").exists()
        for name, inputs, want in ((lstm, x, want_lstm), (gru, y, want_gru)):
            dst = tmp_path / f"{kind}-{name.replace('/', '_')}.safetensors"
            assert main(["convert", str(path), str(dst), "--model", name]) == 0
            got = load_layer(str(dst))(inputs)[0].detach()
            torch.testing.assert_close(got, want, atol=1e-6, rtol=0, msg=f"{kind} {name}")


def test_the_convert_wrappers_pass_every_keyword_on(tmp_path: Path) -> None:
    net, made = _network_files(tmp_path)
    onnx_path, lstm, _ = made["onnx"]
    x = torch.randn(5, 2, 4)
    got = convert.from_onnx(onnx_path, node=lstm, input_mode="linear_input")(x)[0]
    torch.testing.assert_close(got, net.lstm(x)[0], atol=1e-6, rtol=0)
    y = torch.randn(5, 2, 6)
    got = convert.from_torch(made["torchscript"][0], prefix="gru", input_mode="linear_input")(y)[0]
    torch.testing.assert_close(got, net.gru(y)[0], atol=1e-6, rtol=0)
    with pytest.raises(TypeError):
        convert.from_onnx(onnx_path, nodes=lstm)
