#!/usr/bin/env python3
"""Comments "Deployed to <env> in <sha>" on each pull request a rollout
brought, once per pull request and environment.

Runs when the DeployNotifier's Deployment has rolled out an image whose tag
is a git SHA other than the one in status.lastDeployedSha (the handler's
`when`). Input: the binding context on stdin, the DeployNotifier in object
and its Deployment in related.app. Output: a result setting
status.lastDeployedSha and status.notifiedPullRequests. stderr is the log.

Exactly once, across retries and restarts: before commenting on a pull
request, the handler looks for the hidden marker of this environment and
pull request in its comments, and posts only if none is there. A run killed
between two comments, or whose POST's answer was lost, runs again (same
idempotency key) and finds the comments it already made. Two notifiers of
the same repository and environment would race: have one.
"""
import json
import os
import sys

sys.dont_write_bytecode = True  # no __pycache__ beside the definition
import ghapi  # noqa: E402  (the helpers beside this file)
from ghapi import APIError, GitHub, log  # noqa: E402

# The start of the hidden marker of a comment: the space after the number
# keeps pr=1 from matching pr=12.
MARKER = "<!-- opkit-deploy-notifier env={env} pr={pr} "


def deployed_image(deployment, container):
    """The image of the followed container (by name, else the first)."""
    containers = deployment["spec"]["template"]["spec"]["containers"]
    for c in containers:
        if not container or c["name"] == container:
            return c["image"]
    return None


def rolled_out(deployment):
    """Whether every replica runs the Deployment's template and is
    available: what the when condition says, checked again for a resume
    run."""
    st = deployment.get("status") or {}
    want = deployment["spec"].get("replicas", 1)
    return want > 0 and st.get("observedGeneration", 0) >= deployment["metadata"].get("generation", 0) and \
        st.get("updatedReplicas", 0) == want and st.get("replicas", 0) == want and st.get("availableReplicas", 0) == want


def pulls_between(gh, repo, base, head):
    """The numbers of the pull requests merged between two deployments:
    those of the commits in head and not in base (compare), deduplicated,
    in order."""
    owner, name = repo.split("/")
    cmp = gh.get(gh.path("repos", owner, name, "compare", f"{base}...{head}"), {"per_page": 100})
    if cmp.get("status") in ("behind", "identical"):
        log(f"{head} is {cmp.get('status')} {base}: a rollback or a redeploy brings no pull request")
        return []
    commits = list(cmp.get("commits") or [])
    page = 2
    while len(commits) < cmp.get("total_commits", 0):
        more = gh.get(gh.path("repos", owner, name, "compare", f"{base}...{head}"), {"per_page": 100, "page": page})
        if not more.get("commits"):
            break
        commits += more["commits"]
        page += 1
    log(f"{len(commits)} commit{'' if len(commits) == 1 else 's'} from {base[:12]} to {head[:12]}")
    numbers = []
    for c in commits:
        for pr in gh.pages(gh.path("repos", owner, name, "commits", c["sha"], "pulls")):
            if pr.get("merged_at") and pr["number"] not in numbers:
                numbers.append(pr["number"])
    return sorted(numbers)


def already_notified(gh, repo, number, env):
    """Whether the pull request holds this environment's marker."""
    owner, name = repo.split("/")
    marker = MARKER.format(env=env, pr=number)
    for c in gh.pages(gh.path("repos", owner, name, "issues", number, "comments")):
        if marker in (c.get("body") or ""):
            return True
    return False


def main():
    ctx = json.load(sys.stdin)
    notifier = ctx["object"]
    spec = notifier["spec"]
    status = notifier.get("status") or {}
    repo, env = spec["repository"], spec["environment"]
    if not ghapi.REPO_RE.match(repo):
        ghapi.fail(f"spec.repository {repo!r} is not owner/name", permanent=True)
    deployment = (ctx.get("related") or {}).get("app")
    if deployment is None:
        ghapi.result({"skipped": True})  # the Deployment is gone
    image = deployed_image(deployment, spec.get("container"))
    if image is None:
        ghapi.fail(f"the Deployment {spec['deployment']} has no container {spec.get('container')!r}", permanent=True)
    sha = ghapi.image_tag(image)
    if not ghapi.SHA_RE.match(sha):
        log(f"{image}: its tag is not a git SHA; nothing to notify")
        ghapi.result({"skipped": True})
    previous = status.get("lastDeployedSha")
    log(f"{spec['deployment']} runs {image} in {env} (before: {previous or 'nothing known'}; {ctx['trigger']} run, key {ctx['idempotencyKey']}, attempt {ctx['attempt']})")
    if previous == sha:
        ghapi.result({"skipped": True})
    if not rolled_out(deployment):
        # The when condition runs this once the rollout is done; should
        # that moment pass unseen (hidden by a run), the requeue looks
        # again.
        recheck = os.environ.get("RECHECK_AFTER") or "15s"
        log(f"{spec['deployment']} is rolling out: looking again in {recheck}")
        ghapi.result({"skipped": True, "requeueAfter": recheck})
    done = {"lastDeployedSha": sha, "previousDeployedSha": previous or "", "notifiedPullRequests": []}
    if not previous:
        log("the first deployment seen: its SHA is recorded, and no pull request is told")
        ghapi.result({"status": done})

    gh = GitHub()
    try:
        numbers = pulls_between(gh, repo, previous, sha)
    except APIError as e:
        if e.status in (404, 422):
            # One of the SHAs is not in the repository (a force-push, a
            # tag from elsewhere): there is no range to tell.
            log(f"cannot compare {previous}...{sha}: {e}; recording {sha} only")
            ghapi.result({"status": done, "events": [{"type": "Warning", "reason": "CompareFailed", "message": f"{repo}: cannot compare {previous[:12]}...{sha[:12]}: {e}"}]})
        ghapi.fail(str(e), temporary=e.temporary)
    owner, name = repo.split("/")
    told = []
    try:
        for n in numbers:
            if already_notified(gh, repo, n, env):
                log(f"#{n} was told of {env} already")
            else:
                marker = MARKER.format(env=env, pr=n) + f"sha={sha} key={ctx['idempotencyKey'].replace('--', '-')} -->"
                gh.post(gh.path("repos", owner, name, "issues", n, "comments"), {"body": f"Deployed to {env} in {sha}.\n\n{marker}"})
                log(f"#{n}: commented")
            told.append(n)
    except APIError as e:
        # Retried with the same key: the comments made are found by their
        # marker, and the others are made.
        ghapi.fail(f"{e} (after telling {told or 'no pull request'})", temporary=e.temporary)
    done["notifiedPullRequests"] = told
    message = f"{sha[:12]} in {env}: " + (", ".join(f"#{n}" for n in told) + " told" if told else "no pull request to tell")
    ghapi.result({"status": done, "events": [{"reason": "Notified", "message": message}]})


if __name__ == "__main__":
    main()
