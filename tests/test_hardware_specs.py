"""The hardware catalog (hardware_specs/*.yaml): every required id loads, published facts hold, peaks are dense.

Expected numbers are published facts with their source beside them (shared/data/hardware_facts.csv names the
documents); the relative tolerance only absorbs the vendor's own rounding.
"""

from __future__ import annotations

import copy
import math

import pytest

from planner.errors import PlannerError
from planner.hardware import load_all_hardware, load_hardware, parse_hardware

NVIDIA_DATACENTER = [
    "a100-40gb-sxm", "a100-80gb-sxm", "a100-80gb-pcie", "a10", "l4", "l40s", "h100-sxm", "h100-pcie", "h200-sxm",
    "b200", "gb200-b200", "a40", "rtx-a6000", "rtx-6000-ada", "rtx-4000-ada", "rtx-5000-ada",
]
AMD_DATACENTER = ["mi300x", "mi250x-gcd"]
CONSUMER = [
    "rtx-3060-12gb", "rtx-3070", "rtx-3080", "rtx-3080-ti", "rtx-3090", "rtx-3090-ti", "rtx-4070-ti", "rtx-4080",
    "rtx-4090", "rtx-5090",
]
EDGE = ["dgx-spark", "jetson-agx-orin-64gb"]
APPLE = [
    "apple-m1", "apple-m1-pro", "apple-m1-max", "apple-m1-ultra", "apple-m2", "apple-m2-pro", "apple-m2-max",
    "apple-m2-ultra", "apple-m3", "apple-m3-pro", "apple-m3-max", "apple-m3-ultra", "apple-m4", "apple-m4-pro",
    "apple-m4-max",
    # GPU-core bins (bandwidth or GPU core count differs from the top bin)
    "apple-m1-7c", "apple-m1-pro-14c", "apple-m1-max-24c", "apple-m1-ultra-48c", "apple-m2-8c", "apple-m2-pro-16c",
    "apple-m2-max-30c", "apple-m2-ultra-60c", "apple-m3-pro-14c", "apple-m3-max-30c", "apple-m3-ultra-60c",
    "apple-m4-pro-16c", "apple-m4-max-32c",
]
PHONES_LAPTOPS = ["snapdragon-8-gen3", "snapdragon-8-elite", "dimensity-9300", "core-ultra-5-226v", "apple-a17-pro", "apple-a18-pro", "tensor-g4"]
CPU = ["x86-server-cpu"]
# issue 9: the devices people run today
NEW_NVIDIA_DATACENTER = ["gh200", "gh200-144gb", "gb300", "h100-nvl", "h200-nvl", "h800", "a800", "h20", "l20"]
NEW_OTHER = [
    "rtx-pro-6000-blackwell", "rtx-5080", "rtx-5070-ti", "rtx-5060-ti-16gb", "rtx-2080-ti", "rtx-3060-8gb",
    "ryzen-ai-max-395", "rx-7900-xtx", "radeon-ai-pro-r9700", "mi325x", "mi355x", "gaudi-3", "arc-pro-b60", "arc-b580", "core-ultra-7-258v",
    "snapdragon-x-elite", "jetson-orin-nano-super", "jetson-thor", "tpu-v5e", "tpu-v6e",
]
# session 35: devices of published benchmarks the catalog lacked
NEW_35 = [
    "a10g", "a30", "l40", "v100-pcie-16gb", "v100-pcie-32gb", "p40", "p100-pcie-16gb", "rtx-a4000", "rtx-a5000",
    "rtx-4060-ti-16gb", "rtx-4070", "rtx-4070-super", "rtx-4070-ti-super", "rtx-4080-super", "rtx-3060-ti",
    "rtx-3070-ti", "rx-7900-xt", "rx-9070-xt", "mi210", "mi100", "arc-a770-16gb",
]
# session 43: cards of published llama.cpp / vLLM tables the catalog still lacked
NEW_43 = [
    "rtx-5070", "rtx-5060-ti-8gb", "rtx-5060", "rtx-4060", "rtx-4060-ti-8gb", "rtx-3050-8gb", "gtx-1080-ti", "b300",
    "v100-sxm2-16gb", "rtx-a2000-12gb", "rtx-2000-ada", "rtx-pro-5000-blackwell", "rtx-pro-4000-blackwell",
    "rx-7800-xt", "rx-7900-gre", "rx-7600", "radeon-pro-w7900", "rx-9070", "arc-b570", "apple-m5",
    "a100-40gb-pcie", "gaudi-2", "intel-max-1550", "quadro-rtx-8000", "titan-rtx", "ryzen-ai-9-hx-370",
]
REQUIRED = (NVIDIA_DATACENTER + AMD_DATACENTER + CONSUMER + EDGE + APPLE + PHONES_LAPTOPS + CPU
            + NEW_NVIDIA_DATACENTER + NEW_OTHER + NEW_35 + NEW_43)

