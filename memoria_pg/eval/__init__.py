"""Quality evaluation on public retrieval benchmarks."""
