"""pytest plugin of the sanitizer run (tools/sanitize.py): refuse to run on another build.

Loaded with ``-p tests.support.sanitized``; the session stops at once unless the native engine was
loaded from the file ``CUDNN_RNN_NATIVE_LIBRARY`` names, so a run cannot pass by testing the
package's unsanitized build.
"""

from __future__ import annotations

import os

import pytest


def pytest_sessionstart(session: pytest.Session) -> None:
    from cudnn_rnn.engines import native

    wanted = os.environ.get(native.LIBRARY_ENV)
    loaded = native.library_path()
    if not wanted or loaded != wanted:
        raise pytest.UsageError(
            f"sanitizer run: the engine came from {loaded!r}, not the sanitized build {wanted!r} "
            f"({native.describe()})"
        )
