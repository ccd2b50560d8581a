"""Vectorized grid evaluation: models x hardware x formats x batch sizes x prompt lengths x output lengths.

For each (model, format) pair the operator costs are built once over the whole workload grid (numpy arrays), then
timed against every device at once (device peaks stacked along a leading axis). Same formulas as `estimate`.

Per pair: memory first (need_bytes over the grid, per device); prefill and the decode closed form's pieces on the
(devices x batch x prompt) grid, only the (device, unit) pairs some configuration picks; the decode sum taken only
where a configuration fits, at the unit chosen there (latency.DecodeClosedForm.total); the others have no latencies
(NaN). Numeric columns are written in place into one preallocated array each, string columns are Arrow chunks.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import numpy as np

from .architecture import ModelArch, load_model
from .efficiency import resolve_efficiency
from .errors import PlannerError
from .hardware import HardwareSpec, load_hardware
from .latency import decode_closed_form, decode_step_time_s, first_token_from_decode_s, prefill_time_s
from .memory import need_bytes, runtime_overhead_bytes
from .ops import ATTENTION, MATMUL, VECTOR
from .quantization import kv_dtype as norm_kv, weight_format
from .roofline import capable_units, device_model, unit_request_proxy_s
from .runtimes import first_token_from_decode
from .units import GB


@dataclass(frozen=True)
class _StackedEfficiency:
    kernel_overhead_us: np.ndarray
    step_overhead_ms: np.ndarray
    compute_half_rows: np.ndarray | float = 0.0
    kv_dequant_overhead: dict | None = None  # KV dtype -> array over devices
    kv_cache_copy: np.ndarray | bool = False  # 0/1 per device (Efficiency.kv_cache_copy)
    kv_read_per_query_head: np.ndarray | bool = False  # 0/1 per device (Efficiency.kv_read_per_query_head)
    score_bytes_factor: np.ndarray | float = 1.0  # per device (Efficiency.score_bytes_factor)
    kv_reread_share: np.ndarray | float = 1.0  # per device (Efficiency.kv_reread_share)


@dataclass(frozen=True)
class _StackedDevice:
    """Duck-types DeviceModel with arrays of shape (H, 1, 1) so one call times every device."""

    eff_peak_flops: dict
    eff_bandwidth_bytes_s: np.ndarray
    efficiency: _StackedEfficiency
    bytes_per_weight: float = 2.0
    dequant_factor: np.ndarray | float = 1.0
    matmul_cap_flops: np.ndarray | float = np.inf
    gemm_regime: object = None                   # roofline.DeviceModel.gemm_regime (the committed constants)
    kernel_peak_flops: np.ndarray | float = 0.0  # per device; 0 where the regime does not apply
    gemm_launch_s: np.ndarray | float = 0.0      # per device (roofline.DeviceModel.gemm_launch_s)
    dequant_tile_tokens: np.ndarray | int = 0    # per device (roofline.dequant_factor_at), 0 where every one is flat
    weight_bandwidth_share: np.ndarray | float = 1.0  # per device (roofline.DeviceModel.weight_bandwidth_share)
    mixed_input_share: np.ndarray | float = 1.0  # per device (roofline.DeviceModel.mixed_input_share)
    mixed_input_unit: np.ndarray | bool = False  # per device (roofline.DeviceModel.mixed_input_unit)
    base_matmul_flops: np.ndarray | float = 0.0  # per device (roofline.DeviceModel.base_matmul_flops)
    devices: tuple = ()                          # the stacked DeviceModels (own_format_flops / own_format_dequant)
    matmul_peak_tflops: np.ndarray | float = 0.0  # per device (roofline.DeviceModel.matmul_peak_tflops)

    def own_format_flops(self, name: str) -> np.ndarray:
        """roofline.DeviceModel.own_format_flops per device."""
        return np.array([d.own_format_flops(name) for d in self.devices]).reshape(self.base_matmul_flops.shape)

    def own_format_dequant(self, name: str) -> np.ndarray:
        """roofline.DeviceModel.own_format_dequant per device."""
        return np.array([d.own_format_dequant(name) for d in self.devices]).reshape(self.base_matmul_flops.shape)


def _per_device(values, shape, neutral):
    """One value per device, or the plain neutral value where every device has it (False for a flag, 1.0 for a
    factor: the one-value path of roofline.op_bytes)."""
    return np.array([float(v) for v in values]).reshape(shape) if any(v != neutral for v in values) else neutral


def _stack(devs) -> _StackedDevice:
    # devices x (1) x batch x prompt x output: one spare axis, so that decode's trailing axis of integration samples
    # (added to batch, prompt and output) still leaves the devices leading
    shape = (len(devs), 1, 1, 1, 1)
    peaks = {c: np.array([d.eff_peak_flops[c] for d in devs]).reshape(shape) for c in (MATMUL, ATTENTION, VECTOR)}
    return _StackedDevice(
        peaks, np.array([d.eff_bandwidth_bytes_s for d in devs]).reshape(shape),
        _StackedEfficiency(np.array([d.efficiency.kernel_overhead_us for d in devs]).reshape(shape),
                           np.array([d.efficiency.step_overhead_ms for d in devs]).reshape(shape),
                           np.array([d.efficiency.compute_half_rows if d.compute_half_rows is None
                                     else d.compute_half_rows for d in devs]).reshape(shape),
                           {k: np.array([d.efficiency.kv_dequant_overhead.get(k, 0.0) for d in devs]).reshape(shape)
                            for k in {k for d in devs for k in d.efficiency.kv_dequant_overhead}},
                           np.array([float(d.efficiency.kv_cache_copy) for d in devs]).reshape(shape),
                           _per_device([d.efficiency.kv_read_per_query_head for d in devs], shape, False),
                           _per_device([d.efficiency.score_bytes_factor for d in devs], shape, 1.0),
                           _per_device([d.efficiency.kv_reread_share for d in devs], shape, 1.0)),
        devs[0].bytes_per_weight, np.array([d.dequant_factor for d in devs]).reshape(shape),
        np.array([d.matmul_cap_flops for d in devs]).reshape(shape),
        next((d.gemm_regime for d in devs if d.gemm_regime is not None), None),
        np.array([d.kernel_peak_flops for d in devs]).reshape(shape),
        np.array([d.gemm_launch_s for d in devs]).reshape(shape),
        _per_device([d.dequant_tile_tokens for d in devs], shape, 0),
        _per_device([d.weight_bandwidth_share for d in devs], shape, 1.0),
        _per_device([d.mixed_input_share for d in devs], shape, 1.0),
        _per_device([d.mixed_input_unit for d in devs], shape, False),
        np.array([d.base_matmul_flops for d in devs]).reshape(shape), tuple(devs),
        np.array([d.matmul_peak_tflops for d in devs]).reshape(shape))


def _devices_for(fmt, specs, prof, efficiency, P, O, full):
    """Every (device, capable unit) pair that runs `fmt`, stacked for one vectorized timing, the devices kept, and
    per device and configuration the unit that select_unit picks for that prompt/output (the lowest
    unit_request_proxy_s), as estimate() does. None of it depends on the model, so the sweep builds it once per
    format."""
    devs, keep, pick = [], [], []
    for spec in specs:
        units = capable_units(spec, fmt)
        if prof is not None:  # the runtime's own unit, as estimate() picks it
            name = prof.default_unit(spec)
            units = [u for u in units if u.name == name] if name else units
        if not units:
            continue  # this device cannot run this format: no rows
        try:
            effs = [resolve_efficiency(spec, u, efficiency, prof) for u in units]
        except PlannerError:
            continue  # the runtime does not run on this device's vendor (RuntimeProfile.for_unit): no rows
        first = len(devs)
        devs += [device_model(spec, u, fmt, eff) for u, eff in zip(units, effs)]
        proxy = np.stack([np.broadcast_to(unit_request_proxy_s(spec, u, fmt, P, O), full).ravel() for u in units])
        pick.append(first + np.argmin(proxy, axis=0))
        keep.append(spec)
    if not devs:
        return [], [], None, None
    # time only the (device, unit) pairs some configuration picks (a Mac's CPU cores rarely win anything)
    used, rows = np.unique(np.stack(pick), return_inverse=True)
    devs = [devs[i] for i in used]
    return devs, keep, rows.reshape(len(keep), -1), _stack(devs)


def sweep(models, hardware, formats=("fp16",), batches=(1,), prompts=(512,), outputs=(128,), kv_dtype="fp16",
          efficiency="auto", flash_attention=True, runtime=None):
    """Evaluate the full grid; returns a pandas DataFrame with one row per configuration.

    models / hardware: catalog ids or paths, or already-built ModelArch / HardwareSpec objects (uploads).
    runtime: a runtime profile id (llamacpp, trtllm, gpt-fast): its fitted efficiency and its unit, as `estimate`
    does; devices whose class the profile does not cover get no rows.
    """
    import pandas as pd

    prof = None
    if runtime is not None:
        from .runtimes import load_runtime
        prof = load_runtime(runtime)
    first_decode = prof is not None and first_token_from_decode(prof.id)

    for name, vals in (("batch", batches), ("prompt", prompts), ("output", outputs)):
        if not vals or any((not isinstance(v, (int, np.integer))) or v < 1 for v in vals):
            raise PlannerError(f"--{name}: values must be integers >= 1, got {list(vals)}")
    for flag, vals in (("--models", models), ("--hardware", hardware), ("--weights", formats)):
        if not list(vals):
            raise PlannerError(f"{flag}: empty; give at least one (comma-separated)")
    kvd = norm_kv(kv_dtype)
    specs = [h if isinstance(h, HardwareSpec) else load_hardware(h) for h in hardware]
    archs = [m if isinstance(m, ModelArch) else load_model(m) for m in models]
    fmts = [weight_format(f) for f in formats]
    # One axis per grid dimension, broadcast only where an operator needs it: weight GEMMs depend on the batch
    # alone, so they are timed once per batch size, attention over batch x context; the flat grid is built last.
    nb, npr, no = len(batches), len(prompts), len(outputs)
    B = np.asarray(batches, dtype=np.float64).reshape(nb, 1, 1)
    P = np.asarray(prompts, dtype=np.float64).reshape(1, npr, 1)
    O = np.asarray(outputs, dtype=np.float64).reshape(1, 1, no)
    full = (nb, npr, no)
    flat_B, flat_P, flat_O = (np.broadcast_to(x, full).ravel() for x in (B, P, O))
    n = nb * npr * no
    stacks = {f.name: _devices_for(f, specs, prof, efficiency, P, O, full) for f in fmts}  # independent of the model
    pairs = [(m, fmt) for m, fmt in itertools.product(archs, fmts) if stacks[fmt.name][0]]
    if not pairs:
        raise PlannerError("sweep: no device in the grid runs any of the formats"
                           + (f" under the {prof.id} runtime profile (it covers: "
                              f"{', '.join(c.key for c in prof.classes)})" if prof is not None else ""))
    # every numeric column is written in place into one preallocated array: part i (a model x format pair) fills
    # rows [start_i, start_i + H_i x n), device-major, then batch, prompt, output; the string columns are chunks,
    # one per part (the hardware and unit chunks depend on the format alone, the others are one name repeated)
    total_rows = sum(len(stacks[fmt.name][1]) * n for _, fmt in pairs)
    table = {c: np.empty(total_rows, dtype=t) for c, t in _COLUMNS}
    strings = _StringChunks()
    grid_b, grid_p, grid_o = (np.broadcast_to(x, full).ravel().astype(int) for x in (B, P, O))
    for name, (devs, keep, rows, sd) in list(stacks.items()):  # once per format name (a format may repeat)
        if devs:
            H = len(keep)
            stacks[name] += (
                np.array([s.usable_capacity_gb * GB for s in keep])[:, None],  # capacity (H, 1)
                strings.names([s.id for s in keep], np.repeat(np.arange(H), n)),
                strings.names([d.unit for d in devs], rows.ravel()),
                _Picker(rows, full))
    o1 = bool(np.any(flat_O <= 1))  # the first decode step's time is read only where output = 1
    start, caps = 0, []
    for m, fmt in pairs:
        devs, keep, rows, sd, cap, hw_chunk, unit_chunk, chosen = stacks[fmt.name]
        H = len(keep)
        sl = slice(start, start + H * n)
        start += H * n
        need = need_bytes(m, fmt, kvd, flat_B, flat_P, flat_O, flash_attention)
        ovh = np.array([runtime_overhead_bytes(s, m, fmt) for s in keep])[:, None]
        total = need[None, :] + ovh
        fits = total <= cap
        strings.add("model", strings.repeat(m.name, H * n))
        strings.add("hardware", hw_chunk)
        strings.add("unit", unit_chunk)
        strings.add("weights", strings.repeat(fmt.name, H * n))
        strings.add("kv_dtype", strings.repeat(kvd, H * n))
        t = {c: table[c][sl].reshape(H, n) for c, _ in _COLUMNS}
        t["fits"][:] = fits
        np.divide(total, GB, out=t["total_gb"])
        caps.append(cap[:, 0] / GB)
        # latencies only where the configuration fits (the others have none: NaN), on the unit chosen there
        pos = np.flatnonzero(fits)  # rows of this part, device-major
        for c in _LATENCY_COLUMNS:
            table[c][sl] = np.nan
        if not pos.size:
            continue
        if first_decode:  # the first token from a decode step (runtimes.first_token_from_decode), as estimate()
            ttft = chosen(first_token_from_decode_s(
                lambda n: prefill_time_s(m, fmt, kvd, sd, B, n, 0, flash_attention),
                lambda past: decode_step_time_s(m, fmt, kvd, sd, B, past, flash_attention), P)[0], pos)
        else:
            ttft = chosen(prefill_time_s(m, fmt, kvd, sd, B, P, 0, flash_attention), pos)
        dsum = decode_closed_form(m, fmt, kvd, sd, B, P, O, flash_attention).total(chosen.at(pos))
        Bf, Of = flat_B[pos % n], flat_O[pos % n]
        tpot = dsum / np.maximum(Of - 1, 1)
        if o1:
            d_first = chosen(decode_step_time_s(m, fmt, kvd, sd, B, P, flash_attention), pos)
            tpot = np.where(Of > 1, tpot, d_first)
        rows_at = pos + sl.start
        table["ttft_ms"][rows_at] = ttft * 1e3
        table["tpot_ms"][rows_at] = tpot * 1e3
        table["decode_tok_s_total"][rows_at] = Bf / tpot
        table["e2e_s"][rows_at] = ttft + dsum
    for c, g in (("batch", grid_b), ("prompt", grid_p), ("output", grid_o)):  # every part is H x the grid
        table[c].reshape(-1, n)[:] = g
    table["capacity_gb"].reshape(-1, n)[:] = np.concatenate(caps)[:, None]
    table = {**{c: strings.column(c) for c in _STRING_COLUMNS}, **table}
    return pd.DataFrame({c: table[c] for c in _ORDER}, copy=False)


class _Picker:
    """Per kept device and flat configuration (H x N, device-major), the (device, unit) pair `rows` picks: values
    read off an array over (D, [1,] batch, prompt, output) (axes of length 1 read where they are, not broadcast;
    one flat index per input shape, kept), at every row or at the rows `pos` only."""

    def __init__(self, rows, full):
        self.rows, self.full, self.index = rows, full, {}
        self.grid = np.indices(full).reshape(len(full), -1)  # (3, N): batch, prompt, output index of each config

    def at(self, pos):
        """The rows `pos` as a multi-index into (D, batch, prompt, output)."""
        n = self.grid.shape[1]
        return (self.rows.reshape(-1)[pos],) + tuple(g[pos % n] for g in self.grid)

    def __call__(self, x, pos=None):
        x = np.ascontiguousarray(x, dtype=np.float64)
        x = x.reshape((1,) * (len(self.full) + 1 - x.ndim) + x.shape)  # broadcast from the right, as numpy does
        if x.ndim == len(self.full) + 2:  # (D, 1, batch, prompt, output): drop the spare axis
            x = x.reshape((x.shape[0],) + x.shape[2:])
        idx = self.index.get(x.shape)
        if idx is None:
            # element strides of x, 0 along its axes of length 1
            st = [(int(np.prod(x.shape[i + 1:])) if x.shape[i] > 1 else 0) for i in range(x.ndim)]
            idx = (self.rows * st[0] + sum(g * s for g, s in zip(self.grid, st[1:]))).reshape(-1)
            self.index[x.shape] = idx
        return np.take(x.reshape(-1), idx if pos is None else idx[pos])


class _StringChunks:
    """The string columns as one chunk per part: Arrow arrays (reused where they repeat) when pandas' default
    string dtype is Arrow-backed, object arrays otherwise; joined once, into pandas' default string column."""

    def __init__(self):
        import pandas as pd

        self.dtype = pd.Series(["x"]).dtype
        self.arrow = getattr(self.dtype, "storage", None) == "pyarrow"
        self.chunks = {c: [] for c in _STRING_COLUMNS}
        self.repeats = {}

    def names(self, names: list[str], codes: np.ndarray):
        """names[codes] as one chunk."""
        if self.arrow:
            import pyarrow as pa
            return pa.array(names, type=pa.large_string()).take(pa.array(np.asarray(codes, dtype=np.int64)))
        return np.asarray(names, dtype=object)[codes]

    def repeat(self, name: str, count: int):
        """One name `count` times as one chunk (kept: parts of one length share it)."""
        key = (name, count)
        if key not in self.repeats:
            if self.arrow:  # offsets and bytes laid out directly
                import pyarrow as pa
                b = np.frombuffer(name.encode(), dtype=np.uint8)
                offsets = np.arange(count + 1, dtype=np.int64) * len(b)
                self.repeats[key] = pa.LargeStringArray.from_buffers(count, pa.py_buffer(offsets),
                                                                      pa.py_buffer(np.tile(b, count)))
            else:
                self.repeats[key] = self.names([name], np.zeros(count, dtype=np.int64))
        return self.repeats[key]

    def add(self, column: str, chunk):
        self.chunks[column].append(chunk)

    def column(self, column: str):
        import pandas as pd

        if self.arrow:
            import pyarrow as pa
            return pd.Series(pd.array(pa.chunked_array(self.chunks[column], type=pa.large_string()), dtype=self.dtype))
        return pd.Series(np.concatenate(self.chunks[column]), dtype=self.dtype)


_LATENCY_COLUMNS = ("ttft_ms", "tpot_ms", "decode_tok_s_total", "e2e_s")
_ORDER = ("model", "hardware", "unit", "weights", "kv_dtype", "batch", "prompt", "output", "fits", "total_gb",
          "capacity_gb", "ttft_ms", "tpot_ms", "decode_tok_s_total", "e2e_s")
_COLUMNS = (("batch", int), ("prompt", int), ("output", int), ("fits", bool), ("total_gb", np.float64),
            ("capacity_gb", np.float64), ("ttft_ms", np.float64), ("tpot_ms", np.float64),
            ("decode_tok_s_total", np.float64), ("e2e_s", np.float64))


_STRING_COLUMNS = ("model", "hardware", "unit", "weights", "kv_dtype")