# Rounding in the vendors' own tables (e.g. 1978.9 vs 2 x 989.4) stays well under this.
REL = 1e-3


@pytest.fixture(scope="module")
def catalog():
    return {h.id: h for h in load_all_hardware()}


def test_required_ids_exist(catalog):
    missing = sorted(set(REQUIRED) - set(catalog))
    assert not missing, f"missing hardware specs: {missing}"


@pytest.mark.parametrize(
    ("hw_id", "field", "expected"),
    [
        # NVIDIA A100 Tensor Core GPU Datasheet: 40GB SXM4 1,555 GB/s
        ("a100-40gb-sxm", "bandwidth", 1555),
        # NVIDIA H100 architecture whitepaper: dense BF16 989.4 (datasheet 1,979* is with sparsity)
        ("h100-sxm", "bf16", 989.4),
        # NVIDIA Ada whitepaper v2.1 Appendix A: RTX 4090 BF16 (FP32 accumulate) 165.2 dense
        ("rtx-4090", "bf16", 165.2),
        # NVIDIA DGX Spark product page: 273 GB/s; '1 PFLOP FP4' is with sparsity -> 500 dense
        ("dgx-spark", "bandwidth", 273),
        ("dgx-spark", "fp4", 500),
        # NVIDIA H200 Datasheet: 4.8 TB/s
        ("h200-sxm", "bandwidth", 4800),
        # NVIDIA H100 Datasheet, H100 NVL column: 3.9 TB/s; FP8 3,341 TFLOPS with sparsity -> 1,670.5 dense
        ("h100-nvl", "bandwidth", 3900),
        ("h100-nvl", "fp8", 3341 / 2),
        # NVIDIA GH200 datasheet: 96 GB HBM3 at 4 TB/s; BF16 1,979 with sparsity -> 989.4 dense (H100 whitepaper)
        ("gh200", "bandwidth", 4000),
        ("gh200", "bf16", 989.4),
        # GB300 NVL72: 576 TB/s and 1,080 PF dense FP4 per 72 GPUs
        ("gb300", "bandwidth", 576e3 / 72),
        ("gb300", "fp4", 1080e3 / 72),
        # NVIDIA RTX Blackwell whitepaper, RTX 5080: 30 Gbps x 256-bit / 8 = 960 GB/s; FP4 1,801 sparse -> 900.4
        ("rtx-5080", "bandwidth", 30 * 256 / 8),
        ("rtx-5080", "fp4", 1801 / 2),
        # GeForce half rate: RTX 5070 Ti 1,406 sparse-FP4 AI TOPS -> fp16 (FP32 accumulate) = 1406 / 16
        ("rtx-5070-ti", "fp16", 1406 / 16),
        # RTX 3090 Ti product page: 21 Gbps x 384-bit / 8 = 1,008 GB/s; '320 Tensor TFLOPS' = sparse FP16 with FP16
        # accumulate -> dense 160, GeForce FP32-accumulate half rate 80, INT8 2 x 160 = 320
        ("rtx-3090-ti", "bandwidth", 21 * 384 / 8),
        ("rtx-3090-ti", "fp16", 320 / 2 / 2),
        ("rtx-3090-ti", "int8", 320),
        # Turing whitepaper, RTX 2080 Ti: FP16 tensor with FP32 accumulate 53.8 (reference board)
        ("rtx-2080-ti", "fp16", 53.8),
        # AMD data sheets list dense: MI325X FP16 1,307.4 at 6 TB/s; MI355X FP8 5.0 PF at 8 TB/s
        ("mi325x", "bf16", 1307.4),
        ("mi325x", "bandwidth", 6000),
        ("mi355x", "fp8", 5033.2),
        # AMD RX 7900 XTX: 122.8 TFLOPS FP16; 20 Gbps x 384-bit / 8 = 960 GB/s
        ("rx-7900-xtx", "fp16", 122.8),
        ("rx-7900-xtx", "bandwidth", 20 * 384 / 8),
        # AMD Radeon AI PRO R9700: 20 Gbps x 256-bit / 8 = 640 GB/s; the product page's sparse 389 TFLOPS FP16 and
        # 1,557 TOPS INT4 halved (RDNA 4 WMMA: 8,192 sparse IU4 ops per CU per clock x 64 CUs x 2.97 GHz = 1,557)
        ("radeon-ai-pro-r9700", "bandwidth", 20 * 256 / 8),
        ("radeon-ai-pro-r9700", "fp16", 389.1 / 2),
        ("radeon-ai-pro-r9700", "int4", 8192 * 64 * 2.97e9 / 1e12 / 2),
        # session 35. Datasheets (dense): A30 933 GB/s, FP16 165, INT8 330; L40 864 GB/s, FP16 181.05 (its own
        # datasheet: half the L40S's 362); V100 PCIe 900 GB/s, 112 TFLOPS tensor; Tesla P40 346 GB/s, 47 INT8 TOPS
        # (DP4A, no tensor cores); P100 PCIe 732 GB/s, FP16 18.7 (2 x FP32, no tensor cores); RTX A5000 768 GB/s and
        # 222.2 sparse tensor TFLOPS / 2; RTX A4000 14 Gbps x 256-bit / 8 = 448 GB/s and 153.4 / 2
        ("a30", "bandwidth", 933), ("a30", "fp16", 165), ("a30", "int8", 330),
        ("l40", "bandwidth", 864), ("l40", "fp16", 181.05),
        ("v100-pcie-32gb", "bandwidth", 900), ("v100-pcie-32gb", "fp16", 112),
        ("p40", "bandwidth", 346), ("p40", "int8", 47),
        ("p100-pcie-16gb", "bandwidth", 732), ("p100-pcie-16gb", "fp16", 18.7),
        ("rtx-a5000", "bandwidth", 768), ("rtx-a5000", "fp16", 222.2 / 2),
        ("rtx-a4000", "bandwidth", 14 * 256 / 8), ("rtx-a4000", "fp16", 153.4 / 2),
        # A10G (no datasheet): GA102's GeForce FP32-accumulate rate, 80 SMs x 512 FLOP/clk x 1.71 GHz (measured 69.47)
        ("a10g", "fp16", 80 * 512 * 1.71e9 / 1e12),
        # RTX 4080 SUPER: 23 Gbps x 256-bit / 8; int8 = NVIDIA's 836 AI TOPS (sparse) / 2
        ("rtx-4080-super", "bandwidth", 23 * 256 / 8), ("rtx-4080-super", "int8", 836 / 2),
        ("rtx-4070-ti-super", "bandwidth", 21 * 256 / 8),
        # RX 7900 XT: 20 Gbps x 320-bit / 8 = 800 GB/s, 103 TFLOPS FP16; RX 9070 XT 20 Gbps x 256-bit / 8, INT4 1,557
        # sparse / 2; MI210 1.6 TB/s, 181 TFLOPS FP16 matrix; MI100 2.4 Gbps x 4096-bit / 8 = 1,228.8 GB/s, 184.6 FP16;
        # Arc A770 16GB 17.5 Gbps x 256-bit / 8 = 560 GB/s
        ("rx-7900-xt", "bandwidth", 20 * 320 / 8), ("rx-7900-xt", "fp16", 103),
        ("rx-9070-xt", "bandwidth", 20 * 256 / 8), ("rx-9070-xt", "int4", 1557 / 2),
        ("mi210", "bandwidth", 1600), ("mi210", "fp16", 181),
        ("mi100", "bandwidth", 2.4 * 4096 / 8), ("mi100", "fp16", 184.6),
        ("arc-a770-16gb", "bandwidth", 17.5 * 256 / 8),
        # Strix Halo: LPDDR5X-8000 x 256-bit / 8 = 256 GB/s
        ("ryzen-ai-max-395", "bandwidth", 8000 * 256 / 8 / 1000),
        # Intel Gaudi 3 white paper: 3.7 TB/s, 1,835 TFLOPS BF16
        ("gaudi-3", "bandwidth", 3700),
        ("gaudi-3", "bf16", 1835),
        # Intel Arc B580: 19 Gbps x 192-bit / 8 = 456 GB/s; 233 INT8 TOPS
        ("arc-b580", "bandwidth", 19 * 192 / 8),
        ("arc-b580", "int8", 233),
        # Google Cloud TPU docs: v5e 819 GB/s, 197 BF16 TFLOPS; v6e 1,640 GB/s, 918 BF16 TFLOPS
        ("tpu-v5e", "bandwidth", 819),
        ("tpu-v5e", "bf16", 197),
        ("tpu-v6e", "bandwidth", 1640),
        ("tpu-v6e", "bf16", 918),
        # Jetson Orin Nano Super: 102 GB/s; 67 INT8 TOPS sparse -> 33.5 dense
        ("jetson-orin-nano-super", "bandwidth", 102),
        ("jetson-orin-nano-super", "int8", 67 / 2),
        # session 43. RTX 5070: 28 Gbps x 192-bit / 8, 988 AI TOPS (sparse FP4) / 2 / 4 = FP8 with FP32 accumulate;
        # RTX 4060: 17 Gbps x 128-bit / 8 = 272 GB/s; RTX 5060 / 5060 Ti 8GB: 28 Gbps x 128-bit / 8 = 448 GB/s;
        # GTX 1080 Ti: 11 Gbps x 352-bit / 8 = 484 GB/s; B300 (HGX, per GPU) 8 TB/s, 2,250 dense BF16 (36 PF sparse /
        # 8 / 2); V100 SXM2 900 GB/s, 125 tensor TFLOPS; RTX A2000 12GB 288 GB/s, 63.9 sparse / 2; RX 7800 XT
        # 19.5 Gbps x 256-bit / 8 = 624 GB/s, 60 CUs x 512 FLOP/clk x 2.43 GHz; W7900 18 Gbps x 384-bit / 8 = 864 GB/s;
        # Arc B570 19 Gbps x 160-bit / 8 = 380 GB/s, 203 INT8 TOPS; Apple M5 153 GB/s (Apple Newsroom)
        ("rtx-5070", "bandwidth", 28 * 192 / 8), ("rtx-5070", "fp8", 988 / 2 / 4),
        ("rtx-4060", "bandwidth", 17 * 128 / 8), ("rtx-5060", "bandwidth", 28 * 128 / 8),
        ("rtx-5060-ti-8gb", "bandwidth", 28 * 128 / 8), ("gtx-1080-ti", "bandwidth", 11 * 352 / 8),
        ("b300", "bandwidth", 8000), ("b300", "bf16", 36000 / 8 / 2),
        ("v100-sxm2-16gb", "bandwidth", 900), ("v100-sxm2-16gb", "fp16", 125),
        ("rtx-a2000-12gb", "bandwidth", 288), ("rtx-a2000-12gb", "fp16", 63.9 / 2),
        ("rx-7800-xt", "bandwidth", 19.5 * 256 / 8), ("rx-7800-xt", "fp16", 60 * 512 * 2.43e9 / 1e12),
        ("radeon-pro-w7900", "bandwidth", 18 * 384 / 8),
        ("arc-b570", "bandwidth", 19 * 160 / 8), ("arc-b570", "int8", 203),
        ("apple-m5", "bandwidth", 153),
        # A100 datasheet PCIe 40GB column: 1,555 GB/s, the SXM peaks (312 dense fp16); Gaudi 2: 2.45 TB/s HBM2e, 432
        # BF16 TFLOPS (Intel, Hot Chips 2024); Max 1550: 3.2768 TB/s, 128 Xe cores x 4,096 FLOP/clk x 1.6 GHz BF16
        ("a100-40gb-pcie", "bandwidth", 1555), ("a100-40gb-pcie", "fp16", 312),
        ("gaudi-2", "bandwidth", 2450), ("gaudi-2", "bf16", 432),
        ("intel-max-1550", "bandwidth", 3276.8), ("intel-max-1550", "bf16", 128 * 4096 * 1.6e9 / 1e12),
    ],
)
def test_published_facts(catalog, hw_id, field, expected):
    spec = catalog[hw_id]
    got = spec.memory.bandwidth_gbs if field == "bandwidth" else spec.units[0].peak_tflops[field]
    assert got == pytest.approx(expected, rel=REL)


