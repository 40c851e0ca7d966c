"""``cudnn_rnn.find_rnns`` and ``cudnn_rnn.load``: one loader for every format (issue 39 item 2).
Each loaded layer computes what the producer's module computes (the peer: torch.nn, ONNX
Runtime, or the weights themselves); a file of several RNNs needs a name, and the refusal says
how to give one in the caller's words (Python arguments here, options on the command line)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from torch import nn

import cudnn_rnn
from cudnn_rnn import CudnnGRU, CudnnLSTM, checkpoint
from cudnn_rnn.cli import main
from cudnn_rnn.converters.canonical import layer_canonical
from cudnn_rnn.converters.loader import UsageError
from tests.support.paths import FIXTURES


def test_the_loader_is_public_and_dir_lists_it() -> None:
    assert {"find_rnns", "load", "nn"} <= set(dir(cudnn_rnn)) | set(cudnn_rnn.__all__)
    assert cudnn_rnn.load.__module__ == "cudnn_rnn.converters.loader"


class Tagger(nn.Module):
    """An RNN among other layers: what a torch.save'd or exported model holds."""

    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(10, 3)
        self.lstm = nn.LSTM(3, 4, num_layers=2, bidirectional=True)
        self.head = nn.Linear(8, 2)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        return self.head(self.lstm(self.embed(tokens))[0])


def _nonzero(module: nn.Module) -> nn.Module:
    torch.manual_seed(0)
    with torch.no_grad():
        for p in module.parameters():
            p.uniform_(-0.5, 0.5)  # biases too
    return module


def test_a_torch_model_s_one_rnn_loads_without_a_name_and_computes_as_torch_nn(
    tmp_path: Path,
) -> None:
    model = _nonzero(Tagger())
    torch.save(model.state_dict(), tmp_path / "tagger.pt")
    (found,) = cudnn_rnn.find_rnns(tmp_path / "tagger.pt")
    assert (found.name, found.mode, found.num_layers, found.direction) == (
        "lstm", "lstm", 2, "bidirectional",
    )  # fmt: skip
    layer = cudnn_rnn.load(tmp_path / "tagger.pt")
    x = torch.randn(5, 2, 3)
    y, (h, _) = layer(x)
    want, (wh, _) = model.lstm(x)
    torch.testing.assert_close(y, want, rtol=0, atol=1e-6)
    torch.testing.assert_close(h, wh, rtol=0, atol=1e-6)


def test_several_rnns_need_a_name_and_the_refusal_says_name_in_python_words(
    tmp_path: Path,
) -> None:
    state = {
        **{f"enc.{k}": v for k, v in _nonzero(nn.GRU(3, 4)).state_dict().items()},
        **{f"dec.{k}": v for k, v in nn.LSTM(4, 5).state_dict().items()},
    }
    torch.save(state, tmp_path / "two.pt")
    assert [f.name for f in cudnn_rnn.find_rnns(tmp_path / "two.pt")] == ["enc", "dec"]
    with pytest.raises(UsageError, match=r"holds 2 RNNs .*'enc', 'dec'.*pick one with name=NAME"):
        cudnn_rnn.load(tmp_path / "two.pt")
    with pytest.raises(UsageError, match="--model"):  # the command's words on the command line
        cudnn_rnn.converters.loader.load_layer(str(tmp_path / "two.pt"))
    gru = cudnn_rnn.load(tmp_path / "two.pt", "enc")
    assert isinstance(gru, CudnnGRU) and gru.num_units == 4


