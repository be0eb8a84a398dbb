"""Version-skew tests: today's code against the previous release's real code."""
