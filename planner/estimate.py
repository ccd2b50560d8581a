"""The public entry point: one Estimate for (model, hardware, format, KV dtype, batch, prompt, output).

Data flows one way: specs + architecture + format + workload -> ops -> roofline -> memory/latency -> Estimate.
Nothing here prints; report.py renders an Estimate.
"""

from __future__ import annotations

import math
import types
import typing

from functools import cached_property, partial

from pydantic import BaseModel, ConfigDict, PrivateAttr, computed_field

from .architecture import ModelArch, load_model
from .catalog_index import by_identity
from .efficiency import resolve_with_origin, unmeasured_dequant_warning
from .errors import PlannerError
from .hardware import Efficiency, HardwareSpec, load_hardware
from .latency import decode_sum_s, first_token_from_decode_s, point_latency_fast, stage_op_times
from .memory import (DEFAULT_SETTINGS, LLAMACPP_N_UBATCH, EngineSettings, check_engine, llamacpp_gpu_layers,
                     llamacpp_host_weight_bytes, max_batch, max_context, plan_memory_fast)
from .model_files import resolve_weights
from .ops import (MATMUL, decode_ops, expert_storage_format, kv_bytes_per_sequence, kv_bytes_per_token, kv_bytes_per_token_per_layer, prefill_ops, totals,
                  weights_source)
from .quantization import WeightFormat, kv_dtype as norm_kv_dtype
from .roofline import (DeviceModel, OpTime, device_model, matmul_peak_note, op_format_share, select_unit, step_bound,
                       step_time_s, time_ops)
from .runtimes import default_interval_class, first_token_from_decode, interval_for, request_path_ms
from .units import GB, MAX_COUNT


class _Out(BaseModel):
    """An output report. Built from figures the planner computed (trusted), with `_out(cls, **fields)`: the
    coercions validation would make (an int to a float field, a copy of a dict), without the validator."""

    model_config = ConfigDict(extra="forbid", defer_build=True)


_CONV = {float: "x if {get}.__class__ is float else float(x)", int: "x if {get}.__class__ is int else int(x)",
         bool: "x if {get}.__class__ is bool else bool(x)"}
_CONV_OPT = {t: "x if {get} is None or x.__class__ is %s else %s(x)" % (t.__name__, t.__name__) for t in _CONV}


def _coercion(annotation) -> str:
    """Python expression (of `{get}`, the value) for what validation makes of a trusted value of this type: a float
    of an int, a copy of a dict (its values floats) or list, a tuple of floats; str and reports as they are."""
    opt = typing.get_origin(annotation) in (types.UnionType, typing.Union) and type(None) in typing.get_args(annotation)
    base = next((a for a in typing.get_args(annotation) if a is not type(None)), annotation) if opt else annotation
    if base in _CONV:
        return (_CONV_OPT if opt else _CONV)[base]
    origin = typing.get_origin(base)
    if origin is dict:
        conv = "_dict_float" if typing.get_args(base)[1] is float else "dict"
    elif origin is tuple:
        conv = "_tuple_float"  # tuple[float, float] only
    elif origin is list:
        conv = "list"
    else:
        return "{get}"
    return f"_optional({conv}, {{get}})" if opt else f"{conv}({{get}})"


def _dict_float(d):
    return {k: float(v) for k, v in d.items()}


def _tuple_float(t):
    return tuple(float(x) for x in t)


def _optional(conv, x):
    return None if x is None else conv(x)


_BUILDERS: dict[type, object] = {}


