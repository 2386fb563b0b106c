"""Per-device latency, throughput, memory and size benchmarks — see the project's issue #7."""
