"""Measurement: clocks, samples, statistics, FLOP counts, profilers, telemetry, a decode step's
attribution and the input pipeline's wait (the finished run's Summary is output's)."""
