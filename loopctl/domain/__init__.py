"""Pure rules: definitions, state, schedules, lifecycle, valves. No I/O; `now` comes in."""
