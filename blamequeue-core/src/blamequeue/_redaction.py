"""Keeping URL credentials out of what people read: error lines, logs and the dashboard."""

from __future__ import annotations

import re

__all__ = ["redacted"]

# ``scheme://user:password@`` (or ``scheme://token@``): everything between ``://`` and the
# ``@`` that ends a URL's authority part.
_CREDENTIALS = re.compile(r"(?<=://)[^/?#@\s]*@")


def redacted(text: str) -> str:
    """``text`` with the user and password of every URL in it replaced by ``***@``
    (``redis://:pw@host`` reads ``redis://***@host``); the rest is left as it was."""
    return _CREDENTIALS.sub("***@", text)
