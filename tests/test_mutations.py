"""Each docs/design.md §4 guarantee, broken on purpose, makes its named test fail.

Every mutation below edits one spot of a temporary copy of the package (the edit must apply
exactly once) and runs the guarantee's test there; the test must fail. This keeps the guarantee
tests honest: a test that still passes with its guarantee broken would be caught here.
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
GUARANTEES = "tests/core/test_guarantees.py"
API = "tests/core/test_lease_api.py"
TRUST = "tests/core/test_trust.py"
PARTITIONED = "tests/core/test_partitioned.py"


@dataclasses.dataclass(frozen=True)
class Mutation:
    guarantee: str
    file: str
    old: str
    new: str
    test: str
    also: tuple[tuple[str, str], ...] = ()  # further (old, new) edits in the same file

    @property
    def id(self) -> str:
        return self.test.rpartition("::")[2]


MUTATIONS = [
    Mutation(
        "4.1 contenders count L on their own clock",
        "trio_lease/_algorithm.py",
        "wait = max(settings.heartbeat_timeout, record.lease_duration)",
        "wait = max(settings.heartbeat_timeout, record.lease_duration) / 2",
        f"{GUARANTEES}::test_g1_contender_waits_full_timeout_on_its_own_clock",
    ),
    Mutation(
        "4.1 wall-clock timestamps are never trusted",
        "trio_lease/_algorithm.py",
        "    if record.is_free:\n        return 0.0\n",
        "    if record.is_free or (record.renewed_at is not None and "
        "(datetime.now(record.renewed_at.tzinfo) - record.renewed_at).total_seconds() > 60):\n"
        "        return 0.0\n",
        f"{GUARANTEES}::test_g1_wall_clock_timestamps_are_never_trusted",
    ),
    Mutation(
        "4.1 the record's own duration if larger",
        "trio_lease/_algorithm.py",
        "wait = max(settings.heartbeat_timeout, record.lease_duration)",
        "wait = settings.heartbeat_timeout",
        f"{GUARANTEES}::test_g1_contender_honours_a_longer_record_duration",
    ),
    Mutation(
        "4.1 the countdown restarts on every new version",
        "trio_lease/_algorithm.py",
        "if previous is not None and previous.version == record.version:",
        "if previous is not None:",
        f"{GUARANTEES}::test_g1_each_renewal_restarts_the_contenders_countdown",
        also=(
            (
                "if observation is None or observation.version != record.version:",
                "if observation is None:",
            ),
        ),
    ),
    Mutation(
        "4.2 the deadline is anchored at send time",
        "trio_lease/_writing.py",
        "            send_time=send,\n",
        "            send_time=self._state.clock(),\n",
        f"{GUARANTEES}::test_g2_deadline_is_anchored_at_send_time_not_reply",
    ),
    Mutation(
        "4.2 the holder stops before L",
        "trio_lease/_algorithm.py",
        "return send_time + settings.deadline",
        "return send_time + settings.heartbeat_timeout + 2 * settings.stop_timeout",
        f"{GUARANTEES}::test_g2_holder_cancels_body_before_any_contender_takes_over",
    ),
    Mutation(
        "4.2 every request is bounded by min(T, time left)",
        "trio_lease/_algorithm.py",
        "return min(settings.lease_operation_timeout, deadline - now)",
        "return 1000 * settings.heartbeat_timeout",
        f"{GUARANTEES}::test_g2_every_request_is_bounded_by_operation_timeout",
    ),
    Mutation(
        "4.2 an unknown outcome counts as not renewed",
        "trio_lease/_heartbeat.py",
        "        self._needs_read = True\n        self._last_error = \"timed out\"",
        "        self.deadline = self._clock() + self._settings.deadline\n"
        "        self._needs_read = True\n        self._last_error = \"timed out\"",
        f"{GUARANTEES}::test_g2_unknown_outcome_counts_as_not_renewed",
    ),
    Mutation(
        "4.3 every new grant bumps the fencing token",
        "trio_lease/_algorithm.py",
        "fencing_token=previous_token + 1,",
        "fencing_token=max(previous_token, 1),",
        f"{GUARANTEES}::test_g3_fencing_token_increases_on_every_new_grant",
    ),
    Mutation(
        "4.4 release only if a fresh read still shows us",
        "trio_lease/_writing.py",
        "                    if not algo.still_ours(current, holding.identity, holding.token):\n"
        "                        return False",
        "                    if current is None:\n                        return False",
        f"{GUARANTEES}::test_g4_release_never_clobbers_a_new_holder",
    ),
    Mutation(
        "4.4 a released lease is acquirable at once",
        "trio_lease/_writing.py",
        "            written = await self._release(holding, raise_unknown=raise_unknown)",
        "            written = False",
        f"{GUARANTEES}::test_g4_released_lease_is_acquirable_at_once",
    ),
    Mutation(
        "4.4 release is shielded",
        "trio_lease/_writing.py",
        "            anyio.CancelScope(shield=True),  # noqa: ASYNC912  a shield for cleanup\n"
        "            anyio.move_on_after(self._state.settings.lease_operation_timeout) as scope,",
        "            anyio.CancelScope(),\n"
        "            anyio.move_on_after(self._state.settings.lease_operation_timeout) as scope,",
        f"{GUARANTEES}::test_g4_release_is_shielded_and_bounded",
    ),
    Mutation(
        "4.5 a bare LeaseLost, never an ExceptionGroup",
        "trio_lease/_held.py",
        "                if holding.lost_cause is not None:\n                    body.cancel()",
        "                if holding.lost_cause is not None:\n                    body.cancel()\n"
        "                    raise LeaseLost(self._state.name, holding.lost_cause)",
        f"{GUARANTEES}::test_g5_loss_cancels_body_and_raises_bare_lease_lost",
        also=(("        with outcome.settled():\n", "        with anyio.CancelScope():\n"),),
    ),
    Mutation(
        "4.5 no exception is lost: the body's error wins over the caller's cancellation",
        "trio_lease/_outcome.py",
        "        if body is not None:\n",
        "        if body is not None and library is None:\n",
        "tests/core/test_no_error_lost.py::test_no_error_is_lost[asyncio-held-deadline]",
    ),
    Mutation(
        "4.5 the body's scope carries the grant's deadline (event-loop stalls)",
        "trio_lease/_loops/_scopes.py",
        "            self.add(scope, deadline)",
        "            pass",
        "tests/core/test_stall.py"
        "::test_trio_body_starts_no_side_effect_after_a_stall_past_the_deadline",
    ),
    Mutation(
        "4.5 renewals push the body's deadline forward",
        "trio_lease/_loops/_scopes.py",
        "            scope.deadline = deadline",
        "            pass",
        f"{GUARANTEES}::test_g5_body_deadline_follows_renewals",
    ),
    Mutation(
        "4.5 on asyncio the grant's alarm re-reads the deadline renewals moved",
        "trio_lease/_bodies.py",
        "        if now < deadline:\n            return deadline\n",
        "",
        f"{GUARANTEES}::test_g5_body_deadline_follows_renewals",
    ),
    Mutation(
        "4.5 on asyncio the grant's alarm cancels the bodies at the deadline",
        "trio_lease/_bodies.py",
        "            scope.cancel()",
        "            pass",
        "tests/core/test_bodies.py::test_a_body_is_cancelled_at_the_deadline",
    ),
    Mutation(
        "4.5 renewals continue while the body cleans up",
        "trio_lease/_held.py",
        "heartbeat_scope = anyio.CancelScope(shield=True)",
        "heartbeat_scope = anyio.CancelScope()",
        f"{GUARANTEES}::test_g5_renewals_continue_while_body_cleans_up",
    ),
    Mutation(
        "4.6 reentrant per owner",
        "trio_lease/_writing.py",
        "            if holding is not None:  # reentrant: share the live grant",
        "            if False:  # reentrancy removed",
        f"{GUARANTEES}::test_g6_same_owner_reenters_and_shares_the_grant",
    ),
    Mutation(
        "4.7 identity includes a per-process incarnation",
        "trio_lease/_lease.py",
        'identity = f"{owner}_{incarnation()}"',
        "identity = owner",
        f"{GUARANTEES}::test_g7_identity_is_owner_plus_incarnation",
    ),
    Mutation(
        "5.1 a cancelled acquire releases what landed",
        "trio_lease/_writing.py",
        "release=cancelled)",
        "release=False)",
        f"{API}::test_cancelled_acquire_releases_a_write_that_landed",
    ),
    Mutation(
        "replies: an unreadable record is never free",
        "trio_lease/_abc.py",
        'return self.holder == "" and not self.unreadable',
        'return self.holder == ""',
        f"{TRUST}::test_unreadable_record_is_busy_never_free",
    ),
    Mutation(
        "replies: a write counts only when its echo shows it",
        "trio_lease/_algorithm.py",
        "    if differences:\n",
        "    if False:\n",
        f"{TRUST}::test_lying_echo_of_a_write_that_did_not_land_yields_no_grant",
    ),
    Mutation(
        "replies: conflict retries are paced and bounded",
        "trio_lease/_writing.py",
        "                )\n            await _after_conflicts(conflicts)\n",
        "                )\n",
        f"{TRUST}::test_conflict_storm_is_paced_and_bounded_in_try_held",
    ),
    Mutation(
        "7a a semaphore waiter whose reservation is gone asks again",
        "trio_lease/_semaphore.py",
        "                if not self._still_reserved(reserved, busy):",
        "                if reserved is None or reserved not in busy:",
        "tests/core/test_semaphore.py::"
        "test_a_waiter_paused_past_l_among_looping_holders_is_granted_soon",
    ),
    Mutation(
        "7a the features' records live in a namespace no user name reaches",
        "trio_lease/_checks.py",
        "    if SEPARATOR in value and not isinstance(value, RecordName):",
        "    if False:",
        "tests/core/test_namespace.py::test_a_name_with_the_separator_is_refused_saying_why",
    ),
    Mutation(
        "7a a dead member's group slot is taken back",
        "trio_lease/_group.py",
        "            retry_at = await self._reclaim(clock)",
        "            retry_at = math.inf",
        "tests/core/test_group.py::"
        "test_a_dead_members_slot_is_taken_back_and_reused[asyncio-memory]",
    ),
    Mutation(
        "7a a view lists a member only once it was seen renewing",
        "trio_lease/_group.py",
        "        if not self._held_by_another(slot, seen) or not seen.confirmed:",
        "        if not self._held_by_another(slot, seen):",
        "tests/core/test_partitioned.py::test_a_crash_replaced_at_once_fails_over_within_l",
        also=(
            (
                "                and self._unconfirmed()\n",
                "                and False\n",
            ),
        ),
    ),
    Mutation(
        "7a a dead member's key records are cleared for a newcomer",
        "trio_lease/_partitioned.py",
        "                await _clear(key, lease)\n",
        "                pass\n",
        f"{PARTITIONED}::test_a_crash_replaced_at_once_fails_over_within_l"
        "[asyncio-replacement-replaced-after-half-l]",
    ),
    Mutation(
        "7a no member asks a holder that stopped renewing for its key",
        "trio_lease/_partitioned.py",
        "        lease.unchanged_for() < 2 * settings.heartbeat_interval",
        "        True or lease.unchanged_for() < 2 * settings.heartbeat_interval",
        f"{PARTITIONED}::test_a_crash_replaced_at_once_fails_over_within_l",
    ),
    Mutation(
        "4.1 a contender's own handover request keeps its count of the holder's expiry",
        "trio_lease/_writing.py",
        "                self._state.observation = algo.Observation(stored.version, seen.since)",
        "                pass",
        "tests/core/test_handover.py::test_asking_a_dead_holder_costs_the_requester_nothing",
    ),
    Mutation(
        "replies: a host lets the body's own exception out bare",
        "trio_lease/_host.py",
        "    with outcome.settled():\n",
        "    with anyio.CancelScope():\n",
        f"{TRUST}::test_lease_host_passes_the_body_exception_unchanged",
    ),
    Mutation(
        "7a a failing key's pause grows",
        "trio_lease/_partitioned.py",
        "backoff_delay(failures, RETRY_FIRST, RETRY_CAP)",
        "backoff_delay(1, RETRY_FIRST, RETRY_CAP)",
        f"{PARTITIONED}::test_a_failing_key_backs_off_on_its_member_while_every_other_key_runs_on",
    ),
    Mutation(
        "7a a failing key's pause is capped",
        "trio_lease/_partitioned.py",
        "backoff_delay(failures, RETRY_FIRST, RETRY_CAP)",
        "backoff_delay(failures, RETRY_FIRST)",
        f"{PARTITIONED}::test_a_failing_key_backs_off_on_its_member_while_every_other_key_runs_on",
    ),
    Mutation(
        "7a one failing key harms no other key",
        "trio_lease/_partitioned.py",
        "                            if errors.stop_on_error:\n",
        "                            if True:\n",
        f"{PARTITIONED}::test_a_failing_key_backs_off_on_its_member_while_every_other_key_runs_on",
    ),
    Mutation(
        "7a with stop_on_error one key error comes out bare",
        "trio_lease/_partitioned.py",
        "        if len(kept) == 1:\n",
        "        if len(kept) == 0:\n",
        f"{PARTITIONED}::test_stop_on_error_ends_the_member_with_the_key_error_bare",
    ),
]


@pytest.fixture(scope="module")
def pristine(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A copy of the package and its tests, mutated per test in a fresh copy."""
    base = tmp_path_factory.mktemp("pristine")
    ignore = shutil.ignore_patterns("__pycache__", ".mypy_cache", ".pytest_cache", ".hypothesis")
    shutil.copytree(ROOT / "trio_lease", base / "trio_lease", ignore=ignore)
    shutil.copytree(ROOT / "tests" / "core", base / "tests" / "core", ignore=ignore)
    # The tests' own package, its fixtures and the helper modules tests/core imports.
    for path in [ROOT / "tests" / "__init__.py", ROOT / "tests" / "conftest.py",
                 *sorted((ROOT / "tests").glob("_*.py"))]:
        shutil.copy(path, base / "tests" / path.name)
    shutil.copy(ROOT / "pyproject.toml", base / "pyproject.toml")
    return base