def _builder(cls):
    """Compile build(values) -> cls instance: the instance cls.model_construct(**values) makes (the same
    __dict__, fields set and private defaults) with the coercions validation makes, one dict display long."""
    # no post-init of its own (pydantic's, which sets the private defaults, is done here)
    assert all(getattr(vars(k)["model_post_init"], "__name__", "") == "init_private_attributes"
               for k in cls.__mro__ if k is not BaseModel and "model_post_init" in vars(k)), cls
    assert not cls.__pydantic_root_model__
    ns = {"_dict_float": _dict_float, "_tuple_float": _tuple_float, "_optional": _optional, "_cls": cls, "_set": object.__setattr__,
          "_names": frozenset(cls.model_fields),
          "_private": {n: p.get_default() for n, p in (cls.__private_attributes__ or {}).items()} or None}
    items = []
    for i, (n, f) in enumerate(cls.model_fields.items()):
        if f.is_required():
            get = f"v[{n!r}]"
        else:
            ns[f"_d{i}"] = default = f.get_default(call_default_factory=True)
            get = (f"(v[{n!r}] if {n!r} in v else _d{i}.copy())" if isinstance(default, (dict, list, set))
                   else f"v.get({n!r}, _d{i})")
        expr = _coercion(f.annotation)
        expr = expr.replace("{get}", f"(x := {get})") if expr.startswith("x if") else expr.replace("{get}", get)
        items.append(f"        {n!r}: {expr},\n")
    src = ("def build(v):\n"
           "    given = set(v)\n"
           "    if not given <= _names:\n"
           "        raise TypeError(f'{_cls.__name__}: unknown fields {sorted(given - _names)}')\n"
           "    d = {\n" + "".join(items) + "    }\n"
           "    m = _cls.__new__(_cls)\n"
           "    _set(m, '__dict__', d)\n"
           "    _set(m, '__pydantic_fields_set__', given)\n"
           "    _set(m, '__pydantic_extra__', None)\n"
           "    _set(m, '__pydantic_private__', None if _private is None else dict(_private))\n"
           "    return m\n")
    exec(compile(src, f"<build {cls.__name__}>", "exec"), ns)
    ns["build"].source = src
    return ns["build"]


def _out(cls, **values):
    """What cls.model_construct(**values) builds, with the coercions validation makes (tests/planner/
    test_replay.py checks it against cls(**values)), without pydantic's per-field machinery. Outputs only: inputs
    are validated where they enter."""
    b = _BUILDERS.get(cls)
    if b is None:
        b = _BUILDERS[cls] = _builder(cls)
    return b(values)


class OpReport(_Out):
    name: str
    count: int
    flops: float
    bytes: float
    weight_bytes: float
    kv_bytes: float
    intensity_flop_per_byte: float | None
    time_ms: float
    compute_ms: float
    memory_ms: float
    bound: str


class MemoryReport(_Out):
    """Per device: with tensor parallelism t, each of the t devices holds weights / t, KV / min(t, KV heads) (an MLA
    latent is replicated), its share of the activations and its own runtime overhead. With an engine, every figure
    is the engine's (planner.memory.plan_memory): fits = total_gb <= budget_gb, the memory the engine lets the
    model use (vLLM: capacity x gpu_memory_utilization). max_context_at_batch counts prompt + output tokens, the
    output fixed at the request's."""

    devices: int = 1
    weights_gb: float
    kv_cache_gb: float
    activations_gb: float
    overhead_gb: float
    total_gb: float
    capacity_gb: float
    budget_gb: float | None = None
    budget_label: str = "usable"
    device_memory_gb: float
    fits: bool
    verdict: str
    model_max_context: int

    # the limits are solved (closed forms over planner.memory.plan_memory) when first read or dumped, not for a
    # caller that reads only the headline figures
    _limits: tuple | None = PrivateAttr(default=None)

    @computed_field
    @cached_property
    def max_batch_at_context(self) -> int:
        return int(self._limits[0]())

    @computed_field
    @cached_property
    def max_context_at_batch(self) -> int:
        return int(self._limits[1]())

    def with_limits(self, largest_batch, longest_context):
        self._limits = (largest_batch, longest_context)
        return self


class KVReport(_Out):
    dtype: str
    bytes_per_token: float
    bytes_per_token_per_layer: float
    gb_per_sequence: float
    total_gb: float


class _StageReport(_Out):
    """A stage's per-operator table is built only when it is read (`.ops`, or a JSON dump): a loop of estimates
    that reads the headline figures never pays for it."""

    _op_times: list | None = PrivateAttr(default=None)  # (a default_factory costs an inspect.signature per instance)

    @computed_field
    @cached_property
    def ops(self) -> list[OpReport]:
        ots = self._op_times
        return _op_reports((ots() if callable(ots) else ots) or [])

    def with_op_times(self, op_times):
        """op_times: the stage's OpTimes, or a callable (picklable: a partial) that gives them."""
        self._op_times = op_times
        return self


