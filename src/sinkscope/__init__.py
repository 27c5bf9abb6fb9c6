"""sinkscope: attention sinks, diagonal patterns, attention switches and oversmoothing in transformers."""

__version__ = "0.1.0"
