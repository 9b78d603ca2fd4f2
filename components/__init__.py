"""Pulumi components of the spot training blueprint."""
