"""The demo: a character language model on ``CudnnLSTM``, saved, restored and checked.

``python examples/demo.py [options]`` (``make demo``; ``--help`` lists the options) trains
``embedding -> CudnnLSTM (2 layers) -> linear`` to predict the next character of Lewis Carroll's
*Alice's Adventures in Wonderland* (``examples/data/alice.txt``; provenance in
``examples/data/SOURCE.md``), then does what the original library was for:

1. saves the LSTM as a canonical checkpoint (:func:`cudnn_rnn.checkpoint.save`);
2. restores that file into a ``MultiRNNCell`` of ``CudnnCompatibleLSTMCell``, as TF users did
   to run a cuDNN model without cuDNN, and into a ``torch.nn.LSTM`` through
   :func:`cudnn_rnn.convert.to_torch`;
3. samples a text from each of three implementations of the model's forward pass with the same
   seed, and compares their logits on a held-out batch: the run fails (exit code 1) unless every
   pair agrees to float32 rounding (:data:`RTOL`).

The three are three different kernels, so that their agreement means something: the trained
``CudnnLSTM`` on whatever engine ``cudnn_rnn`` runs by default (:func:`layer_engine`, printed),
the compatible cells called once per time step in a Python loop (:func:`step_by_step`; not
``dynamic_rnn``, which would hand them to torch's fused kernel), and ``torch.nn.LSTM``.

Files in ``--out`` (default ``./demo-out``):

==================  ========================================================================
lstm.safetensors    the ``CudnnLSTM``'s canonical checkpoint; ``checkpoint.restore`` reads it
                    into a ``CudnnLSTM`` or compatible cells, ``cudnn-rnn inspect`` describes it
head.safetensors    the rest of the model: ``embedding.weight [V, E]``, ``softmax.weight [V, H]``,
                    ``softmax.bias [V]`` (torch names and layouts); its metadata holds the
                    vocabulary (``vocab``, a JSON string) and the sizes (``config``, JSON)
loss.png            the training loss curve (needs matplotlib: ``pip install cudnn-rnn[plot]``)
summary.json        configuration, losses, logit differences and samples of the run
==================  ========================================================================

Training draws random windows of ``--seq-len`` characters (``--batch-size`` of them per step,
the same on every rank, from ``--seed``) from the first 95% of the text; the last 5% is
held out. Adam with a cosine-decayed learning rate and gradient clipping; the step itself is
:func:`train_step`, the loop :func:`train`, shared by one process and by data-parallel runs
where each rank takes its equal share of every global batch (:func:`shard`) and only rank 0
prints, saves and verifies. Data-parallel runs are started by torch's launcher, ``torchrun``
(``python -m torch.distributed.run --standalone --nproc-per-node N examples/demo.py ...``);
``--nproc N`` runs exactly that (:func:`launch`). Each worker reads its place in the group from
the environment torchrun sets (:func:`env_from_environ`), joins the group (gloo on CPU, NCCL on
CUDA) and trains its model wrapped in ``DistributedDataParallel``.

This script lives beside the package, not in it (the wheel holds neither it nor the text), and
imports only ``cudnn_rnn``: its public API and :mod:`cudnn_rnn.io.atomic`, the one atomic writer.

Ctrl-C stops training after the current step; the model so far is saved and the exit code is
130. Progress goes to stderr (one updating line on a terminal, plain lines otherwise).

>>> model = CharModel(vocab_size=5, embedding_size=3, num_units=4, seed=0)
>>> logits, (h, c) = model(torch.zeros(2, 7, dtype=torch.long))
>>> tuple(logits.shape), tuple(h.shape)
((2, 7, 5), (2, 2, 4))
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import itertools
import json
import math
import os
import shlex
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, field, fields
from datetime import timedelta
from pathlib import Path
from types import FrameType
from typing import Any, TextIO

import torch
import torch.nn.functional as F
from safetensors import safe_open
from safetensors.torch import save as st_save
from torch import Tensor, nn

import cudnn_rnn
from cudnn_rnn import CudnnCompatibleLSTMCell, CudnnLSTM, MultiRNNCell, checkpoint, convert
from cudnn_rnn.io import atomic

__all__ = [
    "EXIT_INTERRUPTED",
    "EXIT_MISMATCH",
    "EXIT_USAGE",
    "RTOL",
    "CharModel",
    "DemoConfig",
    "DistEnv",
    "Progress",
    "StopFlag",
    "TrainResult",
    "add_arguments",
    "build_parser",
    "config_from_args",
    "cosine_lr",
    "device_for",
    "env_from_environ",
    "exact_float32",
    "init_process_group",
    "launch",
    "layer_engine",
    "load_model",
    "load_text",
    "logit_differences",
    "main",
    "make_batches",
    "plot_losses",
    "run",
    "runners",
    "sample",
    "save_model",
    "shard",
    "shutdown",
    "split_text",
    "step_by_step",
    "torchrun_command",
    "train",
    "train_step",
    "wrap",
]

#: How the demo is run from the repository's root (its name in usage and error lines).
PROG = "examples/demo.py"
#: The shipped text, beside this script.
TEXT_FILE = Path(__file__).resolve().parent / "data" / "alice.txt"

TEXT_TITLE = "Alice's Adventures in Wonderland (Lewis Carroll, 1865)"
LSTM_FILE = "lstm.safetensors"
HEAD_FILE = "head.safetensors"
PLOT_FILE = "loss.png"
SUMMARY_FILE = "summary.json"
HEAD_FORMAT = "cudnn_rnn.demo_head"
EXIT_MISMATCH = 1
EXIT_USAGE = 2
EXIT_INTERRUPTED = 130
#: Largest |logit difference| accepted between two implementations, per dtype, relative to the
#: logits' scale (the smallest of the implementations' max |logit|). The three run different
#: kernels (the cells sum cuDNN's two biases and multiply ``[x, h]`` by one matrix), so they agree
#: to rounding, not bits. Measured on the default run (600 steps; 8 x 100 held-out characters;
#: max |logit| 12.7; docs/demo-run.json): the stepped cells differ from the fused engine and from
#: torch's kernel by 6.2e-6 in float32 (4.9e-7 of the scale, about 4 epsilons; the fused engine
#: and torch's kernel by 4.3e-6) and 9.5e-15 in float64 (about 3 epsilons). The tolerances
#: leave a margin of 30x (float32) and 1000x (float64) for other machines, engines, models and
#: lengths, and catch small mistakes: a first-layer kernel scaled by 1 + 1e-4 moves the logits
#: by 8e-4, a bias off by 1e-3 by 1e-2, a dropped bias by 2.
RTOL = {torch.float32: 1e-5, torch.float64: 1e-12}
HELD_OUT = 0.05  # the last 5% of the text is never trained on
MAX_GRAD_NORM = 1.0
VERIFY_ROWS = 8  # held-out sequences in the verification batch

_HELP = {
    "steps": "training steps",
    "batch_size": "sequences per step (the global batch, split over the processes)",
    "seq_len": "characters per training sequence",
    "num_units": "LSTM units per layer",
    "embedding_size": "size of the character embedding",
    "num_layers": "LSTM layers",
    "learning_rate": "Adam's learning rate at the start (cosine decay to a tenth)",
    "seed": "seed of the initial weights, the batches and the samples",
    "device": "auto (CUDA when available), cpu, cuda or cuda:N",
    "out": "directory for the checkpoint, loss curve and summary (created if missing)",
    "nproc": "train with N local processes: runs this script under torchrun "
    "(DistributedDataParallel: gloo on CPU, NCCL on GPU)",
    "text": "train on this UTF-8 text file instead of the shipped one",
    "prime": "text that starts every sample",
    "sample_length": "characters to sample after the prime",
    "temperature": "sampling temperature (lower: more conservative)",
}


@dataclass(frozen=True)
class DemoConfig:
    """Everything a demo run depends on (the CLI options, validated)."""

    steps: int = 600
    batch_size: int = 32
    seq_len: int = 100
    num_units: int = 256
    embedding_size: int = 32
    num_layers: int = 2
    learning_rate: float = 3e-3
    seed: int = 0
    device: str = "auto"
    out: Path = field(default_factory=lambda: Path("demo-out"))
    nproc: int = 1
    text: Path | None = None
    prime: str = "Alice "
    sample_length: int = 200
    temperature: float = 0.7

    def to_argv(self) -> list[str]:
        """CLI options reproducing this configuration, except ``--nproc`` (for the workers)."""
        argv: list[str] = []
        for f in fields(self):
            value = getattr(self, f.name)
            if f.name != "nproc" and value is not None:
                argv.append(f"--{f.name.replace('_', '-')}={value}")  # one token: '-x' is a value
        return argv


# -- data --------------------------------------------------------------------------------------


def load_text(path: Path | None = None) -> str:
    """The training text: ``path`` (UTF-8), or the shipped *Alice's Adventures in Wonderland*."""
    if path is not None:
        return path.read_text(encoding="utf-8")
    return TEXT_FILE.read_text(encoding="utf-8")


