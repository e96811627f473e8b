"""The Kubernetes bridge's settings: ``TEPHRA_<FIELD>`` variables, ``--<field>`` on ``tephra kube-bridge``.

Where it connects to Kafka and PostgreSQL is not here: ``api`` resolves the
endpoints (``TEPHRA_KAFKA_BOOTSTRAP``, ``TEPHRA_DATABASE_URL``) and passes
them to :func:`~kube.bridge.service.run_bridge` alongside these.
"""

from __future__ import annotations

import re
from pathlib import Path

from pydantic import Field, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

__all__ = ["KubeBridgeSettings"]

_NAME = re.compile(r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$")


class KubeBridgeSettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="TEPHRA_", extra="ignore", frozen=True, allow_inf_nan=False)

    kubeconfig: Path | None = Field(
        default=None,
        description="the kubeconfig of the cluster the bridge serves (unset: the pod's service account,"
        " in-cluster)",
    )
    kube_scheduler_names: str = Field(
        default="tephra,volcano",
        description="comma-separated schedulerName values whose pods and Volcano Jobs Tephra schedules"
        " (leave out volcano to run beside a real vc-scheduler)",
    )
    kube_job_controller: bool = Field(
        default=True,
        description="create the PodGroup and pods of each Volcano Job of ours (false: Volcano's own"
        " controller-manager creates them, and their pods are scheduled as a PodGroup's)",
    )
    kube_bind_concurrency: int = Field(
        default=64, gt=0, le=4096, description="binding and eviction calls the bridge keeps in flight"
    )
    kube_poll_interval: float = Field(
        default=0.05, gt=0, description="seconds between two reads of the decisions the bridge executes"
    )
    kube_status: bool = Field(
        default=True,
        description="write PodGroup and Volcano Job status and Kubernetes Events (FailedScheduling,"
        " Scheduled, Preempted) back to the cluster",
    )

    @field_validator("kube_scheduler_names")
    @classmethod
    def _names(cls, value: str) -> str:
        names = [n.strip() for n in value.split(",") if n.strip()]
        if not names or not all(_NAME.match(n) for n in names):
            raise ValueError(
                f"expected comma-separated scheduler names such as 'tephra,volcano', got {value!r}"
            )
        return ",".join(names)

    @property
    def scheduler_names(self) -> frozenset[str]:
        return frozenset(self.kube_scheduler_names.split(","))
