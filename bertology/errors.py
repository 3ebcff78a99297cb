"""The one exception type for bad input: the CLI prints its message on one line and exits 2."""


class UserError(Exception):
    """Bad input (a config value, a data file, a checkpoint). The message names the problem
    and the fix; the CLI shows it without a traceback."""


def require(condition: bool, message: str) -> None:
    """Raise UserError(message) unless condition holds."""
    if not condition:
        raise UserError(message)
