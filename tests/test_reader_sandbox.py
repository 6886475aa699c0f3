"""The children that hand a user's file to a third-party reader may write only in their scratch directory.

The TensorFlow child (Keras, SavedModel) is tested in test_tf_graph_safety.py. Here the `.pt2` child (torch's
deserializer and TVM's importer) and the Paddle child (paddle2onnx): each runs its real entry point
(`torch_frontend._pt2_in_child`, `paddle_frontend.onnx_in_child`) in a limited child, with the reader replaced
by one that writes a file inside the scratch directory and one outside; the outside write must be refused.
Where the kernel has no Landlock the tests skip (the limits and the scratch working directory remain).
"""

from __future__ import annotations

import os
import sys
import types
from pathlib import Path

import pytest

from analyzer.errors import UsageError
from analyzer.frontends.isolate import restrict_writes, run_isolated

pytestmark = pytest.mark.skipif(not hasattr(os, "fork") or sys.platform != "linux", reason="Landlock is Linux-only")


def _try_write(target: str) -> str:
    Path("inside").write_text("ok")  # the scratch directory (the child's working directory) stays writable
    try:
        Path(target).write_text("escaped")
    except PermissionError:
        return "refused"
    return "written"


def _probe() -> tuple[dict, bytes]:
    return {"landlock": restrict_writes(Path.cwd())}, b""


@pytest.fixture(scope="module")
def landlock():
    why = run_isolated(_probe, label="t", what="a probe", start="fork").meta["landlock"]
    if why is not None:
        pytest.skip(f"Landlock unavailable here: {why}")


def test_pt2_child_cannot_write_outside_its_scratch(tmp_path, landlock):
    from analyzer.frontends import torch_frontend

    target = tmp_path / "escaped"

    def step():
        def reader(plan):  # stands in for torch's deserializer, after the child restricted itself
            raise UsageError(f"outside: {_try_write(str(target))}")

        torch_frontend.build_exported_program = reader  # in the forked child only
        return torch_frontend._pt2_in_child("model.pt2", plan=object())

    with pytest.raises(UsageError, match="outside: refused"):
        run_isolated(step, label="model.pt2", what="torch's loader", start="fork")
    assert not target.exists()


def test_paddle_child_cannot_write_outside_its_scratch(tmp_path, landlock):
    from analyzer.frontends import paddle_frontend

    target = tmp_path / "escaped"

    def step():
        fake = types.ModuleType("paddle2onnx")
        fake.export = lambda *a, **k: _try_write(str(target)).encode()  # stands in for paddle2onnx's converter
        sys.modules["paddle"], sys.modules["paddle2onnx"] = types.ModuleType("paddle"), fake  # forked child only
        meta, data = paddle_frontend.onnx_in_child("model.json", "model.pdiparams")
        return {"outside": data.decode(), "home": os.environ["HOME"] == os.getcwd()}, b""

    res = run_isolated(step, label="model.json", what="paddle2onnx", start="fork")
    assert res.meta == {"outside": "refused", "home": True}
    assert not target.exists()
