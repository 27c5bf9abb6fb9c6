"""Hooks into other libraries' training loops: `SinkscopeCallback` for 🤗 `transformers.Trainer`.

Imported lazily: `import sinkscope.integrations` imports neither transformers nor torch; the first use of
`SinkscopeCallback` does.
"""

from importlib import import_module

_EXPORTS = {"SinkscopeCallback": "sinkscope.integrations.transformers"}


def __getattr__(name: str):
    if name in _EXPORTS:
        return getattr(import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module 'sinkscope.integrations' has no attribute {name!r}")


__all__ = list(_EXPORTS)
