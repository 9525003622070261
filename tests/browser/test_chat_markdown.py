"""The chat page renders a model's Markdown safely, and asks questions inline.

A test agent (``answer`` below) streams Markdown with an HTML payload, asks a
question with an enum, asks for a small form, or fails, by the prompt's first
word. The relay, the agent and chromium run here; the tests take the how-to's
screenshots into ``docs/img/``.
"""

from __future__ import annotations

import json
import re
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import anyio
import pytest
from playwright.async_api import Browser, Page, expect

import agent_side
import relay
from runwire.demo import PAGE, page_url
from tests.browser import test_chat_page as base

pytestmark = pytest.mark.anyio

chromium = base.chromium
browser = base.browser

MY_CHAT = base.ROOT / "examples" / "browser" / "my-chat.html"

WIDE_LINE = "x = " + " + ".join(f"item_{i}" for i in range(40))

HEAD = """## Packing list

Bring **comfortable shoes** and a light jacket.

| Day | Place | Cost |
| --- | ----- | ---: |
| 1 | Old town | £40 |
| 2 | The coast | £65 |
"""

TAIL = f"""
```python
def budget(days: int) -> int:
    return 120 * days
{WIDE_LINE}
```

<script>window.pwned = 1</script>

Inline <img src="x" onerror="window.pwned = 2"> and [a link](javascript:window.pwned=3).
"""

REGION = {
    "type": "object",
    "properties": {"region": {"enum": ["eu", "us"], "type": "string"}},
    "required": ["region"],
}
BOOKING = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "title": "Name"},
        "nights": {"type": "integer", "title": "Nights", "minimum": 1},
        "vegan": {"type": "boolean", "title": "Vegan meals"},
        "room": {"enum": ["single", "double"], "title": "Room"},
    },
    "required": ["name", "nights", "room"],
}


async def chunks(text: str) -> AsyncIterator[str]:
    """``text`` in pieces of a few characters, as a model streams it."""
    for i in range(0, len(text), 12):
        yield text[i : i + 12]
        await anyio.sleep(0.01)


async def answer(run: agent_side.Run, gate: anyio.Event | None) -> None:
    """The test agent: what it does depends on the prompt's first word."""
    prompt = run.messages[-1].text() if run.messages else ""
    word = prompt.split(" ", 1)[0].lower()
    if word == "markdown":
        await run.start()

        async def reply() -> AsyncIterator[str]:
            async for piece in chunks(HEAD):
                yield piece
            if gate is not None:
                await gate.wait()  # the test looks at the reply half-way
            async for piece in chunks(TAIL):
                yield piece

        await run.pipe(reply())
        await run.end("complete")
    elif word == "deploy":
        choice = await run.interrupt(message="Where should the api go?", response_schema=REGION)
        await run.pipe(chunks(f"Deploying the api to **{choice['region']}**."))
        await run.end("complete")
    elif word == "approve":
        approval = await run.interrupt(kind="approval", message="Delete the old backups?")
        await run.pipe(chunks(f"approved: {approval['approved']}"))
        await run.end("complete")
    elif word == "book":
        booking: dict[str, Any] = await run.interrupt(
            message="Who is the booking for?", response_schema=BOOKING
        )
        await run.pipe(chunks(f"Booked: `{json.dumps(booking, sort_keys=True)}`"))
        await run.end("complete")
    else:
        await run.pipe(chunks("Working on it…"))
        await run.end("error", error="the model provider timed out")


@asynccontextmanager
async def serve_chat(gate: anyio.Event | None = None) -> AsyncIterator[str]:
    """The chat page's URL on a fresh relay with the test agent behind it."""
    async with relay.serve(
        host="127.0.0.1", port=0, store="memory://", index_html=str(PAGE)
    ) as server:
        agent = agent_side.Agent(server.url, name="default")

        @agent.on_run
        async def handle(run: agent_side.Run) -> None:
            await answer(run, gate)

        async with agent:
            yield page_url(server.port, "docs-demo")  # a fresh relay: a fixed id is new


