"""What a trial shows while it trains: GPU monitor, profiler, model views for TensorBoard."""
