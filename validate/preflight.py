"""Step 1 of the device flow: what is on this machine, and can every step import what it needs?

Runs with the standard library alone (``python3 -m validate.preflight [--device cuda|cpu] [--json]``), so that a
machine without pydantic -- the lent H200 image has torch, triton, numpy, pandas, PyYAML and nvidia-ml-py but no
pydantic -- gets one clear line naming the wheels step instead of a traceback from ``planner``.

Reports: Python, torch (and the CUDA it was built for), triton, numpy, pandas, PyYAML, pydantic, the NVIDIA driver
(NVML, else nvidia-smi), the GPU name, memory and SM count, and which of the torch ops the harness adapts to are
present in this torch (tinygemm int4, the int8 ops, ``torch.cuda._sleep`` for host-ahead timing, CUDA graphs).
"""

from __future__ import annotations

import argparse
import importlib
import json
import shutil
import subprocess
import sys

# what the wheels step carries (validate/build_wheels.sh): pydantic and the packages it imports
WHEEL_PACKAGES = ("pydantic", "pydantic_core", "annotated_types", "typing_inspection", "typing_extensions")
REQUIRED = ("yaml", "numpy", "pandas", "torch") + WHEEL_PACKAGES
CUDA_REQUIRED = ("triton",)
# every module a step imports (checked after the third-party packages)
PROJECT = ("planner.cli", "planner.hardware", "planner.efficiency", "validate.records", "validate.runner",
           "validate.calibrate", "validate.check", "validate.localspec", "validate.kernels.paged_attention",
           "validate.kernels.quant_matmul", "validate.kernels.decode_step")
MIN_TORCH = (2, 9)
WHEELS_HINT = ("build the wheels on a machine with pip (`bash validate/build_wheels.sh` -> .whl/, see README "
               "'GPU validation'), carry .whl, and start the command with: python3 -m pip install -q --no-index "
               "--no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl && "
               "export PYTHONPATH=/tmp/site:$PYTHONPATH")


def _version(mod) -> str:
    return str(getattr(mod, "__version__", "present"))


def _torch_tuple(version: str) -> tuple[int, int]:
    parts = version.split("+")[0].split(".")
    try:
        return int(parts[0]), int(parts[1])
    except (ValueError, IndexError):
        return (0, 0)


def _driver() -> str | None:
    try:
        import pynvml
        pynvml.nvmlInit()
        v = pynvml.nvmlSystemGetDriverVersion()
        pynvml.nvmlShutdown()
        return v.decode() if isinstance(v, bytes) else str(v)
    except Exception:  # noqa: BLE001 - no NVML: try nvidia-smi
        pass
    if shutil.which("nvidia-smi"):
        try:
            out = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                                 capture_output=True, text=True, timeout=20)
            return out.stdout.strip().splitlines()[0] if out.returncode == 0 and out.stdout.strip() else None
        except (OSError, subprocess.SubprocessError):
            return None
    return None


def torch_ops(torch) -> dict[str, bool]:
    """The ops whose presence or signature differs between torch versions (the harness adapts to each)."""
    aten = torch.ops.aten
    return {
        "aten._weight_int4pack_mm": hasattr(aten, "_weight_int4pack_mm"),
        "aten._convert_weight_to_int4pack": hasattr(aten, "_convert_weight_to_int4pack"),
        "aten._weight_int4pack_mm_for_cpu": hasattr(aten, "_weight_int4pack_mm_for_cpu"),
        "aten._weight_int8pack_mm": hasattr(aten, "_weight_int8pack_mm"),
        "torch._int_mm": hasattr(torch, "_int_mm"),
        "torch.cuda._sleep": hasattr(torch.cuda, "_sleep"),
        "torch.cuda.CUDAGraph": hasattr(torch.cuda, "CUDAGraph"),
    }


def preflight(device: str = "cuda") -> dict:
    """{versions, gpu, ops, problems}: ``problems`` is empty when every step can run on ``device``."""
    versions: dict[str, str | None] = {"python": sys.version.split()[0]}
    problems: list[str] = []
    mods = {}
    for name in REQUIRED + (CUDA_REQUIRED if device.startswith("cuda") else ("triton",)):
        try:
            mods[name] = importlib.import_module(name)
            versions[name] = _version(mods[name])
        except ImportError as exc:
            versions[name] = None
            if name in WHEEL_PACKAGES:
                problems.append(f"{name} is not importable ({exc}); the device image has no pydantic: {WHEELS_HINT}")
            elif name == "triton" and not device.startswith("cuda"):
                pass  # the CPU dry run's gate needs triton only for the interpreter subset (checked there)
            else:
                problems.append(f"{name} is not importable ({exc})")
    out = {"device": device, "versions": versions, "gpu": {}, "ops": {}, "problems": problems}
    torch = mods.get("torch")
    if torch is not None:
        versions["torch_cuda"] = torch.version.cuda
        out["ops"] = torch_ops(torch)
        if device.startswith("cuda"):
            if _torch_tuple(torch.__version__) < MIN_TORCH:
                problems.append(f"torch {torch.__version__} is older than {MIN_TORCH[0]}.{MIN_TORCH[1]}")
            if not torch.cuda.is_available():
                problems.append("torch sees no CUDA device (for a dry run on CPU: planner validate device --dry-run)")
            else:
                props = torch.cuda.get_device_properties(0)
                out["gpu"] = {"name": props.name, "memory_gib": round(props.total_memory / 2**30, 1),
                              "sm_count": props.multi_processor_count,
                              "compute_capability": f"{props.major}.{props.minor}"}
                versions["driver"] = _driver()
                for op in ("aten._weight_int4pack_mm", "aten._convert_weight_to_int4pack"):
                    if not out["ops"][op]:
                        problems.append(f"this torch has no {op} (tinygemm int4)")
    if not problems:  # the project's own modules, once their dependencies are there
        for name in PROJECT:
            try:
                importlib.import_module(name)
            except Exception as exc:  # noqa: BLE001 - report any import failure as one line
                problems.append(f"{name} does not import: {type(exc).__name__}: {exc}")
    return out


def summary_lines(info: dict) -> list[str]:
    v = info["versions"]
    lines = ["preflight: " + ", ".join(f"{k} {v[k] or ('none' if k == 'torch_cuda' else 'MISSING')}" for k in
                                       ("python", "torch", "torch_cuda", "triton", "numpy", "pandas", "yaml",
                                        "pydantic", "driver") if k in v)]
    if info["gpu"]:
        g = info["gpu"]
        lines.append(f"preflight: GPU {g['name']}, {g['memory_gib']} GiB, {g['sm_count']} SMs, "
                     f"sm_{g['compute_capability'].replace('.', '')}")
    if info["ops"]:
        lines.append("preflight: torch ops: " + ", ".join(f"{k} {'yes' if ok else 'no'}"
                                                         for k, ok in info["ops"].items()))
    return lines


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python3 -m validate.preflight", description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="cuda", help="cuda (default) or cpu")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    info = preflight(args.device)
    if args.json:
        print(json.dumps(info))
    else:
        print("\n".join(summary_lines(info)))
    for p in info["problems"]:
        print(f"error: preflight: {p}", file=sys.stderr)
    return 2 if info["problems"] else 0


if __name__ == "__main__":
    sys.exit(main())
