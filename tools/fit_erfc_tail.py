#!/usr/bin/python3
"""Fits the polynomial behind erfc_tail in src/tensor/cpu/vector_math.h.

erfc(t) = exp(-t^2) * R(u) * u with u = 1/t; R is fitted on u in [0.1, 1.5] (t in [2/3, 10])
as a degree-13 polynomial in w = (u - 0.8) / 0.7 (so that w spans [-1, 1]), minimising the
largest relative error by Lawson's iteratively reweighted least squares on 900 Chebyshev
nodes, with the reference from mpmath at 40 digits. Prints the coefficients (w^0 first), the
fit's relative error and the error of evaluating it in float32 with fused multiply-adds.

Run: /usr/bin/python3 tools/fit_erfc_tail.py   (Debian's python3-numpy and python3-mpmath)
"""

import mpmath
import numpy as np

mpmath.mp.dps = 40
LOW, HIGH, DEGREE = 0.1, 1.5, 13
MID, HALF = (LOW + HIGH) / 2, (HIGH - LOW) / 2


def reference(u):
    t = 1 / mpmath.mpf(u)
    return float(mpmath.erfc(t) * mpmath.exp(t * t) * t)


def chebyshev_nodes(count):
    k = np.arange(count)
    return MID + HALF * np.cos((2 * k + 1) * np.pi / (2 * count))


def lawson(matrix, values, iterations=300):
    weights = np.ones(len(values))
    for _ in range(iterations):
        root = np.sqrt(weights)
        coefficients, *_ = np.linalg.lstsq(matrix * (root / np.abs(values))[:, None], root * np.sign(values), rcond=None)
        error = (matrix @ coefficients - values) / np.abs(values)
        weights = weights * np.abs(error) + 1e-300
        weights /= weights.sum()
    return coefficients, np.max(np.abs((matrix @ coefficients - values) / values))


def horner_float32(coefficients, w):
    acc = coefficients[-1]
    for c in coefficients[-2::-1]:
        acc = np.float32(np.float64(acc) * np.float64(w) + np.float64(c))  # one rounding: an fma
    return float(acc)


def main():
    u = chebyshev_nodes(900)
    values = np.array([reference(x) for x in u])
    matrix = np.array([[((x - MID) / HALF) ** k for k in range(DEGREE + 1)] for x in u])
    coefficients, fit_error = lawson(matrix, values)
    single = coefficients.astype(np.float32)
    test = np.linspace(LOW, HIGH, 4001)
    w32 = (test.astype(np.float32) - np.float32(MID)) * np.float32(1 / HALF)
    evaluated = np.array([horner_float32(single, w) for w in w32])
    exact = np.array([reference(x) for x in test])
    print("coefficients:", ", ".join(repr(float(c)) for c in coefficients))
    print(f"fit relative error {fit_error:.3g}, float32 evaluation {np.max(np.abs(evaluated - exact) / exact):.3g}")


if __name__ == "__main__":
    main()
