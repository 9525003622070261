"""The agent's views: ``View`` for a whole session and ``RunView``, one Run's filter over it.

``session.view`` is the ``View`` both SDKs share (``transport.asyncio._view``).
``run.view`` is a ``RunView``: the same methods, over the same session, but
``messages()`` shows that Run's conversation only. It is what a prompt for the
Run's model is built from.

A Run's conversation is on the branch the Run is on. That is the active branch
unless a prompt forked above the Run, or a rollback left it on a branch of its
own. It holds everything before the Run's prompt, then the Run's own turn: its
prompt, its responses and the queued messages it took in. It leaves out what
Runs streaming alongside added after its prompt. It puts the Run's unanswered
input last, so a prompt built from it never ends on an assistant message.

docs/explanation/runs.md explains queued messages and branches.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from transport._mirror import SessionMirror
from transport._tree import ConversationTree, RunInfo, ViewMessage
from transport.asyncio._view import EventStream, View

__all__ = ["RunView", "View"]


class RunView:
    """One Run's view of its session: ``View``'s methods, ``messages()`` filtered to the Run.

    Queued messages are in it only once taken in, or about to be at the next
    model call: steering in ``all`` mode and injects, once they passed the
    checks. A queued message of an earlier Run is in it only if that Run took
    it in. A step being retried after an adoption is left out until it is
    published again.
    """

    def __init__(
        self,
        view: View,
        run_id: str,
        *,
        tail: Callable[[], list[str]],
        visible: Callable[[], set[str]],
        retry: Callable[[], str | None],
    ) -> None:
        self._view = view
        self.run_id = run_id
        self.session_id = view.session_id
        self._tail = tail
        self._visible = visible
        self._retry = retry

    def messages(self) -> list[ViewMessage]:
        """The Run's conversation, oldest first (see the class docstring)."""
        run_id = self.run_id
        tree = self._view.tree
        branch = tree.messages(tail=self._tail(), run_id=run_id)
        start = next(
            (i for i, vm in enumerate(branch) if vm.run_id == run_id and vm.intent == "prompt"),
            len(branch),
        )
        visible = self._visible()
        retry = self._retry()

        def keep(vm: ViewMessage) -> bool:
            if vm.intent in (None, "prompt"):  # prompts and responses
                return vm.message.id != retry
            if vm.run_id == run_id:
                return vm.message.id in visible
            return tree.outcomes.consumed(vm.message.id)

        before = [vm for vm in branch[:start] if keep(vm)]
        own = [vm for vm in branch[start:] if vm.run_id == run_id and keep(vm)]
        return before + own

    # The rest is the session's view as it is.

    @property
    def readable(self) -> bool:
        """True: an agent's view is always fed."""
        return self._view.readable

    @property
    def mirror(self) -> SessionMirror:
        """The state the session's view reads."""
        return self._view.mirror

    @property
    def tree(self) -> ConversationTree:
        """The session's conversation tree (read it; do not fold into it)."""
        return self._view.tree

    @property
    def newest_serial(self) -> int | None:
        """The newest serial the session's view holds."""
        return self._view.newest_serial

    @property
    def oldest_serial(self) -> int | None:
        """The oldest serial the session's view holds."""
        return self._view.oldest_serial

    def runs(self) -> list[RunInfo]:
        """Every Run the session's view knows, with its status."""
        return self._view.runs()

    def run(self, run_id: str) -> RunInfo | None:
        """One Run of the session, or None if the view has not seen it."""
        return self._view.run(run_id)

    def waiting(self) -> list[ViewMessage]:
        """Prompts of the session's queued Runs, oldest first."""
        return self._view.waiting()

    def has_older(self) -> bool:
        """True while the session has entries older than the view holds."""
        return self._view.has_older()

    async def load_older(self, limit: int = 50) -> int:
        """Fetch and merge the session's page before the oldest entry held; its size."""
        return await self._view.load_older(limit)

    def branches(self, message_id: str) -> list[str]:
        """Ids of a message's alternatives (its siblings, itself included), oldest first."""
        return self._view.branches(message_id)

    def select_branch(self, message_id: str) -> None:
        """Show the session's branch through ``message_id`` (``View.select_branch``)."""
        self._view.select_branch(message_id)

    def on(self, event: str, callback: Callable[[Any], object]) -> Callable[[], None]:
        """Call ``callback(event)`` for each event of the session's view; returns a remover."""
        return self._view.on(event, callback)

    def events(self) -> EventStream:
        """An async iterator of every event of the session's view from now on."""
        return self._view.events()

    def __repr__(self) -> str:
        return f"<RunView {self.session_id!r} run={self.run_id!r}>"