def test_geforce_fp16_is_the_fp32_accumulate_half_rate(catalog):
    # Ada whitepaper: RTX 4090 FP16 tensor with FP16 accumulate 330.3 dense; FP32 accumulate is half of it.
    assert catalog["rtx-4090"].units[0].peak_tflops["fp16"] == pytest.approx(330.3 / 2, rel=REL)


# GB300 is left out: Blackwell Ultra cut INT8 to 23 POPS sparse per rack (NVIDIA GB300 NVL72 page)
@pytest.mark.parametrize("hw_id", NVIDIA_DATACENTER + [i for i in NEW_NVIDIA_DATACENTER if i != "gb300"])
def test_nvidia_datacenter_int8_is_twice_fp16(catalog, hw_id):
    """Dense Ampere/Ada/Hopper/Blackwell tensor cores run INT8 at 2x FP16; a sparse figure left in breaks this.

    Tolerance 2%: the L40S datasheet itself prints FP16 362.05 against INT8 733 (733/724.1 = 1.012).
    """
    peaks = catalog[hw_id].units[0].peak_tflops
    if "int8" in peaks and "fp16" in peaks:
        assert peaks["int8"] == pytest.approx(2 * peaks["fp16"], rel=0.02)


@pytest.mark.parametrize("hw_id", NVIDIA_DATACENTER + AMD_DATACENTER + ["gh200", "h100-nvl", "h200-nvl", "h800", "a800",
                                                                     "h20", "l20", "mi325x", "mi355x", "gaudi-3"])