def test_every_format_through_one_call(tmp_path: Path) -> None:
    """Ours (safetensors), TF1 (a bundle real TensorFlow wrote, under names and a kernel layout
    make_tf1_fixtures.py chose, which TF 1.15's own saveable agrees with: test_checkpoint_tf1.py),
    Keras 2 .h5 (real Keras), torch: each loaded by the same call, with the values the format's
    own reader gives."""
    ours = CudnnLSTM(2, 3, input_size=2, scope="enc")
    checkpoint.save(str(tmp_path / "ours.safetensors"), ours)
    loaded = cudnn_rnn.load(tmp_path / "ours.safetensors")
    assert torch.equal(loaded.opaque_kernel, ours.opaque_kernel)
    tf1 = cudnn_rnn.load(FIXTURES / "tf1" / "cudnn_lstm.ckpt")
    assert (tf1.num_layers, tf1.num_units, tf1.input_size) == (2, 3, 2)
    expected = np.load(FIXTURES / "tf1" / "cudnn_lstm.npz")
    kernel = "model/rnn/multi_rnn_cell/cell_0/cudnn_compatible_lstm_cell/kernel"
    _, w, _ = layer_canonical(tf1, "test")  # cuDNN order: W_i, W_f, W_c, W_o, R_i, ...
    # TF's kernel is [in + H, 4H], gates i, c, f, o: its first input column block is W_i^T.
    np.testing.assert_array_equal(w[0].numpy(), expected[kernel][:2, :3].T)
    keras = FIXTURES / "keras2"
    (first, *_) = cudnn_rnn.find_rnns(keras / "cudnn_model.h5")
    assert cudnn_rnn.load(keras / "cudnn_model.h5", first.name).num_units == first.num_units


onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")


@pytest.mark.filterwarnings("ignore::DeprecationWarning")
@pytest.mark.filterwarnings("ignore::torch.jit.TracerWarning")
@pytest.mark.filterwarnings("ignore:Exporting a model to ONNX with a batch_size:UserWarning")
def test_an_onnx_graph_with_one_rnn_converts_without_model(tmp_path: Path) -> None:
    """The RNN inside a bigger graph (Gather, MatMul around it): the one computable RNN is
    picked, by the API and by ``cudnn-rnn convert`` without ``--model``."""
    model = _nonzero(Tagger()).eval()
    tokens = torch.randint(0, 10, (5, 2))
    with torch.no_grad():
        x = model.embed(tokens)
        want = model.lstm(x)[0]
    torch.onnx.export(model, (tokens,), str(tmp_path / "t.onnx"), dynamo=False)
    (found,) = cudnn_rnn.find_rnns(tmp_path / "t.onnx")
    assert found.computable and found.mode == "lstm"
    layer = cudnn_rnn.load(tmp_path / "t.onnx")
    with torch.no_grad():
        torch.testing.assert_close(layer(x)[0], want, rtol=0, atol=1e-5)
    out = tmp_path / "t.safetensors"
    assert main(["convert", str(tmp_path / "t.onnx"), str(out)]) == 0
    back = cudnn_rnn.load(out)  # (TF's canonical LSTM stores each gate's two biases summed)
    with torch.no_grad():
        torch.testing.assert_close(back(x)[0], want, rtol=0, atol=1e-5)


