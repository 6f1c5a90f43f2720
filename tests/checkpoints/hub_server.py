"""A Hugging Face Hub endpoint on 127.0.0.1, for the tests: enough of the
hub's HTTP API that `huggingface_hub.snapshot_download` works against it
through `HF_ENDPOINT`, serving model repositories from folders, with real
revisions (commits, branches, tags), gated repositories and the hub's
error codes.

    with HubServer() as hub:
        old = hub.commit("org/tiny-gpt2", "checkpoints/gpt2-v1", tags=("v1",))
        hub.commit("org/tiny-gpt2", "checkpoints/gpt2-v2")  # main moves on
        hub.commit("org/gated", "checkpoints/gpt2-v2", token="hf_secret")
        point_huggingface_hub(monkeypatch, hub.endpoint, tmp_path / "hf_home")

The routes huggingface_hub 2.4 calls:

    GET       /api/models/{org}/{name}/revision/{rev}   repository info: `sha`, `siblings`
    GET       /api/models/{org}/{name}/tree/{rev}        the files: `path`, `size`, `oid`
    HEAD, GET /{org}/{name}/resolve/{rev}/{path}         a file: `X-Repo-Commit`, `ETag`, `Content-Length`

and the errors as the hub gives them (`X-Error-Code`, which huggingface_hub
turns into its exceptions): 401 `RepoNotFound` for an unknown repository,
404 `RevisionNotFound`, 404 `EntryNotFound`, and 401 `GatedRepo` for a
gated repository's files without its token (its info stays public, as on
the hub).
"""

import hashlib
import importlib.util
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import unquote, urlsplit


def blob_id(content):
    """git's object id of a file (the hub's ETag of a file not in LFS)."""
    return hashlib.sha1(b"blob %d\0" % len(content) + content).hexdigest()


class Repository:
    """Commits {sha: {path: bytes}}, refs {branch or tag: sha}, and the token a gated one wants."""

    def __init__(self):
        self.commits, self.refs, self.token = {}, {}, None


class HubServer:
    """The endpoint, started on a free port of 127.0.0.1 (`endpoint`), in a thread.

    `requests` lists (method, path) of every request served, so a test can
    check that something was refused before any network access.
    """

    def __init__(self):
        self.repositories = {}
        self.requests = []
        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.httpd.hub = self
        self.endpoint = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self.thread = None

    def commit(self, repo_id, folder, branch="main", tags=(), token=None):
        """Commits every file of `folder` (a snapshot of its bytes now) to
        `repo_id` on `branch`, tagged `tags`; `token` gates the repository.
        Returns the commit's 40-hex sha."""
        repository = self.repositories.setdefault(repo_id, Repository())
        paths = sorted(p for p in Path(folder).rglob("*") if p.is_file())
        files = {p.relative_to(folder).as_posix(): p.read_bytes() for p in paths}
        parent = repository.refs.get(branch, "")
        tree = "".join(f"{path} {blob_id(content)}\n" for path, content in files.items())
        sha = hashlib.sha1(f"parent {parent}\n{tree}{len(repository.commits)}".encode()).hexdigest()
        repository.commits[sha] = files
        for ref in (branch, *tags):
            repository.refs[ref] = sha
        if token is not None:
            repository.token = token
        return sha

    def start(self):
        # A short poll: `stop` waits for the serving loop to notice, once per test.
        self.thread = threading.Thread(target=self.httpd.serve_forever, args=(0.02,), daemon=True)
        self.thread.start()
        return self

    def stop(self):
        """Stops serving and closes the port: later connections are refused."""
        if self.thread is not None:
            self.httpd.shutdown()
            self.thread.join()
            self.thread = None
        self.httpd.server_close()

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()


