#!/usr/bin/python3
"""shell-operator's hook for the bench's peer (bench/peers.go writes it into
shell-operator's hooks directory). Only Python's standard library: it
reads the binding context, runs the handler, and leaves the writes to
shell-operator through $KUBERNETES_PATCH_PATH; nothing of an object
reaches a shell.

$OPKIT_BENCH_PEER is the workload:
  printers     Printers of $OPKIT_BENCH_NAMESPACE: for each new one, what
               bench/printer-exec.yaml declares: the ConfigMap child, the
               handler run once with its input on stdin, and one status
               patch with the child's name and the handler's result.
  deployments  Deployments of $OPKIT_BENCH_NAMESPACE labelled
               $OPKIT_BENCH_SELECTOR (key=value): the handler runs on each
               one first seen and each change of its containers.
$OPKIT_BENCH_COMMAND is the handler's command, a JSON array.
$OPKIT_BENCH_REPORT is where the hook reports each write it asks for and
each object handled, one JSON line each (as peer_python.py does).
"""

import json
import os
import subprocess
import sys
import time

GROUP, VERSION = "bench.opkit.dev", "v1"


def config():
    ns = os.environ["OPKIT_BENCH_NAMESPACE"]
    if os.environ["OPKIT_BENCH_PEER"] == "printers":
        binding = {
            "name": "printers", "apiVersion": GROUP + "/" + VERSION, "kind": "Printer",
            "executeHookOnEvent": ["Added"],
            "namespace": {"nameSelector": {"matchNames": [ns]}},
        }
    else:
        key, _, value = os.environ["OPKIT_BENCH_SELECTOR"].partition("=")
        binding = {
            "name": "deployments", "apiVersion": "apps/v1", "kind": "Deployment",
            "executeHookOnEvent": ["Added", "Modified"],
            "namespace": {"nameSelector": {"matchNames": [ns]}},
            "labelSelector": {"matchLabels": {key: value}},
            # A change is an event only when the filter's result changes:
            # the containers (the name never changes).
            "jqFilter": "{name: .metadata.name, containers: .spec.template.spec.containers}",
            "keepFullObjectsInMemory": False,
        }
    print(json.dumps({"configVersion": "v1", "kubernetes": [binding]}))


def main():
    if len(sys.argv) > 1 and sys.argv[1] == "--config":
        config()
        return
    ns = os.environ["OPKIT_BENCH_NAMESPACE"]
    command = json.loads(os.environ["OPKIT_BENCH_COMMAND"])
    with open(os.environ["BINDING_CONTEXT_PATH"]) as f:
        contexts = json.load(f)
    report, ops = [], []
    printers = os.environ["OPKIT_BENCH_PEER"] == "printers"
    for ctx in contexts:
        if ctx.get("type") == "Synchronization":
            items = [(o, "create") for o in ctx.get("objects") or []]
        elif ctx.get("type") == "Event":
            items = [(ctx, "create" if ctx.get("watchEvent") == "Added" else "update")]
        else:
            continue
        for item, trigger in items:
            if printers:
                obj = item["object"]
                if (obj.get("status") or {}).get("touched"):
                    continue
                name = obj["metadata"]["name"]
                out = subprocess.run(command, input=json.dumps({"trigger": "create", "object": obj}).encode(),
                                     stdout=subprocess.PIPE, check=True, timeout=60).stdout
                status = {"configMap": name + "-text"}
                status.update((json.loads(out) if out.strip() else {}).get("status") or {})
                ops.append({"operation": "CreateIfNotExists", "object": {
                    "apiVersion": "v1", "kind": "ConfigMap",
                    "metadata": {"name": name + "-text", "namespace": ns, "ownerReferences": [{
                        "apiVersion": GROUP + "/" + VERSION, "kind": "Printer", "name": name,
                        "uid": obj["metadata"]["uid"], "controller": True, "blockOwnerDeletion": True}]},
                    "data": {"text": obj["spec"]["text"]}}})
                ops.append({"operation": "MergePatch", "apiVersion": GROUP + "/" + VERSION, "kind": "Printer",
                            "namespace": ns, "name": name, "subresource": "status", "mergePatch": {"status": status}})
                report += [{"write": "POST configmaps"}, {"write": "PATCH printers/status"}]
            else:
                subprocess.run(command, stdin=subprocess.DEVNULL, check=True, timeout=60)
                report.append({"name": item["filterResult"]["name"], "trigger": trigger, "at": time.time_ns()})
    if ops:
        with open(os.environ["KUBERNETES_PATCH_PATH"], "a") as f:
            for op in ops:
                f.write(json.dumps(op) + "\n")
    if report:
        fd = os.open(os.environ["OPKIT_BENCH_REPORT"], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, "".join(json.dumps(r) + "\n" for r in report).encode())
        finally:
            os.close(fd)


if __name__ == "__main__":
    main()
