"""Checked views of the `probe` config: the run and its groups (each analysis's settings:
config/analysis_settings.py).

`analysis=linear` or `analysis=[linear,structural,attention]` picks analyses from conf/analysis/;
each file nests its settings under its own name (analysis.linear.*), so several compose side by
side and all of them read one extraction.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from bertology.config.analysis_settings import ANALYSES, CLOZE_DATA, analyses_needing
from bertology.config.checks import (
    build_group,
    build_top_level,
    check_label,
    check_nested,
    check_seed,
    check_seeds,
    one_of,
    positive,
    resolve_container,
    resolve_paths,
)
from bertology.config.compose import CONF_DIR, load_group_file
from bertology.config.data_checks import check_task_files, missing_data
from bertology.config.family_checks import check_uses, probe_uses
from bertology.config.groups import (
    LoggerConfig,
    ModelConfig,
    ObjectiveConfig,
    SizeConfig,
    TaskConfig,
    TrainerConfig,
    refuse_tokenizer_name_or_path,
)
from bertology.config.path_checks import check_mlm_head, read_checkpoint
from bertology.config.pretrain_config import load_pretrain_config
from bertology.config.twin_checks import check_fine_tuned_twin
from bertology.errors import require

PROBE_GROUPS = ("objective", "model", "size", "task", "analysis", "logger", "paths")


@dataclass
class ProbeRunKeys:
    """The top-level keys of conf/probe.yaml."""

    seed: int = 0
    seeds: list[int] = field(default_factory=lambda: [0, 1, 2])  # probe restarts
    init: str = "pretrained"
    pooling: str = "first"
    batch_size: int = 32
    max_train_sentences: int | None = 2000
    max_eval_sentences: int | None = 500
    sample_seed: int = 0
    compare_to: str | None = None
    compare_to_twin: str | None = None
    # model.name_or_path=null: overrides of trainer/default.yaml for the default pretrain
    pretrain_trainer: dict | None = None
    label: str | None = None  # recorded, never read (config/checks.py check_label)

    def __post_init__(self) -> None:
        check_seed(self.seed, "seed")
        require(self.compare_to_twin is None or self.compare_to is not None,
                "compare_to_twin is the twin arm of compare_to (the random-init twin "
                "fine-tuned as compare_to was); set compare_to too")
        check_seeds(self.seeds)
        check_seed(self.sample_seed, "sample_seed")
        check_label(self.label)
        one_of(self.init, ("pretrained", "random"), "init")
        one_of(self.pooling, ("first", "mean"), "pooling")
        positive(self.batch_size, "batch_size")
        for key in ("max_train_sentences", "max_eval_sentences"):
            value = getattr(self, key)
            require(value is None or value > 0, f"{key}={value} must be positive or null")


@dataclass
class ProbeConfig:
    model: ModelConfig
    size: SizeConfig
    task: TaskConfig
    analyses: dict
    logger: LoggerConfig
    seed: int
    seeds: list[int]
    sample_seed: int
    init: str
    pooling: str
    batch_size: int
    max_train_sentences: int | None
    max_eval_sentences: int | None
    compare_to: str | None
    data_dir: Path
    cache_dir: Path
    compare_to_twin: str | None = None  # the twin (random) fine-tuned as compare_to was
    # model.name_or_path=null, init=pretrained: the `pretrain` config of the model to probe
    pretrain_cfg: DictConfig | None = None

    def __post_init__(self) -> None:
        require(self.analyses, "analysis= picks nothing; use e.g. analysis=linear or "
                "analysis=[linear,structural]")
        refuse_tokenizer_name_or_path(self.model, "probe")
        # before Hydra makes a run dir (the CLI's pre-check runs this): not after the data load
        require(has_word_labels(self.task.format, self.task.label_field, self.task.kind),
                f"task={self.task.name} "
                f"({self.task.format}) has no word labels to probe; use a tagging task: "
                f"{PROBE_TASKS}")


# Task formats whose sentences carry word labels to probe (bertology/data/probe_sentences.py),
# and the synthetic grammar's word annotations among its fields
PROBE_FORMATS = ("synthetic", "conllu", "conll03", "jsonl", "marvin_linzen")
SYNTHETIC_PROBE_FIELDS = ("upos", "depths", "agreement", "deprel")


def has_word_labels(task_format: str, label_field: str | None, kind: str | None) -> bool:
    """Whether a task gives the probe word labels (a synthetic task: a word annotation; JSON
    lines: tokens and tags, task.kind=tagging)."""
    if task_format == "synthetic":
        return label_field in SYNTHETIC_PROBE_FIELDS
    return task_format in PROBE_FORMATS and (task_format != "jsonl" or kind == "tagging")


PROBE_TASKS = ("ud_pos, ud_deps, conll03, synthetic_pos, synthetic_depth, "
               "synthetic_agreement, marvin_linzen_agreement, own_tagging")


def load_probe_config(cfg: DictConfig) -> ProbeConfig:
    """Check a composed `probe` config and return its typed view (raises UserError)."""
    container = resolve_container(cfg)
    run = build_top_level(ProbeRunKeys, container, PROBE_GROUPS)
    data_dir, cache_dir = resolve_paths(container)
    analyses = container.get("analysis") or {}
    require(isinstance(analyses, dict), f"analysis={analyses!r} has the wrong type; pick "
            "analyses by name, e.g. analysis=[linear,structural]")
    for name in analyses:
        one_of(name, tuple(ANALYSES), "analysis")
    if "objective" in container:  # composed for model/*.yaml's sake; checked all the same
        build_group(ObjectiveConfig, container["objective"], "objective")
    config = ProbeConfig(
        model=build_group(ModelConfig, container["model"], "model"),
        size=build_group(SizeConfig, container["size"], "size"),
        task=build_group(TaskConfig, container["task"], "task"),
        analyses={name: build_group(ANALYSES[name].settings, settings, f"analysis.{name}")
                  for name, settings in analyses.items()},
        logger=build_group(LoggerConfig, container["logger"], "logger"),
        seed=run.seed, seeds=run.seeds, sample_seed=run.sample_seed, init=run.init,
        pooling=run.pooling, batch_size=run.batch_size,
        max_train_sentences=run.max_train_sentences,
        max_eval_sentences=run.max_eval_sentences, compare_to=run.compare_to,
        data_dir=data_dir, cache_dir=cache_dir, compare_to_twin=run.compare_to_twin,
    )
    require(run.pretrain_trainer is None or isinstance(run.pretrain_trainer, dict),
            f"pretrain_trainer={run.pretrain_trainer!r} must be a mapping of trainer keys "
            "(pretrain_trainer='{max_steps: 3000}') or null")
    unknown = sorted(set(run.pretrain_trainer or {}) - set(TrainerConfig.__dataclass_fields__))
    require(not unknown, f"pretrain_trainer: {', '.join(unknown)} is not a trainer key; valid "
            f"keys: {', '.join(sorted(TrainerConfig.__dataclass_fields__))}")
    if config.model.name_or_path is None and config.init == "pretrained":
        config.pretrain_cfg = build_pretrain_cfg(container, run.pretrain_trainer)
        check_nested(load_pretrain_config, config.pretrain_cfg, "the model to probe (no "
                     "model.name_or_path: pretrained first by `bertology pretrain`)")
    for key, path in (("model.name_or_path", config.model.name_or_path),
                      ("compare_to", config.compare_to)):
        if path is not None:
            uses = probe_uses(config.analyses, probed=key == "model.name_or_path")
            check_uses(read_checkpoint(path, key), uses, key, path)
    if config.compare_to_twin is not None:
        check_fine_tuned_twin(config.compare_to_twin, "compare_to_twin", config.seed,
                              config.compare_to, "compare_to")
    check_task_files(config.task, data_dir)
    check_mlm_analyses(config)
    if "cloze" in config.analyses:
        for suite in config.analyses["cloze"].suites:
            for name in CLOZE_DATA[suite]:
                require((data_dir / name).is_dir(), f"analysis.cloze.suites: {suite} reads "
                        f"{missing_data(data_dir / name, data_dir)}")
    return config


def own_head_analyses(analyses: dict) -> list[str]:
    """The analyses that read the checkpoint's own MLM head: those whose row needs one, less
    one that fits a head on the frozen encoder where it has none (head: fitted | auto)."""
    return [name for name in analyses_needing("mlm_head", analyses)
            if getattr(analyses[name], "head", "own") == "own"]


def check_mlm_analyses(config: ProbeConfig) -> None:
    """The analyses that read the MLM head of a checkpoint (cloze, amnesic): one must be given,
    and have the head's weights (read from the safetensors header, before any model is built)."""
    needs = own_head_analyses(config.analyses)
    if not needs:
        return
    path = config.model.name_or_path
    if path is None and config.pretrain_cfg is not None:
        return  # the default pretrain run's model/ has the head (BertForPreTraining and kin)
    require(path is not None, f"analysis={','.join(needs)} reads a checkpoint's MLM head; set "
            "model.name_or_path (e.g. the model/ of a bertology pretrain run)")
    found = read_checkpoint(path, "model.name_or_path")
    if found is not None:
        check_mlm_head(path, found, needs)


