"""Model files users already have: exact weight bytes from a GGUF header or safetensors headers.

* GGUF (`--model model.gguf`): the header (read with the `gguf` package that llama.cpp publishes, imported only
  here) gives the architecture and every tensor's type and size, so the weight bytes are exact for any llama.cpp
  quantization mix (Q4_K_M, IQ4_XS, ...). The architecture keys are mapped to config.json names and go through the
  same schema as a config.json (planner.hf_config).
* safetensors (`--model folder/` with config.json): each `*.safetensors` file starts with an 8-byte little-endian
  header length and a JSON header listing every tensor's dtype, shape and byte offsets; read here without torch.
  Without the weight files, `model.safetensors.index.json`'s metadata.total_size gives the exact total.

The file's bytes replace parameters x bits whenever the requested format is the file's own (`--weights` omitted,
or naming the file's format); the estimate says which was used (`weights_source`).
"""

from __future__ import annotations

import json
import struct
from dataclasses import dataclass
from pathlib import Path

from .errors import PlannerError
from .quantization import WEIGHT_FORMATS, WeightFormat, weight_format

HEADER_CAP_BYTES = 100 * 2 ** 20  # a safetensors JSON header beyond 100 MiB is not a real checkpoint

GROUPS = ("embedding", "linear", "routed_experts", "norms", "lm_head", "vision", "other")


def tensor_group(name: str) -> str:
    """Weight group of a tensor by its name (HF and GGUF naming)."""
    n = name.lower()
    if any(k in n for k in ("vision", "visual", "multi_modal_projector", "mm_", "v.blk", "mmproj")):
        return "vision"
    if "embed_tokens" in n or n.startswith("token_embd") or "wte" in n or "word_embeddings" in n:
        return "embedding"
    if n.startswith("lm_head") or n.startswith("output.") or n == "output.weight":
        return "lm_head"
    if "norm" in n or n.endswith("_ln.weight") or ".ln_" in n:
        return "norms"
    if ("experts" in n and "shared" not in n) or "_exps" in n:
        return "routed_experts"
    if n.endswith(".weight") or n.endswith(".bias") or "proj" in n or n.startswith("blk."):
        return "linear"
    return "other"


@dataclass(frozen=True)
class WeightsFile:
    """Exact weight bytes read from a model file."""

    path: str
    kind: str                                   # "gguf" | "safetensors" | "safetensors index"
    total_bytes: int
    groups: tuple[tuple[str, int], ...]         # (group, bytes)
    dtypes: tuple[tuple[str, int], ...]         # (dtype or GGML type, bytes), largest first
    n_tensors: int
    format_name: str                            # the weight format this file holds
    formats: tuple[str, ...]                    # format names whose request uses these bytes
    params: int = 0                             # elements over all tensors (0 when unknown)

    @property
    def bytes_by_group(self) -> dict[str, float]:
        return {g: float(b) for g, b in self.groups}

    def matches(self, fmt: WeightFormat) -> bool:
        return fmt.name in self.formats

    def describe(self) -> str:
        mix = ", ".join(f"{d} {b / 1e9:.2f} GB" for d, b in self.dtypes[:4])
        more = f" +{len(self.dtypes) - 4} types" if len(self.dtypes) > 4 else ""
        n = f"{self.n_tensors:,} tensors, " if self.n_tensors else ""
        return f"{self.kind} {Path(self.path).name}: {n}{self.total_bytes / 1e9:.2f} GB ({mix}{more})"

    def weight_format(self) -> WeightFormat:
        """The WeightFormat this file holds: a catalog format when the file is one, else one built from the
        file's mean bits per weight (an IQ4_XS or Q3_K_S GGUF)."""
        if self.format_name in WEIGHT_FORMATS:
            return WEIGHT_FORMATS[self.format_name]
        bits = 8.0 * self.total_bytes / self.params if self.params else 16.0
        return WeightFormat(self.format_name, bits, ("bf16", "fp16", "int8", "fp32"), bits, bits,
                            description=f"mixed quantization read from {Path(self.path).name}")


def resolve_weights(m, weights) -> WeightFormat:
    """The weight format of a request: a WeightFormat, a format name, or None = the model file's own format
    (fp16 for a model without a file)."""
    if isinstance(weights, WeightFormat):
        return weights
    wf = getattr(m, "weights_file", None)
    if weights is None or (isinstance(weights, str) and weights.lower() in ("auto", "file")):
        return wf.weight_format() if wf is not None else weight_format("fp16")
    if not isinstance(weights, str):
        raise PlannerError(f"--weights: must be a format name, got {type(weights).__name__}; allowed: "
                           + ", ".join(WEIGHT_FORMATS))
    return weight_format(weights)