def test_datacenter_gpus_have_price_and_interconnect(catalog, hw_id):
    spec = catalog[hw_id]
    assert spec.price is not None and spec.interconnect is not None


def test_npu_units_list_formats(catalog):
    for spec in catalog.values():
        for unit in spec.units:
            if spec.kind == "soc" and unit.kind == "npu":
                assert unit.formats, f"{spec.id}: npu unit '{unit.name}' must list the formats it runs"


def test_shared_memory_devices_cap_usable_fraction(catalog):
    for hw_id in APPLE + PHONES_LAPTOPS:
        assert catalog[hw_id].memory.usable_fraction < 1, hw_id


def test_ids_match_file_names():
    assert load_hardware("h100-sxm").id == "h100-sxm"


_VALID = {
    "id": "toy-gpu",
    "name": "Toy GPU",
    "kind": "gpu",
    "vendor": "Test",
    "memory": {"capacity_gb": 8, "bandwidth_gbs": 100, "source": "test fixture"},
    "units": [{"name": "gpu", "kind": "gpu", "peak_tflops": {"fp16": 10}, "source": "test fixture"}],
}


def test_valid_fixture_parses():
    assert parse_hardware(copy.deepcopy(_VALID), "fixture").id == "toy-gpu"


def test_unknown_key_is_an_error():
    bad = copy.deepcopy(_VALID)
    bad["memory"]["bandwith_gbs"] = 100  # misspelled
    with pytest.raises(PlannerError, match="bandwith_gbs"):
        parse_hardware(bad, "fixture")


