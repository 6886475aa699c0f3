"""The `preflight` command line (docs/design.md: CLI). Errors are one or two lines on stderr with exit
code 1 (analysis failed) or 2 (bad usage or input); PREFLIGHT_DEBUG=1 shows the traceback."""

from __future__ import annotations

import json
import os
import sys
import warnings
from pathlib import Path

import click

from passes.graph import COMPUTE_DTYPES, FLOAT_DTYPES  # plain python: no TVM

from . import __version__
from .errors import PreflightError
from .frontends.specs import MAX_DIM

FORMATS = ("table", "json", "markdown", "html", "csv", "kernels-csv")
# Each subcommand imports the analyzer (TVM, torch: ~3 s) inside its function on purpose: `preflight --help`,
# `zoo` and `devices` must not pay for it.


class IntRange(click.IntRange):
    """click's IntRange, whose error for a word says "not a valid integer" (click's says "integer range")."""

    name = "integer"


class FloatRange(click.FloatRange):
    """click's FloatRange, whose error for a word says "not a valid number" (click's says "float range")."""

    name = "number"


def _print_version(ctx: click.Context) -> None:
    """`preflight --version`: the version and the stack (from package metadata: nothing heavy is imported)."""
    from .provenance import stack

    versions = ", ".join(f"{k} {v or 'not installed'}" for k, v in stack().items())
    click.echo(f"preflight {__version__} ({versions})")
    ctx.exit(0)


_STATE = {"quiet": False}  # the group's -q, set again on every invocation


def _quiet() -> bool:
    return _STATE["quiet"]


def _info(message: str) -> None:
    """A line of information on stderr (what was written, progress, the budget's verdict): -q silences it."""
    if not _quiet():
        click.echo(message, err=True)


def _debug() -> bool:
    return os.environ.get("PREFLIGHT_DEBUG", "") not in ("", "0")


class _Group(click.Group):
    """Turns preflight's errors into a short message and the exit code docs/design.md gives them."""

    def main(self, args=None, prog_name=None, complete_var=None, standalone_mode=True, **extra):
        """Like click's, but usage errors are one line (`error: ...`), not click's four-line block."""
        if not standalone_mode:
            return super().main(args, prog_name, complete_var, standalone_mode, **extra)
        try:
            rv = super().main(args, prog_name, complete_var, standalone_mode=False, **extra)
        except click.UsageError as exc:
            hint = f" (see '{exc.ctx.command_path} --help')" if exc.ctx is not None else ""
            click.echo(f"error: {exc.format_message()}{hint}", err=True)
            sys.exit(exc.exit_code)
        except click.ClickException as exc:
            exc.show()
            sys.exit(exc.exit_code)
        except click.exceptions.Abort:
            click.echo("Aborted!", err=True)
            sys.exit(1)
        sys.exit(rv if isinstance(rv, int) else 0)

    def invoke(self, ctx: click.Context):
        if not _debug():
            warnings.filterwarnings("ignore")
        try:
            return super().invoke(ctx)
        except PreflightError as exc:
            if _debug():
                raise
            click.echo(f"error: {exc}", err=True)
            ctx.exit(exc.exit_code)
        except (click.exceptions.Exit, click.exceptions.Abort, click.ClickException):
            raise
        except MemoryError:
            click.echo("error: out of memory while analysing the model", err=True)
            ctx.exit(1)
        except Exception as exc:  # never show a traceback to a user
            if _debug():
                raise
            first = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:300]
            click.echo(
                f"error: internal error ({type(exc).__name__}: {first}); rerun with PREFLIGHT_DEBUG=1 for a traceback",
                err=True,
            )
            ctx.exit(1)


@click.group(cls=_Group, context_settings={"help_option_names": ["-h", "--help"]})
@click.option(
    "--version",
    is_flag=True,
    expose_value=False,
    is_eager=True,
    callback=lambda ctx, _p, v: _print_version(ctx) if v else None,
    help="Show preflight's version and the library stack it runs on, and exit.",
)
@click.option(
    "--devices",
    "device_files",
    multiple=True,
    type=click.Path(dir_okay=False),
    metavar="FILE",
    help="A device file (preflight.devices/1: docs/devices.md) adding GPUs to the built-in ones. Repeatable; "
    "also $PREFLIGHT_DEVICES and ~/.config/preflight/devices.json.",
)
@click.option(
    "--predictor",
    type=click.Choice(("auto", "kernel", "public")),
    default=None,
    help="Whole-model predictor: auto (default: the GraphSAGE trained on public A100 and own H100 measurements on "
    "the GPUs where its held-out evaluation passed, the kernel model elsewhere), kernel (the kernel model) or public "
    "(the GraphSAGE on every GPU it was measured on); docs/predictor-training.md. Also $PREFLIGHT_PREDICTOR.",
)
@click.option("-q", "--quiet", is_flag=True, help="No progress or 'wrote' lines: the result, its warnings and errors.")
@click.option("-v", "--verbose", is_flag=True, help="Also show the libraries' own warnings (torch, transformers, TVM).")
def cli(device_files: tuple[str, ...], predictor: str | None, quiet: bool, verbose: bool) -> None:
    """preflight: what a model will cost on a data-centre GPU, without running it."""
    _STATE["quiet"] = quiet
    if predictor is not None:  # read where predictions are made (analyze-many's workers inherit it)
        os.environ["PREFLIGHT_PREDICTOR"] = predictor
    if verbose:
        warnings.resetwarnings()  # the libraries' own warnings, which preflight hides by default
    try:
        from predictor.devices import DEVICES_ENV, DeviceFileError, add_device_file
    except ValueError as exc:  # a bad $PREFLIGHT_DEVICES or config file, read at import (DeviceFileError)
        raise click.UsageError(str(exc)) from None
    try:
        for path in device_files:
            add_device_file(path)
    except DeviceFileError as exc:
        raise click.UsageError(str(exc)) from None
    if device_files:  # worker processes (analyze-many) read the same files
        os.environ[DEVICES_ENV] = os.pathsep.join(
            [*filter(None, os.environ.get(DEVICES_ENV, "").split(os.pathsep)), *map(os.path.abspath, device_files)]
        )


