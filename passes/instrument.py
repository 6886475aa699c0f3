"""A TVM pass instrument that records how preflight's static costs change as a compiler pipeline runs.

    import tvm
    from passes import CostRecorder

    recorder = CostRecorder()
    with tvm.transform.PassContext(instruments=[recorder]):
        mod = pipeline(mod)
    recorder.records  # one PassRecord (before / after costs) per pass that ran

`analyzer.AnnotateCosts` (a module pass that attaches the analysis and prediction) is its companion.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from . import tvm_ir
from .costs import TIR_CALLS


@dataclass(frozen=True)
class CostSnapshot:
    """Static costs of one function at one point of a pipeline; `error` says why they could not be taken."""

    flops: int = 0
    macs: int = 0
    bytes_read: int = 0
    bytes_written: int = 0
    peak_activation_bytes: int = 0
    op_count: int = 0
    tir_calls: int = 0
    unsupported: int = 0
    error: str | None = None

    @classmethod
    def of(cls, mod, func_name: str = "main") -> CostSnapshot:
        from .analysis import analyze_graph

        try:
            a = analyze_graph(tvm_ir.extract(mod, func_name))
        except Exception as exc:  # noqa: BLE001 - a snapshot must never break the user's build
            return cls(error=f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"[:200])
        t = a.totals
        tir = sum(1 for op in a.graph.ops if op.op in TIR_CALLS and not op.folded)
        return cls(
            t.flops,
            t.macs,
            t.bytes_read,
            t.bytes_written,
            t.peak_activation_bytes,
            t.op_count,
            tir,
            sum(t.unsupported.values()),
        )


_DELTA_FIELDS = (
    "flops",
    "macs",
    "bytes_read",
    "bytes_written",
    "peak_activation_bytes",
    "op_count",
    "tir_calls",
    "unsupported",
)


@dataclass(frozen=True)
class PassRecord:
    """One pass of a pipeline: its name, nesting depth, and the costs before and after it."""

    name: str
    depth: int
    before: CostSnapshot
    after: CostSnapshot

    @property
    def delta(self) -> dict[str, int]:
        """after - before for every cost that changed (empty when the pass changed none, or a side failed)."""
        if self.before.error or self.after.error:
            return {}
        d = {f: getattr(self.after, f) - getattr(self.before, f) for f in _DELTA_FIELDS}
        return {k: v for k, v in d.items() if v}

    def to_json(self) -> dict:
        return {
            "pass": self.name,
            "depth": self.depth,
            "before": asdict(self.before),
            "after": asdict(self.after),
            "delta": self.delta,
        }


class _CostRecorder:
    """Records a `PassRecord` for every pass that runs (use `CostRecorder()`, the TVM instrument)."""

    def __init__(self, func_name: str = "main", only: tuple[str, ...] | None = None):
        self.func_name = func_name
        self.only = None if only is None else set(only)
        self.records: list[PassRecord] = []
        self._stack: list[CostSnapshot | None] = []
        self._last: tuple[object, CostSnapshot] | None = None
        self._busy = False  # taking a snapshot runs TVM passes (the TIR FLOP estimator): not the user's

    def _snapshot(self, mod) -> CostSnapshot:
        if self._last is not None and self._last[0].same_as(mod):
            return self._last[1]
        self._busy = True
        try:
            snap = CostSnapshot.of(mod, self.func_name)
        finally:
            self._busy = False
        self._last = (mod, snap)
        return snap

    def _wanted(self, mod, info) -> bool:
        """A pass named in `only` (all by default), on a module that has the function (TVM's inner builds,
        e.g. FoldConstant compiling a subgraph, run TIR-only modules through passes too: not recorded)."""
        return (self.only is None or tvm_ir.pass_name(info) in self.only) and self.func_name in tvm_ir.function_names(
            mod
        )

    def run_before_pass(self, mod, info) -> None:
        if self._busy:
            return
        self._stack.append(self._snapshot(mod) if self._wanted(mod, info) else None)

    def run_after_pass(self, mod, info) -> None:
        if self._busy:
            return
        before = self._stack.pop() if self._stack else None
        if before is not None:
            self.records.append(PassRecord(tvm_ir.pass_name(info), len(self._stack), before, self._snapshot(mod)))

    def to_json(self) -> list[dict]:
        return [r.to_json() for r in self.records]


CostRecorder = tvm_ir.pass_instrument(_CostRecorder)
CostRecorder.__doc__ = """TVM pass instrument: `CostRecorder(func_name="main", only=None)`.

Pass it to `tvm.transform.PassContext(instruments=[...])`; after the pipeline, `.records` holds one
`PassRecord` per pass (in the order the passes finished; `only` limits it to the named passes), with the
function's FLOPs, bytes, peak activation bytes, op and `call_tir` counts before and after the pass.
A side the analyser cannot read (e.g. symbolic shapes) has `error` set; the pipeline itself is never
interrupted."""
