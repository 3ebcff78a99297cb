"""The floor plan: imports only go down the layers, no pipeline imports another, the CLI answers
without torch, and a model family is one row of families.py plus its YAML. The house's other
rules (no history in the code, a public name means one thing, one reader of run dirs, a docs
page's size) are in tests/house/test_house_rules.py."""

from __future__ import annotations

import ast
import json
import shutil
import subprocess
import sys
from fnmatch import fnmatch
from pathlib import Path

import pytest
from conftest import REPO
from setuptools import find_packages

from bertology.families import FAMILIES, READING, Family, every_family, objective_names

PACKAGE = REPO / "bertology"

# Low to high. A module may import from a lower layer and from its own package; never up,
# never sideways into another package of the same layer.
LAYERS = [
    {"errors"},
    {"families"},
    {"config"},  # the checked schema
    {"run"},  # a run's life: process, status, files, tracking
    {"data"},
    {"models"},
    {"training"},
    {"objectives", "evaluation"},  # evaluation: task metrics and scoring a task model
    {"analysis", "pruning", "study"},  # study/: reads run dirs, never a model (see below)
    {"pipelines"},
    {"cli", "reproduce"},  # reproduce/: the shim of `python -m bertology.reproduce`
    {"__main__"},
]
LAYER_OF = {unit: i for i, units in enumerate(LAYERS) for unit in units}


def module_name(path: Path) -> str:
    parts = path.relative_to(REPO).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def modules() -> dict[str, Path]:
    return {module_name(p): p for p in PACKAGE.rglob("*.py")}


def imports_of(path: Path, known: set[str]) -> set[str]:
    """The bertology modules a file imports, at the top or inside functions; `from pkg import
    sub` counts as importing pkg.sub."""
    name = module_name(path)
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names if a.name.startswith("bertology")}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                package = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
                base = ".".join(package[: len(package) - node.level + 1] + ([base] if base else []))
            if base.startswith("bertology"):
                for alias in node.names:
                    sub = f"{base}.{alias.name}"
                    found.add(sub if sub in known else base)
    return found - {name}


def graph() -> dict[str, set[str]]:
    mods = modules()
    return {name: imports_of(path, set(mods)) for name, path in mods.items()}


def unit(module: str) -> str | None:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else None


def test_every_module_has_a_layer():
    units = {unit(m) for m in modules()} - {None}
    assert units <= set(LAYER_OF), f"give these a layer: {sorted(units - set(LAYER_OF))}"


def test_imports_only_go_down():
    wrong = []
    for module, targets in graph().items():
        for target in targets:
            a, b = unit(module), unit(target)
            if a is None or b is None or a == b:
                continue
            if LAYER_OF[a] <= LAYER_OF[b]:
                wrong.append(f"{module} -> {target}")
    assert not wrong, "imports that go up or sideways:\n" + "\n".join(sorted(wrong))


def test_no_import_cycle():
    edges = graph()
    state: dict[str, int] = {}  # 1: on the stack, 2: done

    def visit(node: str, path: list[str]) -> None:
        state[node] = 1
        for nxt in sorted(edges.get(node, ())):
            if state.get(nxt) == 1:
                pytest.fail("import cycle: " + " -> ".join([*path, node, nxt]))
            if nxt not in state:
                visit(nxt, [*path, node])
        state[node] = 2

    for node in sorted(edges):
        if node not in state:
            visit(node, [])


def test_no_pipeline_imports_another():
    shared = {"bertology.pipelines", "bertology.pipelines.nested"}
    for module, targets in graph().items():
        if module.startswith("bertology.pipelines.") and module not in shared:
            others = {t for t in targets if t.startswith("bertology.pipelines.")} - shared
            assert not others, f"{module} imports {others}; run it through pipelines.nested"


# The study wing reads finished run dirs; it never builds a model, so it stays off the torch side.
STUDY_MAY_IMPORT = {"errors", "families", "config", "run", "study"}
TORCH_SIDE = ("torch", "transformers", "accelerate", "datasets", "sklearn", "wandb")


