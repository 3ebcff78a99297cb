"""The `prune` group's settings (prune.* in conf/prune/*.yaml), checked, and one row per prune
experiment and per head score: the code that runs it and what it needs.

The settings check reads the rows (which names are valid, which experiment ranks heads by a
score or runs once per entry of a list), the capability checks read each experiment's needs
(config/family_checks.py), the pipeline runs the rows' code (pipelines/prune.py,
pruning/prune_context.py), and `bertology --help` lists them.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields

from bertology.config.checks import distinct, non_empty, one_of
from bertology.errors import require


@dataclass(frozen=True)
class PruneExperiment:
    run: str  # "module:function": run(ctx) -> metrics, imported when it runs
    # what it needs of the model's architecture, one of families.CAPABILITIES: the config
    # refuses a model type without it, before any work
    needs: str | None = None
    ranks_heads: bool = False  # masks or removes heads in prune.scores' order: needs a score
    lists: str | None = None  # the prune.* list it runs once per entry of: must not be empty


# experiment name -> its row, in the order they run: removal reuses the heads experiment's
# masks; the matrix reuses removal's model
PRUNE_EXPERIMENTS = {
    "heads": PruneExperiment("bertology.pruning.head_pruning:run_heads", needs="head_gates",
                             ranks_heads=True),
    "removal": PruneExperiment("bertology.pruning.head_pruning:run_removal",
                               needs="head_removal", ranks_heads=True),
    "layers": PruneExperiment("bertology.pruning.compression:run_layers", needs="layer_modules",
                              lists="layer_strategies"),
    "magnitude": PruneExperiment("bertology.pruning.compression:run_magnitude",
                                 lists="sparsities"),
    "int8": PruneExperiment("bertology.pruning.compression:run_int8"),
    "matrix": PruneExperiment("bertology.pruning.compression:run_matrix", needs="head_removal",
                              ranks_heads=True),
    "ablation": PruneExperiment("bertology.pruning.head_pruning:run_ablation",
                                needs="head_gates"),
    "attention_gradients": PruneExperiment(
        "bertology.pruning.attention_gradients:run_attention_gradients", needs="attention_maps"),
}


@dataclass(frozen=True)
class PruneScore:
    # "module:function": (ctx, model, gates, seed) -> (layers, heads) importance, higher = keep
    run: str


# score name -> its row
PRUNE_SCORES = {
    "gradient": PruneScore("bertology.pruning.prune_context:score_gradient"),  # Michel et al.
    "confidence": PruneScore("bertology.pruning.prune_context:score_confidence"),  # Voita et al.
    "entropy": PruneScore("bertology.pruning.prune_context:score_entropy"),
    "ablation": PruneScore("bertology.pruning.prune_context:score_ablation"),
    "random": PruneScore("bertology.pruning.prune_context:score_random"),  # the baseline
}

INT8_BACKENDS = ("auto", "torch_ao", "torchao")
# Sajjad et al. (2020) §3's layer-dropping strategies; pruning/heads.py's LAYER_DROPPING has
# the same keys (tests/house/test_rows.py checks it)
LAYER_STRATEGIES = ("top", "bottom", "alternate_even", "alternate_odd", "symmetric")


def unit_interval(value: float, key: str, closed_low: bool = False) -> None:
    low_ok = value >= 0.0 if closed_low else value > 0.0
    require(low_ok and value < 1.0, f"{key}={value} must lie in {'[' if closed_low else '('}0, 1)")


@dataclass
class PruneSettings:
    experiments: list[str] = field(default_factory=lambda: ["heads", "removal"])
    scores: list[str] = field(default_factory=lambda: ["gradient", "random"])
    step_fraction: float = 0.1
    stop_fraction: float = 0.5
    max_loss: float = 0.01
    rescore: bool = True
    importance_examples: int = 512
    batch_size: int = 32
    random_seeds: list[int] = field(default_factory=lambda: [0, 1, 2])
    remove_fraction: float | None = None
    layer_strategies: list[str] = field(default_factory=lambda: ["top", "bottom"])
    sparsities: list[float] = field(default_factory=lambda: [0.1, 0.5, 0.9])
    int8_backend: str = "auto"

    def __post_init__(self) -> None:
        self.check_names()
        ranks_heads = any(PRUNE_EXPERIMENTS[name].ranks_heads for name in self.experiments)
        require(not ranks_heads or self.scores, "prune.scores is empty; the head experiments "
                "need at least one score, e.g. prune.scores=[gradient,random]")
        require(not ranks_heads or self.scores[0] != "random" or len(self.scores) == 1,
                f"prune.scores={self.scores}: list the score under study first; removal and "
                "the matrix prune by scores[0], and random is the baseline")
        self.check_ranges()

    def check_names(self) -> None:
        """Experiments, scores and strategies named once each, from their rows; a list an
        experiment runs over is not empty."""
        require(self.experiments, "prune.experiments is empty; choose from "
                f"{', '.join(PRUNE_EXPERIMENTS)}")
        for key in ("experiments", "scores", "random_seeds", "layer_strategies", "sparsities"):
            distinct(getattr(self, key), f"prune.{key}")
        for name, row in PRUNE_EXPERIMENTS.items():
            if row.lists is not None and name in self.experiments:
                non_empty(getattr(self, row.lists), f"prune.{row.lists}", default_list(row.lists))
        for name in self.experiments:
            one_of(name, tuple(PRUNE_EXPERIMENTS), "prune.experiments")
        for name in self.scores:
            one_of(name, tuple(PRUNE_SCORES), "prune.scores")
        for name in self.layer_strategies:
            one_of(name, LAYER_STRATEGIES, "prune.layer_strategies")
        one_of(self.int8_backend, INT8_BACKENDS, "prune.int8_backend")

    def check_ranges(self) -> None:
        require(0.0 < self.step_fraction < 1.0, f"prune.step_fraction={self.step_fraction} "
                "must lie in (0, 1): a step of the whole model would remove every head")
        unit_interval(self.stop_fraction, "prune.stop_fraction", closed_low=True)
        unit_interval(self.max_loss, "prune.max_loss")
        require(self.remove_fraction is None or 0.0 < self.remove_fraction < 1.0,
                f"prune.remove_fraction={self.remove_fraction} must lie in (0, 1): 1 would "
                "remove every head (or null for the largest step within max_loss)")
        require(self.importance_examples > 0 and self.batch_size > 0,
                "prune.importance_examples and prune.batch_size must be positive")
        require(bool(self.random_seeds) or "random" not in self.scores,
                "prune.random_seeds is empty; the random order needs at least one seed")
        require(all(0.0 < s < 1.0 for s in self.sparsities),
                f"prune.sparsities={self.sparsities} must lie in (0, 1)")


def default_list(key: str) -> str:
    """A list setting's default, as an override writes it: [top,bottom]."""
    default = {f.name: f for f in fields(PruneSettings)}[key].default_factory()
    return f"[{','.join(map(str, default))}]"
