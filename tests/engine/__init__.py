"""The engine (loopctl/engine): drivers, the daemon, supervisors, a run's steps,
the sandbox and its bounds."""
