"""A small grammar for the symbolic shape expressions of `.pt2` archives, parsed without sympy.

torch writes every symbolic size, stride and shape guard of an exported program as a string
(`SymExpr.expr_str`): `sympy.srepr` of the expression, e.g.
`Add(Mul(Integer(2), Symbol('s77', integer=True, positive=True)), Integer(1))`. torch's deserializer
reads it back with `sympy.sympify`, which `eval`s Python: a hostile archive runs code. preflight parses
the string with the grammar below instead, and hands torch the sympy objects it builds from the parse
tree, so no string from the archive is ever evaluated.

Grammar (srepr's call form, and the infix form of older archives):

    expr    := term (('+' | '-') term)*
    term    := unary (('*' | '//' | '%') unary)*
    unary   := '-' unary | power
    power   := atom ('**' unary)?
    atom    := INT | CONSTANT | NAME | CALL | '(' expr ')'
    CALL    := FUNC '(' [arg (',' arg)*] ')'
    arg     := STRING | KEY '=' (True | False | INT) | expr

FUNC is one of `FUNCTIONS` (sympy's core classes that srepr prints, and the functions of
`torch.utils._sympy.functions` that torch's deserializer puts in sympify's namespace); CONSTANT is one of
`true false oo int_oo`; a bare NAME is a shape symbol. Symbol names are identifiers of at most 32
characters, integers at most 2**62 in magnitude, exponents and shift counts integer literals of at
most 64 (a symbolic exponent could make torch compute 2**(2**62) from a hint), expressions at most
16,384 characters and 64 levels deep.
"""

from __future__ import annotations

import keyword
import re
from dataclasses import dataclass

MAX_CHARS = 16_384
MAX_DEPTH = 64
MAX_ARGS = 256
MAX_INT = 2**62
MAX_EXPONENT = 64
SYMBOL_RE = re.compile(r"[A-Za-z][A-Za-z0-9_]{0,31}")
_FLOAT_RE = re.compile(r"-?(\d+\.?\d*|\.\d+)([eE][-+]?\d{1,3})?")
_ASSUMPTIONS = frozenset(
    {
        "integer",
        "positive",
        "nonnegative",
        "negative",
        "nonpositive",
        "real",
        "finite",
        "infinite",
        "zero",
        "nonzero",
        "even",
        "odd",
        "rational",
        "extended_real",
        "commutative",
    }
)

# name -> (min args, max args); None: any number. Names on the right of `torch` are torch's own functions
# (torch.utils._sympy.functions), the rest sympy's core classes as `srepr` prints them.
_SYMPY = {
    "Add": (0, None),
    "Mul": (0, None),
    "Pow": (2, 2),
    "Max": (1, None),
    "Min": (1, None),
    "And": (0, None),
    "Or": (0, None),
    "Not": (1, 1),
    "Equality": (2, 2),
    "Unequality": (2, 2),
    "StrictLessThan": (2, 2),
    "LessThan": (2, 2),
    "StrictGreaterThan": (2, 2),
    "GreaterThan": (2, 2),
    "Eq": (2, 2),
    "Ne": (2, 2),
    "Lt": (2, 2),
    "Le": (2, 2),
    "Gt": (2, 2),
    "Ge": (2, 2),
}
_TORCH = {
    "FloorDiv": (2, 2),
    "ModularIndexing": (3, 3),
    "Where": (3, 3),
    "PythonMod": (2, 2),
    "Mod": (2, 2),
    "CleanDiv": (2, 2),
    "CeilToInt": (1, 1),
    "FloorToInt": (1, 1),
    "CeilDiv": (2, 2),
    "LShift": (2, 2),
    "RShift": (2, 2),
    "PowByNatural": (2, 2),
    "FloatPow": (2, 2),
    "FloatTrueDiv": (2, 2),
    "IntTrueDiv": (2, 2),
    "IsNonOverlappingAndDenseIndicator": (1, None),
    "TruncToFloat": (1, 1),
    "TruncToInt": (1, 1),
    "RoundToInt": (1, 1),
    "RoundDecimal": (2, 2),
    "ToFloat": (1, 1),
    "Identity": (1, 1),
}
_LITERALS = {"Symbol", "Integer", "Rational", "Float"}
FUNCTIONS = frozenset(_SYMPY) | frozenset(_TORCH) | _LITERALS
_SMALL_SECOND_ARG = frozenset({"Pow", "PowByNatural", "FloatPow", "LShift", "RShift"})
_CONSTANTS = frozenset({"true", "false", "oo", "int_oo"})


class ExprError(ValueError):
    """The expression is not in the grammar (the message says where and why)."""


# Parse tree: plain tuples, so that a tree is cheap to build, compare and hand to a child process.
#   ("int", n) ("sym", name, ((key, value), ...)) ("const", name) ("rational", p, q) ("float", text)
#   ("call", func, (args...)) ("neg", x)


@dataclass
class _Token:
    kind: str  # int name str op
    text: str
    pos: int


