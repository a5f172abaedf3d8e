"""The command line's own behaviour: how a command ends."""

from __future__ import annotations

import pytest


def test_ctrl_c_ends_a_command_with_one_line_and_exit_130(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """After the command's own clean-up: no traceback over what it printed."""
    from lakehouse import cli
    from lakehouse.cli import gameday

    def interrupted(args: object) -> int:
        print("game day cut short after 2 steps; report r.json")
        raise KeyboardInterrupt

    monkeypatch.setattr(gameday, "run_gameday", interrupted)
    assert cli.main(["gameday"]) == 130
    out, err = capsys.readouterr()
    assert out == "game day cut short after 2 steps; report r.json\n"
    assert err == "lakehouse: interrupted\n"
