"""Agent presets, the readers of their output, and the prompt envelope."""
