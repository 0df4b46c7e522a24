"""No other command pays for the server (DESIGN §19): the idle `tick`, the
direct views and the Typer commands load none of `loopctl.serve`, nor the
standard library's HTTP server."""

from __future__ import annotations

import pytest

from conftest import CLI, agent_command, imported_modules

SERVER_MODULES = ("loopctl.serve", "http.server", "socketserver", "ssl")


@pytest.mark.parametrize("command", [("tick",), ("ls",), ("status", "--json"),
                                     ("validate",), ("history", "demo")])
def test_other_commands_import_nothing_of_the_server(cli: CLI,
                                                    command: tuple[str, ...]) -> None:
    cli("start", "p", "--name", "demo", "--every", "1h", "--after", "1h",
        "--command", agent_command(), check=0)
    loaded = imported_modules(*command)
    assert "loopctl.domain.model" in loaded or command == ("tick",), "the control"
    found = [m for m in loaded if m.startswith(SERVER_MODULES)]
    assert not found, f"`loopctl {' '.join(command)}` imports {found}"