async def open_chat(browser: Browser, url: str, width: int = 1100, height: int = 760) -> Page:
    page = await browser.new_page(viewport={"width": width, "height": height})
    page.set_default_timeout(base.WAIT)
    await page.goto(url)
    await expect(page.get_by_test_id("conn")).to_have_attribute("data-state", "connected")
    return page


async def test_markdown_renders_as_html_and_the_payload_stays_inert(browser: Browser) -> None:
    gate = anyio.Event()
    with anyio.fail_after(90):
        async with serve_chat(gate) as url:
            page = await open_chat(browser, url)
            await base.say(page, "markdown please")
            reply = page.locator('[data-testid="message"][data-role="assistant"]')
            body = reply.locator(".body")
            await expect(body.locator("h2")).to_have_text("Packing list")
            await expect(body.locator("table tr")).to_have_count(3)
            # Half-way the reply streams on; the paragraph shown stays the same node.
            await page.evaluate(
                "() => { window.firstP = document.querySelector('.msg.assistant .body p'); }"
            )
            await expect(reply).to_have_class(re.compile(r"\bstreaming\b"))
            await base.docs_shot(page, "chat-streaming.png")
            gate.set()
            await expect(base.run_item(page, "complete")).to_have_count(1)

            await expect(body.locator("strong")).to_have_text("comfortable shoes")
            await expect(body.locator("th")).to_have_text(["Day", "Place", "Cost"])
            await expect(body.locator("td").nth(4)).to_have_text("The coast")
            code = body.locator("pre > code")
            await expect(code).to_have_class("language-python hljs")
            await expect(code.locator(".hljs-keyword").first).to_have_text("def")
            assert await page.evaluate(
                "() => document.querySelector('.msg.assistant .body p') === window.firstP"
            ), "the growing reply's first paragraph was replaced, not grown"
            # The payload is text on the page, not markup: nothing ran, no handler exists.
            await expect(body).to_contain_text("<script>window.pwned = 1</script>")
            await expect(body).to_contain_text('<img src="x" onerror="window.pwned = 2">')
            assert await body.locator("script, img, iframe, style").count() == 0
            assert await page.locator("[onerror]").count() == 0
            link = body.locator("a", has_text="a link")
            await expect(link).to_have_count(1)
            assert await link.get_attribute("href") is None
            await link.click()
            assert await page.evaluate("() => window.pwned") is None
            # A code line wider than the bubble scrolls inside the block, not the page.
            assert await page.evaluate("() => document.documentElement.scrollWidth <= innerWidth")
            await base.docs_shot(page, "chat-markdown.png")


async def test_details_show_the_run_id_and_tool_json_only_when_asked(browser: Browser) -> None:
    with anyio.fail_after(60):
        async with serve_chat() as url:
            page = await open_chat(browser, url)
            await base.say(page, "markdown")
            await expect(base.run_item(page, "complete")).to_have_count(1)
            reply = page.locator('[data-testid="message"][data-role="assistant"]')
            run_id = await reply.get_attribute("data-run")
            assert run_id
            details = reply.get_by_test_id("details")
            await expect(details).to_be_hidden()
            assert run_id not in await reply.inner_text()
            assert run_id[:6] not in await page.get_by_test_id("runs").inner_text()
            toggle = reply.get_by_test_id("details-toggle")
            await toggle.click()
            await expect(details).to_be_visible()
            await expect(details).to_contain_text(f"run {run_id}")
            await expect(toggle).to_have_attribute("aria-expanded", "true")
            await toggle.click()
            await expect(details).to_be_hidden()
            assert run_id not in await reply.inner_text()


