"""AgentLoom: agents whose sessions keep their whole history, encrypted and in order."""

# The release, as pyproject.toml names it (written into session exports).
__version__ = "0.1.0"
