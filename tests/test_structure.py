"""The library's shape, checked: module size, import cycles, private access, exports and prose.

Each rule that some modules break today names them in an allowlist below. The lists shrink to
empty as issue 27 lands: a test fails when an entry no longer offends, so an entry can only be
removed, and a new offender fails its rule at once.
"""

from __future__ import annotations

import ast
import importlib
import json
import re
import subprocess
import sys
import tomllib

import pytest

from tests.source_tree import (
    ROOT,
    docstrings,
    import_cycles,
    library_modules,
    markdown_prose,
    nested_parentheses,
    sentences,
    words,
)

MAX_MODULE_LINES = 600
MAX_CLASS_LINES = 400
MAX_MODULE_DOCSTRING_LINES = 30
MAX_SENTENCE_WORDS = 40

# Private jargon, with the glossary's word to use instead (docs/explanation/glossary.md).
AVOIDED_WORDS = {
    "going on": "running",
    "owed": "still to answer, or still to make",
    "owes": "has still to answer",
    "handed on": "passed to",
}

# ---------------------------------------------------------------- allowlists --

# Modules over MAX_MODULE_LINES lines. Shrinks to empty as issue 27 lands.
LONG_MODULES: set[str] = set()

# Classes over MAX_CLASS_LINES lines, as "module:Class". Shrinks to empty as issue 27 lands.
LONG_CLASSES: set[str] = set()

# Groups of modules that import each other, counting imports in functions and under
# TYPE_CHECKING. Shrinks to empty as issue 27 lands.
IMPORT_CYCLES: list[list[str]] = []

# Modules whose docstring runs over MAX_MODULE_DOCSTRING_LINES lines. Shrinks to empty as
# issue 27 lands.
LONG_MODULE_DOCSTRINGS: set[str] = set()

# Modules with a module, class or function docstring sentence over MAX_SENTENCE_WORDS words.
# Shrinks to empty as issue 27 lands.
LONG_SENTENCES: set[str] = set()

# Library files where ruff's SLF001 (another object's private member) is ignored, as
# pyproject.toml's per-file-ignores say. Shrinks to empty as issue 27 lands.
SLF001_IGNORED: set[str] = set()

# Library modules whose docstrings still use an avoided word. Shrinks to empty as issue 27 lands.
JARGON_IN_DOCSTRINGS: set[str] = set()

# Docs pages that still use an avoided word: the generated JavaScript reference follows the
# TypeScript sources' comments. Shrinks to empty as issue 27 lands.
JARGON_IN_DOCS: set[str] = set()

# Docs pages with a sentence over MAX_SENTENCE_WORDS words, outside code blocks and tables.
# The generated JavaScript reference follows the TypeScript sources' comments.
# Shrinks to empty as issue 27 lands.
LONG_DOCS_SENTENCES: set[str] = set()

# Library modules whose docstrings nest parentheses. Shrinks to empty as issue 27 lands.
NESTED_PARENTHESES: set[str] = set()

# Docs pages that nest parentheses. Shrinks to empty as issue 27 lands.
NESTED_PARENTHESES_IN_DOCS: set[str] = set()

