"""One decode step of the random-weight layer stack vs the fp32 reference stack."""

from __future__ import annotations

import dataclasses
import math

import pytest
import torch

import validate.kernels.decode_step as ds
from validate.kernels.decode_step import CONFIGS, DecodeStackConfig, build_decode_stack
from validate.reference import decode_step_ref
from validate.tolerances import assert_close

TINY = CONFIGS["tiny"]
STACK_KEY = {torch.float32: "fp32_stack", torch.bfloat16: "bf16_stack", torch.float16: "fp16_stack"}


def _paged_batch(stack, context_lens: list[int], seed: int):
    """Shuffled block tables for ``context_lens`` (including the new token), with every block no
    sequence owns, every slot past each context and every spare table entry poisoned (NaN)."""
    bs = stack.block_size
    num_blocks = stack.k_caches[0].shape[0]
    per_seq = [math.ceil(c / bs) for c in context_lens]
    perm = torch.randperm(num_blocks, generator=torch.Generator().manual_seed(seed)).tolist()
    spare = perm[sum(per_seq) :]
    table = torch.full((len(context_lens), max(per_seq) + 2), spare[0], dtype=torch.int32)
    cursor = 0
    for b, n in enumerate(per_seq):
        table[b, :n] = torch.tensor(perm[cursor : cursor + n], dtype=torch.int32)
        cursor += n
    for cache in stack.k_caches + stack.v_caches:
        cache[spare] = float("nan")
        for b, c in enumerate(context_lens):
            cache[int(table[b, per_seq[b] - 1]), (c - 1) % bs + 1 :] = float("nan")
    return table, torch.tensor(context_lens, dtype=torch.int32)


CASES = [
    pytest.param("dense", torch.float32, id="fp32"),
    pytest.param("dense", torch.bfloat16, id="bf16"),
    pytest.param("dense", torch.float16, id="fp16"),
    pytest.param("int8", torch.bfloat16, id="int8-bf16"),
    pytest.param("int4", torch.bfloat16, id="int4-bf16"),
    pytest.param("int8", torch.float32, id="int8-fp32"),
    pytest.param("int4", torch.float32, id="int4-fp32"),
]


@pytest.mark.parametrize("rope", [True, False], ids=["rope", "norope"])
@pytest.mark.parametrize("weight_format,dtype", CASES)
def test_step_matches_reference(weight_format, dtype, rope):
    cfg = TINY if rope else dataclasses.replace(TINY, rope_theta=None)
    stack = build_decode_stack(cfg, weight_format, dtype, "cpu", seed=11, num_blocks=40,
                               block_size=16, group_size=64)  # fmt: skip
    table, ctx = _paged_batch(stack, [1, 17, 100], seed=4)
    x = torch.randn(3, cfg.hidden, generator=torch.Generator().manual_seed(5)).to(dtype)
    k_ref = [c.clone() for c in stack.k_caches]
    v_ref = [c.clone() for c in stack.v_caches]
    expected = decode_step_ref(cfg, stack.reference_weights(), k_ref, v_ref, x, table, ctx)
    out = stack.step(x, table, ctx)
    assert out.shape == (3, cfg.hidden) and out.dtype == dtype
    assert_close(out, expected, STACK_KEY[dtype])
    # The new token's K/V went to exactly the slot the table names, in every layer.
    key = "fp32" if dtype == torch.float32 else STACK_KEY[dtype]
    for got, want in zip(stack.k_caches + stack.v_caches, k_ref + v_ref):
        assert_close(torch.nan_to_num(got, nan=7.0), torch.nan_to_num(want, nan=7.0), key)


def test_step_is_deterministic_in_seed():
    a = build_decode_stack(TINY, "int4", torch.float32, "cpu", seed=3, num_blocks=8)
    b = build_decode_stack(TINY, "int4", torch.float32, "cpu", seed=3, num_blocks=8)
    table, ctx = torch.tensor([[2, 5]], dtype=torch.int32), torch.tensor([20], dtype=torch.int32)
    x = torch.randn(1, TINY.hidden)
    torch.testing.assert_close(a.step(x, table, ctx), b.step(x, table, ctx), rtol=0, atol=0)


def test_params_per_layer_adds_up():
    stack = build_decode_stack(TINY, "dense", torch.float32, "cpu", seed=0, num_blocks=4)
    lw = stack.layers[0]
    counted = sum(lin.n * lin.k for lin in (lw.wqkv, lw.wo, lw.w13, lw.w2))
    counted += lw.attn_norm.numel() + lw.mlp_norm.numel()
    assert counted == TINY.params_per_layer
    assert stack.weight_bytes() == TINY.n_layers * (TINY.params_per_layer - 2 * TINY.hidden) * 4


def test_llama3_8b_parameter_count():
    """Published: Llama-3-8B has 8,030,261,248 parameters (HF safetensors metadata); the layer
    stack plus untied embedding and LM head (128256 x 4096 each) and the final norm adds up."""
    cfg = CONFIGS["llama3-8b"]
    vocab = 128_256
    total = cfg.n_layers * cfg.params_per_layer + 2 * vocab * cfg.hidden + cfg.hidden
    assert total == 8_030_261_248


def test_config_validation():
    with pytest.raises(ValueError):
        DecodeStackConfig(hidden=64, n_heads=3, n_kv_heads=2, head_dim=16, intermediate=64, n_layers=1)


def test_public_surface():
    for name in ds.__all__:
        assert hasattr(ds, name)