class PrefillReport(_StageReport):
    latency_ms: float | None
    tokens_per_s: float | None
    latency_ms_low: float | None = None      # p10-p90 prediction interval of the runtime profile (None: none applies)
    latency_ms_high: float | None = None
    tokens_per_s_low: float | None = None
    tokens_per_s_high: float | None = None
    bound: str
    flops: float
    bytes: float
    # the engine's HTTP request path (runtimes.REQUEST_PATH_MS; 0: an offline harness or no measured path) and the
    # TTFT a client of its OpenAI server sees: latency_ms + request_path_ms
    request_path_ms: float = 0.0
    server_ttft_ms: float | None = None
    # an engine that samples the first token in a decode step (runtimes.FIRST_TOKEN_FROM_DECODE: TurboMind): the
    # decode step that latency_ms holds after the prefill of prompt - 1 tokens; None: the prefill's last logits
    first_token_step_ms: float | None = None


class DecodeReport(_StageReport):
    latency_ms_per_token: float | None
    latency_ms_first: float | None
    latency_ms_last: float | None
    tokens_per_s_per_sequence: float | None
    tokens_per_s_total: float | None
    latency_ms_per_token_low: float | None = None
    latency_ms_per_token_high: float | None = None
    tokens_per_s_per_sequence_low: float | None = None
    tokens_per_s_per_sequence_high: float | None = None
    tokens_per_s_total_low: float | None = None
    tokens_per_s_total_high: float | None = None
    bound: str
    bytes_per_step: float
    weight_bytes_per_step: float
    kv_bytes_per_step: float


class EndToEndReport(_Out):
    latency_s: float | None
    latency_s_low: float | None = None
    latency_s_high: float | None = None
    ttft_ms: float | None
    tpot_ms: float | None
    output_tokens_per_s_total: float | None


class RooflineReport(_Out):
    unit: str
    dtypes: dict[str, str]
    peak_tflops: dict[str, float]
    bandwidth_gbs: float
    ridge_flop_per_byte: float
    effective_ridge_flop_per_byte: float
    effective_bandwidth_gbs: float = 0.0  # roofline.effective_bandwidth_bytes_s / 1e9 (bandwidth_fraction, SM cap)
    sm_count: int = 0                     # the unit's SMs, 0 where its spec lists none
    peak_note: str = ""                   # why peak_tflops['matmul'] differs from the listed peak (roofline.matmul_peak_note)
    weight_bandwidth_share: float = 1.0   # mixed-input weight-only GEMMs: their share of the effective bandwidth
    mixed_input_weights: str = ""         # which weights run those kernels: the format, or gpt-oss's routed experts
    gemm_regime: bool = False             # the kernel-fitted GEMM regime curve applies to this unit's weight GEMMs


class EngineReport(_Out):
    engine: str
    kv_pool_gb: float
    max_concurrency: float
    blocks: int | None
    fits: bool
    rule: str


class EfficiencyReport(_Out):
    bandwidth_fraction: float
    compute_fraction: float
    kernel_overhead_us: float
    step_overhead_ms: float
    compute_half_rows: float = 0.0
    dequant_overhead: dict[str, float] = {}
    dequant_tile_tokens: int = 0  # tokens per tile the dequant cost is paid once for (Efficiency field), 0 = flat
    format_half_rows: dict[str, float] = {}
    class_compute_fraction: dict[str, float] = {}
    format_compute_fraction: dict[str, float] = {}
    kv_dequant_overhead: dict[str, float] = {}
    fp16_accumulate: bool = False
    sync_mma: bool = False  # the runtime's kernels are mma.sync ones (Efficiency.sync_mma): Hopper's mma_sync_share
    matmul_tflops_per_watt: float = 0.0
    regime_curves: bool = True  # the kernel-fitted GEMM regime curve (planner.regimes) where it applies
    weight_only_regime: bool = False  # weight-only quantized GEMMs are Marlin-style kernels (Efficiency field)
    weight_only_bandwidth_share: float = 1.0  # their share of the engine's bandwidth (Efficiency field)
    kv_cache_copy: bool = False  # the runtime copies its KV cache every decode step (Efficiency.kv_cache_copy)
    kv_read_per_query_head: bool = False  # decode attention reads the cache once per query head (Efficiency field)
    score_bytes_factor: float = 1.0  # bytes moved per byte of a materialized score matrix (Efficiency field)
    kv_reread_share: float = 1.0  # DRAM cost of a decode attention's extra K/V passes (Efficiency field)
    sm_bandwidth_gbs: float = 0.0  # bandwidth one SM sustains (Efficiency.sm_bandwidth_gbs), 0 = no cap
    kernel_library: str = ""  # whose measured GEMM kernels set the regime constants (Efficiency field), '' = default
    source: str


