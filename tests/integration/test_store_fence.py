"""docs/store-fence.md, the store's fence after migration, is what the migrations produce
(`fgentic-dev fence --check`, like `fgentic-governance crds --check`)."""

from __future__ import annotations

from pathlib import Path

import asyncpg
import pytest

from fgentic_devenv import cli, fence
from fgentic_governance.memory import migrate

pytestmark = pytest.mark.integration

COMMITTED = Path(__file__).resolve().parents[2] / fence.DEFAULT_OUTPUT


@pytest.fixture
async def page(pg_dsn: str) -> str:
    """The page rendered from a fresh database of the session's server, migrated to head."""
    conn = await asyncpg.connect(pg_dsn)
    try:
        await migrate(conn)
        return await fence.render(conn)
    finally:
        await conn.close()


def test_committed_page_is_what_the_migrations_produce(page: str) -> None:
    problem = fence.drift(COMMITTED, page)
    assert problem is None, f"{problem}: run `fgentic-dev fence` and commit the result"


def test_check_fails_when_the_page_is_edited(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    copy = tmp_path / "store-fence.md"
    copy.write_text(COMMITTED.read_text(encoding="utf-8"), encoding="utf-8")
    # The command itself: its own server, database and migration give the committed page.
    assert cli.main(["fence", "--check", "--output", str(copy)]) == 0
    lines = copy.read_text(encoding="utf-8").splitlines(keepends=True)
    edited = next(i for i, line in enumerate(lines) if "SECURITY DEFINER" in line)
    lines[edited] = lines[edited].replace("SECURITY DEFINER", "SECURITY INVOKER")
    copy.write_text("".join(lines), encoding="utf-8")
    capsys.readouterr()
    assert cli.main(["fence", "--check", "--output", str(copy)]) == 1
    err = capsys.readouterr().err.splitlines()
    assert err[0].startswith(f"drift: {copy}: differs from the migrations"), err
    assert "SECURITY INVOKER" in err[0], err
    copy.unlink()
    assert fence.run(copy, check=True, page="anything\n") == 1
    assert capsys.readouterr().err.startswith(f"drift: {copy}: missing")


def test_page_shows_the_fence(page: str) -> None:
    # The delegate role of sql/0010, a member of the runtime role, alone may delegate.
    assert "| `fgentic_memory_delegate` | no | yes | no |" in page
    assert ("- `fgentic_memory_delegate` is a member of `fgentic_memory_runtime`"
            in page)
    functions = page.split("## 8. Functions", 1)[1]
    assert ("| [`enter_delegation(p_subject text, p_agent_namespace text, p_agent_name text, "
            "p_mode text)`]") in functions
    assert "| fgentic_memory.delegation_context | DEFINER | VOLATILE | " \
           "`fgentic_memory_delegate` |" in functions
    # enter_scope (sql/0007): SECURITY DEFINER, search_path pinned, PUBLIC's EXECUTE revoked.
    enter_scope = functions.split("### enter_scope(", 1)[1].split("\n### ", 1)[0]
    assert enter_scope.startswith("p_scope_key text, p_generation bigint")
    assert "SECURITY DEFINER, VOLATILE" in enter_scope
    assert "`SET search_path=pg_catalog, pg_temp`" in enter_scope
    assert "- `fgentic_memory_runtime`: EXECUTE" in enter_scope
    assert "Revoked from `PUBLIC` (granted by default): EXECUTE." in enter_scope
    assert "CREATE OR REPLACE FUNCTION fgentic_memory.enter_scope(" in enter_scope
    # Content is readable only through the fenced view: no SELECT on memory.content.
    runtime = page.split("`fgentic_memory_runtime`:\n\n", 1)[1].split("\n\n", 1)[0]
    memory = next(line for line in runtime.splitlines()
                  if line.startswith("- table `fgentic_memory.memory`"))
    assert "SELECT (" in memory and "content" not in memory
    assert "- view `fgentic_memory.readable_memory`: SELECT" in runtime
    assert "Revoked from `PUBLIC` (granted by default): TEMPORARY." in page
    # sql/0020's exemption names the owner, written <owner> like every other mention of it.
    assert ("WHEN (CURRENT_USER IS DISTINCT FROM '<owner>'::name OR current_setting("
            "'fgentic_memory.gate'::text, true) IS DISTINCT FROM 'on'::text)") in page
    # Nothing environment-specific.
    for word in ("postgres", "127.0.0.1", "fgentic_fence", "/tmp", "pgdata"):
        assert word not in page, word
