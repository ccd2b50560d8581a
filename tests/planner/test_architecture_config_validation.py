"""config.json fields go through one schema before any arithmetic (issue 15): every bad config is one line naming
the field, never ValueError / OverflowError / ZeroDivisionError / a pydantic traceback; lenient readings are refused."""

import json
import math
import subprocess
import sys

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from planner.errors import PlannerError
from planner.hf_config import from_hf_config, supported_model_types
from planner.ops import kv_bytes_per_sequence, weight_bytes
from planner.quantization import weight_format

GOOD = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 256, "intermediate_size": 512,
        "num_attention_heads": 8, "num_key_value_heads": 2, "num_hidden_layers": 2, "vocab_size": 1000,
        "max_position_embeddings": 2048}


def bad(**kw):
    return {**GOOD, **kw}


@pytest.mark.parametrize("cfg, field, needle", [
    (bad(hidden_size="4k"), "hidden_size", "valid integer"),
    (bad(hidden_size=float("nan")), "hidden_size", "valid integer"),
    (bad(hidden_size=float("inf")), "hidden_size", "valid integer"),
    (bad(hidden_size=4096.7), "hidden_size", "valid integer"),        # never truncated to 4096
    (bad(hidden_size=True), "hidden_size", "valid integer"),
    (bad(hidden_size={"a": [1, {"b": 2}]}), "hidden_size", "valid integer"),
    (bad(num_attention_heads=0), "num_attention_heads", "greater than 0"),
    (bad(num_hidden_layers=10 ** 8), "num_hidden_layers", "less than or equal to 1000"),
    (bad(vocab_size=10 ** 8), "vocab_size", "less than or equal to 10000000"),
    (bad(hidden_size=2 * 10 ** 6), "hidden_size", "less than or equal to 1000000"),
    (bad(tie_word_embeddings="no"), "tie_word_embeddings", "valid boolean"),  # not read as true
    (bad(hidden_size=250), "(config)", "not divisible by num_attention_heads"),
    (bad(num_key_value_heads=3), "(config)", "multiple of num_key_value_heads"),
    (bad(model_type="mixtral", num_local_experts=10 ** 6, num_experts_per_tok=2), "num_local_experts",
     "less than or equal to 100000"),
    (bad(model_type="gpt_oss", num_local_experts=4, num_experts_per_tok=2, layer_types=["full_attention"]), "",
     "layer_types has 1 entries for 2 layers"),
    (bad(sliding_window=-5), "sliding_window", "greater than 0"),
])
def test_bad_field_is_one_line_naming_it(cfg, field, needle):
    with pytest.raises(PlannerError) as ei:
        from_hf_config(cfg, where="config.json")
    msg = str(ei.value)
    assert msg.startswith("config.json: ") and "\n" not in msg
    assert f": {field}:" in msg or field == ""
    assert needle in msg


def test_unknown_model_type_lists_the_supported_ones_in_one_line():
    with pytest.raises(PlannerError) as ei:
        from_hf_config({"model_type": "rwkv7", "architectures": ["Rwkv7ForCausalLM"]})
    msg = str(ei.value)
    assert "\n" not in msg and "'rwkv7'" in msg
    assert all(t in msg for t in supported_model_types()) and "gpt_oss" in msg and "nemotron_h" in msg


@pytest.mark.parametrize("cfg", [[1, 2], "llama", None, {"model_type": "gemma3", "text_config": [1]}])
def test_not_an_object(cfg):
    with pytest.raises(PlannerError):
        from_hf_config(cfg)


def test_cli_bad_config_exits_2_with_one_error_line(tmp_path):
    p = tmp_path / "config.json"
    p.write_text(json.dumps(bad(num_attention_heads=0)))
    r = subprocess.run([sys.executable, "-m", "planner", "estimate", "-m", str(p), "-H", "h100-sxm"],
                       capture_output=True, text=True)
    assert r.returncode == 2
    lines = r.stderr.strip().splitlines() + r.stdout.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and "num_attention_heads" in lines[0]


_hostile = st.one_of(st.integers(min_value=-2, max_value=2 ** 70), st.floats(allow_nan=True, allow_infinity=True),
                     st.text(max_size=5), st.booleans(), st.none(), st.lists(st.integers(), max_size=3),
                     st.dictionaries(st.text(max_size=3), st.integers(), max_size=2))
_FIELDS = ["hidden_size", "num_attention_heads", "num_key_value_heads", "num_hidden_layers", "intermediate_size",
           "vocab_size", "max_position_embeddings", "head_dim", "sliding_window", "tie_word_embeddings",
           "num_local_experts", "num_experts_per_tok", "moe_intermediate_size", "kv_lora_rank", "layer_types",
           "attention_chunk_size", "state_size", "hybrid_override_pattern", "text_config"]
_TYPES = ["llama", "mixtral", "qwen3_moe", "deepseek_v3", "gpt_oss", "llama4_text", "qwen3_next", "nemotron_h",
          "cohere", "falcon_h1", "jamba", "mamba2", "gemma3", "glm4_moe", "deepseek_v32"]


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(mtype=st.sampled_from(_TYPES), changes=st.dictionaries(st.sampled_from(_FIELDS), _hostile, max_size=3))
def test_fuzz_config_is_a_model_or_one_clean_error(mtype, changes):
    cfg = {**GOOD, "model_type": mtype, **changes}
    try:
        m = from_hf_config(cfg)
    except PlannerError as exc:
        assert "\n" not in str(exc)
        return
    fmt = weight_format("bf16")
    for v in (m.total_params, weight_bytes(m, fmt), float(kv_bytes_per_sequence(m, "fp16", 4096))):
        assert math.isfinite(v) and v >= 0


def test_family_alias_errors_name_the_config_field_and_auto_head_dim():
    # Falcon-H1 spells the SSM head dim mamba_d_head; "auto" means d_ssm / heads (3072 / 24 = 128), junk is refused
    import pathlib

    cfg = json.loads((pathlib.Path(__file__).resolve().parents[1] / "data/configs/falcon-h1-7b.json").read_text())
    assert from_hf_config({**cfg, "mamba_d_head": "auto"}).ssm.head_dim == 128
    with pytest.raises(PlannerError) as ei:
        from_hf_config({**cfg, "mamba_d_head": "x"}, where="config.json")
    assert str(ei.value) == "config.json: mamba_d_head: Input should be a valid integer"
