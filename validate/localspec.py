"""`planner validate spec`: the measured ceilings of the machine in front of you -> a hardware spec YAML.

  memory.bandwidth_gbs  = STREAM triad (fp32 arrays far larger than the last-level cache, STREAM byte counting:
                          write-allocate reads not counted), the source says so
  units[0].peak_tflops  = measured large square GEMM per dtype (fp32, bf16, and fp16 where measured), dense
  memory.capacity_gb    = MemTotal of /proc/meminfo (CPU) or the GPU's total memory (GB = 1e9 bytes)
  cache.last_level_mb   = the LLC size the fingerprint read from sysfs (CPU only)

The result validates against planner.hardware.HardwareSpec before it is written. No torch import here: the
numbers come from records (``validate/records/<device>/*.jsonl``) that ``planner validate run`` measured.
"""

from __future__ import annotations

from pathlib import Path

from planner.errors import PlannerError
from planner.hardware import parse_hardware
from planner.io import atomic_write_yaml

from .records import Record


def _mem_total_gb() -> float | None:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                return int(line.split()[1]) * 1024 / 1e9
    except (OSError, ValueError, IndexError):
        pass
    return None


def _vendor(name: str) -> str:
    for v in ("AMD", "Intel", "NVIDIA", "Apple", "Ampere", "Qualcomm", "ARM"):
        if v.lower() in name.lower():
            return v
    return name.split()[0] if name.split() else "unknown"


def _latest(records: list[Record], pred) -> Record | None:
    ok = [r for r in records if r.status == "ok" and r.measured is not None and pred(r)]
    return max(ok, key=lambda r: r.created) if ok else None


def spec_from_records(records: list[Record], device_id: str | None = None) -> dict:
    """A HardwareSpec mapping from the newest STREAM triad and GEMM-peak records (all for one device)."""
    if not records:
        raise PlannerError("spec: no records")
    triad = _latest(records, lambda r: r.kernel == "stream" and r.params.op == "triad")
    copy = _latest(records, lambda r: r.kernel == "stream" and r.params.op == "copy")
    if triad is None:
        raise PlannerError("spec: the records hold no STREAM triad measurement (run `planner validate run` first)")
    peaks = {}
    for dt in ("fp32", "tf32", "bf16", "fp16"):
        g = _latest(records, lambda r, dt=dt: r.kernel == "gemm_peak" and r.params.dtype == dt)
        if g is not None:
            peaks[dt] = g
    if not peaks:
        raise PlannerError("spec: the records hold no GEMM peak measurement (run `planner validate run` first)")
    fp = triad.fingerprint
    dev_id = device_id or triad.device_id
    gpu = fp.get("device_type") == "cuda"
    name = fp.get("gpu_name") if gpu else fp.get("cpu_model", "CPU")
    if gpu:
        capacity = float(fp.get("gpu_memory_gib", 0)) * 2**30 / 1e9
        cap_src = "torch.cuda.get_device_properties().total_memory (GiB converted to GB)"
    else:
        capacity = _mem_total_gb() or 1.0
        cap_src = "/proc/meminfo MemTotal of the measuring host"
    bw = triad.achieved_gbs
    copy_txt = f", copy {copy.achieved_gbs:.1f} GB/s" if copy is not None else ""
    n_peak = {dt: r.params.n for dt, r in peaks.items()}
    unit = {
        "name": "gpu" if gpu else "cpu",
        "kind": "gpu" if gpu else "cpu",
        "peak_tflops": {dt: round(float(r.achieved_tflops), 4) for dt, r in peaks.items()},
        "source": (f"measured by planner validate run (run {peaks[next(iter(peaks))].run_id}): median of a square "
                   f"GEMM per dtype ({', '.join(f'{d} n={n}' for d, n in n_peak.items())}), "
                   f"{fp.get('torch_threads')} torch threads, torch {fp.get('torch_version')}"),
        "derived": "achieved 2 n^3 / median time; a measured ceiling, not a datasheet peak",
    }
    spec = {
        "id": dev_id,
        "name": f"{name} ({fp.get('cpu_count')} cores, measured)" if not gpu else f"{name} (measured)",
        "kind": "gpu" if gpu else "cpu",
        "vendor": _vendor(str(name)),
        "memory": {
            "capacity_gb": round(capacity, 2),
            "bandwidth_gbs": round(float(bw), 2),
            "source": (f"measured STREAM triad a = b + s*c over {triad.params.array_bytes / 2**20:.0f} MiB fp32 "
                       f"arrays (run {triad.run_id}, {triad.created[:10]}): {bw:.1f} GB/s{copy_txt}; STREAM byte "
                       f"counting (write-allocate reads not counted); capacity: {cap_src}"),
        },
        "units": [unit],
        "notes": (f"Written by `planner validate spec` from measured ceilings; fingerprint: "
                  f"{fp.get('cpu_model')}, {fp.get('cpu_count')} logical CPUs, 1-min load "
                  f"{fp.get('load_avg_1m')} at measurement, torch {fp.get('torch_version')}"
                  + (f", GPU {fp.get('gpu_name')}, driver {fp.get('driver_version')}" if gpu else "")),
    }
    if not gpu and fp.get("llc_bytes"):
        spec["cache"] = {"last_level_mb": round(fp["llc_bytes"] / 2**20, 2),
                         "source": "sysfs /sys/devices/system/cpu/cpu0/cache (highest-level data cache), MiB"}
    parse_hardware(spec, f"measured spec {dev_id}")  # validate before anyone writes it
    return spec


def write_spec(records: list[Record], out: str | Path, device_id: str | None = None) -> dict:
    spec = spec_from_records(records, device_id)
    atomic_write_yaml(out, spec)
    return spec