def test_the_study_wing_imports_nothing_from_the_torch_side():
    wrong = sorted(f"{module} -> {target}" for module, targets in graph().items()
                   if unit(module) == "study" for target in targets
                   if unit(target) not in STUDY_MAY_IMPORT)
    assert not wrong, "the study imports the runner's model side:\n" + "\n".join(wrong)
    study = sorted(m for m in modules() if unit(m) == "study")
    code = (f"import importlib, json, sys\nfor m in {study!r}: importlib.import_module(m)\n"
            f"print(json.dumps(sorted(m for m in {TORCH_SIDE!r} if m in sys.modules)))")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            cwd=REPO, timeout=120)
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout.strip().splitlines()[-1]) == [], result.stdout


# The study wing's three rooms, low to high: judging (findings, statistics, verdicts), the
# pages written from judged findings, and the schedule that makes the runs and calls both.
STUDY_ROOMS = ["judge", "pages", "schedule"]


def room(module: str) -> str | None:
    parts = module.split(".")
    return parts[2] if len(parts) > 3 and parts[1] == "study" else None


def test_the_study_has_three_rooms_and_imports_only_go_down_them():
    """judge/ never imports pages/ or schedule/, pages/ never imports schedule/; every module of
    the study lives in a room."""
    loose = sorted(m for m in modules() if unit(m) == "study" and room(m) is None
                   and m not in ("bertology.study", *(f"bertology.study.{r}" for r in STUDY_ROOMS)))
    assert not loose, f"give these a room ({', '.join(STUDY_ROOMS)}): {loose}"
    wrong = [f"{module} -> {target}" for module, targets in graph().items() if room(module)
             for target in targets if room(target)
             and STUDY_ROOMS.index(room(module)) < STUDY_ROOMS.index(room(target))]
    assert not wrong, "imports that go up the study's rooms:\n" + "\n".join(sorted(wrong))


def test_no_two_modules_share_a_name():
    """A name says one thing: `context.py` twice, or a module named like the standard
    library's, makes a reader (and a traceback) ambiguous."""
    names: dict[str, list[str]] = {}
    for module in modules():
        leaf = module.rsplit(".", 1)[-1]
        if leaf not in ("bertology", "__main__") and module.count(".") >= 1:
            names.setdefault(leaf, []).append(module)
    twice = {leaf: found for leaf, found in names.items() if len(found) > 1}
    assert not twice, f"modules that share a name: {twice}"
    shadowing = sorted(m for m in modules() if m.rsplit(".", 1)[-1] in sys.stdlib_module_names)
    assert not shadowing, f"modules named like the standard library's: {shadowing}"


def test_every_folder_says_what_lives_there():
    for init in PACKAGE.rglob("__init__.py"):
        doc = ast.get_docstring(ast.parse(init.read_text()))
        assert doc and len(doc) > 40, f"{init.relative_to(REPO)} needs a docstring"


# The project's top level, dotfiles aside (.ci/run, .gitignore); anything else goes in a folder.
TOP_LEVEL = {"pyproject.toml", "README.md", "LICENSE", "Makefile", "bertology", "conf", "findings",
             "tests",
             "bench", "outputs", "docs"}


def ignored_at_top(name: str) -> bool:
    """Whether a top-level .gitignore pattern (no slash inside it) covers the name."""
    patterns = [line.strip().strip("/") for line in (REPO / ".gitignore").read_text().splitlines()]
    return any(fnmatch(name, p) for p in patterns if p and p[0] not in "#!" and "/" not in p)


def top_level_names() -> set[str]:
    """What sits at the top: git's tracked and untracked-but-not-ignored files in a checkout; in
    a plain copy without .git (.ci/run makes one) the folder less what .gitignore keeps out."""
    if (REPO / ".git").exists():
        listed = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard"],
                                cwd=REPO, capture_output=True, text=True, check=True).stdout
        names = {line.split("/")[0] for line in listed.splitlines()}
    else:
        names = {p.name for p in REPO.iterdir() if not ignored_at_top(p.name)}
    return {name for name in names if not name.startswith(".")}


