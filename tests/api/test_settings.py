"""One name per setting: the models, the flags of every command, and docs/configuration.md agree."""

from __future__ import annotations

from pathlib import Path

import pytest
import typer
import typer.core
from typer.testing import CliRunner

from api.cli import app
from api.http.settings import ApiSettings
from api.settings import (
    COMMAND_SETTINGS,
    CommonSettings,
    ObservabilitySettings,
    SettingsError,
    TephraSettings,
    configuration_markdown,
    env_name,
    flag_name,
    load_settings,
)
from api.stack import SERVICES, settings_for
from kube.settings import SimClusterSettings
from projector.settings import ProjectorSettings
from scheduler.service.settings import SchedulerSettings

ROOT = Path(__file__).resolve().parents[2]
MODELS = (
    CommonSettings,
    ObservabilitySettings,
    ProjectorSettings,
    SchedulerSettings,
    SimClusterSettings,
    ApiSettings,
)


def test_every_field_name_is_unique_across_the_models_and_tephra_settings_holds_them_all() -> None:
    names = [name for model in MODELS for name in model.model_fields]
    assert len(names) == len(set(names))
    assert set(names) == set(TephraSettings.model_fields)
    for model in (*MODELS, TephraSettings):
        assert model.model_config.get("env_prefix") == "TEPHRA_", model


def test_the_names_in_use_before_the_models_still_work() -> None:
    kept = {
        "TEPHRA_KAFKA_BOOTSTRAP", "TEPHRA_DATABASE_URL", "TEPHRA_CLUSTER", "TEPHRA_TOPICS_PREFIX",
        "TEPHRA_DATA_DIR", "TEPHRA_SCHEDULE_PERIOD", "TEPHRA_SESSION_BUDGET", "TEPHRA_SIM_BIND_DELAY",
        "TEPHRA_SIM_EVICT_DELAY",
    }  # fmt: skip
    assert kept <= {env_name(name) for name in TephraSettings.model_fields}


def test_docs_configuration_is_the_table_of_the_models() -> None:
    written = (ROOT / "docs" / "configuration.md").read_text(encoding="utf-8")
    assert written == configuration_markdown(), (
        "docs/configuration.md is stale: python -m api.settings > docs/configuration.md"
    )
    for name in TephraSettings.model_fields:
        assert f"`{env_name(name)}` | `--{flag_name(name)}`" in written


def _options(command: str) -> dict[str, str]:
    """The command's flags -> the parameter they set, from the click command typer builds."""
    group = typer.main.get_command(app)
    assert isinstance(group, typer.core.TyperGroup)
    found = group.commands[command]
    return {
        flag: param.name
        for param in found.params
        if isinstance(param, typer.core.TyperOption) and param.name is not None
        for flag in param.opts
    }


@pytest.mark.parametrize("command", sorted(COMMAND_SETTINGS))
def test_each_command_has_a_flag_for_every_field_of_its_models_and_no_other(command: str) -> None:
    options = _options(command)
    fields = {name for model in COMMAND_SETTINGS[command] for name in model.model_fields}
    settings = {flag: name for flag, name in options.items() if name in TephraSettings.model_fields}
    assert settings == {f"--{flag_name(name)}": name for name in fields}


def test_tephra_up_takes_every_setting() -> None:
    assert set(_options("up").values()) >= set(TephraSettings.model_fields)


def test_a_flag_wins_over_the_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TEPHRA_PROJECTOR_BATCH_SIZE", "9")
    assert load_settings(TephraSettings).projector_batch_size == 9
    assert load_settings(TephraSettings, {"projector_batch_size": "7"}).projector_batch_size == 7


def test_an_invalid_value_names_where_it_came_from(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TEPHRA_SCHEDULE_PERIOD", "0")
    with pytest.raises(SettingsError, match=r"TEPHRA_SCHEDULE_PERIOD: Input should be greater than 0"):
        load_settings(TephraSettings)
    with pytest.raises(SettingsError, match=r"--session-budget: Input should be a valid number"):
        load_settings(TephraSettings, {"session_budget": "soon", "schedule_period": "1"})


@pytest.mark.parametrize(
    ("command", "env", "flags", "message"),
    [
        ("projector", {"TEPHRA_PROJECTOR_BATCH_SIZE": "-1"}, [], "TEPHRA_PROJECTOR_BATCH_SIZE: Input"),
        ("projector", {}, ["--projector-freeze", "maybe"], "--projector-freeze: Input should be a valid"),
        ("scheduler", {}, ["--kafka-bootstrap", "kafka:9092"], "TEPHRA_DATABASE_URL (--database-url) is"),
        ("sim-cluster", {"TEPHRA_SIM_BIND_DELAY": "-1"}, [], "TEPHRA_SIM_BIND_DELAY: Input should be"),
        ("up", {"TEPHRA_PROJECTOR_THAW_GROWTH": "20"}, [], "must be at least TEPHRA_PROJECTOR_THAW_GROWTH"),
        ("get", {}, ["--cluster", "Not_A_Label", "jobs"], "--cluster: Value error, expected a DNS label"),
        ("submit", {"TEPHRA_TOPICS_PREFIX": "a/b"}, ["x.yaml"], "TEPHRA_TOPICS_PREFIX: Value error, invalid"),
    ],
)  # fmt: skip
def test_the_commands_refuse_an_invalid_value_with_exit_code_2(
    command: str, env: dict[str, str], flags: list[str], message: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    result = CliRunner().invoke(app, [command, *flags])
    assert result.exit_code == 2, result.output
    assert message in result.output


def test_the_projector_freezes_the_heap_only_in_a_process_of_its_own() -> None:
    settings = load_settings(TephraSettings)
    assert settings.projector_freeze  # the default: what tephra projector and compose.yaml run
    assert settings_for(settings, ("projector",)).projector_freeze
    assert not settings_for(settings, tuple(SERVICES)).projector_freeze
    assert not settings_for(settings, ("projector", "sim-cluster")).projector_freeze
