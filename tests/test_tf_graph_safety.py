"""A SavedModel's graph is checked before TensorFlow loads it (analyzer/frontends/tf_graph_safety.py).

TensorFlow runs graph ops while it loads a SavedModel: a `TrackableResource`'s initializer runs in
`tf.saved_model.load`. Each hostile model here is built with TensorFlow's own API (in one child process, for
the whole module: TensorFlow's import is slow), and the child first shows that plain `tf.saved_model.load`
really runs the hook (the controls). preflight must refuse each with one line and exit 2, naming the op,
and leave the files alone. Ordinary models must still load, with hand-counted MACs.

No graph op deletes a file by name (`tf.io.gfile.remove` is Python), except `MergeV2Checkpoints`, which
deletes the checkpoint files it merges: the "delete" variant uses it on a victim checkpoint.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import zipfile
from importlib.util import find_spec
from pathlib import Path

import pytest
from test_cli import fails  # the CLI helpers (tests/ is on sys.path)

from analyzer import analyze

REPO = Path(__file__).resolve().parents[1]
HAS_TF = find_spec("tensorflow") is not None and find_spec("tflite") is not None
needs_tf = pytest.mark.skipif(
    not HAS_TF, reason="the tensorflow extra is not installed: pip install -c constraints.txt -e '.[tensorflow]'"
)

BUILD = r'''
import json, os, sys
os.environ["TF_CPP_MIN_LOG_LEVEL"] = "3"
import keras
import tensorflow as tf
from tensorflow.core.protobuf import saved_model_pb2

out = sys.argv[1]
marker = os.path.join(out, "marker")  # the write hook creates it
secret = os.path.join(out, "secret.txt")  # the read hook reads it
victim = os.path.join(out, "victim", "ckpt")  # the delete hook deletes its checkpoint files
with open(secret, "w") as f:
    f.write("secret")


def make_victim():
    tf.raw_ops.SaveV2(prefix=victim, tensor_names=["a"], shape_and_slices=[""], tensors=[tf.constant(1.0)])


class Hook(tf.saved_model.experimental.TrackableResource):
    """A resource whose initializer TensorFlow's loader runs."""

    def __init__(self, init):
        super().__init__()
        self._init = init

    def _create_resource(self):
        return tf.raw_ops.VarHandleOp(dtype=tf.float32, shape=[], shared_name="hook")

    def _initialize(self):
        self._init()


class Model(tf.Module):
    """y = x @ w, x: B x 4, w: 4 x 2 (8 MACs a row); `body` adds a scalar computed by other ops."""

    def __init__(self, init=None, body=None):
        super().__init__()
        self.w = tf.Variable([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0], [7.0, 8.0]])
        self.hook = Hook(init) if init is not None else None
        self.body = body

    @tf.function(input_signature=[tf.TensorSpec([None, 4], tf.float32, name="x")])
    def serve(self, x):
        y = tf.matmul(x, self.w)
        if self.body is not None:
            y = y + self.body()
        return {"y": y}


def save(name, model):
    path = os.path.join(out, name)
    tf.saved_model.save(model, path, signatures={"serving_default": model.serve})
    return path


paths, controls = {}, {}
paths["plain"] = save("plain", Model())
paths["write"] = save("write", Model(init=lambda: tf.io.write_file(marker, "pwned")))
paths["read"] = save("read", Model(body=lambda: tf.cast(tf.strings.length(tf.io.read_file(secret)), tf.float32)))
paths["list"] = save("list", Model(body=lambda: tf.cast(tf.size(tf.io.matching_files(out + "/*")), tf.float32)))
paths["pyfunc"] = save("pyfunc", Model(body=lambda: tf.py_function(lambda: 1.0, [], tf.float32)))
make_victim()
merge = lambda: tf.raw_ops.MergeV2Checkpoints(checkpoint_prefixes=[victim], destination_prefix=victim + "_merged")
paths["delete"] = save("delete", Model(init=merge))

