"""Costs as formulas of the dynamic dimensions: one symbolic graph, a concrete graph at any point, exact polynomials.

A model exported with its batch left symbolic (`torch.export.Dim`) imports to Relax with a `tir.Var` in every
batch-sized dimension; `passes.tvm_ir.extract(..., symbolic=True)` turns each such dimension into an `Expr`
(a small tree of integer arithmetic over named symbols, built structurally from TVM's expression nodes: no
string is ever parsed or evaluated). From that one `SymbolicGraph`:

- `SymbolicGraph.at({"batch": 8})` is the plain `OpGraph` at a point: every dimension evaluated with Python
  integers. Every pass (costs, liveness, the kernel view, the predictor) runs on it unchanged, so every number at
  a point is the concrete analysis of that graph, decisions that depend on sizes included, without exporting
  or importing the model again (the expensive part: ~0.2-0.4 s per point against ~10 ms).
- `symbolic_costs(sym)` gives each op's counts (MACs, FLOPs, bytes read and written, output elements) and the
  totals as exact polynomials in the symbol, with rational coefficients: fitted by Newton interpolation on
  `SAMPLE_POINTS` and then required to equal the concrete counts at every other sample point. A count that fails
  the check (a rounding rule, a `floordiv` dimension: a quasi-polynomial) has no formula (`None`) and is
  evaluated per point; nothing is ever extrapolated from a formula that was not checked.

Formulas are in every symbol of the graph (the batch, and a language model's sequence length): `fit_grid`.
"""

from __future__ import annotations

import math
import operator
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from typing import TYPE_CHECKING

from .graph import Operand, OpGraph, OpNode, SourceValue, TensorInfo

if TYPE_CHECKING:
    from .memory import Fusion

MAX_DEGREE = 4  # the highest degree fitted; each fit is checked at every remaining sample point (>= 2)
MAX_SYMBOL_VALUE = 2**31  # the largest value a symbol is evaluated at


class SymbolicError(ValueError):
    """A symbolic graph cannot be evaluated at a point (unknown symbol, a value outside its range)."""


# --------------------------------------------------------------------------------------------
# Dimension expressions
# --------------------------------------------------------------------------------------------

_OPS = ("sym", "add", "sub", "mul", "floordiv", "floormod", "max", "min")
# the operations that take integers to integers and polynomials to polynomials (`Expr.at`, `poly_of`)
_ARITHMETIC = {"add": operator.add, "sub": operator.sub, "mul": operator.mul}


class Expr:
    """A symbolic dimension: ("sym", name) or (op, a, b) with op in add sub mul floordiv floormod max min and
    operands Exprs or ints. Immutable; `at(env)` evaluates it with Python integers."""

    __slots__ = ("op", "args")

    def __init__(self, op: str, *args):
        if op not in _OPS:
            raise SymbolicError(f"unknown dimension operation {op!r}")
        if op == "sym" and not (len(args) == 1 and isinstance(args[0], str)):
            raise SymbolicError("a symbol is one name")
        if op != "sym" and not (len(args) == 2 and all(isinstance(a, Expr | int) for a in args)):
            raise SymbolicError(f"{op} takes two integer or expression operands")
        self.op, self.args = op, args

    def at(self, env: Mapping[str, int]) -> int:
        if self.op == "sym":
            name = self.args[0]
            if name not in env:
                raise SymbolicError(f"no value for the dimension symbol '{name}'")
            return env[name]
        a, b = (x.at(env) if isinstance(x, Expr) else x for x in self.args)
        if self.op in _ARITHMETIC:
            return _ARITHMETIC[self.op](a, b)
        if self.op in ("floordiv", "floormod"):
            if b == 0:
                raise SymbolicError("a dimension divides by zero at this point")
            return a // b if self.op == "floordiv" else a % b
        return max(a, b) if self.op == "max" else min(a, b)

    def symbols(self) -> frozenset[str]:
        if self.op == "sym":
            return frozenset(self.args)
        return frozenset().union(*(a.symbols() for a in self.args if isinstance(a, Expr)))

    def __eq__(self, other) -> bool:
        return isinstance(other, Expr) and (self.op, self.args) == (other.op, other.args)

    def __hash__(self) -> int:
        return hash((self.op, self.args))

    def __str__(self) -> str:
        if self.op == "sym":
            return self.args[0]
        a, b = (str(x) for x in self.args)
        infix = {"add": "+", "sub": "-", "mul": "*", "floordiv": "//", "floormod": "%"}
        return f"({a} {infix[self.op]} {b})" if self.op in infix else f"{self.op}({a}, {b})"

    __repr__ = __str__


