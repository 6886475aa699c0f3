"""`.pt2` archives are checked here before torch sees a byte of them, then rebuilt without torch's loader.

`torch.export.load` trusts its archive: it unpickles, compiles, evaluates and loads what the file says.
preflight never calls it. `inspect_pt2` reads the zip directory and the JSON members with the standard
library, checks them against the rules below and returns a `Pt2Plan`; `build_exported_program` (run in
a resource-limited child process, see `isolate.py`) then builds the tensors from raw bytes and hands
torch's own deserializer a cleaned program in which every string torch would evaluate has been checked
or removed, and every symbolic expression is already a sympy object built by `sym_expr` (no parsing).

Where torch 2.13 evaluates a string from the archive, and the rule that covers it
(torch/export/__init__.py `load`, torch/export/pt2_archive/_package.py, torch/_export/serde/serialize.py,
torch/utils/_pytree.py, torch/export/_unlift.py, torch/fx/graph.py):

 1. `_package.load_pt2` -> `_load_aoti` -> `AOTIModelPackageLoader`: `dlopen`s `data/aotinductor/<model>/*.so`
    (its ELF constructors run), or compiles the `.cpp` with the command in `*_compile_flags.json` through
    `system()` when no `.so` is there.
    RULE: members under `data/aotinductor/` are refused; `load_pt2` is never called.
 2. `_package._load_state_dict` / `_load_constants`: torch's loader with `weights_only` off for a weight or constant
    whose config says `use_pickle`; `torch._C._pickle_load_obj` of `custom_obj_*`; `pickle.loads` of
    `opaque_obj_*`; with `load_weights_from_disk`, `torch.load` of every weight file.
    RULE: `use_pickle` is refused, weight and constant files must be `weight_<n>` / `tensor_<n>`; tensors are
    built from their raw bytes here (`torch.frombuffer`), never by torch's loader.
 3. `_package._load_exported_programs` -> `deserialize_torch_artifact(data/sample_inputs/model.pt)`:
    torch's loader with `weights_only` on, and on failure with it off.
    RULE: the sample inputs are never read (the program is deserialized with `example_inputs=None`).
 4. `torch.export.load`'s fallback for pre-2.5 archives (`version`, `serialized_*.json|.pt`): `torch.load`.
    RULE: that layout is refused; `torch.export.load` is never called.
 5. `GraphModuleDeserializer._parse_sym_expr`: `sympy.sympify(expr_str)` evaluates Python, for every
    `SymExpr.expr_str` (tensor sizes, strides, storage offsets, sym int/float/bool values).
    RULE: every expression is parsed by `sym_expr.parse` (our grammar) and replaced by the sympy object
    `sym_expr.to_sympy` builds from the tree; while torch deserializes, `sympy.sympify` refuses strings.
 6. `deserialize_operator`: a getattr chain from `torch`, `math` or `_operator` on `Node.target` and on
    `Argument.as_operator` (`torch.ops.load_library`, `torch.ops.import_module`, `torch.hub.load`,
    `torch.os.system` all resolve), and the callable is then run when the graph is traced.
    RULE: targets are `torch.ops.aten|prims.<op>.<overload>` (minus the ops that touch files or print:
    `_DENIED_OPS`), `torch.ops.higher_order.<one of _HOPS>`, one of the symbolic ops torch serializes
    (`_SYM_TARGETS`), or a well-known library operator preflight knows by name (`LIBRARY_OPS`: transformers'
    grouped matmul, torch's quantized_decomposed quantize/dequantize). torch resolves the last only once its
    library has registered it; preflight never imports the library: `define_library_ops` registers the schema
    written here, with a shape-only fake kernel.
 7. `deserialize_extension_operator`: `#namespace:op` targets go to a handler registry.
    RULE: refused (they are not `torch.ops` names).
 8. `deserialize_metadata`: `source_fn_stack` runs the same getattr chains (`deserialize_meta_func`);
    `from_node` builds `NodeSource`s; `custom` is `json.loads`'d; FX's verbose printer writes `stack_trace`
    and `custom` into generated source.
    RULE: node metadata and `GraphModule.metadata` are dropped, except each node's module path
    (`nn_module_stack`, the name preflight reports an op under): kept only when every path of the stack is a
    dotted path of `[A-Za-z0-9_]` atoms, and rewritten with keys of preflight's own and no types
    (`_module_paths`); the deserializer only splits that string. Of a clone/contiguous node's `from_node`, the op
    names of the chain are read (bounded JSON, `_origin_targets`) into `Pt2Plan.copy_origins`, never handed to torch.
 9. FX code generation (`GraphModule.recompile` -> `exec`, for the deserialized module and every pass after):
    node, placeholder and tensor names, get_attr targets, submodule names and `forward_arg_names` are
    written into Python source unescaped (the deserializer assigns `node.name` directly).
    RULE: names are Python identifiers (not keywords, not starting with `__`); parameter, buffer and
    constant names are dotted paths of `[A-Za-z0-9_]` atoms; string arguments are printable ASCII without
    quotes or backslashes (TVM's script printer quotes them in the Relax module the child returns).
10. `ExportedProgram._guards_code` -> `_unlift._convert_guards_code_to_fn`: the strings are pasted into a
    function body and `exec`'d when the module is built (`run_decompositions`, `module()`).
    RULE: `guards_code` is dropped with a warning (preflight never calls the module with real inputs).
11. `treespec_loads` of `ModuleCallSignature.in_spec/out_spec`: `enum_object_hook` calls
    `importlib.import_module` on an `__enum__` context's `fqn` and follows a getattr chain;
    `_defaultdict_deserialize` imports `default_factory_module`.
    RULE: tree specs are walked here: protocol 1, node types from `_TREESPEC_TYPES` (no defaultdict), and
    no `__enum__` object in any context.
12. `load_verifier(dialect)`: a registry lookup. RULE: verifiers are `""`, `ATEN` or `TRAINING`.
13. `deserialize_device`: `torch.device(type)` parses the string. RULE: `cpu`, `cuda` or `meta`.
14. Range constraints: an unbacked symbol `u<n>` makes torch bump a counter n times. RULE: symbol names
    are identifiers of at most 32 characters, indices at most 10**6.
15. Symbolic arithmetic on hints (`2**s0`, `1 << s0`): RULE: `sym_expr` caps integers at 2**62 and
    requires exponents and shift counts to be literals of at most 64.
16. Custom objects (`as_custom_obj`, `custom_obj` inputs, `custom_obj_values`, `CustomObjArgument.class_fqn`)
    need torchbind classes and pickled payloads. RULE: refused.

Resource rules, all checked from the zip directory before a member is decompressed: at most
`MAX_MEMBERS` members; control members at most 4 KiB, `models/model.json` at most `MAX_PROGRAM_BYTES`,
each config at most `MAX_CONFIG_BYTES`; after the configs are read, every weight file must be empty or
hold at least the bytes its tensors span, buffers and constants stored empty (zeros) may span at most
`MAX_EMPTY_DATA`, the archive's declared uncompressed size may exceed its size on disk by at most what
the graph's tensors need plus the JSON members plus `INFLATION_ALLOWANCE`, and the buffers and constants that
are read may inflate beyond their compressed bytes by at most `MAX_DATA_INFLATION` in all. zipfile never
inflates a member beyond the size its directory entry declares, so a lying directory cannot exceed these.
Every JSON string value is at most `MAX_JSON_STRING` characters, and no JSON member is parsed whose text
promises more than `MAX_JSON_PARSE_BYTES` of Python objects (`json_parse_bytes`).
Only the bytes a buffer or constant spans are ever read; learnable parameters are not read at all (the
analysis needs their shapes, not their values), nor the sample inputs or extra files.
"""

from __future__ import annotations

import contextlib
import json
import keyword
import re
import struct
import typing
import zipfile
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import UnreadableModelError, one_line
from . import sym_expr
from .specs import MAX_DIM

