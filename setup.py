"""The native CPU engine, built with the package (everything else is in pyproject.toml).

A plain C library (no Python or torch headers) that cudnn_rnn loads with ctypes, built as
``cudnn_rnn/_engine.so`` for every Python version, in a ``py3-none-<platform>`` wheel. Where it
cannot be compiled the install still succeeds, says so in a framed message on the terminal (pip
shows a build's stderr with ``-v`` only, so the message also goes to ``/dev/tty`` where there is
one), and records why in ``cudnn_rnn/_engine_not_built.txt``;
cudnn_rnn then runs torch's kernels and ``cudnn_rnn.cpu_engine()`` / ``cudnn-rnn info`` say
why. The instruction set is chosen at run time, so no ``-march`` flag: the binary runs on any
x86-64.

Where torch is importable at build time (``pip install --no-build-isolation``, as ``make install``
runs it), the cells' step node is built too: a torch C++ extension (``_native/step_node.cpp``,
cudnn_rnn.nn._step_node) named for the torch it was compiled against,
``cudnn_rnn/_step_node-torch<version>.so``. Where torch is not there (pip's isolated build) or
it does not compile, the install goes on without it (the reason in
``cudnn_rnn/_step_node_not_built.txt``) and the cells take their Python path, with the same
results.

The flags are read from here by everything else that compiles the engine the package's way
(``tools/engine_ab.py``, ``make gpu-check``): ``runpy.run_path("setup.py", run_name=...)``
with any name but ``__main__`` gives them without building.
"""

#: The engine's compile and link flags (a shared library also needs -shared -fPIC, which
#: setuptools adds).
COMPILE_FLAGS = ["-std=gnu11", "-O3", "-pthread", "-fvisibility=default"]
LINK_FLAGS = ["-pthread", "-ldl"]


#: The step node's flags (C++; torch's include folders, libraries and ABI are added at build).
NODE_COMPILE_FLAGS = ["-std=c++20", "-O2", "-fvisibility=hidden", "-Wno-unused-parameter"]
#: Written beside the package's modules when the step node is not built: why.
NODE_NOT_BUILT_FILE = "_step_node_not_built.txt"


def _torch_build() -> tuple[str, dict[str, list[str]]] | str:
    """``(torch's version, the node's Extension arguments)`` from the torch importable here, or
    why there is none."""
    try:
        import torch
        from torch.utils import cpp_extension
    except Exception as err:  # (pip's isolated build has no torch)
        return f"torch is not importable at build time ({type(err).__name__}: {err})"
    abi = int(torch._C._GLIBCXX_USE_CXX11_ABI)
    return torch.__version__, {
        "include_dirs": cpp_extension.include_paths(),
        "library_dirs": cpp_extension.library_paths(),
        "libraries": ["c10", "torch", "torch_cpu"],
        "extra_compile_args": [*NODE_COMPILE_FLAGS, f"-D_GLIBCXX_USE_CXX11_ABI={abi}"],
    }


#: Where the engine is built in the package: one name for every Python version (the library
#: has no Python ABI: ctypes loads it), so one ``py3-none-<platform>`` wheel serves them all.
ENGINE_FILE = "_engine.so"
#: Written beside the package's modules when the engine cannot be compiled: why, for
#: ``cudnn_rnn.cpu_engine()`` and ``cudnn-rnn info`` to say.
NOT_BUILT_FILE = "_engine_not_built.txt"

_NOT_BUILT = """
**********************************************************************************************
cudnn-rnn: the native CPU engine could not be compiled ({reason}).
The package is installed and works: CPU calls run torch's kernels instead of our engine
(slower, and without our engine's same-bits guarantees across thread counts).
To build the engine, install a C compiler (gcc or clang) and reinstall: pip install .
`cudnn-rnn info` says which engine runs.
**********************************************************************************************
"""


def _tell(message: str) -> None:
    """``message`` on stderr, and on the terminal itself where there is one: pip keeps a
    build's output to itself unless run with -v, and this one must not go unseen."""
    import sys

    sys.stderr.write(message)
    try:
        with open("/dev/tty", "w", encoding="utf-8") as tty:
            tty.write(message)
    except OSError:  # no terminal (CI, a container): stderr, the log, is what there is
        pass


