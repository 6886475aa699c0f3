"""preflight inside a TVM compiler pipeline: annotate the IRModule with costs and a prediction, and record what
each pass did to the static costs.

    python examples/tvm_pipeline.py zoo:resnet18
"""

from __future__ import annotations

import sys

import tvm
from tvm import relax

import analyzer
from analyzer import AnnotateCosts, CostRecorder, read_annotation
from analyzer.render import predictor_label, render_pass_records


def main(argv: list[str] | None = None) -> int:
    model = (argv if argv is not None else sys.argv[1:] or ["zoo:resnet18"])[0]
    mod = analyzer.load(model).mod  # or any Relax IRModule with static shapes
    pipeline = tvm.transform.Sequential(
        [
            AnnotateCosts(device="h100-80gb"),  # costs of the graph as imported
            relax.transform.LegalizeOps(),
            relax.transform.AnnotateTIROpPattern(),
            relax.transform.FuseOps(),
            relax.transform.FuseTIR(),
        ]
    )
    recorder = CostRecorder()
    with tvm.transform.PassContext(opt_level=3, instruments=[recorder]):
        mod = pipeline(mod)
    p = read_annotation(mod)["prediction"]
    print(
        f"{model}: predicted {p['latency_ms']:.3g} ms, {p['memory_mib']:,.0f} MiB on {p['device']} "
        f"({predictor_label(p['predictor'])}); MIG: {p['mig']['profile']}"
    )
    print(render_pass_records(recorder.records))
    tvm.compile(mod, target="llvm")  # the annotated module builds as usual
    return 0


if __name__ == "__main__":
    sys.exit(main())