MAX_MEMBERS = 100_000
MAX_CONTROL_BYTES = 4096
# JSON members are read whole and parsed into Python objects (several times their size: a dense `[{},{},...]`
# becomes a 64-byte dict per 3 bytes of text), so their caps bound the parse's memory: the program of a
# 20,000-node graph is about 20 MiB; the weight config of 10,000 tensors about 3 MiB.
MAX_PROGRAM_BYTES = 128 << 20
MAX_CONFIG_BYTES = 64 << 20
MAX_JSON_STRING = 16 << 20  # one string value in a JSON member (tree specs are the longest torch writes)
# Python objects a JSON member may parse into, estimated from its text before parsing (`json_parse_bytes`). torch's
# programs parse into about 6 times their size (a 128 MiB one: about 0.8 GB); 127 MiB of `{"a":0},` into 24 times.
MAX_JSON_PARSE_BYTES = 2 << 30
INFLATION_ALLOWANCE = 64 << 20
MAX_EMPTY_DATA = 256 << 20  # buffers and constants stored empty become zeros: at most this many bytes
MAX_DATA_INFLATION = 256 << 20  # buffers and constants (read) may inflate beyond their compressed bytes by this
MAX_STRING = 4096  # string arguments of operators (einsum equations, modes, ...)
MAX_NAME = 1024
MAX_GRAPH_DEPTH = 16  # nested subgraphs (cond branches)
# Nodes of the graph and its subgraphs. Deserializing, decomposing and importing cost about 15 ms a node on a
# loaded 2-core machine (a chain of 4,000 nodes: 60 s); transformers' Llama exports 72 nodes a layer, 9,148 in all
# at 126 layers (Llama 3.1 405B's depth). Loops (`while_loop`, `scan`) are one node each: TVM keeps them opaque,
# nothing is unrolled or run.
MAX_NODES = 50_000
MAX_UNBACKED_INDEX = 10**6
MAX_INT64 = 2**63

_CONTROL = {
    "archive_format": re.compile(rb"pt2"),
    "archive_version": re.compile(rb"0"),
    "byteorder": re.compile(rb"little"),
    ".data/version": re.compile(rb"\d{1,4}\n?"),
    ".data/serialization_id": re.compile(rb"\d{1,64}"),
}
_PROGRAM = "models/model.json"
_WEIGHTS_CONFIG = "data/weights/model_weights_config.json"
_CONSTANTS_CONFIG = "data/constants/model_constants_config.json"
_SAMPLE_INPUTS = "data/sample_inputs/model.pt"
_WEIGHT_RE = re.compile(r"data/weights/(weight_\d{1,9})")
_CONSTANT_RE = re.compile(r"data/constants/(tensor_\d{1,9})")
_EXTRA_RE = re.compile(r"extra/[^/\x00-\x1f][^\x00-\x1f]*")
_IDENT_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_FQN_RE = re.compile(r"[A-Za-z0-9_]+(\.[A-Za-z0-9_]+)*")
_CALL_FQN_RE = re.compile(r"[A-Za-z0-9_.@]*")
_STRING_RE = re.compile(r"[ !#-&(-\[\]-~]*")  # printable ASCII without ' " \

_OP_TARGET_RE = re.compile(r"torch\.ops\.(aten|prims)\.([A-Za-z_][A-Za-z0-9_]*)\.([A-Za-z_][A-Za-z0-9_]*)")
_HOP_TARGET_RE = re.compile(r"torch\.ops\.higher_order\.([A-Za-z_][A-Za-z0-9_]*)")
# aten/prims operators that read or write files, print, or wait on other processes
_DENIED_OPS = frozenset({"from_file", "save", "_print", "warn", "wait", "record_stream", "_test_warn_in_autograd"})
_HOPS = frozenset(
    {"cond", "while_loop", "map_impl", "scan", "wrap_with_set_grad_enabled", "wrap_with_autocast", "invoke_subgraph"}
)
# torch._export.serde.serialize._SYM_OPS as the serializer names them (f"{op.__module__}.{op.__name__}")
_SYM_TARGETS = frozenset(
    {f"_operator.{n}" for n in ("eq ne le ge lt gt neg pos mul add sub floordiv mod pow truediv and_ or_".split())}
    | {"_operator.lshift", "_operator.rshift", "math.trunc"}
    | {f"torch.{n}" for n in ("sym_not", "sym_int", "sym_float", "sym_ite", "sym_max", "sym_min", "_sym_sqrt")}
)
# Operators of well-known libraries with known semantics (each has a conversion in torch_frontend and a cost rule in
# passes.costs), allowed by their exact target: target -> (qualified name, schema as the library registers it).
LIBRARY_OPS = {
    # transformers.integrations.moe: a mixture-of-experts layer's experts on CPU (transformers' default `grouped_mm`
    # experts implementation): input (S, K) rows sorted by expert, weight (E, K, N), offs (E,) -> (S, N)
    "torch.ops.transformers.grouped_mm_fallback.default": (
        "transformers::grouped_mm_fallback",
        "(Tensor input, Tensor weight, Tensor offs) -> Tensor",
    ),
    # torch's own quantized_decomposed namespace (torch/ao/quantization/fx/_decomposed.py, registered only when that
    # module is imported): the quantize/dequantize ops a PT2E-quantized program (`convert_pt2e`) holds around float
    # convolutions and linear layers. Same shape in and out; quantize gives `dtype`, dequantize `out_dtype` or float32.
    "torch.ops.quantized_decomposed.quantize_per_tensor.default": (
        "quantized_decomposed::quantize_per_tensor",
        "(Tensor input, float scale, int zero_point, int quant_min, int quant_max, ScalarType dtype) -> Tensor",
    ),
    "torch.ops.quantized_decomposed.quantize_per_tensor.tensor": (
        "quantized_decomposed::quantize_per_tensor.tensor",
        "(Tensor input, Tensor scale, Tensor zero_point, int quant_min, int quant_max, ScalarType dtype) -> Tensor",
    ),
    "torch.ops.quantized_decomposed.dequantize_per_tensor.default": (
        "quantized_decomposed::dequantize_per_tensor",
        "(Tensor input, float scale, int zero_point, int quant_min, int quant_max, ScalarType dtype, *, "
        "ScalarType? out_dtype=None) -> Tensor",
    ),
    "torch.ops.quantized_decomposed.dequantize_per_tensor.tensor": (
        "quantized_decomposed::dequantize_per_tensor.tensor",
        "(Tensor input, Tensor scale, Tensor zero_point, int quant_min, int quant_max, ScalarType dtype, *, "
        "ScalarType? out_dtype=None) -> Tensor",
    ),
    "torch.ops.quantized_decomposed.quantize_per_channel.default": (
        "quantized_decomposed::quantize_per_channel",
        "(Tensor input, Tensor scales, Tensor zero_points, int axis, int quant_min, int quant_max, ScalarType dtype) "
        "-> Tensor",
    ),
    "torch.ops.quantized_decomposed.dequantize_per_channel.default": (
        "quantized_decomposed::dequantize_per_channel",
        "(Tensor input, Tensor scales, Tensor? zero_points, int axis, int quant_min, int quant_max, ScalarType dtype, "
        "*, ScalarType? out_dtype=None) -> Tensor",
    ),
}
_TREESPEC_TYPES = frozenset(
    {
        "builtins.tuple",
        "builtins.list",
        "builtins.dict",
        "collections.OrderedDict",
        "collections.deque",
        "collections.namedtuple",
        "torch.Size",
        "torch.fx.immutable_collections.immutable_list",
        "torch.fx.immutable_collections.immutable_dict",
    }
)
_VERIFIERS = frozenset({"", "ATEN", "TRAINING"})
_DEVICES = frozenset({"cpu", "cuda", "meta"})
# schema.ScalarType -> (torch dtype name, bytes per element)
_DTYPES = {
    1: ("uint8", 1),
    2: ("int8", 1),
    3: ("int16", 2),
    4: ("int32", 4),
    5: ("int64", 8),
    6: ("float16", 2),
    7: ("float32", 4),
    8: ("float64", 8),
    9: ("complex32", 4),
    10: ("complex64", 8),
    11: ("complex128", 16),
    12: ("bool", 1),
    13: ("bfloat16", 2),
    28: ("uint16", 2),
    29: ("float8_e4m3fn", 1),
    30: ("float8_e5m2", 1),
    31: ("float8_e4m3fnuz", 1),
    32: ("float8_e5m2fnuz", 1),
    33: ("float8_e8m0fnu", 1),
    34: ("uint32", 4),
    35: ("uint64", 8),
}
_STRIDED = 7  # schema.Layout.Strided


# --------------------------------------------------------------------------------------------
# Pickles: refused by name, by content, and inside the child if torch ever reaches one
# --------------------------------------------------------------------------------------------

