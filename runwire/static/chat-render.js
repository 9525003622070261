// The chat page's rendering helpers: safe Markdown, readable errors, and question controls.
//
// The relay serves this module at /static/chat-render.js, with the libraries it imports under
// /static/vendor/ (see vendor/README.md). A page of your own may import it too; it needs no
// network beyond the relay. Nothing here talks to the relay: the page passes answers on.

import { Marked } from "./vendor/marked.esm.js";
import "./vendor/purify.min.js"; // a UMD build: it sets globalThis.DOMPurify
import hljs from "./vendor/hljs-core.min.js";
import bash from "./vendor/hljs-bash.min.js";
import css from "./vendor/hljs-css.min.js";
import diff from "./vendor/hljs-diff.min.js";
import go from "./vendor/hljs-go.min.js";
import java from "./vendor/hljs-java.min.js";
import javascript from "./vendor/hljs-javascript.min.js";
import json from "./vendor/hljs-json.min.js";
import markdown from "./vendor/hljs-markdown.min.js";
import plaintext from "./vendor/hljs-plaintext.min.js";
import python from "./vendor/hljs-python.min.js";
import rust from "./vendor/hljs-rust.min.js";
import shell from "./vendor/hljs-shell.min.js";
import sql from "./vendor/hljs-sql.min.js";
import typescript from "./vendor/hljs-typescript.min.js";
import xml from "./vendor/hljs-xml.min.js";
import yaml from "./vendor/hljs-yaml.min.js";

const LANGUAGES = {
  bash, css, diff, go, java, javascript, json, markdown, plaintext, python, rust, shell, sql,
  typescript, xml, yaml,
};
for (const [name, grammar] of Object.entries(LANGUAGES)) hljs.registerLanguage(name, grammar);

// ---------------------------------------------------------------------------------------------
// Markdown

const escapeHtml = (text) => String(text)
  .replaceAll("&", "&amp;").replaceAll("<", "&lt;").replaceAll(">", "&gt;")
  .replaceAll('"', "&quot;").replaceAll("'", "&#39;");

const markdownParser = new Marked({
  gfm: true,
  breaks: false,
  renderer: {
    // Raw HTML in the model's text is shown as text, never parsed as HTML.
    html({ text, block }) {
      return block ? `<p>${escapeHtml(text)}</p>` : escapeHtml(text);
    },
    // An image is a link: the page never fetches a URL the model chose.
    image({ href, text }) {
      return `<a href="${escapeHtml(href)}">${escapeHtml(`image: ${text || href}`)}</a>`;
    },
  },
});

const purify = globalThis.DOMPurify(window);
const ALLOWED_TAGS = [
  "a", "blockquote", "br", "code", "del", "em", "h1", "h2", "h3", "h4", "h5", "h6", "hr", "input",
  "li", "ol", "p", "pre", "span", "strong", "table", "tbody", "td", "th", "thead", "tr", "ul",
];
const ALLOWED_ATTR = ["href", "title", "class", "start", "align", "type", "checked", "disabled"];
purify.addHook("afterSanitizeAttributes", (node) => {
  if (node.tagName === "A") {
    node.setAttribute("target", "_blank");
    node.setAttribute("rel", "noopener noreferrer nofollow");
  }
  if (node.tagName === "INPUT") {
    // Only a task list's box comes from Markdown: shown, never a field to fill in.
    node.setAttribute("type", "checkbox");
    node.setAttribute("disabled", "");
  }
});

/** Highlight the fragment's code blocks in place (highlight.js escapes what it is given). */
function highlight(fragment) {
  for (const code of fragment.querySelectorAll("pre > code")) {
    const lang = /\blanguage-([\w+-]+)/.exec(code.className)?.[1]?.toLowerCase();
    const text = code.textContent;
    const result = lang && hljs.getLanguage(lang)
      ? hljs.highlight(text, { language: lang, ignoreIllegals: true })
      : hljs.highlightAuto(text);
    code.innerHTML = result.value;
    code.classList.add("hljs");
  }
}

