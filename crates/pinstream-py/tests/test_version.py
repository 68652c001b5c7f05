"""The version the package reports is the one it was installed as and built from."""

import importlib.metadata
import pathlib
import re

import pinstream

WORKSPACE = pathlib.Path(__file__).resolve().parents[3] / "Cargo.toml"


def test_version_is_the_installed_distributions():
    assert pinstream.__version__ == importlib.metadata.version("pinstream")


def test_version_is_the_workspaces():
    m = re.search(r'^version = "([^"]+)"', WORKSPACE.read_text(), re.MULTILINE)
    assert m, f"no version in {WORKSPACE}"
    assert pinstream.__version__ == m.group(1)
