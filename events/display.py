"""Text shown to people, made safe: secrets redacted, control characters escaped.

Every command, service log and renderer that prints a value it did not
write itself goes through these, so a password never reaches a terminal or
a log, and a name or a message never moves the cursor, recolours the
screen or forges a line of output.  They live here, the one package every
other may import (design §2), so ``api``, ``replay`` and the services share
one rule.

* :func:`redact` — passwords in URLs (``scheme://user:password@host``, and
  ``user:password@host`` without a scheme) and ``password=`` parameters
  become ``***``.  It works on any text, so an error message quoting a
  malformed URL is redacted too; everything up to the *last* ``@`` of a
  word counts as the password, so one holding an unescaped ``@``, ``/`` or
  ``#`` is hidden whole.
* :func:`printable` — control characters (C0, DEL, C1, and the invisible
  Unicode format characters that reorder or hide text) become visible
  escapes: ``\\x1b``, ``\\n``, ``\\u202e``.  Apply it to each value, not to
  output that holds the renderer's own styling.
"""

from __future__ import annotations

import re
import unicodedata
from typing import Final

__all__ = ["REDACTED", "hidden", "printable", "redact"]

REDACTED: Final = "***"

# scheme://user:SECRET@ or user:SECRET@; the secret runs to the last '@' before a space
# (not a scheme's '://': 'postgresql://u@h' has none).
_USERINFO: Final = re.compile(
    r"(?P<lead>(?:[A-Za-z][A-Za-z0-9+.-]*://)?[^\s:/?#@'\"=]*):(?!//)(?P<secret>\S*)@"
)
_PASSWORD_PARAMETER: Final = re.compile(r"(?i)(?P<key>\b(?:password|passwd|pwd)=)(?P<secret>[^&\s'\"]*)")


def redact(text: str) -> str:
    """``text`` with every password it may hold replaced by ``***``."""
    text = _USERINFO.sub(lambda m: f"{m['lead']}:{REDACTED}@" if m["secret"] else m[0], text)
    return _PASSWORD_PARAMETER.sub(lambda m: f"{m['key']}{REDACTED}", text)


_ESCAPES: Final = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def _escape(char: str) -> str:
    if char in _ESCAPES:
        return _ESCAPES[char]
    code = ord(char)
    return f"\\x{code:02x}" if code <= 0xFF else f"\\u{code:04x}"


def hidden(char: str) -> bool:
    """True for a character :func:`printable` escapes."""
    # Cc: C0, DEL and C1 (ESC starts terminal sequences; \x9b is a one-byte CSI);
    # Cf: bidi overrides and zero-width characters; Zl/Zp: line and paragraph separators.
    return unicodedata.category(char) in ("Cc", "Cf", "Zl", "Zp")


def printable(value: object) -> str:
    """``str(value)`` with every control or invisible format character shown as an escape."""
    text = str(value)
    if text.isprintable():  # the usual case: nothing to do (isprintable is False for every char above)
        return text
    return "".join(_escape(c) if hidden(c) else c for c in text)