def test_negative_bandwidth_is_an_error():
    bad = copy.deepcopy(_VALID)
    bad["memory"]["bandwidth_gbs"] = -1
    with pytest.raises(PlannerError, match="bandwidth_gbs"):
        parse_hardware(bad, "fixture")


def test_every_soc_caps_usable_fraction(catalog):
    for spec in catalog.values():
        if spec.kind == "soc":
            assert spec.memory.usable_fraction < 1, spec.id


# ---------------------------------------------------------------- issue 10: the capacity the runtime sees

GIB_PER_GB = 2**30 / 1e9  # 1.073741824


def test_every_device_records_visible_capacity_with_source(catalog):
    """Memory is built from power-of-two dies, so a runtime never sees more than the marketed figure read as GiB;
    ECC on GDDR takes 1/16 (A10: nvidia-smi 23028 of 24576 MiB), so it never sees less than 15/16 of the GB."""
    for spec in catalog.values():
        m = spec.memory
        assert m.visible_gb is not None and m.visible_source, spec.id
        assert 15 / 16 * m.capacity_gb <= m.visible_gb <= m.capacity_gb * GIB_PER_GB + 0.005, spec.id
        assert spec.usable_capacity_gb == pytest.approx(m.visible_gb * m.usable_fraction, rel=1e-12)


