"""Numbers as reports print them."""

from __future__ import annotations


def g3(v: float) -> str:
    """`v` to 3 significant digits without an exponent from 100 up (12,345 rather than 1.23e+04; 3.17; 0.0412)."""
    return f"{v:,.0f}" if abs(v) >= 100 else f"{v:.3g}"
