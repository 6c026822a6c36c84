"""The error a command raises for its user: a module of its own, so that command modules
import it at the top without importing the CLI that imports them."""


class CLIError(Exception):
    """A user-facing error: printed as 'glmflash: error: ...' with exit status 2."""


__all__ = ["CLIError"]