def _inside(path: str, folder: str) -> bool:
    """Whether ``path`` is ``folder`` or below it."""
    import os

    path, folder = os.path.abspath(path), os.path.abspath(folder)
    return os.path.commonpath([path, folder]) == folder


def main() -> None:
    import os
    import shutil

    from setuptools import Extension, setup
    from setuptools.command.bdist_wheel import bdist_wheel
    from setuptools.command.build import build
    from setuptools.command.build_ext import build_ext

    here = os.path.dirname(os.path.abspath(__file__))

    class FreshBuild(build):
        """A build from nothing, every time. pip builds in the source tree, and setuptools
        copies into ``build/lib*`` only what is newer than the copy there and reuses the
        objects in ``build/temp*``: a module deleted or renamed since an earlier build would
        still go into the wheel, and an engine built from other sources could be reused. Only
        folders inside the project's own ``build/`` are emptied (an editable install builds in
        a temporary folder of its own)."""

        def run(self) -> None:
            for folder in (self.build_lib, self.build_temp):
                if _inside(folder, os.path.join(here, "build")):
                    shutil.rmtree(folder, ignore_errors=True)
            super().run()

    class BuildEngine(build_ext):
        """The engine as ``cudnn_rnn/_engine.so``; where it cannot be compiled, a loud message
        on stderr (pip shows it with -v; the file below says it at run time)."""

        def get_ext_filename(self, fullname: str) -> str:
            *folder, name = fullname.split(".")
            if name == "_step_node":
                return os.path.join(*folder, f"_step_node-torch{node_build[0]}.so")
            return os.path.join(*folder, ENGINE_FILE)

        def run(self) -> None:
            for name in (NOT_BUILT_FILE, NODE_NOT_BUILT_FILE):
                marker = os.path.join(self.build_lib, "cudnn_rnn", name)
                if os.path.exists(marker):
                    os.remove(marker)
            if isinstance(node_build, str):
                self._not_built(NODE_NOT_BUILT_FILE, node_build)
            super().run()

        def _not_built(self, name: str, reason: str) -> None:
            os.makedirs(os.path.join(self.build_lib, "cudnn_rnn"), exist_ok=True)
            with open(os.path.join(self.build_lib, "cudnn_rnn", name), "w", encoding="utf-8") as f:
                f.write(reason + "\n")

        def build_extension(self, ext: Extension) -> None:
            try:
                super().build_extension(ext)
            except Exception as err:  # no compiler, a compiler error: the package still works
                reason = f"{type(err).__name__}: {err}".strip()
                if ext.name.endswith("._step_node"):  # (the cells' Python path runs instead)
                    _tell(f"cudnn-rnn: the cells' step node was not built ({reason[:300]})\n")
                    self._not_built(NODE_NOT_BUILT_FILE, reason)
                    return
                _tell(_NOT_BUILT.format(reason=reason))
                self._not_built(NOT_BUILT_FILE, reason)

    class PlatformWheel(bdist_wheel):
        """``py3-none-<platform>``: the engine is a plain C library, not a Python extension."""

        def get_tag(self) -> tuple[str, str, str]:
            _, _, platform = super().get_tag()
            return "py3", "none", platform

    engine = Extension(
        "cudnn_rnn._engine",
        sources=["src/cudnn_rnn/_native/engine.c"],
        depends=["src/cudnn_rnn/_native/kernel.inc", "src/cudnn_rnn/_native/step.h"],
        extra_compile_args=COMPILE_FLAGS,
        extra_link_args=LINK_FLAGS,
    )
    node_build = _torch_build()
    extensions = [engine]
    if not isinstance(node_build, str):
        extensions.append(
            Extension(
                "cudnn_rnn._step_node",
                sources=["src/cudnn_rnn/_native/step_node.cpp"],
                depends=["src/cudnn_rnn/_native/step.h"],
                language="c++",
                **node_build[1],  # type: ignore[arg-type]
            )
        )

    setup(
        ext_modules=extensions,
        cmdclass={"build": FreshBuild, "build_ext": BuildEngine, "bdist_wheel": PlatformWheel},
    )


if __name__ == "__main__":  # pip's build backend runs this file as __main__ as well
    main()
