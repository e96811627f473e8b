"""The log output of the ``tephra`` commands: text lines, or JSON lines for log collectors.

``TEPHRA_LOG_LEVEL`` sets the level, ``TEPHRA_LOG_FORMAT=json`` writes one
JSON object a line (``time``, ``level``, ``logger``, ``message``, and
``exception`` with the traceback when there is one) to stderr.
"""

from __future__ import annotations

import json
import logging
from datetime import UTC, datetime

from api.settings import LogFormat, LogLevel

__all__ = ["JsonFormatter", "configure_logging"]

_TEXT = "%(asctime)s %(levelname)s %(name)s %(message)s"


class JsonFormatter(logging.Formatter):
    """One JSON object per record."""

    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, object] = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        if record.exc_info:
            line["exception"] = self.formatException(record.exc_info)
        return json.dumps(line, ensure_ascii=False)


def configure_logging(level: LogLevel, log_format: LogFormat) -> None:
    """The root logger at ``level`` in ``log_format``; aiokafka's chatter at WARNING at least."""
    number = logging.getLevelNamesMapping()[level.value]
    handler = logging.StreamHandler()
    handler.setFormatter(JsonFormatter() if log_format is LogFormat.JSON else logging.Formatter(_TEXT))
    logging.basicConfig(level=number, handlers=[handler])
    # aiokafka's INFO and DEBUG lines are about its own connections, many per second.
    logging.getLogger("aiokafka").setLevel(max(logging.WARNING, number))
