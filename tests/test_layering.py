"""The project's layering: `passes/tvm_ir.py` is the only module that reads TVM IR or TVM's importer internals (the
predictor, the zoo, the frontends and the CLI go through it), and no package imports a higher layer's (`LAYERS`),
checked on the source's import statements."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("analyzer", "passes", "predictor", "zoo")
TVM_READER = Path("passes/tvm_ir.py")


def _tvm_imports(path: Path) -> list[int]:
    """Line numbers of every `import tvm...` / `from tvm... import` statement in `path` (docstrings don't count)."""
    lines = []
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0:
            names = [node.module or ""]
        else:
            continue
        if any(n == "tvm" or n.startswith("tvm.") for n in names):  # not tvm_ffi: passes/tvm_boot.py primes it
            lines.append(node.lineno)
    return lines


def test_only_tvm_ir_imports_tvm():
    found = {
        str(p.relative_to(ROOT)): lines
        for pkg in PACKAGES
        for p in sorted((ROOT / pkg).rglob("*.py"))
        if p.relative_to(ROOT) != TVM_READER and (lines := _tvm_imports(p))
    }
    assert found == {}  # e.g. {"analyzer/frontends/torch_frontend.py": [547]} before bind_input_shapes moved
    assert _tvm_imports(ROOT / TVM_READER)  # the check sees imports where they are


#: passes and zoo (plain graph passes, model builders) < predictor (cost models, training) < analyzer (frontends,
#: pipeline, CLI): a package imports its own modules and lower layers' only, lazily inside a function included
LAYERS = {"passes": 0, "zoo": 0, "predictor": 1, "analyzer": 2}


def _upward_imports(root: Path) -> dict[str, list[tuple[int, str]]]:
    """{file: [(line, module)]}: the imports (statements anywhere in the file, and `importlib.import_module` of a
    literal name) of a package under `root` that name another package of the same or a higher layer."""
    found = {}
    for pkg, layer in LAYERS.items():
        for p in sorted((root / pkg).rglob("*.py")):
            hits = []
            for node in ast.walk(ast.parse(p.read_text(), filename=str(p))):
                if isinstance(node, ast.Import):
                    names = [a.name for a in node.names]
                elif isinstance(node, ast.ImportFrom) and node.level == 0:  # relative imports stay in the package
                    names = [node.module or ""]
                elif (
                    isinstance(node, ast.Call)
                    and getattr(node.func, "attr", getattr(node.func, "id", None)) == "import_module"
                    and node.args
                    and isinstance(node.args[0], ast.Constant)
                ):
                    names = [str(node.args[0].value)]
                else:
                    continue
                for name in names:
                    top = name.split(".")[0]
                    if top != pkg and LAYERS.get(top, -1) >= layer:
                        hits.append((node.lineno, name))
            if hits:
                found[str(p.relative_to(root))] = hits
    return found


def test_no_package_imports_a_higher_layer(tmp_path):
    # passes/__init__.py's deprecated `passes.AnnotateCosts` loads analyzer.annotate by a name from a table: not seen
    assert _upward_imports(ROOT) == {}
    for pkg in LAYERS:
        (tmp_path / pkg).mkdir()
    (tmp_path / "predictor" / "m.py").write_text(
        "import numpy\nfrom . import x\n\ndef f():\n    from analyzer.errors import UsageError\n"
    )
    (tmp_path / "passes" / "m.py").write_text("import importlib\nimportlib.import_module('zoo.registry')\n")
    (tmp_path / "zoo" / "m.py").write_text("import passes.graph\n")
    assert _upward_imports(tmp_path) == {
        "passes/m.py": [(2, "zoo.registry")],
        "predictor/m.py": [(5, "analyzer.errors")],
        "zoo/m.py": [(1, "passes.graph")],
    }


class _TwoInputs(torch.nn.Module):
    def forward(self, x, y):
        return x * 2 + y


@pytest.fixture(scope="module")
def dynamic_module():
    """A Relax module with two float32 inputs (batch, 8) whose batch is one symbol of both."""
    from analyzer.frontends.torch_frontend import from_module

    x = torch.randn(2, 8)
    loaded = from_module(_TwoInputs(), (x, x), source="<two>", symbol_axes=[{0: "batch"}, {0: "batch"}])
    return loaded.mod, loaded.n_inputs


def test_bind_input_shapes_through_tvm_ir(dynamic_module):
    from analyzer.errors import MissingShapeError, UsageError
    from analyzer.frontends.specs import InputSpec
    from analyzer.frontends.torch_frontend import bind_input_shapes
    from passes import tvm_ir

    mod, n = dynamic_module
    x, y = (p.name for p in mod["main"].params[:2])  # the oracle: TVM's own function object
    assert tvm_ir.input_names(mod, n) == [x, y] and n == 2
    (xname, xdims, xdtype), (_, ydims, _) = tvm_ir.input_dims(mod, n)
    assert (xname, xdtype, xdims[1], ydims[1]) == (x, "float32", 8, 8) and isinstance(xdims[0], str)
    assert xdims[0] == ydims[0]  # one symbol, shared
    bound = bind_input_shapes(mod, n, {}, 4, "two.pt2")
    assert tvm_ir.input_dims(bound, n) == [(x, [4, 8], "float32"), (y, [4, 8], "float32")]
    with pytest.raises(MissingShapeError, match=rf"^input '{x}' dimension 0 \('{xdims[0]}'\) is dynamic"):
        bind_input_shapes(mod, n, {}, None, "two.pt2")  # nothing given for the batch
    with pytest.raises(UsageError, match=rf"^--input names z not among the model's inputs: {x}, {y}$"):
        bind_input_shapes(mod, n, {"z": InputSpec.parse("z:4x8")}, None, "two.pt2")
    with pytest.raises(UsageError, match=rf"^input '{x}' is float32 in two.pt2; an exported program fixes its dtypes"):
        bind_input_shapes(mod, n, {x: InputSpec.parse(f"{x}:4x8:float16")}, None, "two.pt2")
    specs = {x: InputSpec.parse(f"{x}:4x8"), y: InputSpec.parse(f"{y}:5x8")}
    with pytest.raises(UsageError, match="is shared by several inputs and given both 4 and 5"):
        bind_input_shapes(mod, n, specs, None, "two.pt2")
