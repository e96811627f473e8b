"""A job held by scheduling gates: no node or quota change is proposed, the gates are named."""

from __future__ import annotations

from pathlib import Path

from replay.counterfactual import find_counterfactual
from scheduler.core.session import run_session
from scheduler.scenario import load_scenario
from scheduler.simulate import SIMULATION_EPOCH

FID_05 = Path(__file__).resolve().parents[1] / "conformance" / "own" / "FID-05.yaml"


def test_a_gated_job_gets_no_lever_but_the_gates() -> None:
    scenario = load_scenario(FID_05)
    result = run_session(scenario.snapshot, scenario.config, SIMULATION_EPOCH)
    reasons = result.pending["c1/pg2"]
    assert reasons[0].code == "scheduling-gated"
    found = find_counterfactual(
        scenario.snapshot,
        scenario.config,
        SIMULATION_EPOCH,
        (),
        job_id="c1/pg2",
        reasons=reasons,
        baseline=result,
    )
    assert found.changes == ()
    assert "scheduling gates" in found.note
