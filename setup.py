"""Everything about the package is in pyproject.toml but this: conf/ (the Hydra configs) stays
at the repository's top level and ships inside the wheel as bertology/conf, which
bertology/config/compose.py finds first (an editable install reads the repo's conf/)."""

from setuptools import find_namespace_packages, find_packages, setup

CONF_GROUPS = [f"bertology.conf.{group}" for group in find_namespace_packages(where="conf")]

setup(
    packages=[*find_packages(include=["bertology*"]), "bertology.conf", *CONF_GROUPS],
    package_dir={"bertology.conf": "conf"},
    package_data={"bertology.conf": ["*.yaml"], **{g: ["*.yaml"] for g in CONF_GROUPS},
                  "bertology.config": ["*.json"]},
)
