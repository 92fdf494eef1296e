"""The wheel installs everything under `ctxsim.*`: nothing at the top level of site-packages that
could collide with another distribution's `models` or `tasks`, no benchmarks, and every module of
the repository's package folders inside it."""

from __future__ import annotations

import shutil
import subprocess
import sys
import sysconfig
import tomllib
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
#: repository folder -> installed package, as pyproject's [tool.setuptools.package-dir] says
PACKAGE_DIRS = {
    folder: pkg.replace(".", "/")
    for pkg, folder in tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"][
        "package-dir"
    ].items()
}


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("wheel")
    # build from a copy: an in-tree build leaves build/ in the checkout
    src = tmp_path_factory.mktemp("src")
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(REPO / name, src / name)
    for folder in PACKAGE_DIRS:
        shutil.copytree(REPO / folder, src / folder, ignore=shutil.ignore_patterns("__pycache__"))
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w"]
        + [str(out), str(src)],
        check=True,
        capture_output=True,
    )
    (whl,) = out.glob("ctxsim-*.whl")
    return whl


def test_wheel_holds_only_the_ctxsim_namespace_and_every_module(wheel: Path) -> None:
    names = zipfile.ZipFile(wheel).namelist()
    tops = {n.split("/", 1)[0] for n in names}
    assert tops == {"ctxsim", next(t for t in tops if t.endswith(".dist-info"))}, tops
    for folder, pkg in PACKAGE_DIRS.items():
        for src in (REPO / folder).rglob("*.py"):
            rel = src.relative_to(REPO / folder).as_posix()
            assert f"{pkg}/{rel}" in names, f"{folder}/{rel} is missing from the wheel"
    assert not any(n.startswith("ctxsim/bench") or "/tests/" in n for n in names)
    # data files the code reads at run time
    assert "ctxsim/models/contextual/int8_calibration.txt" in names


def test_wheel_installs_beside_a_package_with_its_own_top_level_models(
    wheel: Path, tmp_path: Path
) -> None:
    """A fresh venv: the wheel and a distribution owning `models` and `tasks` both import."""
    other = tmp_path / "other"
    for top in ("models", "tasks"):
        (other / top).mkdir(parents=True)
        (other / top / "__init__.py").write_text(f"OWNER = 'other-{top}'\n")
    (other / "pyproject.toml").write_text(
        '[build-system]\nrequires = ["setuptools"]\nbuild-backend = "setuptools.build_meta"\n'
        '[project]\nname = "other-models"\nversion = "1.0"\n'
        '[tool.setuptools]\npackages = ["models", "tasks"]\n'
    )
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    py = venv / "bin" / "python"
    site = subprocess.run(
        [str(py), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    # ctxsim's dependencies come from this interpreter's site-packages (added as a plain path,
    # so the editable install of the checkout living there is not active in the fresh venv)
    Path(site, "deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    for target in (str(wheel), str(other)):
        subprocess.run(
            [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation"]
            + ["--target", site, target],
            check=True,
            capture_output=True,
        )
    probe = (
        "import models, tasks, ctxsim.tasks, ctxsim.models.registry, ctxsim.flows.cli\n"
        "assert models.OWNER == 'other-models' and tasks.OWNER == 'other-tasks'\n"
        "from ctxsim.tasks import STAGES, load_stage\n"
        "assert load_stage('score').name == 'score'\n"
        "print(ctxsim.tasks.__file__)\n"
    )
    res = subprocess.run(
        [str(py), "-c", probe], cwd=tmp_path, capture_output=True, text=True, check=False
    )
    assert res.returncode == 0, res.stderr
    assert res.stdout.strip().startswith(site), res.stdout
