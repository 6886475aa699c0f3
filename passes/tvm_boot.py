"""Loading TVM faster: the start-up costs of `import tvm` that preflight can take off a cold run.

`passes.tvm_ir` is the module that reads TVM IR; this one only concerns the moment TVM is imported, which is why
it is separate: `prime_backtraces()` must run *before* `import tvm` (which `passes.tvm_ir` does when imported),
and it touches only tvm-ffi (the FFI library TVM is built on), never TVM's IR or importers.

1. The first native backtrace of a process (0.53 s CPU on the 2-core development machine, 2 runs of
   `time.process_time` around it). TVM 0.27's own import makes lookups that fail by design (the type key
   `runtime.disco.DRef`, then 112 more, mostly `Op.get` probes while registering operator attributes: counted
   with a gdb breakpoint on `TVMFFIBacktrace` over a cold `analyze zoo:resnet50`); tvm-ffi builds each failure's
   error with a backtrace, and the first backtrace makes libbacktrace read the symbol tables of every loaded
   library (libtorch_cpu.so's alone holds 530k symbols). No setting turns this off (`TVM_TRACEBACK_LIMIT` caps the
   frames kept, after the tables are read). `prime_backtraces()` takes one backtrace on a background thread
   through ctypes, which releases the GIL, so the tables are read on the second core while the main thread exports
   the model with torch; `import tvm` then finds them read. It costs the same CPU, less wall time.
   The thread holds the dynamic loader's lock while it reads, so the C extension modules the export's imports
   need are loaded before it starts (`EXTENSIONS_FIRST`): a `dlopen` on the main thread would wait for it.
   Tracebacks stay the same: priming before TVM's own libraries are loaded drops nothing, because
   libtvm_compiler.so has no symbol table for libbacktrace to read anyway (only its exported `.dynsym`, whose frames
   TVM's backtraces skip); a TVM error's traceback was compared with and without priming, byte for byte.
2. Listing the global functions (0.21 s CPU): TVM's import calls `tvm_ffi.init_ffi_api` 51 times, and each
   lists all 2,078 registered names through one FFI call per name. `faster_import()` answers the list from the
   previous answer while the count of registered functions has not changed (functions are only added during
   the import; none is removed), and puts tvm-ffi's function back when the import is done.
3. The device backends' Python hooks (0.07 s CPU), in the preflight program only: `as_the_program()`.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import sys
import threading

_primed = False


def prime_backtraces() -> None:
    """Read the loaded libraries' symbol tables for tvm-ffi's backtraces on a background thread, once per process,
    unless TVM is already imported (then they have been read). Call it after `import torch` (tvm-ffi imports
    torch first) and before work that keeps the main thread busy for at least half a second; `import tvm` later
    waits for the thread if it is still reading, and so does a fork. Does nothing where tvm-ffi or its C function
    is missing."""
    global _primed
    if _primed or "tvm" in sys.modules or not sys.platform.startswith("linux"):
        return
    _primed = True
    try:
        import tvm_ffi

        backtrace = tvm_ffi.LIB.TVMFFIBacktrace  # (filename, lineno, func, cross_ffi_boundary) -> TVMFFIByteArray*
    except (ImportError, AttributeError, OSError):
        return
    backtrace.restype = ctypes.c_void_p
    backtrace.argtypes = (ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_int)
    _load_extensions_first()
    thread = threading.Thread(target=backtrace, args=(None, 0, None, 0), name="tvm-ffi-backtrace", daemon=True)
    thread.start()
    # a child forked mid-backtrace would inherit tvm-ffi's backtrace mutex locked: a fork waits for the thread
    os.register_at_fork(before=thread.join)


# The C extension modules that importing torch.export's tracer (`torch.export._trace`, which imports
# torch._dynamo) loads after `import torch` and torch's symbolic shapes, in torch 2.13: numpy.fft and numpy.random
# (torch._dynamo.utils), _lsprof (cProfile), termios (getpass), _statistics (statistics), optree._C (optree), and
# pyexpat and _elementtree (xml.etree.ElementTree, through networkx); found by listing the modules whose loader is an
# `ExtensionFileLoader` after a cold `analyze zoo:resnet50`, in the order `python -X importtime` shows them.
# tests/test_cold_start.py checks the list is whole.
EXTENSIONS_FIRST = (
    "numpy.fft",
    "numpy.random",
    "_lsprof",
    "termios",
    "_statistics",
    "optree",
    "pyexpat",
    "_elementtree",
)


def _load_extensions_first() -> None:
    """Import `EXTENSIONS_FIRST` (the process imports them anyway, a few ms) before the backtrace thread starts.

    libbacktrace reads the symbol tables inside `dl_iterate_phdr`'s callback, holding the dynamic loader's lock
    for the whole 0.5 s, and a `dlopen` on another thread waits for that lock: the first C extension module that
    the main thread imported after the thread started (`_lsprof`) used to wait 0.56 s (`python -X importtime`, its
    self time) and the overlap bought no wall time. Loaded first, the tracer's import needs no `dlopen` until TVM's
    own libraries, by when the thread has finished. A module that is missing is skipped."""
    import importlib

    for name in EXTENSIONS_FIRST:
        try:
            importlib.import_module(name)
        except ImportError:
            pass


def cached_listing(get_global_func):
    """A `list_global_func_names` that lists the names again only when their count has changed (one FFI call per
    name), else returns a copy of its previous list. `get_global_func`: tvm-ffi's."""
    cached: list[list[str]] = []

    def list_global_func_names() -> list[str]:
        functor = get_global_func("ffi.FunctionListGlobalNamesFunctor")()
        count = functor(-1)
        if not cached or len(cached[0]) != count:
            cached[:] = [[functor(i) for i in range(count)]]
        return list(cached[0])

    return list_global_func_names