/** Markdown block (with the reply's link definitions) -> its safe, highlighted HTML. */
const blocks = new Map();
const BLOCKS_KEPT = 2000;

/** One top-level block of Markdown as safe HTML: parsed, sanitised, then highlighted. */
function blockHtml(token, links) {
  const html = markdownParser.parser(Object.assign([token], { links }));
  const fragment = purify.sanitize(html, { ALLOWED_TAGS, ALLOWED_ATTR, RETURN_DOM_FRAGMENT: true });
  highlight(fragment);
  const box = document.createElement("div");
  box.append(fragment);
  return box.innerHTML;
}

/** The safe HTML of each top-level block of `text`, each remembered once rendered. */
function markdownBlocks(text) {
  const tokens = markdownParser.lexer(text);
  const links = tokens.links ?? {};
  const linkKey = Object.keys(links).length ? JSON.stringify(links) : "";
  return tokens.map((token) => {
    const key = `${linkKey}\u0000${token.raw}`;
    let safe = blocks.get(key);
    if (safe === undefined) {
      safe = blockHtml(token, links);
      if (blocks.size >= BLOCKS_KEPT) blocks.delete(blocks.keys().next().value);
      blocks.set(key, safe);
    }
    return safe;
  });
}

/** Safe HTML as an inert fragment: nothing in a template's content runs or loads. */
function fragmentOf(html) {
  const template = document.createElement("template");
  template.innerHTML = html;
  return template.content;
}

/**
 * Markdown as a sanitised DOM fragment: headings, emphasis, lists, tables, links, and code
 * blocks highlighted. Raw HTML shows as text; scripts, handlers and images never reach it.
 * @param {string} text @returns {DocumentFragment}
 */
export function renderMarkdown(text) {
  return fragmentOf(markdownBlocks(text).join(""));
}

const shownBlocks = new WeakMap();

/**
 * Show `text` as Markdown in `el`, for a reply that grows: call it again with the longer
 * text. Each top-level block sits in its own `div.md-block` (styled `display: contents`).
 * A block that did not change is not touched, and the one that grew is merged (see morph),
 * so each call costs about one block's work.
 * @param {Element} el @param {string} text
 */
export function renderMarkdownInto(el, text) {
  const next = markdownBlocks(text);
  const shown = shownBlocks.get(el) ?? [];
  let same = 0;
  while (same < next.length && same < shown.length && next[same] === shown[same]) same++;
  for (let i = same; i < next.length; i++) {
    let box = el.children[i];
    if (box === undefined) {
      box = document.createElement("div");
      box.className = "md-block";
      el.append(box);
    }
    morph(box, fragmentOf(next[i]));
  }
  while (el.children.length > next.length) el.lastElementChild.remove();
  shownBlocks.set(el, next);
}

/**
 * Make `live`'s children match `fresh`'s, keeping every node that stays the same. A text that
 * grew gets only its new characters, so a selection in it and the scroll position hold.
 * @param {Element} live @param {Node} fresh
 */
export function morph(live, fresh) {
  const want = [...fresh.childNodes];
  for (let i = 0; i < want.length; i++) {
    const next = want[i];
    const have = live.childNodes[i];
    if (have === undefined) {
      live.append(next);
    } else if (have.nodeType === Node.TEXT_NODE && next.nodeType === Node.TEXT_NODE) {
      if (have.data === next.data) continue;
      if (next.data.startsWith(have.data)) have.appendData(next.data.slice(have.data.length));
      else have.data = next.data;
    } else if (have.nodeType === Node.ELEMENT_NODE && have.tagName === next.tagName) {
      syncAttributes(have, next);
      morph(have, next);
    } else {
      have.replaceWith(next);
    }
  }
  while (live.childNodes.length > want.length) live.lastChild.remove();
}

function syncAttributes(have, next) {
  for (const { name } of [...have.attributes]) {
    if (!next.hasAttribute(name)) have.removeAttribute(name);
  }
  for (const { name, value } of next.attributes) {
    if (have.getAttribute(name) !== value) have.setAttribute(name, value);
  }
}

