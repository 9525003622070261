"""``open_store``: choosing a store by URL."""

from __future__ import annotations

from pathlib import Path

import pytest

from relay.store import MemoryStore, SQLiteStore, open_store
from transport.errors import VALIDATION_ERROR, RunwireError


def test_memory_url_gives_a_memory_store() -> None:
    assert isinstance(open_store("memory://"), MemoryStore)


@pytest.mark.parametrize(
    ("url", "path"),
    [
        ("sqlite:///runwire.db", "runwire.db"),
        ("sqlite:///./data/runwire.db", "./data/runwire.db"),
        ("sqlite:////var/lib/runwire.db", "/var/lib/runwire.db"),
        ("SQLite:///x.db", "x.db"),
    ],
)
def test_sqlite_urls_are_read_as_sqlalchemy_writes_them(url: str, path: str) -> None:
    store = open_store(url)
    assert isinstance(store, SQLiteStore)
    assert store.path == path
    assert open_store(store.url).path == path  # type: ignore[attr-defined]


@pytest.mark.anyio
async def test_a_relative_sqlite_url_opens_a_file_in_the_working_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    store = open_store("sqlite:///here.db")
    await store.start()
    await store.aclose()
    assert (tmp_path / "here.db").is_file()


@pytest.mark.parametrize(
    ("url", "says"),
    [
        ("sqlite://", "names no SQLite file"),
        ("sqlite:///", "names no SQLite file"),
        ("sqlite://host/x.db", "names no SQLite file"),
        ("sqlite:///x.db?mode=ro", "takes no options"),
        ("memory://x", "memory://"),
        ("postgres://db/x", "unknown store URL scheme 'postgres'"),
        ("runwire.db", "has no scheme"),
        ("", "has no scheme"),
    ],
)
def test_bad_urls_are_refused_with_a_clear_message(url: str, says: str) -> None:
    with pytest.raises(RunwireError) as caught:
        open_store(url)
    assert caught.value.code == VALIDATION_ERROR
    assert says in caught.value.message