def test_the_top_level_holds_only_the_fixed_entries():
    extra = top_level_names() - TOP_LEVEL
    assert not extra, f"move {sorted(extra)} into a folder: the top level is {sorted(TOP_LEVEL)}"


def test_the_wheel_lists_every_package():
    """pyproject.toml lists the packages by hand (conf/ maps to bertology.conf and findings/ to
    bertology.findings, which rules out packages.find): a new subpackage left off the list
    would be missing from the wheel."""
    tomllib = pytest.importorskip("tomllib")  # Python 3.11+
    setuptools = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]
    listed = setuptools["packages"]
    wanted = {*find_packages(where=str(REPO), include=["bertology", "bertology.*"]),
              "bertology.conf", "bertology.findings"}
    assert len(listed) == len(set(listed)), "a package is listed twice"
    assert set(listed) == wanted, f"add {sorted(wanted - set(listed))}, drop " \
                                  f"{sorted(set(listed) - wanted)}"
    assert setuptools["package-dir"] == {"bertology.conf": "conf",
                                         "bertology.findings": "findings"}
    # the wheel takes conf/**/*.yaml and findings/*.yaml: any other file there would be left out
    assert {p.suffix for p in (REPO / "conf").rglob("*") if p.is_file()} == {".yaml"}
    assert {p.suffix for p in (REPO / "findings").rglob("*") if p.is_file()} == {".yaml"}


NO_TORCH = """
import json, sys
from bertology.cli import entry as cli
codes = [cli.main(["--help"])]
for args in {cases}:
    codes.append(cli.main(args))
print(json.dumps({{"codes": codes, "heavy": sorted(m for m in ("torch", "transformers",
                  "accelerate", "wandb", "sklearn", "matplotlib") if m in sys.modules)}}))
"""

# one bad input per pipeline: each must be refused from the config alone
BAD = [["pretrain", "trainer.max_steps=0"], ["finetune", "trainer.batch_size=0"],
       ["probe", "batch_size=0"], ["prune", "prune.step_fraction=1.5"],
       ["distill", "kd.temperature=0"], ["report"]]


def test_help_and_config_errors_load_no_torch():
    code = NO_TORCH.format(cases=json.dumps(BAD))
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            cwd=REPO, timeout=120)
    out = json.loads(result.stdout.strip().splitlines()[-1])
    assert out["codes"] == [0] + [2] * len(BAD), result.stderr
    assert out["heavy"] == [], f"the CLI's fast path imported {out['heavy']}"


# ---------------------------------------------------------------- the family table


def string_constants(node: ast.AST) -> list[str]:
    return [n.value for n in ast.walk(node) if isinstance(n, ast.Constant)
            and isinstance(n.value, str)]


def test_no_code_outside_the_table_branches_on_a_family_name():
    """No `family == "roberta"`, no literal tuple of family names: the table is the one place.
    (Objective names that equal a family's, e.g. electra, are objectives, not families.)"""
    names = set(every_family()) - set(objective_names())
    offenders = []
    for path in PACKAGE.rglob("*.py"):
        if path.name == "families.py":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Compare | ast.Tuple | ast.List | ast.Set | ast.Dict):
                hits = names & set(string_constants(node))
                if hits:
                    offenders.append(f"{path.relative_to(REPO)}:{node.lineno} {sorted(hits)}")
    assert not offenders, "family names outside families.py:\n" + "\n".join(offenders)


def test_the_table_names_real_classes_and_heads():
    import transformers

    from bertology.objectives import OBJECTIVES

    assert set(objective_names()) == set(OBJECTIVES)
    assert {p.stem for p in (REPO / "conf" / "objective").glob("*.yaml")} == set(OBJECTIVES)
    for name, family in every_family().items():
        for cls in (family.config_class, family.mlm_class, family.pair_class):
            assert cls is None or hasattr(transformers, cls), f"{name}: no transformers.{cls}"
        assert (family.pair_class is None) == (family.pair_head is None), name