// ---------------------------------------------------------------------------------------------
// Errors

/** What each error code means to a person using the chat (the code stays in the details). */
export const ERROR_TEXT = Object.freeze({
  AGENT_LOST: "The agent stopped responding, so this reply ended early.",
  AGENT_ERROR: "The agent ran into a problem and stopped this reply.",
  ABORTED: "That was cancelled before it was sent.",
  CANCEL_DENIED: "The agent chose to finish this reply, so it was not stopped.",
  CONNECTION_CLOSED: "The connection closed before that was sent. Try again.",
  DUPLICATE_RUN: "That reply was already started.",
  EPOCH_MISMATCH: "The relay lost this conversation's history; the page starts over.",
  INTERNAL_ERROR: "Something went wrong in the relay. Try again.",
  INTERRUPT_ANSWER_INVALID: "That answer does not fit the question. Check it and try again.",
  INTERRUPT_EXPIRED: "The question expired before it was answered.",
  INTERRUPTED: "The question was not answered, so the agent went on without it.",
  ITERATION_LIMIT_REACHED: "The agent reached its step limit for this reply.",
  NOT_ATTACHED: "The page lost its place in the conversation. Reload the page.",
  PAYLOAD_TOO_LARGE: "That message is too large to send. Shorten it and try again.",
  RATE_LIMITED: "Too many requests at once. Wait a moment and try again.",
  RUN_NOT_ACTIVE: "That reply had already ended.",
  RUN_NOT_FOUND: "That reply is no longer in the conversation.",
  STORE_UNAVAILABLE: "The relay cannot save messages right now. Try again shortly.",
  THREAD_ACCESS_DENIED: "Someone else's reply is going on in this conversation.",
  THREAD_BUSY: "The agent is still answering. Wait for it or stop it first.",
  TOKEN_EXPIRED: "Your sign-in expired. Reload the page to sign in again.",
  TOOL_ERROR: "A tool the agent used failed.",
  TOOL_NOT_FOUND: "The agent asked for a tool it does not have.",
  TOOL_TIMEOUT: "A tool the agent used took too long.",
  UNAUTHORIZED: "You are not allowed to do that in this conversation.",
  VALIDATION_ERROR: "The relay refused that request as malformed.",
});

/** A person's sentence for an error code (a general one for a code not in the table). */
export function errorText(code) {
  return ERROR_TEXT[code] ?? "Something went wrong.";
}

// ---------------------------------------------------------------------------------------------
// Details

/**
 * A "details" button and the hidden block it shows and hides: ids and raw JSON live there.
 * @returns {{button: HTMLButtonElement, block: HTMLElement}}
 */
export function detailsToggle() {
  const button = document.createElement("button");
  button.type = "button";
  button.className = "details-toggle";
  button.dataset.testid = "details-toggle";
  button.textContent = "details";
  button.setAttribute("aria-expanded", "false");
  const block = document.createElement("div");
  block.className = "details";
  block.dataset.testid = "details";
  block.hidden = true;
  button.onclick = () => {
    block.hidden = !block.hidden;
    button.setAttribute("aria-expanded", String(!block.hidden));
  };
  return { button, block };
}

/** A labelled line of the details block; `value` that is not text shows as indented JSON. */
export function detailLine(label, value) {
  const item = document.createElement(typeof value === "string" ? "div" : "pre");
  item.className = typeof value === "string" ? "detail" : "detail json";
  const name = document.createElement("span");
  name.className = "detail-name";
  name.textContent = `${label} `;
  item.append(name, typeof value === "string" ? value : JSON.stringify(value, null, 2));
  return item;
}

// ---------------------------------------------------------------------------------------------
// Questions

/** A schema with its local `$ref` followed and an optional (`anyOf` with null) unwrapped. */
export function resolveSchema(schema, root = schema) {
  let node = schema;
  for (let hops = 0; node && typeof node.$ref === "string" && hops < 16; hops++) {
    if (!node.$ref.startsWith("#/")) return {};
    node = node.$ref.slice(2).split("/").reduce((at, key) => at?.[key], root);
  }
  if (node && Array.isArray(node.anyOf)) {
    const options = node.anyOf.filter((s) => s.type !== "null");
    if (options.length === 1) return resolveSchema(options[0], root);
  }
  return node ?? {};
}