def evaluate(value, env: Mapping[str, int]):
    """`value` with every Expr in it (also inside lists, tuples and dicts) evaluated at `env`."""
    if isinstance(value, Expr):
        return value.at(env)
    if isinstance(value, list | tuple):
        return type(value)(evaluate(v, env) for v in value)
    if isinstance(value, dict):
        return {k: evaluate(v, env) for k, v in value.items()}
    return value


def has_symbols(value) -> bool:
    """Whether `value` (a dimension, a list, a dict of attributes) holds an Expr."""
    if isinstance(value, Expr):
        return True
    if isinstance(value, list | tuple):
        return any(has_symbols(v) for v in value)
    if isinstance(value, dict):
        return any(has_symbols(v) for v in value.values())
    return False


# --------------------------------------------------------------------------------------------
# The symbolic graph and the concrete graph at a point
# --------------------------------------------------------------------------------------------


@dataclass
class SymbolicGraph:
    """An `OpGraph` whose tensor dimensions may be `Expr`s, and the symbols' names and ranges.

    `ranges[name]` = (lowest, highest) value the export is valid for (torch.export's range constraints;
    highest None: unbounded up to MAX_SYMBOL_VALUE), by the name a user knows ("batch"). `aliases` maps the
    graph's own symbol names (Relax's shape variables, e.g. "s33") to those names; empty: the same names.
    SymbolicError if a dimension uses a symbol that has no range (e.g. a size computed from values).
    """

    graph: OpGraph
    ranges: dict[str, tuple[int, int | None]]
    aliases: dict[str, str] = field(default_factory=dict)

    def __post_init__(self):
        self.aliases = dict(self.aliases) or {s: s for s in self.ranges}
        self._symbolic_attrs = {op.index for op in self.graph.ops if has_symbols(op.attrs)}
        used: set[str] = set()
        for info in self._tensors():
            for d in info.shape:
                if isinstance(d, Expr):
                    used |= d.symbols()
        unknown = sorted(s for s in used if self.aliases.get(s) not in self.ranges)
        if unknown:
            raise SymbolicError(f"dimension symbols {', '.join(unknown)} are no input's batch")

    def _tensors(self):
        for s in self.graph.sources:
            yield s.tensor
        for op in self.graph.ops:
            yield from op.outputs

    def symbol_axes(self, name: str) -> list[tuple[int, SourceValue, int]]:
        """(input position, input, axis) of every input dimension that is exactly the symbol `name`."""
        internal = {k for k, v in self.aliases.items() if v == name}
        return [
            (i, s, a)
            for i, s in enumerate(self.graph.inputs)
            for a, d in enumerate(s.tensor.shape)
            if isinstance(d, Expr) and d.op == "sym" and d.args[0] in internal
        ]

    @property
    def symbols(self) -> tuple[str, ...]:
        return tuple(self.ranges)

    def check_point(self, env: Mapping[str, int]) -> dict[str, int]:
        """`env` as {symbol: int} for exactly this graph's symbols, each within its range; else SymbolicError."""
        if set(env) != set(self.ranges):
            raise SymbolicError(f"give a value for each of {', '.join(self.ranges)} (got {', '.join(env) or 'none'})")
        out = {}
        for name, v in env.items():
            lo, hi = self.ranges[name]
            hi = MAX_SYMBOL_VALUE if hi is None else hi
            if not isinstance(v, int) or isinstance(v, bool) or not lo <= v <= hi:
                raise SymbolicError(f"{name} = {v!r} is outside the range the export holds for ({lo} to {hi})")
            out[name] = int(v)
        return out

    def at(self, env: Mapping[str, int]) -> OpGraph:
        """The concrete `OpGraph` at `env` (every dimension and symbolic attribute evaluated; ops, values, edges and
        every other field of each op and source, `OpNode.library_call` included, as in the symbolic graph). Raises
        SymbolicError outside the symbols' ranges."""
        user = self.check_point(env)
        env = {internal: user[name] for internal, name in self.aliases.items()}
        memo: dict[int, TensorInfo] = {}

        def t(info: TensorInfo) -> TensorInfo:
            key = id(info)
            if key not in memo:
                shape = info.shape
                if any(isinstance(d, Expr) for d in shape):
                    dims = tuple(d.at(env) if isinstance(d, Expr) else d for d in shape)
                    if any(d < 0 for d in dims):
                        raise SymbolicError(f"a dimension is negative at {env}")
                    info = TensorInfo(dims, info.dtype)
                memo[key] = info
            return memo[key]

        g = self.graph
        sources = [
            SourceValue(s.value, s.name, t(s.tensor), s.kind, s.scalar_const, s.scalar, s.derived)
            if has_symbols(s.tensor.shape)
            # a static source is shared: SourceValue is frozen
            else s
            for s in g.sources
        ]
        # every other field of an op stays as it is (callee, folded, the library call it runs in, ...): the graph at
        # a point differs from the symbolic one in its sizes only. Listed, not `dataclasses.replace` (zoo:lstm_small's
        # 976 ops at a point: 6.7 against 10.1 ms of CPU, medians of 200); tests/test_symbolic.py fails on a new field.
        ops = [
            OpNode(
                index=op.index,
                name=op.name,
                op=op.op,
                attrs=evaluate(op.attrs, env) if op.index in self._symbolic_attrs else op.attrs,
                operands=[Operand(t(o.tensor), o.source, o.kind, o.value, o.field) for o in op.operands],
                outputs=tuple(t(x) for x in op.outputs),
                callee=op.callee,
                tir_flops=op.tir_flops,
                tir_macs=op.tir_macs,
                folded=op.folded,
                weight_only=op.weight_only,
                library_call=op.library_call,
                eager_copy=op.eager_copy,
            )
            for op in g.ops
        ]
        return OpGraph(ops=ops, sources=sources, outputs=list(g.outputs), value_producer=dict(g.value_producer))


