"""The chat page's own files, served by the relay at ``/static/...`` from a fixed list.

The page (``runwire/static/index.html``) imports its rendering module and the
libraries vendored under ``runwire/static/vendor/``. Only the names listed here
are served, each with its content type: a request path is looked up as a whole,
so no path can reach another file.
"""

from __future__ import annotations

from pathlib import Path

__all__ = ["STATIC_DIR", "STATIC_FILES", "VENDOR_FILES", "static_file"]

STATIC_DIR = Path(__file__).resolve().parent.parent / "runwire" / "static"
"""Where the chat page's files are (found beside the installed packages)."""

_PAGE_FILES = ("chat-render.js",)
_LANGUAGES = (
    "bash",
    "css",
    "diff",
    "go",
    "java",
    "javascript",
    "json",
    "markdown",
    "plaintext",
    "python",
    "rust",
    "shell",
    "sql",
    "typescript",
    "xml",
    "yaml",
)
VENDOR_FILES = (
    "marked.esm.js",
    "purify.min.js",
    "hljs-core.min.js",
    "hljs-github.min.css",
    *(f"hljs-{lang}.min.js" for lang in _LANGUAGES),
)
"""The vendored libraries' files (see ``runwire/static/vendor/README.md``)."""

_TYPES = {".js": "text/javascript; charset=utf-8", ".css": "text/css; charset=utf-8"}

STATIC_FILES: dict[str, tuple[Path, str]] = {
    f"/static/{name}": (STATIC_DIR / name, _TYPES[Path(name).suffix]) for name in _PAGE_FILES
} | {
    f"/static/vendor/{name}": (STATIC_DIR / "vendor" / name, _TYPES[Path(name).suffix])
    for name in VENDOR_FILES
}
"""Request path -> the file served there and its content type."""


def static_file(path: str) -> tuple[Path, str] | None:
    """The file and content type served at ``path``, or None when none is."""
    return STATIC_FILES.get(path)