# Each package's public names, curated: a name joins or leaves its package on purpose.
EXPORTS: dict[str, set[str]] = {
    "transport": {
        "ABORTED_BEFORE_DISPATCH",
        "AbortController",
        "AbortSignal",
        "CloseCode",
        "ConversationTree",
        "CredentialsError",
        "DeliveryEvent",
        "FinalError",
        "Interrupt",
        "MessageEvent",
        "OUTCOME_UNKNOWN",
        "OutcomeRecord",
        "PROTOCOL_VERSION",
        "ParsedAnswer",
        "Part",
        "PausedRun",
        "ReasoningPart",
        "Refusal",
        "RequestError",
        "RetryableError",
        "RunEndReason",
        "RunEvent",
        "RunInfo",
        "RunStatus",
        "RunwireError",
        "TextPart",
        "ToolCallPart",
        "ToolResultPart",
        "UIMessage",
        "ViewMessage",
        "answer_format",
        "checks",
        "history_message",
        "message_text",
        "new_id",
        "parse_answer",
        "repair_unanswered_tool_calls",
        "user_message",
    },
    "relay": {
        "RelayOptions",
        "Server",
        "serve",
    },
    "relay.store": {
        "Appended",
        "ChannelInfo",
        "Gone",
        "MemoryStore",
        "SQLiteStore",
        "Store",
        "StoredEntry",
        "open_store",
    },
    "client_side": {
        "ClientRun",
        "ClientSession",
        "Delivery",
        "EVENT_KINDS",
        "Event",
        "EventStream",
        "MULTITASK_STRATEGIES",
        "Multitask",
        "Outcome",
        "PendingResult",
        "Published",
        "QUEUED_INTENTS",
        "Refused",
        "RunResult",
        "View",
        "connect",
        "pending_questions",
    },
    "agent_side": {
        "ABORTED_BEFORE_DISPATCH",
        "AGENT_ERROR",
        "APPROVAL_SCHEMA",
        "AbortController",
        "AbortSignal",
        "Agent",
        "AgentSession",
        "Approval",
        "CancelHook",
        "CancelRequest",
        "INTERRUPTED",
        "ITERATION_LIMIT_REACHED",
        "Invocation",
        "Model",
        "OUTCOME_UNKNOWN",
        "PipeResult",
        "QueueOptions",
        "Run",
        "RunHandler",
        "RunOptions",
        "RunPaused",
        "RunView",
        "SteerHook",
        "TOOL_ERROR",
        "TOOL_NOT_FOUND",
        "TOOL_TIMEOUT",
        "Tool",
        "ToolContext",
        "ToolResult",
        "View",
        "connect",
        "history_message",
        "pending_questions",
        "repair_unanswered_tool_calls",
        "steering_loop",
        "tool",
        "tool_calls",
    },
    "agent_side.models": {
        "ProviderStreamError",
        "RawStream",
        "open_raw",
        "sse_data",
    },
}

# Packages that export nothing: their modules are imported by name.
PACKAGES_WITHOUT_EXPORTS = {"runwire", "transport.asyncio"}

# The packages whose implementation modules are private (issue 27): ``runwire`` is the CLI.
SDK_PACKAGES = ("transport", "client_side", "agent_side", "relay")

# Each package's public modules, chosen on purpose. Every other module's name starts with ``_``:
# it is internal, and users import its public names from the package.
PUBLIC_MODULES = {
    # transport
    "transport",  # the package: its __all__ is the shared public API
    "transport.agui",  # the AG-UI event mapping (docs/howto/ag-ui.md)
    "transport.asyncio",  # the I/O driver package both SDKs and the relay share
    "transport.checks",  # the input checks (API.md, docs/howto/guardrails.md)
    "transport.errors",  # error classes and codes (docs/reference/errors.md, examples/)
    "transport.frames",  # the wire protocol's frames (docs/reference/protocol/index.md)
    "transport.logcontext",  # bind() adds log context (docs/howto/observability.md)
    "transport.messages",  # UIMessage parts (examples/, docs/howto/agent-loop-safety.md)
    "transport.redact",  # token redaction in logs (docs/howto/securing-the-relay.md)
    "transport.schema",  # `python -m transport.schema` (docs/reference/protocol/index.md)
    # client_side
    "client_side",  # the package: the client SDK
    # agent_side
    "agent_side",  # the package: the agent SDK
    "agent_side.models",  # model adapters: users import each provider's module
    "agent_side.models.anthropic",  # runwire[anthropic] (examples/anthropic_agent.py)
    "agent_side.models.openai_agents",  # runwire[openai-agents] (docs/howto/openai.md)
    "agent_side.models.openai_chat",  # runwire[openai] (examples/openai_agent.py)
    "agent_side.models.openai_responses",  # runwire[openai] (docs/howto/openai.md)
    "agent_side.models.pydantic_ai",  # runwire[pydantic-ai] (examples/pydantic_ai_agent.py)
    # relay
    "relay",  # the package: relay.serve, Server, RelayOptions
    "relay.__main__",  # `python -m relay`
    "relay.auth",  # relay.auth.mint_token (docs/howto/tokens-and-rights.md)
    "relay.openapi",  # `python -m relay.openapi` (docs/reference/protocol/http.md)
    "relay.store",  # open_store and the Store interface a custom store implements
}


