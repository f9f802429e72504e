#!/usr/bin/env python3
"""/deploy <sha>: sets the staging Deployment's image tag to a commit, when
a member of the deploying team asks for it in a comment.

Runs once per delivery of the github source that its filter accepts (an
issue_comment, created, whose body starts with "/deploy "). Input: the
binding context on stdin, the delivery in event (event.payload is GitHub's
JSON). Output: nothing when done; {"refuse": "why"} turns the delivery down
(recorded Handled, "refused by handler deploy: why"), for a comment that is
not a deploy command, from someone not in the team, or naming no commit of
the repository. stderr is the log.

The comment is untrusted input: the SHA must be 7 to 40 lower-case hex
digits and a commit of REPOSITORY, the login a GitHub login; both go to
GitHub as URL path segments, and the new image to the API server in a JSON
patch. No shell is involved anywhere.

Environment: REPOSITORY (owner/name the deliveries must come from),
DEPLOY_TEAM (org/team-slug whose active members may deploy), DEPLOYMENT
(the Deployment to patch, in the ServiceAccount's namespace), CONTAINER
(optional: its container, else the first), GITHUB_TOKEN, GITHUB_API_URL.
"""
import json
import os
import re
import sys

sys.dont_write_bytecode = True  # no __pycache__ beside the definition
import ghapi  # noqa: E402  (the helpers beside this file)
from ghapi import APIError, GitHub, Kubernetes, log  # noqa: E402

COMMAND_RE = re.compile(r"/deploy ([0-9a-f]{7,40})")
LOGIN_RE = re.compile(r"^[A-Za-z0-9](?:[A-Za-z0-9-]{0,38})$")


def refuse(reason):
    log("refused: " + reason)
    ghapi.result({"refuse": reason})


def setting(name, pattern=None):
    value = os.environ.get(name, "")
    if not value or (pattern and not pattern.match(value)):
        ghapi.fail(f"the handler's env {name} is {value!r}: see README.md", permanent=True)
    return value


def run_annotations(obj):
    """The JSON patch operations that name this run on obj, so that
    `opkit why` finds it (opkit.dev/run) and a trace continues through it
    (opkit.dev/traceparent, when the run has one)."""
    marks = {"opkit.dev/run": os.environ.get("OPKIT_RUN_ID", "")}
    if os.environ.get("TRACEPARENT"):
        marks["opkit.dev/traceparent"] = os.environ["TRACEPARENT"]
    marks = {k: v for k, v in marks.items() if v}
    if not marks:
        return []
    if "annotations" not in obj["metadata"]:
        return [{"op": "add", "path": "/metadata/annotations", "value": marks}]
    return [{"op": "add", "path": "/metadata/annotations/" + k.replace("~", "~0").replace("/", "~1"), "value": v} for k, v in marks.items()]


def patch_image(kube, deployment, container, sha):
    """Sets the container's image tag to sha: a JSON patch that tests the
    resourceVersion and the container's name first, so that a concurrent
    change is read again rather than overwritten. Returns the new image,
    or None when it ran it already."""
    path = kube.deployment_path(deployment)
    for _ in range(5):
        dep = kube.call("GET", path)
        containers = dep["spec"]["template"]["spec"]["containers"]
        index = next((i for i, c in enumerate(containers) if not container or c["name"] == container), None)
        if index is None:
            ghapi.fail(f"the Deployment {deployment} has no container {container!r}", permanent=True)
        old = containers[index]["image"]
        new = ghapi.with_tag(old, sha)
        if old == new:
            log(f"{deployment} runs {new} already")
            return None
        ops = [
            {"op": "test", "path": "/metadata/resourceVersion", "value": dep["metadata"]["resourceVersion"]},
            {"op": "test", "path": f"/spec/template/spec/containers/{index}/name", "value": containers[index]["name"]},
            {"op": "replace", "path": f"/spec/template/spec/containers/{index}/image", "value": new},
        ] + run_annotations(dep)
        try:
            # fieldManager names the writer in the Deployment's
            # managedFields: opkit why says "by deploy-notifier".
            kube.call("PATCH", path + "?fieldManager=deploy-notifier", ops, content_type="application/json-patch+json")
            log(f"{deployment}: {old} -> {new}")
            return new
        except APIError as e:
            if e.status not in (409, 422):
                raise
            log(f"{deployment} changed meanwhile ({e}); reading it again")
    ghapi.fail(f"{deployment} kept changing: not patched", temporary=True)


def main():
    ctx = json.load(sys.stdin)
    event = ctx["event"]
    payload = event.get("payload") or {}
    log(f"delivery {event.get('deliveryId')} ({event.get('event')}), run key {ctx['idempotencyKey']}, attempt {ctx['attempt']}")
    if event.get("event") != "issue_comment" or payload.get("action") != "created":
        refuse(f"the event {event.get('event')} ({payload.get('action')}) is not a new comment")
    repo = setting("REPOSITORY", ghapi.REPO_RE)
    org, _, team = setting("DEPLOY_TEAM", ghapi.REPO_RE).partition("/")
    deployment = setting("DEPLOYMENT")
    from_repo = (payload.get("repository") or {}).get("full_name", "")
    if from_repo.lower() != repo.lower():
        refuse(f"the comment is on {from_repo or 'no repository'}, not {repo}")
    comment = payload.get("comment") or {}
    lines = (comment.get("body") or "").strip().splitlines()
    command = lines[0].strip() if lines else ""
    m = COMMAND_RE.fullmatch(command)
    if not m:
        refuse(f"{command[:80]!r} is not /deploy <sha> (7 to 40 lower-case hex digits)")
    user = (comment.get("user") or {}).get("login", "")
    if not LOGIN_RE.match(user):
        refuse(f"{user[:80]!r} is not a GitHub login")

    gh = GitHub()
    try:
        try:
            membership = gh.get(gh.path("orgs", org, "teams", team, "memberships", user))
        except APIError as e:
            if e.status != 404:
                raise
            membership = {}
        if membership.get("state") != "active":
            refuse(f"{user} is not a member of {org}/{team}")
        owner, name = repo.split("/")
        try:
            sha = gh.get(gh.path("repos", owner, name, "commits", m.group(1)))["sha"]
        except APIError as e:
            if e.status not in (404, 422):
                raise
            refuse(f"{m.group(1)} is not a commit of {repo}")
        if not ghapi.SHA_RE.match(sha or ""):
            ghapi.fail(f"GitHub answered {sha!r} for the commit {m.group(1)}", permanent=True)
        image = patch_image(Kubernetes(), deployment, os.environ.get("CONTAINER", ""), sha)
    except APIError as e:
        ghapi.fail(str(e), temporary=e.temporary)
    log(f"{user} deployed {sha} to {deployment}" + ("" if image else " (it ran it already)"))


if __name__ == "__main__":
    main()