def test_cli_errors_name_cli_options(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    state = {
        **{f"a.{k}": v for k, v in nn.GRU(3, 4).state_dict().items()},
        **{f"b.{k}": v for k, v in nn.GRU(3, 4).state_dict().items()},
    }
    torch.save(state, tmp_path / "two.pt")
    assert main(["convert", str(tmp_path / "two.pt"), str(tmp_path / "o.safetensors")]) == 2
    err = capsys.readouterr().err
    assert "--model NAME" in err and "name=" not in err and "prefix=" not in err


CELLS = FIXTURES / "tf1_cells"


@pytest.mark.parametrize(
    "fixture", ["lstm", "lstm_proj", "basic_lstm", "multi_lstm", "bidi_lstm", "stack_bidi"]
)
def test_tf1_standard_cells_load_in_one_call_and_compute_what_tf_computed(fixture: str) -> None:
    """Checkpoints written by real TensorFlow (tf.compat.v1 cells, dynamic_rnn with lengths,
    non-zero biases): cudnn_rnn.load takes the file's one RNN, with the forget_bias TF used."""
    expected = np.load(CELLS / f"{fixture}.npz")
    (found,) = [f for f in cudnn_rnn.find_rnns(CELLS / f"{fixture}.ckpt") if f.computable]
    notes: list[str] = []
    layer = cudnn_rnn.load(
        CELLS / f"{fixture}.ckpt", forget_bias=float(expected["forget_bias"]), note=notes.append
    )
    assert layer.num_units == found.num_units and any("forget_bias" in n for n in notes)
    time_major = bool(expected["time_major"])
    x = torch.from_numpy(expected["inputs"])
    with torch.no_grad():
        y, states = layer(x, sequence_lengths=expected["lengths"].tolist(), time_major=time_major)
    np.testing.assert_allclose(y.numpy(), expected["outputs"], rtol=0, atol=1e-5)
    np.testing.assert_allclose(states[0].numpy(), expected["h"], rtol=0, atol=1e-5)


def test_tf1_cells_on_the_command_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["inspect", str(CELLS / "basic_lstm.ckpt")]) == 0
    assert "lstm" in capsys.readouterr().out
    out = tmp_path / "b.safetensors"
    assert main(["convert", str(CELLS / "basic_lstm.ckpt"), str(out), "--forget-bias", "0.5"]) == 0
    assert "note: " in capsys.readouterr().out
    expected = np.load(CELLS / "basic_lstm.npz")
    assert float(expected["forget_bias"]) == 0.5
    layer = cudnn_rnn.load(out)
    with torch.no_grad():
        y, _ = layer(
            torch.from_numpy(expected["inputs"]),
            sequence_lengths=expected["lengths"].tolist(),
            time_major=bool(expected["time_major"]),
        )
    np.testing.assert_allclose(y.numpy(), expected["outputs"], rtol=0, atol=1e-5)
    with pytest.raises(UsageError, match="forget_bias is for TF's standard LSTM cells"):
        cudnn_rnn.load(FIXTURES / "tf1" / "cudnn_lstm.ckpt", forget_bias=1.0)


def test_one_registry_covers_every_format_s_finder_loader_and_help() -> None:
    from cudnn_rnn import cli
    from cudnn_rnn.converters import finder, loader, readers
    from cudnn_rnn.io import registry

    names = [f.name for f in registry.FORMATS]
    assert sorted(names) == sorted(finder._FINDERS) == sorted(loader._LOADERS)
    assert set(readers.READERS.values()) == set(names)
    for f in registry.FORMATS:
        assert f.title in cli.DESCRIPTION
        for kind in f.kinds:
            assert registry.reader_for_kind(kind) == f.name
        for ext in f.extensions:
            assert registry.reader_for_name(f"model{ext.upper()}") == f.name