@pytest.mark.parametrize(("hw_id", "visible_gb"), [
    ("h100-sxm", 85.0),         # CUDA exposes ~79.2 GiB = 85.0e9 B of the "80 GB" (issue 10)
    ("a100-40gb-sxm", 42.30),   # deviceQuery 42,298,834,944 B (bottlerocket-os/bottlerocket PR #3873)
    ("l4", 23034 * 2**20 / 1e9 * 0.994),  # ECC-on GDDR: nvidia-smi 23034 MiB, x 0.994 as H100 -> 24.01, ~decimal
    ("mi300x", 205.82),         # rocm-smi 205,822,885,888 B
])
def test_visible_capacity_of_anchor_devices(catalog, hw_id, visible_gb):
    assert catalog[hw_id].memory.visible_gb == pytest.approx(visible_gb, abs=0.01)


def test_llama_3_1_70b_fp8_fits_one_h100_with_vllm():
    """Issue 10: 'does not fit' while the marketed 80e9 B was the capacity; fits with the 85.0e9 B CUDA exposes.

    By hand, vLLM keeps gpu_memory_utilization 0.9 of 85.0e9 = 76.5e9 B. Weights: 70.55e9 params of which the
    embedding and LM head are 2 x 128,256 x 8,192 = 2.101e9 in fp16 (4.203e9 B); the other 68.45e9 in fp8 with
    per-channel scales (8.008 bits) = 68.52e9 B; 72.72e9 B in all. vLLM V1's profiling run of 8,192 tokens: MLP live
    set 8,192 x (2 x 8,192 + 3 x 28,672) x 2 B = 1.677e9 B, plus the sampler's fp32 [1,024 sequences (`vllm
    serve` on a >= 70 GiB device), 128,256 vocabulary] = 0.525e9 B. KV pool = 76.5e9 - 72.72e9 - 2.203e9 - runtime
    overhead (0.8e9 context + the CUDA-graph pool, planner.memory.runtime_overhead_bytes) = 0.77e9 B > 0. Against the
    marketed 80e9 x 0.9 = 72e9 B the weights alone did not fit.
    """
    from planner.estimate import estimate

    e = estimate("llama-3.1-70b", "h100-sxm", "fp8", batch=1, prompt=512, output=128, engine="vllm")
    assert e.memory.capacity_gb == pytest.approx(85.0)
    assert e.memory.weights_gb == pytest.approx(72.72, rel=2e-3)
    act = 8192 * (2 * 8192 + 3 * 28672) * 2 + 1024 * 128256 * 4
    pool = 85.0e9 * 0.9 - e.memory.weights_gb * 1e9 - act - e.memory.overhead_gb * 1e9
    assert pool > 0 and e.engine.fits and e.memory.fits
    assert e.engine.kv_pool_gb == pytest.approx(pool / 1e9, rel=0.01)
    assert 80e9 * 0.9 < e.memory.weights_gb * 1e9  # the old capacity could not even hold the weights


