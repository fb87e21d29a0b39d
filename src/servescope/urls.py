"""The one place that turns a user's `--url` into the two URLs servescope talks to (pure).

A target is given "with or without /v1" (`http://h:p`, `http://h:p/`, `http://h:p/v1`, `http://h:p/v1/`).
The OpenAI routes live under the API base (`…/v1`); `/metrics`, `/tokenize`, `/version` and the other
engine endpoints live at the server root (the base without `/v1`). Both `client/` and `target/` import
this module, so it depends on nothing.
"""

from __future__ import annotations

__all__ = ["api_base", "server_root"]

_V1 = "/v1"


def server_root(url: str) -> str:
    """`http://h:p/v1/` -> `http://h:p`: surrounding blanks, trailing slashes and one `/v1` removed."""
    return url.strip().rstrip("/").removesuffix(_V1)


def api_base(url: str) -> str:
    """`http://h:p`, `http://h:p/` and `http://h:p/v1/` all become `http://h:p/v1`."""
    return server_root(url) + _V1
