"""Shared fixtures: a private key folder, a temp working directory, and a store per backend."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

import durable_nb as dnb

# Backends the conformance suite runs against; the PostgreSQL issue adds its own.
STORE_BACKENDS = ["sqlite"]


@pytest.fixture(autouse=True)
def _isolated(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, tmp_path_factory: pytest.TempPathFactory) -> None:
    """Keep key files and default stores out of the user's home and the repository."""
    config = tmp_path_factory.getbasetemp() / "config"
    monkeypatch.setenv("XDG_CONFIG_HOME", str(config))
    monkeypatch.delenv("DURABLE_NB_SECRET", raising=False)
    monkeypatch.delenv("DURABLE_NB_STORE", raising=False)
    monkeypatch.chdir(tmp_path)


@pytest.fixture
def store_url(tmp_path: Path) -> str:
    """A URL of a new SQLite store file for one test."""
    return f"sqlite:///{tmp_path}/runs.db"


@pytest.fixture(params=STORE_BACKENDS)
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[dnb.Store]:
    """A fresh store of each backend (conformance tests take this fixture)."""
    if request.param == "sqlite":
        yield dnb.connect(f"sqlite:///{tmp_path}/conformance.db")
    else:  # pragma: no cover - backends of later issues
        pytest.skip(f"no {request.param} backend")


def db_path(url: str) -> str:
    """Return the file path of a sqlite:/// URL."""
    return url[len("sqlite:///") :]


def env_with_repo() -> dict[str, str]:
    """Environment for child processes: the same key folder and importable project."""
    env = dict(os.environ)
    root = str(Path(__file__).resolve().parent.parent)
    env["PYTHONPATH"] = root + os.pathsep + env.get("PYTHONPATH", "")
    return env