_TOKEN_RE = re.compile(r"\s*(?:(\d+)|([A-Za-z_][A-Za-z0-9_]*)|'([^'\\]{0,64})'|(\*\*|//|[-+*%(),=]))")


def _tokens(text: str) -> list[_Token]:
    out, pos = [], 0
    while pos < len(text):
        if text[pos:].strip() == "":
            break
        m = _TOKEN_RE.match(text, pos)
        if m is None:
            raise ExprError(f"unexpected character {text[pos:].lstrip()[:1]!r} at {pos}")
        if m.group(1) is not None:
            if len(m.group(1)) > 19:
                raise ExprError(f"integer too large at {m.start(1)}")
            out.append(_Token("int", m.group(1), m.start(1)))
        elif m.group(2) is not None:
            out.append(_Token("name", m.group(2), m.start(2)))
        elif m.group(3) is not None:
            out.append(_Token("str", m.group(3), m.start(3)))
        else:
            out.append(_Token("op", m.group(4), m.start(4)))
        pos = m.end()
    return out


class _Parser:
    def __init__(self, text: str):
        self.toks = _tokens(text)
        self.i = 0

    def peek(self, text: str | None = None) -> _Token | None:
        tok = self.toks[self.i] if self.i < len(self.toks) else None
        if tok is not None and text is not None and not (tok.kind == "op" and tok.text == text):
            return None
        return tok

    def take(self, text: str | None = None) -> _Token:
        tok = self.peek(text)
        if tok is None:
            want = f"{text!r}" if text else "more input"
            found = self.toks[self.i].text if self.i < len(self.toks) else "the end"
            raise ExprError(f"expected {want}, found {found!r}")
        self.i += 1
        return tok

    def expr(self, depth: int):
        if depth > MAX_DEPTH:
            raise ExprError(f"nested more than {MAX_DEPTH} levels")
        terms = [self.term(depth)]
        while (tok := self.peek()) is not None and tok.kind == "op" and tok.text in "+-":
            self.i += 1
            rhs = self.term(depth)
            terms.append(rhs if tok.text == "+" else ("neg", rhs))
        return terms[0] if len(terms) == 1 else _checked_call("Add", tuple(terms), ())

    def term(self, depth: int):
        factors = [self.unary(depth)]
        while (tok := self.peek()) is not None and tok.kind == "op" and tok.text in ("*", "//", "%"):
            self.i += 1
            rhs = self.unary(depth)
            if tok.text == "*":
                factors.append(rhs)
                continue
            depth += 1  # a // b // c nests
            if depth > MAX_DEPTH:
                raise ExprError(f"nested more than {MAX_DEPTH} levels")
            lhs = factors[0] if len(factors) == 1 else _checked_call("Mul", tuple(factors), ())
            factors = [("call", "FloorDiv" if tok.text == "//" else "Mod", (lhs, rhs))]
        return factors[0] if len(factors) == 1 else _checked_call("Mul", tuple(factors), ())

    def unary(self, depth: int):
        if depth > MAX_DEPTH:  # `- - - ... x` and `a ** -b ** -c ...` nest without parentheses
            raise ExprError(f"nested more than {MAX_DEPTH} levels")
        if self.peek("-") is not None:
            self.i += 1
            inner = self.unary(depth + 1)
            return ("int", -inner[1]) if inner[0] == "int" else ("neg", inner)
        return self.power(depth)

    def power(self, depth: int):
        node = self.atom(depth)
        if self.peek("**") is not None:
            self.i += 1
            node = _checked_call("Pow", (node, self.unary(depth + 1)), ())
        return node

    def atom(self, depth: int):
        tok = self.take()
        if tok.kind == "int":
            return ("int", _int(tok.text))
        if tok.kind == "op" and tok.text == "(":
            node = self.expr(depth + 1)
            self.take(")")
            return node
        if tok.kind != "name":
            raise ExprError(f"unexpected {tok.text!r} at {tok.pos}")
        if self.peek("(") is None:
            if tok.text in _CONSTANTS:
                return ("const", tok.text)
            return ("sym", _symbol_name(tok.text), ())
        if tok.text not in FUNCTIONS:
            raise ExprError(f"{tok.text!r} is not a function torch writes in shape expressions")
        self.take("(")
        args, kwargs = [], []
        while self.peek(")") is None:
            if len(args) + len(kwargs) >= MAX_ARGS:
                raise ExprError(f"more than {MAX_ARGS} arguments")
            nxt = self.toks[self.i + 1] if self.i + 1 < len(self.toks) else None
            cur = self.peek()
            if cur is not None and cur.kind == "str":
                self.i += 1
                args.append(("str", cur.text))
            elif cur is not None and cur.kind == "name" and nxt is not None and nxt.text == "=":
                self.i += 2
                kwargs.append((cur.text, self._kwvalue()))
            else:
                args.append(self.expr(depth + 1))
            if self.peek(",") is None:
                break
            self.i += 1
        self.take(")")
        return _checked_call(tok.text, tuple(args), tuple(kwargs))

    def _kwvalue(self):
        tok = self.take()
        if tok.kind == "name" and tok.text in ("True", "False"):
            return tok.text == "True"
        if tok.kind == "int":
            return _int(tok.text)
        raise ExprError(f"keyword values are True, False or integers, not {tok.text!r}")