PICKLE_SUFFIXES = (".pt", ".pth", ".bin", ".pkl", ".pickle", ".ckpt", ".tar", ".joblib")
SAVE_HINT = (
    "save the model with torch.export.save(torch.export.export(model, example_inputs), 'model.pt2') "
    "or export it to ONNX"
)


def refuse_pickle(path: Path, why: str) -> UnreadableModelError:
    return UnreadableModelError(f"{path.name}: {why}; preflight never unpickles files (it could run code): {SAVE_HINT}")


def sniff_pickle(path: Path) -> bool:
    """True for a raw pickle stream (protocol 2+ starts with 0x80) or a torch.save zip archive."""
    with open(path, "rb") as f:
        head = f.read(4)
    if head[:1] == b"\x80":
        return True
    if head == b"PK\x03\x04":
        try:
            zf = open_zip(path, path.name)
        except UnreadableModelError:
            return False  # not a readable zip: the format's own reader says why
        with zf:
            return any(n.endswith(".pkl") for n in zf.namelist())
    return False


@contextlib.contextmanager
def no_unpickling(path: Path):
    """Inside: torch.load only loads plain tensors (weights_only=True), and pickle.loads refuses."""
    import pickle

    import torch

    real_load, real_loads = torch.load, pickle.loads
    real_obj = getattr(torch._C, "_pickle_load_obj", None)

    def safe_load(*args, **kwargs):
        kwargs["weights_only"] = True
        return real_load(*args, **kwargs)

    def refuse(*args, **kwargs):
        raise refuse_pickle(path, "the archive holds pickled Python objects")

    torch.load, pickle.loads = safe_load, refuse
    if real_obj is not None:
        torch._C._pickle_load_obj = refuse
    try:
        yield
    finally:
        torch.load, pickle.loads = real_load, real_loads
        if real_obj is not None:
            torch._C._pickle_load_obj = real_obj


@contextlib.contextmanager
def quiet_torch_export_log():
    """torch's export loggers warn about what preflight reports itself."""
    import logging

    logger = logging.getLogger("torch.export")
    level = logger.level
    logger.setLevel(logging.CRITICAL)
    try:
        yield
    finally:
        logger.setLevel(level)


# --------------------------------------------------------------------------------------------
# What inspect_pt2 returns
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class TensorRecord:
    """One weight or constant: a strided view of a storage file of the archive."""

    fqn: str
    member: str  # zip member name of its storage
    kind: str  # "weight" | "constant"
    is_param: bool
    dtype: int  # schema.ScalarType
    sizes: tuple[int, ...]
    strides: tuple[int, ...]
    offset: int
    requires_grad: bool


@dataclass(frozen=True)
class Storage:
    """A storage file: the bytes its views span (`need`), its size, and whether its values are read."""

    member: str
    dtype: int
    need: int
    size: int
    read: bool  # buffers and constants are read; parameters only get memory of the right size


@dataclass
class Pt2Plan:
    """A checked archive: the cleaned program (JSON-able dict) and where its tensors are."""

    path: Path
    zf: zipfile.ZipFile
    program: dict
    tensors: list[TensorRecord]
    storages: dict[str, Storage]
    warnings: list[str] = field(default_factory=list)
    library_ops: frozenset[str] = frozenset()  # the `LIBRARY_OPS` targets the program calls
    # node name -> the ATen ops a clone/contiguous node was made from (its `from_node` chain's targets, rule 8's
    # one reading of that metadata: bounded JSON, op names only); `passes.tvm_ir.eager_copy_of` reads it in the child
    copy_origins: dict[str, tuple[str, ...]] = field(default_factory=dict)

    @property
    def param_bytes(self) -> int:
        """Bytes of memory the parameters get (never read from the file)."""
        return sum(s.need for s in self.storages.values() if not s.read)

    @property
    def data_bytes(self) -> int:
        """Bytes of buffers and constants read from the file."""
        return sum(s.need for s in self.storages.values() if s.read)

    def close(self) -> None:
        self.zf.close()


class _Refused(Exception):
    """Internal: why the archive is refused (becomes an UnreadableModelError naming the file)."""


# --------------------------------------------------------------------------------------------
# The zip directory
# --------------------------------------------------------------------------------------------


def zip_entry_count(fp) -> int | None:
    """Entries the zip's end-of-central-directory record declares (None: no such record), read before
    `zipfile` builds its directory (a hostile directory can hold millions of entries)."""
    fp.seek(0, 2)
    size = fp.tell()
    tail_len = min(size, 65_536 + 22)
    fp.seek(size - tail_len)
    tail = fp.read(tail_len)
    at = tail.rfind(b"PK\x05\x06")
    if at < 0 or at + 22 > len(tail):
        return None
    count = struct.unpack("<H", tail[at + 10 : at + 12])[0]
    if count == 0xFFFF and at >= 20 and tail[at - 20 : at - 16] == b"PK\x06\x07":
        (eocd64_at,) = struct.unpack("<Q", tail[at - 12 : at - 4])
        if eocd64_at + 56 <= size:
            fp.seek(eocd64_at)
            rec = fp.read(56)
            if rec[:4] == b"PK\x06\x06":
                count = struct.unpack("<Q", rec[32:40])[0]
    return count


def open_zip(path: Path, label: str) -> zipfile.ZipFile:
    """Open a zip archive with bounded directory size and clean errors for names that are not UTF-8."""
    try:
        fp = open(path, "rb")
    except OSError as exc:
        raise UnreadableModelError(f"{label}: cannot read the file ({exc.strerror})") from exc
    try:
        count = zip_entry_count(fp)
        if count is not None and count > MAX_MEMBERS:
            raise UnreadableModelError(f"{label}: the zip archive declares {count:,} members (at most {MAX_MEMBERS:,})")
        fp.seek(0)
        return zipfile.ZipFile(fp)
    except UnreadableModelError:
        fp.close()
        raise
    except UnicodeDecodeError as exc:
        fp.close()
        raise UnreadableModelError(f"{label}: a zip member name is not valid UTF-8; the archive is corrupt") from exc
    except (zipfile.BadZipFile, zipfile.LargeZipFile, OSError, EOFError, ValueError, struct.error) as exc:
        fp.close()
        raise UnreadableModelError(f"{label}: not a torch.export .pt2 archive ({one_line(exc)})") from exc


def _member_name_problem(name: str) -> str | None:
    if len(name) > MAX_NAME:
        return "a member name longer than 1,024 characters"
    if "\x00" in name or "\\" in name or name.startswith("/"):
        return f"member name {name[:80]!r} (absolute, or with a NUL or backslash)"
    if any(part in ("", ".", "..") for part in name.split("/")):
        return f"member name {name[:80]!r} (empty, '.' or '..' path component)"
    return None


def _classify(rest: str) -> str:
    """What a member (its path below the archive's root folder) is; raises _Refused for anything else."""
    if rest in _CONTROL:
        return "control"
    if rest == _PROGRAM:
        return "program"
    if rest in (_WEIGHTS_CONFIG, _CONSTANTS_CONFIG):
        return "config"
    if _WEIGHT_RE.fullmatch(rest) or _CONSTANT_RE.fullmatch(rest):
        return "tensor"
    if rest == _SAMPLE_INPUTS:
        return "unread"  # pickled sample inputs: never read
    if _EXTRA_RE.fullmatch(rest):
        return "unread"  # torch.export.save(extra_files=...): never read
    if rest.startswith("data/aotinductor/"):
        raise _Refused(
            f"it holds AOTInductor code ({rest}): compiled libraries and build commands that torch would load "
            f"or run; preflight reads exported programs only (save with torch.export.save)"
        )
    if rest.startswith("data/constants/") and rest.split("/")[-1].startswith(("custom_obj_", "opaque_obj_")):
        raise _Refused(f"it holds pickled Python objects ({rest}), which preflight never unpickles")
    if rest.endswith((".pkl", ".pickle")):
        raise _Refused(f"it holds a Python pickle ({rest}), which preflight never unpickles")
    if rest.startswith(("data/executorch/", "data/mtia", "xl_model_weights/")):
        raise _Refused(f"it holds another runtime's payload ({rest}); preflight reads exported programs only")
    if rest.startswith("models/") and rest.endswith(".json"):
        raise _Refused(f"it holds a second exported program ({rest}); torch.export.save writes one, 'model'")
    raise _Refused(f"unexpected member {rest[:120]!r}")


