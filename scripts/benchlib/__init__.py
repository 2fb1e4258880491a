"""The benchmark behind ``scripts/bench``: a deterministic agent workload, one module per peer, and
the measurements that compare them (see ``scripts/bench.py``)."""
