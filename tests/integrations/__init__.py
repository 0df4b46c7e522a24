"""Integrations (loopctl/integrations): git worktrees, PR delivery, gh, protected paths,
notifications, cron."""
