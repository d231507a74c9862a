"""Numbers in report tables: fixed decimals for ordinary values, scientific notation for large ones."""

import math

import numpy as np
import pytest

from layerscope.report.markdown import number, signed


@pytest.mark.parametrize(("x", "digits", "text"), [
    (1940821235921.001, 3, "1.94e+12"),    # the anisotropy eigenvalue variance the audit saw as 1940821235921.0010
    (1940821235921.001, 4, "1.941e+12"),
    (100000.0, 3, "1.00e+05"),             # the threshold itself
    (99999.9, 3, "99999.900"),             # just below: as before
    (-2.5e6, 3, "-2.50e+06"),
    (963273.7, 1, "1e+06"),
    (123456, 3, "1.23e+05"),               # an integer too
    (np.float32(3e7), 3, "3.00e+07"),
    (0.5, 3, "0.500"),
    (12, 3, "12.000"),
    (2e-5, 3, "2e-05"),                    # small values as before
    (0.0, 3, "0.000"),
    (None, 3, "n/a"),
    (math.nan, 3, "n/a"),
    (math.inf, 3, "inf"),
])
def test_number(x, digits, text):
    assert number(x, digits) == text


@pytest.mark.parametrize(("x", "digits", "text"), [
    (0.1234, 3, "+0.123"),
    (-0.3, 2, "-0.30"),
    (1940821235921.001, 3, "+1.94e+12"),
    (-123456.0, 4, "-1.235e+05"),
    (99999.0, 1, "+99999.0"),
    (None, 3, "n/a"),
    (math.nan, 3, "n/a"),
])
def test_signed(x, digits, text):
    assert signed(x, digits) == text