class IntervalReport(_Out):
    """Where the *_low / *_high figures come from: quantiles of measured / predicted speed of a runtime profile."""

    runtime: str
    hardware_class: str
    prefill: tuple[float, float] | None
    decode: tuple[float, float] | None
    decode_regime: str | None
    source: str


class HostPoolReport(_Out):
    """A second memory pool of the device (GH200/GB300 Grace LPDDR5X over NVLink-C2C): reported, not used for fit."""

    capacity_gb: float
    bandwidth_gbs: float
    link_gbs: float
    type: str | None = None


class Estimate(_Out):
    model: str
    hardware: str
    hardware_name: str
    weights: str
    weights_source: str = "formula"
    # the format the routed experts are stored in where it is not `weights` (ops.expert_storage_format: gpt-oss's
    # MXFP4 experts under bf16 or llama.cpp's MXFP4_MOE), whose kernels their GEMMs run; None elsewhere
    expert_weights: str | None = None
    kv_dtype: str
    batch: int
    prompt: int
    output: int
    flash_attention: bool
    tp: int = 1
    params_b: float
    active_params_b: float
    memory: MemoryReport
    kv_cache: KVReport
    prefill: PrefillReport
    decode: DecodeReport
    end_to_end: EndToEndReport
    roofline: RooflineReport
    engine: EngineReport
    efficiency: EfficiencyReport
    warnings: list[str]
    runtime: str | None = None
    intervals: IntervalReport | None = None
    host_pool: HostPoolReport | None = None


def _op_reports(op_times: list[OpTime]) -> list[OpReport]:
    out = []
    for ot in op_times:
        op = ot.op
        b = op.count * float(op.bytes)
        f = op.count * float(op.flops)
        out.append(_out(OpReport,
            name=op.name, count=op.count, flops=f, bytes=b, weight_bytes=op.count * float(op.weight_bytes),
            kv_bytes=op.count * float(op.kv_read_bytes + op.kv_write_bytes),
            intensity_flop_per_byte=f / b if b > 0 else None,
            time_ms=float(ot.time_s) * 1e3, compute_ms=float(ot.compute_s) * 1e3, memory_ms=float(ot.memory_s) * 1e3,
            bound=str(ot.bound)))
    return out


def _check_workload(batch: int, prompt: int, output: int):
    for name, v in (("batch", batch), ("prompt", prompt), ("output", output)):
        if not isinstance(v, (int,)) or isinstance(v, bool) or not 1 <= v <= MAX_COUNT:
            raise PlannerError(f"--{name}: must be an integer between 1 and {MAX_COUNT:,}, got {v!r}")


def _mixed_input(fmt: WeightFormat, own: str | None, dev: DeviceModel) -> dict:
    """The RooflineReport fields naming the weights that run mixed-input weight-only kernels and their bandwidth
    share: every weight GEMM of a weight-only format the engine runs so (DeviceModel.weight_bandwidth_share), or the
    routed experts a checkpoint keeps in such a format under a wider one (gpt-oss's mxfp4 under bf16:
    DeviceModel.mixed_input_share, roofline.op_format_share; own: ops.expert_storage_format); share 1 and ''
    elsewhere."""
    if dev.weight_bandwidth_share < 1.0:
        return {"weight_bandwidth_share": dev.weight_bandwidth_share, "mixed_input_weights": f"{fmt.name} weight GEMMs"}
    if own:
        share = op_format_share(own, dev.mixed_input_share)
        if share < 1.0:
            return {"weight_bandwidth_share": share, "mixed_input_weights": f"routed experts ({own})"}
    return {"weight_bandwidth_share": 1.0, "mixed_input_weights": ""}


def _host_weights_note(m, fmt, spec, engine: str) -> str:
    """What of the weights llama.cpp leaves in host memory (planner.memory.llamacpp_host_weight_bytes), said beside
    the device's weights; '' where nothing is."""
    host = llamacpp_host_weight_bytes(m, fmt, spec) if engine == "llamacpp" else 0.0
    return (f"; on the device: the input embedding ({host / GB:.2f} GB) stays in host memory, as llama.cpp keeps it"
            if host > 0 else "")


