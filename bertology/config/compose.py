"""Where the Hydra configs live, and how one group file is read outside Hydra (a nested
run's defaults)."""

from __future__ import annotations

from pathlib import Path

from omegaconf import OmegaConf

from bertology.errors import require


def find_conf_dir() -> Path:
    """The wheel carries conf/ as bertology/conf (pyproject.toml's package-dir); a checkout (the
    editable install of `make setup`) keeps it at the repository's top level."""
    package = Path(__file__).resolve().parent.parent
    installed = package / "conf"
    return installed if installed.is_dir() else package.parent / "conf"


CONF_DIR = find_conf_dir()


def find_findings_dir() -> Path:
    """The study's catalogue (one <id>.yaml a finding, studies.yaml, recipes.yaml, costs.yaml):
    bertology/findings in the wheel, findings/ at a checkout's top level. It lies outside
    conf/, where Hydra would read its folder as a config group."""
    package = Path(__file__).resolve().parent.parent
    installed = package / "findings"
    return installed if installed.is_dir() else package.parent / "findings"


FINDINGS_DIR = find_findings_dir()


def load_group_file(group: str, name: str) -> dict:
    """conf/<group>/<name>.yaml as plain data, its `defaults: [x]` merged in (one level)."""
    path = CONF_DIR / group / f"{name}.yaml"
    options = sorted(p.stem for p in (CONF_DIR / group).glob("*.yaml"))
    require(path.exists(), f"downstream: no {group} {name!r}; valid: {', '.join(options)}")
    node = OmegaConf.to_container(OmegaConf.load(path))
    bases = [d for d in node.pop("defaults", []) if isinstance(d, str) and d != "_self_"]
    merged = OmegaConf.merge(*(load_group_file(group, base) for base in bases), node)
    return OmegaConf.to_container(merged)


