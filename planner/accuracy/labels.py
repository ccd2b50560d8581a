"""Catalog ids for the hardware and model labels of measurement files that the explicit tables of data.py and
serving_rows.py do not list (a new source, or a user's own file for `planner accuracy --data`).

Hardware: the label and every catalog id are cut into tokens (lower case; vendor and filler words dropped:
NVIDIA, GeForce, AMD, Instinct, Radeon, Intel, Tesla, GPU, Graphics, Generation, Edition; SXM4/SXM5 -> sxm; an Apple
"(30-core GPU)" -> 30c). A spec matches when all its id's tokens are in the label's; the match with the most tokens
wins ("RTX 3080 Ti" -> rtx-3080-ti, not rtx-3080), unless a label token it lacks belongs to more specific ids only
("RTX 4060 Ti" names rtx-4060-ti-8gb or -16gb, not rtx-4060: unmapped, with the two). Nothing is guessed: a label
that names no variant where the catalog has several ("A100 80GB": SXM or PCIe; "H100"; an Apple chip without its GPU
core count where the catalog holds a binned one) or that ties between specs resolves to None with the candidates in
the reason.

Names that stand for one catalog device (GPU_NAMES): the chip or GPU name of a system-on-chip ("NVIDIA GB10" is the
DGX Spark's, and the ASUS / Dell GB10 boxes' chip; "Radeon 8060S" is the 40-CU GPU of the Ryzen AI Max+ 395, "Radeon
890M" the 16-CU GPU of the Ryzen AI 9 HX 370), and
nvidia-smi's name for the H100 SXM5, "NVIDIA H100 80GB HBM3" (the PCIe card reports "H100 PCIe", the NVL "H100 NVL").

Model: the label, without an organisation prefix (meta-llama/) and the suffixes that name a tuning, packaging or
dated re-release of the same weights' shapes (-Instruct, -Chat, -hf, -it, -Base, -Thinking, -GGUF, -AWQ, -GPTQ,
-Int4, -FP8, a YYMM release tag such as Qwen3's -2507), lower case, spaces as hyphens, with a leading "Meta-"
dropped, must equal a catalog id ("Meta-Llama-3.1-8B-Instruct" -> llama-3.1-8b, "Llama 3.1 8B" -> llama-3.1-8b), or
the name of the Hugging Face repo whose config.json the entry was built from, normalized the same way (its `source`:
"Mistral-Small-24B-Instruct-2501" -> mistral-small-3-24b), or a derivative that kept the base's shapes (DERIVATIVES:
DeepSeek's R1 distillations, the Qwen2.5-Coder models, dated DeepSeek re-releases).
A version tag (-v0.1) counts only where the catalog entry was built from that version's config.json
("Mixtral-8x7B-Instruct-v0.1" -> mixtral-8x7b; "Mistral-7B-Instruct-v0.3", a new vocabulary and no sliding window,
stays unmapped). No fuzzy match: a version or size the catalog does not hold stays unmapped.
"""

from __future__ import annotations

import re
from functools import lru_cache

_DROP = {"nvidia", "geforce", "amd", "instinct", "radeon", "intel", "tesla", "gpu", "graphics", "generation",
         "edition", "card", "the"}
_SYNONYMS = {"sxm4": "sxm", "sxm5": "sxm", "sxm6": "sxm", "pci": "pcie"}
_APPLE_CORES = re.compile(r"(\d+)[- ]core gpu")
_MODEL_SUFFIXES = re.compile(
    r"(-(instruct|chat|hf|it|base|thinking|gguf|awq|gptq|int4|int8|fp8|bf16|fp16|2[0-9][01][0-9]))+$")
_VERSION_TAG = re.compile(r"^(.*?)(?:-(?:instruct|chat|base))?-(v\d+(?:\.\d+)?)$")
# a chip or GPU name that stands for one catalog device (module docstring): label tokens -> the device's id tokens
GPU_NAMES = {frozenset({"gb10"}): "dgx-spark", frozenset({"8060s"}): "ryzen-ai-max-395",
             frozenset({"890m"}): "ryzen-ai-9-hx-370",
             frozenset({"h100", "hbm3"}): "h100-sxm"}


def _tokens(text: str) -> set[str]:
    text = text.lower()
    cores = _APPLE_CORES.search(text)
    text = _APPLE_CORES.sub(" ", text)
    text = re.sub(r"\d+[- ]core cpu", " ", text)
    toks = {_SYNONYMS.get(t, t) for t in re.split(r"[^a-z0-9.]+", text) if t and t not in _DROP}
    if cores:
        toks.add(f"{cores.group(1)}c")
    for names, spec_id in GPU_NAMES.items():
        if names <= toks and not toks & {"pcie", "nvl"}:
            toks |= _id_tokens(spec_id)
    return toks


def _id_tokens(spec_id: str) -> set[str]:
    return {_SYNONYMS.get(t, t) for t in spec_id.split("-") if t not in _DROP}


