"""cheeto-like: source of truth for HPC accounts and resources."""

__version__ = "0.1.0"
