"""What a run can touch (DESIGN §14), in one room: the sandbox and its
layers (Landlock, private devices, the scope-only domain of an unconfined
run), how a step's argv is confined, and the run's cgroup. Reaping what a
run left is engine/reaper.py's; it uses the cgroup made here."""
