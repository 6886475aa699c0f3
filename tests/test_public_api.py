"""The public import surface: `import preflight` (the name users import), `analyzer`'s lazy API, and Ray as an
optional extra."""

from __future__ import annotations

import subprocess
import sys

import pytest


def _run(code: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)


def test_import_preflight_is_free_and_lists_its_api():
    proc = _run(
        "import sys, preflight; print(sorted(dir(preflight))); print('tvm' in sys.modules, 'torch' in sys.modules)"
    )
    assert proc.returncode == 0, proc.stderr
    names, heavy = proc.stdout.strip().splitlines()
    for name in ("analyze", "predict", "report", "llm", "AnnotateCosts", "add_device_file", "__version__"):
        assert repr(name) in names
    assert heavy == "False False"


def test_preflight_names_are_the_implementation():
    import analyzer
    import analyzer.api
    import analyzer.llm
    import preflight

    # the calls are the implementation's, wrapped only so that their errors name keywords (the next test)
    assert preflight.predict.__wrapped__ is analyzer.api.predict
    assert preflight.analyze.__wrapped__ is analyzer.api.analyze and preflight.llm.__wrapped__ is analyzer.llm.llm
    assert preflight.analyze is preflight.analyze and preflight.analyze.__doc__ == analyzer.api.analyze.__doc__
    assert preflight.__version__ == analyzer.__version__
    assert set(dir(analyzer)) >= {"analyze", "predict", "report", "AnnotateCosts", "CostRecorder"}
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        _ = preflight.nope


def test_python_calls_name_their_keywords_where_the_cli_names_flags():
    """The same bad value, through the CLI and through `import preflight`: each error names what its user typed."""
    from click.testing import CliRunner

    import preflight
    from analyzer.cli import cli
    from analyzer.errors import UsageError, in_api_terms

    out = CliRunner().invoke(cli, ["analyze", "zoo:resnet18", "--batch", "0"])
    assert out.exit_code == 2 and "--batch" in out.output
    with pytest.raises(UsageError, match=r"^batch= must be an integer from 1 to \d+$"):
        preflight.analyze("zoo:resnet18", batch=0)
    with pytest.raises(UsageError, match=r"^matmul_precision= must be one of highest, high, medium \(got 'x'\)$"):
        preflight.predict("zoo:resnet18", matmul_precision="x")
    with pytest.raises(UsageError, match=r"^tensor_parallel= needs runtime='vllm' \(the eager runtime runs one GPU\)$"):
        preflight.llm("zoo:llama_7b", tensor_parallel=2)
    # the rewrite, by hand: a spec becomes a list, a number a value, a flag the call lacks is left alone
    params = {"inputs", "batch", "devices"}
    assert in_api_terms("set --batch 8 or --input x:8x3 (--format json)", params) == (
        "set batch=8 or inputs=['x:8x3'] (--format json)"
    )
    assert in_api_terms("give at least one --device", params) == "give at least one devices="


def test_preflight_predict_counts_a_module():
    import torch

    import preflight

    model = torch.nn.Sequential(torch.nn.Conv2d(3, 16, 3), torch.nn.ReLU()).eval()
    rep = preflight.predict(model, (torch.randn(2, 3, 32, 32),), device="a100-80gb")
    assert rep.totals.macs == 2 * 16 * 30 * 30 * 3 * 3 * 3  # batch x C_out x H_out x W_out x C_in x k x k = 777,600
    assert rep.prediction.device == "a100-80gb"


def test_a_module_takes_one_tensor_and_batch_sets_its_examples_dimension_0():
    """`analyze(module, tensor)` is `analyze(module, (tensor,))`; `batch=` re-batches the example tensors (the
    first row, expanded) as it sets dimension 0 of a file's inputs; `symbolic=True` reports at the examples' batch."""
    import torch

    import preflight

    model = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3), torch.nn.ReLU(), torch.nn.Flatten(),
                                torch.nn.Linear(8 * 30 * 30, 10)).eval()  # fmt: skip
    per_image = 8 * 30 * 30 * 3 * 3 * 3 + 8 * 30 * 30 * 10  # conv 194,400 + linear 72,000 = 266,400 MACs
    x = torch.randn(2, 3, 32, 32)
    assert preflight.analyze(model, x).totals.macs == 2 * per_image
    rep = preflight.analyze(model, (x,), batch=16)
    assert rep.totals.macs == 16 * per_image and rep.inputs[0]["shape"] == [16, 3, 32, 32]
    sym = preflight.analyze(model, (torch.randn(4, 3, 32, 32),), symbolic=True)
    assert sym.inputs[0]["shape"] == [4, 3, 32, 32] and sym.totals.macs == 4 * per_image


def test_analyze_many_without_ray_names_the_extra():
    """Ray is the optional extra `ray`: without it, analyze-many's engine says which install adds it."""
    code = (
        "import sys\n"
        "sys.modules['ray'] = None  # as if Ray were not installed\n"
        "from analyzer.batch import ray_cluster\n"
        "from analyzer.errors import MissingExtraError\n"
        "try:\n"
        "    with ray_cluster(1):\n"
        "        pass\n"
        "except MissingExtraError as exc:\n"
        "    print(exc)\n"
    )
    proc = _run(code)
    assert proc.returncode == 0, proc.stderr
    assert 'pip install -c constraints.txt -e ".[ray]"' in proc.stdout
    assert proc.stdout.startswith("analyze-many and the dataset builder need the optional dependency 'ray'")


def test_the_lock_pins_every_package_but_the_project_itself():
    """constraints.txt (pip-compile's lock) holds `name==version` lines only: no path of a checkout (a
    self-referencing extra once put `preflight @ file:///...` there and a fresh clone could not install), and
    the `all` extra is every other extra, listed out."""
    import re
    import tomllib
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    lines = [x for x in (root / "constraints.txt").read_text().splitlines() if x and not x.startswith((" ", "#"))]
    assert lines and all(re.fullmatch(r"[A-Za-z0-9_.\-]+==[^\s@]+", x) for x in lines), lines
    assert not [x for x in lines if x.lower().startswith("preflight")]
    extras = tomllib.loads((root / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    assert set(extras["all"]) == set(extras["tensorflow"]) | set(extras["paddle"]) | set(extras["ray"])


def test_a_model_larger_than_the_gpu_is_said_not_to_fit():
    """A bias-free Linear(65,536 -> 49,152) on the meta device: its float32 weights alone are 65,536 x 49,152 x 4 B
    = 12,288 MiB, more than the 9,984 MiB of an H100's 1g.10gb slice and far below the whole GPU's 81,559 MiB."""
    import torch

    import preflight

    model = torch.nn.Linear(65536, 49152, bias=False, device="meta").eval()
    x = torch.empty(1, 65536, device="meta")
    on_slice = preflight.predict(model, (x,), device="h100-80gb:1g.10gb")
    assert on_slice.prediction.memory_mib > 12288
    (line,) = [w for w in on_slice.warnings if w.startswith("does not fit")]
    assert "9,984 MiB of the MIG slice h100-80gb:1g.10gb" in line and "CUDA out of memory" in line
    whole = preflight.predict(model, (x,), device="h100-80gb")
    assert not [w for w in whole.warnings if w.startswith("does not fit")]
