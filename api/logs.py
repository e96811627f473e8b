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
from events.display import printable, redact

__all__ = ["JsonFormatter", "SafeTextFormatter", "configure_logging"]

_TEXT = "%(asctime)s %(levelname)s %(name)s %(message)s"


class SafeTextFormatter(logging.Formatter):
    """Text lines made safe (events.display).

    The message's control characters are escaped (a name from an event cannot
    forge a log line or recolour the terminal), and passwords are redacted
    from the whole line, tracebacks included.
    """

    def formatMessage(self, record: logging.LogRecord) -> str:
        return super().formatMessage(
            logging.makeLogRecord({**record.__dict__, "message": printable(record.message)})
        )

    def format(self, record: logging.LogRecord) -> str:
        return redact(super().format(record))


class JsonFormatter(logging.Formatter):
    """One JSON object per record (JSON escapes control characters; passwords are redacted)."""

    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, object] = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "message": redact(record.getMessage()),
        }
        if record.exc_info:
            line["exception"] = redact(self.formatException(record.exc_info))
        return json.dumps(line, ensure_ascii=False)


def configure_logging(level: LogLevel, log_format: LogFormat) -> None:
    """The root logger at ``level`` in ``log_format``; aiokafka's chatter at WARNING at least."""
    number = logging.getLevelNamesMapping()[level.value]
    handler = logging.StreamHandler()
    handler.setFormatter(JsonFormatter() if log_format is LogFormat.JSON else SafeTextFormatter(_TEXT))
    logging.basicConfig(level=number, handlers=[handler])
    # aiokafka's INFO and DEBUG lines are about its own connections, many per second.
    logging.getLogger("aiokafka").setLevel(max(logging.WARNING, number))
