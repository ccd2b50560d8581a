"""`planner` command line: parse, call the library, render. Nothing is computed here.

Bad input exits with code 2 and one line on stderr: `error: <field>: <what is wrong; what is allowed>`.
Subcommands live in small modules that each expose `register(subparsers)`; their heavy imports happen inside the
handlers so that `planner estimate` starts fast.
"""

from __future__ import annotations

import argparse
import importlib
import json
import sys

from .units import MAX_COUNT  # constants only: keeps the start-up light

# the engine profiles of hardware_specs/runtimes/ (--runtime help; tests/planner/test_cli.py checks the list)
RUNTIME_IDS = "vllm, sglang, tgi, lmdeploy, trtllm, llamacpp, gpt-fast, exllamav2, hf-eager, deepspeed-mii"

# modules that add subcommands (each has register(subparsers)); optional ones are skipped if absent
_EXTENSIONS = ("validate.cli", "planner.cli_serving", "planner.cli_accuracy",
               "planner.cli_topologies")  # after cli_serving: adds --parallel/--method to its commands


_FAST = ("estimate",)  # subcommands parsed without the extensions (none adds to them): a fast start

# optional dependencies -> the extra that installs them (pyproject.toml)
_EXTRAS = {"torch": "harness", "pynvml": "harness", "triton": "harness", "streamlit": "ui", "altair": "report",
           "vl_convert": "report", "selenium": "test"}


class _Parser(argparse.ArgumentParser):
    def error(self, message):  # one line, exit 2 (argparse prints usage + message by default)
        self.exit(2, f"error: {message} (see `{self.prog} --help`)\n")


def positive_int(text: str) -> int:
    try:
        v = int(str(text).strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be an integer between 1 and {MAX_COUNT:,}, got {text!r}") from None
    if not 1 <= v <= MAX_COUNT:
        raise argparse.ArgumentTypeError(f"must be an integer between 1 and {MAX_COUNT:,}, got {v}")
    return v


def int_list(text: str) -> list[int]:
    """'1,8,32' -> [1, 8, 32]."""
    return [positive_int(t.strip()) for t in text.split(",") if t.strip()]


def str_list(text: str) -> list[str]:
    return [t.strip() for t in text.split(",") if t.strip()]


def add_workload_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--model", "-m", required=True, help="catalog id (planner models list), a HF config.json, a "
                   "model folder (config.json + safetensors) or a .gguf file")
    p.add_argument("--hardware", "-H", required=True,
                   help="catalog id (planner hardware list) or path to a spec YAML; several, comma-separated, compare")
    p.add_argument("--weights", "-w", default=None, help="weight format (fp16, bf16, fp8, int8, int4-g128, gptq-int4, q4_0, "
                   "q4_k_m, exl2-4.0, ...); default: the model file's own (exact bytes), else fp16")
    p.add_argument("--kv-dtype", default="fp16", help="KV-cache dtype: fp16, bf16, fp8, int8, int4")
    p.add_argument("--batch", "-b", type=positive_int, default=1, help="concurrent sequences")
    p.add_argument("--prompt", "-p", type=positive_int, default=512, help="prompt tokens per sequence")
    p.add_argument("--output", "-o", type=positive_int, default=128, help="output tokens per sequence")
    p.add_argument("--unit", default=None, help="compute unit of a system-on-chip (cpu, gpu, npu); default fastest")
    p.add_argument("--engine", default="none", help="KV sizing rules: none, vllm, trtllm, sglang, llamacpp, lmdeploy")
    p.add_argument("--tp", type=positive_int, default=1, help="tensor-parallel degree inside one node (default 1)")
    p.add_argument("--no-flash-attention", action="store_true", help="materialize the attention score matrix")
    p.add_argument("--runtime", default=None, help=f"engine profile ({RUNTIME_IDS}): fitted efficiency and p10-p90 "
                   "ranges (hardware_specs/runtimes/); default: the --engine's profile when one exists")
    eff = p.add_mutually_exclusive_group()
    eff.add_argument("--no-calibration", action="store_true", help="ignore calibration files (kind/device defaults)")
    eff.add_argument("--datasheet", action="store_true", help="plain roofline: efficiency 1.0, no overheads")


def utilization(text: str) -> float:
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a number in (0, 1], got {text!r}") from None
    if not 0 < v <= 1:
        raise argparse.ArgumentTypeError(f"must be a number in (0, 1], got {text}")
    return v


VLLM_BLOCK_SIZES = (1, 8, 16, 32, 64, 128)  # vllm/config CacheConfig BlockSize


