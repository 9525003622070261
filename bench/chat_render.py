"""What the chat page's Markdown costs a frame while a long reply streams.

Starts a relay on a loopback port (it serves ``/static/chat-render.js``), opens
a page in Debian's chromium, and renders a reply of Markdown (headings, bold,
a table and a Python block, over and over) as it grows. For each reply length
it times ``renderMarkdownInto`` on the last ``--steps`` lengths, the call the
page makes once an animation frame, and ``renderMarkdown`` plus ``morph``, a
render of the whole text each time, for comparison.

    python bench/chat_render.py --sizes 2000,10000,20000 --steps 30
"""

from __future__ import annotations

import argparse

import anyio
from playwright.async_api import async_playwright

import relay

UNIT = (
    "## Day\n\nSome **bold** text and `code` here, with a [link](http://example.com).\n\n"
    "| a | b |\n|---|---|\n| 1 | 2 |\n\n```python\ndef f(x):\n    return x * 2\n```\n\n"
)

TIMING = """async ([unit, sizes, steps]) => {
  const m = await import("/static/chat-render.js");
  const full = unit.repeat(Math.ceil(Math.max(...sizes) / unit.length) + 1);
  const out = [];
  for (const size of sizes) {
    const row = { size };
    for (const way of ["blocks", "whole"]) {
      const box = document.createElement("div");
      document.body.append(box);
      const show = way === "blocks"
        ? (text) => m.renderMarkdownInto(box, text)
        : (text) => m.morph(box, m.renderMarkdown(text));
      show(full.slice(0, size - steps));
      const t0 = performance.now();
      for (let n = 1; n <= steps; n++) show(full.slice(0, size - steps + n));
      row[way] = (performance.now() - t0) / steps;
      box.remove();
    }
    out.push(row);
  }
  return out;
}"""


async def main(sizes: list[int], steps: int, chromium: str) -> None:
    async with (
        relay.serve(host="127.0.0.1", port=0, store="memory://") as server,
        async_playwright() as pw,
    ):
        browser = await pw.chromium.launch(executable_path=chromium, headless=True)
        try:
            page = await browser.new_page()
            await page.goto(f"http://127.0.0.1:{server.port}/healthz")
            rows = await page.evaluate(TIMING, [UNIT, sizes, steps])
        finally:
            await browser.close()
    print("reply chars  renderMarkdownInto ms/frame  whole render ms/frame")
    for row in rows:
        print(f"{row['size']:>11}  {row['blocks']:>25.2f}  {row['whole']:>21.2f}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--sizes", default="2000,10000,20000", help="reply lengths, in chars")
    parser.add_argument("--steps", type=int, default=30, help="frames timed at each length")
    parser.add_argument("--chromium", default="/usr/bin/chromium", help="the browser to drive")
    args = parser.parse_args()
    anyio.run(main, [int(s) for s in args.sizes.split(",")], args.steps, args.chromium)
