"""compose.yaml and docker/Dockerfile cannot run here (no Docker engine); check their shape."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
TEPHRA_SERVICES = {
    "projector": "projector",
    "scheduler": "scheduler",
    "sim-cluster": "sim-cluster",
    "api": "api",
}


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    document = yaml.safe_load((ROOT / "compose.yaml").read_text(encoding="utf-8"))
    assert isinstance(document, dict)
    return document


def test_the_stack_has_kafka_postgres_jaeger_and_the_tephra_services(compose: dict[str, Any]) -> None:
    assert {"kafka", "postgres", "jaeger", *TEPHRA_SERVICES} <= set(compose["services"])


def test_images_are_pinned(compose: dict[str, Any]) -> None:
    for name, service in compose["services"].items():
        image = service.get("image", "")
        if "build" in service:
            continue
        assert re.fullmatch(r"[\w./-]+:[\w.-]+", image), f"{name}: pin an image tag, got {image!r}"
        assert not image.endswith(":latest"), name
    assert compose["services"]["postgres"]["image"].startswith("postgres:16")
    assert compose["services"]["kafka"]["image"].startswith("apache/kafka:")


def test_kafka_runs_in_kraft_mode(compose: dict[str, Any]) -> None:
    env = compose["services"]["kafka"]["environment"]
    assert set(env["KAFKA_PROCESS_ROLES"].split(",")) == {"broker", "controller"}
    assert "ZOOKEEPER" not in " ".join(env).upper()
    assert env["KAFKA_AUTO_CREATE_TOPICS_ENABLE"] == "false"


def test_jaeger_accepts_otlp_over_http(compose: dict[str, Any]) -> None:
    assert any(str(port).endswith(":4318") for port in compose["services"]["jaeger"]["ports"])


@pytest.mark.parametrize(("service", "command"), TEPHRA_SERVICES.items())
def test_tephra_services_are_built_and_configured(
    compose: dict[str, Any], service: str, command: str
) -> None:
    spec = compose["services"][service]
    assert spec["build"]["dockerfile"] == "docker/Dockerfile"
    assert (ROOT / spec["build"]["context"] / spec["build"]["dockerfile"]).is_file()
    assert spec["command"] == [command]
    env = spec["environment"]
    assert env["TEPHRA_KAFKA_BOOTSTRAP"] == "kafka:9092"
    url = urlsplit(env["TEPHRA_DATABASE_URL"])
    assert (url.scheme, url.hostname, url.port, url.password) == ("postgresql", "postgres", 5432, None)
    assert env["OTEL_EXPORTER_OTLP_ENDPOINT"] == "http://jaeger:4318"
    assert env["OTEL_SERVICE_NAME"] == f"tephra-{service}"
    for dependency in spec["depends_on"]:
        assert dependency in compose["services"], f"{service} depends on unknown {dependency}"


def test_every_tephra_variable_in_compose_is_a_setting(compose: dict[str, Any]) -> None:
    from api.settings import TephraSettings, env_name

    known = {env_name(name) for name in TephraSettings.model_fields}
    for name in TEPHRA_SERVICES:
        given = {key for key in compose["services"][name]["environment"] if key.startswith("TEPHRA_")}
        assert given <= known, f"{name}: unknown settings {sorted(given - known)}"


def test_the_topic_job_creates_the_deployments_topics(compose: dict[str, Any]) -> None:
    from events.topics import Topics

    script = " ".join(compose["services"]["kafka-topics"]["command"])
    for topic in Topics("tephra").all():
        assert topic in script


def test_the_dockerfile_copies_every_package_and_runs_tephra() -> None:
    dockerfile = (ROOT / "docker" / "Dockerfile").read_text(encoding="utf-8")
    for package in ("events", "projector", "scheduler", "replay", "api", "kube"):
        if (ROOT / package).is_dir():
            assert f"COPY {package} ./{package}" in dockerfile, package
    assert 'ENTRYPOINT ["tephra"]' in dockerfile
    assert "USER tephra" in dockerfile


# --------------------------------------------------------------------------- least privilege


def test_no_password_is_written_in_compose(compose: dict[str, Any]) -> None:
    """Passwords come from compose's environment, as secret files or interpolated, never as text here."""
    text = (ROOT / "compose.yaml").read_text(encoding="utf-8")
    for name, service in compose["services"].items():
        for key, value in (service.get("environment") or {}).items():
            if "PASSWORD" in key:
                assert key.endswith("_FILE"), f"{name}: {key} holds a password; give a file (/run/secrets)"
                assert str(value).startswith("/run/secrets/"), f"{name}: {key}"
            if key.endswith("_URL"):
                assert urlsplit(str(value)).password is None, f"{name}: {key} holds a password"
    for secret in compose["secrets"].values():
        assert set(secret) == {"environment"}, "a secret is read from compose's environment"
    # The broker's user list interpolates variables; every password in it is one.
    for password in re.findall(r'(?:password|user_\w+)="([^"]*)"', text):
        assert password.startswith("${") or "%s" in password, password


