"""Authentication flows: token files re-read, 401 retried once, impersonation, no leaks."""

from __future__ import annotations

import sys
from pathlib import Path

import anyio
import httpx
import pytest

from trio_lease import BackendAuthError
from trio_lease.backends.kubernetes import Credentials, ExecConfig
from trio_lease.backends.kubernetes._auth import KubeAuth
from trio_lease.backends.kubernetes._exec import ExecTokenSource
from trio_lease.backends.kubernetes._tokens import FileTokenSource, StaticTokenSource

pytestmark = pytest.mark.anyio


class Server:
    """A MockTransport handler accepting one token at a time, recording what it saw."""

    def __init__(self, valid: str) -> None:
        self.valid = valid
        self.also_valid: set[str] = set()
        self.seen: list[str | None] = []
        self.headers: list[httpx.Headers] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.headers.append(request.headers)
        auth = request.headers.get("Authorization")
        self.seen.append(auth)
        if auth not in {f"Bearer {t}" for t in {self.valid, *self.also_valid}}:
            return httpx.Response(401, json={"kind": "Status", "code": 401,
                                             "reason": "Unauthorized", "message": "Unauthorized"})
        return httpx.Response(200, json={"ok": True})


def _client(server: Server, auth: httpx.Auth) -> httpx.AsyncClient:
    return httpx.AsyncClient(transport=httpx.MockTransport(server), auth=auth,
                             base_url="https://kube.test")


async def test_token_file_is_reread_after_the_refresh_interval(tmp_path: Path) -> None:
    """A rotated token file is picked up within the refresh interval without any 401."""
    token = tmp_path / "token"
    token.write_text("one\n")
    server = Server("one")
    source = FileTokenSource(token, refresh_interval=60)
    async with _client(server, KubeAuth(source, Credentials())) as client:
        assert (await client.get("/")).status_code == 200
        token.write_text("two")
        server.also_valid.add("two")  # the old token keeps working: no 401 forces a re-read
        await anyio.sleep(30)
        await client.get("/")
        assert server.seen[-1] == "Bearer one"  # cached for up to a minute
        await anyio.sleep(31)
        await client.get("/")
        assert server.seen[-1] == "Bearer two"


async def test_401_rereads_the_token_file_and_retries_once(tmp_path: Path) -> None:
    """After a 401 the token file is re-read at once and the request retried once."""
    token = tmp_path / "token"
    token.write_text("old")
    server = Server("old")
    async with _client(server, KubeAuth(FileTokenSource(token), Credentials())) as client:
        await client.get("/")
        token.write_text("new")
        server.valid = "new"
        response = await client.get("/")
        assert response.status_code == 200
        assert server.seen[-2:] == ["Bearer old", "Bearer new"]
        server.valid = "other"
        response = await client.get("/")
        assert response.status_code == 401  # a second 401 is returned, not retried forever
        assert server.seen[-2:] == ["Bearer new", "Bearer new"]


async def test_unreadable_token_file_keeps_the_old_token(tmp_path: Path) -> None:
    """A token file that is briefly missing or empty does not drop the cached token."""
    token = tmp_path / "token"
    token.write_text("kept")
    source = FileTokenSource(token, refresh_interval=1)
    assert await source.token() == "kept"
    token.write_text("")
    await anyio.sleep(2)
    assert await source.token() == "kept"
    token.unlink()
    assert await source.token(refresh=True) == "kept"


async def test_missing_token_file_is_an_auth_error_without_the_token(tmp_path: Path) -> None:
    """No token at all is a BackendAuthError naming the file."""
    source = FileTokenSource(tmp_path / "absent")
    with pytest.raises(BackendAuthError, match="absent"):
        await source.token()


async def test_impersonation_headers_are_sent() -> None:
    """as / as-groups become Impersonate-User and one Impersonate-Group per group."""
    server = Server("t")
    creds = Credentials(impersonate_user="alice", impersonate_groups=("g1", "g2"))
    async with _client(server, KubeAuth(StaticTokenSource("t"), creds)) as client:
        await client.get("/")
    headers = server.headers[-1]
    assert headers["Impersonate-User"] == "alice"
    assert headers.get_list("Impersonate-Group") == ["g1", "g2"]