def _summary(path, kind, sizes: list[tuple[str, str, int, int]], format_name, formats) -> WeightsFile:
    """sizes: (tensor name, dtype, bytes, elements)."""
    groups: dict[str, int] = {}
    dtypes: dict[str, int] = {}
    params = 0
    for name, dt, nb, ne in sizes:
        g = tensor_group(name)
        groups[g] = groups.get(g, 0) + nb
        dtypes[dt] = dtypes.get(dt, 0) + nb
        params += ne
    return WeightsFile(str(path), kind, sum(groups.values()), tuple(sorted(groups.items())),
                       tuple(sorted(dtypes.items(), key=lambda kv: -kv[1])), len(sizes), format_name, formats, params)


# ---------------------------------------------------------------- safetensors

_ST_DTYPE_BYTES = {"F64": 8, "F32": 4, "F16": 2, "BF16": 2, "I64": 8, "I32": 4, "I16": 2, "I8": 1, "U8": 1,
                   "BOOL": 1, "F8_E4M3": 1, "F8_E5M2": 1, "F8_E8M0": 1, "U16": 2, "U32": 4, "U64": 8, "F4": 0.5}
_ST_FORMAT = {"BF16": ("bf16", ("bf16", "fp16")), "F16": ("fp16", ("fp16", "bf16")), "F32": ("fp32", ("fp32",)),
              "F8_E4M3": ("fp8", ("fp8",)), "F8_E5M2": ("fp8", ("fp8",))}
_QUANT_METHOD = {"mxfp4": ("mxfp4", ("bf16", "fp16", "mxfp4")), "fp8": ("fp8", ("fp8", "bf16", "fp16")),
                 "gptq": ("gptq-int4", ("gptq-int4",)), "awq": ("awq-int4", ("awq-int4",)),
                 "bitsandbytes": ("nf4", ("nf4",)), "compressed-tensors": ("fp8", ("fp8",))}


def read_safetensors_header(path: Path) -> dict:
    """The JSON header of one .safetensors file: 8-byte little-endian length, then that many bytes of JSON."""
    try:
        with open(path, "rb") as fh:
            raw = fh.read(8)
            if len(raw) != 8:
                raise PlannerError(f"{path}: not a safetensors file (shorter than its 8-byte header length)")
            (n,) = struct.unpack("<Q", raw)
            if n <= 1 or n > HEADER_CAP_BYTES:
                raise PlannerError(f"{path}: safetensors header length {n} is not plausible (max {HEADER_CAP_BYTES})")
            text = fh.read(n)
    except OSError as exc:
        raise PlannerError(f"{path}: cannot read: {exc.strerror}") from None
    if len(text) != n:
        raise PlannerError(f"{path}: safetensors header truncated ({len(text)} of {n} bytes)")
    try:
        hdr = json.loads(text)
    except (ValueError, RecursionError):
        raise PlannerError(f"{path}: safetensors header is not valid JSON") from None
    if not isinstance(hdr, dict):
        raise PlannerError(f"{path}: safetensors header must be a JSON object")
    return hdr


def _tensor_sizes(path: Path, hdr: dict) -> list[tuple[str, str, int, int]]:
    out = []
    for name, t in hdr.items():
        if name == "__metadata__":
            continue
        if not isinstance(t, dict) or not isinstance(t.get("dtype"), str) or not isinstance(t.get("shape"), list) \
                or not isinstance(t.get("data_offsets"), list) or len(t["data_offsets"]) != 2:
            raise PlannerError(f"{path}: tensor {str(name)[:60]!r}: needs dtype, shape and data_offsets")
        a, b = t["data_offsets"]
        shape = t["shape"]
        if not all(isinstance(x, int) and not isinstance(x, bool) and x >= 0 for x in (a, b, *shape)) or b < a:
            raise PlannerError(f"{path}: tensor {str(name)[:60]!r}: offsets and shape must be non-negative integers")
        ne = 1
        for d in shape:
            ne *= d
        out.append((str(name), t["dtype"], b - a, ne))
    return out


_INT4_METHODS = ("gptq", "awq")  # their quantization_config.bits: the planner's formats are 4-bit


