"""Sphinx directives that generate durable_nb's reference pages from the code itself.

- ``durable-openapi``: the REST API, from the OpenAPI document the service serves at
  ``/openapi.json`` (built from a real app, so the page cannot drift from the endpoints).
- ``durable-magics``: ``%%durable`` and ``%durable``'s subcommands, from the magics' own argument
  parsers.
- ``durable-api``: every public name of ``durable_nb.__all__``, grouped, through autodoc (a name in
  no group fails the build, so a new public name cannot go undocumented).
- ``durable-screenshot NAME``: a screenshot the browser tests took, from the folder they wrote it
  to: ``$DURABLE_NB_SCREENSHOTS``, else the build folder's ``_build/screenshots`` (where CI's test
  run and ``docs/refresh-screenshots`` write them); a screenshot no test wrote falls back to the
  copy tracked in docs/ (the one the README shows). The build never writes over tracked files.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any, ClassVar

from docutils import nodes
from docutils.parsers.rst import directives
from docutils.statemachine import StringList
from screenshots import screenshot_path
from sphinx.application import Sphinx
from sphinx.util.docutils import SphinxDirective
from sphinx.util.nodes import nested_parse_with_titles


def openapi_document() -> dict[str, Any]:
    """Return the service's OpenAPI document, as ``GET /openapi.json`` answers it."""
    from durable_nb.service.app import create_app
    from durable_nb.service.auth import Auth

    with tempfile.TemporaryDirectory(prefix="durable-nb-openapi-") as folder:
        app = create_app([], store=f"sqlite:///{folder}/runs.db", auth=Auth({}, open_access=True), notebooks=folder)
        return app.openapi()


def _schema_text(schema: dict[str, Any], components: dict[str, Any]) -> str:
    """One line naming a schema: its component's name, or its type."""
    if "$ref" in schema:
        return f"``{schema['$ref'].rsplit('/', 1)[-1]}`` (see Schemas)"
    if "anyOf" in schema:
        return " or ".join(_schema_text(s, components) for s in schema["anyOf"])
    if schema.get("type") == "array":
        return f"array of {_schema_text(schema.get('items', {}), components)}"
    return f"``{schema.get('type', 'any')}``"


def _component_lines(name: str, schema: dict[str, Any], components: dict[str, Any]) -> list[str]:
    lines = [f"``{name}``", "~" * (len(name) + 4), ""]
    if schema.get("description"):
        lines += [schema["description"].strip(), ""]
    required = set(schema.get("required", ()))
    for field, spec in schema.get("properties", {}).items():
        text = _schema_text(spec, components)
        note = " (required)" if field in required else ""
        default = f", default ``{json.dumps(spec['default'])}``" if "default" in spec else ""
        lines.append(f"- ``{field}``: {text}{note}{default}")
    lines.append("")
    return lines


def openapi_rst(document: dict[str, Any]) -> list[str]:
    """The REST reference as reStructuredText: one section per endpoint, then the body schemas."""
    components = document.get("components", {}).get("schemas", {})
    lines: list[str] = []
    for path, operations in document["paths"].items():
        for method, operation in operations.items():
            title = f"{method.upper()} {path}"
            lines += [f"``{title}``", "-" * (len(title) + 4), ""]
            summary = operation.get("summary") or ""
            description = (operation.get("description") or "").strip()
            if summary:
                lines += [summary, ""]
            if description and description != summary:
                lines += [*description.splitlines(), ""]
            parameters = operation.get("parameters", [])
            if parameters:
                lines += ["Parameters:", ""]
                for parameter in parameters:
                    where = parameter["in"]
                    text = _schema_text(parameter.get("schema", {}), components)
                    required = " (required)" if parameter.get("required") else ""
                    lines.append(f"- ``{parameter['name']}`` ({where}): {text}{required}")
                lines.append("")
            body = operation.get("requestBody", {}).get("content", {})
            for media, spec in body.items():
                lines += [f"Body (``{media}``): {_schema_text(spec.get('schema', {}), components)}", ""]
            responses = operation.get("responses", {})
            if responses:
                lines += ["Responses:", ""]
                for code, response in responses.items():
                    lines.append(f"- ``{code}``: {response.get('description', '')}")
                lines.append("")
    if components:
        lines += ["Schemas", "-------", ""]
        for name, schema in sorted(components.items()):
            lines += _component_lines(name, schema, components)
    return lines


