"""The docs site's promises that need no build: the README is a front page, every environment variable
the library reads is documented, every public name has a docstring, every page is in a table of
contents. The build itself (warnings as errors, notebooks executed) runs in .ci/run."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

import durable_nb

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"


def _pages() -> list[Path]:
    return sorted(p for p in DOCS.rglob("*.md") if "_build" not in p.relative_to(DOCS).parts)


def test_the_readme_fits_on_a_screen_or_two_and_links_into_the_docs() -> None:
    """The README is at most 200 lines, and each docs page it links to exists."""
    text = (ROOT / "README.md").read_text()
    assert len(text.splitlines()) <= 200
    links = re.findall(r"\]\((docs/[^)#]+)", text)
    broken = [link for link in links if not (ROOT / link).is_file()]
    assert links and broken == []


def test_every_environment_variable_the_library_reads_is_documented() -> None:
    """Each ``DURABLE_NB_*`` name in the package's source is explained on the configuration page."""
    sources = [path.read_text() for path in (ROOT / "durable_nb").rglob("*.py")]
    read = {name for text in sources for name in re.findall(r"DURABLE_NB_[A-Z_]+", text)}
    page = (DOCS / "reference" / "configuration.md").read_text()
    assert read and {name for name in read if f"`{name}`" not in page} == set()


def test_every_public_name_has_a_docstring_of_its_own() -> None:
    """The API reference renders each name of ``durable_nb.__all__`` from its own docstring."""
    missing = []
    for name in durable_nb.__all__:
        if name == "__version__":
            continue
        value = getattr(durable_nb, name)
        own = value.__dict__.get("__doc__") if isinstance(value, type) else value.__doc__
        if not (own or "").strip():
            missing.append(name)
    assert missing == []


def test_every_page_is_in_a_table_of_contents() -> None:
    """A page no toctree names is unreachable from the site's navigation (Sphinx only warns for it)."""
    named = set()
    for page in _pages():
        for block in re.findall(r"```\{toctree\}\n(.*?)```", page.read_text(), re.S):
            for entry in block.splitlines():
                if entry.strip() and not entry.startswith(":"):
                    named.add((page.parent / entry.strip()).relative_to(DOCS).as_posix())
    pages = {p.relative_to(DOCS).with_suffix("").as_posix() for p in _pages()} - {"index"}
    assert pages - named == set()


def test_every_public_error_is_on_the_errors_page() -> None:
    """The errors page documents ``durable_nb.errors.__all__``: every error ``durable_nb`` exports is in it."""
    from durable_nb import errors

    exported = {n for n in durable_nb.__all__ if isinstance(getattr(durable_nb, n), type)}
    public_errors = {n for n in exported if issubclass(getattr(durable_nb, n), durable_nb.DurableError)}
    assert public_errors - set(errors.__all__) == set()


def test_screenshots_come_from_the_browser_tests_folder_else_the_tracked_copy(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The docs show the image the browser tests wrote ($DURABLE_NB_SCREENSHOTS) when there is one;
    a screenshot they did not write falls back to the copy tracked in docs/."""
    sys.path.insert(0, str(DOCS / "_ext"))
    try:
        from screenshots import screenshot_path  # the directives' own choice, without Sphinx
    finally:
        sys.path.remove(str(DOCS / "_ext"))
    (tmp_path / "inspector.png").write_bytes(b"taken by a test")
    monkeypatch.setenv("DURABLE_NB_SCREENSHOTS", str(tmp_path))
    assert screenshot_path("inspector") == tmp_path / "inspector.png"
    tracked = screenshot_path("gate-panel")
    assert tracked.parent in {DOCS, DOCS / "_build" / "screenshots"} and tracked.is_file()


def test_ci_builds_the_docs_with_the_readmes_commands() -> None:
    """.ci/run installs the docs extra and runs the README's docs build command, in an environment of its own."""
    readme = (ROOT / "README.md").read_text()
    (build,) = [line for line in readme.splitlines() if line.startswith("python -m sphinx ")]
    assert "-W" in build.split() and "-n" in build.split()
    ci = (ROOT / ".ci" / "run").read_text().splitlines()
    assert ".venv-docs/bin/python -m pip install --quiet -e '.[docs]'" in ci
    assert f".venv-docs/bin/{build}" in ci


def test_the_readmes_headline_figures_are_the_benchmarks_pages() -> None:
    """Each figure of the README's "How fast" section is one the benchmarks page reports, so that a new
    benchmark run that changes the page cannot leave the front page quoting old figures."""
    readme = (ROOT / "README.md").read_text()
    section = readme.split("## How fast", 1)[1].split("\n## ", 1)[0]
    figures = set(re.findall(r"\b\d+\.\d{3}\b", section))
    page = (DOCS / "benchmarks.md").read_text()
    assert len(figures) >= 6 and {f for f in figures if f not in page} == set()
