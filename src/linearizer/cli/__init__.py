"""The ``linearizer`` command. Each ``cmd_*.py`` module here registers one sub-command."""