async def test_token_is_not_in_reprs() -> None:
    """Token sources and the auth flow never show the token in their repr."""
    auth = KubeAuth(StaticTokenSource("sekret-value"), Credentials(token="sekret-value"))
    assert "sekret-value" not in repr(auth)
    assert "sekret-value" not in repr(auth.source)


# -- headers at hand: a request's path asks without a coroutine --------------------------------


async def _both(auth: KubeAuth) -> tuple[object, object]:
    """(headers_now(), then what headers() gives), in that order."""
    now = auth.headers_now()
    return now, tuple(await auth.headers())


async def test_headers_at_hand_are_what_headers_gives(tmp_path: Path) -> None:
    """headers_now() gives exactly what headers() would, or None where headers() has to read
    the token (first use, a re-read due) or raise: never a token not yet remembered for
    redaction, never a stale one."""
    creds = Credentials(impersonate_user="alice", impersonate_groups=("g1",))
    impersonation = (("Impersonate-User", "alice"), ("Impersonate-Group", "g1"))
    bare = KubeAuth(None, creds)
    assert await _both(bare) == (impersonation, impersonation)

    static = KubeAuth(StaticTokenSource("t1"), creds)
    expected = (*impersonation, ("Authorization", "Bearer t1"))
    assert await _both(static) == (None, expected)  # first use: remembered, then at hand
    assert await _both(static) == (expected, expected)

    bad = KubeAuth(StaticTokenSource("a b"), Credentials())
    assert bad.headers_now() is None
    with pytest.raises(BackendAuthError):
        await bad.headers()
    assert bad.headers_now() is None

    token = tmp_path / "token"
    token.write_text("one")
    from_file = KubeAuth(FileTokenSource(token, refresh_interval=60), Credentials())
    assert await _both(from_file) == (None, (("Authorization", "Bearer one"),))
    token.write_text("two")
    await anyio.sleep(59)
    assert await _both(from_file) == ((("Authorization", "Bearer one"),),) * 2
    await anyio.sleep(1)  # the re-read is due: not at hand
    assert await _both(from_file) == (None, (("Authorization", "Bearer two"),))
    assert from_file.headers_now() == (("Authorization", "Bearer two"),)


@pytest.mark.parametrize("anyio_backend", ["asyncio", "trio"])  # the plugin runs in real time
async def test_an_exec_token_is_at_hand_only_while_valid_and_not_being_fetched(
    tmp_path: Path,
) -> None:
    """An exec plugin's token is at hand while it is valid and no run is in progress (a
    request then waits for the run, as token() does); an expired one never is."""
    script = tmp_path / "plugin.py"
    script.write_text(
        "import json, sys\n"
        "status = {'token': 'exec-token', 'expirationTimestamp': sys.argv[1]}\n"
        "print(json.dumps({'apiVersion': 'client.authentication.k8s.io/v1', "
        "'kind': 'ExecCredential', 'status': status}))\n"
    )
    valid = ExecTokenSource(ExecConfig(command=sys.executable,
                                       args=(str(script), "2099-01-01T00:00:00Z")))
    auth = KubeAuth(valid, Credentials())
    expected = (("Authorization", "Bearer exec-token"),)
    assert await _both(auth) == (None, expected)
    assert auth.headers_now() == expected
    assert valid._lock is not None
    async with valid._lock:  # a run in progress (after a 401, say)
        assert auth.headers_now() is None
    expired = ExecTokenSource(ExecConfig(command=sys.executable,
                                         args=(str(script), "2000-01-01T00:00:00Z")))
    auth = KubeAuth(expired, Credentials())
    assert await _both(auth) == (None, expected)
    assert auth.headers_now() is None  # expired: the plugin runs again first