# --------------------------------------------------------------------------------------------
# Polynomials with rational coefficients
# --------------------------------------------------------------------------------------------

Monomial = tuple[tuple[str, int], ...]  # ((symbol, power), ...) sorted by symbol; () is the constant term


@dataclass(frozen=True)
class Poly:
    """sum of coef x prod(symbol ** power) with exact rational coefficients (no zero terms)."""

    terms: tuple[tuple[Monomial, Fraction], ...]

    @staticmethod
    def make(terms: Mapping[Monomial, Fraction | int]) -> Poly:
        kept = {m: Fraction(c) for m, c in terms.items() if c != 0}
        return Poly(tuple(sorted(kept.items(), key=lambda mc: (-sum(p for _, p in mc[0]), mc[0]))))

    @staticmethod
    def univariate(symbol: str, coefficients: Sequence[Fraction | int]) -> Poly:
        """c0 + c1 x symbol + c2 x symbol^2 + ..."""
        return Poly.make({((symbol, k),) if k else (): c for k, c in enumerate(coefficients)})

    def at(self, env: Mapping[str, int]) -> Fraction:
        return sum((c * math.prod(Fraction(env[s]) ** p for s, p in m) for m, c in self.terms), Fraction(0))

    def __add__(self, other: Poly) -> Poly:
        out: dict[Monomial, Fraction] = dict(self.terms)
        for m, c in other.terms:
            out[m] = out.get(m, Fraction(0)) + c
        return Poly.make(out)

    def __neg__(self) -> Poly:
        return Poly(tuple((m, -c) for m, c in self.terms))

    def __sub__(self, other: Poly) -> Poly:
        return self + (-other)

    def __mul__(self, other: Poly | Fraction | int) -> Poly:
        if not isinstance(other, Poly):
            return Poly.make({m: c * other for m, c in self.terms})
        out: dict[Monomial, Fraction] = {}
        for m1, c1 in self.terms:
            for m2, c2 in other.terms:
                powers = dict(m1)
                for s, p in m2:
                    powers[s] = powers.get(s, 0) + p
                m = tuple(sorted(powers.items()))
                out[m] = out.get(m, Fraction(0)) + c1 * c2
        return Poly.make(out)

    @property
    def degree(self) -> int:
        return max((sum(p for _, p in m) for m, _ in self.terms), default=0)

    def dominates(self, other: Poly) -> bool:
        """Whether self >= other wherever every symbol is >= 0: each coefficient of self - other is >= 0."""
        return all(c >= 0 for _, c in (self - other).terms)

    def non_decreasing(self) -> bool:
        """Whether the polynomial never decreases as a symbol grows (symbols >= 0): every non-constant coefficient
        is >= 0 (sufficient, not necessary)."""
        return all(c >= 0 for m, c in self.terms if m)

    def coefficient(self, monomial: Monomial = ()) -> Fraction:
        return dict(self.terms).get(monomial, Fraction(0))

    def is_integral(self) -> bool:
        return all(c.denominator == 1 for _, c in self.terms)

    def __str__(self) -> str:
        """'8,177,000 x batch + 4,096' (exact integers with separators; a fraction as p/q)."""
        if not self.terms:
            return "0"
        parts = []
        for m, c in self.terms:
            num = f"{c.numerator:,}" if c.denominator == 1 else f"{c.numerator:,}/{c.denominator:,}"
            mono = " x ".join(s if p == 1 else f"{s}^{p}" for s, p in m)
            parts.append((c < 0, f"{num.lstrip('-')} x {mono}" if mono else num.lstrip("-")))
        text = ("-" if parts[0][0] else "") + parts[0][1]
        for neg, p in parts[1:]:
            text += f" {'-' if neg else '+'} {p}"
        return text

    def to_json(self) -> list[dict]:
        """[{"coefficient": int or "p/q", "powers": {symbol: power}}], highest degree first."""
        return [
            {
                "coefficient": c.numerator if c.denominator == 1 else f"{c.numerator}/{c.denominator}",
                "powers": dict(m),
            }
            for m, c in self.terms
        ]


