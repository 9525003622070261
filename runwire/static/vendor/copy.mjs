// Copies the chat page's libraries from node_modules into this folder (run by `npm run vendor`).
import { copyFileSync } from "node:fs";

const hl = "node_modules/@highlightjs/cdn-assets";
export const LANGUAGES = [
  "bash", "css", "diff", "go", "java", "javascript", "json", "markdown", "plaintext",
  "python", "rust", "shell", "sql", "typescript", "xml", "yaml",
];
const files = {
  "node_modules/marked/lib/marked.esm.js": "marked.esm.js",
  "node_modules/marked/LICENSE": "LICENSE.marked",
  "node_modules/dompurify/dist/purify.min.js": "purify.min.js",
  "node_modules/dompurify/LICENSE": "LICENSE.dompurify",
  [`${hl}/es/core.min.js`]: "hljs-core.min.js",
  [`${hl}/styles/github.min.css`]: "hljs-github.min.css",
  [`${hl}/LICENSE`]: "LICENSE.highlightjs",
};
for (const lang of LANGUAGES) files[`${hl}/es/languages/${lang}.min.js`] = `hljs-${lang}.min.js`;
for (const [from, to] of Object.entries(files)) copyFileSync(from, to);
console.log(`copied ${Object.keys(files).length} files`);
