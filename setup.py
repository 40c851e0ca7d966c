"""The native CPU engine, built with the package (everything else is in pyproject.toml).

A plain C library (no Python or torch headers) that cudnn_rnn loads with ctypes. ``optional``:
where it cannot be compiled the install still succeeds and cudnn_rnn runs torch's kernels,
saying so once (``cudnn_rnn.cpu_engine()`` reports which engine runs). The instruction set is
chosen at run time, so no ``-march`` flag: the binary runs on any x86-64.
"""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "cudnn_rnn._engine",
            sources=["src/cudnn_rnn/_native/engine.c"],
            depends=["src/cudnn_rnn/_native/kernel.inc"],
            extra_compile_args=["-std=gnu11", "-O3", "-pthread", "-fvisibility=default"],
            extra_link_args=["-pthread", "-ldl"],
            optional=True,
        )
    ]
)
