"""The argv of a `--command` loop: its words with the placeholders filled
(`{prompt}`, `{prompt_file}`, `{loop}`, `{run_id}`, `{decision_dir_toml}`),
then `agent_args`. Apart from the presets, so that such a run loads none."""

from __future__ import annotations

from loopctl.domain.model import LoopDef
from loopctl.fast.lazy_re import lazy

PLACEHOLDER = lazy(r"\{(\w+)\}")
TAKES_PROMPT = lazy(r"\{prompt(_file)?\}")


def fill(arg: str, values: dict[str, str]) -> str:
    return PLACEHOLDER.sub(lambda m: values.get(m.group(1), m.group(0)), arg)


def values_for(loop: LoopDef, prompt: str, prompt_path: str, run_id: str,
               decision_dir: str) -> dict[str, str]:
    import json

    return {"prompt": prompt, "prompt_file": prompt_path, "loop": loop.name,
            "run_id": run_id, "decision_dir_toml": json.dumps(decision_dir)}


def command_argv(loop: LoopDef, values: dict[str, str]) -> tuple[list[str], str | None]:
    """The argv and its stdin text: the prompt, unless an argument takes it."""
    assert loop.command
    template = list(loop.command)
    wants_prompt = any(TAKES_PROMPT.search(a) for a in template)
    argv = [fill(a, values) for a in template] + list(loop.agent_args)
    return argv, None if wants_prompt else values["prompt"]