def _read(zf: zipfile.ZipFile, info: zipfile.ZipInfo, cap: int) -> bytes:
    """A member's bytes, at most `cap` (checked against the directory before and the data after)."""
    if info.file_size > cap:
        raise _Refused(f"member {info.filename!r} declares {info.file_size:,} bytes (at most {cap:,})")
    try:
        with zf.open(info) as f:
            data = f.read(cap + 1)
    except (zipfile.BadZipFile, OSError, EOFError, ValueError, NotImplementedError, RuntimeError) as exc:
        raise _Refused(f"member {info.filename!r} cannot be read ({one_line(exc)})") from exc
    if len(data) != info.file_size:
        raise _Refused(f"member {info.filename!r} holds {len(data):,} bytes, its directory entry {info.file_size:,}")
    return data


def read_prefix(zf: zipfile.ZipFile, member: str, n: int) -> bytearray:
    """The first `n` bytes of a member, into a writable buffer (a tensor's storage)."""
    buf = bytearray(n)
    view = memoryview(buf)
    got = 0
    with zf.open(member) as f:
        while got < n:
            k = f.readinto(view[got:])
            if not k:
                break
            got += k
    if got != n:
        raise UnreadableModelError(f"member {member!r} ended after {got:,} of {n:,} bytes")
    return buf


def json_parse_bytes(data: bytes) -> int:
    """An upper estimate of the memory `json.loads(data)` allocates, in bytes: 232 per object (a dict with its
    first entries), 56 per array, 25 per quote (half a string), 8 per comma (a list slot). Calibrated with
    tracemalloc on torch's own model.json files and on amplification payloads: 1.5 to 4 times the real figure."""
    return 232 * data.count(b"{") + 56 * data.count(b"[") + 25 * data.count(b'"') + 8 * data.count(b",")


def _json(data: bytes, what: str):
    estimate = json_parse_bytes(data)
    if estimate > MAX_JSON_PARSE_BYTES:
        raise _Refused(
            f"{what} would parse into about {estimate:,} bytes of objects (at most {MAX_JSON_PARSE_BYTES:,}): "
            f"{len(data):,} bytes of JSON made of tiny values"
        )
    try:
        return json.loads(data.decode("utf-8"))
    except UnicodeDecodeError as exc:
        raise _Refused(f"{what} is not UTF-8 text") from exc
    except RecursionError as exc:
        raise _Refused(f"{what} is nested too deeply") from exc
    except ValueError as exc:  # JSONDecodeError, and integers of more than 4,300 digits
        raise _Refused(f"{what} is not valid JSON ({one_line(exc)})") from exc


# --------------------------------------------------------------------------------------------
# The schema walk: torch's own dataclasses (torch/_export/serde/schema.py) say what each field holds
# --------------------------------------------------------------------------------------------


def _module_paths(stack) -> str | None:
    """A node's serialized `nn_module_stack` ("key,path,type" entries joined by ';') as "m0,path0,;m1,path1,"
    with preflight's keys and no types, or None unless it is a string of at most 64 entries whose paths are all
    empty (the root module) or dotted `[A-Za-z0-9_]` paths of at most 256 characters."""
    if not isinstance(stack, str) or not stack or len(stack) > 64 * 1024:
        return None
    paths = []
    for item in stack.split(";")[:65]:
        parts = item.split(",")
        path = parts[1] if len(parts) >= 3 else None
        if path is None or len(path) > 256 or (path and not _FQN_RE.fullmatch(path)):
            return None
        paths.append(path)
    if len(paths) > 64:
        return None
    return ";".join(f"m{i},{path}," for i, path in enumerate(paths))


def _identifier(value, where: str) -> str:
    if (
        not isinstance(value, str)
        or len(value) > 256
        or not _IDENT_RE.fullmatch(value)
        or keyword.iskeyword(value)
        or value.startswith("__")
    ):
        raise _Refused(f"{where} is {str(value)[:80]!r}, not a Python identifier")
    return value


def _fqn(value, where: str) -> str:
    if not isinstance(value, str) or len(value) > MAX_NAME or not _FQN_RE.fullmatch(value):
        raise _Refused(f"{where} is {str(value)[:80]!r}, not a dotted name")
    return value


def check_target(target, where: str) -> str:
    """Rule 6: an operator the graph calls must be a torch.ops name preflight allows."""
    if not isinstance(target, str):
        raise _Refused(f"{where} is not a string")
    if target in LIBRARY_OPS:
        return target
    m = _OP_TARGET_RE.fullmatch(target)
    if m is not None:
        if m.group(2) in _DENIED_OPS:
            raise _Refused(f"{where} calls {target}, an operator that touches files or prints")
        return target
    m = _HOP_TARGET_RE.fullmatch(target)
    if m is not None and m.group(1) in _HOPS:
        return target
    if target in _SYM_TARGETS:
        return target
    raise _Refused(
        f"{where} calls {target[:120]!r}; preflight loads programs of torch.ops.aten / torch.ops.prims operators "
        f"and a few library operators it knows (other custom operators and Python callables are refused)"
    )


def neutral_out_spec(spec, where: str, renamed: set[str]) -> str:
    """Rule 11 for an output spec: a node type outside `_TREESPEC_TYPES` (a transformers `ModelOutput`, a user's
    dataclass) becomes a plain tuple of the same children, its name added to `renamed`. torch would import the
    type to rebuild the output object; preflight only needs the flat outputs, so nothing is imported."""
    if not isinstance(spec, str) or len(spec) > MAX_JSON_STRING:
        raise _Refused(f"{where} is not a tree spec string")
    doc = _json(spec.encode("utf-8", "replace"), where)
    if not isinstance(doc, list) or len(doc) != 2 or doc[0] != 1:
        raise _Refused(f"{where} is not a protocol-1 tree spec")
    stack = [doc[1]]
    while stack:
        node = stack.pop()
        if isinstance(node, dict) and node.get("type") is not None and node["type"] not in _TREESPEC_TYPES:
            renamed.add(str(node["type"])[:80])
            node["type"], node["context"] = "builtins.tuple", "null"  # what treespec_dumps writes for a tuple
        if isinstance(node, dict) and isinstance(node.get("children_spec"), list):
            stack.extend(node["children_spec"])
    try:
        out = json.dumps(doc)
    except RecursionError as exc:  # json.loads took it, but dumps runs deeper in the stack
        raise _Refused(f"{where} is nested too deeply") from exc
    check_treespec(out, where)
    return out


def check_treespec(spec, where: str) -> str:
    """Rule 11: a pytree spec (JSON) with allowed node types and no `__enum__` contexts."""
    if not isinstance(spec, str) or len(spec) > MAX_JSON_STRING:
        raise _Refused(f"{where} is not a tree spec string")
    doc = _json(spec.encode("utf-8", "replace"), where)
    if not isinstance(doc, list) or len(doc) != 2 or doc[0] != 1:
        raise _Refused(f"{where} is not a protocol-1 tree spec")
    count = 0

    def walk(node, depth: int) -> None:
        nonlocal count
        count += 1
        if depth > 64 or count > 100_000:
            raise _Refused(f"{where} is nested too deeply")
        if not isinstance(node, dict) or set(node) != {"type", "context", "children_spec"}:
            raise _Refused(f"{where} has a malformed node")
        typ, ctx, children = node["type"], node["context"], node["children_spec"]
        if typ is not None and typ not in _TREESPEC_TYPES:
            raise _Refused(f"{where} has node type {str(typ)[:80]!r}, which torch would import")
        if ctx is not None:
            if not isinstance(ctx, str):
                raise _Refused(f"{where} has a non-string context")
            _no_enum(_json(ctx.encode("utf-8", "replace"), where), where)
        if not isinstance(children, list):
            raise _Refused(f"{where} has malformed children")
        for c in children:
            walk(c, depth + 1)

    walk(doc[1], 0)
    return spec


def _no_enum(value, where: str) -> None:
    stack = [value]
    while stack:
        v = stack.pop()
        if isinstance(v, dict):
            if "__enum__" in v:
                raise _Refused(f"{where} names an enum class, which torch would import")
            stack.extend(v.values())
        elif isinstance(v, list):
            stack.extend(v)