@pytest.mark.parametrize(
    "argv",
    [
        ["inspect", "{tf1}/cudnn_lstm.ckpt"],
        ["convert", "{tf1}/cudnn_lstm.ckpt", "{out}/a.safetensors"],
        ["convert", "{cells}/multi_lstm.ckpt", "{out}/b.pt"],
    ],
)
def test_one_command_parses_a_file_once(
    argv: list[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A command sniffs its file once and parses a TF1 index once, however many steps look."""
    from cudnn_rnn.converters import readers
    from cudnn_rnn.io.tf1 import bundle

    counts = {"sniff": 0, "_parse_index": 0}

    def counting(module: object, name: str) -> None:
        real = getattr(module, name)

        def wrapper(*args: object, **kwargs: object) -> object:
            counts[name] += 1
            return real(*args, **kwargs)

        monkeypatch.setattr(module, name, wrapper)

    counting(readers, "sniff")  # where every step asks a file's kind (readers.kind_of)
    counting(bundle, "_parse_index")
    args = [a.format(tf1=FIXTURES / "tf1", cells=CELLS, out=tmp_path) for a in argv]
    assert main(args) == 0
    assert counts == {"sniff": 1, "_parse_index": 1}
    counts.update(sniff=0, _parse_index=0)
    cudnn_rnn.load(args[1])
    assert counts == {"sniff": 1, "_parse_index": 1}


KERAS3 = FIXTURES / "keras3"


@pytest.mark.parametrize("fixture", ["lstm", "gru"])
def test_keras3_files_load_in_one_call_and_compute_what_keras_computed(
    fixture: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Real Keras 3 .keras files (written by Keras 3.15 on the torch backend), read without
    Keras: told by content, loaded by cudnn_rnn.load and by the command."""
    expected = np.load(KERAS3 / f"{fixture}.npz")
    (name,) = [f.name for f in cudnn_rnn.find_rnns(KERAS3 / f"{fixture}.keras") if f.computable]
    layer = cudnn_rnn.load(KERAS3 / f"{fixture}.keras")
    with torch.no_grad():
        y, _ = layer(torch.from_numpy(expected[f"{name}/input"]), time_major=False)
    np.testing.assert_allclose(y.numpy(), expected[f"{name}/output"], rtol=0, atol=1e-5)
    renamed = tmp_path / "model.bin"  # content, not the name, tells the format
    renamed.write_bytes((KERAS3 / f"{fixture}.keras").read_bytes())
    assert main(["inspect", str(renamed)]) == 0
    assert "keras3 file" in capsys.readouterr().out
    assert main(["convert", str(renamed), str(tmp_path / "k.safetensors")]) == 0


@pytest.mark.parametrize(
    ("path", "says"),
    [
        ("tf1_cells/lstm.ckpt", "forget_bias is not stored in a checkpoint"),
        ("tf1_cells/basic_rnn.ckpt", "the activation is not stored"),
        # A variant of cuDNN's math: what the file says, in the listing's words.
        ("keras2/go_backwards_model.h5", "it computes lstm with a variant: go_backwards"),
        ("keras3/go_backwards.keras", "it computes lstm with a variant: go_backwards"),
    ],
)
def test_the_listing_says_what_the_file_does_not(
    path: str, says: str, capsys: pytest.CaptureFixture[str]
) -> None:
    (found,) = [f for f in cudnn_rnn.find_rnns(FIXTURES / path) if f.computable]
    assert any(says in note for note in found.notes)
    assert main(["inspect", str(FIXTURES / path)]) == 0
    out = capsys.readouterr().out
    assert "; note: " in out and says in out.split("; note: ", 1)[1]


@pytest.mark.parametrize(
    ("file", "prefix"), [("lightning.ckpt", "state_dict."), ("lightning_module.pt", "")]
)
def test_lightning_files_load_by_name_as_lightning_computed(file: str, prefix: str) -> None:
    """Files written by real Lightning (a Trainer checkpoint; torch.save of the module), read
    without Lightning or the model's class: each RNN by the name find_rnns gives it."""
    path = FIXTURES / "torch_pickled" / file
    assert [f.name for f in cudnn_rnn.find_rnns(path)] == [f"{prefix}lstm", f"{prefix}gru"]
    expected = np.load(FIXTURES / "torch_pickled" / "expected.npz")
    lengths = expected["lengths"].tolist()
    lstm = cudnn_rnn.load(path, f"{prefix}lstm")
    gru = cudnn_rnn.load(path, f"{prefix}gru")
    with torch.no_grad():
        y, (h, c) = lstm(
            torch.from_numpy(expected["lstm_x"]),
            (torch.from_numpy(expected["lstm_h0"]), torch.from_numpy(expected["lstm_c0"])),
            sequence_lengths=lengths,
        )
        g, (gh,) = gru(
            torch.from_numpy(expected["gru_x"]),
            (torch.from_numpy(expected["gru_h0"]),),
            sequence_lengths=lengths,
        )
    for got, key in ((y, "lstm_y"), (h, "lstm_h"), (c, "lstm_c"), (g, "gru_y"), (gh, "gru_h")):
        np.testing.assert_allclose(got.numpy(), expected[key], rtol=0, atol=1e-5, err_msg=key)