def add_engine_memory_args(p: argparse.ArgumentParser) -> None:
    """Engine arguments that size memory (planner.memory.EngineSettings); vLLM's names."""
    from .scheduler_defaults import SEQS_HELP, TOKENS_HELP

    g = p.add_argument_group("engine memory (with --engine)")
    g.add_argument("--vllm-version", default=None, choices=["v0.2", "v0", "v1"],
                   help="vLLM memory profiling: v0.2 (<= 0.2.4, torch peak only), v0 (0.2.5-0.6), v1 (0.7+, default)")
    g.add_argument("--gpu-memory-utilization", type=utilization, default=None, help="the engine's memory fraction: vLLM gpu_memory_utilization (0.9), SGLang "
                   "mem_fraction_static (by device memory and TP: 0.834 on an H100 at TP1), TensorRT-LLM "
                   "free_gpu_memory_fraction (0.9), LMDeploy cache_max_entry_count (0.8 of the free memory)")
    g.add_argument("--max-model-len", type=positive_int, default=None, help="vLLM max_model_len (model maximum)")
    g.add_argument("--max-num-batched-tokens", type=positive_int, default=None,
                   help=f"tokens per step = the prefill chunk ({TOKENS_HELP}; llama.cpp n_ubatch 512)")
    g.add_argument("--max-num-seqs", type=positive_int, default=None, help=f"vLLM max_num_seqs ({SEQS_HELP})")
    g.add_argument("--block-size", type=int, choices=VLLM_BLOCK_SIZES, default=None, metavar="{1,8,...,128}",
                   help="vLLM KV block size in tokens (16); vLLM takes 1, 8, 16, 32, 64 or 128 (CacheConfig)")
    g.add_argument("--enforce-eager", action="store_true", help="no CUDA graphs (no graph memory pool)")


# which --engine each engine-memory flag acts on (planner/memory.py plan_memory); the rest apply to every engine
ENGINE_FLAGS = {"vllm_version": ("vllm",), "gpu_memory_utilization": ("vllm", "sglang", "trtllm"),
                "max_model_len": ("vllm",), "max_num_seqs": ("vllm",), "block_size": ("vllm",)}


def engine_settings(args):
    """EngineSettings from the flags; a flag given for an engine it does not act on is an error, not ignored."""
    from .errors import PlannerError
    from .memory import VLLM_BLOCK_SIZE, EngineSettings

    engine = getattr(args, "engine", "none") or "none"
    for name, engines in ENGINE_FLAGS.items():
        if getattr(args, name, None) is not None and engine not in engines:
            raise PlannerError(f"--{name.replace('_', '-')}: applies with --engine {'|'.join(engines)}, "
                               f"not --engine {engine}")
    return EngineSettings(vllm_version=args.vllm_version or "v1", gpu_memory_utilization=args.gpu_memory_utilization,
                          max_model_len=args.max_model_len, max_num_batched_tokens=args.max_num_batched_tokens,
                          max_num_seqs=args.max_num_seqs, block_size=args.block_size or VLLM_BLOCK_SIZE,
                          cuda_graphs=not args.enforce_eager)


def efficiency_mode(args) -> str:
    return "datasheet" if args.datasheet else ("default" if args.no_calibration else "auto")


# ---------------------------------------------------------------- handlers


def cmd_estimate(args) -> int:
    from .estimate import estimate
    from .report import comparison_text, estimate_text, ops_text

    def one(hw):
        from .runtimes import runtime_for_engine
        return estimate(args.model, hw, args.weights, args.kv_dtype, args.batch, args.prompt, args.output,
                        unit=args.unit, efficiency=efficiency_mode(args), engine=args.engine,
                        flash_attention=not args.no_flash_attention,
                        runtime=getattr(args, "runtime", None) or runtime_for_engine(args.engine, hw),
                        tp=args.tp, engine_settings=engine_settings(args))

    devices = str_list(args.hardware)
    if len(devices) > 1:  # several devices: one comparison table (or a JSON list)
        ests = [one(h) for h in devices]
        if args.json:
            print("[" + ",\n".join(e.model_dump_json(indent=2) for e in ests) + "]")
        else:
            print(comparison_text(ests))
        for e in ests:
            for w in e.warnings:
                print(f"warning: {e.hardware}: {w}", file=sys.stderr)
        return 0
    e = one(devices[0] if devices else args.hardware)  # "h100-sxm," is one device
    if getattr(args, "runtime", None) is None and e.runtime is not None:
        print(f"note: --engine {args.engine}: efficiency and ranges from the {e.runtime} engine profile "
              f"(hardware_specs/runtimes/{e.runtime}.yaml); --runtime names another", file=sys.stderr)
    if args.json and getattr(args, "explain", False):
        import json

        from .report import explain
        print(json.dumps({**json.loads(e.model_dump_json()), "explain": explain(e)}, indent=2))
    elif args.json:
        print(e.model_dump_json(indent=2))
    else:
        print(estimate_text(e))
        if getattr(args, "explain", False):
            from .report import explain_text
            print()
            print(explain_text(e))
        if args.ops:
            print()
            print(ops_text(e, "prefill"))
            print()
            print(ops_text(e, "decode"))
    for w in e.warnings:
        print(f"warning: {w}", file=sys.stderr)
    return 0


