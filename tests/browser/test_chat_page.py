"""The demo chat page in a real browser (Debian's chromium, driven by Playwright).

A relay serving the page and runwire.js, and the demo agent (runwire.demo's
model under agent_side.steering_loop), run in process on a loopback port;
two pages open the same session. Screenshots go to test-artifacts/, and the
ones the docs show to docs/img/.
"""

from __future__ import annotations

import functools
import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import anyio
import pytest
from playwright.async_api import Browser, Page, async_playwright, expect

import agent_side
import relay
from runwire.demo import DEMO_TOOLS, PAGE, demo_model, page_url
from transport import new_id

pytestmark = pytest.mark.anyio

CHROMIUM = "/usr/bin/chromium"
ROOT = Path(__file__).resolve().parents[2]
ARTIFACTS = ROOT / "test-artifacts"
WAIT = 20_000  # ms, for any one thing to show up in a page


async def docs_shot(page: Page, name: str) -> None:
    """Take a screenshot the docs show into docs/img/ (committed).

    The same page gives the same picture: session ids are fixed, animations stopped.
    """
    (ROOT / "docs" / "img").mkdir(parents=True, exist_ok=True)
    await page.screenshot(path=str(ROOT / "docs" / "img" / name), animations="disabled")


@asynccontextmanager
async def serve_page(*, deaf: bool = False) -> AsyncIterator[str]:
    """The chat page's URL on a fresh relay with a demo agent behind it.

    A ``deaf`` agent streams one reply and ends, never taking steering in.
    """
    model = functools.partial(demo_model, delay=0.04)
    async with relay.serve(
        host="127.0.0.1", port=0, store="memory://", index_html=str(PAGE)
    ) as server:
        agent = agent_side.Agent(server.url, name="default")

        @agent.on_run
        async def handle(run: agent_side.Run) -> None:
            if not deaf:
                await agent_side.steering_loop(run, model, tools=DEMO_TOOLS)
                return
            await run.start()
            run.has_input()
            await run.pipe(model([vm.message for vm in run.view.messages()], run.abort_signal))
            await run.end("complete")

        async with agent:
            yield page_url(server.port, "trip-demo")  # a fresh relay: a fixed id is new


@pytest.fixture
async def url() -> AsyncIterator[str]:
    async with serve_page() as page:
        yield page


@pytest.fixture
def chromium() -> str:
    """Debian's chromium (never a browser Playwright downloads)."""
    if not os.path.exists(CHROMIUM):
        pytest.fail(f"{CHROMIUM} is missing: apt-get install -y chromium (.ci/run does it)")
    return CHROMIUM


@pytest.fixture
async def browser(chromium: str) -> AsyncIterator[Browser]:
    async with async_playwright() as pw:
        browser = await pw.chromium.launch(executable_path=chromium, headless=True, timeout=30_000)
        try:
            yield browser
        finally:
            await browser.close()


async def open_page(browser: Browser, url: str) -> Page:
    page = await browser.new_page(viewport={"width": 1100, "height": 760})
    page.set_default_timeout(WAIT)
    await page.goto(url)
    await expect(page.get_by_test_id("conn")).to_have_attribute("data-state", "connected")
    return page


async def say(page: Page, text: str) -> None:
    await page.get_by_test_id("input").fill(text)
    await page.get_by_test_id("input").press("Enter")


def assistant(page: Page) -> object:
    return page.locator('[data-testid="message"][data-role="assistant"]')


def run_item(page: Page, status: str) -> object:
    return page.locator(f'[data-testid="run"][data-status="{status}"]')