class _Walker:
    """Walks a JSON document against torch's schema dataclasses and returns the cleaned document."""

    def __init__(self, schema, where: str):
        self.schema = schema
        self.where = where
        self.hints: dict[type, dict] = {}
        self.dropped: set[str] = set()
        self.output_types: set[str] = set()  # output node types read as tuples (`neutral_out_spec`)
        self.library_ops: set[str] = set()  # `LIBRARY_OPS` targets called
        self.copy_origins: dict[str, tuple[str, ...]] = {}  # `Pt2Plan.copy_origins`
        self.exprs = 0

    def type_hints(self, cls) -> dict:
        hints = self.hints.get(cls)
        if hints is None:
            hints = self.hints[cls] = typing.get_type_hints(cls, globalns=vars(self.schema), include_extras=False)
        return hints

    def walk(self, tp, value, path: str, depth: int = 0):
        import dataclasses
        import enum
        import types

        from torch._export.serde.union import _Union

        if depth > 200:
            raise _Refused(f"{path}: nested too deeply")
        origin = typing.get_origin(tp)
        if origin in (typing.Union, types.UnionType):
            args = [a for a in typing.get_args(tp) if a is not type(None)]
            if value is None:
                return None
            return self.walk(args[0], value, path, depth + 1)
        if origin is list:
            if not isinstance(value, list):
                raise _Refused(f"{path} is not a list")
            (item,) = typing.get_args(tp)
            return [self.walk(item, v, f"{path}[{i}]", depth + 1) for i, v in enumerate(value)]
        if origin is dict:
            if not isinstance(value, dict):
                raise _Refused(f"{path} is not an object")
            _, item = typing.get_args(tp)
            return {k: self.walk(item, v, f"{path}.{k[:40]}", depth + 1) for k, v in value.items()}
        if isinstance(tp, type) and issubclass(tp, enum.Enum):
            if isinstance(value, bool) or not isinstance(value, int) or value not in {m.value for m in tp}:
                raise _Refused(f"{path} is {str(value)[:40]!r}, not a {tp.__name__}")
            return value
        if isinstance(tp, type) and issubclass(tp, _Union):
            if not isinstance(value, dict) or len(value) != 1:
                raise _Refused(f"{path} is not a one-key {tp.__name__} object")
            ((key, inner),) = value.items()
            hints = self.type_hints(tp)
            if key not in hints or key.startswith("_"):
                raise _Refused(f"{path} has unknown {tp.__name__} kind {key[:40]!r}")
            out = {key: self.walk(hints[key], inner, f"{path}.{key}", depth + 1)}
            return self.check(tp, out, path)
        if dataclasses.is_dataclass(tp):
            if not isinstance(value, dict):
                raise _Refused(f"{path} is not a {tp.__name__} object")
            hints = self.type_hints(tp)
            out = {}
            for f in dataclasses.fields(tp):
                if f.name in value:
                    out[f.name] = self.walk(hints[f.name], value[f.name], f"{path}.{f.name}", depth + 1)
                elif f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
                    raise _Refused(f"{path} has no '{f.name}'")
            for k in value:
                if k not in out and not any(f.name == k for f in dataclasses.fields(tp)):
                    self.dropped.add(f"{tp.__name__}.{k[:40]}")
            return self.check(tp, out, path)
        if tp is str:
            if not isinstance(value, str):
                raise _Refused(f"{path} is not a string")
            if len(value) > MAX_JSON_STRING:
                raise _Refused(f"{path} is a string of {len(value):,} characters (at most {MAX_JSON_STRING:,})")
            return value
        if tp is bool:
            if not isinstance(value, bool):
                raise _Refused(f"{path} is not true/false")
            return value
        if tp is int:
            if isinstance(value, bool) or not isinstance(value, int) or abs(value) > MAX_INT64:
                raise _Refused(f"{path} is {str(value)[:40]!r}, not a 64-bit integer")
            return value
        if tp is float:
            if isinstance(value, bool) or not isinstance(value, int | float | str):
                raise _Refused(f"{path} is not a number")
            if isinstance(value, str) and value not in ("Infinity", "-Infinity", "NaN"):
                raise _Refused(f"{path} is {value[:40]!r}, not a number")
            if isinstance(value, int) and abs(value) > MAX_INT64:
                raise _Refused(f"{path} is out of range")
            return value
        raise _Refused(f"{path}: unexpected schema type {tp!r}")  # pragma: no cover - schema drift

    # -- semantic rules, per schema class (after its fields are walked) -------------------------------
    def check(self, tp, out: dict, path: str) -> dict:
        name = tp.__name__
        rule = getattr(self, f"_check_{name}", None)
        return rule(out, path) if rule is not None else out

    def _check_SymExpr(self, out, path):
        self.exprs += 1
        try:
            sym_expr.parse(out["expr_str"])
        except sym_expr.ExprError as exc:
            raise _Refused(f"{path}.expr_str is not a shape expression ({exc})") from exc
        return out

    def _check_SymExprHint(self, out, path):
        value = next(iter(out.values()))
        if isinstance(value, int) and abs(value) > sym_expr.MAX_INT:
            raise _Refused(f"{path} is out of range")
        return out

    def _check_Device(self, out, path):
        if out["type"] not in _DEVICES:
            raise _Refused(f"{path}.type is {out['type'][:40]!r}, not cpu, cuda or meta")
        index = out.get("index")
        if index is not None and not 0 <= index < 1024:
            raise _Refused(f"{path}.index is out of range")
        return out

    def _check_TensorMeta(self, out, path):
        if out["layout"] != _STRIDED:
            raise _Refused(f"{path} is a sparse or opaque tensor (layout {out['layout']}); preflight reads dense ones")
        if out["dtype"] not in _DTYPES:
            raise _Refused(f"{path} has dtype {out['dtype']}, which preflight does not know")
        for i, s in enumerate(out["sizes"]):
            if "as_int" in s and not 0 <= s["as_int"] <= MAX_DIM:
                raise _Refused(f"{path} dimension {i} is {s['as_int']:,} (dimensions are 0 to {MAX_DIM:,})")
        for s in (*out["strides"], out["storage_offset"]):
            if "as_int" in s and not 0 <= s["as_int"] <= sym_expr.MAX_INT:
                raise _Refused(f"{path} has a stride or storage offset of {s['as_int']:,}")
        return out

    def _check_SymIntArgument(self, out, path):
        if "as_name" in out:
            _identifier(out["as_name"], f"{path}.as_name")
        return out

    _check_SymFloatArgument = _check_SymIntArgument
    _check_SymBoolArgument = _check_SymIntArgument

    def _check_TensorArgument(self, out, path):
        _identifier(out["name"], f"{path}.name")
        return out

    _check_TokenArgument = _check_TensorArgument
    _check_GraphArgument = _check_TensorArgument

    def _check_CustomObjArgument(self, out, path):
        raise _Refused(f"{path}: custom (torchbind) objects are not supported; they need pickled payloads")

    def _check_Argument(self, out, path):
        ((kind, value),) = out.items()
        if kind in ("as_custom_obj",):
            raise _Refused(f"{path}: custom (torchbind) objects are not supported")
        if kind == "as_operator" and check_target(value, f"{path}.as_operator") in LIBRARY_OPS:
            self.library_ops.add(value)
        if kind == "as_string":
            _string(value, f"{path}.as_string")
        if kind == "as_strings":
            for i, s in enumerate(value):
                _string(s, f"{path}.as_strings[{i}]")
        if kind == "as_string_to_argument":
            for k in value:
                _string(k, f"{path} key")
        return out

    def _check_ConstantValue(self, out, path):
        if "as_string" in out:
            _string(out["as_string"], f"{path}.as_string")
        return out

    def _check_NamedArgument(self, out, path):
        # higher-order operators pass every named argument on as a keyword, which FX writes into source
        if out["name"] and (len(out["name"]) > 256 or not _IDENT_RE.fullmatch(out["name"])):
            raise _Refused(f"{path}.name is {out['name'][:80]!r}, not an argument name")
        return out

    def _check_Node(self, out, path):
        if check_target(out["target"], f"{path}.target") in LIBRARY_OPS:
            self.library_ops.add(out["target"])
        if out.get("name"):
            _identifier(out["name"], f"{path}.name")
        metadata = out.get("metadata") or {}
        if out["target"] in _COPY_NODE_TARGETS and out.get("name"):
            self.copy_origins[out["name"]] = _origin_targets(metadata.get("from_node"))
        stack = _module_paths(metadata.get("nn_module_stack"))
        out["metadata"] = {"nn_module_stack": stack} if stack else {}  # rule 8
        return out

    def _check_Graph(self, out, path):
        for key in ("tensor_values", "sym_int_values", "sym_bool_values", "sym_float_values"):
            for name in out.get(key, {}):
                _identifier(name, f"{path}.{key} name")
        if out.get("custom_obj_values"):
            raise _Refused(f"{path}: custom (torchbind) objects are not supported")
        return out

    def _check_InputToConstantInputSpec(self, out, path):
        _identifier(out["name"], f"{path}.name")
        return out

    def _check_InputToParameterSpec(self, out, path):
        _fqn(out["parameter_name"], f"{path}.parameter_name")
        return out

    _check_ParameterMutationSpec = _check_InputToParameterSpec
    _check_GradientToParameterSpec = _check_InputToParameterSpec

    def _check_InputToBufferSpec(self, out, path):
        _fqn(out["buffer_name"], f"{path}.buffer_name")
        return out

    _check_BufferMutationSpec = _check_InputToBufferSpec

    def _check_InputToTensorConstantSpec(self, out, path):
        _fqn(out["tensor_constant_name"], f"{path}.tensor_constant_name")
        return out

    def _check_GradientToUserInputSpec(self, out, path):
        _identifier(out["user_input_name"], f"{path}.user_input_name")
        return out

    _check_UserInputMutationSpec = _check_GradientToUserInputSpec

    def _check_InputSpec(self, out, path):
        if "custom_obj" in out:
            raise _Refused(f"{path}: custom (torchbind) object inputs are not supported")
        return out

    def _check_ModuleCallEntry(self, out, path):
        if len(out["fqn"]) > MAX_NAME or not _CALL_FQN_RE.fullmatch(out["fqn"]):
            raise _Refused(f"{path}.fqn is {out['fqn'][:80]!r}, not a module path")
        return out

    def _check_ModuleCallSignature(self, out, path):
        check_treespec(out["in_spec"], f"{path}.in_spec")
        out["out_spec"] = neutral_out_spec(out["out_spec"], f"{path}.out_spec", self.output_types)
        for i, n in enumerate(out.get("forward_arg_names") or ()):
            _identifier(n, f"{path}.forward_arg_names[{i}]")
        return out

    def _check_NamedTupleDef(self, out, path):
        for i, n in enumerate(out["field_names"]):
            _identifier(n, f"{path}.field_names[{i}]")
        return out

    def _check_GraphModule(self, out, path):
        out["metadata"] = {}  # rule 8
        for key in out.get("treespec_namedtuple_fields", {}):
            if len(key) > MAX_NAME or not _FQN_RE.fullmatch(key):
                raise _Refused(f"{path}.treespec_namedtuple_fields key {key[:80]!r} is not a dotted name")
        return out

    def _check_RangeConstraint(self, out, path):
        return out

    def _check_ExportedProgram(self, out, path):
        for v in out.get("verifiers", []):
            if v not in _VERIFIERS:
                raise _Refused(f"{path}.verifiers names {v[:40]!r}, not ATEN or TRAINING")
        for k in out["range_constraints"]:
            if not sym_expr.SYMBOL_RE.fullmatch(k):
                raise _Refused(f"{path}.range_constraints has symbol {k[:40]!r}, not a symbol name")
            m = re.fullmatch(r"(u|zuf)(\d+)", k)
            if m is not None and int(m.group(2)) > MAX_UNBACKED_INDEX:
                raise _Refused(f"{path}.range_constraints has symbol {k!r}, an index above {MAX_UNBACKED_INDEX:,}")
        for k in out["opset_version"]:
            _identifier(k, f"{path}.opset_version key")
        if len(out.get("torch_version", "")) > 64:
            raise _Refused(f"{path}.torch_version is too long")
        return out


