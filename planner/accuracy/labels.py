"""Catalog ids for the hardware and model labels of measurement files that the explicit tables of data.py and
serving_rows.py do not list (a new source, or a user's own file for `planner accuracy --data`).

Hardware: the label and every catalog id are cut into tokens (lower case; vendor and filler words dropped:
NVIDIA, GeForce, AMD, Instinct, Radeon, Intel, Tesla, GPU, Graphics, Generation, Edition; SXM4/SXM5 -> sxm; an Apple
"(30-core GPU)" -> 30c). A spec matches when all its id's tokens are in the label's; the match with the most tokens
wins ("RTX 3080 Ti" -> rtx-3080-ti, not rtx-3080), unless a label token it lacks belongs to more specific ids only
("RTX 4060 Ti" names rtx-4060-ti-8gb or -16gb, not rtx-4060: unmapped, with the two). Nothing is guessed: a label that names no variant where the
catalog has several ("A100 80GB": SXM or PCIe; "H100"; an Apple chip without its GPU core count where the catalog
holds a binned one) or that ties between specs resolves to None with the candidates in the reason.

Names that stand for one catalog device (GPU_NAMES): the chip or GPU name of a system-on-chip ("NVIDIA GB10" is the
DGX Spark's, and the ASUS / Dell GB10 boxes' chip; "Radeon 8060S" is the 40-CU GPU of the Ryzen AI Max+ 395), and
nvidia-smi's name for the H100 SXM5, "NVIDIA H100 80GB HBM3" (the PCIe card reports "H100 PCIe", the NVL "H100 NVL").

Model: the label, without an organisation prefix (meta-llama/) and the suffixes that name a tuning, packaging or
dated re-release of the same weights' shapes (-Instruct, -Chat, -hf, -it, -Base, -Thinking, -GGUF, -AWQ, -GPTQ,
-Int4, -FP8, a YYMM release tag such as Qwen3's -2507), lower case, spaces as hyphens, with a leading "Meta-"
dropped, must equal a catalog id ("Meta-Llama-3.1-8B-Instruct" -> llama-3.1-8b, "Llama 3.1 8B" -> llama-3.1-8b).
A version tag (-v0.1) counts only where the catalog entry was built from that version's config.json
("Mixtral-8x7B-Instruct-v0.1" -> mixtral-8x7b; "Mistral-7B-Instruct-v0.3", a new vocabulary and no sliding window,
stays unmapped). No fuzzy match: a version or size the catalog does not hold stays unmapped.
"""

from __future__ import annotations

import re

_DROP = {"nvidia", "geforce", "amd", "instinct", "radeon", "intel", "tesla", "gpu", "graphics", "generation",
         "edition", "card", "the"}
_SYNONYMS = {"sxm4": "sxm", "sxm5": "sxm", "sxm6": "sxm", "pci": "pcie"}
_APPLE_CORES = re.compile(r"(\d+)[- ]core gpu")
_MODEL_SUFFIXES = re.compile(
    r"(-(instruct|chat|hf|it|base|thinking|gguf|awq|gptq|int4|int8|fp8|bf16|fp16|2[0-9][01][0-9]))+$")
_VERSION_TAG = re.compile(r"^(.*?)(?:-(?:instruct|chat|base))?-(v\d+(?:\.\d+)?)$")
# a chip or GPU name that stands for one catalog device (module docstring): label tokens -> the device's id tokens
GPU_NAMES = {frozenset({"gb10"}): "dgx-spark", frozenset({"8060s"}): "ryzen-ai-max-395",
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


def model_id(label, known) -> str | None:
    """The catalog id a model label names exactly, tuning and packaging suffixes aside (module docstring)."""
    if not isinstance(label, str) or not label.strip():
        return None
    name = label.strip().split("/")[-1].lower()
    name = re.sub(r"\s*\(.*\)$", "", name).replace("_", "-")
    name = re.sub(r"\s+", "-", name.strip())
    name = re.sub(r"^meta-", "", _MODEL_SUFFIXES.sub("", name))
    if name in known:
        return name
    tagged = _VERSION_TAG.match(name)
    if tagged and tagged.group(1) in known and _built_from_version(tagged.group(1), tagged.group(2)):
        return tagged.group(1)
    return None


def _built_from_version(model: str, version: str) -> bool:
    """Whether the catalog entry's config.json source names that release ('Mistral-7B-v0.1' in its `source`)."""
    from ..architecture import load_model
    return bool(re.search(rf"-{re.escape(version)}\b", str(load_model(model).source), re.I))
