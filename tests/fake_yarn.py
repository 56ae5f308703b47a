"""FAKE YARN for tests: a ResourceManager REST server and a spark-submit that registers with it.

No YARN runs here: the tests that use it show what a real ResourceManager (demo/yarn_cluster.py, the
``yarn`` fixture) cannot, an answer it refuses (a kill not allowed) and a submission that fails in a way
of the test's choosing, without a cluster. ``FakeResourceManager`` answers the REST calls the yarn
target uses, the way Hadoop's ResourceManager does:

- ``GET /ws/v1/cluster/apps?applicationTags=a,b&states=S1,S2``: applications having any
  of the tags, in any of the states, as ``{"apps": {"app": [...]}}`` (``{"apps": null}``
  when none);
- ``GET /ws/v1/cluster/apps/<id>/appattempts``: one attempt;
- ``PUT /ws/v1/cluster/apps/<id>/state`` with ``{"state": "KILLED"}``: 202 and the app
  becomes KILLED; 404 for an unknown application;
- while ``unavailable`` is above 0, each GET or PUT is answered 503 with a ``RemoteException`` message (and counts it
  down), as a busy ResourceManager may answer.

``fake_spark_submit(path, rm_url)`` writes an executable that stands in for
``spark-submit --master yarn --deploy-mode cluster``: it records its argument list and
registers an application with the name and ``spark.yarn.tags`` it was given
(lowercased, as YARN does), through a ``POST /fake/submit`` that only the fake has.
"""

from __future__ import annotations

import itertools
import json
import sys
import threading
import time
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

CLUSTER_TIMESTAMP = 1767225600000


class FakeResourceManager:
    def __init__(self) -> None:
        self.apps: dict[str, dict] = {}
        self.kills: list[str] = []
        self.submissions: list[list[str]] = []
        self.fail_kills = False
        self.unavailable = 0  # the next GETs answered 503
        self.gets = 0  # every GET answered, refused or not
        self._ids = itertools.count(1)
        self._lock = threading.Lock()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    def __enter__(self) -> FakeResourceManager:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()

    def add_app(self, name: str, tags: list[str], state: str = "RUNNING") -> str:
        with self._lock:
            app_id = f"application_{CLUSTER_TIMESTAMP}_{next(self._ids):04d}"
            self.apps[app_id] = {
                "id": app_id,
                "name": name,
                "state": state,
                "queue": "default",
                "applicationTags": ",".join(t.lower() for t in tags),
                "startedTime": int(time.time() * 1000),
                "trackingUrl": f"http://fake-rm:8088/proxy/{app_id}/",
            }
            return app_id

    def state(self, app_id: str) -> str:
        return self.apps[app_id]["state"]

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        rm = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:
                pass

            def _reply(self, code: int, body: object) -> None:
                data = json.dumps(body).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def _body(self) -> dict:
                return json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")

            def _busy(self) -> bool:
                """Answered 503, as a busy ResourceManager may, while ``rm.unavailable`` counts down."""
                with rm._lock:
                    busy = rm.unavailable > 0
                    rm.unavailable -= busy
                if busy:
                    said = {"exception": "ConcurrentModificationException", "message": "attempts changed,\n try again"}
                    self._reply(503, {"RemoteException": said})
                return busy

            def do_GET(self) -> None:
                with rm._lock:
                    rm.gets += 1
                if self._busy():
                    return
                url = urllib.parse.urlparse(self.path)
                parts = url.path.strip("/").split("/")
                if parts[:4] == ["ws", "v1", "cluster", "apps"] and parts[5:] == ["appattempts"]:
                    app_id = parts[4]  # one attempt, as an application YARN has launched once
                    attempt = {"id": 1, "appAttemptId": f"appattempt{app_id.removeprefix('application')}_000001"}
                    found = app_id in rm.apps
                    self._reply(200 if found else 404, {"appAttempts": {"appAttempt": [attempt]}} if found else {})
                    return
                if url.path != "/ws/v1/cluster/apps":
                    self._reply(404, {"RemoteException": {"message": f"no resource {url.path}"}})
                    return
                query = urllib.parse.parse_qs(url.query)
                tags = {t.lower() for v in query.get("applicationTags", []) for t in v.split(",") if t}
                states = {s for v in query.get("states", []) for s in v.split(",") if s}
                with rm._lock:
                    apps = [
                        a
                        for a in rm.apps.values()
                        if (not tags or tags & set(a["applicationTags"].split(",")))
                        and (not states or a["state"] in states)
                    ]
                self._reply(200, {"apps": {"app": apps} if apps else None})

            def do_PUT(self) -> None:
                if self._busy():
                    return
                parts = urllib.parse.urlparse(self.path).path.strip("/").split("/")
                if parts[:4] != ["ws", "v1", "cluster", "apps"] or len(parts) != 6 or parts[5] != "state":
                    self._reply(404, {"RemoteException": {"message": "no such resource"}})
                    return
                app_id, wanted = parts[4], self._body().get("state")
                with rm._lock:
                    if app_id not in rm.apps:
                        self._reply(404, {"RemoteException": {"message": f"application {app_id} not found"}})
                        return
                    if rm.fail_kills:
                        self._reply(403, {"RemoteException": {"message": "not allowed"}})
                        return
                    if wanted != "KILLED":
                        self._reply(400, {"RemoteException": {"message": f"cannot move to {wanted}"}})
                        return
                    rm.apps[app_id]["state"] = "KILLED"
                    rm.kills.append(app_id)
                self._reply(202, {"state": "KILLED"})

            def do_POST(self) -> None:
                if self.path != "/fake/submit":
                    self._reply(404, {})
                    return
                body = self._body()
                rm.submissions.append(body["args"])
                app_id = rm.add_app(body["name"], body["tags"], state="ACCEPTED")
                self._reply(200, {"id": app_id})

        return Handler


FAKE_SPARK_SUBMIT = '''#!{python}
"""FAKE spark-submit for YARN tests: records its arguments and registers an app with the fake RM."""
import json, sys, urllib.request
args = sys.argv[1:]
if {fail!r}:
    print("Exception in thread main: org.apache.hadoop.yarn.exceptions.YarnException: queue is full",
          file=sys.stderr)
    sys.exit(1)
conf = dict(a.split("=", 1) for prev, a in zip(args, args[1:]) if prev == "--conf")
name = args[args.index("--name") + 1]
tags = [t for t in conf.get("spark.yarn.tags", "").split(",") if t]
body = json.dumps({{"args": sys.argv, "name": name, "tags": tags}}).encode()
request = urllib.request.Request("{rm}/fake/submit", data=body, method="POST")
print(json.load(urllib.request.urlopen(request))["id"])
'''


def fake_spark_submit(path: Path, resource_manager: str, *, fail: bool = False) -> Path:
    path.write_text(FAKE_SPARK_SUBMIT.format(python=sys.executable, rm=resource_manager, fail=fail))
    path.chmod(0o755)
    return path