const SIMPLE = new Set(["string", "number", "integer", "boolean"]);

function isSimple(schema) {
  return Array.isArray(schema.enum) || SIMPLE.has(schema.type);
}

/**
 * Which control answers a question: "approve" (Approve / Deny), "choice" (a button per
 * member of an enum, maybe as an object's only field), "form" (an object of simple fields),
 * or "text" (a line of text, read as JSON when it parses).
 * @returns {{kind: string, field?: string, members?: unknown[], fields?: [string, object][]}}
 */
export function questionShape(q) {
  if (q.kind === "approval" || q.kind === "plan") return { kind: "approve" };
  const root = q.response_schema ?? {};
  const schema = resolveSchema(root, root);
  if (Array.isArray(schema.enum)) return { kind: "choice", members: schema.enum };
  if (schema.type === "boolean") return { kind: "choice", members: [true, false] };
  if (schema.type === "object" && schema.properties) {
    const fields = Object.entries(schema.properties).map(([k, s]) => [k, resolveSchema(s, root)]);
    if (fields.length === 1) {
      const [[field, only]] = fields;
      if (Array.isArray(only.enum)) return { kind: "choice", field, members: only.enum };
      if (only.type === "boolean") return { kind: "choice", field, members: [true, false] };
    }
    if (fields.length > 0 && fields.every(([, s]) => isSimple(s))) return { kind: "form", fields };
  }
  return { kind: "text" };
}

/** What a typed answer means for a question's schema (JSON, an enum member, one field). */
export function readAnswer(text, schema) {
  let value = text;
  try { value = JSON.parse(text); } catch { /* plain text */ }
  const root = schema ?? {};
  const resolved = resolveSchema(root, root);
  if (resolved.type === "string" && typeof value !== "string") value = text;
  if (Array.isArray(resolved.enum)) {
    return resolved.enum.find((m) => String(m).toLowerCase() === String(value).toLowerCase()) ?? value;
  }
  return value;
}

function choiceLabel(member) {
  if (member === true) return "Yes";
  if (member === false) return "No";
  return String(member);
}

function fieldInput(name, schema, required) {
  let input;
  if (Array.isArray(schema.enum)) {
    input = document.createElement("select");
    if (!required) input.append(new Option("", ""));
    schema.enum.forEach((member, i) => input.append(new Option(String(member), String(i))));
  } else {
    input = document.createElement("input");
    if (schema.type === "boolean") input.type = "checkbox";
    else if (schema.type === "number" || schema.type === "integer") {
      input.type = "number";
      input.step = schema.type === "integer" ? "1" : "any";
    } else input.type = "text";
    if (schema.default !== undefined) {
      if (input.type === "checkbox") input.checked = Boolean(schema.default);
      else input.value = String(schema.default);
    }
  }
  input.name = name;
  input.dataset.testid = `field-${name}`;
  if (required && input.type !== "checkbox") input.required = true;
  return input;
}

function fieldValue(input, schema) {
  if (Array.isArray(schema.enum)) return input.value === "" ? undefined : schema.enum[Number(input.value)];
  if (input.type === "checkbox") return input.checked;
  if (input.value === "") return undefined;
  if (schema.type === "integer") return Number.parseInt(input.value, 10);
  if (schema.type === "number") return Number(input.value);
  return input.value;
}

/**
 * A question's card with the control its schema calls for. `answer(value)` and `decline()`
 * return promises; a refusal shows its human text in the card, and the controls come back.
 * @returns {HTMLFormElement}
 */