def _int(text: str) -> int:
    value = int(text)
    if value > MAX_INT:
        raise ExprError(f"integer {text} is larger than 2**62")
    return value


def _symbol_name(name: str) -> str:
    if not SYMBOL_RE.fullmatch(name) or keyword.iskeyword(name) or name in ("True", "False", "None"):
        raise ExprError(f"{name!r} is not a shape symbol name")
    return name


def _literal_int(node) -> int | None:
    if node[0] == "int":
        return node[1]
    return None


def _checked_call(func: str, args: tuple, kwargs: tuple):
    if func == "Symbol":
        if len(args) != 1 or args[0][0] != "str":
            raise ExprError("Symbol takes one quoted name")
        for key, value in kwargs:
            if key not in _ASSUMPTIONS or not isinstance(value, bool):
                raise ExprError(f"Symbol assumption {key}={value!r} is not one torch writes")
        return ("sym", _symbol_name(args[0][1]), tuple(sorted(kwargs)))
    if any(a[0] == "str" for a in args) and func != "Float":
        raise ExprError(f"{func} takes no string arguments")
    if kwargs and func != "Float":
        raise ExprError(f"{func} takes no keyword arguments")
    if func == "Integer":
        if len(args) != 1 or _literal_int(args[0]) is None:
            raise ExprError("Integer takes one integer literal")
        return args[0]
    if func == "Rational":
        if len(args) != 2 or _literal_int(args[0]) is None or _literal_int(args[1]) in (None, 0):
            raise ExprError("Rational takes two integer literals, the second non-zero")
        return ("rational", args[0][1], args[1][1])
    if func == "Float":
        if len(args) != 1 or args[0][0] != "str" or not _FLOAT_RE.fullmatch(args[0][1]):
            raise ExprError("Float takes one quoted decimal number")
        if any(k != "precision" or v != 53 for k, v in kwargs):
            raise ExprError("Float's only keyword is precision=53")
        return ("float", args[0][1])
    lo, hi = _SYMPY.get(func) or _TORCH[func]
    if len(args) < lo or (hi is not None and len(args) > hi):
        raise ExprError(f"{func} takes {lo if lo == hi else f'{lo} or more'} arguments, not {len(args)}")
    if func in _SMALL_SECOND_ARG:
        second = args[1]
        small = _literal_int(second)
        if second[0] == "rational":
            small = max(abs(second[1]), abs(second[2]))
        if small is None or abs(small) > MAX_EXPONENT:
            raise ExprError(f"{func}'s exponent or shift must be an integer literal of at most {MAX_EXPONENT}")
    return ("call", func, args)


def parse(text: str):
    """Parse one expression string; return its tree (nested tuples). Raises `ExprError`."""
    if not isinstance(text, str):
        raise ExprError("the expression is not a string")
    if len(text) > MAX_CHARS:
        raise ExprError(f"longer than {MAX_CHARS:,} characters")
    parser = _Parser(text)
    if not parser.toks:
        raise ExprError("empty expression")
    tree = parser.expr(0)
    if parser.i != len(parser.toks):
        tok = parser.toks[parser.i]
        raise ExprError(f"unexpected {tok.text!r} at {tok.pos}")
    return tree


def symbols(tree) -> set[str]:
    """The shape symbol names a tree mentions."""
    if tree[0] == "sym":
        return {tree[1]}
    if tree[0] == "call":
        return set().union(*(symbols(a) for a in tree[2])) if tree[2] else set()
    if tree[0] == "neg":
        return symbols(tree[1])
    return set()


def to_sympy(tree, known: dict[str, object] | None = None):
    """Build the sympy expression of a parse tree with sympy's and torch's own constructors (no parsing).

    `known` maps a bare symbol name to the Symbol an earlier expression defined (infix archives name
    symbols without their assumptions); new Symbols are added to it.
    """
    import sympy
    from torch.utils._sympy import functions as torch_fns
    from torch.utils._sympy.numbers import int_oo

    known = {} if known is None else known

    def build(node):
        kind = node[0]
        if kind == "int":
            return sympy.Integer(node[1])
        if kind == "rational":
            return sympy.Rational(node[1], node[2])
        if kind == "float":
            return sympy.Float(node[1], precision=53)
        if kind == "const":
            return {"true": sympy.true, "false": sympy.false, "oo": sympy.oo, "int_oo": int_oo}[node[1]]
        if kind == "neg":
            return -build(node[1])
        if kind == "sym":
            if not node[2] and node[1] in known:
                return known[node[1]]
            sym = sympy.Symbol(node[1], **dict(node[2] or (("integer", True),)))
            known.setdefault(node[1], sym)
            return sym
        func = node[1]
        cls = getattr(torch_fns, func) if func in _TORCH else getattr(sympy, func)
        return cls(*(build(a) for a in node[2]))

    return build(tree)