_GUARD_TOKEN = re.compile(
    r"\s*(?:(\d+)|([A-Za-z_][A-Za-z0-9_]*)|'[A-Za-z_][A-Za-z0-9_]*'|\"[A-Za-z_][A-Za-z0-9_]*\""
    r"|==|!=|<=|>=|//|\*\*|[-+*/%<>()\[\].,])"
)
_GUARD_NAMES = frozenset(
    "L size stride storage_offset numel dim and or not max min abs int float math floor ceil trunc sqrt "
    "torch sym_float sym_int sym_max sym_min sym_sqrt sym_ite True False".split()
)


def is_shape_guard(text) -> bool:
    """True for what torch.export writes in guards_code (`L['x'].size()[0] <= L['y'].size()[0]`): names of
    inputs, sizes and strides, integers, arithmetic and comparisons. Anything else is reported."""
    if not isinstance(text, str) or len(text) > 4096:
        return False
    pos = 0
    while pos < len(text):
        if not text[pos:].strip():
            return True
        m = _GUARD_TOKEN.match(text, pos)
        if m is None or (m.group(2) is not None and m.group(2) not in _GUARD_NAMES):
            return False
        pos = m.end()
    return True


def _string(value, where: str) -> str:
    if not isinstance(value, str) or len(value) > MAX_STRING or not _STRING_RE.fullmatch(value):
        raise _Refused(
            f"{where} is {str(value)[:40]!r}: operator string arguments are printable ASCII without quotes or "
            f"backslashes, at most {MAX_STRING:,} characters"
        )
    return value


# --------------------------------------------------------------------------------------------
# inspect_pt2
# --------------------------------------------------------------------------------------------


def inspect_pt2(path: Path) -> Pt2Plan:
    """Check a `.pt2` archive against every rule of this module; raise `UnreadableModelError` naming the rule
    it breaks. The returned plan keeps the archive open (call `close()`)."""
    zf = open_zip(path, path.name)
    try:
        plan = _inspect(path, zf)
    except _Refused as exc:
        zf.close()
        raise UnreadableModelError(f"{path.name}: refused: {exc}") from None
    except UnreadableModelError:
        zf.close()
        raise
    return plan


