"""A long conversation must not burden the garbage collector.

The tree keeps every entry it folded (to rebuild when an older page arrives),
but encoded: the objects the collector tracks grow with messages and Runs, not
with tokens, so its full passes (which pause the whole process) stay short.
"""

from __future__ import annotations

import gc
from typing import Any

from transport._tree import ConversationTree


def _entries(run: int, first_serial: int, tokens: int) -> list[dict[str, Any]]:
    rid, mid = f"r{run}", f"m{run}"
    out: list[dict[str, Any]] = [
        {
            "kind": "message",
            "id": f"u{run}",
            "run_id": rid,
            "intent": "prompt",
            "message": {"id": f"u{run}", "role": "user", "parts": [{"type": "text", "text": "hi"}]},
        },
        {"kind": "run", "id": f"s{run}", "run_id": rid, "status": "active"},
        {"kind": "response_open", "id": f"o{run}", "run_id": rid, "message_id": mid},
    ]
    for i in range(tokens):
        chunk = {"type": "text-delta", "id": "t", "delta": f"w{i} "}
        out.append(
            {
                "kind": "response_append",
                "id": f"a{run}.{i}",
                "run_id": rid,
                "message_id": mid,
                "chunks": [chunk],
            }
        )
    return [{**e, "serial": first_serial + n} for n, e in enumerate(out)]


def _tracked_after(tokens: int) -> tuple[int, ConversationTree]:
    gc.collect()
    before = len(gc.get_objects())
    tree = ConversationTree()
    for entry in _entries(1, 1, tokens):
        tree.fold(entry)
    gc.collect()
    return len(gc.get_objects()) - before, tree


def test_tracked_objects_do_not_grow_with_tokens() -> None:
    few, tree_few = _tracked_after(100)
    many, tree_many = _tracked_after(3000)
    assert tree_many.messages()[-1].message.parts[0].text.count("w") == 3000  # type: ignore[union-attr]
    # 2,900 more tokens: a pydantic model (and its chunk list and dict) kept per token
    # would add ~9,000 tracked objects; encoded entries add none.
    assert many - few < 300, (few, many)
    assert tree_few.messages()


def test_an_older_page_rebuilds_from_the_encoded_entries() -> None:
    tree = ConversationTree()
    entries = _entries(1, 1, 50) + _entries(2, 54, 20)
    tree.fold_older(entries[40:])  # the newest page first
    tree.fold_older(entries[:40])  # then the older one: a rebuild
    texts = [vm.message.text() for vm in tree.messages()]
    assert texts == [
        "hi",
        "".join(f"w{i} " for i in range(50)),
        "hi",
        "".join(f"w{i} " for i in range(20)),
    ]
