"""replace_rnns / restore_rnns on real models: the same keys, weights, device, dtype and mode;
a replaced model trains as torch.nn's does, and compiles (fullgraph, inductor) to eager's
values and gradients, which torch.nn's RNNs cannot."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from torch import nn as tnn

import cudnn_rnn.nn as cnn


class Tagger(tnn.Module):
    """Embedding -> 2-layer bidirectional LSTM -> GRU -> Linear, and a cell on the side."""

    def __init__(self, dtype: torch.dtype = torch.float32) -> None:
        super().__init__()
        self.embed = tnn.Embedding(20, 6, dtype=dtype)
        self.encoder = tnn.Sequential(
            tnn.LSTM(6, 8, num_layers=2, bidirectional=True, batch_first=True, dtype=dtype)
        )
        self.gru = tnn.GRU(16, 5, batch_first=True, dtype=dtype)
        self.cell = tnn.GRUCell(5, 5, dtype=dtype)
        self.head = tnn.Linear(5, 3, dtype=dtype)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        x, _ = self.encoder[0](self.embed(tokens))
        y, h = self.gru(x)
        h = self.cell(y[:, -1], h[0])
        return self.head(h)


def test_every_rnn_is_swapped_with_its_weights_keys_and_mode() -> None:
    torch.manual_seed(0)
    model = Tagger().eval()
    keys, values = list(model.state_dict()), [v.clone() for v in model.state_dict().values()]
    tokens = torch.randint(0, 20, (4, 7))
    before = model(tokens)
    assert cnn.replace_rnns(model) is model
    assert type(model.encoder[0]) is cnn.LSTM and type(model.gru) is cnn.GRU
    assert type(model.cell) is cnn.GRUCell and type(model.head) is tnn.Linear
    assert list(model.state_dict()) == keys
    assert all(torch.equal(a, b) for a, b in zip(model.state_dict().values(), values))
    assert not model.encoder[0].training and not model.cell.training
    torch.testing.assert_close(model(tokens), before, atol=1e-5, rtol=1e-5)
    assert cnn.restore_rnns(model) is model and type(model.gru) is tnn.GRU
    assert type(model.encoder[0]) is tnn.LSTM and type(model.cell) is tnn.GRUCell
    assert all(torch.equal(a, b) for a, b in zip(model.state_dict().values(), values))
    lone = cnn.replace_rnns(tnn.LSTM(3, 4, dtype=torch.float64))  # the model itself is one
    assert type(lone) is cnn.LSTM and lone.weight_hh_l0.dtype == torch.float64


def test_an_optimizer_made_before_the_swap_trains_the_replaced_model() -> None:
    """replace_rnns keeps the Parameter objects: an optimizer made before it (and its state)
    trains the new modules, as if torch.nn's had stayed (float64, dropout off)."""
    torch.manual_seed(3)
    theirs = Tagger(torch.float64)
    ours = Tagger(torch.float64)
    ours.load_state_dict(theirs.state_dict())
    data = [(torch.randint(0, 20, (4, 7)), torch.randint(0, 3, (4,))) for _ in range(3)]
    opts = [torch.optim.Adam(m.parameters(), lr=0.01) for m in (theirs, ours)]
    before = {name: id(p) for name, p in ours.named_parameters()}
    for step, (tokens, target) in enumerate(data * 2):
        if step == 2:
            cnn.replace_rnns(ours)  # mid-training, the optimizer's state (moments) kept
            assert type(ours.gru) is cnn.GRU and type(ours.cell) is cnn.GRUCell
            assert {name: id(p) for name, p in ours.named_parameters()} == before
        for model, opt in zip((theirs, ours), opts):
            opt.zero_grad()
            tnn.functional.cross_entropy(model(tokens), target).backward()
            opt.step()
    for (n, p), q in zip(ours.named_parameters(), theirs.parameters()):
        torch.testing.assert_close(p, q, atol=1e-9, rtol=1e-9, msg=n)
    # Each parameter is a view of its module's one buffer; restore_rnns gives them back.
    assert ours.gru.weight_hh_l0.untyped_storage().data_ptr() == (
        ours.gru.weight_ih_l0.untyped_storage().data_ptr()
    )
    cnn.restore_rnns(ours)
    assert {name: id(p) for name, p in ours.named_parameters()} == before
    assert type(ours.gru) is tnn.GRU