def _inspect(path: Path, zf: zipfile.ZipFile) -> Pt2Plan:
    infos = zf.infolist()
    names = [i.filename for i in infos]
    if not names:
        raise UnreadableModelError(f"{path.name}: not a torch.export .pt2 archive (an empty zip)")
    if any(n.endswith(".pkl") for n in names):
        raise refuse_pickle(path, "this is a torch.save pickle archive, not a torch.export program")
    if "serialized_exported_program.json" in names or "version" in names:
        raise UnreadableModelError(
            f"{path.name}: an old (torch < 2.5) .pt2 layout, whose weights are pickles; re-save it with "
            f"torch.export.save from torch 2.5 or later"
        )
    if len(set(names)) != len(names):
        raise _Refused("the zip directory names a member twice")
    roots = {n.split("/", 1)[0] for n in names}
    if len(roots) != 1 or any("/" not in n for n in names):
        raise UnreadableModelError(
            f"{path.name}: not a torch.export .pt2 archive (torch.export.save puts every member in one folder)"
        )
    (root,) = roots
    by_rest: dict[str, zipfile.ZipInfo] = {}
    kinds: dict[str, str] = {}
    for info in infos:
        problem = _member_name_problem(info.filename)
        if problem is not None:
            raise _Refused(problem)
        if info.flag_bits & 0x1:
            raise _Refused(f"member {info.filename!r} is encrypted")
        if info.compress_type not in (zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED):
            raise _Refused(f"member {info.filename!r} uses compression method {info.compress_type}")
        rest = info.filename[len(root) + 1 :]
        kinds[rest] = _classify(rest)
        by_rest[rest] = info
    if _PROGRAM not in by_rest:
        raise UnreadableModelError(f"{path.name}: not a torch.export .pt2 archive (no exported program inside)")
    for rest in ("archive_format", _WEIGHTS_CONFIG, _CONSTANTS_CONFIG):
        if rest not in by_rest:
            raise _Refused(f"the archive has no {rest}")

    # caps from the directory, before reading anything
    for rest, kind in kinds.items():
        info = by_rest[rest]
        cap = {"control": MAX_CONTROL_BYTES, "program": MAX_PROGRAM_BYTES, "config": MAX_CONFIG_BYTES}.get(kind)
        if cap is not None and info.file_size > cap:
            raise _Refused(f"member {rest!r} declares {info.file_size:,} bytes (at most {cap:,})")

    for rest, pattern in _CONTROL.items():
        if rest in by_rest:
            value = _read(zf, by_rest[rest], MAX_CONTROL_BYTES)
            if not pattern.fullmatch(value):
                raise _Refused(f"{rest} is {value[:20]!r}, not what torch.export.save writes")

    from torch._export.serde import schema

    warnings: list[str] = []
    program_doc = _json(_read(zf, by_rest[_PROGRAM], MAX_PROGRAM_BYTES), _PROGRAM)
    walker = _Walker(schema, _PROGRAM)
    program = walker.walk(schema.ExportedProgram, program_doc, "model.json")
    _check_node_count(program["graph_module"]["graph"])
    major = program["schema_version"]["major"]
    if major != schema.SCHEMA_VERSION[0]:
        raise _Refused(f"its schema version {major} is not {schema.SCHEMA_VERSION[0]}, the one torch here reads")
    odd = [i for i, g in enumerate(program.get("guards_code") or ()) if not is_shape_guard(g)]
    if odd:
        warnings.append(
            f"the archive's guards_code holds Python that is not a shape guard (guards_code[{odd[0]}]: "
            f"{program['guards_code'][odd[0]][:60]!r}); ignored: preflight never runs code from a model file"
        )
    program["guards_code"] = []  # rule 10: dropped, whatever it says
    if walker.output_types:
        warnings.append(
            f"the model's output {', '.join(sorted(walker.output_types)[:3])} is read as a tuple of its tensors "
            f"(preflight needs the tensors, not the class, which it would have to import)"
        )
    if walker.dropped:
        warnings.append(
            f"fields this torch does not know were ignored: {', '.join(sorted(walker.dropped)[:5])}"
            + (" ..." if len(walker.dropped) > 5 else "")
        )

    tensors: list[TensorRecord] = []
    for kind, config_rest, member_re, member_dir in (
        ("weight", _WEIGHTS_CONFIG, _WEIGHT_RE, "data/weights/"),
        ("constant", _CONSTANTS_CONFIG, _CONSTANT_RE, "data/constants/"),
    ):
        doc = _json(_read(zf, by_rest[config_rest], MAX_CONFIG_BYTES), config_rest)
        config = _Walker(schema, config_rest).walk(schema.PayloadConfig, doc, config_rest)["config"]
        for fqn, meta in config.items():
            tensors.append(_record(path, root, kind, fqn, meta, member_re, member_dir, by_rest))

    storages = _storages(tensors, by_rest, root)
    zeros = sum(s.need for s in storages.values() if s.read and not s.size)
    if zeros > MAX_EMPTY_DATA:
        raise _Refused(
            f"its buffers and constants stored empty would be {zeros:,} bytes of zeros (at most {MAX_EMPTY_DATA:,})"
        )
    _check_signature(program, tensors)
    _check_inflation(path, infos, kinds, by_rest, storages)
    return Pt2Plan(
        path=path,
        zf=zf,
        program=program,
        tensors=tensors,
        storages=storages,
        warnings=warnings,
        library_ops=frozenset(walker.library_ops),
        copy_origins=dict(walker.copy_origins),
    )


_COPY_NODE_TARGETS = frozenset({"torch.ops.aten.clone.default", "torch.ops.aten.contiguous.default"})
_ORIGIN_RE = re.compile(r"(aten|prims)\.[A-Za-z_][A-Za-z0-9_]*\.[A-Za-z_][A-Za-z0-9_]*")
MAX_ORIGIN_JSON = 65_536  # characters of one node's `from_node` read (a provenance chain is a few hundred)


def _origin_targets(raw) -> tuple[str, ...]:
    """The op names of a serialized `from_node` chain (JSON: NodeSource dicts with "target" and nested "from_node"):
    at most 64, each an `aten`/`prims` op name; nothing is built from it. Unreadable or oversized: ()."""
    if not isinstance(raw, str) or len(raw) > MAX_ORIGIN_JSON:
        return ()
    try:
        stack = [json.loads(raw)]
    except ValueError:
        return ()
    found: list[str] = []
    while stack and len(found) < 64:
        item = stack.pop()
        if isinstance(item, list):
            stack.extend(item[:64])
        elif isinstance(item, dict):
            target = item.get("target")
            if isinstance(target, str) and _ORIGIN_RE.fullmatch(target):
                found.append(target)
            stack.append(item.get("from_node"))
    return tuple(found)


def _record(path, root, kind, fqn, meta, member_re, member_dir, by_rest) -> TensorRecord:
    where = f"{kind} '{fqn[:80]}'"
    _fqn(fqn, f"{kind} name")
    if meta["use_pickle"]:
        raise refuse_pickle(path, f"its {where} is a pickle (use_pickle)")
    rest = member_dir + meta["path_name"]
    if not member_re.fullmatch(rest):
        if meta["path_name"].startswith(("custom_obj_", "opaque_obj_")):
            raise refuse_pickle(path, f"its {where} is a pickled object")
        raise _Refused(f"{where} is stored in {meta['path_name'][:80]!r}, not a {member_dir}<name>_<n> file")
    if rest not in by_rest:
        raise _Refused(f"{where} is stored in {rest}, which the archive does not hold")
    tm = meta["tensor_meta"]
    if tm is None:
        raise _Refused(f"{where} has no tensor_meta")
    ints = []
    for field_name in ("sizes", "strides"):
        vals = []
        for s in tm[field_name]:
            if "as_int" not in s:
                raise _Refused(f"{where} has a symbolic {field_name[:-1]}; stored tensors have fixed shapes")
            vals.append(s["as_int"])
        ints.append(tuple(vals))
    sizes, strides = ints
    if len(sizes) != len(strides):
        raise _Refused(f"{where} has {len(sizes)} sizes and {len(strides)} strides")
    if "as_int" not in tm["storage_offset"]:
        raise _Refused(f"{where} has a symbolic storage offset")
    return TensorRecord(
        fqn=fqn,
        member=f"{root}/{rest}",
        kind=kind,
        is_param=bool(meta["is_param"]) and kind == "weight",
        dtype=tm["dtype"],
        sizes=sizes,
        strides=strides,
        offset=tm["storage_offset"]["as_int"],
        requires_grad=tm["requires_grad"],
    )


def span_bytes(rec: TensorRecord) -> int:
    """Bytes of its storage a strided view reaches (0 for an empty tensor)."""
    if any(s == 0 for s in rec.sizes):
        return 0
    last = rec.offset + sum((s - 1) * st for s, st in zip(rec.sizes, rec.strides, strict=True))
    return (last + 1) * _DTYPES[rec.dtype][1]


def _storages(tensors: list[TensorRecord], by_rest: dict, root: str) -> dict[str, Storage]:
    out: dict[str, Storage] = {}
    for rec in tensors:
        size = by_rest[rec.member[len(root) + 1 :]].file_size
        itemsize = _DTYPES[rec.dtype][1]
        need = span_bytes(rec)
        prev = out.get(rec.member)
        if prev is not None and prev.dtype != rec.dtype:
            raise _Refused(f"{rec.member} is read as two dtypes")
        if size and size % itemsize:
            raise _Refused(f"{rec.member} holds {size:,} bytes, not a whole number of {itemsize}-byte elements")
        if size and size < need:
            raise _Refused(f"{rec.kind} '{rec.fqn}' spans {need:,} bytes of {rec.member}, which holds {size:,}")
        need = max(need, prev.need if prev else 0)
        read = (prev.read if prev else False) or not rec.is_param
        out[rec.member] = Storage(rec.member, rec.dtype, need, size, read)
    return out


def _check_node_count(graph: dict) -> None:
    """At most `MAX_NODES` nodes in `graph` and the subgraphs its nodes' arguments hold (walked iteratively)."""
    count, stack = 0, [graph]
    while stack:
        x = stack.pop()
        if isinstance(x, dict):
            nodes = x.get("nodes")
            if isinstance(nodes, list) and "tensor_values" in x:  # a Graph
                count += len(nodes)
                if count > MAX_NODES:
                    raise _Refused(
                        f"its graph has more than {MAX_NODES:,} nodes (subgraphs included); preflight reads at most "
                        f"{MAX_NODES:,} (about 10 ms each; a 126-layer Llama export has about 9,000)"
                    )
            stack.extend(v for v in x.values() if isinstance(v, dict | list))
        elif isinstance(x, list):
            stack.extend(v for v in x if isinstance(v, dict | list))