def _format_of(cfg: dict, dtype_bytes: dict[str, int], where: str = "model folder") -> tuple[str, tuple[str, ...]]:
    """(weight format, formats the file runs as) from quantization_config, else the dominant tensor dtype; a method,
    bit width or dtype the planner does not read is an error naming the allowed ones (never a silent bf16)."""
    q = cfg.get("quantization_config") if isinstance(cfg, dict) else None
    if isinstance(q, dict) and q.get("quant_method") is not None:
        method = q["quant_method"]
        if not isinstance(method, str) or method not in _QUANT_METHOD:
            raise PlannerError(f"{where}: quantization_config.quant_method {method!r} is not one the planner reads; "
                               f"known: {', '.join(_QUANT_METHOD)}")
        bits = q.get("bits", 4)
        if method in _INT4_METHODS and bits != 4:
            raise PlannerError(f"{where}: quantization_config.bits {bits!r} with {method}: the planner's {method} "
                               f"format is 4-bit ({_QUANT_METHOD[method][0]}); give --weights for another width")
        if method == "bitsandbytes" and q.get("load_in_8bit"):
            return "int8", ("int8",)
        return _QUANT_METHOD[method]
    top = max(dtype_bytes, key=dtype_bytes.get) if dtype_bytes else "BF16"
    if top not in _ST_FORMAT:
        raise PlannerError(f"{where}: most weight bytes are {top} tensors, a dtype the planner does not read as a "
                           f"weight format; known: {', '.join(_ST_FORMAT)} (or a quantization_config)")
    return _ST_FORMAT[top]


def read_safetensors_folder(folder: Path, cfg: dict) -> WeightsFile | None:
    """Exact weight bytes of a HF model folder: every *.safetensors header, else the index's total_size."""
    files = sorted(folder.glob("*.safetensors"))
    index = folder / "model.safetensors.index.json"
    if files:
        sizes = []
        for f in files:
            sizes += _tensor_sizes(f, read_safetensors_header(f))
        dt: dict[str, int] = {}
        for _, d, nb, _ in sizes:
            dt[d] = dt.get(d, 0) + nb
        where = files[0] if len(files) == 1 else folder
        name, formats = _format_of(cfg, dt, str(where))
        return _summary(where, "safetensors", sizes, name, formats)
    if index.exists():
        from .io import read_json
        data = read_json(index)
        meta = data.get("metadata") if isinstance(data, dict) else None
        total = meta.get("total_size") if isinstance(meta, dict) else None
        if not isinstance(total, int) or isinstance(total, bool) or not 0 < total < 2 ** 53:
            raise PlannerError(f"{index}: metadata.total_size must be a positive integer byte count")
        torch_dtype = cfg.get("torch_dtype") or cfg.get("dtype") or "bfloat16"
        known = {"bfloat16": "BF16", "float16": "F16", "float32": "F32"}
        if str(torch_dtype) not in known:
            raise PlannerError(f"{index}: config torch_dtype {torch_dtype!r} is not one the planner reads; known: "
                               f"{', '.join(known)}")
        st = known[str(torch_dtype)]
        name, formats = _format_of(cfg, {st: total}, str(index))
        return WeightsFile(str(index), "safetensors index", total, (("all", total),), ((st, total),), 0, name, formats)
    return None


# ---------------------------------------------------------------- GGUF

# GGUF architecture -> config.json model_type; keys under "<arch>." -> config.json names
_GGUF_ARCH = {"llama": "llama", "mistral3": "mistral", "qwen2": "qwen2", "qwen2moe": "qwen2_moe", "qwen3": "qwen3",
              "qwen3moe": "qwen3_moe", "gemma": "gemma", "gemma2": "gemma2", "gemma3": "gemma3_text",
              "phi3": "phi3", "gpt-oss": "gpt_oss", "deepseek2": "deepseek_v3", "glm4moe": "glm4_moe"}
_GGUF_KEYS = {"embedding_length": "hidden_size", "block_count": "num_hidden_layers",
              "feed_forward_length": "intermediate_size", "context_length": "max_position_embeddings",
              "attention.head_count": "num_attention_heads", "attention.head_count_kv": "num_key_value_heads",
              "attention.key_length": "head_dim", "attention.sliding_window": "sliding_window",
              "expert_count": "_experts", "expert_used_count": "num_experts_per_tok",
              "expert_feed_forward_length": "moe_intermediate_size", "expert_shared_count": "n_shared_experts",
              "leading_dense_block_count": "first_k_dense_replace", "attention.kv_lora_rank": "kv_lora_rank",
              "attention.q_lora_rank": "q_lora_rank", "rope.dimension_count": "_rope_dim",
              "attention.value_length": "_value_length", "vocab_size": "vocab_size",
              "expert_shared_feed_forward_length": "shared_expert_intermediate_size"}
# llama.cpp general.file_type (llama.h enum llama_ftype) -> catalog format
_GGUF_FILE_TYPE = {0: "fp32", 1: "fp16", 2: "q4_0", 3: "q4_1", 7: "q8_0", 8: "q5_0", 9: "q5_1", 10: "q2_k",
                   11: "q3_k_s", 12: "q3_k_m", 13: "q3_k_l", 14: "q4_k_s", 15: "q4_k_m", 16: "q5_k_s", 17: "q5_k_m",
                   18: "q6_k", 25: "iq4_nl", 30: "iq4_xs", 32: "bf16", 38: "mxfp4_moe"}  # 38: MXFP4_MOE (gpt-oss)