class GeneratedDirective(SphinxDirective):
    """A directive whose content is reStructuredText generated from the code (sections allowed)."""

    source = ""

    def lines(self) -> list[str]:
        """The generated reStructuredText, one line an item."""
        raise NotImplementedError

    def run(self) -> list[nodes.Node]:
        container = nodes.section()
        container.document = self.state.document
        nested_parse_with_titles(self.state, StringList(self.lines(), source=self.source), container)
        return container.children


class OpenAPIDirective(GeneratedDirective):
    """``.. durable-openapi::`` renders the service's endpoints and body schemas."""

    source = "openapi.json"

    def lines(self) -> list[str]:
        return openapi_rst(openapi_document())


# The magics whose arguments are parsed, in the order a reader meets them: (shown as, method name).
MAGICS = (
    ("%%durable NODE", "durable"),
    ("%durable run", "_run_args"),
    ("%durable fork", "_fork_args"),
    ("%durable replay", "_replay_args"),
    ("%durable approve / %durable reject", "_decision_args"),
)


def _argument_lines(parser: Any) -> list[str]:
    """A parser's arguments as a bulleted list: flags or name, then help and default."""
    lines = []
    for action in parser._actions:
        if action.help == "==SUPPRESS==" or "-h" in action.option_strings:
            continue
        name = ", ".join(action.option_strings) or action.dest
        metavar = (
            "" if action.nargs == 0 else f" {(action.metavar or action.dest).upper()}" if action.option_strings else ""
        )
        default = "" if action.default in (None, False, [], "==SUPPRESS==") else f" (default: ``{action.default}``)"
        # argparse's own expansion: %(default)s filled in, %% read as one %.
        text = parser._get_formatter()._expand_help(action) if action.help else ""
        lines.append(f"- ``{name}{metavar}``: {text}{default}")
    return lines


def magics_rst() -> list[str]:
    """The magics' reference as reStructuredText, from their argument parsers and docstrings."""
    import inspect

    from durable_nb.notebook.magic_arguments import parser_of
    from durable_nb.notebook.magics import DurableMagics

    lines = ["``%durable`` (line magic)", "-------------------------", ""]
    usage = inspect.cleandoc(DurableMagics.durable_line.__doc__ or "").split("Usage::", 1)[1]
    lines += ["::", "", *("    " + line for line in inspect.cleandoc(usage).splitlines()), ""]
    for shown, method in MAGICS:
        parser = parser_of(getattr(DurableMagics, method))  # subcommands' parsers are built on first use
        lines += [f"``{shown}``", "-" * (len(shown) + 4), ""]
        if parser.description:
            # The description holds examples laid out for a terminal: shown as it is.
            shown_lines = [
                line.removesuffix("::") + (":" if line.endswith("::") else "")
                for line in inspect.cleandoc(parser.description).splitlines()
            ]
            lines += ["::", "", *("    " + line for line in shown_lines), ""]
        lines += [*_argument_lines(parser), ""]
    return lines


class MagicsDirective(GeneratedDirective):
    """``.. durable-magics::`` renders the magics' arguments from their parsers."""

    source = "durable_nb.notebook.magics"

    def lines(self) -> list[str]:
        return magics_rst()


class ScreenshotDirective(SphinxDirective):
    """``.. durable-screenshot:: NAME`` shows NAME.png from the browser tests' folder, else the tracked copy."""

    required_arguments = 1
    has_content = True
    option_spec: ClassVar[dict[str, Any]] = {"alt": directives.unchanged}

    def run(self) -> list[nodes.Node]:
        name = self.arguments[0]
        path = screenshot_path(name)
        self.env.note_dependency(str(path))
        source = Path(self.env.doc2path(self.env.docname)).parent
        uri = os.path.relpath(path, source)
        alt = self.options.get("alt") or " ".join(self.content) or name
        figure = nodes.figure()
        figure += nodes.image(uri=uri, alt=alt)
        if self.content:
            figure += nodes.caption(text=" ".join(self.content))
        return [figure]