async def test_two_tabs_send_steer_and_cancel(browser: Browser, url: str) -> None:
    with anyio.fail_after(90):
        one = await open_page(browser, url)
        two = await open_page(browser, url)
        await expect(two.get_by_test_id("primary")).to_have_text("Send")

        # Send from the first tab: both show the reply streaming, and Send turns into Stop.
        await say(one, "Plan a 7-day trip to Lisbon.")
        for page in (one, two):
            await expect(assistant(page).first).to_contain_text("7-day plan for Lisbon")
            await expect(page.get_by_test_id("primary")).to_have_text("Stop")

        # Typing while it streams steers it; the reply changes course in both tabs.
        await expect(assistant(one).first).to_contain_text("Day 1:")
        await say(one, "Make it 2 days, and keep it under £800.")
        for page in (one, two):
            steer = page.locator('[data-testid="message"][data-role="user"]').nth(1)
            await expect(steer).to_contain_text("steer")
            await expect(assistant(page).last).to_contain_text(
                'Got it: "Make it 2 days, and keep it under £800"'
            )
            await expect(assistant(page).last).to_contain_text("All of it stays under £800.")
            await expect(run_item(page, "complete")).to_have_count(1)
            await expect(steer.get_by_test_id("outcome")).to_have_attribute("data-consumed", "true")
            await expect(page.get_by_test_id("primary")).to_have_text("Send")
        first_reply = await assistant(one).first.inner_text()
        assert "Day 7:" not in first_reply, "the steered call was cut short"

        ARTIFACTS.mkdir(exist_ok=True)
        shot = ARTIFACTS / "chat-page-steered.png"
        await one.screenshot(path=str(shot), full_page=True)
        assert shot.stat().st_size > 10_000
        await docs_shot(one, "chat-steered.png")

        # A long reply started in the first tab, stopped from the second: cancelled in both.
        await say(one, "Plan a 14-day trip to Rome.")
        await expect(assistant(two).last).to_contain_text("Day 2:")
        await expect(two.get_by_test_id("primary")).to_have_text("Stop")
        await two.get_by_test_id("primary").click()
        for page in (one, two):
            await expect(run_item(page, "cancelled")).to_have_count(1)
            await expect(page.get_by_test_id("primary")).to_have_text("Send")
        stopped = await assistant(one).last.inner_text()
        assert "Day 14:" not in stopped
        await anyio.sleep(0.3)  # a late token would land on the cancelled Run, not a new one
        assert await assistant(two).count() == await assistant(one).count()


async def test_a_drop_and_a_reload_in_the_middle_of_a_reply_lose_nothing(
    browser: Browser, url: str
) -> None:
    with anyio.fail_after(90):
        page = await open_page(browser, url)
        await page.evaluate(
            "() => { window.states = []; runwireSession.on('state', (s) => states.push(s)); }"
        )
        await say(page, "Plan a 14-day trip to Paris.")
        reply = assistant(page).first
        await expect(reply).to_contain_text("Day 2:")

        # The network drops: the page shows it reconnecting, resumes, and the reply goes on.
        await page.evaluate("() => runwireSession._ws.close()")
        await page.wait_for_function("window.states.join() === 'disconnected,connected'")
        await expect(page.get_by_test_id("conn")).to_have_attribute("data-state", "connected")
        await expect(reply).to_contain_text("Day 4:")
        await expect(run_item(page, "active")).to_have_count(1)

        # A reload mid-reply: the text so far is there, and the reply goes on to its end.
        before = (await reply.inner_text()).split("\n", 1)[-1]
        await page.reload()
        await expect(page.get_by_test_id("conn")).to_have_attribute("data-state", "connected")
        reply = assistant(page).first
        await expect(reply).to_contain_text(before.rstrip())
        await expect(run_item(page, "complete")).to_have_count(1)
        await expect(reply).to_contain_text("Day 14:")
        text = await reply.inner_text()
        assert text.count("Day 1:") == 1 and text.count("Day 4:") == 1, "nothing shown twice"
        assert await assistant(page).count() == 1

        ARTIFACTS.mkdir(exist_ok=True)
        shot = ARTIFACTS / "chat-page.png"
        await page.screenshot(path=str(shot), full_page=True)
        assert shot.exists() and shot.stat().st_size > 10_000