def _emit(text: str, output: str | None) -> None:
    if output:
        try:
            with open(output, "w", encoding="utf-8") as f:
                f.write(text)
        except OSError as exc:
            from .errors import UsageError

            raise UsageError(f"cannot write {output}: {exc.strerror}") from exc
        _info(f"wrote {output}")
    else:
        click.echo(text, nl=False)


def format_options(f):
    """--format and -o, shared by analyze and predict: the format follows -o's suffix unless --format names one."""
    f = click.option(
        "-o",
        "--output",
        type=click.Path(dir_okay=False, writable=True),
        default=None,
        callback=_output_ok,
        help="Write to FILE instead of stdout (.json, .md, .html or .csv: in that format, unless --format says).",
    )(f)
    return click.option(
        "--format",
        "fmt",
        type=click.Choice(FORMATS),
        default=None,
        help="Output format (default: from -o's suffix, else table; html is the pre-deployment page; csv: one row "
        "per operator, kernels-csv: one row per CUDA kernel).",
    )(f)


def _format(fmt: str | None, output: str | None) -> str:
    """The output format: `fmt`, else the one -o's suffix names (.json, .md, .markdown, .html, .htm), else table."""
    if fmt is not None:
        return fmt
    if not output:
        return "table"
    from .predeploy import FORMATS as BY_SUFFIX  # the report writer's module: imported only when -o names a file

    return {**BY_SUFFIX, ".csv": "csv"}.get(Path(output).suffix.lower(), "table")