_program = False  # set by `as_the_program()`
AUTOLOAD = "TVM_DEVICE_BACKEND_AUTOLOAD"


def as_the_program() -> None:
    """The preflight program (analyzer.cli's analysis commands, never a library caller) imports TVM without its
    device backends' Python hooks: `faster_import` sets TVM's own switch `TVM_DEVICE_BACKEND_AUTOLOAD=0` for the
    import (unless the user set it) and removes it after, so child processes do not inherit it. Those hooks
    register the CUDA PTX instruction tables, the other GPU backends' script namespaces and any out-of-tree
    `tvm.backends` entry point: TVM code generation, which preflight never runs (it reads Relax and legalizes
    without a target). 0.07 s CPU of `import tvm` (0.26-0.27 -> 0.19-0.21 s, with torch imported and the backtrace
    primed, 2 runs each); the JSON of `analyze zoo:resnet50`, `predict zoo:resnet18` and `llm zoo:gpt2_tiny` is
    byte-identical but for `created`. A later caller can still load one: `tvm.backend.loader.load("cuda")`."""
    global _program
    _program = True


@contextlib.contextmanager
def _without_device_backends():
    """`TVM_DEVICE_BACKEND_AUTOLOAD=0` for the block when `as_the_program()` was called and the user left it unset."""
    if not _program or AUTOLOAD in os.environ:
        yield
        return
    os.environ[AUTOLOAD] = "0"
    try:
        yield
    finally:
        os.environ.pop(AUTOLOAD, None)


@contextlib.contextmanager
def faster_import():
    """Around `import tvm`: tvm-ffi's `list_global_func_names` answers from its previous answer while the number of
    registered global functions is unchanged, and in the program (`as_the_program`) TVM's device backends are not
    loaded. A no-op when TVM is already imported; no listing cache where tvm-ffi's registry differs."""
    if "tvm" in sys.modules:
        yield
        return
    with _without_device_backends():
        try:
            from tvm_ffi import registry
        except ImportError:
            yield
            return
        original = getattr(registry, "list_global_func_names", None)
        get = getattr(registry, "get_global_func", None)
        if original is None or get is None:
            yield
            return
        registry.list_global_func_names = cached_listing(get)
        try:
            yield
        finally:
            registry.list_global_func_names = original