class Handler(BaseHTTPRequestHandler):
    # HTTP/1.0: one request per connection, so a stopped server serves nothing more.

    def log_message(self, *args):
        pass

    def do_GET(self):
        self.answer(with_body=True)

    def do_HEAD(self):
        self.answer(with_body=False)

    def answer(self, with_body):
        hub = self.server.hub
        hub.requests.append((self.command, self.path))
        segments = urlsplit(self.path).path.strip("/").split("/")
        if segments[:2] == ["api", "models"] and len(segments) >= 6 and segments[4] in ("revision", "tree"):
            repo_id, route, revision = "/".join(segments[2:4]), segments[4], unquote(segments[5])
            path = None
        elif len(segments) >= 5 and segments[2] == "resolve":
            repo_id, route, revision = "/".join(segments[:2]), "resolve", unquote(segments[3])
            path = unquote("/".join(segments[4:]))
        else:
            return self.error(404, None, "Not found")
        repository = hub.repositories.get(repo_id)
        if repository is None:
            return self.error(401, "RepoNotFound", "Repository not found")
        sha = repository.refs.get(revision, revision if revision in repository.commits else None)
        if sha is None:
            return self.error(404, "RevisionNotFound", f"Invalid rev id: {revision}")
        files = repository.commits[sha]
        if route == "revision":
            siblings = [{"rfilename": name} for name in files]
            gated = "manual" if repository.token else False
            info = {"id": repo_id, "modelId": repo_id, "sha": sha, "private": False, "gated": gated,
                    "siblings": siblings}
            return self.send(200, json.dumps(info).encode(), {"Content-Type": "application/json"}, with_body)
        if route == "tree":
            folders = sorted({"/".join(name.split("/")[:i]) for name in files for i in range(1, name.count("/") + 1)})
            entries = [{"type": "directory", "path": f, "oid": blob_id(f.encode()), "size": 0} for f in folders]
            entries += [{"type": "file", "path": name, "oid": blob_id(content), "size": len(content)}
                        for name, content in files.items()]
            return self.send(200, json.dumps(entries).encode(), {"Content-Type": "application/json"}, with_body)
        if repository.token and self.headers.get("Authorization") != f"Bearer {repository.token}":
            return self.error(401, "GatedRepo", f"Access to model {repo_id} is restricted. You must have access to it "
                              "and be authenticated to access it. Please log in.")
        if path not in files:
            return self.error(404, "EntryNotFound", f"{path} does not exist on {revision}", {"X-Repo-Commit": sha})
        content = files[path]
        headers = {"Content-Type": "application/octet-stream", "X-Repo-Commit": sha, "ETag": f'"{blob_id(content)}"'}
        return self.send(200, content, headers, with_body)

    def error(self, status, code, message, headers=None):
        headers = {"Content-Type": "application/json", "X-Error-Message": message, **(headers or {})}
        if code:
            headers["X-Error-Code"] = code
        self.send(status, json.dumps({"error": message}).encode(), headers, self.command != "HEAD")

    def send(self, status, body, headers, with_body):
        self.send_response(status)
        for name, value in {**headers, "Content-Length": str(len(body))}.items():
            self.send_header(name, value)
        self.end_headers()
        if with_body:
            self.wfile.write(body)


def point_huggingface_hub(monkeypatch, endpoint, home, offline=False, token=None):
    """Sets HF_ENDPOINT, HF_HOME, HF_HUB_OFFLINE and HF_TOKEN (unset when
    None) for this process and the processes it starts. huggingface_hub
    reads most of them once, at import, into `huggingface_hub.constants`:
    those are patched with what a new process would read (the module run
    again under these variables)."""
    from huggingface_hub import constants

    variables = {"HF_ENDPOINT": endpoint, "HF_HOME": str(home), "HF_HUB_OFFLINE": "1" if offline else None,
                 "HF_TOKEN": token}
    # Unset: they would override the ones above.
    for name in ("HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE", "HF_TOKEN_PATH", "TRANSFORMERS_OFFLINE",
                 "HUGGING_FACE_HUB_TOKEN"):
        variables.setdefault(name, None)
    for name, value in variables.items():
        if value is None:
            monkeypatch.delenv(name, raising=False)
        else:
            monkeypatch.setenv(name, value)
    spec = importlib.util.find_spec("huggingface_hub.constants")
    fresh = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(fresh)
    for name, value in vars(fresh).items():
        if name.isupper() and getattr(constants, name, None) != value:
            monkeypatch.setattr(constants, name, value)
