"""What the reading analyses need of a checkpoint's architecture, checked from its config.json
before any work, and the model type × analysis table of docs/pipelines.md, rendered from the same
rows.

families.py's rows say what a model type cannot do, and why (ALBERT's one shared layer has no
heads of its own to gate); an analysis's row (config/analysis_settings.py) and a prune
experiment's (config/prune_settings.py) say which capability it needs, and OPTION_NEEDS here
which an option set away from its default needs. A row that needs none reads hidden states
only, which every model type gives.
"""

from __future__ import annotations

from bertology.config.analysis_settings import ANALYSES
from bertology.config.prune_settings import PRUNE_EXPERIMENTS
from bertology.families import (
    CAPABILITIES,
    every_family,
    family_of_checkpoint,
    model_types,
    require_capability,
    why_not,
)

# an option set away from its default -> the capability it needs
OPTION_NEEDS = {"analysis.amnesic.layer": "layer_modules",
                "head.freeze_layers": "layer_modules", "head.layer_lr_decay": "layer_modules",
                "student.init=teacher_layers": "layer_modules",
                "kd.attention_weight": "attention_maps"}


# what a run asks for, as the user writes it -> (the capability it needs, the fix)
Uses = dict[str, tuple[str, str]]


def check_uses(checkpoint: dict | None, uses: Uses, key: str, path: str) -> None:
    """Refuse, in one line, the first use the checkpoint's model type cannot serve; an
    unsupported model type is refused too. `checkpoint`: its config.json, None for a hub id
    (its model type is known once it loads, where the model code refuses the same)."""
    if checkpoint is None:
        return
    where = f"{key}={path!r}"
    model_type = str(checkpoint.get("model_type"))
    family_of_checkpoint(model_type, where)
    for what, (capability, fix) in uses.items():
        require_capability(model_type, capability, what, where, fix)


def probe_uses(analyses: dict, probed: bool = True) -> Uses:
    """A probe run's analyses, and amnesic probing at a layer below the last (it hooks that
    layer's own module). probed=False: a checkpoint compared with (compare_to), whose
    attention maps are read but whose MLM head is not."""
    needs = {name: ANALYSES[name].needs for name in analyses}
    uses = {f"analysis={name}": (need, f"leave {name} out of analysis=")
            for name, need in needs.items()
            if need is not None and (probed or need == "attention_maps")}
    if not probed:
        return uses
    amnesic = analyses.get("amnesic")
    if amnesic is not None and amnesic.layer is not None:
        uses[f"analysis.amnesic.layer={amnesic.layer}"] = (
            OPTION_NEEDS["analysis.amnesic.layer"],
            "leave it null (the last layer, projected where the MLM head reads it)")
    return uses


def prune_uses(experiments: list[str]) -> Uses:
    needs = {name: PRUNE_EXPERIMENTS[name].needs for name in experiments}
    return {f"prune.experiments={name}": (need, f"leave {name} out of prune.experiments")
            for name, need in needs.items() if need is not None}


def finetune_uses(head) -> Uses:
    """Freezing the lowest layers and layer-wise learning rates need a module per layer."""
    uses = {}
    if head.freeze_layers:
        uses[f"head.freeze_layers={head.freeze_layers}"] = (
            OPTION_NEEDS["head.freeze_layers"], "leave head.freeze_layers=0")
    if head.layer_lr_decay != 1.0:
        uses[f"head.layer_lr_decay={head.layer_lr_decay}"] = (
            OPTION_NEEDS["head.layer_lr_decay"], "leave head.layer_lr_decay=1.0")
    return uses


def distill_uses(student, kd) -> Uses:
    """A student copied from the teacher's layers, and TinyBERT's attention loss."""
    uses = {}
    if student.init == "teacher_layers":
        uses["student.init=teacher_layers"] = (OPTION_NEEDS["student.init=teacher_layers"],
                                               "use student.init=random")
    if kd.attention_weight > 0:
        uses[f"kd.attention_weight={kd.attention_weight}"] = (
            OPTION_NEEDS["kd.attention_weight"], "leave kd.attention_weight=0")
    return uses


# ---------------------------------------------------------------- docs/pipelines.md's table


def uses_of(capability: str) -> str:
    """The analyses and options that need a capability, as the table's first column."""
    groups = (("probe", every_need(ANALYSES)), ("prune", every_need(PRUNE_EXPERIMENTS)),
              ("", OPTION_NEEDS))
    parts = [f"{label} {', '.join(f'`{n}`' for n, c in needs.items() if c == capability)}"
             .strip() for label, needs in groups if capability in needs.values()]
    return "; ".join(parts)


def every_need(rows: dict) -> dict[str, str]:
    """name -> the capability its row needs, for the rows that need one."""
    return {name: row.needs for name, row in rows.items() if row.needs is not None}


def render_family_table() -> str:
    """The model type × analysis table (markdown): a row per capability an analysis may need,
    a column per model type, then why each missing one is missing."""
    rows = {}
    for family in every_family().values():  # SpanBERT's checkpoints are BERT's: one column
        rows.setdefault(family.model_type, family)
    types = model_types(every_family())
    lines = ["| needs | used by | " + " | ".join(types) + " |",
             "|---|---|" + "---|" * len(types),
             "| hidden states | every other analysis; finetune; distill | "
             + " | ".join("✓" for _ in types) + " |"]
    notes = []
    for capability, meaning in CAPABILITIES.items():
        cells = []
        for model_type in types:
            reason = why_not(rows[model_type], capability)
            cells.append("✓" if reason is None else f"✗ ({len(notes) + 1})")
            if reason is not None:
                notes.append(f"{len(notes) + 1}. {model_type}, {capability}: {reason}.")
        lines.append(f"| {capability}: {meaning} | {uses_of(capability)} | "
                     + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n\n" + "\n".join(notes) + "\n"
