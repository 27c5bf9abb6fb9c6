"""The one exception type that reaches users as a single clear line (the CLI prints it and exits 2)."""


class SinkscopeError(Exception):
    """Bad input or an unmet requirement, with a message that names the input and what to do."""
