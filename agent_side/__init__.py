"""Agent SDK."""
