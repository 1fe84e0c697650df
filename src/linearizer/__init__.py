"""Linearizer networks: f(x) = g_y^-1(A g_x(x)), exactly linear under the induced vector spaces."""

__version__ = "0.1.0"
