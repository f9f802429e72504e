"""A "no-framework" operator on the official Kubernetes client, as a team
writes one without opkit: the peer the bench measures beside opkit's
handlers (bench/peers.go starts it with Debian's python3, never through a
shell).

    python3 peer_python.py printers NAMESPACE COMMAND [ARG...]
    python3 peer_python.py deployments NAMESPACE SELECTOR COMMAND [ARG...]

printers: a watch loop on the namespace's Printers; each new one is handed
to a pool of 8 threads, which does what bench/printer-exec.yaml declares:
the ConfigMap child (with a controller ownerReference), the handler
COMMAND run once with the handler's input on stdin, as opkit's exec
handler runs it, and one status patch with the child's name and the
handler's result.

deployments: a watch loop on the namespace's Deployments that SELECTOR
selects; COMMAND runs for each one first seen and each change of its
containers, as bench/watch.yaml's handler does; nothing is written.

The bench reads what it did from the file $OPKIT_BENCH_REPORT, one JSON
line per write ({"write": "POST configmaps"}) and per object handled
({"name": ..., "trigger": "create" or "update", "at": Unix ns}).
"""

import json
import os
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor

from kubernetes import client, config, watch

GROUP, VERSION, PLURAL = "bench.opkit.dev", "v1", "printers"
WORKERS = 8


class Report:
    """Appends the report's lines; one line per write(2), under a lock."""

    def __init__(self, path):
        self.lock = threading.Lock()
        self.fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)

    def line(self, **fields):
        data = (json.dumps(fields) + "\n").encode()
        with self.lock:
            os.write(self.fd, data)

    def write(self, what):
        self.line(write=what)

    def handled(self, name, trigger):
        self.line(name=name, trigger=trigger, at=time.time_ns())


def run_handler(command, trigger, obj):
    """Runs the handler as opkit's exec handler does: the input on stdin,
    a JSON result on stdout; returns the result's status."""
    payload = json.dumps({"trigger": trigger, "object": obj}).encode()
    out = subprocess.run(command, input=payload, stdout=subprocess.PIPE, check=True, timeout=60).stdout
    result = json.loads(out) if out.strip() else {}
    return result.get("status") or {}


def printers(namespace, command, report):
    custom = client.CustomObjectsApi()
    core = client.CoreV1Api()

    def handle(obj):
        meta = obj["metadata"]
        name = meta["name"]
        child = name + "-text"
        cm = client.V1ConfigMap(
            metadata=client.V1ObjectMeta(
                name=child, namespace=namespace,
                owner_references=[client.V1OwnerReference(
                    api_version=GROUP + "/" + VERSION, kind="Printer", name=name, uid=meta["uid"],
                    controller=True, block_owner_deletion=True)]),
            data={"text": obj["spec"]["text"]})
        try:
            report.write("POST configmaps")
            core.create_namespaced_config_map(namespace, cm)
        except client.exceptions.ApiException as e:
            if e.status != 409:
                raise
        status = {"configMap": child}
        status.update(run_handler(command, "create", obj))
        report.write("PATCH printers/status")
        custom.patch_namespaced_custom_object_status(GROUP, VERSION, namespace, PLURAL, name, {"status": status})
        report.handled(name, "create")

    def safely(obj):
        try:
            handle(obj)
        except Exception as e:  # a team's loop logs and goes on
            print("handling %s: %s" % (obj["metadata"]["name"], e), file=sys.stderr, flush=True)

    with ThreadPoolExecutor(max_workers=WORKERS) as pool:
        w = watch.Watch()
        for event in w.stream(custom.list_namespaced_custom_object, GROUP, VERSION, namespace, PLURAL):
            obj = event["object"]
            if event["type"] == "ADDED" and not (obj.get("status") or {}).get("touched"):
                pool.submit(safely, obj)


def deployments(namespace, selector, command, report):
    apps = client.AppsV1Api()
    sanitize = client.ApiClient().sanitize_for_serialization
    seen = {}  # name: (uid, containers as JSON) last handled
    lock = threading.Lock()

    def handle(name, trigger):
        try:
            subprocess.run(command, stdin=subprocess.DEVNULL, check=True, timeout=60)
            report.handled(name, trigger)
        except Exception as e:
            print("handling %s: %s" % (name, e), file=sys.stderr, flush=True)

    with ThreadPoolExecutor(max_workers=WORKERS) as pool:
        w = watch.Watch()
        for event in w.stream(apps.list_namespaced_deployment, namespace, label_selector=selector):
            d = event["object"]
            name = d.metadata.name
            with lock:
                if event["type"] == "DELETED":
                    seen.pop(name, None)
                    continue
                containers = json.dumps(sanitize(d.spec.template.spec.containers), sort_keys=True)
                last = seen.get(name)
                if last is None or last[0] != d.metadata.uid:
                    trigger = "create"
                elif last[1] != containers:
                    trigger = "update"
                else:
                    continue
                seen[name] = (d.metadata.uid, containers)
            pool.submit(handle, name, trigger)


def main(argv):
    if len(argv) < 4 or argv[1] not in ("printers", "deployments") or (argv[1] == "deployments" and len(argv) < 5):
        sys.exit(__doc__)
    config.load_kube_config()
    report = Report(os.environ["OPKIT_BENCH_REPORT"])
    if argv[1] == "printers":
        printers(argv[2], argv[3:], report)
    else:
        deployments(argv[2], argv[3], argv[4:], report)


if __name__ == "__main__":
    main(sys.argv)
