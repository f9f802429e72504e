#!/usr/bin/env python3
"""Reports what this handler can reach of the API server, as its result's
status under its own name ($OPKIT_HANDLER), with Python's standard library
alone:

  tokenFile    whether a ServiceAccount token is mounted where client-go's
               in-cluster configuration reads it
  serviceEnv   whether $KUBERNETES_SERVICE_HOST is set
  inCluster    what the API server answers a SelfSubjectReview made as the
               in-cluster configuration would make it: with that token if
               there is one, else with none
  runnerTokenFile  whether the runner's own token is there (the token the
               agent dials the engine with, of the audience opkit.dev/runner)
  runnerToken  what it answers one made with that token
  kubeconfig   with $KUBECONFIG (exec.serviceAccount), what it answers one
               made with that kubeconfig's server, CA and token

roots are the directories it looked for the files under. An answer is
{"code": HTTP status, "user": the username it names} or {"error": why no
answer came}. The server without a kubeconfig is $API_SERVER.
"""
import base64
import json
import os
import ssl
import sys
import urllib.error
import urllib.request

TOKEN = "/var/run/secrets/kubernetes.io/serviceaccount/token"
RUNNER_TOKEN = "/var/run/secrets/opkit.dev/runner/token"
# The Pod's root: / in a runner's container; on the local plane's dev
# node, which runs a Pod's processes on the host, the directory its Pod's
# paths are under, which it gives as $HOME (as a container of a user
# without a home has HOME=/). A file is looked for under both.
ROOTS = sorted({"/", os.environ.get("HOME") or "/"})


def read(path):
    for root in ROOTS:
        try:
            with open(os.path.join(root, path.lstrip("/")), encoding="utf-8") as f:
                return f.read().strip()
        except OSError:
            pass
    return None


def review(server, token=None, ca=None):
    """POSTs a SelfSubjectReview: who the API server takes the caller for."""
    if ca:
        ctx = ssl.create_default_context(cadata=ca)
    else:
        # No CA to check the server with: what it answers is what counts.
        ctx = ssl._create_unverified_context()  # noqa: S323
    body = json.dumps({"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"}).encode()
    req = urllib.request.Request(
        server.rstrip("/") + "/apis/authentication.k8s.io/v1/selfsubjectreviews",
        data=body, method="POST", headers={"Content-Type": "application/json"})
    if token:
        req.add_header("Authorization", "Bearer " + token)
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}), urllib.request.HTTPSHandler(context=ctx))
    try:
        with opener.open(req, timeout=10) as resp:
            got = json.load(resp)
            return {"code": resp.status, "user": got.get("status", {}).get("userInfo", {}).get("username", "")}
    except urllib.error.HTTPError as e:
        return {"code": e.code}
    except (OSError, ValueError) as e:
        return {"error": str(e)}


def main():
    server = os.environ.get("API_SERVER", "")
    report = {
        "roots": ROOTS,
        "tokenFile": read(TOKEN) is not None,
        "serviceEnv": "KUBERNETES_SERVICE_HOST" in os.environ,
        "inCluster": review(server, read(TOKEN)),
        "runnerTokenFile": read(RUNNER_TOKEN) is not None,
        "runnerToken": review(server, read(RUNNER_TOKEN)),
    }
    if os.environ.get("KUBECONFIG"):
        # opkit writes it as JSON: server, CA and token read as such.
        with open(os.environ["KUBECONFIG"], encoding="utf-8") as f:
            kc = json.load(f)
        cluster = kc["clusters"][0]["cluster"]
        ca = base64.b64decode(cluster["certificate-authority-data"]).decode() if cluster.get("certificate-authority-data") else None
        report["kubeconfig"] = review(cluster["server"], kc["users"][0]["user"]["token"], ca)
    print(f"probe: {json.dumps(report)}", file=sys.stderr)
    json.dump({"status": {os.environ["OPKIT_HANDLER"]: report}}, sys.stdout)


main()
