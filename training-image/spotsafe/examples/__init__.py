"""Runnable examples of the spotsafe API."""
