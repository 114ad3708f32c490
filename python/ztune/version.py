"""The SDK's version (sent in the hello line, used by setup.py)."""

__version__ = "0.1.0"
