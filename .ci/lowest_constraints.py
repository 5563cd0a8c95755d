"""Print pip constraints pinning every dependency pyproject.toml bounds from below at that bound.

CI installs with these to test the lowest versions pyproject allows: each `name>=X` becomes `name==X`
(the highest bound where a name appears twice), an existing `==X` stays. The build system's requirements are
left out: they are not installed in the environment, and torch needs a newer setuptools than evlog's build.
"""
from __future__ import annotations

import pathlib
import re
import sys
import tomllib

_REQUIREMENT = re.compile(r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*)\s*(?:\[[^\]]*\])?\s*(.*?)\s*(?:;.*)?$")


def _version_key(version: str) -> tuple:
    return tuple(int(part) if part.isdigit() else part for part in re.split(r"[.]|(?<=\d)(?=[a-z])", version))


def lowest_pins(pyproject: dict) -> dict[str, str]:
    project = pyproject["project"]
    requirements = list(project.get("dependencies", []))
    for extra in project.get("optional-dependencies", {}).values():
        requirements += extra
    pins: dict[str, str] = {}
    for requirement in requirements:
        match = _REQUIREMENT.match(requirement)
        if not match:
            sys.exit(f"lowest_constraints: cannot read the requirement {requirement!r}")
        name, specifiers = match.group(1).lower().replace("_", "-"), match.group(2)
        if name == project["name"]:
            continue
        for specifier in filter(None, (s.strip() for s in specifiers.split(","))):
            operator, version = re.match(r"(==|>=|<=|<|>|~=|!=)?\s*(.*)", specifier).groups()
            if operator in ("==", ">="):
                if name not in pins or _version_key(version) > _version_key(pins[name]):
                    pins[name] = version
            elif operator not in ("<", "<=", "!="):
                sys.exit(f"lowest_constraints: no lowest version for {requirement!r}")
    return pins


if __name__ == "__main__":
    root = pathlib.Path(__file__).resolve().parent.parent
    with open(root / "pyproject.toml", "rb") as f:
        for name, version in sorted(lowest_pins(tomllib.load(f)).items()):
            print(f"{name}=={version}")
