"""The deployment kit in deploy/: what can be checked without a container engine.

The image's entry point and health check run here against a relay configured by the
environment alone, as in the container; nginx parses its own configuration; systemd
verifies the units; the compose file is read as YAML.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import trustme
import yaml

from relay import _cli as relay_cli
from runwire import config

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
BIN = Path(sys.executable).parent


def dockerfile() -> list[tuple[str, str]]:
    """(instruction, arguments) of deploy/Dockerfile, continuation lines joined."""
    text = re.sub(r"\\\n\s*", " ", (DEPLOY / "Dockerfile").read_text())
    out = []
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            word, _, rest = line.partition(" ")
            out.append((word.upper(), rest.strip()))
    return out


def test_the_dockerfile_is_multi_stage_non_root_with_a_health_check() -> None:
    steps = dockerfile()
    froms = [rest for word, rest in steps if word == "FROM"]
    assert len(froms) == 2 and froms[0].endswith(" AS build")
    assert any(w == "COPY" and r.startswith("--from=build") for w, r in steps)
    users = [rest for word, rest in steps if word == "USER"]
    assert users and users[-1] not in ("root", "0")
    health = [rest for word, rest in steps if word == "HEALTHCHECK"]
    assert len(health) == 1 and "runwire-healthcheck" in health[0]
    assert ("ENTRYPOINT", '["runwire"]') in steps and ("CMD", '["relay"]') in steps
    # Every RUNWIRE_* variable the image sets is a relay option.
    env = " ".join(rest for word, rest in steps if word == "ENV")
    known = {config.env_name(a) for a in config.option_actions(relay_cli.build_parser())}
    assert set(re.findall(r"(RUNWIRE_[A-Z_]+)=", env)) <= known


@pytest.fixture
def relay_from_env(tmp_path: Path) -> Iterator[dict[str, str]]:
    """``runwire relay`` (the image's entry point and command) configured by the environment
    the Dockerfile sets, with a free port."""
    steps = dockerfile()
    env = dict(os.environ)
    for word, rest in steps:
        if word == "ENV":
            env.update(re.findall(r"(RUNWIRE_[A-Z_]+)=(\S+)", rest))
    env["RUNWIRE_STORE"] = f"sqlite:///{tmp_path / 'runwire.db'}"
    env["RUNWIRE_HOST"] = "127.0.0.1"
    env["RUNWIRE_PORT"] = "0"
    proc = subprocess.Popen(
        [str(BIN / "runwire"), "relay"], env=env, stdout=subprocess.PIPE, text=True, cwd=tmp_path
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        match = re.search(r"ws://127\.0\.0\.1:(\d+) \(store sqlite:///", line)
        assert match, line
        yield {**os.environ, "RUNWIRE_PORT": match.group(1)}
    finally:
        proc.terminate()
        assert proc.wait(timeout=30) == 0  # SIGTERM is a clean stop


def test_the_health_check_passes_against_a_relay_configured_by_environment(
    relay_from_env: dict[str, str],
) -> None:
    check = [sys.executable, str(DEPLOY / "healthcheck.py")]
    assert subprocess.run(check, env=relay_from_env, timeout=30).returncode == 0
    down = {**relay_from_env, "RUNWIRE_HEALTH_URL": "http://127.0.0.1:9/healthz"}
    failed = subprocess.run(check, env=down, timeout=30, capture_output=True, text=True)
    assert failed.returncode == 1 and "runwire-healthcheck" in failed.stderr


def compose() -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load((DEPLOY / "compose.yaml").read_text())
    return loaded


def test_the_compose_file_has_two_relays_redis_and_a_tls_proxy() -> None:
    services = compose()["services"]
    assert set(services) == {"redis", "relay1", "relay2", "nginx"}
    redis = " ".join(services["redis"]["command"])
    assert "--appendonly yes" in redis and "--maxmemory-policy noeviction" in redis
    known = {config.env_name(a) for a in config.option_actions(relay_cli.build_parser())}
    for name in ("relay1", "relay2"):
        relay = services[name]
        assert relay["build"]["dockerfile"] == "deploy/Dockerfile"
        assert relay["environment"]["RUNWIRE_STORE"].startswith("redis://redis:")
        assert set(relay["environment"]) <= known
    nginx = services["nginx"]
    assert "443:443" in nginx["ports"]
    assert any(v.startswith("./nginx/runwire.conf:") for v in nginx["volumes"])
    upstream = (DEPLOY / "nginx" / "runwire.conf").read_text()
    assert "server relay1:8787" in upstream and "server relay2:8787" in upstream


@pytest.mark.skipif(
    shutil.which("nginx") is None, reason="nginx is not installed (apt-get install -y nginx-light)"
)
def test_nginx_parses_the_snippet(tmp_path: Path) -> None:
    ca = trustme.CA()
    cert = ca.issue_cert("relay.example.com")
    certs = tmp_path / "certs"
    certs.mkdir()
    cert.cert_chain_pems[0].write_to_path(str(certs / "runwire.crt"))
    cert.private_key_pem.write_to_path(str(certs / "runwire.key"))
    snippet = (DEPLOY / "nginx" / "runwire.conf").read_text()
    snippet = snippet.replace("/etc/nginx/certs/", f"{certs}/")
    # The compose service names resolve inside compose only: point them at loopback here.
    snippet = snippet.replace("relay1:8787", "127.0.0.1:8787").replace(
        "relay2:8787", "127.0.0.1:8788"
    )
    (tmp_path / "runwire.conf").write_text(snippet)
    (tmp_path / "logs").mkdir()
    (tmp_path / "nginx.conf").write_text(
        f"pid {tmp_path}/nginx.pid;\nerror_log {tmp_path}/logs/error.log;\n"
        "events {}\n"
        f"http {{\n  access_log off;\n  include {tmp_path}/runwire.conf;\n}}\n"
    )
    proc = subprocess.run(
        ["nginx", "-t", "-p", str(tmp_path), "-c", str(tmp_path / "nginx.conf")],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert proc.returncode == 0, proc.stderr
    assert "syntax is ok" in proc.stderr


@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="systemd-analyze is missing")
@pytest.mark.parametrize("unit", ["runwire-relay.service", "runwire-worker.service"])
def test_systemd_verifies_the_unit(unit: str, tmp_path: Path) -> None:
    text = (DEPLOY / "systemd" / unit).read_text()
    assert "--config /etc/runwire/runwire.toml" in text and "KillSignal=SIGTERM" in text
    # Verify with the executable of this environment (the unit names /opt/runwire's).
    local = tmp_path / unit
    local.write_text(text.replace("/opt/runwire/bin/runwire", str(BIN / "runwire")))
    proc = subprocess.run(
        ["systemd-analyze", "verify", str(local)], capture_output=True, text=True, timeout=60
    )
    problems = [line for line in proc.stderr.splitlines() if unit in line]
    assert proc.returncode == 0 and problems == [], proc.stderr
