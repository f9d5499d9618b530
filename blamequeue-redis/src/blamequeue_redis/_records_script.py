"""The Lua scripts of the ``redis`` backend's shared records (``Capabilities.records``):
``lua/record_<operation>.lua``, each after ``lua/records_prelude.lua`` (the helpers they share).

The records of one kind share a Cluster hash tag, ``R = <prefix>:rec:{<kind>}``, so one script
sees them together:

* ``R:v:<key>`` (hash): ``e`` (always ``1``: an empty record still exists), ``v`` the value,
  ``x`` the expiry, ``c:<name>`` each counter (``HINCRBYFLOAT``);
* ``R:t:<key>`` (set): the ``once`` tokens the record applied;
* ``R:keys`` (zset, every score 0): the kind's keys, for listing in key order (``ZRANGEBYLEX``);
* ``R:exp`` (zset): the keys that expire, scored by expiry, for pruning.

A record whose expiry has passed is deleted by the first script that touches it, so every
script sees only live records, and a recreated record starts without counters or tokens.
The set ``<prefix>:rec-kinds`` names every kind, so a sweep can prune them all.
"""

from __future__ import annotations

from typing import Final

from blamequeue_redis._scripts import Script, read_lua

__all__ = [
    "RECORD_ADD",
    "RECORD_DELETE",
    "RECORD_GET",
    "RECORD_LIST",
    "RECORD_PRUNE",
    "RECORD_PUT",
    "RECORD_SCRIPTS",
]

#: The text every records script starts with: the helpers they share.
_PRELUDE: Final = read_lua("records_prelude")


def _records_script(name: str) -> Script:
    """The records script of ``lua/<name>.lua`` (its KEYS, ARGV and reply are documented at
    the top of that file), after :data:`_PRELUDE`."""
    return Script(name, _PRELUDE + read_lua(name))


RECORD_PUT: Final = _records_script("record_put")
RECORD_ADD: Final = _records_script("record_add")
RECORD_GET: Final = _records_script("record_get")
RECORD_LIST: Final = _records_script("record_list")
RECORD_DELETE: Final = _records_script("record_delete")
RECORD_PRUNE: Final = _records_script("record_prune")

RECORD_SCRIPTS: Final = (
    RECORD_PUT,
    RECORD_ADD,
    RECORD_GET,
    RECORD_LIST,
    RECORD_DELETE,
    RECORD_PRUNE,
)