async def test_steering_the_agent_never_saw_is_marked_on_the_page(browser: Browser) -> None:
    with anyio.fail_after(90):
        async with serve_page(deaf=True) as url:
            page = await open_page(browser, url)
            await say(page, "Plan a 6-day trip to Porto.")
            await expect(assistant(page).first).to_contain_text("Day 1:")
            await say(page, "Make every meal vegan.")
            mark = page.get_by_test_id("outcome")
            await expect(mark).to_have_attribute("data-consumed", "pending")
            await expect(page.get_by_test_id("primary")).to_have_text("Stop")
            ARTIFACTS.mkdir(exist_ok=True)
            await page.screenshot(path=str(ARTIFACTS / "chat-page-streaming.png"))
            await expect(mark).to_have_attribute("data-consumed", "false")
            await expect(mark).to_contain_text("not seen by the agent")
            await expect(run_item(page, "complete")).to_have_count(1)
            await expect(assistant(page)).to_have_count(1)
            await page.screenshot(path=str(ARTIFACTS / "chat-page-not-seen.png"))


async def test_a_paused_runs_question_is_answered_from_another_tab(
    browser: Browser, url: str
) -> None:
    one = await open_page(browser, url)
    two = await open_page(browser, url)
    await say(one, "Deploy the api")
    for page in (one, two):
        question = page.get_by_test_id("question")
        await expect(question).to_contain_text("Where should api go?")
        # An enum is answered with a button per member, in the conversation.
        await expect(question.get_by_test_id("choice")).to_have_text(["eu", "us"])
        await expect(page.get_by_test_id("messages").get_by_test_id("question")).to_have_count(1)
        await expect(run_item(page, "suspended")).to_have_count(1)
    await docs_shot(one, "chat-question.png")
    await two.get_by_test_id("question").get_by_role("button", name="eu").click()
    for page in (one, two):
        await expect(run_item(page, "complete")).to_have_count(1)
        await expect(assistant(page).last).to_contain_text("Done: api is live in eu.")
        await expect(page.get_by_test_id("question")).to_have_count(0)
    ARTIFACTS.mkdir(exist_ok=True)
    await one.screenshot(path=str(ARTIFACTS / "chat-page-interrupt.png"))


async def test_a_stop_pressed_and_a_selection_made_while_a_reply_streams_hold(
    browser: Browser, url: str
) -> None:
    """Tokens arriving re-render the page; what a person is pressing or selecting stays.

    A click is a press and a release on one element: the press lands on the Run's Stop
    button, the reply grows, then the release. A selection in the streaming reply
    survives the reply growing.
    """
    with anyio.fail_after(60):
        page = await open_page(browser, url)
        await say(page, "Plan a 14-day trip to Rome.")
        reply = assistant(page).first
        await expect(reply).to_contain_text("Day 1:")
        selected = await page.evaluate(
            """() => {
                const body = document.querySelector('[data-role="assistant"] .body p');
                const range = document.createRange();
                range.setStart(body.firstChild, 0);
                range.setEnd(body.firstChild, 9);
                getSelection().removeAllRanges();
                getSelection().addRange(range);
                return getSelection().toString();
            }"""
        )
        assert selected == "Here is a"
        box = await page.evaluate(
            """() => {
                const stop = document.querySelector('[data-testid="cancel-run"]');
                const r = stop.getBoundingClientRect();
                return {x: r.x + r.width / 2, y: r.y + r.height / 2};
            }"""
        )
        await page.mouse.move(box["x"], box["y"])
        await page.mouse.down()
        grown = len(await reply.inner_text()) + 20
        await page.wait_for_function(
            """(n) => document.querySelector('[data-role="assistant"]').innerText.length > n""",
            arg=grown,
        )
        assert await page.evaluate("() => getSelection().toString()") == "Here is a"
        await page.mouse.up()
        await expect(run_item(page, "cancelled")).to_have_count(1)
        assert "Day 14:" not in await reply.inner_text()


