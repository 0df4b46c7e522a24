"""The outside world: git and gh, notifications, the crontab, exports to other schedulers."""