def fit(symbol: str, samples: Sequence[tuple[int, int]], max_degree: int = MAX_DEGREE) -> Poly | None:
    """The lowest-degree polynomial in `symbol` through every (x, y) of `samples`, or None.

    Newton's divided differences (exact, with Fractions) over the first d+1 points give the degree-d
    interpolant; it is accepted only if it equals y at every other point too, and at least two points are left
    to check it (so d <= len(samples) - 3). None: no polynomial of degree <= max_degree passes the check.
    """
    xs = [Fraction(x) for x, _ in samples]
    ys = [Fraction(y) for _, y in samples]
    if len(set(xs)) != len(xs):
        raise ValueError("sample points must be distinct")
    n = len(xs)
    # divided-difference table: coef[k] = f[x0..xk]
    coef = list(ys)
    for j in range(1, n):
        for i in range(n - 1, j - 1, -1):
            coef[i] = (coef[i] - coef[i - 1]) / (xs[i] - xs[i - j])
    for d in range(0, min(max_degree, n - 3) + 1):
        if all(c == 0 for c in coef[d + 1 :]):  # the degree-d interpolant passes through every sample
            return _newton_to_poly(symbol, xs[:d], coef[: d + 1])
    return None


def _newton_to_poly(symbol: str, xs: Sequence[Fraction], coef: Sequence[Fraction]) -> Poly:
    """c0 + c1 (x - x0) + c2 (x - x0)(x - x1) + ... in the power basis."""
    power = [Fraction(0)] * len(coef)
    basis = [Fraction(1)]  # coefficients of prod_{i<k} (x - x_i)
    for k, c in enumerate(coef):
        for i, b in enumerate(basis):
            power[i] += c * b
        if k < len(xs):
            nxt = [Fraction(0)] * (len(basis) + 1)
            for i, b in enumerate(basis):
                nxt[i + 1] += b
                nxt[i] -= xs[k] * b
            basis = nxt
    return Poly.univariate(symbol, power)