def cmd_hardware(args) -> int:
    from .hardware import load_all_hardware, load_hardware
    from .report import table

    if args.action == "list" and args.id:
        raise _usage(f"hardware list: takes no id (got {args.id!r}); `planner hardware show {args.id}` shows one")
    if args.action == "list":
        rows = [{"id": s.id, "name": s.name, "kind": s.kind, "memory_gb": f"{s.memory.capacity_gb:g}",
                 "usable_gb": f"{s.usable_capacity_gb:.1f}", "bandwidth_gbs": f"{s.memory.bandwidth_gbs:g}",
                 "units": ",".join(u.name for u in s.units),
                 "unpublished": str(len(s.unpublished)) if s.unpublished else ""} for s in load_all_hardware()]
        print(json.dumps(rows, indent=2) if args.json else table(rows, list(rows[0]) if rows else ["id"]))
        return 0
    if not args.id:
        raise _usage("hardware show: give a hardware id, e.g. `planner hardware show h100-sxm`")
    s = load_hardware(args.id)
    print(s.model_dump_json(indent=2, exclude_none=True) if args.json else _yaml(s.model_dump(exclude_none=True)))
    return 0


def cmd_models(args) -> int:
    from .architecture import list_model_ids, load_model
    from .report import table

    if args.action == "list" and args.id:
        raise _usage(f"models list: takes no id (got {args.id!r}); `planner models show {args.id}` shows one")
    if args.action == "list":
        rows = []
        for i in list_model_ids():
            m = load_model(i)
            kind = "MoE" if m.moe else "dense"
            rows.append({"id": i, "params_b": f"{m.total_params / 1e9:.2f}", "active_b": f"{m.active_params / 1e9:.2f}",
                         "type": kind, "attention": m.attention_kind + (" +SWA" if m.sliding_window else ""),
                         "layer_mixers": m.layout_summary(),
                         "layers": m.num_layers, "max_context": m.max_position_embeddings})
        print(json.dumps(rows, indent=2) if args.json else table(rows, list(rows[0])))
        return 0
    if not args.id:
        raise _usage("models show: give a model id, e.g. `planner models show llama-2-7b`")
    m = load_model(args.id)
    d = m.model_dump(exclude_none=True)
    d["param_breakdown"] = m.param_breakdown()
    print(json.dumps(d, indent=2) if args.json else _yaml(d))
    return 0


def cmd_sweep(args) -> int:
    import time

    from .io import atomic_write_text, writable_target
    from .sweep import sweep

    out = args.out
    if out is not None and not out.endswith((".csv", ".json", ".md")):  # before the work, not after
        raise _usage(f"--out: unknown table type '{out}'; allowed endings: .csv, .json, .md")
    if out is not None:
        writable_target(out)  # a missing folder too: before the work and its warnings
    t0 = time.perf_counter()
    df = sweep(args.models, args.hardware, args.weights, args.batch, args.prompt, args.output, args.kv_dtype,
               efficiency=efficiency_mode(args), runtime=args.runtime)
    dt = time.perf_counter() - t0
    from .architecture import load_model
    longest = max(args.prompt) + max(args.output)
    for mid in dict.fromkeys(args.models):  # as estimate warns: the model refuses such contexts
        if (too_long := load_model(mid).context_warning(longest)) is not None:
            print(f"warning: {too_long}; rows beyond it are what such a context would need", file=sys.stderr)
    df = _with_verdict(df)
    if out is None:
        print(_blank_missing(df).to_string(index=False, max_rows=60))
    elif out.endswith(".csv"):
        atomic_write_text(out, df.to_csv(index=False, na_rep=""), make_dirs=False)
    elif out.endswith(".json"):  # a figure that does not exist (a row that does not fit) is null
        atomic_write_text(out, df.to_json(orient="records", indent=1), make_dirs=False)
    elif out.endswith(".md"):
        atomic_write_text(out, _md(_blank_missing(df)), make_dirs=False)
    else:
        raise _usage(f"--out: unknown table type '{out}'; allowed endings: .csv, .json, .md")
    print(f"{len(df):,} configurations in {dt:.3f} s ({_rate(len(df) / max(dt, 1e-9))} per second)"
          + (f" -> {out}" if out else ""), file=sys.stderr)
    return 0


# ---------------------------------------------------------------- helpers


def _rate(x: float) -> str:
    return f"{x:,.0f}" if x >= 10 else f"{x:.2g}"


def _usage(msg: str):
    from .errors import PlannerError
    return PlannerError(msg)


def _yaml(d) -> str:
    import yaml
    return yaml.safe_dump(d, sort_keys=False, allow_unicode=True).rstrip()