# The API page's groups; errors have a page of their own.
API_GROUPS: dict[str, tuple[str, ...]] = {
    "Workflows and runs": (
        "Workflow",
        "Run",
        "RunStatus",
        "get_run",
        "status",
        "cancel",
        "fork",
        "recover",
        "RecoveryReport",
        "prune",
        "PruneReport",
        "idempotent",
        "map_items",
    ),
    "Gates and decisions": ("gate", "interrupt", "Resume", "Decision", "approve", "reject"),
    "Notebooks": ("load_ipython_extension", "replay", "inspect"),
    "Views": ("runs", "history", "forks", "events", "compare", "compare_cells", "EventType"),
    "Agents": ("agent", "tool", "Tool", "worker", "fork_agent", "AgentResult"),
    "Stores": ("connect", "Store"),
    "The service's client": ("Client",),
}


# Classes whose public methods are partly defined on a base class of their own (Workflow's
# decorators live on its graph definition).
INHERITING = {"Workflow"}


def _is_error(value: Any) -> bool:
    from durable_nb.errors import DurableError

    return isinstance(value, type) and issubclass(value, DurableError)


def api_rst() -> list[str]:
    """The API page: each group's names, each sync name followed by its async twin when it has one."""
    import durable_nb

    public = [n for n in durable_nb.__all__ if n != "__version__" and not _is_error(getattr(durable_nb, n))]
    grouped = {n for names in API_GROUPS.values() for n in names}
    twins = {n for n in public if n.startswith("a") and n[1:] in public}
    missing = sorted(set(public) - grouped - twins)
    if missing:
        raise ValueError(f"public names in no group of the API page (add them to API_GROUPS): {missing}")
    lines: list[str] = []
    for title, names in API_GROUPS.items():
        lines += [title, "-" * len(title), ""]
        for name in names:
            for shown in (name, f"a{name}") if f"a{name}" in twins else (name,):
                value = getattr(durable_nb, shown)
                kind = "autoclass" if isinstance(value, type) else "autofunction"
                lines += [f".. {kind}:: durable_nb.{shown}"]
                if shown in INHERITING:
                    lines.append("   :inherited-members:")
                lines.append("")
    return lines


class ApiDirective(GeneratedDirective):
    """``.. durable-api::`` documents ``durable_nb.__all__`` through autodoc."""

    source = "durable_nb.__all__"

    def lines(self) -> list[str]:
        return api_rst()


def _public_reference(app: Sphinx, env: Any, node: Any, contnode: nodes.Node) -> nodes.Node | None:
    """Resolve a public name however a page or a signature spells it: ``durable_nb.engine.runs.run.Run``
    (where a type was defined) as the documented ``durable_nb.Run``, and ``durable_nb.RunNotFound``
    as ``durable_nb.errors.RunNotFound`` (the errors page documents them in their module)."""
    import durable_nb

    target = node.get("reftarget", "")
    if node.get("refdomain") != "py" or not target.startswith("durable_nb."):
        return None
    name = target.rsplit(".", 1)[-1]
    if name not in durable_nb.__all__:
        return None
    value = getattr(durable_nb, name)
    domain = env.get_domain("py")
    for candidate in (f"durable_nb.{name}", f"{getattr(value, '__module__', '')}.{name}"):
        if candidate == target:
            continue
        node["reftarget"] = candidate
        found = domain.resolve_xref(env, node["refdoc"], app.builder, node["reftype"], candidate, node, contnode)
        if found is not None:
            return found
    node["reftarget"] = target
    return None


def _drop_error_tree(app: Sphinx, what: str, name: str, obj: Any, options: Any, lines: list[str]) -> None:
    """The errors module's docstring draws the tree for a terminal; the errors page includes it as a literal block."""
    if what == "module" and name == "durable_nb.errors":
        lines.clear()


def setup(app: Sphinx) -> dict[str, Any]:
    app.add_directive("durable-api", ApiDirective)
    app.connect("missing-reference", _public_reference)
    app.connect("autodoc-process-docstring", _drop_error_tree)
    app.add_directive("durable-openapi", OpenAPIDirective)
    app.add_directive("durable-magics", MagicsDirective)
    app.add_directive("durable-screenshot", ScreenshotDirective)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
