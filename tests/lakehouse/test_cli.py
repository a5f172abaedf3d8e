"""The command line's own behaviour: how a command ends."""

from __future__ import annotations

import pytest


def test_ctrl_c_ends_a_command_with_one_line_and_exit_130(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """After the command's own clean-up (its `finally`): no traceback, one line."""
    from lakehouse import cli
    from lakehouse.cli import gameday

    def interrupted(args: object) -> int:
        raise KeyboardInterrupt  # as Ctrl-C does, wherever the command is

    monkeypatch.setattr(gameday, "run_gameday", interrupted)
    assert cli.main(["gameday"]) == 130
    assert capsys.readouterr().err == "lakehouse: interrupted\n"
