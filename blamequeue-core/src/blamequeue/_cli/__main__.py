"""``python -m blamequeue._cli``: the same as the ``blamequeue`` console script."""

from __future__ import annotations

from . import main

raise SystemExit(main())
