"""The native binding: the compiled core's functions as Python calls."""
