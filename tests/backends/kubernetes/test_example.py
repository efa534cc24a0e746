"""examples/kubernetes: the manifest parses and the program leads on the emulator."""

from __future__ import annotations

import importlib.util
from functools import partial
from pathlib import Path
from types import ModuleType

import anyio
import pytest
import yaml

from trio_lease import Grant

from ._helpers import emulator_with_crd, make_backend

EXAMPLE = Path(__file__).parents[3] / "examples" / "kubernetes"


def _program() -> ModuleType:
    spec = importlib.util.spec_from_file_location("k8s_leader", EXAMPLE / "k8s_leader.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_manifest_has_downward_api_pod_name() -> None:
    """The Deployment passes POD_NAME and POD_NAMESPACE through the downward API."""
    docs = list(yaml.safe_load_all((EXAMPLE / "deployment.yaml").read_text()))
    deployment = next(d for d in docs if d["kind"] == "Deployment")
    env = deployment["spec"]["template"]["spec"]["containers"][0]["env"]
    paths = {e["name"]: e["valueFrom"]["fieldRef"]["fieldPath"] for e in env if "valueFrom" in e}
    assert paths == {"POD_NAME": "metadata.name", "POD_NAMESPACE": "metadata.namespace"}


@pytest.mark.anyio
async def test_replicas_take_turns() -> None:
    """Two replicas of the example program lead one after the other, tokens increasing."""
    program = _program()
    emulator = emulator_with_crd()
    transport = emulator.transport()
    settings = program.settings_from_env()
    turns: list[tuple[str, int]] = []

    async def record(grant: Grant, rounds: int | None) -> None:
        turns.append((grant.owner, grant.fencing_token))
        await program.do_work(grant, rounds)

    async with make_backend(transport) as a, make_backend(transport) as b, \
            anyio.create_task_group() as tg:
        for backend, owner in ((a, "pod-a_1"), (b, "pod-b_1")):
            tg.start_soon(partial(program.lead, backend, "example", owner, settings, terms=2,
                                  rounds=2, work=record))
    assert [token for _, token in turns] == [1, 2, 3, 4]
    assert {owner for owner, _ in turns} == {"pod-a_1", "pod-b_1"}