def _with_verdict(df):
    """A `verdict` column beside `fits`: 'fits' or 'does not fit: needs X GB of Y GB' (the sweep leaves the
    latencies of a configuration that does not fit empty: there is nothing to time)."""
    verdict = [("fits" if ok else f"does not fit: needs {t:.2f} GB of {c:.2f} GB")
               for ok, t, c in zip(df["fits"], df["total_gb"], df["capacity_gb"])]
    return df.assign(verdict=verdict)


def _blank_missing(df):
    """Text renderings: a figure that does not exist prints as '-', never NaN."""
    out = df.copy()
    for c in out.columns:
        if out[c].dtype.kind == "f" and out[c].isna().any():
            out[c] = [("-" if v != v else f"{v:.6g}") for v in out[c]]
    return out


def _md(df) -> str:
    cols = list(df.columns)
    rows = ["| " + " | ".join(cols) + " |", "|" + "|".join("---" for _ in cols) + "|"]
    for rec in df.itertuples(index=False):
        rows.append("| " + " | ".join(f"{v:.4g}" if isinstance(v, float) else str(v) for v in rec) + " |")
    return "\n".join(rows) + "\n"


def build_parser(core_only: bool = False) -> argparse.ArgumentParser:
    """The parser of every subcommand; core_only: only the commands defined here (estimate, hardware, models,
    sweep), without importing the extensions (main: for the commands in _FAST)."""
    ap = _Parser(prog="planner", description="LLM inference performance model and capacity planner")
    sub = ap.add_subparsers(dest="command", required=True, parser_class=_Parser)

    p = sub.add_parser("estimate", help="memory, latency and throughput of one configuration")
    add_workload_args(p)
    add_engine_memory_args(p)
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.add_argument("--ops", action="store_true", help="also print the per-operator table")
    p.add_argument("--explain", action="store_true",
                   help="also print the share of peak compute and bandwidth the prediction implies")
    p.set_defaults(func=cmd_estimate)

    p = sub.add_parser("hardware", help="list or show hardware specs")
    p.add_argument("action", choices=["list", "show"])
    p.add_argument("id", nargs="?")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_hardware)

    p = sub.add_parser("models", help="list or show catalog models")
    p.add_argument("action", choices=["list", "show"])
    p.add_argument("id", nargs="?")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_models)

    p = sub.add_parser("sweep", help="evaluate a grid of configurations (vectorized) and write a table")
    p.add_argument("--models", type=str_list, required=True, help="comma-separated model ids")
    p.add_argument("--hardware", type=str_list, required=True, help="comma-separated hardware ids")
    p.add_argument("--weights", type=str_list, default=["fp16"], help="comma-separated formats")
    p.add_argument("--kv-dtype", default="fp16")
    p.add_argument("--batch", type=int_list, default=[1], help="comma-separated batch sizes")
    p.add_argument("--prompt", type=int_list, default=[512], help="comma-separated prompt lengths")
    p.add_argument("--output", type=int_list, default=[128], help="comma-separated output lengths")
    p.add_argument("--out", default=None, help="write .csv, .json or .md (default: print)")
    p.add_argument("--runtime", default=None, help=f"engine profile ({RUNTIME_IDS}): its fitted efficiency and unit, "
                   "as in `planner estimate`")
    eff = p.add_mutually_exclusive_group()
    eff.add_argument("--no-calibration", action="store_true")
    eff.add_argument("--datasheet", action="store_true")
    p.set_defaults(func=cmd_sweep)

    for name in () if core_only else _EXTENSIONS:
        try:
            mod = importlib.import_module(name)
        except ModuleNotFoundError as exc:
            if exc.name == name:
                continue
            raise
        mod.register(sub)
    return ap


def main(argv: list[str] | None = None) -> int:
    from .errors import DoesNotFit, PlannerError

    words = sys.argv[1:] if argv is None else argv
    args = (build_parser(core_only=True) if words and words[0] in _FAST else build_parser()).parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except DoesNotFit as exc:  # a verdict, not an error
        print(str(exc))
        return 0
    except PlannerError as exc:  # one line, whatever a parser's message held
        print(f"error: {' '.join(str(exc).split())}", file=sys.stderr)
        return 2
    except BrokenPipeError:
        return 0
    except ModuleNotFoundError as exc:  # an optional dependency this command needs
        extra = _EXTRAS.get((exc.name or "").split(".")[0])
        hint = f"pip install -e '.[{extra}]'" if extra else f"pip install {exc.name}"
        print(f"error: this command needs {exc.name}, which is not installed: {hint}", file=sys.stderr)
        return 2
    except OSError as exc:  # an output path that cannot be written, a disk full: one line, never a traceback
        where = f"{exc.filename}: " if getattr(exc, "filename", None) else ""
        print(f"error: {where}{exc.strerror or exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("error: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