def test_flags_and_subclasses() -> None:
    class Mine(tnn.LSTM):  # a subclass may change the forward: left alone
        pass

    model = tnn.Sequential(Mine(3, 4), tnn.RNN(4, 4, nonlinearity="relu", bias=False))
    model[1].weight_hh_l0.requires_grad_(False)
    cnn.replace_rnns(model)
    assert type(model[0]) is Mine and type(model[1]) is cnn.RNN
    assert model[1].nonlinearity == "relu" and model[1].bias is False
    assert not model[1].weight_hh_l0.requires_grad and model[1].weight_ih_l0.requires_grad
    assert cnn.is_rnn(model[1]) and cnn.is_rnn(tnn.GRUCell(2, 2)) and not cnn.is_rnn(model[0])


def _train(model: Any, steps: int, data: list[tuple[torch.Tensor, torch.Tensor]]) -> list[float]:
    opt = torch.optim.Adam(model.parameters(), lr=0.01)
    losses = []
    for _ in range(steps):
        for tokens, target in data:
            opt.zero_grad()
            loss = tnn.functional.cross_entropy(model(tokens), target)
            loss.backward()
            opt.step()
            losses.append(loss.item())
    return losses


def test_a_replaced_model_trains_as_torch_nns_does() -> None:
    """float64, dropout off: the same losses and weights after 10 Adam steps."""
    torch.manual_seed(1)
    theirs = Tagger(torch.float64)
    ours = cnn.replace_rnns(Tagger(torch.float64))
    ours.load_state_dict(theirs.state_dict())
    data = [(torch.randint(0, 20, (4, 7)), torch.randint(0, 3, (4,))) for _ in range(5)]
    want, got = _train(theirs, 2, data), _train(ours, 2, data)
    torch.testing.assert_close(torch.tensor(got), torch.tensor(want), atol=1e-9, rtol=1e-9)
    for (n, p), q in zip(ours.named_parameters(), theirs.parameters()):
        torch.testing.assert_close(p, q, atol=1e-9, rtol=1e-9, msg=n)
    assert got[-1] < got[0]


@pytest.mark.parametrize("backend", ["inductor"])
def test_a_replaced_model_compiles_fullgraph_to_eagers_values_and_gradients(backend: str) -> None:
    torch._dynamo.reset()
    torch.manual_seed(2)
    model = cnn.replace_rnns(Tagger())
    tokens = torch.randint(0, 20, (4, 7))
    compiled = torch.compile(model, backend=backend, fullgraph=True)
    for _ in range(2):
        model.zero_grad()
        want = model(tokens)
        want.pow(2).sum().backward()
        grads = [p.grad.clone() for p in model.parameters()]
        model.zero_grad()
        got = compiled(tokens)
        got.pow(2).sum().backward()
        torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)
        for p, g in zip(model.parameters(), grads):
            torch.testing.assert_close(p.grad, g, atol=1e-5, rtol=1e-5)
        with torch.no_grad():  # the compiled model sees the new weights
            for p in model.parameters():
                p.sub_(0.1 * p.grad)


def test_distributed_data_parallel_trains_a_replaced_model() -> None:
    """One gloo process: DDP wraps the replaced model, its gradients reach every parameter,
    and a step gives what the bare model gives."""
    import torch.distributed as dist

    # An in-memory store (no port to race for), and DDP's reducer released while its group is
    # alive: a reducer outliving destroy_process_group once hung a test worker in gloo's
    # destructor, joining its threads.
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)  # type: ignore[attr-defined]
    try:
        torch.manual_seed(3)
        model = cnn.replace_rnns(Tagger(torch.float64))
        twin = cnn.replace_rnns(Tagger(torch.float64))
        twin.load_state_dict(model.state_dict())
        ddp = tnn.parallel.DistributedDataParallel(model)
        data = [(torch.randint(0, 20, (4, 7)), torch.randint(0, 3, (4,)))]
        _train(ddp, 2, data), _train(twin, 2, data)
        del ddp
        for p, q in zip(model.parameters(), twin.parameters()):
            torch.testing.assert_close(p, q, atol=1e-12, rtol=1e-12)
    finally:
        dist.destroy_process_group()
