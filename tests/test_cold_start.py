"""The preflight program's cold start: the collector paused while torch and TVM are imported (passes._gc)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _run(code: str) -> list[str]:
    """stdout of `python -c code` in a fresh process (the freeze is process-wide: never in pytest's own), split."""
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.split()


def test_cold_start_pauses_the_collector_until_over_then_freezes_once():
    code = (
        "import gc\n"
        "from passes._gc import cold_start, cold_start_over, gc_paused\n"
        "out = []\n"
        "with cold_start():\n"
        "    out.append(gc.isenabled())\n"
        "    gc_paused(lambda: None)()\n"  # a pass's own pause leaves it paused
        "    out.append(gc.isenabled())\n"
        "    junk = [[] for _ in range(1000)]\n"
        "    cold_start_over()\n"
        "    out += [gc.isenabled(), gc.get_freeze_count() >= 1000]\n"
        "    n = gc.get_freeze_count()\n"
        "    cold_start_over()\n"  # a second call (another import) does nothing
        "    out.append(gc.get_freeze_count() == n)\n"
        "out.append(gc.isenabled())\n"
        "print(*out)\n"
    )
    assert _run(code) == ["False", "False", "True", "True", "True", "True"]


def test_cold_start_without_the_end_of_imports_or_disabled_changes_nothing_after_it():
    code = (
        "import gc\n"
        "from passes._gc import cold_start, cold_start_over\n"
        "out = []\n"
        "with cold_start():\n"  # e.g. a command that fails before TVM is imported
        "    out.append(gc.isenabled())\n"
        "out += [gc.isenabled(), gc.get_freeze_count()]\n"
        "with cold_start(enabled=False):\n"  # a library call, not the program
        "    out.append(gc.isenabled())\n"
        "    cold_start_over()\n"
        "out.append(gc.get_freeze_count())\n"
        "gc.disable()\n"  # a caller that turned the collector off keeps it off
        "with cold_start():\n"
        "    cold_start_over()\n"
        "out += [gc.isenabled(), gc.get_freeze_count()]\n"
        "print(*out)\n"
    )
    assert _run(code) == ["False", "True", "0", "True", "0", "False", "0"]


def test_the_program_imports_tvm_with_the_collector_paused_and_ends_with_it_on():
    """`preflight analyze` as the program (it leaves through os._exit, after atexit handlers): TVM's import ran
    inside the cold start (what was alive then is frozen: TVM and torch are far over 100k objects), and the
    collector is on again by the end."""
    code = (
        "import atexit, gc, sys\n"
        "import analyzer.cli as cli\n"
        "cli._is_the_program = lambda: True\n"
        "atexit.register(lambda: print(gc.isenabled(), gc.get_freeze_count() > 100_000, 'tvm' in sys.modules))\n"
        "sys.argv = ['preflight', '-q', 'analyze', 'zoo:resnet18', '--batch', '1', '--format', 'json']\n"
        "cli.main()\n"
    )
    assert _run(code)[-3:] == ["True", "True", "True"]


def test_torch_exports_tracer_loads_no_extension_module_after_the_ones_loaded_before_the_backtrace_thread():
    """passes.tvm_boot.EXTENSIONS_FIRST is whole: importing torch.export's tracer after them calls no `dlopen`
    (which would wait for the backtrace thread's loader lock). Fails when a torch upgrade adds one to the list."""
    code = (
        "import sys, importlib.machinery as m\n"
        "import torch\n"
        "from passes import tvm_boot\n"
        "tvm_boot._load_extensions_first()\n"
        "def exts():\n"
        "    return {n for n, mod in list(sys.modules.items())\n"
        "            if isinstance(getattr(getattr(mod, '__spec__', None), 'loader', None), m.ExtensionFileLoader)}\n"
        "before = exts()\n"
        "assert {'_lsprof', 'termios', 'optree._C', 'pyexpat'} <= before, before\n"
        "import torch.export._trace\n"
        "print('NEW', *sorted(exts() - before))\n"
    )
    assert _run(code) == ["NEW"]


_BACKENDS = (
    "import os, sys\n"
    "from passes import tvm_boot\n"
    "if sys.argv[1] == 'program':\n"
    "    tvm_boot.as_the_program()\n"
    "from passes import tvm_ir\n"
    "from tvm.backend import loader\n"
    "print(sorted(loader._LOADED_BACKENDS) == [], 'TVM_DEVICE_BACKEND_AUTOLOAD' in os.environ)\n"
)


def test_the_program_imports_tvm_without_device_backends_and_leaves_the_environment_as_it_was():
    def backends(mode: str, env_value: str | None = None) -> list[str]:
        env = {k: v for k, v in os.environ.items() if k != "TVM_DEVICE_BACKEND_AUTOLOAD"}
        if env_value is not None:
            env["TVM_DEVICE_BACKEND_AUTOLOAD"] = env_value
        proc = subprocess.run(
            [sys.executable, "-c", _BACKENDS, mode], capture_output=True, text=True, cwd=ROOT, env=env, timeout=300
        )
        assert proc.returncode == 0, proc.stderr
        return proc.stdout.split()

    assert backends("library") == ["False", "False"]  # a library caller gets TVM's backends (cuda, metal, ...)
    assert backends("program") == ["True", "False"]  # none loaded, the variable removed after the import
    assert backends("program", "1") == ["False", "True"]  # a user's own setting wins


def test_a_process_forked_inside_the_cold_start_has_its_collector_on():
    code = (
        "import gc, os\n"
        "from passes._gc import cold_start\n"
        "with cold_start():\n"
        "    r, w = os.pipe()\n"
        "    pid = os.fork()\n"
        "    if pid == 0:\n"
        "        os.write(w, str(gc.isenabled()).encode())\n"
        "        os._exit(0)\n"
        "    os.waitpid(pid, 0)\n"
        "    print(os.read(r, 10).decode(), gc.isenabled())\n"
    )
    assert _run(code) == ["True", "False"]  # the child's on, the parent's still paused


def test_an_isolated_fork_keeps_the_programs_freeze_and_its_child_freezes_what_it_inherited():
    code = (
        "import gc\n"
        "from passes._gc import cold_start, cold_start_over\n"
        "from analyzer.frontends.isolate import run_isolated\n"
        "def step():\n"
        "    return {'frozen': gc.get_freeze_count(), 'old': len(gc.get_objects(generation=2))}, b''\n"
        "with cold_start():\n"
        "    keep = [[] for _ in range(1000)]\n"
        "    cold_start_over()\n"
        "    n = gc.get_freeze_count()\n"
        "    later = [[] for _ in range(500)]\n"  # alive at the fork, not frozen here
        "    meta = run_isolated(step, label='m', what='the step', start='fork').meta\n"
        "    print(n >= 1000, gc.get_freeze_count() == n, meta['frozen'] >= n + 500, meta['old'])\n"
    )
    # the parent's frozen objects stay frozen (an unfreeze after the fork thawed them: count 0); the child froze
    # them and the 500 lists too, and its oldest generation held nothing when the step ran
    assert _run(code) == ["True", "True", "True", "0"]
