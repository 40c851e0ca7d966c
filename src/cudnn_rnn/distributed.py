"""Data-parallel training on one machine: a tiny launcher and the torchrun environment.

:func:`launch` starts ``nproc`` copies of a command the way ``torchrun --standalone
--nproc-per-node N`` does: each gets ``MASTER_ADDR=127.0.0.1``, one free ``MASTER_PORT``,
``RANK``, ``LOCAL_RANK``, ``WORLD_SIZE`` and ``LOCAL_WORLD_SIZE``. A process started that way, or by
``torchrun`` itself, reads those with :func:`env_from_environ` and joins the group with
:func:`init_process_group` (NCCL on CUDA, gloo on CPU). :func:`wrap` puts a model in
``DistributedDataParallel``, whose gradient is the mean over the ranks, and :func:`shard` takes
the rank's rows of a global batch: with equal shards, that mean is the gradient of the mean loss
over the whole global batch, so N processes take the steps one process would take on it.

>>> import torch
>>> env = env_from_environ({"RANK": "1", "WORLD_SIZE": "2", "LOCAL_RANK": "1"})
>>> env
DistEnv(rank=1, world_size=2, local_rank=1, local_world_size=2)
>>> shard(torch.arange(8).view(4, 2), env)
tensor([[4, 5],
        [6, 7]])
"""

from __future__ import annotations

import gc
import os
import signal
import socket
import subprocess
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import timedelta
from types import FrameType

import torch
from torch import Tensor, nn

__all__ = [
    "DistEnv",
    "device_for",
    "env_from_environ",
    "free_port",
    "init_process_group",
    "launch",
    "shard",
    "shutdown",
    "wrap",
]

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
    """The :class:`DistEnv` that ``RANK``/``WORLD_SIZE`` (torchrun, :func:`launch`) describe.

    None when ``RANK`` or ``WORLD_SIZE`` is unset. ``LOCAL_RANK`` defaults to ``RANK`` and
    ``LOCAL_WORLD_SIZE`` to ``WORLD_SIZE`` (one machine). Raises ValueError for values that are
    not integers or out of range.
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
                f"distributed: environment variable {name}={text!r} is not an integer; "
                "start the processes with torchrun or --nproc."
            ) from None
    env = DistEnv(
        values["RANK"], values["WORLD_SIZE"], values["LOCAL_RANK"], values["LOCAL_WORLD_SIZE"]
    )
    if not (
        0 <= env.rank < env.world_size
        and 0 <= env.local_rank < env.local_world_size <= env.world_size
    ):
        raise ValueError(
            f"distributed: inconsistent environment {env}; expected 0 <= RANK < WORLD_SIZE and "
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
    """Join the group described by the environment: NCCL on CUDA, gloo otherwise.

    Also sets this process's CPU threads to its share of the cores, so that N local processes do
    not oversubscribe them.
    """
    import torch.distributed as dist

    if not dist.is_available():
        raise RuntimeError(
            "distributed: this torch build has no torch.distributed; run one process."
        )
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

    DDP broadcasts rank 0's parameters at once, so every rank starts from the same model.
    """
    if env is None or env.world_size == 1:
        return model
    from torch.nn.parallel import DistributedDataParallel

    ids = [device.index] if device.type == "cuda" else None
    return DistributedDataParallel(model, device_ids=ids)


def shard(batch: Tensor, env: DistEnv | None) -> Tensor:
    """This rank's equal share of the rows of a global ``batch`` (all of it without a group)."""
    if env is None or env.world_size == 1:
        return batch
    rows = int(batch.shape[0])
    if rows % env.world_size:
        raise ValueError(
            f"distributed: a global batch of {rows} rows does not split into {env.world_size} "
            "equal shards; make the batch size a multiple of the number of processes."
        )
    size = rows // env.world_size
    return batch[env.rank * size : (env.rank + 1) * size]


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago (for ``MASTER_PORT``)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def launch(
    command: Sequence[str],
    nproc: int,
    *,
    timeout: float | None = None,
    grace: float = 10.0,
    extra_env: Mapping[str, str] | None = None,
) -> int:
    """Run ``nproc`` copies of ``command`` as one group on this machine; returns an exit code.

    The exit code is rank 0's, or the first non-zero one of the others. When a process fails,
    the others get ``grace`` seconds to finish (they may be waiting for it in a collective) and
    are then terminated. The processes run in a session of their own: Ctrl-C (SIGINT) here is
    passed on to each of them once, which lets them stop together; a second one, or SIGTERM,
    terminates them. After ``timeout`` seconds every process is killed and ``TimeoutError``
    raised. No process outlives this call.
    """
    if nproc < 1:
        raise ValueError(f"distributed.launch: nproc must be >= 1, got {nproc}.")
    base = {**os.environ, **(extra_env or {})}
    base.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_port()))
    base.update(WORLD_SIZE=str(nproc), LOCAL_WORLD_SIZE=str(nproc))
    procs: list[subprocess.Popen[bytes]] = []
    interrupts = 0

    def on_signal(signum: int, frame: FrameType | None) -> None:
        nonlocal interrupts
        interrupts += signum == signal.SIGINT
        for proc in procs:
            if proc.poll() is None:
                if signum == signal.SIGINT and interrupts == 1:
                    proc.send_signal(signal.SIGINT)
                else:
                    proc.terminate()

    # Signal handlers can only be set from the main thread; elsewhere the caller handles them.
    handled = (signal.SIGINT, signal.SIGTERM) if _is_main_thread() else ()
    previous = {sig: signal.signal(sig, on_signal) for sig in handled}
    try:
        for rank in range(nproc):
            env = {**base, "RANK": str(rank), "LOCAL_RANK": str(rank)}
            # A session of their own: a terminal's Ctrl-C reaches this process alone, which
            # passes on exactly one SIGINT (a second, late one could interrupt rank 0's saving).
            procs.append(subprocess.Popen(list(command), env=env, start_new_session=True))
        return _wait(procs, timeout, grace)
    finally:
        _stop(procs)
        for sig, handler in previous.items():
            if handler is not None:  # None: set outside Python, cannot be put back
                signal.signal(sig, handler)


def _is_main_thread() -> bool:
    import threading

    return threading.current_thread() is threading.main_thread()


def _wait(procs: list[subprocess.Popen[bytes]], timeout: float | None, grace: float) -> int:
    deadline = None if timeout is None else time.monotonic() + timeout
    failed_at: float | None = None
    first_failure = 0
    while True:
        codes = [proc.poll() for proc in procs]
        now = time.monotonic()
        if failed_at is None and any(codes):
            failed_at = now
            # A process killed by signal N reads as -N; a shell says 128 + N.
            first_failure = next(c if c > 0 else 128 - c for c in codes if c)
        if all(code is not None for code in codes):
            return first_failure
        if failed_at is not None and now - failed_at > grace:
            _stop(procs)
            continue
        if deadline is not None and now > deadline:
            _stop(procs)
            raise TimeoutError(
                f"distributed.launch: {len(procs)} processes still running after {timeout} s; "
                "they were killed."
            )
        time.sleep(0.05)


def _stop(procs: list[subprocess.Popen[bytes]]) -> None:
    running = [proc for proc in procs if proc.poll() is None]
    for proc in running:
        proc.terminate()
    for proc in running:
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
