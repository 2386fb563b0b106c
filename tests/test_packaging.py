"""The wheel holds every package and data file: ``[tool.setuptools] packages`` in pyproject.toml
is a hand-written list (``packages.find`` cannot follow the ``package-dir`` mapping of the stage folders), so
these tests walk the source folders and fail when one is not listed.  ``.ci/wheel-check`` builds the wheel,
installs it and imports every module from it."""

from __future__ import annotations

import glob
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SETUPTOOLS = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["setuptools"]
PACKAGES: list[str] = SETUPTOOLS["packages"]
PACKAGE_DIR: dict[str, str] = SETUPTOOLS["package-dir"]
PACKAGE_DATA: dict[str, list[str]] = SETUPTOOLS.get("package-data", {})
# packages whose package-data has a recursive pattern ("**/*"): the folders below them are data folders (the
# released models, tinyglot/released/NAME/FORMAT), shipped whole, not packages of their own
RECURSIVE_DATA = [package for package, patterns in PACKAGE_DATA.items() if any("**" in p for p in patterns)]


def folder_of(package: str) -> Path:
    """The source folder of ``package``, as setuptools maps it (the longest ``package-dir`` prefix)."""
    parts = package.split(".")
    for n in range(len(parts), 0, -1):
        prefix = ".".join(parts[:n])
        if prefix in PACKAGE_DIR:
            return ROOT / PACKAGE_DIR[prefix] / Path(*parts[n:])
    return ROOT / Path(*parts)


def source_files() -> list[Path]:
    """Every file under the mapped source folders, caches left out."""
    files = set()
    for folder in PACKAGE_DIR.values():
        files |= {f for f in (ROOT / folder).rglob("*")
                  if f.is_file() and "__pycache__" not in f.parts and f.suffix != ".pyc"}
    return sorted(files)


def package_name(folder: Path) -> str:
    """The package a source folder installs as (the inverse of :func:`folder_of`)."""
    for name, mapped in sorted(PACKAGE_DIR.items(), key=lambda kv: -len(Path(kv[1]).parts)):
        base = ROOT / mapped
        if folder == base or base in folder.parents:
            return ".".join([name, *folder.relative_to(base).parts])
    raise AssertionError(f"{folder} is under no package-dir folder")


def test_every_stage_folder_is_mapped():
    """A new top-level folder with an __init__.py (a new stage) must be in package-dir."""
    mapped = {ROOT / folder for folder in PACKAGE_DIR.values()}
    unmapped = [d.name for d in ROOT.iterdir()
                if (d / "__init__.py").is_file() and d.name != "tests" and d not in mapped]
    assert not unmapped, f"add these folders to [tool.setuptools.package-dir] in pyproject.toml: {unmapped}"


def in_recursive_data(folder: Path) -> bool:
    """``folder`` lies below a package whose package-data takes everything under it (``**/*``)."""
    return any(folder_of(package) in folder.parents for package in RECURSIVE_DATA)


def test_every_source_folder_is_a_listed_package():
    """Every folder holding a module (with or without __init__.py) or a data file is in ``packages``:
    a folder left out would be missing from the wheel (or, for data, is a setuptools warning today).
    The folders below a package with a recursive package-data pattern are data, not packages."""
    folders = {f.parent for f in source_files()}
    assert not any(f.suffix == ".py" for f in source_files() if in_recursive_data(f.parent)), \
        "a module below a recursive package-data folder would ship as data"
    folders = {d for d in folders if not in_recursive_data(d)}
    missing = sorted({package_name(d) for d in folders} - set(PACKAGES))
    assert not missing, f"add these to [tool.setuptools] packages in pyproject.toml: {missing}"


def test_every_listed_package_exists():
    gone = [p for p in PACKAGES if not folder_of(p).is_dir()]
    assert not gone, f"listed in [tool.setuptools] packages but not in the source tree: {gone}"


def test_every_data_file_is_package_data():
    """Every non-Python file in the package folders (data that code reads at run time, such as the embedded
    corpus and the device profiles) is matched by a package-data pattern, as setuptools globs them."""
    shipped: set[Path] = set()
    for package, patterns in PACKAGE_DATA.items():
        assert package in PACKAGES, f"package-data names {package}, which is not in packages"
        for pattern in patterns:
            shipped |= {Path(f) for f in glob.glob(str(folder_of(package) / pattern), recursive=True)}
    data = [f for f in source_files() if f.suffix != ".py"]
    assert data, "no data files found: the walk is broken"
    missing = [str(f.relative_to(ROOT)) for f in data if f not in shipped]
    assert not missing, f"add these to [tool.setuptools.package-data] in pyproject.toml: {missing}"


def test_the_walk_sees_the_packages_that_went_missing_before():
    """The walk itself: tinyglot.encoders (once missing from the wheel) and the device profiles' folder."""
    folders = {package_name(f.parent) for f in source_files()}
    assert {"tinyglot.encoders", "tinyglot.devices.profiles", "tinyglot.distill.multistage"} <= folders
