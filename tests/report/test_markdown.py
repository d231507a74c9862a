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


def test_a_report_names_every_model_after_its_title():
    from layerscope.report.markdown import with_models

    a = {"name": "smollm2-135m", "exact": "SmolLM2-135M-Instruct, Q4_1 GGUF", "weights_hash": "0123456789abcdef0123"}
    b = {"name": "x|y", "weights_hash": "ff"}  # an older result: no exact name; a name from outside stays text
    assert with_models("# Title\n\nbody\n", {"models": [a]}) == (
        "# Title\n\nModel: smollm2-135m = SmolLM2-135M-Instruct, Q4\\_1 GGUF (weights SHA-256 0123456789abcdef)."
        "\n\nbody\n")
    assert with_models("body", {"models": [a, b]}).startswith("Models: smollm2-135m = ") and \
        "; x\\|y (weights SHA-256 ff).\n\nbody" in with_models("body", {"models": [a, b]})
    assert with_models("# T\n", {"models": []}) == "# T\n"
