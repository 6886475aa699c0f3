"""What every frontend returns."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from ..errors import UnreadableModelError
from . import sanity
from .specs import printable


@dataclass
class LoadedModel:
    """A model lowered to a Relax IRModule with static shapes.

    `n_inputs` leading parameters of `main` are model inputs; the rest are weights.
    `unconverted` lists source operators that had no conversion and were kept as opaque calls.
    `source_params`, when set, is what `totals.params` / `param_bytes` report.
    """

    mod: object  # tvm.IRModule
    framework: str
    name: str
    source: str
    n_inputs: int | None
    unconverted: list[str] = field(default_factory=list)
    input_names: tuple[str, ...] = ()
    warnings: list[str] = field(default_factory=list)
    # (elements, bytes) of the weights the source file stores, when the importer's IR does not show
    # them one to one (TVM's ONNX importer folds weight transforms such as Transpose(W) into new constants)
    source_params: tuple[int, int] | None = None
    # the model computes in this float dtype although it was imported in float32 (see graph.with_float_dtype)
    float_dtype: str | None = None
    # Relax variable name -> where it comes from in the source model (a module path such as layer4.2.conv3, or
    # the source graph's node name); empty when the importer could not say
    op_sources: dict[str, str] = field(default_factory=dict)
    # Relax variable name -> the library call eager PyTorch runs it in ("aten.lstm.input:lstm": one `_cudnn_rnn`;
    # "" for none); `passes.graph.with_library_calls`, `passes.kernels.Kernel.call`
    op_calls: dict[str, str] = field(default_factory=dict)
    # Relax variable name -> the copy eager PyTorch makes of it where the importer passed it through ("contiguous":
    # a model's `.contiguous()`, "clone" / "clone_contiguous": its `.clone()`); `passes.graph.with_eager_copies`,
    # `OpNode.eager_copy`
    op_copies: dict[str, str] = field(default_factory=dict)
    # a half-precision module imported in float32 (`float_dtype`: a module given in half precision, a zoo spec's
    # `dtype=float16`): Relax variable name -> the float dtype its node computed in when the module was exported in
    # half precision (float32 where the model casts up: `passes.graph.with_own_dtypes`, `pipeline.own_dtypes`);
    # empty where the module has no float islands or the two exports differ
    op_dtypes: dict[str, str] = field(default_factory=dict)
    # `mod` is the model with the first 2 of `layers` identical layers, `depth1` the same with its first layer
    # only; the analysis extrapolates the n-layer totals from both (`passes.analysis.extrapolate_layers`)
    layers: int | None = None
    depth1: LoadedModel | None = None
    # `mod` is the model with its recurrences (ONNX LSTM, GRU, RNN) at the last of the sampled step counts
    # `step_samples` ((T, the model at T) x 3), the sequence axes `step_axes` ((input, axis), ...) set to T; the
    # analysis extrapolates the totals at `steps` time steps (`passes.analysis.extrapolate_steps`)
    steps: int | None = None
    step_samples: tuple[tuple[int, LoadedModel], ...] = ()
    step_axes: tuple[tuple[str, int], ...] = ()
    step_nodes: tuple[str, ...] = ()  # "LSTM 'name'" for each recurrent node of the model
    # source name -> module path (layer4.2.conv3) where the sources are node or tensor names the exporter wrote
    # it into (left out where it did not); None: the sources are module paths themselves (the PyTorch route)
    source_modules: dict[str, str] | None = None
    # a symbolic export (`from_module(..., symbol_axes=...)`): Relax shape variable -> (the name a user knows,
    # lowest value, highest value or None) over which torch.export's guards hold; empty for a static export
    symbols: dict[str, tuple[str, int, int | None]] = field(default_factory=dict)
    # the ONNX file's `producer_name` ("pytorch" for both of torch's exporters, "tf2onnx", ...); ""
    # for other formats or when the file does not say. `analyzer.pipeline.attention_patterns` reads it
    producer: str = ""
    # whether the ONNX file records each node's fx node (`pkg.torch.onnx.fx_node`: torch's dynamo exporter), which
    # names its baddbmm calls itself (`onnx_frontend.fx_blas_call`); `analyzer.pipeline.attention_patterns` reads it
    fx_nodes: bool = False

    def check_graph(self, graph) -> None:
        """Refuse shapes and window attributes no real model has (`sanity.check_graph`), naming the model."""
        source = Path(self.source).name if self.source[:1] not in ("<", "") else self.name
        try:
            sanity.check_graph(graph, source)
        except UnreadableModelError as exc:
            raise UnreadableModelError(printable(str(exc))) from None
