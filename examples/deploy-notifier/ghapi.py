"""What the deploy-notifier handlers share: a small GitHub REST client, a
Kubernetes client for the kubeconfig opkit writes, and the result helpers.

Python 3 standard library only. Nothing here runs a shell or passes input to
one: every value read from a payload or an object is checked, then sent as
data (a URL path segment, a JSON body).
"""
import base64
import json
import os
import re
import ssl
import sys
import urllib.error
import urllib.parse
import urllib.request

# A git SHA as deployments are tagged with: 7 to 40 lower-case hex digits.
SHA_RE = re.compile(r"^[0-9a-f]{7,40}$")
# A repository's full name, owner/name, as GitHub allows them.
REPO_RE = re.compile(r"^[A-Za-z0-9_.-]{1,100}/[A-Za-z0-9_.-]{1,100}$")
# EX_TEMPFAIL: opkit retries the run, and reports it as expected.
EXIT_TEMPORARY = 75


def log(*args):
    """Writes a line to the run's log (stderr; stdout is the result)."""
    print(*args, file=sys.stderr, flush=True)


def result(res):
    """Writes the run's result and exits 0."""
    json.dump(res, sys.stdout)
    sys.exit(0)


def fail(message, permanent=False, temporary=False):
    """Fails the run: permanent gives up at once, temporary exits 75."""
    log(message)
    json.dump({"error": {"message": message, "permanent": permanent}}, sys.stdout)
    sys.exit(EXIT_TEMPORARY if temporary else 1)


class APIError(Exception):
    """An answer that is not a success; temporary when retrying may help."""

    def __init__(self, status, message, temporary):
        super().__init__(message)
        self.status = status
        self.temporary = temporary


def image_tag(image):
    """The tag of an image reference, or "" (none, or a digest)."""
    if "@" in image:
        return ""
    name = image.rsplit("/", 1)[-1]
    return name.rsplit(":", 1)[1] if ":" in name else ""


def with_tag(image, tag):
    """The image reference with its tag (and any digest) replaced."""
    image = image.split("@", 1)[0]
    slash = image.rfind("/")
    colon = image.rfind(":")
    if colon > slash:
        image = image[:colon]
    return image + ":" + tag


def _request(url, method, headers, body, context=None, timeout=30):
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(url, data=data, method=method, headers=headers)
    try:
        with urllib.request.urlopen(req, timeout=timeout, context=context) as resp:
            raw = resp.read()
            return resp.status, resp.headers, (json.loads(raw) if raw else None)
    except urllib.error.HTTPError as e:
        raw = e.read()
        try:
            message = json.loads(raw).get("message", "")
        except (ValueError, AttributeError):
            message = raw[:200].decode(errors="replace")
        limited = e.code == 403 and e.headers.get("X-RateLimit-Remaining") == "0"
        temporary = e.code in (408, 429) or e.code >= 500 or limited
        raise APIError(e.code, f"{method} {urllib.parse.urlsplit(url).path}: {e.code} {message}", temporary) from None
    except (urllib.error.URLError, TimeoutError, ConnectionError) as e:
        raise APIError(0, f"{method} {urllib.parse.urlsplit(url).path}: {e}", True) from None


class GitHub:
    """GitHub's REST API at GITHUB_API_URL (https://api.github.com by
    default), with the token in GITHUB_TOKEN."""

    def __init__(self):
        self.base = os.environ.get("GITHUB_API_URL", "https://api.github.com").rstrip("/")
        token = os.environ.get("GITHUB_TOKEN", "")
        if not token:
            fail("GITHUB_TOKEN is empty: set it from the Secret with the token (see README.md)", permanent=True)
        self.headers = {
            "Accept": "application/vnd.github+json",
            "Authorization": "Bearer " + token,
            "X-GitHub-Api-Version": "2022-11-28",
            "User-Agent": "opkit-deploy-notifier",
            "Content-Type": "application/json",
        }

    def path(self, *segments):
        """A URL path from segments, each escaped: no input can add one."""
        return "/" + "/".join(urllib.parse.quote(str(s), safe="") for s in segments)

    def call(self, method, path, body=None, params=None):
        url = self.base + path
        if params:
            url += "?" + urllib.parse.urlencode(params)
        _, headers, data = _request(url, method, self.headers, body)
        return headers, data

    def get(self, path, params=None):
        return self.call("GET", path, params=params)[1]

    def post(self, path, body):
        return self.call("POST", path, body=body)[1]

    def pages(self, path, params=None):
        """Yields the items of a list, page after page (Link rel=next).
        The token goes only to the API's own host."""
        params = dict(params or {}, per_page=100)
        url = self.base + path + "?" + urllib.parse.urlencode(params)
        own = urllib.parse.urlsplit(self.base)[:2]
        while url:
            _, headers, data = _request(url, "GET", self.headers, None)
            yield from data or []
            url = None
            for part in (headers.get("Link") or "").split(","):
                m = re.match(r'\s*<([^>]+)>;\s*rel="next"', part)
                if m and urllib.parse.urlsplit(m.group(1))[:2] == own:
                    url = m.group(1)


def _kubeconfig_values(text):
    """The values opkit's kubeconfig holds (one cluster, user and context).
    JSON is read as JSON; YAML as clientcmd writes it, key: value lines."""
    try:
        kc = json.loads(text)
        cluster = kc["clusters"][0]["cluster"]
        user = kc["users"][0]["user"]
        ctx = kc["contexts"][0]["context"]
        return {**cluster, **user, "namespace": ctx.get("namespace", "default")}
    except (ValueError, KeyError, IndexError, TypeError):
        pass
    values = {}
    for line in text.splitlines():
        key, sep, value = line.strip().lstrip("- ").partition(":")
        if sep and key in ("server", "certificate-authority-data", "insecure-skip-tls-verify", "token", "namespace") and key not in values:
            values[key] = value.strip().strip("'\"")
    return values


class Kubernetes:
    """The cluster, as the ServiceAccount of the handler's exec
    serviceAccount: opkit writes its kubeconfig to $KUBECONFIG."""

    def __init__(self):
        path = os.environ.get("KUBECONFIG")
        if not path:
            fail("no KUBECONFIG: give the handler exec.serviceAccount (see README.md)", permanent=True)
        with open(path) as f:
            v = _kubeconfig_values(f.read())
        if not v.get("server") or not v.get("token"):
            fail(f"{path} names no server or token", permanent=True)
        self.server = v["server"].rstrip("/")
        self.namespace = v.get("namespace") or "default"
        self.context = ssl.create_default_context()
        if v.get("certificate-authority-data"):
            ca = base64.b64decode(v["certificate-authority-data"]).decode()
            self.context = ssl.create_default_context(cadata=ca)
        if str(v.get("insecure-skip-tls-verify")).lower() == "true":
            self.context.check_hostname = False
            self.context.verify_mode = ssl.CERT_NONE
        self.token = v["token"]

    def call(self, method, path, body=None, content_type="application/json"):
        headers = {"Authorization": "Bearer " + self.token, "Accept": "application/json", "Content-Type": content_type}
        return _request(self.server + path, method, headers, body, context=self.context)[2]

    def deployment_path(self, name):
        return "/apis/apps/v1/namespaces/{}/deployments/{}".format(
            urllib.parse.quote(self.namespace, safe=""), urllib.parse.quote(name, safe=""))
