"""The context engine: plain Python, no Django."""
