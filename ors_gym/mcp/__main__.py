"""``python -m ors_gym.mcp URL``: an ORS session's MCP endpoint relayed over stdio."""

from ors_gym.mcp.stdio import main

raise SystemExit(main())