# ------------------------------------------------------------------- finders --


def library_files() -> list[str]:
    return [m.rel for m in library_modules()]


def docs_pages() -> list[str]:
    pages = sorted(path.relative_to(ROOT).as_posix() for path in (ROOT / "docs").rglob("*.md"))
    return ["README.md", *pages]


def long_modules() -> set[str]:
    return {m.rel for m in library_modules() if m.lines > MAX_MODULE_LINES}


def long_classes() -> set[str]:
    return {
        f"{module.rel}:{node.name}"
        for module in library_modules()
        for node in ast.walk(module.tree)
        if isinstance(node, ast.ClassDef)
        and (node.end_lineno or node.lineno) - node.lineno + 1 > MAX_CLASS_LINES
    }


def long_module_docstrings() -> set[str]:
    return {
        module.rel
        for module in library_modules()
        if len((ast.get_docstring(module.tree) or "").splitlines()) > MAX_MODULE_DOCSTRING_LINES
    }


def long_sentences() -> dict[str, list[str]]:
    """Docstring sentences over MAX_SENTENCE_WORDS words, by module file."""
    found: dict[str, list[str]] = {}
    for module in library_modules():
        for where, text in docstrings(module):
            for sentence in sentences(text):
                if words(sentence) > MAX_SENTENCE_WORDS:
                    found.setdefault(module.rel, []).append(f"{where}: {sentence}")
    return found


def long_docs_sentences() -> dict[str, list[str]]:
    """Docs sentences over MAX_SENTENCE_WORDS words, by page, outside code blocks and tables."""
    found: dict[str, list[str]] = {}
    for page in docs_pages():
        for sentence in sentences(markdown_prose((ROOT / page).read_text())):
            if words(sentence) > MAX_SENTENCE_WORDS:
                found.setdefault(page, []).append(sentence)
    return found


def ruff_private_access(paths: list[str]) -> set[str]:
    """The files among ``paths`` where SLF001 finds something, ignoring every config file."""
    command = [sys.executable, "-m", "ruff", "check", "--isolated", "--select", "SLF001"]
    command += ["--target-version", "py311", "--output-format", "json", "--exit-zero"]
    out = subprocess.run(
        [*command, *paths],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    )
    return {
        (ROOT / finding["filename"]).resolve().relative_to(ROOT).as_posix()
        for finding in json.loads(out.stdout)
    }


def jargon(text: str) -> list[str]:
    return [word for word in AVOIDED_WORDS if re.search(rf"\b{word}\b", text, re.IGNORECASE)]


def jargon_in_docstrings() -> set[str]:
    return {
        module.rel for module in library_modules() for _, text in docstrings(module) if jargon(text)
    }


def jargon_in_docs() -> set[str]:
    return {
        page
        for page in docs_pages()
        if not page.endswith("glossary.md") and jargon((ROOT / page).read_text())
    }


def nested_in_docstrings() -> set[str]:
    return {
        module.rel
        for module in library_modules()
        for _, text in docstrings(module)
        if nested_parentheses(text)
    }


def nested_in_docs() -> set[str]:
    return {
        page
        for page in docs_pages()
        if nested_parentheses(markdown_prose((ROOT / page).read_text()))
    }


