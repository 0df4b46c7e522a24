#!python
# `python -m loopctl`, and the installed `loopctl` itself: the wheel ships
# this file as its script (pyproject: shared-scripts), because pip's
# generated console script imports `re`, a third of an idle cron tick's
# instructions (bench/README.md). pip points `#!python` at the interpreter.
from loopctl.entry import main

main(program=True)  # nothing follows: the process may end without the teardown