# --------------------------------------------------------------------------------------------
# Per-op and total formulas
# --------------------------------------------------------------------------------------------

COUNTS = ("macs", "flops", "bytes_read", "bytes_written", "output_elements")
TOTALS = ("flops", "macs", "bytes_read", "bytes_written", "peak_activation_bytes", "params", "param_bytes")


def sample_points(lo: int, hi: int | None, n: int = 7, far: int = 40) -> list[int]:
    """lo, lo+1, ..., lo+n-1 and lo+far (within hi): consecutive points catch floors and roundings, the far one
    a term that only grows late."""
    hi = MAX_SYMBOL_VALUE if hi is None else hi
    pts = [p for p in (*range(lo, lo + n), lo + far) if p <= hi]
    return sorted(set(pts))


@dataclass
class SymbolicCosts:
    """Exact formulas of one symbolic graph. `ops[i][count]` is a Poly or None (no polynomial: the count is
    evaluated per point); `totals[name]` likewise. `points[symbol]` are the sample points of each symbol; the
    fits used every combination of them."""

    symbols: tuple[str, ...]
    points: dict[str, list[int]]
    ops: list[dict[str, Poly | None]]
    totals: dict[str, Poly | None]

    @property
    def exact(self) -> bool:
        """Every per-op count and every total has a checked formula."""
        return all(p is not None for p in self.totals.values()) and all(
            p is not None for op in self.ops for p in op.values()
        )


def fit_grid(symbols: Sequence[str], points: Sequence[Sequence[int]], values: Mapping[tuple, int | Fraction]):
    """The polynomial in `symbols` through `values` ({(x1, x2, ...): y} on the grid of `points`), or None.

    Tensor-product interpolation, exact: for each value of the first symbol, the polynomial in the others
    (recursively); then each coefficient of those, as a function of the first symbol, is `fit` (checked at the
    spare points) in turn. None as soon as one of the univariate fits fails its check.
    """
    if len(symbols) == 1:
        return fit(symbols[0], [(x, values[(x,)]) for x in points[0]])
    first, rest = symbols[0], symbols[1:]
    inner = {}
    for x in points[0]:
        p = fit_grid(rest, points[1:], {k[1:]: v for k, v in values.items() if k[0] == x})
        if p is None:
            return None
        inner[x] = p
    monomials = sorted({m for p in inner.values() for m, _ in p.terms})
    terms: dict[Monomial, Fraction] = {}
    for m in monomials:
        q = fit(first, [(x, inner[x].coefficient(m)) for x in points[0]])
        if q is None:
            return None
        for m1, c in q.terms:
            terms[tuple(sorted(m1 + m))] = c
    return Poly.make(terms)


def op_counts(analysis) -> list[dict[str, int]]:
    """{count: int} per op of a concrete `passes.analysis.Analysis`, in op order (COUNTS)."""
    return [
        {
            "macs": c.macs,
            "flops": c.flops,
            "bytes_read": c.bytes_read,
            "bytes_written": c.bytes_written,
            "output_elements": sum(o.numel for o in c.outputs),
        }
        for c in analysis.ops
    ]


def total_counts(analysis) -> dict[str, int]:
    t = analysis.totals
    return {k: getattr(t, k) for k in TOTALS}


MAX_GRID = 256  # the most analyses one fit runs (8 sample points per symbol: two symbols)