def test_reading_rows_are_read_only():
    """READING's model types are read, never pretrained: no objective, no conf/model/*.yaml,
    not a model.family choice, and no name shared with a pretraining family."""
    from bertology.config.groups import ModelConfig
    from bertology.errors import UserError

    assert not set(READING) & set(FAMILIES)
    assert not {f.model_type for f in READING.values()} & {f.model_type for f in FAMILIES.values()}
    models = {p.stem for p in (REPO / "conf" / "model").glob("*.yaml")}
    for name, family in READING.items():
        assert family.objectives == () and family.pair_class is None, name
        assert name not in models, f"conf/model/{name}.yaml makes {name} a pretraining family"
        with pytest.raises(UserError, match="model.family"):
            ModelConfig(family=name)


# ERNIE (Sun et al., 2019): a BERT-family encoder transformers knows, which bertology does not
# ship. Everything it needs is here: its row, its YAML.
ERNIE = Family(model_type="ernie", config_class="ErnieConfig", mlm_class="ErnieForMaskedLM",
               mlm_head="cls.predictions", objectives=("mlm", "mlm_nsp"),
               pair_class="ErnieForPreTraining", pair_head="cls.seq_relationship")
ERNIE_YAML = """defaults:
  - override /objective@_global_.objective: mlm_nsp
family: ernie
name_or_path: null
tokenizer: wordpiece
vocab_size: 2000
masking: static
dupe_factor: 1
input_format: segment_pair
max_position_embeddings: 512
hidden_dropout_prob: 0.0
attention_probs_dropout_prob: 0.0
attn_implementation: sdpa
"""


@pytest.mark.slow
def test_a_new_family_is_its_yaml_and_its_row(tmp_path, monkeypatch, fresh_logging):
    """With only ERNIE's row (monkeypatched into FAMILIES) and its YAML (in a copy of conf/),
    every pipeline that builds or reads a model runs on it end to end."""
    from hydra import compose, initialize_config_dir
    from transformers import AutoModelForPreTraining, AutoModelForSequenceClassification

    from bertology.pipelines import load_pipeline

    monkeypatch.setitem(FAMILIES, "ernie", ERNIE)
    conf = tmp_path / "conf"
    shutil.copytree(REPO / "conf", conf)
    (conf / "model" / "ernie.yaml").write_text(ERNIE_YAML)

    def run(pipeline: str, out: Path, *overrides: str) -> dict:
        with initialize_config_dir(config_dir=str(conf), version_base="1.3"):
            cfg = compose(config_name=pipeline, overrides=["logger=none", *overrides])
        out.mkdir(parents=True)
        return load_pipeline(pipeline)(cfg, out)

    tiny = ["size=tiny", "trainer=smoke"]
    pre = run("pretrain", tmp_path / "pretrain", "model=ernie", *tiny, "trainer.max_steps=4",
              "data.num_sentences=600", "data.eval_docs=20")
    assert pre["train/steps"] == 4 and "eval/nsp_accuracy" in pre
    model_dir = tmp_path / "pretrain" / "model"
    assert type(AutoModelForPreTraining.from_pretrained(model_dir)).__name__ == \
        "ErnieForPreTraining"
    task = ["task=synthetic_negation", "task.num_sentences=300", "trainer.max_steps=4"]
    run("finetune", tmp_path / "finetune", f"model.name_or_path={model_dir}", *task)
    tuned = AutoModelForSequenceClassification.from_pretrained(tmp_path / "finetune" / "model")
    assert tuned.config.model_type == "ernie"
    probed = run("probe", tmp_path / "probe", f"model.name_or_path={model_dir}",
                 "analysis=[linear,attention]", "max_train_sentences=200",
                 "max_eval_sentences=100")
    assert 0.0 <= probed["probe/layer_02/accuracy"] <= 1.0
    pruned = run("prune", tmp_path / "prune", f"model.name_or_path={tmp_path}/finetune/model",
                 *task, "prune.importance_examples=32")
    # heads removed structurally from ERNIE's attention: the pruned model equals the masked one
    assert pruned["prune/heads_remaining"] < 2 * 2  # size=tiny: 2 layers x 2 heads
    assert pruned["prune/removal/max_logit_diff"] < 1e-4
    run("finetune", tmp_path / "random", "model=ernie", "size=tiny", *task)  # random init