def check_allowlist(allowlist: set[str], offenders: set[str]) -> None:
    """New offenders fail; so does an allowlisted file that no longer offends (or is gone)."""
    assert offenders - allowlist == set(), "new offenders"
    assert allowlist - offenders == set(), "no longer offend: remove them from the allowlist"


# --------------------------------------------------------------------- tests --


def test_allowlists_can_only_shrink() -> None:
    check_allowlist({"a.py"}, {"a.py"})
    with pytest.raises(AssertionError, match="new offenders"):
        check_allowlist({"a.py"}, {"a.py", "b.py"})
    with pytest.raises(AssertionError, match="no longer offend"):
        check_allowlist({"a.py", "gone.py"}, {"a.py"})


def test_no_module_is_too_long() -> None:
    check_allowlist(LONG_MODULES, long_modules())


def test_no_class_is_too_long() -> None:
    check_allowlist(LONG_CLASSES, long_classes())


def test_no_import_cycle() -> None:
    assert import_cycles() == IMPORT_CYCLES


def test_module_docstrings_are_short() -> None:
    check_allowlist(LONG_MODULE_DOCSTRINGS, long_module_docstrings())


def test_docstring_sentences_are_short() -> None:
    found = long_sentences()
    new = {rel: found[rel] for rel in set(found) - LONG_SENTENCES}
    assert new == {}, "sentences over 40 words: split them"
    check_allowlist(LONG_SENTENCES, set(found))


def test_docs_sentences_are_short() -> None:
    found = long_docs_sentences()
    new = {page: found[page] for page in set(found) - LONG_DOCS_SENTENCES}
    assert new == {}, "sentences over 40 words: split them"
    check_allowlist(LONG_DOCS_SENTENCES, set(found))


def test_no_nested_parentheses() -> None:
    check_allowlist(NESTED_PARENTHESES, nested_in_docstrings())
    check_allowlist(NESTED_PARENTHESES_IN_DOCS, nested_in_docs())
    assert nested_parentheses("a (b (c) d) e ``(x (y))`` [l](u) (k)") == 1
    assert nested_parentheses("(a\n\n(b)") == 0  # a paragraph ends what it opened
    assert nested_parentheses("text:\n\n    f(g(x))\n") == 0  # code examples do not count


def test_sentence_reader() -> None:
    text = (
        "First sentence, e.g. with an abbreviation. Second one: ``a. B`` stays whole!\n"
        "\n"
        "Theory\n"
        "------\n"
        "Third\n"
        "one. **Bold.** (Aside.) Last\n"
        "- a list item\n"
        ":param x: a field"
    )
    assert list(sentences(text)) == [
        "First sentence, e.g. with an abbreviation.",
        "Second one: LITERAL stays whole!",
        "Theory",
        "Third one.",
        "**Bold.**",
        "(Aside.)",
        "Last",
        "- a list item",
        ":param x: a field",
    ]
    assert words("one two  three") == 3
    page = "# Title\n\nProse.\n\n```python\nx = 1. Y\n```\n| a | b |\nMore."
    assert list(sentences(markdown_prose(page))) == ["Prose.", "More."]


def test_private_access_is_ignored_only_for_todays_offenders() -> None:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    lint = config["tool"]["ruff"]["lint"]
    assert "SLF001" in lint["select"]
    ignored = {path for path, rules in lint["per-file-ignores"].items() if "SLF001" in rules}
    assert ignored - {"tests/**", "bench/**"} == SLF001_IGNORED
    check_allowlist(SLF001_IGNORED, ruff_private_access(library_files()))


def test_docstrings_use_the_glossary_words() -> None:
    check_allowlist(JARGON_IN_DOCSTRINGS, jargon_in_docstrings())


def test_docs_use_the_glossary_words() -> None:
    check_allowlist(JARGON_IN_DOCS, jargon_in_docs())