def symbolic_costs(sym: SymbolicGraph, analyze=None) -> SymbolicCosts:
    """Fit every per-op count and total of `sym` on the grid of each symbol's `sample_points` (`fit_grid`).

    `analyze(graph) -> Analysis` runs the passes on the graph at a point (default `passes.analysis.analyze_graph`;
    the pipeline passes its own, with dtype retargeting and the model's parameter count)."""
    if analyze is None:
        from .analysis import analyze_graph as analyze
    symbols = sym.symbols
    points = {s: sample_points(*sym.ranges[s]) for s in symbols}
    grid = [()]
    for s in symbols:
        grid = [(*g, x) for g in grid for x in points[s]]
    if len(grid) > MAX_GRID:
        raise SymbolicError(f"{len(grid)} sample points for {', '.join(symbols)}: at most {MAX_GRID}")
    per_point = {g: analyze(sym.at(dict(zip(symbols, g, strict=True)))) for g in grid}
    ops_at = {g: op_counts(a) for g, a in per_point.items()}
    totals_at = {g: total_counts(a) for g, a in per_point.items()}
    n_ops = len(ops_at[grid[0]])
    axes = [points[s] for s in symbols]
    ops = [{k: fit_grid(symbols, axes, {g: o[i][k] for g, o in ops_at.items()}) for k in COUNTS} for i in range(n_ops)]
    totals = {k: fit_grid(symbols, axes, {g: t[k] for g, t in totals_at.items()}) for k in TOTALS}
    return SymbolicCosts(symbols=symbols, points=points, ops=ops, totals=totals)


# --------------------------------------------------------------------------------------------
# The liveness peak as a function of the symbols
# --------------------------------------------------------------------------------------------


def poly_of(
    dim, aliases: Mapping[str, str] | None = None, ranges: Mapping[str, tuple[int, int | None]] | None = None
) -> Poly | None:
    """A dimension (an int or an `Expr`) as a Poly in the user's symbol names (`aliases`: graph name -> user
    name); None when it is not a polynomial (floordiv, floormod, max or min of a symbol). With the symbols'
    `ranges` (user names), max/min of a constant c and a bare symbol whose lowest value is >= c is decided
    (min(1, seq) = 1 for seq >= 2: a causal mask's slice)."""
    if isinstance(dim, int):
        return Poly.make({(): dim})
    if dim.op == "sym":
        name = dim.args[0]
        return Poly.make({(((aliases or {}).get(name, name), 1),): 1})
    a, b = (poly_of(x, aliases, ranges) for x in dim.args)
    if a is None or b is None:
        return None
    if dim.op in ("max", "min") and ranges:
        for const, other in ((a, b), (b, a)):
            terms = dict(other.terms)
            if const.degree == 0 and len(terms) == 1 and list(terms.values()) == [1]:
                (mono,) = terms
                if len(mono) == 1 and mono[0][1] == 1 and ranges.get(mono[0][0], (None,))[0] is not None:
                    if ranges[mono[0][0]][0] >= const.coefficient():
                        return const if dim.op == "min" else other
    if dim.op in _ARITHMETIC:
        return _ARITHMETIC[dim.op](a, b)
    if a.degree == 0 and b.degree == 0:  # of two constants (not simplified away by TVM)
        x, y = int(a.coefficient()), int(b.coefficient())
        return poly_of(Expr(dim.op, x, y).at({})) if dim.op in ("max", "min") or y else None
    return None


