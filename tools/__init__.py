"""Tools around the library, not part of the installed package: run from the repository root.

- :mod:`tools.campaign`: the fault-injection safety campaign (``python -m tools.campaign``).
- :mod:`tools.benchmarks`: benchmarks against kubernetes_asyncio (``python -m tools.benchmarks``).
"""
