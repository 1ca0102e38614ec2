"""Text around an engine: chat templates (sandboxed), prompts, and a detokenizing stream with stop strings."""