async def test_an_enum_question_is_answered_by_a_choice_on_a_phone(browser: Browser) -> None:
    """At 390 px: no sideways scrolling, the question shows in the conversation, and a tap
    on a choice answers it (the client's resume)."""
    with anyio.fail_after(90):
        async with serve_chat() as url:
            page = await open_chat(browser, url, width=390, height=844)
            await base.say(page, "markdown")
            await expect(base.run_item(page, "complete")).to_have_count(1)
            await base.say(page, "deploy the api")
            question = page.get_by_test_id("question")
            await expect(question).to_contain_text("Where should the api go?")
            await expect(question).to_be_in_viewport()
            await expect(question.get_by_test_id("choice")).to_have_text(["eu", "us"])
            await expect(question.get_by_test_id("choice").first).to_be_in_viewport()
            await expect(page.get_by_test_id("input")).to_be_in_viewport()
            overflow = await page.evaluate(
                """() => [document.documentElement, ...document.querySelectorAll('*')]
                    .filter((el) => el.scrollWidth > el.clientWidth
                        && !['auto', 'scroll', 'hidden'].includes(getComputedStyle(el).overflowX))
                    .filter((el) => el === document.documentElement
                        || el.getBoundingClientRect().right > innerWidth)
                    .map((el) => el.tagName + '.' + el.className)"""
            )
            assert overflow == [], f"wider than the screen: {overflow}"
            assert await page.evaluate("() => document.documentElement.scrollWidth") <= 390
            await base.docs_shot(page, "chat-phone.png")
            await question.get_by_role("button", name="eu").click()
            reply = page.locator('[data-testid="message"][data-role="assistant"]').last
            await expect(reply).to_contain_text("Deploying the api to eu.")
            await expect(reply.locator("strong")).to_have_text("eu")
            await expect(page.get_by_test_id("question")).to_have_count(0)
            await expect(base.run_item(page, "complete")).to_have_count(2)


async def test_an_object_question_gets_a_form_and_its_answer_is_typed(browser: Browser) -> None:
    with anyio.fail_after(60):
        async with serve_chat() as url:
            page = await open_chat(browser, url)
            await base.say(page, "book a room")
            question = page.get_by_test_id("question")
            await expect(question).to_contain_text("Who is the booking for?")
            await expect(question.get_by_test_id("choice")).to_have_count(0)
            await question.get_by_test_id("field-name").fill("Ana")
            # An answer the relay finds outside the schema is refused in the card, in words.
            await question.get_by_test_id("field-nights").fill("0")
            await question.get_by_test_id("field-room").select_option(label="single")
            await question.get_by_test_id("submit-answer").click()
            await expect(question.get_by_test_id("question-error")).to_have_text(
                "That answer does not fit the question. Check it and try again."
            )
            await expect(question.get_by_test_id("submit-answer")).to_be_enabled()
            await question.get_by_test_id("field-nights").fill("3")
            await expect(question.get_by_test_id("question-error")).to_be_hidden()
            await question.get_by_test_id("field-vegan").check()
            await question.get_by_test_id("field-room").select_option(label="double")
            await base.docs_shot(page, "chat-form.png")
            await question.get_by_test_id("submit-answer").click()
            reply = page.locator('[data-testid="message"][data-role="assistant"]').last
            booked = {"name": "Ana", "nights": 3, "room": "double", "vegan": True}
            await expect(reply.locator("code")).to_have_text(json.dumps(booked, sort_keys=True))
            await expect(page.get_by_test_id("question")).to_have_count(0)


async def test_a_failed_run_shows_a_sentence_and_keeps_the_code_in_details(
    browser: Browser,
) -> None:
    with anyio.fail_after(60):
        async with serve_chat() as url:
            page = await open_chat(browser, url)
            await base.say(page, "fail now")
            error = page.get_by_test_id("error")
            await expect(error).to_contain_text(
                "The agent ran into a problem and stopped this reply."
            )
            await expect(error).to_have_attribute("data-code", "AGENT_ERROR")
            assert "AGENT_ERROR" not in await error.inner_text()
            await expect(base.run_item(page, "error")).to_contain_text(
                "The agent ran into a problem"
            )
            await error.get_by_test_id("details-toggle").click()
            await expect(error.get_by_test_id("details")).to_contain_text("code AGENT_ERROR")
            await expect(error.get_by_test_id("details")).to_contain_text(
                "the model provider timed out"
            )


