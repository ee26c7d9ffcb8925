"""The Python floor of case 0b (bench/startup.py): the least a Python tool must do for a diff of one object.

Start the interpreter, read the kubeconfig (PyYAML's C loader), open TLS with the kubeconfig's CA and client
certificate, and send what `kubectl diff --server-side` sends: GET the object, then a dry-run server-side
apply. Standard library and PyYAML only; no rendering, planning or report. Run as a script by the bench:

    python bench/startup_floor.py KUBECONFIG NAMESPACE FILE
"""

import base64
import http.client
import json
import os
import ssl
import sys
import tempfile
from urllib.parse import urlsplit

import yaml


def main(kubeconfig: str, namespace: str, file: str) -> int:
    with open(kubeconfig) as f:
        config = yaml.load(f, Loader=yaml.CSafeLoader)
    current = config["current-context"]
    context = next(c["context"] for c in config["contexts"] if c["name"] == current)
    cluster = next(c["cluster"] for c in config["clusters"] if c["name"] == context["cluster"])
    user = next(u["user"] for u in config["users"] if u["name"] == context["user"])
    tls = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    tls.load_verify_locations(cadata=base64.b64decode(cluster["certificate-authority-data"]).decode())
    with tempfile.TemporaryDirectory() as tmp:
        cert, key = os.path.join(tmp, "c"), os.path.join(tmp, "k")
        for path, name in ((cert, "client-certificate-data"), (key, "client-key-data")):
            with open(path, "wb") as out:
                out.write(base64.b64decode(user[name]))
        tls.load_cert_chain(cert, key)
    with open(file) as f:
        obj = yaml.load(f, Loader=yaml.CSafeLoader)
    server = urlsplit(cluster["server"])
    conn = http.client.HTTPSConnection(server.hostname or "", server.port, context=tls, timeout=30)
    path = f"/api/v1/namespaces/{namespace}/configmaps/{obj['metadata']['name']}"
    headers = {"User-Agent": "gitops-sync-startup-floor", "Accept": "application/json"}
    conn.request("GET", path, headers=headers)
    live = json.loads(conn.getresponse().read())
    conn.request(
        "PATCH",
        path + "?dryRun=All&fieldManager=kubectl&force=true",
        body=json.dumps(obj),
        headers={**headers, "Content-Type": "application/apply-patch+yaml"},
    )
    response = conn.getresponse()
    merged = json.loads(response.read())
    conn.close()
    same = merged.get("data") == live.get("data")
    return 0 if response.status == 200 and same else 1


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:4]))