def test_unified_memory_uses_visible_times_usable_fraction(catalog):
    # DGX Spark: CUDA reports 119.7 GiB = 128.53e9 B; usable_fraction 0.9
    assert catalog["dgx-spark"].usable_capacity_gb == pytest.approx(128.53 * 0.9)


# ---------------------------------------------------------------- issue 9: second memory pool, unpublished figures


def test_gh200_has_two_memory_pools_and_fit_uses_hbm(catalog):
    from planner.estimate import estimate

    spec = catalog["gh200"]
    # GH200 datasheet: 96 GB HBM3 at 4 TB/s; up to 480 GB LPDDR5X at 512 GB/s; NVLink-C2C 900 GB/s
    assert (spec.memory.capacity_gb, spec.memory.bandwidth_gbs) == (96, 4000)
    hp = spec.memory.host_pool
    assert (hp.capacity_gb, hp.bandwidth_gbs, hp.link_gbs) == (480, 512, 900)
    e = estimate("llama-3.1-8b", "gh200", "bf16", batch=1, prompt=512, output=128)
    assert e.memory.capacity_gb == pytest.approx(spec.memory.visible_gb)  # the HBM pool only
    assert e.host_pool is not None and e.host_pool.capacity_gb == 480
    assert estimate("llama-3.1-8b", "h100-sxm", "bf16").host_pool is None


def test_estimates_on_unpublished_figures_carry_a_warning():
    from planner.estimate import estimate

    e = estimate("llama-3.1-8b", "rtx-5070-ti", "bf16", batch=1, prompt=512, output=128)
    warned = [w for w in e.warnings if "does not publish" in w]
    assert len(warned) == 1 and "units.gpu.peak_tflops.fp16" in warned[0]
    assert not [w for w in estimate("llama-3.1-8b", "h100-sxm", "bf16").warnings if "does not publish" in w]
    # figures with one reason are named together, the reason once (DGX Spark: only GB10's FP4 rate is published)
    spark = [w for w in estimate("llama-3.1-8b", "dgx-spark", "bf16").warnings if "does not publish" in w]
    assert len(spark) == 1 and spark[0].count("NVIDIA publishes only GB10's FP4 rate") == 1
    assert "units.gpu.peak_tflops.fp16, units.gpu.peak_tflops.bf16" in spark[0]


def test_unpublished_figures_of_other_units_are_not_warned(catalog):
    spec = catalog["snapdragon-x-elite"]
    npu = spec.unit("hexagon")
    fields = [i.field for i in spec.unpublished_for(npu)]
    assert "units.cpu.peak_tflops.fp32" not in fields and "power.tdp_w" in fields


def test_unpublished_must_name_a_value():
    bad = copy.deepcopy(_VALID)
    bad["unpublished"] = [{"field": "units.gpu.peak_tflops.fp8", "reason": "not in the file"}]
    with pytest.raises(PlannerError, match="unpublished"):
        parse_hardware(bad, "fixture")


# ---------------------------------------------------------------- issue 15: hostile spec files

_HOSTILE_BASE = """id: toy-gpu
name: Toy GPU
kind: gpu
vendor: Test
memory:
  capacity_gb: {capacity}
  bandwidth_gbs: {bandwidth}
  source: test fixture
units:
  - name: gpu
    kind: gpu
    peak_tflops: {{fp16: {fp16}}}
    source: test fixture
"""


