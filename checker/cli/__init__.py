"""The command line: the argument parser (main.py) and one module per command."""