export function questionCard(q, { answer, decline }) {
  const form = document.createElement("form");
  form.className = "question";
  form.dataset.testid = "question";
  form.dataset.interrupt = q.id;
  const title = document.createElement("p");
  title.className = "question-text";
  title.textContent = q.kind === "approval" && q.tool_name ? `Allow ${q.tool_name}?` : q.message;
  if (q.kind === "approval" && q.message && q.message !== title.textContent) {
    title.append(document.createElement("br"), q.message);
  }
  const controls = document.createElement("div");
  controls.className = "question-controls";
  const problem = document.createElement("p");
  problem.className = "question-error";
  problem.dataset.testid = "question-error";
  problem.hidden = true;
  form.addEventListener("input", () => { problem.hidden = true; });
  const { button: more, block } = detailsToggle();
  block.append(detailLine("question", q.id));
  if (q.response_schema) block.append(detailLine("schema", q.response_schema));
  if (q.details) block.append(detailLine("details", q.details));

  const setBusy = (busy) => {
    for (const el of form.querySelectorAll("button, input, select")) {
      if (el !== more) el.disabled = busy;
    }
  };
  const settle = (promise) => {
    setBusy(true);
    problem.hidden = true;
    Promise.resolve(promise).catch((err) => {
      problem.hidden = false;
      problem.textContent = errorText(err && err.code);
      problem.title = `${err && err.code ? err.code : "error"}: ${err && err.message ? err.message : ""}`;
      setBusy(false);
    });
  };
  const choice = (label, value, primary = false) => {
    const button = document.createElement("button");
    button.type = "button";
    button.className = primary ? "choice primary-choice" : "choice";
    button.dataset.testid = "choice";
    button.textContent = label;
    button.onclick = () => settle(answer(value));
    return button;
  };

  const shape = questionShape(q);
  if (shape.kind === "approve") {
    controls.append(choice("Approve", { approved: true }, true), choice("Deny", { approved: false }));
  } else if (shape.kind === "choice") {
    for (const member of shape.members) {
      const value = shape.field === undefined ? member : { [shape.field]: member };
      controls.append(choice(choiceLabel(member), value));
    }
  } else if (shape.kind === "form") {
    const required = new Set(resolveSchema(q.response_schema ?? {}).required ?? []);
    const inputs = [];
    for (const [name, schema] of shape.fields) {
      const label = document.createElement("label");
      label.className = "field";
      const caption = document.createElement("span");
      caption.textContent = `${schema.title ?? name}${required.has(name) ? "" : " (optional)"}`;
      const input = fieldInput(name, schema, required.has(name));
      if (input.type === "checkbox") {
        label.classList.add("check");
        label.append(input, caption);
      } else label.append(caption, input);
      controls.append(label);
      inputs.push([name, schema, input]);
    }
    const send = document.createElement("button");
    send.type = "submit";
    send.className = "choice primary-choice";
    send.dataset.testid = "submit-answer";
    send.textContent = "Answer";
    controls.append(send);
    form.onsubmit = (ev) => {
      ev.preventDefault();
      const value = {};
      for (const [name, schema, input] of inputs) {
        const v = fieldValue(input, schema);
        if (v !== undefined) value[name] = v;
      }
      settle(answer(value));
    };
  } else {
    const input = document.createElement("input");
    input.name = "answer";
    input.dataset.testid = "answer";
    input.placeholder = "Your answer";
    input.required = true;
    const send = document.createElement("button");
    send.type = "submit";
    send.className = "choice primary-choice";
    send.dataset.testid = "submit-answer";
    send.textContent = "Answer";
    controls.append(input, send);
    form.onsubmit = (ev) => {
      ev.preventDefault();
      settle(answer(readAnswer(input.value, q.response_schema)));
    };
  }
  if (shape.kind !== "form" && shape.kind !== "text") form.onsubmit = (ev) => ev.preventDefault();
  const skip = document.createElement("button");
  skip.type = "button";
  skip.className = "decline";
  skip.dataset.testid = "decline";
  skip.textContent = "Skip question";
  skip.onclick = () => settle(decline());
  const foot = document.createElement("div");
  foot.className = "question-foot";
  foot.append(skip, more);
  form.append(title, controls, problem, foot, block);
  return form;
}
