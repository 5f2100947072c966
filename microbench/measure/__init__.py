"""Measurement: clocks, samples, statistics, FLOP counts, profilers, telemetry and the run's
summary."""