@pytest.mark.parametrize("package", sorted(EXPORTS))
def test_exports(package: str) -> None:
    module = importlib.import_module(package)
    exported = set(module.__all__)
    assert exported == EXPORTS[package]
    for name in exported:
        assert hasattr(module, name), f"{package}.{name} is in __all__ but missing"


def test_every_package_curates_its_exports() -> None:
    packages = {m.name for m in library_modules() if m.is_package}
    with_all = {
        m.name
        for m in library_modules()
        if m.is_package
        and any(
            isinstance(node, ast.Assign)
            and any(isinstance(t, ast.Name) and t.id == "__all__" for t in node.targets)
            for node in m.tree.body
        )
    }
    assert with_all == set(EXPORTS)
    assert packages - with_all == PACKAGES_WITHOUT_EXPORTS


def test_every_module_has_a_docstring() -> None:
    missing = [m.rel for m in library_modules() if not ast.get_docstring(m.tree)]
    assert missing == [], "say in a short docstring what each module is for"


def test_module_exports_exist_and_are_public() -> None:
    """Every library module's ``__all__`` names things it defines, none of them private."""
    for module in library_modules():
        if module.name.endswith("__main__"):
            continue
        loaded = importlib.import_module(module.name)
        for name in getattr(loaded, "__all__", ()):
            assert not name.startswith("_"), f"{module.name} exports private {name}"
            assert hasattr(loaded, name), f"{module.name}.{name} is in __all__ but missing"


def test_implementation_modules_are_private() -> None:
    """A module is private (``_name.py``) unless PUBLIC_MODULES lists it, with its reason."""
    modules = {m.name for m in library_modules() if m.name.split(".")[0] in SDK_PACKAGES}
    public = {name for name in modules if not name.rpartition(".")[2].startswith("_")}
    public |= {name for name in modules if name.endswith(".__main__")}
    assert public - PUBLIC_MODULES == set(), "name it _module.py, or add it to PUBLIC_MODULES"
    assert PUBLIC_MODULES - modules == set(), "PUBLIC_MODULES names a module that is gone"


def test_user_code_imports_only_public_modules() -> None:
    """Examples, the README, the tutorial and the how-to pages import public modules only."""
    pages = [ROOT / "README.md", *(ROOT / "examples").rglob("*.py")]
    pages += [*(ROOT / "docs" / "tutorial").rglob("*.md"), *(ROOT / "docs" / "howto").rglob("*.md")]
    packages = "|".join(SDK_PACKAGES)
    pattern = re.compile(rf"^\s*(?:from|import)\s+((?:{packages})[\w.]*)", re.M)
    private = {
        f"{path.relative_to(ROOT).as_posix()}: {name}"
        for path in pages
        for name in pattern.findall(path.read_text())
        if name not in PUBLIC_MODULES
    }
    assert private == set()


def offenders() -> dict[str, object]:
    """Every rule's offenders as the code stands, to refresh the allowlists above."""
    return {
        "LONG_MODULES": sorted(long_modules()),
        "LONG_CLASSES": sorted(long_classes()),
        "IMPORT_CYCLES": import_cycles(),
        "LONG_MODULE_DOCSTRINGS": sorted(long_module_docstrings()),
        "LONG_SENTENCES": sorted(long_sentences()),
        "SLF001_IGNORED": sorted(ruff_private_access(library_files())),
        "JARGON_IN_DOCSTRINGS": sorted(jargon_in_docstrings()),
        "JARGON_IN_DOCS": sorted(jargon_in_docs()),
        "LONG_DOCS_SENTENCES": sorted(long_docs_sentences()),
        "NESTED_PARENTHESES": sorted(nested_in_docstrings()),
        "NESTED_PARENTHESES_IN_DOCS": sorted(nested_in_docs()),
    }


if __name__ == "__main__":
    # python -m tests.test_structure: print what each allowlist should hold today.
    for name, found in offenders().items():
        print(f"{name} = {json.dumps(found, indent=4)}")
