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
    KubeBridgeCommandSettings,
    MigrateSettings,
    ObservabilitySettings,
    SettingsError,
    TephraSettings,
    configuration_markdown,
    env_name,
    flag_name,
    load_settings,
)
from api.stack import SERVICES, settings_for
from kube.bridge.settings import KubeBridgeSettings
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
    MigrateSettings,
)


def test_every_field_name_is_unique_across_the_models_and_tephra_settings_holds_them_all() -> None:
    names = [name for model in MODELS for name in model.model_fields]
    assert len(names) == len(set(names))
    assert set(names) == set(TephraSettings.model_fields)
    for model in (*MODELS, TephraSettings):
        assert model.model_config.get("env_prefix") == "TEPHRA_", model


def test_the_bridges_settings_are_its_commands_own_and_clash_with_none() -> None:
    names = {name for model in MODELS for name in model.model_fields}
    assert not names & set(KubeBridgeSettings.model_fields)
    assert set(KubeBridgeCommandSettings.model_fields) == (
        set(CommonSettings.model_fields)
        | set(ObservabilitySettings.model_fields)
        | set(KubeBridgeSettings.model_fields)
    )


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
    known = {name for group in COMMAND_SETTINGS.values() for model in group for name in model.model_fields}
    settings = {flag: name for flag, name in options.items() if name in known}
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


def test_the_data_dir_defaults_to_the_users_state_directory_not_the_current_folder(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from replay.locate import database_url

    monkeypatch.delenv("TEPHRA_DATA_DIR", raising=False)
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    monkeypatch.chdir(tmp_path)
    assert CommonSettings().data_dir == tmp_path / "state" / "tephra"
    # replay finds the same stack record as tephra, from any folder.
    (tmp_path / "state" / "tephra").mkdir(parents=True)
    (tmp_path / "state" / "tephra" / "stack.json").write_text('{"database_url": "postgresql://x@h/db"}')
    assert database_url({"XDG_STATE_HOME": str(tmp_path / "state")}) == "postgresql://x@h/db"
    # The XDG rule: a relative XDG_STATE_HOME is ignored, the home's .local/state is used.
    monkeypatch.setenv("XDG_STATE_HOME", "relative")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert CommonSettings().data_dir == tmp_path / "home" / ".local" / "state" / "tephra"


def test_simulate_takes_the_one_output_flag_and_its_former_spelling() -> None:
    scenario = str(sorted((Path(__file__).parents[1] / "conformance" / "scenarios").glob("*.yaml"))[0])
    new = CliRunner().invoke(app, ["simulate", scenario, "-o", "json"])
    old = CliRunner().invoke(app, ["simulate", scenario, "--format", "json"])
    assert new.exit_code == 0, new.output
    assert new.stdout == old.stdout
    assert new.stdout.lstrip().startswith(("{", "["))
    assert "--format" not in CliRunner().invoke(app, ["simulate", "--help"]).stdout  # hidden


@pytest.mark.parametrize("command", ["up", "projector", "scheduler", "sim-cluster", "api"])
def test_a_service_commands_help_lists_its_settings_and_their_variables(command: str) -> None:
    shown = CliRunner().invoke(app, [command, "--help"], env={"COLUMNS": "200"}).stdout
    assert "TEPHRA_X_Y" in shown
    for model in COMMAND_SETTINGS[command]:
        for field in model.model_fields:
            assert f"--{flag_name(field)}" in shown
            assert f"{env_name(field)}:" in shown


def test_tephra_completes_commands_and_kinds_in_bash() -> None:
    script = CliRunner().invoke(app, ["--show-completion", "bash"])
    assert script.exit_code == 0
    assert "_tephra_completion" in script.stdout
    # What bash asks when the user presses tab after `tephra get j`.
    env = {"_TEPHRA_COMPLETE": "complete_bash", "COMP_WORDS": "tephra get j", "COMP_CWORD": "2"}
    completed = CliRunner().invoke(app, [], env=env, prog_name="tephra")
    assert completed.stdout.split() == ["jobs"]
