"""passes.tvm_boot: TVM's import made cheaper without changing what it defines or what its errors show."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from passes import tvm_boot

ROOT = Path(__file__).resolve().parents[1]


def test_cached_listing_equals_tvm_ffis_own_and_sees_new_and_removed_functions():
    import tvm  # noqa: F401 - the registry as TVM's import leaves it
    import tvm_ffi
    from tvm_ffi import registry

    listing = tvm_boot.cached_listing(registry.get_global_func)
    assert sorted(listing()) == sorted(registry.list_global_func_names())  # oracle: tvm-ffi's own listing
    name = "preflight_test.tvm_boot_probe"
    tvm_ffi.register_global_func(name, lambda: 1)
    try:
        assert name in listing() and sorted(listing()) == sorted(registry.list_global_func_names())
    finally:
        tvm_ffi.remove_global_func(name)
    assert name not in listing()


def test_faster_import_puts_tvm_ffis_function_back(monkeypatch):
    from tvm_ffi import registry

    original = registry.list_global_func_names
    monkeypatch.delitem(sys.modules, "tvm")  # as before TVM's first import (pytest puts it back)
    with tvm_boot.faster_import():
        assert registry.list_global_func_names is not original
    assert registry.list_global_func_names is original


# A TVM error raised in TVM's C++ (a matmul of mismatched shapes), its traceback as Python prints it.
_TVM_ERROR = """
import sys, traceback
import torch
from passes import tvm_boot
if sys.argv[1] == "prime":
    tvm_boot.prime_backtraces()
    assert tvm_boot._primed
from passes import tvm_ir
from tvm import relax
x = relax.Var("x", relax.TensorType((2, 3), "float32"))
y = relax.Var("y", relax.TensorType((4, 5), "float32"))
try:
    relax.BlockBuilder().normalize(relax.op.matmul(x, y))
except Exception as exc:
    print("".join(traceback.format_exception(exc)))
"""


def test_a_tvm_errors_traceback_is_the_same_with_backtraces_primed():
    """Priming reads the symbol tables before TVM's libraries are loaded; TVM's frames must still be the same."""
    out = {}
    for mode in ("prime", "plain"):
        proc = subprocess.run(
            [sys.executable, "-c", _TVM_ERROR, mode], capture_output=True, text=True, cwd=ROOT, timeout=300
        )
        assert proc.returncode == 0, proc.stderr
        out[mode] = re.sub(r"^\[\d\d:\d\d:\d\d\] ", "", proc.stdout, flags=re.M)
    assert "Matmul requires the reduction length" in out["plain"]
    assert 'linear_algebra.cc", line' in out["plain"]  # a C++ frame of TVM's, from its backtrace
    assert out["prime"] == out["plain"]


@pytest.mark.parametrize("spec", ["zoo:resnet18"])
def test_a_cold_analyze_imports_tvm_after_the_export_and_primes_on_the_way(spec):
    """The order that lets the backtrace thread overlap torch.export: torch, then the prime, then TVM."""
    code = (
        "import sys\n"
        "from analyzer.cli import main\n"
        f"sys.argv = ['preflight', '-q', 'analyze', {spec!r}, '--batch', '1', '--format', 'json']\n"
        "try:\n"
        "    main()\n"
        "except SystemExit:\n"
        "    pass\n"
        "from passes import tvm_boot\n"
        "names = list(sys.modules)\n"
        "print(tvm_boot._primed, names.index('torch.export._trace') < names.index('tvm'), file=sys.stderr)\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert proc.stderr.split()[-2:] == ["True", "True"], proc.stderr
