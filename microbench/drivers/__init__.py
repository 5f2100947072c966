"""What runs a resolved spec: one benchmark, a sweep, trials, a capacity search, an A/B
comparison."""
