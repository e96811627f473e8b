"""compose.yaml and docker/Dockerfile cannot run here (no Docker engine); check their shape."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

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
    assert env["TEPHRA_DATABASE_URL"].startswith("postgresql://")
    assert env["TEPHRA_DATABASE_URL"].split("@")[1].startswith("postgres:5432/")
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
