"""sla: jobs waiting longer than their SLA go first and are admitted.

Waiting time: PodGroup annotation ``volcano.sh/sla-waiting-time`` (or
``sla-waiting-time``) else the ``sla-waiting-time`` argument (Go duration
such as ``3m``, ``1h30m``).  A job without a creation time never counts as
overdue (the session has no other clock than ``now``).
"""

from __future__ import annotations

import re

from scheduler.core.config import PluginName
from scheduler.core.framework import ABSTAIN, PERMIT, Session
from scheduler.core.plugins.base import PluginBase
from scheduler.core.state import JobState

__all__ = ["SlaPlugin", "parse_duration"]

_UNITS = {"h": 3600.0, "m": 60.0, "s": 1.0, "ms": 0.001}
_PART = re.compile(r"(\d+(?:\.\d+)?)(ms|h|m|s)")


def parse_duration(text: str) -> float | None:
    """Seconds in a Go duration string, or None when it is not one."""
    text = text.strip()
    if not text:
        return None
    pos, total = 0, 0.0
    for match in _PART.finditer(text):
        if match.start() != pos:
            return None
        total += float(match.group(1)) * _UNITS[match.group(2)]
        pos = match.end()
    return total if pos == len(text) else None


class SlaPlugin(PluginBase):
    name = PluginName.SLA

    def on_session_open(self, ssn: Session) -> None:
        raw = self.argument("sla-waiting-time", None)
        self.default = parse_duration(str(raw)) if raw is not None else None
        self.now = ssn.now.timestamp()
        self.waits: dict[str, float | None] = {}
        for uid, job in ssn.jobs.items():
            annotated = None
            for key in ("volcano.sh/sla-waiting-time", "sla-waiting-time"):
                value = ssn.annotations.get(uid, {}).get(key)
                if value:
                    annotated = parse_duration(value)
                    break
            self.waits[uid] = annotated if annotated is not None else self.default
            del job
        ssn.add_job_order(self, self._key)
        ssn.add_job_enqueueable(self, self._vote)
        ssn.add_job_pipelined(self, self._vote)

    def _key(self, job: JobState) -> tuple[int, float]:
        wait = self.waits.get(job.uid)
        if wait is None:
            return (1, 0.0)
        return (0, job.created + wait)

    def _vote(self, job: JobState) -> int:
        wait = self.waits.get(job.uid)
        if wait is None or job.created == 0.0:
            return ABSTAIN
        return PERMIT if self.now - job.created >= wait else ABSTAIN
