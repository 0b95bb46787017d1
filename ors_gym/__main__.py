"""``python -m ors_gym``: the ``ors-gym`` command line."""

from __future__ import annotations

from ors_gym.cli import main

if __name__ == "__main__":
    raise SystemExit(main())
