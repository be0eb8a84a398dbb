"""The benchmark harness and the demo: real load generators against real servers."""