def _field_value(field):
    """A scalar or string value of a GGUFReader field (arrays: their length)."""
    import gguf

    t = field.types[0] if field.types else None
    if t == gguf.GGUFValueType.ARRAY:
        return len(field.data)
    if t == gguf.GGUFValueType.STRING:
        return bytes(field.parts[field.data[0]]).decode("utf-8", errors="replace")
    v = field.parts[field.data[0]]
    return v.tolist()[0] if hasattr(v, "tolist") else v


def read_gguf(path: Path) -> tuple[dict, WeightsFile]:
    """(config.json-like dict, exact tensor bytes) from a GGUF file's header."""
    try:
        import gguf
    except ImportError:  # pragma: no cover - a dependency of the package
        raise PlannerError("--model: reading .gguf files needs the `gguf` package (pip install gguf)") from None
    try:
        reader = gguf.GGUFReader(str(path), "r")
    except Exception as exc:  # the reader raises ValueError/struct errors/… on a malformed file
        raise PlannerError(f"{path}: not a readable GGUF file ({type(exc).__name__}: {str(exc)[:80]})") from None
    fields = {name: f for name, f in reader.fields.items()}

    def get(key, default=None):
        f = fields.get(key)
        if f is None:
            return default
        try:
            return _field_value(f)
        except Exception:
            raise PlannerError(f"{path}: GGUF field {key}: unreadable value") from None

    arch = get("general.architecture")
    if not isinstance(arch, str) or arch not in _GGUF_ARCH:
        raise PlannerError(f"{path}: unsupported GGUF architecture {str(arch)[:40]!r}; supported: "
                           + ", ".join(sorted(_GGUF_ARCH)))
    cfg: dict = {"model_type": _GGUF_ARCH[arch]}
    for k, name in _GGUF_KEYS.items():
        v = get(f"{arch}.{k}")
        if v is not None:
            cfg[name] = v
    if "vocab_size" not in cfg:
        n = get("tokenizer.ggml.tokens")
        if n is not None:
            cfg["vocab_size"] = n
    experts = cfg.pop("_experts", None)
    rope, vlen = cfg.pop("_rope_dim", None), cfg.pop("_value_length", None)
    if experts:
        key = {"llama": "num_local_experts", "gpt_oss": "num_local_experts", "qwen2_moe": "num_experts",
               "qwen3_moe": "num_experts", "deepseek_v3": "n_routed_experts", "glm4_moe": "n_routed_experts"}
        cfg[key.get(cfg["model_type"], "num_local_experts")] = experts
        if cfg["model_type"] == "llama":
            cfg["model_type"] = "mixtral"
    if cfg["model_type"] == "deepseek_v3" and rope and vlen and "head_dim" in cfg:
        cfg.update(qk_rope_head_dim=rope, qk_nope_head_dim=cfg.pop("head_dim") - rope, v_head_dim=vlen)
    if cfg["model_type"] == "gpt_oss" and "moe_intermediate_size" in cfg:
        cfg["intermediate_size"] = cfg.pop("moe_intermediate_size")
    names = [t.name for t in reader.tensors]
    cfg["tie_word_embeddings"] = "output.weight" not in names
    sizes, types = [], {}
    for t in reader.tensors:
        tname = t.tensor_type.name
        sizes.append((t.name, tname, int(t.n_bytes), int(t.n_elements)))
        types[tname] = types.get(tname, 0) + int(t.n_bytes)
    ft = get("general.file_type")
    fmt_name = _GGUF_FILE_TYPE.get(ft) if isinstance(ft, int) else None
    if fmt_name is None:
        try:
            fmt_name = "gguf-" + gguf.LlamaFileType(ft).name.removeprefix("MOSTLY_").lower()
        except (ValueError, TypeError):
            top = max(types, key=types.get) if types else "f16"
            fmt_name = "gguf-" + top.lower()
    return cfg, _summary(path, "gguf", sizes, fmt_name, (fmt_name,))


def load_model_file(path: Path, name: str | None = None):
    """ModelArch with exact weight bytes from a .gguf file or a folder holding config.json (+ safetensors)."""
    from .architecture import from_hf_config
    from .io import read_json

    if path.is_dir():
        cfg_path = path / "config.json"
        if not cfg_path.exists():
            raise PlannerError(f"--model: {path} holds no config.json")
        cfg = read_json(cfg_path)
        m = from_hf_config(cfg, name=name or path.name, where=str(cfg_path))
        wf = read_safetensors_folder(path, cfg)
    else:
        cfg, wf = read_gguf(path)
        m = from_hf_config(cfg, name=name or path.stem, where=str(path))
    return m.model_copy(update={"weights_file": wf}) if wf is not None else m
