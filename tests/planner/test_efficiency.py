"""planner/efficiency.py: the warning for a weight-only quantized format whose dequantization cost a runtime
profile never measured (the estimate counts none for it)."""

from planner.efficiency import unmeasured_dequant_warning
from planner.hardware import Efficiency


def _eff(dequant):
    return Efficiency(bandwidth_fraction=0.9, compute_fraction=0.5, dequant_overhead=dequant, source="test")


def test_an_unmeasured_quantized_format_names_the_fitted_costs_and_the_largest_for_comparison():
    w = unmeasured_dequant_warning(_eff({"q4_0": 0.07, "q8_0": 0.64}), "q6_k", "llamacpp")
    # the fitted costs as GEMM-time percentages: 0.07 -> +7%, 0.64 -> +64%; the largest, 64%, for comparison
    assert w is not None and "q6_k" in w and "q4_0 +7%" in w and "q8_0 +64%" in w and "cost up to 64%" in w


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