def split_text(ids: Tensor, seq_len: int) -> tuple[Tensor, Tensor]:
    """The training part of ``ids`` and the held-out rest as rows ``[N, seq_len]``.

    The last 5% (at least one row) is held out; what does not fill a row is dropped.

    >>> train_ids, rows = split_text(torch.arange(1000), seq_len=10)
    >>> train_ids.numel(), tuple(rows.shape), int(rows[0, 0])
    (950, (5, 10), 950)
    """
    split = int(ids.numel()) - max(math.ceil(ids.numel() * HELD_OUT), seq_len)
    held = ids[split:]
    return ids[:split], held[: held.numel() // seq_len * seq_len].view(-1, seq_len)


def make_batches(
    ids: Tensor,
    batch_size: int,
    seq_len: int,
    seed: int,
    env: DistEnv | None = None,
    device: torch.device | None = None,
) -> Callable[[int], tuple[Tensor, Tensor]]:
    """``step -> (inputs, targets)``: this rank's share of a random global batch of windows.

    The global batch of ``step`` depends only on ``seed`` and ``step`` (so every rank draws the
    same one and takes its rows); ``targets`` are the inputs shifted by one character.

    >>> batch = make_batches(torch.arange(100), batch_size=2, seq_len=4, seed=0)
    >>> x, y = batch(0)
    >>> tuple(x.shape), bool((y == x + 1).all())
    ((2, 4), True)
    """
    span = torch.arange(seq_len + 1)
    high = int(ids.numel()) - seq_len  # the last window ends on the last character

    def batch(step: int) -> tuple[Tensor, Tensor]:
        gen = torch.Generator().manual_seed(seed * 1_000_003 + step)
        starts = torch.randint(0, high, (batch_size,), generator=gen)
        rows = shard(ids[starts[:, None] + span], env)
        if device is not None:
            rows = rows.to(device)
        return rows[:, :-1], rows[:, 1:]

    return batch


# -- model -------------------------------------------------------------------------------------


class CharModel(nn.Module):
    """``embedding -> CudnnLSTM -> linear``: next-character logits, batch-major.

    ``forward(ids [B, T], state=None) -> (logits [B, T, V], (h, c))`` with ``h``, ``c``
    ``[num_layers, B, num_units]``. All initial weights come from ``seed`` (not from torch's
    global RNG): the embedding ``N(0, 1)``, the output layer ``U(-1/sqrt(H), 1/sqrt(H))`` with a
    zero bias, the LSTM its Glorot default.
    """

    def __init__(
        self,
        vocab_size: int,
        embedding_size: int,
        num_units: int,
        num_layers: int = 2,
        *,
        seed: int = 0,
        dtype: torch.dtype = torch.float32,
        device: torch.device | str | None = None,
    ) -> None:
        super().__init__()
        self.config = {
            "vocab_size": vocab_size,
            "embedding_size": embedding_size,
            "num_units": num_units,
            "num_layers": num_layers,
        }
        # Made on the meta device, so torch's own initialisation neither runs nor draws from
        # the global RNG; every value is written below from ``seed``.
        device = torch.device("cpu") if device is None else torch.device(device)
        self.embedding = nn.Embedding(
            vocab_size, embedding_size, device="meta", dtype=dtype
        ).to_empty(device=device)
        self.lstm = CudnnLSTM(
            num_layers, num_units, input_size=embedding_size, seed=seed, dtype=dtype, device=device
        )
        self.softmax = nn.Linear(num_units, vocab_size, device="meta", dtype=dtype).to_empty(
            device=device
        )
        gen = torch.Generator().manual_seed(seed)
        bound = 1.0 / math.sqrt(num_units)
        with torch.no_grad():
            emb = torch.randn(vocab_size, embedding_size, generator=gen, dtype=torch.float64)
            out = torch.rand(vocab_size, num_units, generator=gen, dtype=torch.float64)
            self.embedding.weight.copy_(emb)
            self.softmax.weight.copy_((2 * out - 1) * bound)
            self.softmax.bias.zero_()

    def forward(
        self, ids: Tensor, state: tuple[Tensor, ...] | None = None
    ) -> tuple[Tensor, tuple[Tensor, ...]]:
        outputs, state = self.lstm(self.embedding(ids), state, time_major=False)
        return self.softmax(outputs), state


def save_model(model: CharModel, vocab: str, out: Path) -> tuple[Path, Path]:
    """Write ``lstm.safetensors`` (canonical checkpoint) and ``head.safetensors`` into ``out``."""
    lstm_path, head_path = out / LSTM_FILE, out / HEAD_FILE
    checkpoint.save(lstm_path, model.lstm)
    tensors = {
        name: value.detach().to("cpu").contiguous()
        for name, value in model.state_dict().items()
        if not name.startswith("lstm.")
    }
    metadata = {
        "format": HEAD_FORMAT,
        "format_version": "1",
        "vocab": json.dumps(vocab),
        "config": json.dumps(model.config, sort_keys=True),
    }
    atomic.write_file(head_path, st_save(tensors, metadata=metadata))
    return lstm_path, head_path


def load_model(
    out: Path, device: torch.device | str = "cpu", dtype: torch.dtype = torch.float32
) -> tuple[CharModel, str]:
    """The model and vocabulary that :func:`save_model` wrote into ``out``."""
    with safe_open(str(out / HEAD_FILE), framework="pt", device="cpu") as f:
        metadata = f.metadata() or {}
        head = {name: f.get_tensor(name) for name in f.keys()}
    if metadata.get("format") != HEAD_FORMAT:
        raise ValueError(f"demo: {out / HEAD_FILE} is not a demo head file.")
    vocab: str = json.loads(metadata["vocab"])
    model = CharModel(**json.loads(metadata["config"]), dtype=dtype, device=device)
    checkpoint.restore(out / LSTM_FILE, model.lstm)
    model.embedding.load_state_dict({"weight": head["embedding.weight"]})
    model.softmax.load_state_dict({"weight": head["softmax.weight"], "bias": head["softmax.bias"]})
    return model, vocab


# -- training ----------------------------------------------------------------------------------


def train_step(
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    inputs: Tensor,
    targets: Tensor,
    max_grad_norm: float | None = MAX_GRAD_NORM,
) -> Tensor:
    """One optimizer step on the mean cross-entropy of ``model(inputs)`` against ``targets``.

    ``model`` may be wrapped in ``DistributedDataParallel``: its backward then leaves the mean of
    the ranks' gradients, the same on every rank, and the step stays in lockstep. Returns this
    rank's loss (detached).
    """
    optimizer.zero_grad(set_to_none=True)
    logits, _ = model(inputs)
    loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))
    torch.autograd.backward(loss)
    if max_grad_norm is not None:
        nn.utils.clip_grad_norm_(model.parameters(), max_grad_norm)
    optimizer.step()
    return loss.detach()


