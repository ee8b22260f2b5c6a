"""Frameworks on a2sql, an extra each: ``openai_agents`` (sessions), ``langgraph`` (checkpoints)."""