def test_migrate_runs_once_before_every_tephra_service(compose: dict[str, Any]) -> None:
    migrate = compose["services"]["migrate"]
    assert migrate["command"] == ["migrate"]
    assert migrate["restart"] == "no"
    assert migrate["depends_on"]["postgres"]["condition"] == "service_healthy"
    for name in TEPHRA_SERVICES:
        assert (
            compose["services"][name]["depends_on"]["migrate"]["condition"]
            == "service_completed_successfully"
        )


@pytest.mark.parametrize("service", TEPHRA_SERVICES)
def test_each_service_connects_as_its_own_role_and_kafka_user(compose: dict[str, Any], service: str) -> None:
    from api.settings import TephraSettings, env_name

    prefix = {"sim-cluster": "sim"}.get(service, service).upper()
    spec = compose["services"][service]
    env = spec["environment"]
    assert env["TEPHRA_KAFKA_SECURITY_PROTOCOL"].startswith("SASL_")
    user_key = f"TEPHRA_{prefix}_DATABASE_USER"
    assert env[user_key] == compose["services"]["migrate"]["environment"][user_key]
    mounted = {f"/run/secrets/{name}" for name in spec["secrets"]}
    for key in (f"TEPHRA_{prefix}_DATABASE_PASSWORD_FILE", f"TEPHRA_{prefix}_KAFKA_PASSWORD_FILE"):
        assert env[key] in mounted, f"{service}: {key} is not a mounted secret"
    assert env[f"TEPHRA_{prefix}_KAFKA_USERNAME"]
    assert "postgres_password" not in spec["secrets"], f"{service} must not see the owner's password"
    known = {env_name(name) for name in TephraSettings.model_fields}
    assert {key for key in env if key.startswith("TEPHRA_")} <= known


def test_kafka_requires_sasl_on_every_client_listener(compose: dict[str, Any]) -> None:
    env = compose["services"]["kafka"]["environment"]
    protocols = dict(item.split(":") for item in env["KAFKA_LISTENER_SECURITY_PROTOCOL_MAP"].split(","))
    assert protocols.pop("CONTROLLER") == "PLAINTEXT"  # inside the container only
    assert set(protocols.values()) == {"SASL_PLAINTEXT"}
    assert "EXTERNAL" in protocols
    assert env["KAFKA_SASL_ENABLED_MECHANISMS"] == "PLAIN"
    users = env["KAFKA_LISTENER_NAME_INTERNAL_PLAIN_SASL_JAAS_CONFIG"]
    for service in TEPHRA_SERVICES:
        user = compose["services"][service]["environment"][
            f"TEPHRA_{({'sim-cluster': 'sim'}.get(service, service)).upper()}_KAFKA_USERNAME"
        ]
        assert f"user_{user}=" in users, f"the broker does not know {service}'s user {user}"
