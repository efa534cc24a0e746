"""Benchmarks of trio_lease against kubernetes_asyncio's leader election and, for the
shared watch, the official ``kubernetes`` client's elector too.

Run ``python -m tools.benchmarks --smoke`` (seconds) or ``python -m tools.benchmarks --full``
(about 47 minutes); see ``tools/benchmarks/README.md`` for what each program measures and the
recorded results.
"""