def _output_ok(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    """-o FILE is checked before the analysis starts: its folder exists and is writable, and it is no folder."""
    if value is not None:
        from .predeploy import check_writable

        check_writable(value)
    return value


def explain_option(f):
    """--explain (and --by-module), shared by analyze and predict."""
    f = click.option(
        "--by-module",
        "by_module",
        type=IntRange(min=0, max=8),
        default=0,
        metavar="DEPTH",
        help="Also list the costliest modules at this depth of the module path (1: layer4, 2: layer4.2); the JSON "
        "always has depths 1 and 2.",
    )(f)
    return click.option("--explain", is_flag=True, help="Add a footer saying what each row of the output means.")(f)


def _model_exists(ctx: click.Context, param: click.Parameter, value: str) -> str:
    """A MODEL path that does not exist is an error before anything heavy (TVM, torch: ~3 s) is imported."""
    from .errors import UnreadableModelError

    if not value.startswith("zoo:") and not os.path.lexists(value):
        raise UnreadableModelError(f"{value}: no such file or directory")
    return value


def budget_options(f):
    """--max-memory and --timeout: one budget for the whole analysis (analyzer.budget); past it, exit 3."""
    import functools

    from .budget import DEFAULT_MEMORY_GIB, DEFAULT_TIMEOUT_S

    @functools.wraps(f)
    def run_within_budget(*args, budget_memory_gib: float, budget_timeout_s: float, **kwargs):
        from passes import tvm_boot
        from passes._gc import cold_start

        from .budget import watch
        from .progress import progress

        if _is_the_program():
            tvm_boot.as_the_program()  # TVM imported without its device backends' hooks (passes.tvm_boot)
        model = str(kwargs.get("model", ""))
        # report and llm print their own progress (the sweep's bar, [llm] lines); analyze and predict get a line
        quiet = f.__name__ not in ("analyze", "predict") or _quiet()
        with (
            cold_start(enabled=_is_the_program()),  # the collector paused while torch and TVM are imported
            watch(model, budget_memory_gib, budget_timeout_s),
            progress(f"{f.__name__}: {model}", enabled=not quiet),
        ):
            return f(*args, **kwargs)

    g = click.option(
        "--timeout",
        "budget_timeout_s",
        type=FloatRange(min=0),
        default=DEFAULT_TIMEOUT_S,
        show_default=True,
        metavar="S",
        help="Stop the analysis (exit 3) after S seconds (0: no limit).",
    )(run_within_budget)
    return click.option(
        "--max-memory",
        "budget_memory_gib",
        type=FloatRange(min=0),
        default=DEFAULT_MEMORY_GIB,
        show_default=True,
        metavar="GIB",
        help="Stop the analysis (exit 3) when preflight's own RAM use grows by more than GIB GiB (0: no limit). "
        "Not the model's GPU memory.",
    )(g)


def model_options(f):
    """Options shared by analyze / predict / report."""
    f = click.option(
        "--input",
        "inputs",
        multiple=True,
        metavar="NAME:DIMS[:DTYPE]",
        help="Shape (and dtype) of an input, e.g. x:8x3x224x224 or ids:1x128:int64. Repeatable.",
    )(f)
    f = click.option(
        "--batch", type=IntRange(min=1, max=MAX_DIM), default=None, help="Set dimension 0 of every input."
    )(f)
    f = click.option(
        "--dtype",
        type=click.Choice(COMPUTE_DTYPES),
        default=None,
        help="Analyse as if the model computed in this float dtype (what if I serve it in float16?: "
        "model.half()), or as it is under torch.autocast (amp-float16, amp-bfloat16: matmuls, convolutions and "
        "attention in 16 bits, norms and softmax in float32, weights cast every forward).",
    )(f)
    return f


@cli.command()
@click.argument("model", callback=_model_exists)
@model_options
@explain_option
@format_options
@click.option("--strict", is_flag=True, help="Fail (exit 4) if any operator has no cost rule.")
@click.option(
    "--top",
    type=IntRange(min=0),
    default=15,
    show_default=True,
    help="How many of the costliest operators the table and Markdown list.",
)
@click.option(
    "--symbolic",
    is_flag=True,
    help="Also give the totals and each operator's counts as exact formulas of the batch (zoo models: one export "
    "with the batch symbolic; .pt2, .onnx and Paddle files saved with a dynamic batch: their own dynamic dims, the "
    "others' values from --input; a transformers config.json: one export with the batch and the sequence length "
    "symbolic, at the --input's length; the rest of the output is at --batch, default the lowest batch the graph "
    "holds for: 2 for a re-export or an ONNX or Paddle file, 1 for a .pt2 file). Table and JSON. docs/symbolic.md.",
)
@budget_options
def analyze(
    model: str,
    inputs: tuple[str, ...],
    batch: int | None,
    dtype: str | None,
    fmt: str | None,
    output: str | None,
    strict: bool,
    top: int,
    explain: bool,
    by_module: int,
    symbolic: bool,
) -> None:
    """Count FLOPs, MACs, bytes and peak memory of MODEL, operator by operator.

    MODEL is a .onnx, .pt2 (torch.export.save), .keras or .tflite file, a TensorFlow SavedModel or Paddle
    inference directory (or its .json/.pdmodel file), a transformers config.json (or a model directory holding
    one; built with random weights on the meta device, nothing downloaded), or zoo:NAME[?key=value...] (see
    `preflight zoo`).
    """
    from .api import analyze as run

    fmt = _format(fmt, output)
    if symbolic and fmt not in ("table", "json"):
        from .errors import UsageError

        raise UsageError("--symbolic prints a table or JSON (--format table|json)")
    report = run(model, inputs=list(inputs), batch=batch, strict=strict, dtype=dtype, symbolic=symbolic)
    text = _render(report, fmt, top, explain, by_module)
    if symbolic and fmt == "table":
        from .symbolic import formulas_text

        text += "\n" + formulas_text(report.symbolic)
        low = report.symbolic["symbols"]["batch"]["min"]
        shown = report.inputs[0]["shape"][:1] if report.inputs and report.inputs[0]["shape"] else []
        if batch is None and low != 1 and shown == [low]:  # the export's lowest batch, not a plain analyze's: say so
            text += (
                "(the table above is at the batch its inputs line shows: --symbolic analyses at --batch, default "
                f"{low}, the lowest the symbolic export holds for)\n"
            )
    _emit(text, output)


MATMUL_PRECISIONS = ("highest", "high", "medium")  # predictor.kernel_model.MATMUL_PRECISIONS (not imported here)


def matmul_precision_option(f):
    """--matmul-precision, shared by predict, report, llm and analyze-many."""
    return click.option(
        "--matmul-precision",
        type=click.Choice(MATMUL_PRECISIONS),
        default="highest",
        show_default=True,
        help="torch.set_float32_matmul_precision where the model runs: highest (torch's default: float32 matmuls "
        "on FP32 CUDA cores), high or medium (float32 matmuls on TF32 tensor cores, as NVIDIA's containers run "
        "them; medium's bfloat16 path is CPU-only, so on a GPU it is high). Only float32 matmuls move: no effect "
        "with --dtype float16/bfloat16, on convolutions (TF32 already) or on fused attention.",
    )(f)


def _host_overhead(ctx, param, value: float) -> float:
    """--host-overhead: positive and finite (click's float takes "inf" and "nan")."""
    from .errors import UsageError
    from .options import check_host_overhead

    try:
        return check_host_overhead(value)
    except UsageError as exc:
        raise click.BadParameter(f"a positive finite number is needed (got {value!r})") from exc


def host_overhead_option(f):
    """--host-overhead, shared by predict, report, analyze-many and llm (eager runtime)."""
    return click.option(
        "--host-overhead",
        type=float,
        default=1.0,
        show_default=True,
        metavar="X",
        callback=_host_overhead,
        help="The host's dispatch time per kernel as a multiple of preflight's launch floor (the kernel model's "
        "fitted per-kernel launch time): 1 is the host it was fitted on; on a slower host (older torch, busy or "
        "slow CPU) give more, e.g. 2.35 for a host like the public MIG measurements' (docs/devices.md). Scales the "
        "launch-bound part of the latency, on the whole GPU and on each MIG slice, and the energy with it; "
        "small-batch models are mostly launch-bound. Not 1: the kernel-model estimate answers.",
    )(f)


def _one_device(ctx: click.Context, param: click.Parameter, value: tuple[str, ...], hint: str) -> str:
    """A --device that names one GPU, declared repeatable so that naming two is a usage error (click keeps the last
    of a non-repeatable option silently)."""
    if len(value) > 1:
        raise click.BadParameter(f"takes one GPU, got {len(value)} ({', '.join(value)}): {hint}", ctx, param)
    return value[0]


def one_device_option(hint: str, help: str):
    """--device naming one GPU (default the H100), a second one a usage error that says `hint`."""
    return click.option(
        "--device",
        multiple=True,
        default=("h100-80gb",),
        show_default=True,
        callback=lambda ctx, param, value: _one_device(ctx, param, value, hint),
        help=help,
    )


def max_slowdown_option(f):
    """--max-slowdown, shared by predict and report."""
    return click.option(
        "--max-slowdown",
        type=FloatRange(min=1),
        default=None,
        metavar="X",
        help="Also name the smallest MIG slice whose predicted latency is at most X times the whole GPU's (e.g. 2).",
    )(f)


@cli.command()
@click.argument("model", callback=_model_exists)
@model_options
@matmul_precision_option
@host_overhead_option
@max_slowdown_option
@explain_option
@one_device_option("`preflight report` compares several", "Target GPU (see `preflight devices`).")
@click.option(
    "--latency-slo",
    "latency_slo",
    type=FloatRange(min=0, min_open=True),
    default=None,
    metavar="MS",
    help="The MIG slice must also meet this latency (with --largest-batch: the largest batch within it, too).",
)
@format_options
@click.option("--strict", is_flag=True, help="Fail (exit 4) if any operator has no cost rule.")
@click.option(
    "--top",
    type=IntRange(min=0),
    default=15,
    show_default=True,
    help="How many of the costliest operators the table and Markdown list (0: none).",
)
@click.option(
    "--max-latency-ms",
    "max_latency",
    type=FloatRange(min=0, min_open=True),
    default=None,
    metavar="MS",
    help="Budget: exit 4 if the predicted latency exceeds MS.",
)
@click.option(
    "--max-memory-mb",
    "max_memory",
    type=FloatRange(min=0, min_open=True),
    default=None,
    metavar="MIB",
    help="Budget: exit 4 if the predicted device memory exceeds MIB.",
)
@click.option(
    "--budget-bound",
    type=click.Choice(("point", "upper")),
    default="point",
    show_default=True,
    help="Compare the budget with the point prediction or the upper end of its interval.",
)
@click.option(
    "--largest-batch",
    is_flag=True,
    help="Also solve for the largest batch whose predicted memory fits each MIG slice and the whole GPU (zoo "
    "models and transformers config.json files: one more export, with the batch symbolic; .pt2, .onnx and Paddle "
    "files with a dynamic batch: one more import). With --latency-slo, also the largest batch predicted within it on "
    "each. Table and JSON. "
    "docs/symbolic.md.",
)
@budget_options
def predict(
    model: str,
    inputs: tuple[str, ...],
    batch: int | None,
    dtype: str | None,
    device: str,
    latency_slo: float | None,
    fmt: str | None,
    output: str | None,
    strict: bool,
    top: int,
    max_latency: float | None,
    max_memory: float | None,
    budget_bound: str,
    max_slowdown: float | None,
    explain: bool,
    by_module: int,
    matmul_precision: str,
    host_overhead: float,
    largest_batch: bool,
) -> None:
    """Predict latency, energy, memory and the MIG slice of MODEL on a GPU (MODEL as for `preflight analyze`).

    With --max-latency-ms / --max-memory-mb it is a pre-deployment gate: the report (its JSON with a `verdict`
    block) is printed as usual, then it exits 4 with the reason if the prediction breaks the budget.
    """
    from .api import budget_verdict
    from .api import predict as run
    from .errors import EXIT_GATE

    report = run(
        model,
        inputs=list(inputs),
        batch=batch,
        strict=strict,
        device=device,
        latency_slo_ms=latency_slo,
        max_slowdown=max_slowdown,
        dtype=dtype,
        matmul_precision=matmul_precision,
        host_overhead=host_overhead,
        largest_batch=largest_batch,
    )
    gated = max_latency is not None or max_memory is not None
    if gated:
        report.verdict = budget_verdict(
            report, max_latency_ms=max_latency, max_memory_mb=max_memory, bound=budget_bound
        )
    _emit(_render(report, _format(fmt, output), top, explain, by_module), output)
    if gated and not report.verdict.passed:
        for reason in report.verdict.reasons:
            click.echo(f"budget exceeded: {reason}", err=True)
        sys.exit(EXIT_GATE)
    if gated:
        _info("within budget")


#: calibrate-host warns above this factor, and of a forward the kernel model predicts GPU-bound measured this many
#: times its prediction (docs/devices.md, "Calibrating the host").
PLAUSIBLE_HOST_OVERHEAD = 10.0
GPU_BOUND_FAR = 1.5


@cli.command("calibrate-host")
@click.argument("model", callback=_model_exists)
@model_options
@matmul_precision_option
@click.option(
    "--measured-ms",
    "measured_ms",
    type=FloatRange(min=0, min_open=True, max=1e9),
    required=True,
    metavar="MS",
    help="The latency of one eager forward of MODEL (as given: batch, dtype) you timed on your machine, in ms "
    "(CUDA events or synchronised wall clock, warm, median).",
)
@one_device_option("calibrate on the GPU you timed", "The whole GPU the measurement ran on (see `preflight devices`).")
@click.option(
    "--format", "fmt", type=click.Choice(("table", "json")), default="table", show_default=True, help="Output format."
)
def calibrate_host(
    model: str,
    inputs: tuple[str, ...],
    batch: int | None,
    dtype: str | None,
    matmul_precision: str,
    measured_ms: float,
    device: str,
    fmt: str,
) -> None:
    """The --host-overhead of your machine, from one forward of MODEL you timed on it.

    A small-batch eager forward is mostly the host's dispatch (Python, torch, the CUDA launch per kernel), which
    depends on the CPU and the software, not on the GPU. This finds the factor at which preflight's kernel model
    gives your measurement; pass it as --host-overhead to predict, report, analyze-many and llm on that machine.
    Time a small batch (the host should set at least half of the forward).
    """
    from predictor.devices import get_device

    from .api import calibrate_host as run

    report, fit = run(
        model, measured_ms, inputs=list(inputs), batch=batch, dtype=dtype, device=device,
        matmul_precision=matmul_precision,
    )  # fmt: skip
    name = report.model.get("name") or model
    fit_device = get_device(device).key  # an alias resolved (the API checked it)
    cautions = host_cautions(fit)
    if fmt == "json":
        doc = {
            "schema": "preflight.host_calibration/1",
            "model": report.model,
            "inputs": report.inputs,
            "device": fit_device,
            "matmul_precision": matmul_precision,
            "measured_ms": fit.measured_ms,
            "host_overhead": float(f"{fit.host_overhead:.6g}"),
            "determined": fit.determined,
            "host_share": fit.host_share,
            "kernel_model": {
                "execution_ms": fit.gpu_ms,
                "launch_floor_sum_ms": fit.floor_ms,
                "latency_ms": fit.default_ms,
                "at_launch_floor_ms": fit.default_floor_ms,
            },
            "warnings": cautions,
        }
        click.echo(json.dumps(doc, indent=2))
        return
    click.echo(f"{name} on {fit_device}: measured {fit.measured_ms:.4g} ms per forward")
    click.echo(f"  kernels' execution alone        {fit.gpu_ms:.4g} ms")
    click.echo(f"  kernel model at factor 1        {fit.default_ms:.4g} ms")
    click.echo(f"  host factor                     {fit.host_overhead:.3g}")
    click.echo(f"  set by the host's dispatch      {fit.host_share:.0%} of the measured time (kernels at their floor)")
    for caution in cautions:
        click.echo(caution, err=True)
    if fit.determined:
        click.echo(
            f"Use --host-overhead {fit.host_overhead:.3g} with predict, report, analyze-many and llm (eager runtime; "
            "the vllm runtime's host time is its --engine-profile) on this host."
        )
    else:
        click.echo("Not determined by this forward: time one the host sets most of (a smaller batch or model).")


def host_cautions(fit) -> list[str]:
    """What `calibrate-host` warns of for a `predictor.predict.HostFit` (docs/devices.md, "Calibrating the host")."""
    out = []
    if not fit.determined:
        out.append(
            f"the host sets only {fit.host_share:.0%} of this forward at the solution: the factor is not determined "
            "(an error in the kernels' predicted execution moves it far); time a forward the host sets most of: a "
            "smaller batch, or a smaller model"
        )
    if fit.default_floor_ms < fit.default_ms / 2 and fit.measured_ms > GPU_BOUND_FAR * fit.default_ms:
        out.append(
            f"at factor 1 the kernel model predicts this forward GPU-bound ({fit.default_floor_ms:.3g} of "
            f"{fit.default_ms:.3g} ms at the launch floor) and the measurement is "
            f"{fit.measured_ms / fit.default_ms:.2g}x that: the GPU side more likely differs (another GPU, clocks, "
            "dtype) than the host"
        )
    if fit.host_overhead > PLAUSIBLE_HOST_OVERHEAD:
        out.append(
            f"a factor above {PLAUSIBLE_HOST_OVERHEAD:g} is slower than any host measured (the public MIG "
            "measurements' 2022 host: 2.35): check the GPU, the batch and dtype, and that the timing was warm and "
            "synchronised"
        )
    return out


@cli.command()
@click.argument("model", callback=_model_exists)
@model_options
@matmul_precision_option
@host_overhead_option
@click.option(
    "--device",
    "devices",
    multiple=True,
    default=("h100-80gb",),
    show_default=True,
    help="Target GPU (see `preflight devices`). Repeatable.",
)
@click.option(
    "-o",
    "--output",
    type=click.Path(dir_okay=False, writable=True),
    required=True,
    help="report.html (self-contained page), report.md (charts as SVG files in report_files/) or "
    "report.json (preflight.report/1 with a sweep block).",
)
@click.option(
    "--max-batch",
    type=IntRange(min=1, max=MAX_DIM),
    default=None,
    metavar="N",
    help="Sweep batch sizes 1, 2, 4, ... up to N (default 32).",
)
@click.option("--batches", default=None, metavar="LIST", help="Sweep exactly these batch sizes, e.g. 1,8,32.")
@click.option("--no-sweep", is_flag=True, help="Skip the batch-size sweep.")
@click.option(
    "--latency-slo",
    "latency_slo",
    type=FloatRange(min=0, min_open=True),
    default=None,
    metavar="MS",
    help="The MIG slice (and the sweep's largest batch) must also meet this latency.",
)
@max_slowdown_option
@click.option("--strict", is_flag=True, help="Fail (exit 4) if any operator has no cost rule.")
@click.option(
    "--top",
    type=IntRange(min=0),
    default=15,
    show_default=True,
    help="How many of the costliest operators to list.",
)
@budget_options
def report(
    model: str,
    inputs: tuple[str, ...],
    batch: int | None,
    dtype: str | None,
    devices: tuple[str, ...],
    output: str,
    max_batch: int | None,
    batches: str | None,
    no_sweep: bool,
    latency_slo: float | None,
    max_slowdown: float | None,
    strict: bool,
    top: int,
    matmul_precision: str,
    host_overhead: float,
) -> None:
    """Write a pre-deployment report of MODEL: predictions per device, a batch-size sweep, where the cost is.

    MODEL as for `preflight analyze`.
    """
    from .api import check_devices
    from .api import report as run
    from .predeploy import check_output
    from .sweep import DEFAULT_MAX_BATCH, batch_points, parse_batches

    check_output(output)
    devices = check_devices(devices)
    if sum((no_sweep, batches is not None, max_batch is not None)) > 1:
        raise click.UsageError("give one of --batches, --max-batch and --no-sweep, not several")
    if no_sweep:
        sweep = []
    elif batches is not None:
        sweep = parse_batches(batches)
    else:
        sweep = batch_points(max_batch or DEFAULT_MAX_BATCH)
    args = dict(
        inputs=list(inputs),
        batch=batch,
        devices=devices,
        batches=sweep,
        latency_slo_ms=latency_slo,
        max_slowdown=max_slowdown,
        dtype=dtype,
        matmul_precision=matmul_precision,
        host_overhead=host_overhead,
        strict=strict,
        output=output,
        top=top,
    )
    if sweep and sys.stderr.isatty():
        with click.progressbar(length=len(sweep), label="batch sweep", file=sys.stderr) as bar:
            rep = run(model, progress=bar.update, **args)
    elif sweep:  # no bar where nobody watches it redraw (a log, CI): one line saying what runs, once it runs
        said: list[bool] = []  # (not before: a model that fails to load says its error alone)

        def announce(_: int) -> None:
            if not said:
                said.append(True)
                _info(f"batch sweep: {len(sweep)} batch sizes ({', '.join(map(str, sweep))})")

        rep = run(model, progress=announce, **args)
    else:
        rep = run(model, **args)
    for w in rep.warnings:  # also in the report; said here so that a choice made for the user is seen
        click.echo(f"warning: {w}", err=True)
    _info(f"wrote {output}")


@cli.command()
@click.argument("model", callback=_model_exists)
@click.option("--prompt", type=IntRange(min=1, max=MAX_DIM), default=1024, show_default=True, help="Prompt tokens.")
@click.option("--generate", type=IntRange(min=1, max=MAX_DIM), default=256, show_default=True, help="Tokens generated.")
@click.option(
    "--batch", type=IntRange(min=1, max=MAX_DIM), default=1, show_default=True, help="Sequences served together."
)
@click.option(
    "--device",
    "devices",
    multiple=True,
    default=("h100-80gb",),
    show_default=True,
    help="Target GPU (see `preflight devices`). Repeatable.",
)
@click.option(
    "--dtype",
    type=click.Choice(FLOAT_DTYPES),
    default=None,
    help="Serving dtype of weights, activations and KV cache (default: the model's declared dtype, else float16).",
)
@click.option(
    "--concurrency",
    type=IntRange(min=1, max=MAX_DIM),
    default=None,
    help="Sequences for the MIG recommendation (default: --batch).",
)
@click.option(
    "--context",
    type=IntRange(min=2, max=MAX_DIM),
    default=None,
    help="Their cache length in tokens for the MIG recommendation (default: prompt + generate).",
)
@click.option(
    "--ttft-ms",
    type=FloatRange(min=0, min_open=True),
    default=None,
    metavar="MS",
    help="The recommended slice must also predict at most this time to first token.",
)
@click.option(
    "--tpot-ms",
    type=FloatRange(min=0, min_open=True),
    default=None,
    metavar="MS",
    help="The recommended slice must also predict at most this time per output token.",
)
@click.option(
    "--contexts",
    default=None,
    metavar="LIST",
    help="Contexts of the latency sweep and capacity table, e.g. 1024,4096,32768 (default: powers of two).",
)
@click.option("--full-depth", is_flag=True, help="Trace every layer (per-operator list; slower) even when identical.")
@click.option(
    "--runtime",
    type=click.Choice(("eager", "vllm")),
    default="eager",
    show_default=True,
    help="eager: transformers, static cache; vllm: a serving engine (CUDA graphs, continuous batching, paged KV).",
)
@click.option("--tensor-parallel", type=int, default=1, show_default=True, help="GPUs per model (--runtime vllm).")
@click.option(
    "--gpu-memory-utilization", type=float, default=0.9, show_default=True, help="Engine's share of GPU memory (vllm)."
)
@click.option("--block-size", type=int, default=16, show_default=True, help="Tokens per KV-cache block (vllm).")
@matmul_precision_option
@host_overhead_option
@click.option(
    "--engine-profile",
    default=None,
    metavar="NAME|FILE",
    help="vllm: the engine's host time per step: vllm-overlapped (default), vllm-0.5.4, or a profile .json file.",
)
@click.option(
    "--max-num-batched-tokens",
    type=IntRange(min=0, max=MAX_DIM),
    default=None,
    metavar="N",
    help="vllm: chunked prefill's token budget per step (0: none; default: the engine profile's, vLLM's default).",
)
@click.option(
    "--format",
    "fmt",
    type=click.Choice(("table", "json", "markdown")),
    default="table",
    show_default=True,
    help="Format on stdout (-o takes its format from its suffix).",
)
@click.option(
    "-o",
    "--output",
    type=click.Path(dir_okay=False, writable=True),
    default=None,
    help="Write the report to report.html, report.md (charts in report_files/) or report.json instead of stdout.",
)
@budget_options
def llm(
    model: str,
    prompt: int,
    generate: int,
    batch: int,
    devices: tuple[str, ...],
    dtype: str | None,
    concurrency: int | None,
    context: int | None,
    ttft_ms: float | None,
    tpot_ms: float | None,
    contexts: str | None,
    full_depth: bool,
    runtime: str,
    tensor_parallel: int,
    gpu_memory_utilization: float,
    block_size: int,
    engine_profile: str | None,
    max_num_batched_tokens: int | None,
    fmt: str,
    output: str | None,
    matmul_precision: str,
    host_overhead: float,
) -> None:
    """Serve a decoder LM: KV cache, TTFT/TPOT, and how many sequences each GPU and MIG slice holds.

    MODEL is zoo:NAME (the llama, mistral, gpt2 and opt families), a transformers config.json of a decoder LM
    (Qwen2, Gemma, Phi, ... as transformers builds them), or a model
    directory holding one (no weights needed, nothing downloaded, no custom code run). The model is analysed as
    a prefill graph (batch x prompt tokens) and a decode-step graph (batch x 1 token over a static KV cache).
    """
    os.environ.setdefault("HF_HUB_OFFLINE", "1")  # before transformers is imported: it never goes to the network
    from .llm import llm as run
    from .llm import parse_contexts
    from .predeploy import check_output, write

    if output is not None:
        check_output(output)
    grid = None if contexts is None else parse_contexts(contexts)
    rep = run(
        model,
        prompt=prompt,
        generate=generate,
        batch=batch,
        devices=devices,
        dtype=dtype,
        concurrency=concurrency,
        context=context,
        ttft_ms=ttft_ms,
        tpot_ms=tpot_ms,
        contexts=grid,
        full_depth=full_depth,
        log=lambda m: _info(f"[llm] {m}"),
        runtime=runtime,
        tensor_parallel=tensor_parallel,
        gpu_memory_utilization=gpu_memory_utilization,
        block_size=block_size,
        matmul_precision=matmul_precision,
        host_overhead=host_overhead,
        engine_profile=engine_profile,
        max_num_batched_tokens=max_num_batched_tokens,
    )
    if output is not None:
        write(rep, output)
        _info(f"wrote {output}")
        return
    _emit(_render_llm(rep, fmt), None)


def _render_llm(report, fmt: str) -> str:
    from .predeploy import sections
    from .render import Figure, markdown_page, sections_text

    if fmt == "json":
        return json.dumps(report.to_json(), indent=2) + "\n"
    title, secs = sections(report)
    for s in secs:
        s.blocks = [b for b in s.blocks if not isinstance(b, Figure)]
    if fmt == "markdown":
        return markdown_page(title, secs)[0] + "\n"
    return sections_text(title, secs)


def _render(report, fmt: str, top: int, explain: bool = False, by_module: int = 0) -> str:
    from .render import render_csv, render_markdown, render_table

    if fmt in ("csv", "kernels-csv"):
        return render_csv(report, "ops" if fmt == "csv" else "kernels")
    if fmt == "json":
        return json.dumps(report.to_json(), indent=2) + "\n"
    if fmt == "markdown":
        return render_markdown(report, top, explain)
    if fmt == "html":
        from .predeploy import render_html

        return render_html(report, top)
    return render_table(report, top, explain, by_module)


@cli.command()
@click.option(
    "--format", "fmt", type=click.Choice(("table", "json")), default="table", show_default=True, help="Output format."
)
def zoo(fmt: str) -> None:
    """List the built-in models usable as MODEL = zoo:NAME[?key=value...]."""
    import zoo as z

    families = z.list_families()
    if fmt == "json":
        doc = [
            {
                "family": f.name,
                "kind": f.kind,
                "params": dict(f.params),
                "variants": sorted(f.variants),
                "description": f.description,
            }
            for f in families
        ]
        click.echo(json.dumps(doc, indent=2))
        return
    for f in families:
        params = ", ".join(f"{k}={v}" for k, v in f.params.items())
        click.echo(f"{f.name:<16} {f.kind:<19} {params}")
        if f.variants:
            click.echo(f"{'':<16} variants: {', '.join(sorted(f.variants))}")
    click.echo(f"\n{len(families)} families. Use zoo:NAME or zoo:FAMILY?key=value, e.g. zoo:resnet?depth=34")


@cli.command()
@click.option(
    "--format", "fmt", type=click.Choice(("table", "json")), default="table", show_default=True, help="Output format."
)
@click.option("--show", "show", default=None, metavar="NAME", help="Print one GPU (key or alias) in full.")
def devices(fmt: str, show: str | None) -> None:
    """List the known GPUs: peak rates, bandwidth, memory and MIG profiles (usable memory).

    Built-in GPUs live in predictor/devices.json; add your own with `preflight --devices FILE devices` (the same
    preflight.devices/1 layout; docs/devices.md).
    """
    from predictor.devices import DEVICES, UnknownDeviceError, device_json, get_device

    if show is not None:
        try:
            d = get_device(show)
        except UnknownDeviceError as exc:
            raise click.UsageError(str(exc)) from None
        click.echo(json.dumps(device_json(d), indent=2))
        return
    if fmt == "json":
        # one object per GPU as in a preflight.devices/1 file, plus the older "device" key (= "key")
        doc = [{"device": d.key} | device_json(d) for d in DEVICES.values()]
        click.echo(json.dumps(doc, indent=2))
        return
    for d in DEVICES.values():
        rates = ", ".join(f"{k} {v / 1e12:g}" + (" (TOPS)" if k == "int8" else "") for k, v in d.peak_flops.items())
        click.echo(
            f"{d.key:<14} {d.name}: {d.memory_mib / 1024:.1f} GiB, {d.bandwidth / 1e12:.2f} TB/s, "
            f"{d.sms} SMs, {d.tdp_w:g} W; dense TFLOP/s {rates}"
        )
        mig = ", ".join(f"{p.name} {p.memory_mib / 1024:.2f} GiB/{p.sms} SMs{'' if p.measured else '*'}" for p in d.mig)
        click.echo(f"{'':<14} MIG: {mig or 'none (no MIG profiles)'}")
        if d.aliases:
            click.echo(f"{'':<14} also named: {', '.join(d.aliases)}")
    click.echo(
        "\n* derived lower bound of usable memory (no published nvidia-smi mig -lgip output); see predictor/devices.py"
        "\nA MIG slice is a --device of its own: DEVICE:PROFILE, e.g. h100-80gb:3g.40gb"
    )


@cli.command("analyze-many")
@click.argument("manifest", type=click.Path(exists=True))
@click.option(
    "-o",
    "--output",
    type=click.Path(dir_okay=False),
    required=True,
    help="Results file: JSON Lines, one row per model, written as each finishes.",
)
@click.option(
    "--device",
    "devices",
    multiple=True,
    default=("h100-80gb",),
    show_default=True,
    help="Target GPU for the models whose manifest row names none (see `preflight devices`). Repeatable.",
)
@click.option(
    "--batch",
    type=IntRange(min=1, max=MAX_DIM),
    default=None,
    help="Set dimension 0 of every input, for the models whose manifest row names no batch.",
)
@click.option(
    "--dtype",
    type=click.Choice(FLOAT_DTYPES),
    default=None,
    help="Analyse as if computed in this float dtype, for the models whose manifest row names none.",
)
@matmul_precision_option
@host_overhead_option
@click.option(
    "--workers",
    type=IntRange(min=1),
    default=None,
    help="Worker processes (default: this machine's cores; with --address, the cluster's CPUs).",
)
@click.option(
    "--address",
    default=None,
    metavar="ADDR",
    help="Join a running Ray cluster (auto, HOST:PORT or ray://HOST:PORT) instead of starting a local one.",
)
@click.option("--resume", is_flag=True, help="Continue OUTPUT: run only the models it has no row for.")
@click.option(
    "--timeout",
    "timeout_s",
    type=FloatRange(min=0, min_open=True),
    default=600,
    show_default=True,
    metavar="S",
    help="Per-model time limit in seconds (the model's worker is then replaced).",
)
@click.option(
    "--memory-mb",
    type=IntRange(min=64),
    default=8192,
    show_default=True,
    metavar="MIB",
    help="Per-model memory cap: the address space a model may add to its worker, in MiB.",
)
@click.option(
    "--fail-on-error",
    is_flag=True,
    help="Exit 1 when any model of the results file failed (for CI; the rows and the summary are written first).",
)
def analyze_many(
    manifest,
    output,
    devices,
    batch,
    dtype,
    matmul_precision,
    host_overhead,
    workers,
    address,
    resume,
    timeout_s,
    memory_mb,
    fail_on_error,
) -> None:
    """Analyse every model of MANIFEST on Ray workers and predict it on each --device.

    MANIFEST is a directory (every model file preflight reads, found recursively), a text file with one
    MODEL per line, or a JSONL file of rows {"model": ..., "inputs": [...], "batch": N, "dtype": ...,
    "devices": [...], "matmul_precision": ..., "host_overhead": ...}; --device, --batch, --dtype, --matmul-precision
    and --host-overhead apply where a row names none. Progress goes to stderr,
    a summary to stdout. Exits 0 when the job ran, whatever single models did (each row says; with
    --fail-on-error 1 when any failed), and 2 for a bad manifest.
    """
    from .batch import analyze_many as run

    summary = run(
        manifest,
        output,
        devices=devices,
        batch=batch,
        dtype=dtype,
        matmul_precision=matmul_precision,
        host_overhead=host_overhead,
        workers=workers,
        address=address,
        resume=resume,
        timeout_s=timeout_s,
        memory_mb=memory_mb,
        progress=sys.stderr,
    )
    click.echo(summary.text(), nl=False)
    failed = len(summary.rows) - len(summary.ok)
    if fail_on_error and failed:
        from .errors import EXIT_FAILED

        click.echo(f"error: {failed} of {len(summary.rows)} models failed (--fail-on-error)", err=True)
        sys.exit(EXIT_FAILED)


def _samples(data: tuple[str, ...], device: str, cache: str):
    from predictor.data import load_samples, measurements

    from .dataset import build_cache

    records = measurements(data, device)
    if not records:
        from .errors import UsageError

        raise UsageError(f"no measurement records for device {device!r} in {', '.join(data)}")
    graphs = build_cache(records, cache, log=lambda m: click.echo(m, err=True))
    samples = load_samples(records, graphs)
    if len(samples) < 10:
        from .errors import AnalysisError

        raise AnalysisError(f"only {len(samples)} successful measurements for {device}: too few to train on")
    return records, samples


def _train_options(f):
    f = click.argument("data", nargs=-1, required=True, type=click.Path(exists=True))(f)
    f = click.option(
        "--device",
        required=True,
        multiple=True,
        callback=lambda ctx, param, value: _one_device(ctx, param, value, "one model per GPU"),
        help="Device key of the records to use (e.g. h100-80gb).",
    )(f)
    f = click.option("--epochs", type=IntRange(min=1), default=300, show_default=True)(f)
    f = click.option("--seed", type=int, default=0, show_default=True)(f)
    f = click.option("--cache", default="cache/graphs", show_default=True, help="Graph cache directory.")(f)
    f = click.option(
        "--calibration",
        type=click.Choice(("random", "family")),
        default="random",
        show_default=True,
        help="Hold out random configurations or whole families to calibrate the 90% interval.",
    )(f)
    return f


@cli.command()
@_train_options
@click.option(
    "-o",
    "--output",
    type=click.Path(dir_okay=False, writable=True),
    default=None,
    help="Write the table to FILE instead of stdout.",
)
def evaluate(data, device, epochs, seed, cache, calibration, output) -> None:
    """Evaluation table for the --device's measurements in DATA: random and leave-family-out splits, against
    baselines."""
    from predictor.evaluate import evaluate as run
    from predictor.evaluate import table_markdown
    from predictor.train import TrainConfig

    records, samples = _samples(data, device, cache)
    results = run(
        samples,
        TrainConfig(epochs=epochs, seed=seed, calibration_split=calibration),
        seed=seed,
        log=lambda m: click.echo(m, err=True),
    )
    _emit(
        table_markdown(
            results,
            f"Evaluation on {device}: {len(samples)} measured configurations, "
            f"{len({s.family for s in samples})} families",
        ),
        output,
    )


@cli.command()
@_train_options
@click.option(
    "--out",
    "out_dir",
    type=click.Path(file_okay=False),
    default=None,
    help="Artifact directory (default: predictor/checkpoints/<device>@<next version>).",
)
def train(data, device, epochs, seed, cache, calibration, out_dir) -> None:
    """Train the predictor for the --device on all its measurements in DATA and write the artifact with its
    evaluation table."""
    import datetime
    from pathlib import Path

    from predictor.data import data_hash
    from predictor.evaluate import evaluate as run
    from predictor.evaluate import summary, table_markdown
    from predictor.predict import CHECKPOINTS, find_artifact
    from predictor.train import TrainConfig, save
    from predictor.train import train as fit

    records, samples = _samples(data, device, cache)
    cfg = TrainConfig(epochs=epochs, seed=seed, calibration_split=calibration)
    log = lambda m: click.echo(m, err=True)  # noqa: E731
    if out_dir is None:
        last = find_artifact(device)
        version = int(last.name.rsplit("@", 1)[1]) + 1 if last else 1
        out_dir = CHECKPOINTS / f"{device}@{version}"
    out_dir = Path(out_dir)
    title = (
        f"Evaluation of {out_dir.name}: {len(samples)} measured configurations, "
        f"{len({s.family for s in samples})} families"
    )
    results = run(samples, cfg, seed=seed, log=log)
    table = table_markdown(results, title)
    trained = fit(samples, cfg=cfg, log=log)
    save(
        trained,
        out_dir,
        {
            "name": out_dir.name,
            "device": device,
            "data_hash": data_hash(records),
            "n_records": len(records),
            "n_samples": len(samples),
            "families": sorted({s.family for s in samples}),
            "epochs": epochs,
            "seed": seed,
            "created": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
            "evaluation": summary(results),
            "reproduce": f"preflight train {' '.join(data)} --device {device} --epochs {epochs} --seed {seed} "
            f"--calibration {calibration}",
        },
    )
    (out_dir / "EVAL.md").write_text(
        table + f"\nReproduce: `preflight train {' '.join(data)} --device {device} "
        f"--epochs {epochs} --seed {seed} --calibration {calibration}`\n"
    )
    click.echo(table)
    _info(f"wrote {out_dir}")


def _is_the_program() -> bool:
    """Whether this process is `preflight` itself (the console script, or `python -m analyzer.cli`), not a
    caller that imported `main` (a test, a script, `python -c`), which gets the usual SystemExit."""
    top = sys.modules.get("__main__")
    spec = getattr(top, "__spec__", None)
    return getattr(spec, "name", None) == "analyzer.cli" or Path(getattr(top, "__file__", "") or "").name == "preflight"


def _set_quiet(_ctx: click.Context, _param: click.Parameter, value: bool) -> None:
    if value:
        _STATE["quiet"] = True


def _set_verbose(_ctx: click.Context, _param: click.Parameter, value: bool) -> None:
    if value:
        warnings.resetwarnings()


def _flags_after_the_command(group: click.Group) -> None:
    """Accept the group's -q and -v after the subcommand too (`preflight predict M -q` as `preflight -q predict M`).

    Each subcommand gets its own copies; they run after the group's callback, so either place turns them on."""
    for cmd in group.commands.values():
        taken = {o for p in cmd.params for o in getattr(p, "opts", ())}
        if "-q" not in taken:
            cmd.params.append(
                click.Option(["-q", "--quiet"], is_flag=True, expose_value=False, callback=_set_quiet, hidden=True)
            )
        if "-v" not in taken:
            cmd.params.append(
                click.Option(["-v", "--verbose"], is_flag=True, expose_value=False, callback=_set_verbose, hidden=True)
            )


_flags_after_the_command(cli)


def _leave(code: int | None) -> None:
    """Exit with `code` once the atexit handlers have run and stdout/stderr are flushed, without the interpreter's
    teardown: after an analysis that teardown (freeing torch's, TVM's and sympy's modules and objects one by one,
    C++ static destructors) took 1.1 s of CPU, a fifth of a cold `analyze zoo:resnet50` (5.4 s of user+sys
    with it, 4.3 s without, /usr/bin/time, 3 runs each, 2026-11-26). Everything preflight writes is closed by then
    (`with` blocks, `write_text`); atexit handlers (the isolation zygotes, tempfile finalizers, logging) still run.
    Falls back to the ordinary exit if a non-daemon thread is still running or a stream cannot be flushed."""
    import atexit
    import threading

    others = [t for t in threading.enumerate() if t is not threading.main_thread() and not t.daemon]
    if any(t.is_alive() for t in others):
        sys.exit(code)
    atexit._run_exitfuncs()
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    except (OSError, ValueError):  # a closed pipe or stream: let the interpreter report it as it always does
        sys.exit(code)
    os._exit(0 if code is None else code)


def main() -> None:
    try:
        cli(prog_name="preflight")
    except SystemExit as exc:
        if (exc.code is None or isinstance(exc.code, int)) and _is_the_program():
            _leave(exc.code)
        raise


if __name__ == "__main__":
    sys.exit(main())
