"""Reading the deployment recipe of deploy/ as Docker and Compose would, without a Docker daemon.

- ``interpolate``: Compose's ``${VAR}``, ``${VAR:-default}``, ``${VAR-default}``, ``${VAR:?error}``,
  ``${VAR:+other}`` and ``$$`` in every string of a loaded compose file.
- ``excluded``: whether ``.dockerignore`` keeps a path out of the build context (Docker's rules: the
  last pattern matching the path or one of its parent folders decides; ``!`` lets it back in).
- ``instructions``: a Dockerfile's instructions, continuation lines joined, comments dropped.
- ``nginx_upstreams``: the ``server`` lines of each ``upstream`` block of an nginx configuration.
"""

from __future__ import annotations

import json
import re
import shlex
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
DEPLOY = ROOT / "deploy"

_VARIABLE = re.compile(
    r"\$(?:(?P<escaped>\$)|\{(?P<braced>[A-Za-z_][A-Za-z0-9_]*)(?:(?P<op>:?[-?+])(?P<arg>[^}]*))?\}"
    r"|(?P<named>[A-Za-z_][A-Za-z0-9_]*))"
)


class MissingVariable(Exception):
    """A ``${VAR:?message}`` (or ``${VAR?message}``) whose variable is not set."""


def referenced(text: str) -> list[tuple[str, str | None]]:
    """Return each variable ``text`` names, with its operator (``:-``, ``-``, ``:?``…) or None."""
    return [
        (match["braced"] or match["named"], match["op"]) for match in _VARIABLE.finditer(text) if not match["escaped"]
    ]


def _substitute(text: str, env: Mapping[str, str]) -> str:
    def one(match: re.Match[str]) -> str:
        if match["escaped"]:
            return "$"
        name = match["braced"] or match["named"]
        op, arg, value = match["op"], match["arg"] or "", env.get(name)
        unset_or_empty = not value
        if op in (":-", "-"):
            return arg if (unset_or_empty if op == ":-" else value is None) else str(value)
        if op in (":?", "?"):
            if unset_or_empty if op == ":?" else value is None:
                raise MissingVariable(f"{name}: {arg}")
            return str(value)
        if op in (":+", "+"):
            return "" if (unset_or_empty if op == ":+" else value is None) else arg
        return value or ""

    return _VARIABLE.sub(one, text)


def interpolate(data: Any, env: Mapping[str, str]) -> Any:
    """Return ``data`` (a loaded compose file) with every string interpolated from ``env``."""
    if isinstance(data, str):
        return _substitute(data, env)
    if isinstance(data, list):
        return [interpolate(item, env) for item in data]
    if isinstance(data, dict):
        return {key: interpolate(value, env) for key, value in data.items()}
    return data


def strings(data: Any) -> list[str]:
    """Return every string of ``data``, keys included."""
    if isinstance(data, str):
        return [data]
    if isinstance(data, list):
        return [text for item in data for text in strings(item)]
    if isinstance(data, dict):
        return [text for key, value in data.items() for text in [*strings(key), *strings(value)]]
    return []


def read_env_file(path: Path) -> dict[str, str]:
    """Return the ``NAME=value`` lines of a Compose ``.env`` file (comments and blank lines skipped)."""
    values: dict[str, str] = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            name, _, value = line.partition("=")
            values[name.strip()] = value.strip()
    return values


def _pattern_regex(pattern: str) -> re.Pattern[str]:
    """A .dockerignore pattern (Go's filepath.Match, plus ``**`` for any number of folders) as a regex."""
    out, i = "", 0
    while i < len(pattern):
        if pattern.startswith("**/", i):
            out, i = out + "(?:.*/)?", i + 3
        elif pattern.startswith("**", i):
            out, i = out + ".*", i + 2
        elif pattern[i] == "*":
            out, i = out + "[^/]*", i + 1
        elif pattern[i] == "?":
            out, i = out + "[^/]", i + 1
        elif pattern[i] == "[":
            end = pattern.index("]", i)
            out, i = out + pattern[i : end + 1], end + 1
        else:
            out, i = out + re.escape(pattern[i]), i + 1
    return re.compile(out + r"\Z")


def dockerignore_patterns(path: Path) -> list[tuple[bool, re.Pattern[str]]]:
    """Return (is_exception, regex) for each pattern of a .dockerignore file, in order."""
    patterns = []
    for line in path.read_text(encoding="utf-8").splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        exception = line.startswith("!")
        cleaned = line.lstrip("!").strip().strip("/")
        patterns.append((exception, _pattern_regex(cleaned)))
    return patterns


def excluded(relative: str, patterns: list[tuple[bool, re.Pattern[str]]]) -> bool:
    """Whether the context path ``relative`` is left out of the build context."""
    parts = relative.strip("/").split("/")
    candidates = ["/".join(parts[: n + 1]) for n in range(len(parts))]
    result = False
    for exception, regex in patterns:
        if any(regex.match(candidate) for candidate in candidates):
            result = not exception
    return result


@dataclass(frozen=True)
class Instruction:
    """One Dockerfile instruction: its keyword (upper case), its arguments' text, and its stage's index."""

    keyword: str
    text: str
    stage: int

    def words(self) -> list[str]:
        """The arguments: the JSON form's list, else the words of the shell form."""
        if self.text.startswith("["):
            return list(json.loads(self.text))
        return shlex.split(self.text)


def instructions(path: Path) -> list[Instruction]:
    """Return the instructions of a Dockerfile (continuation lines joined, comments dropped)."""
    found: list[Instruction] = []
    stage, pending = -1, ""
    for raw in path.read_text(encoding="utf-8").splitlines():
        if not pending and (not raw.strip() or raw.lstrip().startswith("#")):
            continue
        if pending and raw.lstrip().startswith("#"):
            continue  # a comment inside a continued instruction is dropped, as Docker does
        line = pending + raw.strip()
        if line.endswith("\\"):
            pending = line[:-1] + " "
            continue
        pending = ""
        keyword, _, text = line.partition(" ")
        if keyword.upper() == "FROM":
            stage += 1
        found.append(Instruction(keyword.upper(), text.strip(), stage))
    return found


def flags_and_rest(words: list[str]) -> tuple[dict[str, str], list[str]]:
    """Split an instruction's words into its ``--flag=value`` options and the rest."""
    flags: dict[str, str] = {}
    rest = []
    for word in words:
        if word.startswith("--") and not rest:
            name, _, value = word[2:].partition("=")
            flags[name] = value
        else:
            rest.append(word)
    return flags, rest


_UPSTREAM = re.compile(r"upstream\s+(\S+)\s*\{(.*?)\}", re.DOTALL)


def nginx_upstreams(text: str) -> dict[str, list[str]]:
    """Return each upstream's name and the addresses of its ``server`` lines."""
    text = re.sub(r"#[^\n]*", "", text)
    return {name: re.findall(r"^\s*server\s+(\S+?)[\s;]", body, re.MULTILINE) for name, body in _UPSTREAM.findall(text)}
