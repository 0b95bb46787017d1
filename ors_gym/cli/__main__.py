"""``python -m ors_gym.cli``: the ``ors-gym`` command line, as ``python -m ors_gym`` is."""

from __future__ import annotations

from ors_gym.cli import main

if __name__ == "__main__":
    raise SystemExit(main())
