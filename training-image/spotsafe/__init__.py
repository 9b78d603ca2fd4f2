"""spotsafe: the spot-safe training runtime."""