# controls: plain TensorFlow runs the hooks while loading
tf.saved_model.load(paths["write"])
controls["write"] = os.path.exists(marker)
os.remove(marker)
tf.saved_model.load(paths["delete"])
controls["delete"] = not os.path.exists(victim + ".index")
make_victim()

# an ordinary Keras model, exported as users do: conv 3x3 (8x8x3 -> 8x8x4, same) -> relu -> GAP -> dense 5
L = keras.layers
inp = keras.Input((8, 8, 3), name="image")
k = keras.Model(inp, L.Dense(5)(L.GlobalAveragePooling2D()(L.ReLU()(L.Conv2D(4, 3, padding="same")(inp)))))
paths["keras"] = os.path.join(out, "keras_export")
k.export(paths["keras"], verbose=False)


def edited(name, edit):
    """A copy of the plain model with its saved_model.pb edited (what TensorFlow's API would not write)."""
    import shutil

    path = os.path.join(out, name)
    shutil.copytree(paths["plain"], path)
    sm = saved_model_pb2.SavedModel()
    with open(os.path.join(path, "saved_model.pb"), "rb") as f:
        sm.ParseFromString(f.read())
    edit(sm.meta_graphs[0])
    with open(os.path.join(path, "saved_model.pb"), "wb") as f:
        f.write(sm.SerializeToString())
    paths[name] = path


def fn(meta, part):
    names = (f for f in meta.graph_def.library.function if "wrapper" not in f.signature.name)
    return next(f for f in names if part in f.signature.name)


def call_registered_op(meta):
    # a call whose function name is no library function: TensorFlow would instantiate the op WriteFile
    node = fn(meta, "serve").node_def.add(name="sneaky", op="StatefulPartitionedCall")
    node.attr["f"].func.name = "WriteFile"


def call_saver(meta):
    # the serving function calls the saver function with a file name of its own
    f = fn(meta, "serve")
    c = f.node_def.add(name="where", op="Const")
    c.attr["dtype"].type = 7  # DT_STRING
    c.attr["value"].tensor.dtype = 7
    c.attr["value"].tensor.string_val.append(marker.encode())
    node = f.node_def.add(name="sneaky", op="StatefulPartitionedCall", input=["where:output:0"])
    node.attr["f"].func.name = fn(meta, "traced_save").signature.name


def dotdot_suffix(meta):
    # the saver's '_temp/part' suffix climbs out of the variables folder
    for node in fn(meta, "traced_save").node_def:
        if node.op == "Const" and list(node.attr["value"].tensor.string_val) == [b"_temp/part"]:
            node.attr["value"].tensor.string_val[0] = b"/../../../../escape"


def dotdot_separator(meta):
    # pieces harmless alone, a '..' component once joined: separator '/.' + suffix './escape'
    for node in fn(meta, "traced_save").node_def:
        if node.op == "StringJoin":
            node.attr["separator"].s = b"/."
        if node.op == "Const" and list(node.attr["value"].tensor.string_val) == [b"_temp/part"]:
            node.attr["value"].tensor.string_val[0] = b"./escape"


def tf1_saver(meta):
    # a checkpoint op in the top-level graph (where TF1 savers live)
    meta.graph_def.node.add(name="save/RestoreV2", op="RestoreV2", input=["saver_filename"])