@dataclass(frozen=True)
class PeakLaw:
    """Peak live activation bytes as a function of the symbols: the maximum, over the ops of the execution order,
    of the bytes live while each runs, each an exact polynomial (`candidates`: the distinct ones no other
    dominates coefficient by coefficient). `at(env)` evaluates it exactly (integers); `monotone`: every candidate
    provably never decreases as a symbol grows, so neither does the peak."""

    candidates: tuple[Poly, ...]
    symbols: tuple[str, ...]

    def at(self, env: Mapping[str, int]) -> int:
        """The peak in bytes at `env` ({user symbol: value}). SymbolicError when `env` lacks a symbol or the peak
        there is not a whole number of bytes (`analyzer.symbolic.peak_function` turns it into an AnalysisError)."""
        missing = [s for s in self.symbols if s not in env]
        if missing:
            raise SymbolicError(f"no value for the dimension symbol '{missing[0]}'")
        if not self.candidates:
            return 0
        best = max(p.at(env) for p in self.candidates)
        if best.denominator != 1:
            raise SymbolicError(f"the peak is not a whole number of bytes at {dict(env)}")
        return int(best)

    @property
    def monotone(self) -> bool:
        return all(p.non_decreasing() for p in self.candidates)

    def is_polynomial(self, poly: Poly, ranges: Mapping[str, tuple[int, int | None]]) -> bool:
        """Whether the law is `poly` over `ranges` ({symbol: (lo, hi or None)}): `poly` is one of the candidates and
        equals the law at every point of a grid from each symbol's lowest value through the powers of 2 to its
        highest (2^31 where it has none; two polynomials of the degrees a peak has cross between such points only
        where one overtakes the other for good past the last, which the top point sees). False where the law has no
        whole value at a grid point."""
        if poly not in self.candidates:
            return False
        points: list[dict[str, int]] = [{}]
        for sym, (lo, hi) in ranges.items():
            top = hi if hi is not None else 2**31
            values = sorted({lo, lo + 1, top, *(2**k for k in range(1, 32) if lo < 2**k < top)})
            points = [{**p, sym: v} for p in points for v in values]
        try:
            return all(poly.at(p) == self.at(p) for p in points)
        except SymbolicError:
            return False

    def __str__(self) -> str:
        """'6,422,528 x batch + 512', or 'max(a, b)' over the candidates."""
        if len(self.candidates) <= 1:
            return str(self.candidates[0]) if self.candidates else "0"
        return "max(" + ", ".join(str(p) for p in self.candidates) + ")"


def peak_law(sym: SymbolicGraph, graph: OpGraph | None = None, fused: Fusion | Sequence[Sequence[int]] = ()) -> PeakLaw:
    """The liveness pass (`passes.memory.liveness`) in closed form: the same lifetimes (they depend on the graph's
    structure only), each allocation's bytes an exact polynomial of the symbols, the live bytes at each op their
    sum. `graph`: `sym.graph` as the pipeline prepares it (dtype retargeting; shapes, ops and indices unchanged),
    by default `sym.graph` itself; `fused`: the kernels that run several ops at once (`passes.memory.lifetimes`).
    SymbolicError when an allocation's size is not a polynomial (a floordiv
    dimension, a sub-byte dtype whose bytes round up)."""
    from .graph import dtype_bytes
    from .memory import lifetimes

    graph = sym.graph if graph is None else graph
    n = len(graph.ops)
    tensors, birth, last = lifetimes(graph, fused)
    size: dict[int, Poly] = {}
    for sid, ts in tensors.items():
        total = Poly.make({})
        for t in ts:
            per = Fraction(dtype_bytes(t.dtype))
            if per.denominator != 1:
                raise SymbolicError(f"a {t.dtype} tensor's bytes round up: no polynomial")
            numel = Poly.make({(): 1})
            for d in t.shape:
                p = poly_of(d, sym.aliases, sym.ranges)
                if p is None:
                    raise SymbolicError(f"a dimension {d} is not a polynomial of {', '.join(sym.symbols)}")
                numel = numel * p
            total = total + numel * per
        size[sid] = total
    if n == 0:
        total = Poly.make({})
        for p in size.values():
            total = total + p
        return PeakLaw((total,), sym.symbols)
    delta: dict[int, list[tuple[int, Poly]]] = {}
    for sid, p in size.items():
        delta.setdefault(birth[sid], []).append((1, p))
        delta.setdefault(min(last[sid], n) + 1, []).append((-1, p))
    steps: dict[Poly, None] = {}
    live = Poly.make({})
    for i in range(n):
        for sign, p in delta.get(i, []):
            live = live + p if sign > 0 else live - p
        steps[live] = None
    # a dominating polynomial is larger at any point with every symbol > 0: sorted by the value at such a point,
    # every dominator comes before what it dominates, so checking the ones kept so far is enough
    probe = {s: 2**20 for s in sym.symbols}
    kept: list[Poly] = []
    for p in sorted(steps, key=lambda p: p.at(probe), reverse=True):
        if not any(q.dominates(p) for q in kept):
            kept.append(p)
    return PeakLaw(tuple(kept), sym.symbols)
