"""A loopback HTTP server speaking the part of the Hugging Face Hub API that `create_repo` and `upload_folder` use.

It answers every preupload with ``uploadMode: regular``, so huggingface_hub sends each file's content inline
(base64) in the commit request, and it keeps the files of every commit in memory for the test to inspect.
"""

from __future__ import annotations

import base64
import json
import re
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from huggingface_hub import ModelCard

__all__ = ["FakeHub", "validate_card"]


def validate_card(content: str) -> list[dict]:
    """The checks the Hub's validate-yaml endpoint makes that matter here: the front matter parses, and its
    model-index parses into evaluation results."""
    try:
        card = ModelCard(content, ignore_metadata_errors=False)
        card.data.to_dict()
    except Exception as error:  # any parse failure is a validation error
        return [{"message": f"{type(error).__name__}: {error}"}]
    return []


class FakeHub:
    """``with FakeHub() as hub:`` serves on 127.0.0.1; point ``HF_ENDPOINT`` at ``hub.endpoint``."""

    def __init__(self, fail_commits: bool = False):
        self.repos: dict[str, dict[str, bytes]] = {}
        self.created: list[dict] = []
        self.requests: list[str] = []
        self.tokens: list[str] = []  # the bearer tokens requests came with
        self.validated = 0
        self.fail_commits = fail_commits
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler_class())
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def endpoint(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    def __enter__(self) -> FakeHub:
        self._thread.start()
        return self

    def __exit__(self, *exc_info) -> None:
        self._server.shutdown()
        self._server.server_close()

    def _handler_class(self):
        hub = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):  # keep test output quiet
                pass

            def _reply(self, status: int, payload) -> None:
                body = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def _record_token(self) -> None:
                authorization = self.headers.get("Authorization", "")
                if authorization.startswith("Bearer "):
                    hub.tokens.append(authorization[len("Bearer ") :])

            def _body(self) -> bytes:
                return self.rfile.read(int(self.headers.get("Content-Length", 0)))

            def do_GET(self):
                hub.requests.append(f"GET {self.path}")
                self._record_token()
                if self.path.startswith("/api/whoami-v2"):
                    return self._reply(200, {"name": "tester", "type": "user", "orgs": []})
                match = re.match(r"^/api/models/([^/]+/[^/]+)(?:/revision/[^/?]+)?(?:\?.*)?$", self.path)
                if match and match.group(1) in hub.repos:
                    files = [{"rfilename": name} for name in sorted(hub.repos[match.group(1)])]
                    return self._reply(200, {"id": match.group(1), "sha": "0" * 40, "siblings": files})
                return self._reply(404, {"error": f"not found: {self.path}"})

            def do_POST(self):
                hub.requests.append(f"POST {self.path}")
                self._record_token()
                body = self._body()
                if self.path == "/api/validate-yaml":
                    errors = validate_card(json.loads(body)["content"])
                    hub.validated += 1
                    return self._reply(400 if errors else 200, {"errors": errors, "warnings": []})
                if self.path == "/api/repos/create":
                    request = json.loads(body)
                    repo_id = f"{request.get('organization') or 'tester'}/{request['name']}"
                    hub.created.append(request)
                    hub.repos.setdefault(repo_id, {})
                    return self._reply(200, {"url": f"{hub.endpoint}/{repo_id}", "name": repo_id})
                match = re.match(r"^/api/models/([^/]+/[^/]+)/preupload/[^/?]+", self.path)
                if match:
                    files = json.loads(body)["files"]
                    modes = [{"path": f["path"], "uploadMode": "regular", "shouldIgnore": False} for f in files]
                    return self._reply(200, {"files": modes})
                match = re.match(r"^/api/models/([^/]+/[^/]+)/commit/[^/?]+", self.path)
                if match:
                    if hub.fail_commits:
                        return self._reply(403, {"error": "the fake Hub refuses commits in this test"})
                    repo = hub.repos.setdefault(match.group(1), {})
                    for line in body.decode().splitlines():
                        entry = json.loads(line)
                        if entry.get("key") == "file":
                            repo[entry["value"]["path"]] = base64.b64decode(entry["value"]["content"])
                    commit_url = f"{hub.endpoint}/{match.group(1)}/commit/{'1' * 40}"
                    return self._reply(200, {"commitUrl": commit_url, "commitOid": "1" * 40, "success": True})
                return self._reply(404, {"error": f"not found: {self.path}"})

        return Handler
