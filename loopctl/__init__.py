"""loopctl: run AI coding agents on a schedule, as boringly as cron."""

__version__ = "0.1.0"
