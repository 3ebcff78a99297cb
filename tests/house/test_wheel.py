"""The installable package: a wheel built from this tree carries conf/ as bertology/conf, and
installed into a fresh venv outside the repository it runs from any directory."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest
from conftest import REPO

# what the build reads; copied so the build's build/ and egg-info stay out of the checkout
SOURCES = ("pyproject.toml", "README.md", "LICENSE", "bertology", "conf", "findings")


def build_wheel(tmp: Path) -> Path:
    tree = tmp / "src"
    for name in SOURCES:
        source = REPO / name
        if source.is_dir():
            shutil.copytree(source, tree / name, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            tree.mkdir(exist_ok=True)
            shutil.copy2(source, tree / name)
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation",
                    "-q", "-w", str(tmp / "dist"), str(tree)], check=True, capture_output=True)
    return next((tmp / "dist").glob("bertology-*.whl"))


def install(wheel: Path, venv: Path) -> Path:
    """A fresh venv that sees this venv's dependencies (a .pth line, no downloads) but not its
    editable bertology; the wheel goes in with --no-deps."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    purelib = Path(subprocess.run([str(venv / "bin" / "python"), "-c", "import sysconfig; "
                                   "print(sysconfig.get_paths()['purelib'])"], check=True,
                                  capture_output=True, text=True).stdout.strip())
    (purelib / "deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    subprocess.run([sys.executable, "-m", "pip", "--python", str(venv / "bin" / "python"),
                    "install", "-q", "--no-deps", str(wheel)], check=True, capture_output=True)
    return venv / "bin" / "bertology"


@pytest.mark.slow
def test_wheel_carries_conf_and_runs_outside_the_repo(tmp_path):
    wheel = build_wheel(tmp_path)
    names = set(zipfile.ZipFile(wheel).namelist())
    wanted = {f"bertology/conf/{p.relative_to(REPO / 'conf').as_posix()}"
              for p in (REPO / "conf").rglob("*.yaml")}
    assert wanted <= names, sorted(wanted - names)[:5]
    catalogue = {f"bertology/findings/{p.name}" for p in (REPO / "findings").glob("*.yaml")}
    assert catalogue <= names, sorted(catalogue - names)[:5]  # the study's, outside conf/
    assert "bertology/config/data_sets.json" in names  # `bertology data`'s manifest
    assert "bertology-0.1.0.dist-info/licenses/LICENSE" in names
    metadata = zipfile.ZipFile(wheel).read("bertology-0.1.0.dist-info/METADATA").decode()
    assert "License-Expression: Apache-2.0" in metadata.splitlines()  # the SPDX form

    bertology = install(wheel, tmp_path / "venv")
    work = tmp_path / "elsewhere"
    work.mkdir()
    env = {**os.environ, "PYTHONWARNINGS": "ignore"}

    def run(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([str(bertology), *args], cwd=work, env=env, capture_output=True,
                              text=True, timeout=600)

    assert run("--help").returncode == 0
    conf = subprocess.run([str(tmp_path / "venv" / "bin" / "python"), "-c", "from bertology."
                           "config.compose import CONF_DIR, FINDINGS_DIR; print(CONF_DIR); "
                           "print(FINDINGS_DIR)"], cwd=work,
                          capture_output=True, text=True, check=True).stdout.split()
    assert all(Path(c).is_relative_to(tmp_path / "venv") for c in conf), conf
    for args in (["pretrain", "trainer.max_steps=20", "logger=none"],
                 ["probe", "logger=none", "init=random"]):
        done = run(*args)
        assert done.returncode == 0, done.stderr[-2000:]
        assert list((work / "outputs" / args[0]).glob("*/*/metrics.json")), args