async def test_a_relay_that_lost_the_history_clears_the_page(browser: Browser) -> None:
    """The relay comes back on the same port with an empty store: the page shows what the
    relay has (nothing), not the conversation its view no longer holds."""
    with anyio.fail_after(60):
        async with relay.serve(
            host="127.0.0.1", port=0, store="memory://", index_html=str(PAGE)
        ) as server:
            port = server.port
            page = await open_page(browser, page_url(port, f"browser-{new_id()[:8]}"))
            await page.evaluate(
                "() => { window.states = []; runwireSession.on('state', (s) => states.push(s)); }"
            )
            await say(page, "Plan a 2-day trip to Rome.")
            await expect(page.get_by_test_id("message")).to_have_count(1)
            await expect(page.get_by_test_id("run")).to_have_count(1)
        async with relay.serve(
            host="127.0.0.1", port=port, store="memory://", index_html=str(PAGE)
        ):
            await page.wait_for_function("window.states.join() === 'disconnected,connected'")
            assert await page.evaluate("() => runwireSession.view.getMessages().length") == 0
            await expect(page.get_by_test_id("message")).to_have_count(0)
            await expect(page.get_by_test_id("run")).to_have_count(0)


async def test_offline_shows_at_once_and_what_was_done_offline_goes_out_once(
    browser: Browser, url: str
) -> None:
    """The browser goes offline mid-reply: the page says so at once (not "live" on a socket
    that went quiet), a Stop pressed offline takes effect when it is back, the reply shows
    nothing twice, and a message sent offline starts one Run."""
    with anyio.fail_after(60):
        context = await browser.new_context(viewport={"width": 1100, "height": 760})
        page = await context.new_page()
        page.set_default_timeout(WAIT)
        await page.goto(url)
        conn = page.get_by_test_id("conn")
        await expect(conn).to_have_attribute("data-state", "connected")
        await say(page, "Plan a 14-day trip to Rome.")
        reply = assistant(page).first
        await expect(reply).to_contain_text("Day 1:")

        await context.set_offline(True)
        await expect(conn).to_have_attribute("data-state", "disconnected")
        await expect(page.get_by_test_id("primary")).to_have_text("Stop")
        await page.get_by_test_id("primary").click()
        await context.set_offline(False)
        await expect(conn).to_have_attribute("data-state", "connected")
        await expect(run_item(page, "cancelled")).to_have_count(1)
        text = await reply.inner_text()
        assert text.count("Day 1:") == 1 and "Day 14:" not in text

        await context.set_offline(True)
        await expect(conn).to_have_attribute("data-state", "disconnected")
        await say(page, "Plan a 2-day trip to Porto.")
        await context.set_offline(False)
        await expect(run_item(page, "complete")).to_have_count(1)
        await expect(assistant(page).last).to_contain_text("2-day plan for Porto")
        await expect(page.get_by_test_id("run")).to_have_count(2)
        users = page.locator('[data-testid="message"][data-role="user"]')
        await expect(users).to_have_count(2)
        await context.close()


async def test_a_message_too_large_for_the_relay_is_refused_and_given_back(
    browser: Browser, url: str
) -> None:
    """A pasted text over the relay's hard frame limit (4 MiB, the relay closes the socket)
    is refused on the page, stays in the box, and the session goes on."""
    with anyio.fail_after(60):
        page = await open_page(browser, url)
        big = "x" * 5_000_000
        await page.evaluate(
            "(n) => { document.querySelector('[data-testid=input]').value = 'x'.repeat(n); }",
            len(big),
        )
        await page.get_by_test_id("primary").click()
        await expect(page.get_by_test_id("messages")).to_contain_text("PAYLOAD_TOO_LARGE")
        # In words on the page; the code itself is under the line's details.
        error = page.get_by_test_id("error")
        await expect(error).to_contain_text("That message is too large to send.")
        await expect(error).to_have_attribute("data-code", "PAYLOAD_TOO_LARGE")
        assert await page.evaluate(
            "() => document.querySelector('[data-testid=input]').value.length"
        ) == len(big)
        await expect(page.get_by_test_id("conn")).to_have_attribute("data-state", "connected")
        assert await page.evaluate("() => runwireSession._pending.size") == 0
        await say(page, "Plan a 2-day trip to Porto.")
        await expect(run_item(page, "complete")).to_have_count(1)
        await expect(page.get_by_test_id("message")).to_have_count(2)
