"""The native CPU engine, built with the package (everything else is in pyproject.toml).

A plain C library (no Python or torch headers) that cudnn_rnn loads with ctypes. ``optional``:
where it cannot be compiled the install still succeeds and cudnn_rnn runs torch's kernels,
saying so once (``cudnn_rnn.cpu_engine()`` reports which engine runs). The instruction set is
chosen at run time, so no ``-march`` flag: the binary runs on any x86-64.

The flags are read from here by everything else that compiles the engine the package's way
(``tools/engine_ab.py``, ``make gpu-check``): ``runpy.run_path("setup.py", run_name=...)``
with any name but ``__main__`` gives them without building.
"""

#: The engine's compile and link flags (a shared library also needs -shared -fPIC, which
#: setuptools adds).
COMPILE_FLAGS = ["-std=gnu11", "-O3", "-pthread", "-fvisibility=default"]
LINK_FLAGS = ["-pthread", "-ldl"]


def main() -> None:
    from setuptools import Extension, setup

    setup(
        ext_modules=[
            Extension(
                "cudnn_rnn._engine",
                sources=["src/cudnn_rnn/_native/engine.c"],
                depends=["src/cudnn_rnn/_native/kernel.inc"],
                extra_compile_args=COMPILE_FLAGS,
                extra_link_args=LINK_FLAGS,
                optional=True,
            )
        ]
    )


if __name__ == "__main__":  # pip's build backend runs this file as __main__ as well
    main()