@pytest.mark.slow
@pytest.mark.parametrize("mutation", MUTATIONS, ids=lambda m: m.id)
def test_breaking_the_guarantee_fails_its_test(
    mutation: Mutation, pristine: Path, tmp_path: Path
) -> None:
    """With the guarantee broken in a copy of the package, its named test fails."""
    tree = tmp_path / "tree"
    shutil.copytree(pristine, tree)
    target = tree / mutation.file
    source = target.read_text()
    for old, new in ((mutation.old, mutation.new), *mutation.also):
        assert source.count(old) == 1, f"the mutation for {mutation.guarantee} is stale"
        source = source.replace(old, new)
    target.write_text(source)
    env = dict(os.environ, PYTHONPATH=str(tree))
    # The copy's run is its own: not measured by the outer run's coverage (CI's), whose
    # report would list the copy's files, nor given the outer run's options.
    for name in ("PYTEST_ADDOPTS", "COVERAGE_PROCESS_CONFIG", "COVERAGE_PROCESS_START"):
        env.pop(name, None)
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider", mutation.test],
        cwd=tree,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert str(tree) in _imported_from(tree, env), "the copy, not the original, was tested"
    assert result.returncode == 1, (
        f"{mutation.guarantee}: {mutation.test} did not fail with the guarantee broken\n"
        f"{result.stdout[-2000:]}"
    )
    assert " failed" in result.stdout.splitlines()[-1]


def _imported_from(tree: Path, env: dict[str, str]) -> str:
    return subprocess.run(
        [sys.executable, "-c", "import trio_lease; print(trio_lease.__file__)"],
        cwd=tree,
        env=env,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
