"""Speculative decoding with MTP, EAGLE and n-gram drafts: the draft's size from its architecture and the
speed-up, derived by hand on the plain roofline (--datasheet: efficiency 1.0, no overheads)."""

import json

import pytest

from planner.architecture import load_model
from planner.cli import main
from planner.errors import PlannerError
from planner.serving.speculative import (acceptance_length, draft_head_params, expected_tokens, speculative_method,
                                         speedup_from_costs)


def test_deepseek_v3_mtp_module_size():
    """One MTP module of DeepSeek-V3 (arXiv:2412.19437 sec. 2.2): an MoE transformer block (MLA attention
    187,107,328 + 256 experts x 44,040,192 + 1 shared expert 44,040,192 + router 7168 x 256 + 2 norms of 7168)
    + its output norm 7168 + the 2h -> h projection 2 x 7168^2 and its two input norms: 11,610,067,968 params.
    With the shared embedding and head counted again (2 x 129,280 x 7168) it is 13.46e9, against the 14B the
    report gives for the MTP module (685B checkpoint - 671B main model): within 4%."""
    m = load_model("deepseek-v3")
    layer = 187_107_328 + 256 * 44_040_192 + 44_040_192 + 7168 * 256 + 2 * 7168
    hand = layer + 7168 + 2 * 7168 * 7168 + 2 * 7168
    assert draft_head_params(m, "mtp") == hand == 11_610_067_968
    assert (hand + 2 * 129_280 * 7168) / 14e9 == pytest.approx(1.0, abs=0.04)


def test_mtp_expected_tokens():
    """DeepSeek-V3 reports an 85-90% acceptance of the second (MTP) token: 1 + alpha = 1.85-1.90 tokens per pass."""
    assert acceptance_length(1, alpha=0.85) == pytest.approx(1.85)
    assert expected_tokens(0.9, 1) == pytest.approx(1.9)


def test_eagle_speedup_by_hand():
    """Llama-3.1-8B, fp16, H100 SXM datasheet roofline, batch 1, context 1024: every step is memory bound.
    Target step reads its weights except the embedding table, 8,030,261,248 - 525,336,576 = 7,504,924,672 params
    x 2 B = 15.0098 GB, plus KV 1024 tokens x 131,072 B (32 layers x 2 x 8 x 128 x 2) = 0.1342 GB: 15.144 GB.
    EAGLE draft step: one decoder layer 218,112,000 params (incl. its 2 norms) + final norm 4096 + LM head
    525,336,576 + fusion 2 x 4096^2 + 2 x 4096 = 777,015,296 params x 2 B = 1.5540 GB + 1 layer of KV
    (1024 x 4096 B = 4.2 MB): 1.5582 GB -> cost ratio 1.5582 / 15.144 = 0.1029.
    Verify of gamma + 1 = 5 tokens reads the same weights: ~1.0 target step.
    Acceptance length 3, gamma 4: speed-up = 3 / (4 x 0.1029 + 1.0) = 2.122."""
    r = speculative_method("llama-3.1-8b", "h100-sxm", "eagle", gamma=4, tau=3.0, efficiency="datasheet")
    assert r["cost_ratio"] == pytest.approx(1.5582 / 15.144, rel=0.01)
    assert r["verify_step_ms"] / r["target_step_ms"] == pytest.approx(1.0, abs=0.01)
    assert r["speedup"] == pytest.approx(3 / (4 * 0.1029 + 1.0), rel=0.01)
    assert r["extra_params_b"] == pytest.approx(0.2517, abs=1e-4)   # layer + fusion, head shared
    # break-even acceptance length: (gamma t_draft + t_verify) / t_target = 4 x 0.1029 + 1.0 = 1.41
    assert r["breakeven_acceptance_length"] == pytest.approx(1.41, abs=0.01)
    assert speedup_from_costs(r["breakeven_acceptance_length"], 4, r["target_step_ms"], r["draft_step_ms"],
                              r["verify_step_ms"]) == pytest.approx(1.0, rel=1e-12)


def test_ngram_speedup_is_the_acceptance_length_when_memory_bound():
    """No draft compute; verifying 5 tokens costs one memory-bound target step: speed-up = tau / 1.0."""
    r = speculative_method("llama-3.1-8b", "h100-sxm", "ngram", gamma=4, tau=2.0, efficiency="datasheet")
    assert r["draft_step_ms"] == 0 and r["extra_weights_gb"] == 0
    assert r["speedup"] == pytest.approx(2.0, rel=0.01)


def test_mtp_on_eight_h200():
    r = speculative_method("deepseek-v3", "h200-sxm", "mtp", gamma=1, alpha=0.85, weights="fp8", tp=8)
    assert r["fits"] and r["acceptance_length"] == pytest.approx(1.85)
    assert r["speedup"] == pytest.approx(1.85 * r["target_step_ms"] / (r["draft_step_ms"] + r["verify_step_ms"]))
    assert 1.0 < r["speedup"] < 1.85