async def test_the_runs_panel_lists_the_newest_twenty(browser: Browser) -> None:
    with anyio.fail_after(120):
        async with serve_chat() as url:
            page = await open_chat(browser, url)
            for i in range(22):
                await base.say(page, f"fail {i}")
                await expect(page.locator("#runs-title")).to_have_text(f"Runs ({i + 1})")
                await expect(page.get_by_test_id("primary")).to_have_text("Send")
            await expect(page.get_by_test_id("run")).to_have_count(20)
            await expect(page.get_by_test_id("runs-older")).to_have_text("2 older Runs not shown")
            await expect(page.get_by_test_id("run").first.locator(".prompt")).to_have_text(
                "fail 21"
            )
            await page.locator("#runs-title").click()
            await expect(page.get_by_test_id("runs")).to_be_hidden()


async def test_a_reader_scrolled_up_keeps_their_place_while_the_reply_streams(
    browser: Browser,
) -> None:
    """The reply re-renders as Markdown on every frame: a reader who scrolled up stays where
    they are, and one at the bottom follows the reply down."""
    gate = anyio.Event()
    with anyio.fail_after(90):
        async with serve_chat(gate) as url:
            page = await open_chat(browser, url, width=390, height=560)
            for i in range(3):  # failed Runs fill the conversation above the reply
                await base.say(page, f"fail {i}")
                await expect(base.run_item(page, "error")).to_have_count(i + 1)
                await expect(page.get_by_test_id("primary")).to_have_text("Send")
            await base.say(page, "markdown")
            box = page.get_by_test_id("messages")
            await expect(box.locator("table")).to_be_visible()
            assert await box.evaluate("(el) => el.scrollHeight > el.clientHeight + 100")
            await box.evaluate("(el) => { el.scrollTop = 40; }")
            gate.set()
            await expect(base.run_item(page, "complete")).to_have_count(1)
            await expect(box.locator("pre code")).to_contain_text("return 120 * days")
            assert await box.evaluate("(el) => el.scrollTop") == 40

            reply = page.locator(".msg.assistant").last
            await box.evaluate("(el) => { el.scrollTop = el.scrollHeight; }")
            await base.say(page, "markdown again")
            await expect(base.run_item(page, "complete")).to_have_count(2)
            await expect(reply).to_be_visible()
            await expect(box.locator("pre code").last).to_contain_text("return 120 * days")
            assert await box.evaluate(
                "(el) => el.scrollHeight - el.scrollTop - el.clientHeight < 2"
            ), "the view did not follow the reply to its end"


async def test_the_how_tos_own_page_renders_markdown_and_answers_a_question(
    browser: Browser,
) -> None:
    """examples/browser/my-chat.html, the page docs/howto/chat-page.md builds, works."""
    with anyio.fail_after(60):
        async with relay.serve(
            host="127.0.0.1", port=0, store="memory://", index_html=str(MY_CHAT)
        ) as server:
            agent = agent_side.Agent(server.url, name="default")

            @agent.on_run
            async def handle(run: agent_side.Run) -> None:
                await answer(run, None)

            async with agent:
                page = await browser.new_page(viewport={"width": 390, "height": 700})
                page.set_default_timeout(base.WAIT)
                await page.goto(f"http://127.0.0.1:{server.port}/")
                await page.locator("#text").fill("markdown")
                await page.locator("#text").press("Enter")
                await expect(page.locator(".assistant h2")).to_have_text("Packing list")
                await expect(page.locator(".assistant .hljs-keyword").first).to_have_text("def")
                await expect(page.locator(".assistant")).to_contain_text("<script>")
                assert await page.locator("#log script, #log img, [onerror]").count() == 0
                await page.locator("#text").fill("deploy the api")
                await page.locator("#text").press("Enter")
                await page.get_by_test_id("question").get_by_role("button", name="us").click()
                await expect(page.locator(".assistant").last).to_have_text(
                    "Deploying the api to us."
                )
                await expect(page.get_by_test_id("question")).to_have_count(0)
                await page.locator("#text").fill("fail")
                await page.locator("#text").press("Enter")
                await expect(page.locator("#log")).to_contain_text(
                    "The agent ran into a problem and stopped this reply."
                )