@pytest.mark.parametrize(("field", "text"), [
    ("capacity_gb", ".inf"),
    ("capacity_gb", "-.inf"),
    ("capacity_gb", ".nan"),
    ("capacity_gb", "nan"),         # a string: no number
    ("capacity_gb", "1e400"),       # overflows to inf
    ("capacity_gb", "1.0e+400"),
    ("capacity_gb", "-8"),
    ("capacity_gb", "0"),
    ("capacity_gb", "1e-320"),      # subnormal
    ("capacity_gb", "12:30"),       # YAML 1.1 base 60 (PyYAML: 750): refused, not read as 750
    ("capacity_gb", "012"),         # YAML 1.1 octal (PyYAML: 10): refused
    ("capacity_gb", '"80"'),        # a quoted string
    ("capacity_gb", "true"),
    ("capacity_gb", "2e5"),         # 200 TB on one device: above the bound
    ("bandwidth_gbs", ".inf"),
    ("bandwidth_gbs", "2e6"),
    ("fp16", ".inf"),
    ("fp16", "1e7"),
    ("fp16", "-1"),
])
def test_hostile_numbers_are_one_line_naming_the_field(tmp_path, field, text):
    values = {"capacity": 8, "bandwidth": 100, "fp16": 10}
    values[{"capacity_gb": "capacity", "bandwidth_gbs": "bandwidth", "fp16": "fp16"}[field]] = text
    path = tmp_path / "toy-gpu.yaml"
    path.write_text(_HOSTILE_BASE.format(**values))
    with pytest.raises(PlannerError) as err:
        load_hardware(str(path))
    msg = str(err.value)
    assert "\n" not in msg and field in msg, msg


def test_plain_decimal_numbers_still_load(tmp_path):
    path = tmp_path / "toy-gpu.yaml"
    path.write_text(_HOSTILE_BASE.format(capacity="1_024", bandwidth="1e3", fp16="12.5"))
    spec = load_hardware(str(path))
    assert (spec.memory.capacity_gb, spec.memory.bandwidth_gbs, spec.units[0].peak_tflops["fp16"]) == (1024, 1000, 12.5)


@pytest.mark.parametrize(("section", "key", "value"), [
    ("efficiency", "bandwidth_fraction", float("inf")),
    ("efficiency", "compute_fraction", 1.5),
    ("efficiency", "kernel_overhead_us", -1.0),
    ("efficiency", "step_overhead_ms", float("nan")),
    ("memory", "usable_fraction", 0.0),
    ("memory", "visible_gb", 1e9),
    ("power", "tdp_w", float("inf")),
    ("price", "usd_per_hour", -2.0),
    ("interconnect", "bidirectional_gbs", float("inf")),
])
def test_every_section_refuses_non_finite_or_out_of_range(section, key, value):
    bad = copy.deepcopy(_VALID)
    extra = {"efficiency": {"bandwidth_fraction": 0.8, "compute_fraction": 0.7},
             "power": {"tdp_w": 100, "source": "test"}, "price": {"usd_per_hour": 1.0, "source": "test"},
             "interconnect": {"kind": "pcie", "bidirectional_gbs": 64, "source": "test"}}
    if section in extra:
        bad[section] = extra[section]
    bad[section][key] = value
    if key == "visible_gb":
        bad["memory"]["visible_source"] = "test"
    with pytest.raises(PlannerError) as err:
        parse_hardware(bad, "fixture")
    assert f"{section}.{key}" in str(err.value) and "\n" not in str(err.value)


def test_cli_hostile_spec_is_exit_2_with_one_error_line(tmp_path, capsys):
    from planner.cli import main

    path = tmp_path / "toy-gpu.yaml"
    path.write_text(_HOSTILE_BASE.format(capacity=".inf", bandwidth=100, fp16=10))
    code = main(["estimate", "-m", "llama-2-7b", "-H", str(path), "--json"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and err[0].startswith("error:") and "memory.capacity_gb" in err[0]
    assert not math.isinf(load_hardware("h100-sxm").memory.capacity_gb)


def test_hardware_list_shows_the_new_devices_with_usable_capacity(capsys):
    import json

    from planner.cli import main

    assert main(["hardware", "list", "--json"]) == 0
    rows = {r["id"]: r for r in json.loads(capsys.readouterr().out)}
    assert set(NEW_NVIDIA_DATACENTER + NEW_OTHER) <= set(rows)
    # H100 SXM: 85.0 GB visible x usable_fraction 1.0; RTX 5070 Ti rests on 3 unpublished figures
    assert rows["h100-sxm"]["usable_gb"] == "85.0" and rows["h100-sxm"]["unpublished"] == ""
    assert rows["rtx-5070-ti"]["unpublished"] == "3"