def test_bad_inputs():
    with pytest.raises(PlannerError, match="--method: mtp needs"):
        speculative_method("llama-3.1-8b", "h100-sxm", "mtp", gamma=1, alpha=0.8)
    with pytest.raises(PlannerError, match="--acceptance-length"):
        speculative_method("llama-3.1-8b", "h100-sxm", "eagle", gamma=2, tau=4.0)
    with pytest.raises(PlannerError, match="--method: unknown"):
        speculative_method("llama-3.1-8b", "h100-sxm", "medusa", gamma=2, tau=2.0)


def test_cli_speculative_methods(capsys):
    assert main(["speculative", "-m", "llama-3.1-8b", "-H", "h100-sxm", "--method", "eagle",
                 "--acceptance-length", "3", "--gamma", "2,4", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert [r["gamma"] for r in rows] == [2, 4] and all(r["method"] == "eagle" for r in rows)
    assert main(["speculative", "-m", "deepseek-v3", "-H", "h200-sxm", "-w", "fp8", "--tp", "8", "--method", "mtp",
                 "--acceptance", "0.85", "--gamma", "1"]) == 0
    assert "speed-up" in capsys.readouterr().out
    assert main(["speculative", "-m", "llama-3.1-8b", "-H", "h100-sxm"]) == 2
    assert capsys.readouterr().err.startswith("error: --draft:")
    assert main(["speculative", "-m", "llama-3.1-8b", "-H", "h100-sxm", "--method", "ngram",
                 "--acceptance-length", "5", "--gamma", "1,2"]) == 2
    assert capsys.readouterr().err.startswith("error: --acceptance-length:")


def test_the_engine_step_cost_is_paid_once_per_speculative_iteration():
    """A fixed per-step cost S (Efficiency.step_overhead_ms: scheduling, sampling, launch) belongs to the engine's
    iteration: the baseline decode step and the verify pass each pay it once, the gamma draft forwards inside the
    iteration do not (vLLM / SGLang / TensorRT-LLM run them there). Adding 10 ms to S on the plain roofline must
    therefore add exactly 10 ms to the target and verify steps, nothing to the draft step, and turn the speed-up
    into tau (t_target + 10) / (gamma t_draft + t_verify + 10)."""
    from planner.hardware import DATASHEET_EFFICIENCY

    slow = DATASHEET_EFFICIENCY.model_copy(update={"step_overhead_ms": 10.0})
    for method, draft in (("eagle", None), ("draft", "llama-3.2-1b")):
        kw = dict(gamma=4, tau=3.0) if method == "eagle" else dict(gamma=4, alpha=0.7)
        a = speculative_method("llama-3.1-8b", "h100-sxm", method, efficiency="datasheet", draft=draft, **kw)
        b = speculative_method("llama-3.1-8b", "h100-sxm", method, efficiency=slow, draft=draft, **kw)
        assert b["target_step_ms"] - a["target_step_ms"] == pytest.approx(10.0, rel=1e-9)
        assert b["verify_step_ms"] - a["verify_step_ms"] == pytest.approx(10.0, rel=1e-9)
        assert b["draft_step_ms"] == pytest.approx(a["draft_step_ms"], rel=1e-12)
        tokens = 3.0 if method == "eagle" else (1 - 0.7 ** 5) / (1 - 0.7)
        assert b["speedup"] == pytest.approx(tokens * b["target_step_ms"]
                                             / (4 * b["draft_step_ms"] + b["verify_step_ms"]), rel=1e-9)


def test_speculative_takes_a_runtime_profile(capsys):
    """`planner speculative --runtime` times target, draft and verify with the profile's fitted efficiency, as
    `planner estimate --runtime` does: its target step is estimate's decode step at the same context (a prompt of
    `context` - 1 tokens and 2 outputs: the one decode step runs after `context` cached tokens)."""
    from planner.estimate import estimate

    assert main(["speculative", "-m", "llama-3.1-8b", "-H", "h100-sxm", "--method", "eagle", "--gamma", "3",
                 "--context", "1024", "--runtime", "vllm", "--json"]) == 0
    r = json.loads(capsys.readouterr().out)[0]
    e = estimate("llama-3.1-8b", "h100-sxm", "fp16", batch=1, prompt=1024, output=2, runtime="vllm")
    assert r["target_step_ms"] == pytest.approx(e.decode.latency_ms_per_token, rel=1e-6)
    assert main(["speculative", "-m", "llama-3.1-8b", "-H", "apple-m2-ultra", "--runtime", "trtllm",
                 "--draft", "llama-3.2-1b"]) == 2
    assert "--runtime: trtllm (TensorRT-LLM) runs on NVIDIA GPUs only, and apple-m2-ultra is Apple's" in \
        capsys.readouterr().err
