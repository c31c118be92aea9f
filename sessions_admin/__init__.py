"""sessions_admin: an operator console for LLM-agent session stores."""
