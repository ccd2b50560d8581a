"""Sweep throughput: configurations evaluated per second on one core (the vectorized grid) against a loop of
`estimate` calls measured in the same run.

    python bench/sweep_speed.py
"""

import os
import time

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

from planner import estimate  # noqa: E402
from planner.architecture import list_model_ids  # noqa: E402
from planner.hardware import list_hardware_ids  # noqa: E402
from planner.sweep import sweep  # noqa: E402


def main() -> None:
    models = list_model_ids()
    hardware = list_hardware_ids()
    formats = ["fp16", "int8", "int4-g128", "q4_0"]
    batches = [1, 2, 4, 8, 16, 32, 64, 128, 256]
    prompts = [128, 512, 2048, 8192]
    outputs = [128, 512, 2048]
    sweep(models[:1], hardware[:1])  # warm caches (spec and catalog parsing)
    t0 = time.perf_counter()
    df = sweep(models, hardware, formats, batches, prompts, outputs)
    dt = time.perf_counter() - t0
    rate = len(df) / dt
    t0 = time.perf_counter()
    n_loop = 200
    for i in range(n_loop):
        estimate(models[i % len(models)], hardware[i % len(hardware)], batch=batches[i % 9], prompt=512, output=128)
    loop_rate = n_loop / (time.perf_counter() - t0)
    print(f"grid: {len(models)} models x {len(hardware)} devices x {len(formats)} formats x {len(batches)} batches x "
          f"{len(prompts)} prompts x {len(outputs)} outputs = {len(df):,} configurations")
    print(f"vectorized sweep: {dt:.2f} s -> {rate:,.0f} configurations/s")
    print(f"estimate() loop:  {loop_rate:,.0f} configurations/s -> sweep is {rate / loop_rate:,.0f}x faster")


if __name__ == "__main__":
    main()