def _check_signature(program: dict, tensors: list[TensorRecord]) -> None:
    """Every parameter, buffer and constant input has a record whose shape and dtype match the graph's."""
    graph = program["graph_module"]["graph"]
    by_fqn = {(r.kind, r.fqn): r for r in tensors}
    for spec in program["graph_module"]["signature"]["input_specs"]:
        ((kind, body),) = spec.items()
        if kind not in ("parameter", "buffer", "tensor_constant"):
            continue
        label = body[f"{kind}_name"]
        # non-persistent buffers and lifted constants are stored with the constants
        kinds = ("weight",) if kind == "parameter" else ("weight", "constant")
        rec = next((by_fqn[(k, label)] for k in kinds if (k, label) in by_fqn), None)
        if rec is None:
            raise _Refused(f"{kind} '{label}' has no record in the archive's weights or constants")
        meta = graph["tensor_values"].get(body["arg"]["name"])
        if meta is None:
            raise _Refused(f"{kind} '{label}' has no tensor metadata in the graph")
        sizes = tuple(s.get("as_int") for s in meta["sizes"])
        if meta["dtype"] != rec.dtype or (None not in sizes and sizes != rec.sizes):
            raise _Refused(
                f"{kind} '{label}' is {list(rec.sizes)} {_DTYPES[rec.dtype][0]} in its config but "
                f"{list(sizes)} {_DTYPES.get(meta['dtype'], ('?',))[0]} in the graph"
            )


def _check_inflation(path: Path, infos, kinds: dict, by_rest: dict, storages: dict[str, Storage]) -> None:
    """The zip-bomb rule: declared sizes beyond the bytes on disk must be justified by the graph's tensors."""
    on_disk = path.stat().st_size
    declared = sum(i.file_size for i in infos)
    json_bytes = sum(by_rest[r].file_size for r, k in kinds.items() if k in ("program", "config"))
    needed = sum(s.need for s in storages.values())
    allowed = on_disk + needed + json_bytes + INFLATION_ALLOWANCE
    if declared > allowed:
        raise _Refused(
            f"its members declare {declared:,} bytes uncompressed, {declared - on_disk:,} more than the "
            f"{on_disk:,} on disk, while its tensors need {needed:,} (a zip bomb?)"
        )
    # Buffers and constants are read (parameters are not): their bytes beyond what the file stores compressed
    # are memory a small file makes preflight allocate. torch.export.save stores members uncompressed.
    inflated = sum(
        max(0, s.need - by_rest[s.member.split("/", 1)[1]].compress_size)
        for s in storages.values()
        if s.read and s.size
    )
    if inflated > MAX_DATA_INFLATION:
        raise _Refused(
            f"its buffers and constants would inflate to {inflated:,} bytes more than the archive stores "
            f"compressed (at most {MAX_DATA_INFLATION:,}; a zip bomb?)"
        )


# --------------------------------------------------------------------------------------------
# build_exported_program (child process side)
# --------------------------------------------------------------------------------------------


@contextlib.contextmanager
def _sympify_refuses_strings():
    """Rule 5, belt and braces: while torch deserializes, `sympy.sympify` of a string raises."""
    import sympy

    real = sympy.sympify

    def guarded(a, *args, **kwargs):
        if isinstance(a, str):
            raise UnreadableModelError("the archive asked torch to evaluate a string as a sympy expression")
        return real(a, *args, **kwargs)

    sympy.sympify = guarded
    try:
        yield
    finally:
        sympy.sympify = real


def _with_sympy_exprs(program: dict) -> dict:
    """A copy of the cleaned program whose `expr_str` values are sympy objects built from our parse trees."""
    known: dict[str, object] = {}

    def convert(value):
        if isinstance(value, dict):
            if "expr_str" in value and isinstance(value["expr_str"], str) and set(value) <= {"expr_str", "hint"}:
                return {**value, "expr_str": sym_expr.to_sympy(sym_expr.parse(value["expr_str"]), known)}
            return {k: convert(v) for k, v in value.items()}
        if isinstance(value, list):
            return [convert(v) for v in value]
        return value

    return convert(program)


def build_tensors(plan: Pt2Plan) -> tuple[dict, dict]:
    """(state_dict, constants) of the archive: parameters get uninitialised memory of their size, buffers and
    constants their bytes from the file (only the bytes their views span)."""
    import torch

    storages = {}
    for member, st in plan.storages.items():
        dtype = getattr(torch, _DTYPES[st.dtype][0])
        numel = st.need // _DTYPES[st.dtype][1]
        if st.read and st.size and numel:
            storages[member] = torch.frombuffer(read_prefix(plan.zf, member, st.need), dtype=dtype)
        elif st.read:
            storages[member] = torch.zeros(numel, dtype=dtype)
        else:
            storages[member] = torch.empty(numel, dtype=dtype)
    state_dict, constants = {}, {}
    for rec in plan.tensors:
        t = torch.as_strided(storages[rec.member], rec.sizes, rec.strides, rec.offset)
        if rec.kind == "weight":
            state_dict[rec.fqn] = torch.nn.Parameter(t, requires_grad=rec.requires_grad) if rec.is_param else t
        else:
            constants[rec.fqn] = t
    return state_dict, constants


_DEFINED: list = []  # `define_library_ops`'s torch.library.Library objects (an op lives as long as its Library)


def _grouped_mm_fake(input, weight, offs):
    """transformers::grouped_mm_fallback's output: (S, N) rows of the input's dtype, for rows (S, K) and weights
    (E, K, N); nothing is computed (tracing and TVM's import need only the shape)."""
    return input.new_empty((input.shape[0], weight.shape[2]))


def _quantize_fake(input, *args):
    """quantized_decomposed.quantize_per_*: the input's shape in `dtype` (the last argument)."""
    return input.new_empty(input.shape, dtype=args[-1])


def _dequantize_fake(input, *args, out_dtype=None):
    """quantized_decomposed.dequantize_per_*: the input's shape in `out_dtype` (float32 when None)."""
    import torch

    return input.new_empty(input.shape, dtype=out_dtype or torch.float32)


_FAKE_KERNELS = {
    "transformers::grouped_mm_fallback": _grouped_mm_fake,
    "quantized_decomposed::quantize_per_tensor": _quantize_fake,
    "quantized_decomposed::quantize_per_tensor.tensor": _quantize_fake,
    "quantized_decomposed::quantize_per_channel": _quantize_fake,
    "quantized_decomposed::dequantize_per_tensor": _dequantize_fake,
    "quantized_decomposed::dequantize_per_tensor.tensor": _dequantize_fake,
    "quantized_decomposed::dequantize_per_channel": _dequantize_fake,
}


def define_library_ops(targets) -> None:
    """Register the `LIBRARY_OPS` among `targets` that this process lacks, from the schemas written here, so that
    torch's deserializer resolves them without the library being imported (rule 6). Each gets a fake (shape-only)
    kernel; none gets a real one: preflight never runs the model."""
    import torch

    for target in sorted(targets):
        qualname, schema = LIBRARY_OPS[target]
        namespace, name = qualname.split("::")
        packet, _, overload = name.partition(".")
        try:
            getattr(getattr(getattr(torch.ops, namespace), packet), overload or "default")
            continue  # registered already (the library is imported in this process)
        except AttributeError:
            pass
        lib = torch.library.Library(namespace, "FRAGMENT")
        lib.define(f"{name}{schema}")
        torch.library.register_fake(qualname, _FAKE_KERNELS[qualname], lib=lib)
        _DEFINED.append(lib)


def build_exported_program(plan: Pt2Plan):
    """torch's ExportedProgram of a checked archive, without torch's archive loader (run in the child)."""
    from torch._export.serde import schema
    from torch._export.serde.serialize import ExportedProgramDeserializer, _dict_to_dataclass

    label = plan.path.name
    try:
        state_dict, constants = build_tensors(plan)
    except UnreadableModelError as exc:
        raise UnreadableModelError(f"{label}: {exc}") from exc
    except (zipfile.BadZipFile, OSError, EOFError, ValueError, RuntimeError) as exc:
        raise UnreadableModelError(f"{label}: cannot read the archive's tensors ({one_line(exc)})") from exc
    try:
        program = _dict_to_dataclass(schema.ExportedProgram, _with_sympy_exprs(plan.program))
        define_library_ops(plan.library_ops)
        with no_unpickling(plan.path), quiet_torch_export_log(), _sympify_refuses_strings():
            return ExportedProgramDeserializer().deserialize(program, state_dict, constants, None)
    except UnreadableModelError:
        raise
    except Exception as exc:
        raise UnreadableModelError(f"{label}: torch could not read the exported program: {one_line(exc)}") from exc