def hardware_id(label, known) -> tuple[str | None, str | None]:
    """(catalog id, None) or (None, reason) for a hardware label (module docstring); `known`: the catalog ids."""
    if not isinstance(label, str) or not label.strip():
        return None, "no hardware label"
    label = re.sub(r"^\d+ ?x ?", "", label.strip())  # "8x H100 SXM": the count is the row's parallelism
    toks = _tokens(label)
    hits = sorted(((len(_id_tokens(i)), i) for i in known if _id_tokens(i) <= toks), reverse=True)
    near = [i for i in known if toks <= _id_tokens(i)]  # the variants the label does not choose between
    if not hits:
        return None, (f"hardware '{label}' has no catalog id" + (f" (it does not say which of {', '.join(sorted(near))})"
                                                                  if near else ""))
    best_n = hits[0][0]
    best = [i for n, i in hits if n == best_n]
    if len(best) > 1:
        return None, f"hardware '{label}' matches {', '.join(sorted(best))} alike"
    spec_id = best[0]
    # a label token the match lacks that only more specific ids carry ("RTX 4060 Ti" -> rtx-4060 by its tokens, but
    # "ti" is in rtx-4060-ti-8gb and rtx-4060-ti-16gb): the label names one of those, not the plain card
    extra, base = toks - _id_tokens(spec_id), _id_tokens(spec_id)
    finer = sorted(i for i in known if base < _id_tokens(i) and (_id_tokens(i) - base) & extra)
    if finer:
        return None, f"hardware '{label}' has no catalog id (it does not say which of {', '.join(finer)})"
    cores = next((t[:-1] for t in toks if t.endswith("c") and t[:-1].isdigit()), None)
    if spec_id.startswith("apple-") and cores is not None:
        from ..hardware import load_hardware
        if f"{cores}-core gpu" not in load_hardware(spec_id).name.lower():
            return None, f"hardware '{label}': no catalog bin of {spec_id} has {cores} GPU cores"
    if spec_id.startswith("apple-") and cores is None:
        binned = [i for i in known if re.fullmatch(re.escape(spec_id) + r"-\d+c", i)]
        if binned:
            return None, (f"hardware '{label}' does not state the GPU core count of {spec_id} "
                          f"(the catalog holds {', '.join(sorted([spec_id] + binned))})")
    return spec_id, None


# derivatives whose config.json has the catalog entry's shapes (layers, widths, heads, experts, vocabulary): the
# model card names the base, and the fine-tune, distillation or dated re-release kept its architecture
DERIVATIVES = {
    "deepseek-r1-distill-llama-70b": "llama-3.3-70b",   # model card: base Llama-3.3-70B-Instruct
    "deepseek-r1-distill-llama-8b": "llama-3.1-8b",     # base Llama-3.1-8B
    "deepseek-r1-distill-qwen-32b": "qwen2.5-32b",      # base Qwen2.5-32B
    "deepseek-r1-distill-qwen-14b": "qwen2.5-14b",      # base Qwen2.5-14B
    "deepseek-r1-distill-qwen-7b": "qwen2.5-7b",        # base Qwen2.5-Math-7B: Qwen2.5-7B's shapes
    "deepseek-r1-distill-qwen-1.5b": "qwen2.5-1.5b",    # base Qwen2.5-Math-1.5B: Qwen2.5-1.5B's shapes
    "qwen2.5-coder-32b": "qwen2.5-32b", "qwen2.5-coder-14b": "qwen2.5-14b", "qwen2.5-coder-7b": "qwen2.5-7b",
    "qwen3-coder-30b-a3b": "qwen3-30b-a3b",             # 48 layers, 128 experts top-8, 2048 wide (262K context)
    "deepseek-v3-0324": "deepseek-v3", "deepseek-v3.1": "deepseek-v3", "deepseek-r1-0528": "deepseek-r1",
    "llama-3.1-nemotron-70b": "llama-3.1-70b",          # NVIDIA's Llama-3.1-Nemotron-70B-Instruct fine-tune
}


def model_id(label, known) -> str | None:
    """The catalog id a model label names exactly, tuning and packaging suffixes aside (module docstring): the id
    itself, the Hugging Face repo the entry's config.json comes from (its `source`: 'Phi-3-mini-4k-instruct' ->
    phi-3-mini, 'Mistral-Small-24B-Instruct-2501' -> mistral-small-3-24b), or a derivative of the same shapes
    (DERIVATIVES)."""
    if not isinstance(label, str) or not label.strip():
        return None
    name = _model_name(label)
    if name in known:
        return name
    tagged = _VERSION_TAG.match(name)
    if tagged and tagged.group(1) in known and _built_from_version(tagged.group(1), tagged.group(2)):
        return tagged.group(1)
    for hit in (_repo_ids(frozenset(known)).get(name), DERIVATIVES.get(name)):
        if hit in known:
            return hit
    return None


def _model_name(label: str) -> str:
    """A model label or repo name, normalized: last path component, lower case, spaces and underscores as hyphens,
    tuning / packaging / release-tag suffixes and a leading 'Meta-' dropped."""
    name = label.strip().split("/")[-1].lower()
    name = re.sub(r"\s*\(.*\)$", "", name).replace("_", "-")
    name = re.sub(r"\s+", "-", name.strip())
    return re.sub(r"^meta-", "", _MODEL_SUFFIXES.sub("", name))


@lru_cache(maxsize=4)
def _repo_ids(known: frozenset) -> dict[str, str]:
    """{normalized name of the Hugging Face repo a catalog entry was built from: its id}, from each entry's `source`
    (its first huggingface.co/<org>/<repo> URL); a name two entries share is left out."""
    from ..architecture import load_model
    out, seen = {}, set()
    for mid in sorted(known):
        m = re.search(r"huggingface\.co/[^/\s]+/([^/\s;]+)", str(load_model(mid).source))
        if m is None:
            continue
        key = _model_name(m.group(1))
        if key in out and out[key] != mid:
            seen.add(key)
        out[key] = mid
    return {k: v for k, v in out.items() if k not in seen}


def _built_from_version(model: str, version: str) -> bool:
    """Whether the catalog entry's config.json source names that release ('Mistral-7B-v0.1' in its `source`)."""
    from ..architecture import load_model
    return bool(re.search(rf"-{re.escape(version)}\b", str(load_model(model).source), re.I))
