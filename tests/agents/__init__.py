"""Agent presets (loopctl/agents): the argv each agent runs with and what its output says."""
