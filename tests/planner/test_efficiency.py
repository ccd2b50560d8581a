"""planner/efficiency.py: the warning for a weight-only quantized format whose dequantization cost a runtime
profile never measured (the estimate charges the simpler fitted format it contains, a lower bound, or none), and
planner/quantization.py dequant_overhead_for, the one lookup of a format's cost."""

import pytest

from planner.efficiency import unmeasured_dequant_warning
from planner.hardware import Efficiency
from planner.quantization import DEQUANT_FITTED_FORMATS, DEQUANT_SUPERSET_OF, WEIGHT_FORMATS, dequant_overhead_for


def _eff(dequant):
    return Efficiency(bandwidth_fraction=0.9, compute_fraction=0.5, dequant_overhead=dequant, source="test")


def test_an_unmeasured_quantized_format_names_the_fitted_costs_and_the_largest_for_comparison():
    # int4-g128's chain (DEQUANT_SUPERSET_OF) holds no llama.cpp format: nothing is charged, the warning compares
    w = unmeasured_dequant_warning(_eff({"q4_0": 0.07, "q8_0": 0.64}), "int4-g128", "llamacpp")
    # the fitted costs as GEMM-time percentages: 0.07 -> +7%, 0.64 -> +64%; the largest, 64%, for comparison
    assert w is not None and "int4-g128" in w and "q4_0 +7%" in w and "q8_0 +64%" in w and "cost up to 64%" in w
    assert dequant_overhead_for({"q4_0": 0.07, "q8_0": 0.64}, "int4-g128") == (0.0, None)


def test_an_unmeasured_format_is_charged_the_simpler_fitted_format_whose_work_it_contains():
    """Q6_K adds high bits to Q5_K, which adds them to Q4_K, which adds packed sub-block scales to Q4_0's nibble
    unpacking: with only q4_0 and q8_0 fitted, q6_k pays q4_0's cost (never q8_0's: 8-bit values hold none of the
    unpacking); with q4_k_m fitted too, q4_k_m's; the warning says it is a lower bound."""
    fitted = {"q4_0": 0.07, "q8_0": 0.64}
    assert dequant_overhead_for(fitted, "q6_k") == (0.07, "q4_0")
    assert dequant_overhead_for({**fitted, "q4_k_m": 0.22}, "q6_k") == (0.22, "q4_k_m")
    assert dequant_overhead_for({**fitted, "q4_k_m": 0.22, "q5_k_m": 0.3}, "q6_k") == (0.3, "q5_k_m")
    assert dequant_overhead_for({**fitted, "q6_k": 0.5}, "q6_k") == (0.5, "q6_k")  # its own where fitted
    assert dequant_overhead_for({"int4-g128": 0.12}, "gptq-int4") == (0.12, "int4-g128")  # via int4-g128-zp
    assert dequant_overhead_for({"int4-g128": 0.12}, "int4-g32") == (0.12, "int4-g128")  # via int4-g64
    assert dequant_overhead_for({}, "q6_k") == (0.0, None) and dequant_overhead_for(None, "q6_k") == (0.0, None)
    w = unmeasured_dequant_warning(_eff(fitted), "q6_k", "llamacpp")
    assert "charges q4_0's (+7%)" in w and "lower bound" in w and "q8_0 +64%" in w


def test_every_chain_ends_and_names_dequantized_formats():
    for start in DEQUANT_SUPERSET_OF:
        seen, f = [], start
        while f in DEQUANT_SUPERSET_OF:
            assert f not in seen, f"cycle through {f}"
            seen.append(f)
            f = DEQUANT_SUPERSET_OF[f]
        assert all(x in WEIGHT_FORMATS and x in DEQUANT_FITTED_FORMATS for x in seen + [f])


@pytest.mark.parametrize("fmt", ["q6_k", "q3_k_m", "iq4_xs", "q5_1"])
def test_the_roofline_charges_the_borrowed_cost(fmt):
    """roofline._device_model, which every command sizes time through, reads the cost with dequant_overhead_for."""
    from planner.hardware import load_hardware
    from planner.quantization import weight_format
    from planner.roofline import device_model

    spec = load_hardware("rtx-4090")
    dev = device_model(spec, spec.units[0], weight_format(fmt), _eff({"q4_0": 0.07, "q8_0": 0.64}))
    assert dev.dequant_factor == pytest.approx(1.07)


def test_a_profile_with_no_quantized_rows_says_so():
    w = unmeasured_dequant_warning(_eff({}), "int4-g128", "vllm")
    assert w is not None and "no weight-only quantized rows" in w and "int4-g128" in w


def test_no_warning_where_the_cost_was_fitted_or_the_format_has_none_or_no_runtime_is_named():
    eff = _eff({"q4_0": 0.07})
    assert unmeasured_dequant_warning(eff, "q4_0", "llamacpp") is None   # fitted
    assert unmeasured_dequant_warning(eff, "fp16", "llamacpp") is None   # no dequantization
    assert unmeasured_dequant_warning(eff, "fp8", "trtllm") is None      # native fp8 GEMMs
    assert unmeasured_dequant_warning(eff, "mxfp4", "llamacpp") is None  # format_compute_fraction, not a dequant cost
    assert unmeasured_dequant_warning(eff, "q6_k", None) is None         # kind defaults: no profile to speak for
