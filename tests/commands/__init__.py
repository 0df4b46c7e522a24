"""Commands (loopctl/commands) through the CLI: what each says and does to the loops."""