def estimate(model: str | ModelArch, hardware: str | HardwareSpec, weights: str | None = None, kv_dtype: str = "fp16",
             batch: int = 1, prompt: int = 512, output: int = 128, unit: str | None = None,
             efficiency: str | Efficiency = "auto", engine: str = "none", flash_attention: bool = True,
             runtime=None, tp: int = 1, engine_settings: EngineSettings | None = None) -> Estimate:
    """Predict memory, TTFT, TPOT, throughput and bounds for one configuration.

    efficiency: 'auto' (calibration if present, else the device/kind default), 'default', 'datasheet' (1.0, no
    overheads), or an explicit Efficiency.
    runtime: None, a runtime id (llamacpp, trtllm, gpt-fast) or a RuntimeProfile: its fitted efficiency for the
    unit's hardware class applies (unless efficiency is 'datasheet' or explicit), the runtime's unit is the
    default unit, and the headline figures get p10-p90 intervals (`*_low`, `*_high`):
      speed_low = speed x p10, speed_high = speed x p90; latency_low = latency / p90, latency_high = latency / p10
    where p10/p90 are the profile's quantiles of measured / predicted speed for the regime (prefill figures:
    'prefill'; decode and end-to-end figures: 'decode' at batch 1, 'throughput' above; runtimes.interval_regime).
    tp: tensor-parallel degree inside one node (Megatron-LM): memory per device, per-device operator costs and two
    ring all-reduces per layer over the node's link (planner/serving/parallelism.py); tp = 1 is the single device.
    engine_settings: the engine arguments that size memory (planner.memory.EngineSettings: vLLM version,
    gpu_memory_utilization, max_model_len, max_num_batched_tokens, block_size, CUDA graphs); None = defaults.
    """
    _check_workload(batch, prompt, output)
    if isinstance(tp, bool) or not isinstance(tp, int) or tp < 1:
        raise PlannerError(f"--tp: must be an integer >= 1, got {tp!r}")
    m = model if isinstance(model, ModelArch) else load_model(model)
    spec = hardware if isinstance(hardware, HardwareSpec) else load_hardware(hardware)
    fmt: WeightFormat = resolve_weights(m, weights)  # None: the model file's own format, else fp16
    kvd = norm_kv_dtype(kv_dtype)
    prof = None
    if runtime is not None:
        from .runtimes import load_runtime
        prof = load_runtime(runtime)
        if unit is None:
            unit = prof.default_unit(spec)
    u = select_unit(spec, fmt, unit, prompt, output)
    eff, origin = resolve_with_origin(spec, u, efficiency, prof)
    dev: DeviceModel = device_model(spec, u, fmt, eff)
    warnings: list[str] = []
    if (unpublished := spec.unpublished_warning(u)) is not None:  # figures the vendor does not print
        warnings.append(unpublished)
    if origin == "runtime" and (gap := prof.unmeasured_note(spec, u)) is not None:  # the kind defaults, widened
        warnings.append(gap)
    if origin == "runtime" and (dq := unmeasured_dequant_warning(eff, fmt.name, prof.id)) is not None:
        warnings.append(dq)
    context = prompt + output
    if (too_long := m.context_warning(context)) is not None:
        warnings.append(too_long)
    check_engine(engine, spec, kvd)

    link, kv_ways = None, 1
    if tp > 1:  # tensor parallelism inside one node
        from .serving.parallelism import check_tp, kv_split, node_for
        check_tp(m, tp)
        node = node_for(spec)
        if tp > node.gpus_per_node:
            raise PlannerError(f"--tp: {tp} exceeds the {node.gpus_per_node} device(s) of one {node.id} node; "
                               f"`planner plan` adds pipeline stages across nodes")
        link, kv_ways = node.intra_link(), kv_split(m, tp)

    def split(ops):
        if tp == 1:
            return ops
        from .serving.parallelism import split_ops
        return split_ops(ops, m, tp)

    def tp_decode_step_s(b, past):
        from .serving.parallelism import tp_step_time_s
        return tp_step_time_s(m, fmt, kvd, dev, "decode", b, 1, past, tp, link, flash_attention)

    step_s = tp_decode_step_s if tp > 1 else None

    # memory, per device: one rule (planner.memory.plan_memory) gives the verdict, the figures and the limits
    es = engine_settings or DEFAULT_SETTINGS
    cap = spec.usable_capacity_gb * GB
    mem_args = (spec, engine, es, tp, kv_ways, flash_attention)
    mb = plan_memory_fast(m, fmt, kvd, batch, prompt, output, *mem_args)
    fits = mb.fits
    per = "" if tp == 1 else f" per device (tensor parallel x{tp})"
    budget = f"{mb.budget / GB:.2f} GB {mb.budget_label}"
    if fits:
        verdict = f"fits: {mb.total_bytes / GB:.2f} GB of {budget}{per}"
    else:
        verdict = f"does not fit: needs {mb.total_bytes / GB:.2f} GB of {budget}{per}"
        if not mb.headroom_ok:
            verdict += (f" (sglang: activations {mb.activations_bytes / GB:.2f} GB exceed the "
                        f"{mb.capacity_bytes / GB - mb.budget / GB + mb.activations_bytes / GB:.2f} GB outside the "
                        f"static pool)")
        elif mb.refusal:
            verdict += f" ({engine} refuses it: {mb.refusal})"
        elif engine != "none":
            verdict += f" ({engine}: KV pool holds {mb.max_concurrency:.1f} sequences of {context} tokens, batch {batch})"
        if mb.weights_bytes + mb.overhead_bytes > mb.budget:  # the weights alone need several devices
            n_min = (math.ceil(mb.weights_bytes * tp / (mb.budget - mb.overhead_bytes))
                     if mb.budget > mb.overhead_bytes else None)
            if n_min and n_min <= 1024:
                warnings.append(f"the weights ({mb.weights_bytes / GB:.2f} GB) and the fixed overhead "
                                f"({mb.overhead_bytes / GB:.2f} GB) need at least {n_min} x {spec.id}; `--tp N` splits "
                                f"them inside a node, `planner plan --model {m.name} --hardware {spec.id}` sizes the "
                                f"deployment")
    if engine == "llamacpp" and not fits and spec.kind == "gpu" and tp == 1:  # llama.cpp's partial offload
        n_gpu = llamacpp_gpu_layers(m, fmt, kvd, batch, prompt, output, spec,
                                    es.max_num_batched_tokens or LLAMACPP_N_UBATCH, flash_attention)
        L = m.num_layers
        warnings.append(f"llama.cpp can keep {n_gpu} of the {L} layers on {spec.id} (-ngl {n_gpu}) at this context; "
                        f"the other {L - n_gpu}, the output layer and the input embedding then run from host memory "
                        f"on the CPU, at its memory bandwidth (not estimated here)" if n_gpu > 0 else
                        f"llama.cpp cannot keep even one of the {L} layers on {spec.id} at this context (-ngl 0: "
                        f"the CPU runs the model from host memory; not estimated here)")
    if engine == "vllm" and mb.blocks is not None and mb.kv_pool_bytes > 0:
        max_len = es.max_model_len or m.max_position_embeddings
        holds = max_context(m, fmt, kvd, 1, 0, *mem_args)  # tokens one sequence may hold in the pool
        if holds < max_len:  # vLLM checks at start-up that one max_model_len sequence fits the pool
            fix = (f"pass --max-model-len {holds} or less" if holds > 0 else
                   "the pool holds no whole block: a smaller --block-size, format or model, or a larger device")
            warnings.append(f"vLLM refuses to start with max_model_len {max_len}: the KV pool holds {holds:,} tokens "
                            f"per sequence; {fix}")
    memory = _out(MemoryReport,
        devices=tp, weights_gb=mb.weights_bytes / GB, kv_cache_gb=mb.kv_cache_bytes / GB,
        activations_gb=mb.activations_bytes / GB,
        overhead_gb=mb.overhead_bytes / GB, total_gb=mb.total_bytes / GB, capacity_gb=cap / GB,
        budget_gb=mb.budget / GB, budget_label=mb.budget_label,
        device_memory_gb=spec.memory.capacity_gb, fits=fits, verdict=verdict,
        model_max_context=m.max_position_embeddings).with_limits(  # partials, not lambdas: an Estimate pickles
        partial(max_batch, m, fmt, kvd, prompt, output, *mem_args),
        partial(max_context, m, fmt, kvd, batch, output, *mem_args))
    per_token, per_token_layer = by_identity(("kv_bytes_per_token", kvd), (m,), lambda: (
        kv_bytes_per_token(m, kvd), kv_bytes_per_token_per_layer(m, kvd)))  # (the model's, whatever the workload)
    kv = _out(KVReport, dtype=kvd, bytes_per_token=per_token, bytes_per_token_per_layer=per_token_layer,
                  gb_per_sequence=float(kv_bytes_per_sequence(m, kvd, context)) / GB, total_gb=mb.kv_cache_bytes / GB)

    # latency (per-device operators; with tensor parallelism plus two all-reduces per layer)
    def comm_s(tokens):
        if tp == 1:
            return 0.0
        from .serving.parallelism import tp_comm_time_s
        return float(tp_comm_time_s(m, fmt, tokens, tp, link))

    if tp == 1:  # one device: the figures on plain floats (replayed from the second call on: the same floats)
        (p_step, p_bound, p_flops, p_bytes, d_step, d_bound, d_bytes, d_wbytes, d_kvbytes, d_sum,
         d_last) = point_latency_fast(m, fmt, kvd, dev, flash_attention, batch, prompt, output)
        # the per-operator tables are built when read (the same operator times)
        p_times = partial(stage_op_times, m, fmt, kvd, dev, "prefill", batch, prompt, flash_attention)
        d_times = partial(stage_op_times, m, fmt, kvd, dev, "decode", batch, prompt, flash_attention)
    else:
        p_times = time_ops(split(prefill_ops(m, fmt, kvd, batch, prompt, 0, flash_attention)), dev)
        p_step, p_bound, p_tot = step_time_s(p_times, dev), step_bound(p_times), totals([ot.op for ot in p_times])
        p_flops, p_bytes = p_tot["flops"], p_tot["bytes"]
        d_first_ops = split(decode_ops(m, fmt, kvd, batch, prompt, flash_attention))
        d_times = time_ops(d_first_ops, dev)
        d_step, d_bound, d_tot = step_time_s(d_times, dev), step_bound(d_times), totals(d_first_ops)
        d_bytes, d_wbytes, d_kvbytes = d_tot["bytes"], d_tot["weight_bytes"], d_tot["kv_read_bytes"] + d_tot["kv_write_bytes"]
        d_sum, d_last = decode_sum_s(m, fmt, kvd, dev, batch, prompt, output, flash_attention, step_s=step_s,
                                     with_last=True)  # last step: past + output - 2
    ttft_s = float(p_step) + comm_s(batch * prompt)
    first_step_s = None
    if prof is not None and first_token_from_decode(prof.id):  # prefill of prompt - 1 tokens, then a decode step
        ttft_s, first_step_s = first_token_from_decode_s(
            lambda n: step_time_s(time_ops(split(prefill_ops(m, fmt, kvd, batch, n, 0, flash_attention)), dev), dev)
            + comm_s(batch * n),
            lambda past: step_time_s(time_ops(split(decode_ops(m, fmt, kvd, batch, past, flash_attention)), dev), dev)
            + comm_s(batch), prompt)
    d_first = float(d_step) + comm_s(batch)
    d_sum, d_last = float(d_sum), float(d_last)
    tpot = d_sum / (output - 1) if output > 1 else d_first
    e2e = ttft_s + d_sum

    def ok(x):
        return x if fits else None

    # p10-p90 intervals of the runtime profile (or of the kind defaults), when one applies: each report is built
    # once with them
    pc = ip = idd = None
    if fits and origin == "runtime":
        pc = prof.for_unit(spec, u)
    elif fits and origin == "default":
        pc = default_interval_class()  # ranges of the kind defaults against published measurements
    if pc is not None:
        xp = {"moe": m.moe is not None, "multi_gpu": tp > 1, "traits": m.traits}  # widened outside the fit
        ip, idd = interval_for(pc, "prefill", batch, **xp), interval_for(pc, "decode", batch, **xp)
    p_iv = d_iv = e_iv = {}
    if ip is not None:
        ttft_ms, p_tok_s = ttft_s * 1e3, batch * prompt / ttft_s
        p_iv = dict(latency_ms_low=ttft_ms / ip.p90, latency_ms_high=ttft_ms / ip.p10,
                    tokens_per_s_low=p_tok_s * ip.p10, tokens_per_s_high=p_tok_s * ip.p90)
    if idd is not None:
        tpot_ms, seq_tok_s, tot_tok_s = tpot * 1e3, 1.0 / tpot, batch / tpot
        d_iv = dict(latency_ms_per_token_low=tpot_ms / idd.p90, latency_ms_per_token_high=tpot_ms / idd.p10,
                    tokens_per_s_per_sequence_low=seq_tok_s * idd.p10,
                    tokens_per_s_per_sequence_high=seq_tok_s * idd.p90,
                    tokens_per_s_total_low=tot_tok_s * idd.p10, tokens_per_s_total_high=tot_tok_s * idd.p90)
        e_iv = dict(latency_s_low=e2e / idd.p90, latency_s_high=e2e / idd.p10)

    path_ms = request_path_ms(prof.id) if prof is not None else 0.0
    prefill = _out(PrefillReport, latency_ms=ok(ttft_s * 1e3), tokens_per_s=ok(batch * prompt / ttft_s),
                            bound=str(p_bound), flops=float(p_flops), bytes=float(p_bytes), request_path_ms=path_ms,
                            server_ttft_ms=ok(ttft_s * 1e3 + path_ms) if path_ms > 0 else None,
                            first_token_step_ms=ok(first_step_s * 1e3) if first_step_s is not None else None,
                            **p_iv).with_op_times(p_times)
    decode = _out(DecodeReport,
        latency_ms_per_token=ok(tpot * 1e3), latency_ms_first=ok(d_first * 1e3), latency_ms_last=ok(d_last * 1e3),
        tokens_per_s_per_sequence=ok(1.0 / tpot), tokens_per_s_total=ok(batch / tpot), bound=str(d_bound),
        bytes_per_step=float(d_bytes), weight_bytes_per_step=float(d_wbytes),
        kv_bytes_per_step=float(d_kvbytes), **d_iv).with_op_times(d_times)
    e2e_r = _out(EndToEndReport, latency_s=ok(e2e), ttft_ms=ok(ttft_s * 1e3), tpot_ms=ok(tpot * 1e3),
                           output_tokens_per_s_total=ok(batch * output / e2e), **e_iv)
    expert_fmt = expert_storage_format(m, fmt)  # routed experts in a format of their own, or None
    roof = _out(RooflineReport, unit=dev.unit, dtypes=dev.dtypes, peak_tflops=dev.peak_tflops, bandwidth_gbs=dev.bandwidth_gbs,
                          ridge_flop_per_byte=dev.ridge_flop_per_byte,
                          effective_ridge_flop_per_byte=dev.eff_peak_flops[MATMUL] / dev.eff_bandwidth_bytes_s,
                          effective_bandwidth_gbs=dev.eff_bandwidth_bytes_s / 1e9, sm_count=dev.sm_count,
                          peak_note=matmul_peak_note(u, dev.dtypes[MATMUL], eff),
                          gemm_regime=dev.gemm_regime is not None,
                          **_mixed_input(fmt, expert_fmt, dev))
    iv_report = None
    if pc is not None:
        regime = None if idd is None else next(k for k in (("decode", "throughput") if batch == 1 else
                                                            ("throughput", "decode")) if k in pc.intervals)
        iv_report = _out(IntervalReport,
            runtime=prof.id if prof is not None else "none (kind-default efficiencies)", hardware_class=pc.key, prefill=(ip.p10, ip.p90) if ip else None,
            decode=(idd.p10, idd.p90) if idd else None, decode_regime=regime,
            source=f"p10/p90 of measured / predicted speed, {prof.id if prof else 'default'} ({pc.key}); "
                   + (pc.fit.interval_source if pc.fit else "no fit record"))
    b = m.param_breakdown()
    return _out(Estimate,
        model=m.name, hardware=spec.id, hardware_name=spec.name, weights=fmt.name,
        weights_source=weights_source(m, fmt) + _host_weights_note(m, fmt, spec, engine), expert_weights=expert_fmt, kv_dtype=kvd, batch=batch,
        prompt=prompt, output=output, flash_attention=flash_attention, tp=tp, params_b=b["total"] / 1e9,
        active_params_b=b["active"] / 1e9, memory=memory, kv_cache=kv, prefill=prefill, decode=decode,
        end_to_end=e2e_r, roofline=roof,
        engine=_out(EngineReport, engine=mb.engine, kv_pool_gb=mb.kv_pool_bytes / GB, max_concurrency=mb.max_concurrency,
                            blocks=mb.blocks, fits=fits, rule=mb.rule),
        efficiency=_out(EfficiencyReport, **eff.__dict__), warnings=warnings,
        runtime=prof.id if prof is not None else None, intervals=iv_report,
        host_pool=None if (hp := spec.memory.host_pool) is None else _out(HostPoolReport,
            capacity_gb=hp.capacity_gb, bandwidth_gbs=hp.bandwidth_gbs, link_gbs=hp.link_gbs, type=hp.type))