def build_pretrain_cfg(container: dict, trainer: dict | None = None) -> DictConfig:
    """What a probe with no checkpoint probes: the default `bertology pretrain` of its model=
    and size= (conf/pretrain.yaml's run: the embedded corpus, trainer=default, its dropout
    and seed), so the no-argument figure shows a model that has learned the grammar against
    its random-init and control baselines instead of noise against noise. `trainer`
    (pretrain_trainer=) overrides trainer/default.yaml's keys: subject-verb agreement takes a
    tiny BERT longer than POS does (docs/probing.md). The probe pipeline runs it once and
    caches it (pipelines/probe.py)."""
    primary = OmegaConf.to_container(OmegaConf.load(CONF_DIR / "pretrain.yaml"))
    model = OmegaConf.merge(container["model"], primary["model"])
    trainer = OmegaConf.to_container(OmegaConf.merge(load_group_file("trainer", "default"),
                                                     trainer or {}))
    return OmegaConf.create({
        "model": OmegaConf.to_container(model), "size": container["size"],
        "objective": container["objective"], "data": load_group_file("data", "synthetic"),
        "trainer": trainer, "logger": container["logger"],
        "seed": primary["seed"], "resume": primary["resume"], "paths": container["paths"],
        "downstream": primary["downstream"],
    })