edited("call_registered_op", call_registered_op)
edited("call_saver", call_saver)
edited("dotdot_suffix", dotdot_suffix)
edited("dotdot_separator", dotdot_separator)
edited("tf1_saver", tf1_saver)
print(json.dumps({"paths": paths, "controls": controls, "marker": marker, "secret": secret, "victim": victim}))
'''


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    if not HAS_TF:
        pytest.skip("the tensorflow extra is not installed")
    out = tmp_path_factory.mktemp("tf_hostile")
    res = subprocess.run([sys.executable, "-c", BUILD, str(out)], capture_output=True, text=True, cwd=out, timeout=600)
    assert res.returncode == 0, res.stderr[-3000:]
    return json.loads(res.stdout.strip().splitlines()[-1])


def _untouched(built) -> None:
    assert not os.path.exists(built["marker"])
    assert Path(built["secret"]).read_text() == "secret"
    assert os.path.exists(built["victim"] + ".index")


@needs_tf
def test_controls_tensorflow_runs_the_hooks(built):
    """The vectors are real: plain tf.saved_model.load wrote the marker and deleted the victim checkpoint."""
    assert built["controls"] == {"write": True, "delete": True}


@needs_tf
@pytest.mark.parametrize(
    "variant, op",
    [
        ("write", "WriteFile"),  # in a TrackableResource initializer, which the loader runs
        ("read", "ReadFile"),
        ("list", "MatchingFiles"),
        ("pyfunc", "EagerPyFunc"),
        ("delete", "MergeV2Checkpoints"),  # a checkpoint op outside the saver's functions
    ],
)
def test_hostile_graph_ops_refused(built, variant, op):
    msg = fails(2, "analyze", built["paths"][variant], "--batch", "1")
    assert "\n" not in msg.strip()
    assert f"op '{op}'" in msg and "refused" in msg
    _untouched(built)


@needs_tf
@pytest.mark.parametrize(
    "variant, words",
    [
        ("call_registered_op", "calls 'WriteFile', which is not a function of the model's library"),
        ("call_saver", "not the saver's save or restore call"),
        ("dotdot_suffix", "holds '..'"),
        ("dotdot_separator", "holds '..' ('/../escape')"),
        ("tf1_saver", "top-level graph (a TF1 saver)"),
    ],
)
def test_edited_graphs_refused(built, variant, words):
    msg = fails(2, "analyze", built["paths"][variant], "--batch", "1")
    assert "\n" not in msg.strip() and words in msg
    _untouched(built)


@needs_tf
def test_ordinary_models_still_load(built):
    # tf.Module: y = x @ w, x 3x4, w 4x2: 3 x 4 x 2 = 24 MACs
    assert analyze(built["paths"]["plain"], batch=3).totals.macs == 24
    # Keras export: conv 8x8x4 outputs x 3x3x3 window = 6,912 MACs + dense 4 x 5 = 20 -> 6,932 per image
    assert analyze(built["paths"]["keras"], batch=2).totals.macs == 2 * 6_932
    _untouched(built)


# ---- the child's file system: Landlock ---------------------------------------------------------------------


def _write_outside(target: str) -> tuple[dict, bytes]:
    from analyzer.frontends.isolate import restrict_writes

    why = restrict_writes(Path.cwd())
    Path("inside").write_text("ok")  # the scratch directory stays writable
    try:
        Path(target).write_text("escaped")
        outside = "written"
    except PermissionError:
        outside = "refused"
    return {"landlock": why, "outside": outside}, b""


@pytest.mark.skipif(not hasattr(os, "fork") or sys.platform != "linux", reason="Landlock is Linux-only")
def test_child_cannot_write_outside_its_scratch(tmp_path):
    from analyzer.frontends.isolate import run_isolated

    target = tmp_path / "escaped"
    res = run_isolated(_write_outside, [str(target)], label="t", what="a step", start="fork")
    if res.meta["landlock"] is not None:
        pytest.skip(f"Landlock unavailable here: {res.meta['landlock']}")
    assert res.meta["outside"] == "refused" and not target.exists()


LANDLOCK_ALONE = r"""
import json, os, sys
from pathlib import Path
from analyzer.frontends.isolate import restrict_writes, run_isolated


def step(path):
    why = restrict_writes(Path.cwd())
    import tensorflow as tf

    try:
        tf.saved_model.load(path)  # no graph check here: only Landlock stands between the hook and the disk
        res = "loaded"
    except Exception as exc:
        res = type(exc).__name__
    return {"landlock": why, "load": res}, b""


print(json.dumps(run_isolated(step, [sys.argv[1]], label="t", what="load", start="fork").meta))
"""


@needs_tf
@pytest.mark.skipif(not hasattr(os, "fork") or sys.platform != "linux", reason="Landlock is Linux-only")
def test_landlock_alone_stops_the_write_hook(built):
    """Defence in depth: with the graph check skipped, TensorFlow's loader runs WriteFile and is denied."""
    res = subprocess.run(
        [sys.executable, "-c", LANDLOCK_ALONE, built["paths"]["write"]],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=300,
        env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3"),
    )
    assert res.returncode == 0, res.stderr[-2000:]
    meta = json.loads(res.stdout.strip().splitlines()[-1])
    if meta["landlock"] is not None:
        pytest.skip(f"Landlock unavailable here: {meta['landlock']}")
    assert meta["load"] == "PermissionDeniedError"
    _untouched(built)


# ---- other parsers' bounds (the same audit) ----------------------------------------------------------------


def test_keras_json_bomb_refused_before_reading(tmp_path):
    """A config.json declaring 64 MiB + 2 bytes (deflated to ~64 KiB) is refused from the zip directory."""
    p = tmp_path / "bomb.keras"
    with zipfile.ZipFile(p, "w", zipfile.ZIP_DEFLATED) as zf:
        zf.writestr("metadata.json", "{}")
        zf.writestr("config.json", b" " * (64 << 20) + b"{}")
    assert p.stat().st_size < 1 << 20
    msg = fails(2, "analyze", p, "--batch", "1")
    assert "'config.json' declares 67,108,866 bytes uncompressed" in msg  # 64 x 1,048,576 + 2


def test_paddle_deeply_nested_json_is_a_clean_error(tmp_path):
    (tmp_path / "model.json").write_text("[" * 100_000 + "]" * 100_000)
    (tmp_path / "model.pdiparams").write_bytes(b"\0" * 16)
    msg = fails(2, "analyze", tmp_path / "model.json")
    assert "nests arrays or objects deeper" in msg and "internal error" not in msg


TFLITE_WRITER = r"""
import os, sys
os.environ["TF_CPP_MIN_LOG_LEVEL"] = "3"
import tensorflow as tf

out, marker = sys.argv[1], sys.argv[2]


class Writer(tf.Module):
    @tf.function(input_signature=[tf.TensorSpec([1, 4], tf.float32)])
    def __call__(self, x):
        tf.io.write_file(marker, tf.strings.as_string(tf.reduce_sum(x)))
        return x * 2.0


m = Writer()
conv = tf.lite.TFLiteConverter.from_concrete_functions([m.__call__.get_concrete_function()], m)
conv.target_spec.supported_ops = [tf.lite.OpsSet.TFLITE_BUILTINS, tf.lite.OpsSet.SELECT_TF_OPS]
with open(out, "wb") as f:
    f.write(conv.convert())
"""


@needs_tf
def test_tflite_select_tf_write_file_is_refused_and_writes_nothing(tmp_path):
    """A TFLite file carrying TensorFlow ops (SELECT_TF_OPS: FlexWriteFile) is only parsed, never run.

    TensorFlow's converter embeds `tf.io.write_file` as the custom operator `FlexWriteFile`; a runtime with the
    Flex delegate would write the marker. preflight reads the flatbuffer, names the operators it cannot read
    and stops: one line, a non-zero exit, and no marker file.
    """
    model, marker = tmp_path / "writer.tflite", tmp_path / "marker"
    subprocess.run([sys.executable, "-c", TFLITE_WRITER, str(model), str(marker)], check=True, timeout=300)
    assert model.is_file() and not marker.exists()  # converting does not run the graph
    msg = fails(1, "analyze", model, "--batch", "1")
    assert "CUSTOM:FlexWriteFile (1)" in msg, msg
    assert not marker.exists()