@dataclass
class TrainResult:
    """Per-step losses (the mean over ranks) and whether training stopped early."""

    losses: list[float]
    interrupted: bool = False

    @property
    def steps(self) -> int:
        return len(self.losses)


class StopFlag:
    """Ctrl-C as a request: the first SIGINT sets ``requested``, training stops after its step.

    In a process group every rank must stop at the same step, so the flag is combined over the
    ranks after each step. With ``hard_second`` a second SIGINT raises ``KeyboardInterrupt``.
    """

    def __init__(self) -> None:
        self.requested = False

    @contextlib.contextmanager
    def installed(self, hard_second: bool = True) -> Iterator[StopFlag]:
        import threading

        if threading.current_thread() is not threading.main_thread():
            yield self  # only the main thread may set signal handlers
            return

        def handler(signum: int, frame: FrameType | None) -> None:
            if self.requested and hard_second:
                raise KeyboardInterrupt
            self.requested = True

        previous = signal.signal(signal.SIGINT, handler)
        try:
            yield self
        finally:
            if previous is not None:  # None: set outside Python, cannot be put back
                signal.signal(signal.SIGINT, previous)


def train(
    model: nn.Module,
    batches: Callable[[int], tuple[Tensor, Tensor]],
    steps: int,
    optimizer: torch.optim.Optimizer,
    *,
    lr_at: Callable[[int], float] | None = None,
    max_grad_norm: float | None = MAX_GRAD_NORM,
    env: DistEnv | None = None,
    on_step: Callable[[int, float], None] | None = None,
    stop: StopFlag | None = None,
) -> TrainResult:
    """Run :func:`train_step` on ``batches(0) .. batches(steps - 1)``; every rank calls this.

    After each step the loss is averaged over the ranks and the stop flags combined (one small
    all-reduce), so that ``on_step(step, mean_loss)`` sees the global loss and all ranks stop
    at the same step.
    """
    result = TrainResult([])
    grouped = env is not None and env.world_size > 1
    try:
        for step in range(steps):
            if lr_at is not None:
                for group in optimizer.param_groups:
                    group["lr"] = lr_at(step)
            inputs, targets = batches(step)
            loss = train_step(model, optimizer, inputs, targets, max_grad_norm)
            requested = stop is not None and stop.requested
            mean_loss, stopping = _combine(loss, requested, env if grouped else None)
            result.losses.append(mean_loss)
            if on_step is not None:
                on_step(step + 1, mean_loss)
            if stopping:
                result.interrupted = True
                break
    except KeyboardInterrupt:
        if grouped:
            raise  # one rank cannot leave a group alone; the others would wait for it
        result.interrupted = True
    return result


def _combine(loss: Tensor, stop: bool, env: DistEnv | None) -> tuple[float, bool]:
    if env is None:
        return float(loss), stop
    import torch.distributed as dist

    both = torch.stack(
        [loss.to(torch.float64), torch.tensor(float(stop), dtype=torch.float64, device=loss.device)]
    )
    dist.all_reduce(both)
    return float(both[0]) / env.world_size, bool(both[1] > 0)


def cosine_lr(base: float, steps: int) -> Callable[[int], float]:
    """Learning rate at a step: ``base`` decayed along a half cosine to ``base / 10``.

    >>> lr = cosine_lr(1.0, 100)
    >>> lr(0), round(lr(50), 3), round(lr(100), 3)
    (1.0, 0.55, 0.1)
    """
    return lambda step: base * (0.1 + 0.45 * (1.0 + math.cos(math.pi * step / max(1, steps))))