async def test_an_approval_is_answered_with_approve_or_deny(browser: Browser) -> None:
    with anyio.fail_after(60):
        async with serve_chat() as url:
            page = await open_chat(browser, url)
            await base.say(page, "approve the clean-up")
            question = page.get_by_test_id("question")
            await expect(question).to_contain_text("Delete the old backups?")
            await expect(question.get_by_test_id("choice")).to_have_text(["Approve", "Deny"])
            await question.get_by_role("button", name="Deny").click()
            reply = page.locator('[data-testid="message"][data-role="assistant"]').last
            await expect(reply.locator(".body")).to_have_text("approved: False")


SHAPES = [
    ({"enum": ["a", "b"]}, {"kind": "choice", "members": ["a", "b"]}),
    ({"type": "boolean"}, {"kind": "choice", "members": [True, False]}),
    (
        {"type": "object", "properties": {"ok": {"type": "boolean"}}},
        {"kind": "choice", "field": "ok", "members": [True, False]},
    ),
    (  # pydantic writes an Enum class as a $ref into $defs
        {
            "$defs": {"Size": {"enum": ["s", "m"], "type": "string"}},
            "type": "object",
            "properties": {"size": {"$ref": "#/$defs/Size"}},
        },
        {"kind": "choice", "field": "size", "members": ["s", "m"]},
    ),
    (  # an optional field (anyOf with null) is still a simple one
        {
            "type": "object",
            "properties": {
                "note": {"anyOf": [{"type": "string"}, {"type": "null"}]},
                "n": {"type": "number"},
            },
        },
        {
            "kind": "form",
            "fields": [["note", {"type": "string"}], ["n", {"type": "number"}]],
        },
    ),
    (
        {"type": "object", "properties": {"a": {"type": "object"}, "b": {"type": "string"}}},
        {"kind": "text"},
    ),
    ({"type": "array", "items": {"type": "string"}}, {"kind": "text"}),
    (None, {"kind": "text"}),
]


async def test_each_schema_gets_its_control(browser: Browser) -> None:
    """chat-render.js's questionShape and readAnswer, run in the browser as the page does."""
    with anyio.fail_after(60):
        async with serve_chat() as url:
            page = await open_chat(browser, url)
            got = await page.evaluate(
                """async (schemas) => {
                    const m = await import("/static/chat-render.js");
                    return schemas.map((s) => m.questionShape(
                        { kind: "input", response_schema: s }));
                }""",
                [schema for schema, _ in SHAPES],
            )
            assert got == [want for _, want in SHAPES]
            answers = await page.evaluate(
                """async () => {
                    const { readAnswer } = await import("/static/chat-render.js");
                    return [
                        readAnswer("EU", { enum: ["eu", "us"] }),
                        readAnswer("42", { type: "string" }),
                        readAnswer("42", { type: "integer" }),
                        readAnswer('{"a": 1}', null),
                        readAnswer("plain words", null),
                    ];
                }"""
            )
            assert answers == ["eu", "42", 42, {"a": 1}, "plain words"]


async def test_rendering_a_growing_reply_block_by_block_equals_rendering_it_whole(
    browser: Browser,
) -> None:
    """renderMarkdownInto remembers finished blocks; at every length of a reply it shows
    what rendering the whole text afresh shows (a link defined at the end included)."""
    text = HEAD + TAIL + "\nSee [the guide][g] and:\n\n- one\n- two\n\n[g]: https://example.com/g\n"
    with anyio.fail_after(60):
        async with serve_chat() as url:
            page = await open_chat(browser, url)
            mismatches = await page.evaluate(
                """async (text) => {
                    const m = await import("/static/chat-render.js");
                    const live = document.createElement("div");
                    const bad = [];
                    for (let n = 1; n <= text.length; n += 5) {
                        const prefix = text.slice(0, Math.min(n, text.length));
                        m.renderMarkdownInto(live, prefix);
                        const whole = document.createElement("div");
                        whole.append(m.renderMarkdown(prefix));
                        const shown = [...live.children].map((b) => b.innerHTML).join("");
                        if (shown !== whole.innerHTML) bad.push(n);
                    }
                    m.renderMarkdownInto(live, text);
                    const link = live.querySelector('a[href="https://example.com/g"]');
                    return { bad, link: link && link.textContent };
                }""",
                text,
            )
            assert mismatches == {"bad": [], "link": "the guide"}