class Progress:
    """A progress bar on a stream: step/total, loss, characters per second, time left.

    On a terminal one line is redrawn in place (at most 10 times a second); elsewhere (a log, a
    pipe) plain lines are written at the first and last step and every ``every`` steps.

    >>> print(Progress.render(30, 120, 2.34567, elapsed=15.0, chars_per_step=3200, width=10))
    step 30/120 [##........] loss 2.346 | 6.4k chars/s | ETA 0:45
    """

    def __init__(
        self,
        total: int,
        chars_per_step: int,
        stream: TextIO | None = None,
        *,
        every: int | None = None,
    ) -> None:
        self.total = total
        self.chars_per_step = chars_per_step
        self.stream = sys.stderr if stream is None else stream
        self.tty = bool(getattr(self.stream, "isatty", lambda: False)())
        self.every = every if every is not None else max(1, total // 20)
        self.start = time.monotonic()
        self._drawn_at: float | None = None

    @staticmethod
    def render(
        step: int, total: int, loss: float, *, elapsed: float, chars_per_step: int, width: int = 24
    ) -> str:
        filled = width * step // max(1, total)
        rate = step * chars_per_step / max(elapsed, 1e-9)
        left = elapsed / max(step, 1) * (total - step)
        return (
            f"step {step}/{total} [{'#' * filled}{'.' * (width - filled)}] loss {loss:.3f} | "
            f"{_si(rate)} chars/s | ETA {_clock(left)}"
        )

    def update(self, step: int, loss: float) -> None:
        now = time.monotonic()
        last = step >= self.total
        line = self.render(
            step, self.total, loss, elapsed=now - self.start, chars_per_step=self.chars_per_step
        )
        if self.tty:
            if not last and self._drawn_at is not None and now - self._drawn_at < 0.1:
                return
            self.stream.write("\r" + line + "\x1b[K")
        elif step == 1 or last or step % self.every == 0:
            self.stream.write(line + "\n")
        else:
            return
        self._drawn_at = now
        self.stream.flush()

    def close(self) -> None:
        """End the redrawn line (on a terminal) so that what follows starts on its own."""
        if self.tty and self._drawn_at is not None:
            self.stream.write("\n")
            self.stream.flush()
        self._drawn_at = None


def _si(value: float) -> str:
    for unit, scale in (("M", 1e6), ("k", 1e3)):
        if value >= scale:
            return f"{value / scale:.1f}{unit}"
    return f"{value:.0f}"


def _clock(seconds: float) -> str:
    minutes, secs = divmod(round(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}" if hours else f"{minutes}:{secs:02d}"


# -- the three implementations: sampling and verification --------------------------------------

#: ``(ids [B, T], state or None) -> (logits [B, T, V], state)``
Runner = Callable[[Tensor, Any], tuple[Tensor, Any]]


def runners(model: CharModel, restored: CharModel, out: Path) -> dict[str, Runner]:
    """Three implementations: the trained model, and its checkpoint restored into compatible
    cells (stepped in Python by :func:`step_by_step`) and into ``torch.nn.LSTM``."""
    device = restored.embedding.weight.device
    cells = MultiRNNCell(
        [CudnnCompatibleLSTMCell(restored.lstm.num_units) for _ in range(restored.lstm.num_layers)]
    )
    checkpoint.restore(out / LSTM_FILE, cells)
    cells = cells.to(device=device, dtype=restored.lstm.dtype)
    torch_lstm = convert.to_torch(restored.lstm).to(device)
    head = restored  # the embedding and output layer as read back from head.safetensors

    def fused(ids: Tensor, state: Any) -> tuple[Tensor, Any]:
        logits, new_state = model(ids, state)
        return logits, new_state

    def stepped(ids: Tensor, state: Any) -> tuple[Tensor, Any]:
        outputs, state = step_by_step(cells, head.embedding(ids), state)
        return head.softmax(outputs), state

    def torch_nn(ids: Tensor, state: Any) -> tuple[Tensor, Any]:
        outputs, state = torch_lstm(head.embedding(ids).transpose(0, 1), state)
        return head.softmax(outputs.transpose(0, 1)), state

    return {
        "CudnnLSTM (trained, fused)": fused,
        "MultiRNNCell (stepped in Python)": stepped,
        "torch.nn.LSTM (to_torch)": torch_nn,
    }


def step_by_step(
    cells: MultiRNNCell, inputs: Tensor, state: tuple[Any, ...] | None = None
) -> tuple[Tensor, tuple[Any, ...]]:
    """Run ``cells`` over ``inputs [B, T, I]`` one time step per call, in a Python loop.

    This is how TF1 ran a cuDNN model's checkpoint without cuDNN, one cell call per layer and
    step. :func:`cudnn_rnn.cells.dynamic_rnn` would hand these cells to torch's fused kernel
    instead, the kernel ``torch.nn.LSTM`` runs, which would make the comparison with it vacuous.
    Returns the outputs ``[B, T, H]`` and the final state (zeros when ``state`` is None).

    >>> cells = MultiRNNCell([CudnnCompatibleLSTMCell(4), CudnnCompatibleLSTMCell(4)])
    >>> outputs, state = step_by_step(cells, torch.ones(2, 5, 3))
    >>> tuple(outputs.shape), bool((state[1].h == outputs[:, -1]).all())
    ((2, 5, 4), True)
    """
    if state is None:
        state = cells.zero_state(int(inputs.shape[0]), inputs.dtype, device=inputs.device)
    outputs = []
    for x in inputs.unbind(1):
        output, state = cells(x, state)
        outputs.append(output)
    return torch.stack(outputs, 1), state


def layer_engine(device: torch.device) -> str:
    """The engine a ``CudnnLSTM`` runs inference on by default on ``device``, in words.

    ``cudnn_rnn.cpu_engine()`` on a CPU where the library has it (such as ``"native (avx512f,
    2 threads)"``), else ``"torch"``: torch's fused kernels, the ones ``torch.nn.LSTM`` runs.
    """
    cpu_engine: Callable[[], str] | None = getattr(cudnn_rnn, "cpu_engine", None)
    return cpu_engine() if device.type == "cpu" and cpu_engine is not None else "torch"


def sample(
    run_model: Runner,
    vocab: str,
    prime: str,
    length: int,
    *,
    seed: int = 0,
    temperature: float = 1.0,
    device: torch.device | None = None,
) -> str:
    """``prime`` and ``length`` characters drawn one at a time from the model's distribution.

    Each draw inverts the cumulative distribution at a uniform number from a generator seeded
    with ``seed``, so models whose logits agree to rounding draw the same text. ``device`` is
    where the model takes its inputs.
    """
    gen = torch.Generator().manual_seed(seed)
    chars = list(prime)
    with torch.no_grad():
        logits, state = run_model(_encode(prime, vocab, device)[None], None)
        for _ in range(length):
            probs = torch.softmax(logits[0, -1].double().cpu() / temperature, dim=0)
            u = torch.rand((), generator=gen, dtype=torch.float64)
            index = min(int(torch.searchsorted(probs.cumsum(0), u)), len(vocab) - 1)
            chars.append(vocab[index])
            logits, state = run_model(torch.tensor([[index]], device=device), state)
    return "".join(chars)


def _encode(text: str, vocab: str, device: torch.device | None = None) -> Tensor:
    index = {ch: i for i, ch in enumerate(vocab)}
    return torch.tensor([index[ch] for ch in text], dtype=torch.long, device=device)


def logit_differences(
    runs: Mapping[str, Runner], ids: Tensor
) -> tuple[dict[tuple[str, str], float], float]:
    """Max |logit difference| between every two implementations on ``ids`` (IEEE float32), and
    the logits' scale: the smallest of the implementations' max |logit|.

    A NaN in an implementation's logits makes its differences NaN, which no tolerance accepts.
    """
    with torch.no_grad(), exact_float32():
        logits = {name: run_model(ids, None)[0].double() for name, run_model in runs.items()}
    diffs = {
        (a, b): float((logits[a] - logits[b]).abs().max())
        for a, b in itertools.combinations(logits, 2)
    }
    return diffs, min(float(values.abs().max()) for values in logits.values())


@contextlib.contextmanager
def exact_float32() -> Iterator[None]:
    """IEEE float32 in cuDNN's RNNs and cuBLAS's matmuls: on a GPU they may use TF32 otherwise."""
    backends = torch.backends
    if hasattr(backends.cudnn, "rnn"):  # torch >= 2.9
        knobs: list[tuple[Any, str, Any]] = [
            (backends.cudnn.rnn, "fp32_precision", "ieee"),
            (backends.cuda.matmul, "fp32_precision", "ieee"),
        ]
    else:
        knobs = [(backends.cudnn, "allow_tf32", False), (backends.cuda.matmul, "allow_tf32", False)]
    saved = [getattr(obj, name) for obj, name, _ in knobs]
    try:
        for obj, name, value in knobs:
            setattr(obj, name, value)
        yield
    finally:
        for (obj, name, _), value in zip(knobs, saved):
            setattr(obj, name, value)


def plot_losses(losses: Sequence[float], path: Path, title: str) -> bool:
    """Write the loss curve as a PNG (Agg, no display needed); False when matplotlib is missing."""
    try:
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
    except ImportError:
        return False
    fig = Figure(figsize=(7, 4), dpi=100)
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    steps = range(1, len(losses) + 1)
    ax.plot(steps, losses, color="tab:blue", alpha=0.3, linewidth=0.8, label="per step")
    ax.plot(steps, _smooth(losses), color="tab:blue", linewidth=1.8, label="moving average")
    ax.set_xlabel("step")
    ax.set_ylabel("cross-entropy (nats per character)")
    ax.set_title(title, fontsize=10)
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    atomic.write_file(path, lambda f: fig.savefig(f, format="png"))
    return True


def _smooth(values: Sequence[float], weight: float = 0.9) -> list[float]:
    out: list[float] = []
    avg = 0.0
    for i, value in enumerate(values):
        avg = weight * avg + (1 - weight) * value
        out.append(avg / (1 - weight ** (i + 1)))  # bias-corrected, as Adam's moments
    return out


# -- command line ------------------------------------------------------------------------------


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The demo's options; values are checked by :func:`config_from_args` (one-line errors)."""
    defaults = DemoConfig()
    metavars = {"out": "DIR", "text": "FILE", "device": "DEVICE", "prime": "TEXT"}
    for f in fields(DemoConfig):
        default = getattr(defaults, f.name)
        shown = repr(default) if f.name == "prime" else str(default)
        parser.add_argument(
            "--" + f.name.replace("_", "-"),
            dest=f.name,
            metavar=metavars.get(f.name, "N" if isinstance(default, int) else "X"),
            help=_HELP[f.name] + ("" if default is None else f" (default: {shown})"),
        )


DESCRIPTION = (
    "Train a character language model (embedding, 2-layer CudnnLSTM, linear) on Alice's "
    "Adventures in Wonderland; save the LSTM as a canonical checkpoint; restore it into a "
    "MultiRNNCell of CudnnCompatibleLSTMCells (stepped in a Python loop) and into a "
    "torch.nn.LSTM; sample from all three and check that their logits agree."
)
EPILOG = (
    f"Writes {LSTM_FILE}, {HEAD_FILE}, {PLOT_FILE} and {SUMMARY_FILE} into --out. Exit codes: "
    f"0 done, {EXIT_MISMATCH} the implementations disagree, 2 bad arguments, "
    f"{EXIT_INTERRUPTED} interrupted by Ctrl-C (the model so far is saved)."
)


def config_from_args(args: argparse.Namespace) -> DemoConfig:
    """A checked :class:`DemoConfig`; ValueError with one line saying what to do otherwise."""
    defaults = DemoConfig()
    values: dict[str, Any] = {}
    for f in fields(DemoConfig):
        text = getattr(args, f.name, None)
        if text is None:
            continue
        option = "--" + f.name.replace("_", "-")
        default = getattr(defaults, f.name)
        if f.name in ("device", "prime"):
            values[f.name] = text
        elif f.name in ("out", "text"):
            values[f.name] = Path(text)
        elif f.name in ("learning_rate", "temperature"):
            values[f.name] = _number(option, text, float, default, positive=True)
        else:
            values[f.name] = _number(option, text, int, default, positive=f.name != "seed")
    config = DemoConfig(**values)
    _check(config)
    return config


def _number(option: str, text: str, kind: type, example: Any, *, positive: bool) -> Any:
    try:
        value = kind(text)
    except ValueError:
        value = None
    if value is None or (positive and not value > 0) or not math.isfinite(value):
        what = ("a whole number" if kind is int else "a number") + (" > 0" if positive else "")
        raise ValueError(f"{option} must be {what}, got {text!r}; e.g. {option} {example}.")
    return value


def _check(config: DemoConfig) -> None:
    device = _resolve_device(config.device)
    env = env_from_environ()
    if env is not None and config.nproc > 1:
        raise ValueError(
            "--nproc cannot be used under torchrun, which already started "
            f"{env.world_size} process(es); drop --nproc (or run without torchrun)."
        )
    world = env.world_size if env is not None else config.nproc
    if config.batch_size % world:
        raise ValueError(
            f"--batch-size {config.batch_size} does not split over {world} processes; make it a "
            "multiple of the number of processes."
        )
    if device.type == "cuda" and config.nproc > torch.cuda.device_count():
        raise ValueError(
            f"--nproc {config.nproc} needs {config.nproc} GPUs, this machine has "
            f"{torch.cuda.device_count()}; use fewer processes or --device cpu."
        )
    if config.nproc > 1 and not _distributed_available():
        raise ValueError("this torch build has no torch.distributed; run with --nproc 1.")
    _check_out(config.out)
    if config.text is not None and not config.text.is_file():
        raise ValueError(f"--text {config.text}: no such file; name a UTF-8 text file.")
    try:
        text = load_text(config.text)
    except UnicodeDecodeError:
        raise ValueError(f"--text {config.text}: not UTF-8 text; convert it first.") from None
    need = math.ceil((config.seq_len + 1) / HELD_OUT)
    if len(text) < need:
        raise ValueError(
            f"the text has {len(text)} characters, too few for --seq-len {config.seq_len} "
            f"(needs {need}: 5% of it is held out); use a longer text or a smaller --seq-len."
        )
    missing = sorted(set(config.prime) - set(text))
    if not config.prime or missing:
        raise ValueError(
            f"--prime must be made of characters of the text; {''.join(missing)!r} do not "
            "occur in it."
            if missing
            else "--prime must not be empty; e.g. --prime 'Alice '."
        )


def _distributed_available() -> bool:
    import torch.distributed as dist

    return bool(dist.is_available())


def _resolve_device(text: str) -> torch.device:
    if text == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        device = torch.device(text)
    except RuntimeError:
        device = None
    if device is None or device.type not in ("cpu", "cuda"):
        raise ValueError(f"--device must be auto, cpu, cuda or cuda:N, got {text!r}.")
    if device.type == "cuda":
        if not torch.cuda.is_available():
            raise ValueError(
                f"--device {text}: CUDA is not available here; use --device cpu (or auto)."
            )
        if device.index is not None and device.index >= torch.cuda.device_count():
            raise ValueError(
                f"--device {text}: this machine has {torch.cuda.device_count()} GPU(s); "
                "use cuda:0 .. cuda:N-1."
            )
    return device


def _check_out(out: Path) -> None:
    if out.exists() and not out.is_dir():
        raise ValueError(f"--out {out} is a file; name a directory (created if missing).")
    parent = out if out.is_dir() else out.absolute().parent
    if not parent.is_dir():
        raise ValueError(
            f"--out {out}: the directory {parent} does not exist; create it or choose another "
            "--out."
        )
    if not os.access(parent, os.W_OK | os.X_OK):
        raise ValueError(f"--out {out}: {parent} is not writable; choose another --out.")


# -- data-parallel training under torchrun -----------------------------------------------------
#
# torch has the launcher (torchrun), the process group and DistributedDataParallel; what is left
# here is small: reading the group's shape from torchrun's environment before joining it, one
# rank's share of a global batch, and leaving the group cleanly.

_VARS = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE")


@dataclass(frozen=True)
class DistEnv:
    """Where this process stands in a group of ``world_size`` processes (from torchrun's vars)."""

    rank: int
    world_size: int
    local_rank: int
    local_world_size: int

    @property
    def is_main(self) -> bool:
        """Rank 0: the one process that prints, saves and verifies."""
        return self.rank == 0


def env_from_environ(environ: Mapping[str, str] | None = None) -> DistEnv | None:
    """The :class:`DistEnv` that torchrun's ``RANK``/``WORLD_SIZE`` describe (None when unset).

    ``LOCAL_RANK`` defaults to ``RANK`` and ``LOCAL_WORLD_SIZE`` to ``WORLD_SIZE`` (one machine).
    Raises ValueError for values that are not integers or out of range.

    >>> env_from_environ({"RANK": "1", "WORLD_SIZE": "2", "LOCAL_RANK": "1"})
    DistEnv(rank=1, world_size=2, local_rank=1, local_world_size=2)
    """
    environ = os.environ if environ is None else environ
    if "RANK" not in environ or "WORLD_SIZE" not in environ:
        return None
    values: dict[str, int] = {}
    for name in _VARS:
        text = environ.get(name, environ["RANK" if name == "LOCAL_RANK" else "WORLD_SIZE"])
        try:
            values[name] = int(text)
        except ValueError:
            raise ValueError(
                f"environment variable {name}={text!r} is not an integer; start the processes "
                "with torchrun or --nproc."
            ) from None
    env = DistEnv(
        values["RANK"], values["WORLD_SIZE"], values["LOCAL_RANK"], values["LOCAL_WORLD_SIZE"]
    )
    if not (
        0 <= env.rank < env.world_size
        and 0 <= env.local_rank < env.local_world_size <= env.world_size
    ):
        raise ValueError(
            f"inconsistent environment {env}; expected 0 <= RANK < WORLD_SIZE and "
            "0 <= LOCAL_RANK < LOCAL_WORLD_SIZE <= WORLD_SIZE."
        )
    return env


def device_for(env: DistEnv | None, device: torch.device) -> torch.device:
    """The device of this rank: ``cuda:LOCAL_RANK`` for CUDA without an index, else ``device``."""
    if env is not None and device.type == "cuda" and device.index is None:
        return torch.device("cuda", env.local_rank)
    return device


def init_process_group(
    env: DistEnv, device: torch.device, *, timeout: timedelta = timedelta(minutes=5)
) -> None:
    """Join the group torchrun started: NCCL on CUDA, gloo otherwise.

    Also sets this process's CPU threads to its share of the cores, so that the local processes
    do not oversubscribe them (torchrun's default is one thread each).
    """
    import torch.distributed as dist

    if device.type == "cuda":
        torch.cuda.set_device(device)
    torch.set_num_threads(max(1, (os.cpu_count() or 1) // env.local_world_size))
    backend = "nccl" if device.type == "cuda" else "gloo"
    dist.init_process_group(
        backend, init_method="env://", rank=env.rank, world_size=env.world_size, timeout=timeout
    )


def shutdown() -> None:
    """Leave the process group (a no-op when none was joined).

    Python objects that still hold the group (a DDP wrapper's reducer, finished work handles) are
    collected first, so that the group is torn down here and not at interpreter exit, where
    gloo's threads can abort the process.
    """
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        gc.collect()
        dist.destroy_process_group()


def wrap(model: nn.Module, env: DistEnv | None, device: torch.device) -> nn.Module:
    """``model`` in ``DistributedDataParallel`` when running in a group; else ``model`` itself.

    DDP broadcasts rank 0's parameters at once, so every rank starts from the same model, and
    its backward leaves the mean of the ranks' gradients: with equal shards (:func:`shard`) the
    gradient of the mean loss over the whole global batch, so N processes take the steps one
    process would take on it.
    """
    if env is None or env.world_size == 1:
        return model
    from torch.nn.parallel import DistributedDataParallel

    ids = [device.index] if device.type == "cuda" else None
    return DistributedDataParallel(model, device_ids=ids)


def shard(batch: Tensor, env: DistEnv | None) -> Tensor:
    """This rank's equal share of the rows of a global ``batch`` (all of it without a group).

    >>> shard(torch.arange(8).view(4, 2), DistEnv(1, 2, 1, 2))
    tensor([[4, 5],
            [6, 7]])
    """
    if env is None or env.world_size == 1:
        return batch
    rows = int(batch.shape[0])
    if rows % env.world_size:
        raise ValueError(
            f"a global batch of {rows} rows does not split into {env.world_size} equal shards; "
            "make the batch size a multiple of the number of processes."
        )
    size = rows // env.world_size
    return batch[env.rank * size : (env.rank + 1) * size]


def torchrun_command(config: DemoConfig) -> list[str]:
    """``python -m torch.distributed.run --standalone --nproc-per-node N`` over this script with
    ``config``'s options: what ``--nproc N`` runs."""
    return [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        f"--nproc-per-node={config.nproc}",
        str(Path(__file__).resolve()),
        *config.to_argv(),
    ]


class _PassOn:
    """A signal handler that passes the launching process's signals on to torchrun: the first
    SIGINT as SIGINT, anything after it (or SIGTERM) as SIGTERM. A signal that comes before
    torchrun has started is passed on as soon as it has."""

    def __init__(self) -> None:
        self.proc: subprocess.Popen[bytes] | None = None
        self.interrupted = False
        self.pending: signal.Signals | None = None

    def __call__(self, signum: int, frame: FrameType | None) -> None:
        if signum == signal.SIGINT and not self.interrupted:
            self.interrupted = True
            self._send(signal.SIGINT)
        else:
            self._send(signal.SIGTERM)

    def started(self, proc: subprocess.Popen[bytes]) -> None:
        self.proc = proc
        pending, self.pending = self.pending, None
        if pending is not None:
            proc.send_signal(pending)

    def _send(self, sig: signal.Signals) -> None:
        if self.proc is None:
            self.pending = signal.SIGTERM if self.pending == signal.SIGTERM else sig
        else:
            self.proc.send_signal(sig)


def launch(config: DemoConfig) -> int:
    """Run this script with ``config`` in ``config.nproc`` processes under torchrun; the exit
    code is torchrun's (0, or 1 when a rank failed), or 130 after a Ctrl-C.

    torchrun runs in a session of its own, so a terminal's Ctrl-C reaches this process alone,
    which passes exactly one SIGINT on: torchrun hands it to each worker once, they stop at the
    same step and rank 0 saves the model so far. A second Ctrl-C, or SIGTERM, terminates
    torchrun (which terminates the workers).
    """
    command = torchrun_command(config)
    backend = "NCCL" if _resolve_device(config.device).type == "cuda" else "gloo"
    _say(f"starting {config.nproc} processes ({backend}) under torchrun; rank 0 reports")
    _say(shlex.join(command))
    # Unless OMP_NUM_THREADS is set, torchrun sets it to 1 for every worker and prints a banner
    # saying so; each worker's share of the cores is what init_process_group sets anyway.
    env = {"OMP_NUM_THREADS": str(max(1, (os.cpu_count() or 1) // config.nproc)), **os.environ}
    passer = _PassOn()
    main_thread = threading.current_thread() is threading.main_thread()
    handled = (signal.SIGINT, signal.SIGTERM) if main_thread else ()
    previous = {sig: signal.signal(sig, passer) for sig in handled}
    proc = None
    try:
        proc = subprocess.Popen(command, env=env, start_new_session=True)
        passer.started(proc)
        code = proc.wait()
    finally:
        for sig, handler in previous.items():
            if handler is not None:  # None: set outside Python, cannot be put back
                signal.signal(sig, handler)
        if proc is not None and proc.poll() is None:  # an error here: torchrun must not outlive it
            proc.terminate()
            proc.wait()
    if passer.interrupted:
        return EXIT_INTERRUPTED
    return code if code >= 0 else 128 - code  # killed by signal N: -N, as a shell says 128 + N


# -- the run -----------------------------------------------------------------------------------


def run(config: DemoConfig) -> int:
    """The whole demo; returns the exit code (0, 1 on a mismatch, 130 when interrupted).

    With ``nproc > 1`` (and not already in a group) it runs this script with the same options in
    ``nproc`` processes under torchrun (:func:`launch`).
    """
    env = env_from_environ()
    if config.nproc > 1 and env is None:
        return launch(config)
    try:
        return _worker(config, env)
    except KeyboardInterrupt:
        _say("interrupted")
        return EXIT_INTERRUPTED


def _say(message: str) -> None:
    print(f"{PROG}: {message}", file=sys.stderr, flush=True)


def _worker(config: DemoConfig, env: DistEnv | None) -> int:
    grouped = env is not None and env.world_size > 1
    device = device_for(env, _resolve_device(config.device))
    if grouped:
        assert env is not None
        init_process_group(env, device)
    main = env is None or env.is_main
    started = time.monotonic()
    text = load_text(config.text)
    vocab = "".join(sorted(set(text)))
    train_ids, held_out = split_text(_encode(text, vocab), config.seq_len + 1)
    model = CharModel(
        len(vocab),
        config.embedding_size,
        config.num_units,
        config.num_layers,
        seed=config.seed,
        device=device,
    )
    trained = wrap(model, env, device)
    optimizer = torch.optim.Adam(model.parameters(), lr=config.learning_rate)
    chars_per_step = config.batch_size * config.seq_len
    if main:
        world = env.world_size if env is not None else 1
        print(
            f"training a {config.num_layers}-layer CudnnLSTM ({config.num_units} units) "
            f"character model on {TEXT_TITLE if config.text is None else config.text}: "
            f"{len(text):,} characters, {len(vocab)} symbols; {config.steps} steps of "
            f"{config.batch_size} x {config.seq_len} characters on {device} "
            f"({world} process{'es' if world > 1 else ''})",
            flush=True,
        )
    progress = Progress(config.steps, chars_per_step) if main else None
    # In a group the handler stays until the group is left: a Ctrl-C that reaches this rank
    # after the others decided to stop must not raise in the middle of leaving it.
    with StopFlag().installed(hard_second=not grouped) as stop:
        result = train(
            trained,
            make_batches(train_ids, config.batch_size, config.seq_len, config.seed, env, device),
            config.steps,
            optimizer,
            lr_at=cosine_lr(config.learning_rate, config.steps),
            env=env,
            on_step=progress.update if progress is not None else None,
            stop=stop,
        )
        if progress is not None:
            progress.close()
        train_seconds = time.monotonic() - started
        if grouped:
            del trained  # the DDP wrapper holds the process group; let it go first
            shutdown()
    if not main:
        return EXIT_INTERRUPTED if result.interrupted else 0
    return _report(config, model, vocab, held_out, result, train_seconds, device)


def _report(
    config: DemoConfig,
    model: CharModel,
    vocab: str,
    held_out: Tensor,
    result: TrainResult,
    train_seconds: float,
    device: torch.device,
) -> int:
    """Rank 0 after training: save, plot, then sample from and verify the three models."""
    out = config.out
    out.mkdir(exist_ok=True)
    lstm_path, head_path = save_model(model, vocab, out)
    source = TEXT_TITLE if config.text is None else config.text.name
    plotted = plot_losses(result.losses, out / PLOT_FILE, f"CudnnLSTM character model: {source}")
    plot_note = (
        f"loss curve: {out / PLOT_FILE}"
        if plotted
        else "no loss curve: matplotlib is not installed (pip install 'cudnn-rnn[plot]')"
    )
    summary: dict[str, Any] = {
        "config": {k: str(v) if isinstance(v, Path) else v for k, v in asdict(config).items()},
        "device": str(device),
        "steps_done": result.steps,
        "interrupted": result.interrupted,
        "train_seconds": round(train_seconds, 3),
        "losses": result.losses,
        "files": {"lstm": str(lstm_path), "head": str(head_path)}
        | ({"plot": str(out / PLOT_FILE)} if plotted else {}),
    }
    if result.interrupted:
        _write_summary(out, summary)
        print(
            f"interrupted after step {result.steps} of {config.steps}: saved the model so far "
            f"to {lstm_path} and {head_path}; {plot_note}",
            flush=True,
        )
        return EXIT_INTERRUPTED
    final = sum(result.losses[-20:]) / len(result.losses[-20:])
    rows = held_out.to(device)  # [N, seq_len + 1]: inputs, then targets shifted by one
    model.eval()
    with torch.no_grad():
        logits, _ = model(rows[:, :-1])
        held_loss = float(F.cross_entropy(logits.reshape(-1, len(vocab)), rows[:, 1:].reshape(-1)))
    print(
        f"trained {result.steps} steps in {_clock(train_seconds)}: loss "
        f"{result.losses[0]:.3f} -> {final:.3f} (mean of the last 20 steps), held-out "
        f"{held_loss:.3f}"
    )
    print(f"saved {lstm_path} (canonical LSTM checkpoint) and {head_path} (embedding, output)")
    print(plot_note)
    restored, _ = load_model(out, device)
    runs = runners(model, restored.eval(), out)
    engine = layer_engine(device)
    samples = _print_samples(config, runs, vocab, device)
    batch = rows[:VERIFY_ROWS, :-1]
    diffs, scale = logit_differences(runs, batch)
    rtol = RTOL[model.lstm.dtype]
    tolerance = rtol * scale
    print(
        f"\nverification: max |logit difference| on a held-out batch of {batch.shape[0]} x "
        f"{batch.shape[1]} characters ({str(model.lstm.dtype).removeprefix('torch.')})\n"
        f"CudnnLSTM engine: {engine}; tolerance {tolerance:.2e} = {rtol:.0e} x max |logit| "
        f"{scale:.3g}"
    )
    failed = _print_verification(diffs, tolerance)
    summary.update(
        final_loss=final,
        held_out_loss=held_loss,
        samples=samples,
        engine=engine,
        logit_scale=scale,
        rtol=rtol,
        tolerance=tolerance,
        differences={f"{a} vs {b}": diff for (a, b), diff in diffs.items()},
        agree=not failed,
    )
    _write_summary(out, summary)
    sys.stdout.flush()
    if failed:
        _say(
            "verification FAILED: "
            + "; ".join(f"{a} vs {b} differ by {diff:.2e}" for a, b, diff in failed)
            + f" (tolerance {tolerance:.2e}); see {out / SUMMARY_FILE}"
        )
        return EXIT_MISMATCH
    return 0


def _print_samples(
    config: DemoConfig, runs: Mapping[str, Runner], vocab: str, device: torch.device
) -> dict[str, str]:
    samples = {
        name: sample(
            run_model,
            vocab,
            config.prime,
            config.sample_length,
            seed=config.seed,
            temperature=config.temperature,
            device=device,
        )
        for name, run_model in runs.items()
    }
    print(
        f"\nsamples ({config.sample_length} characters after {config.prime!r}, seed "
        f"{config.seed}, temperature {config.temperature}):"
    )
    for name, text in samples.items():
        print(f"--- {name}:\n{text}")
    if len(set(samples.values())) == 1:
        print("(the same text from all three)")
    return samples


def _print_verification(
    diffs: Mapping[tuple[str, str], float], tolerance: float
) -> list[tuple[str, str, float]]:
    """Print one line per pair; return the pairs beyond ``tolerance`` (NaN included)."""
    width = max(len(f"{a} vs {b}") for a, b in diffs)
    failed = [(a, b, diff) for (a, b), diff in diffs.items() if not diff <= tolerance]
    for (a, b), diff in diffs.items():
        note = "  (bitwise equal)" if diff == 0 else ""
        if not diff <= tolerance:
            note = "  FAILED: beyond the tolerance"
        print(f"  {f'{a} vs {b}':<{width}}  {diff:.2e}{note}")
    print(
        f"FAILED: {len(failed)} of {len(diffs)} pairs disagree beyond the tolerance"
        if failed
        else "OK: the three implementations agree"
    )
    return failed


def _write_summary(out: Path, summary: Mapping[str, Any]) -> None:
    atomic.write_file(out / SUMMARY_FILE, json.dumps(summary, indent=1).encode())


# -- entry point -------------------------------------------------------------------------------


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=PROG, description=DESCRIPTION, epilog=EPILOG)
    add_arguments(parser)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Parse the options and run the demo; bad options: one line on stderr and exit code 2."""
    args = build_parser().parse_args(argv)
    try:
        config = config_from_args(args)
    except ValueError as err:
        return _usage_error(err)
    try:
        return run(config)
    except OSError as err:  # e.g. the disk filled up under --out
        return _usage_error(err)


def _usage_error(err: BaseException) -> int:
    print(f"{PROG}: error: {err}".splitlines()[0], file=sys.stderr)
    return EXIT_USAGE


if __name__ == "__main__":
    sys.exit(main())
