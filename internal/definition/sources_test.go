package definition

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/opkit-dev/opkit/api/v1alpha1"
)

// sourcesOp owns Deploy objects and hears GitHub: a handler on event for
// comments, and Deploy objects created from /deploy comments. Its lines
// are counted by the tests below: the source's name is on line 16, its
// secretRef on 18, the filter on 19, the object's name on 22, the
// handler's on on 29.
const sourcesOp = `apiVersion: opkit.dev/v1alpha1
kind: Operator
metadata: {name: deployer}
spec:
  resource:
    group: deploy.example.com
    kind: Deploy
    versions:
    - name: v1
      schema:
        type: object
        properties:
          sha: {type: string}
  sources:
  - webhook:
      github:
        secretRef: {namespace: ops, name: github-hook, key: secret}
    name: github
    filter: event == 'issue_comment' && payload.comment.body.startsWith('/deploy ')
    object:
      metadata:
        name: "pr-${string(payload.issue.number)}"
        namespace: ops
      spec:
        sha: "${payload.comment.body.substring(8)}"
  handlers:
  - name: announce
    on: [event]
    sources: [github]
    exec: {command: [/bin/true]}
`

func TestSourcesCompile(t *testing.T) {
	d, err := compileOne(t, "deployer.yaml", sourcesOp, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(d.Sources) != 1 {
		t.Fatalf("%d sources, want 1", len(d.Sources))
	}
	s := d.EventSource("github")
	if s == nil || d.EventSource("gitlab") != nil {
		t.Fatal("EventSource does not find the source by its name alone")
	}
	if s.Verify != VerifyGitHub || s.SignatureHeader != "X-Hub-Signature-256" || s.SignaturePrefix != "sha256=" ||
		s.DeliveryHeader != "X-GitHub-Delivery" || s.EventHeader != "X-GitHub-Event" || s.MaxBodyBytes != v1alpha1.DefaultWebhookBody {
		t.Errorf("github defaults: %+v", s)
	}
	if s.Secret != (v1alpha1.SecretKeySelector{Namespace: "ops", Name: "github-hook", Key: "secret"}) {
		t.Errorf("secret %+v", s.Secret)
	}
	if len(s.Handlers) != 1 || s.Handlers[0].Name != "announce" {
		t.Errorf("the source runs %v, want announce", s.Handlers)
	}
	comment := func(event, body string) EventVars {
		return EventVars{Event: event, Source: "github", DeliveryID: "d-1",
			Payload: map[string]any{"issue": map[string]any{"number": int64(12)}, "comment": map[string]any{"body": body}}}
	}
	for _, c := range []struct {
		vars EventVars
		want bool
	}{
		{comment("issue_comment", "/deploy abc1234"), true},
		{comment("issue_comment", "looks good"), false},
		{comment("push", "/deploy abc1234"), false},
	} {
		if got, err := s.Accepts(c.vars); err != nil || got != c.want {
			t.Errorf("Accepts(%s %q) = %v, %v; want %v", c.vars.Event, c.vars.Payload.(map[string]any)["comment"], got, err, c.want)
		}
	}
	// A payload the filter cannot read is an error, not a match.
	if got, err := s.Accepts(EventVars{Event: "issue_comment", Payload: map[string]any{"zen": "x"}}); err == nil || got {
		t.Errorf("Accepts of a payload without a comment = %v, %v; want an error", got, err)
	}
	obj, err := s.Object.Render(comment("issue_comment", "/deploy abc1234"))
	if err != nil {
		t.Fatal(err)
	}
	meta := obj["metadata"].(map[string]any)
	if obj["apiVersion"] != "deploy.example.com/v1" || obj["kind"] != "Deploy" || meta["name"] != "pr-12" || meta["namespace"] != "ops" ||
		obj["spec"].(map[string]any)["sha"] != "abc1234" {
		t.Errorf("rendered object %v", obj)
	}
	// Rendering twice does not change the template.
	if again, _ := s.Object.Render(comment("issue_comment", "/deploy def5678")); again["spec"].(map[string]any)["sha"] != "def5678" {
		t.Errorf("second render %v", again)
	}

	// hmac and bearer, without a delivery header: replays are not
	// recognised, and header names are canonical.
	hmac := replace(t, sourcesOp, "      github:\n        secretRef", "      deliveryHeader: x-delivery-id\n      hmac:\n        header: x-signature\n        prefix: 'sha256='\n        secretRef")
	d, err = compileOne(t, "deployer.yaml", hmac, nil)
	if err != nil {
		t.Fatal(err)
	}
	if s := d.Sources[0]; s.Verify != VerifyHMAC || s.SignatureHeader != "X-Signature" || s.SignaturePrefix != "sha256=" || s.DeliveryHeader != "X-Delivery-Id" || s.EventHeader != "" {
		t.Errorf("hmac source %+v", s)
	}
	bearer := replace(t, sourcesOp, "      github:", "      bearer:")
	d, err = compileOne(t, "deployer.yaml", bearer, nil)
	if err != nil {
		t.Fatal(err)
	}
	if s := d.Sources[0]; s.Verify != VerifyBearer || s.DeliveryHeader != "" || s.SignatureHeader != "" {
		t.Errorf("bearer source %+v", s)
	}
	// A calendar may hear sources too: an operator of handlers on event.
	eventsOnly := `apiVersion: opkit.dev/v1alpha1
kind: Operator
metadata: {name: notifier}
spec:
  sources:
  - name: github
    webhook: {github: {secretRef: {namespace: ops, name: hook, key: secret}}}
  handlers:
  - name: notify
    on: [event]
    exec: {command: [/bin/true], env: [{name: TOKEN, valueFrom: {secretKeyRef: {namespace: ops, name: gh, key: token}}}]}
`
	d, err = compileOne(t, "notifier.yaml", eventsOnly, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !d.Calendar() || len(d.Sources) != 1 || !slices.Equal(d.Sources[0].Handlers, d.Handlers) {
		t.Errorf("events-only operator: calendar %v, sources %v", d.Calendar(), d.Sources)
	}
}

func TestBadSourcesNameTheFieldAndLine(t *testing.T) {
	for name, tc := range map[string]struct {
		from, to string
		line     int
		field    string
		message  string
	}{
		"no name":           {"    name: github\n", "", 15, "spec.sources[0].name", "required"},
		"bad name":          {"    name: github\n", "    name: GitHub\n", 18, "spec.sources[0].name", `"GitHub" is not a DNS label`},
		"no webhook":        {"  - webhook:\n      github:\n        secretRef: {namespace: ops, name: github-hook, key: secret}\n    name: github", "  - name: github", 15, "spec.sources[0]", "set exactly one of webhook, cloudEvents, githubPoll, nats and kafka (this one has none)"},
		"two kinds":         {"  - webhook:\n", "  - nats: {url: 'nats://n:4222', stream: S}\n    webhook:\n", 15, "spec.sources[0]", "(this one has webhook and nats)"},
		"nats stream":       {"  - webhook:\n      github:\n        secretRef: {namespace: ops, name: github-hook, key: secret}\n", "  - nats: {url: 'nats://n:4222', stream: 'a.b'}\n", 15, "spec.sources[0].nats.stream", "is not a JetStream name"},
		"kafka broker":      {"  - webhook:\n      github:\n        secretRef: {namespace: ops, name: github-hook, key: secret}\n", "  - kafka: {brokers: [kafka], topics: [t]}\n", 15, "spec.sources[0].kafka.brokers[0]", `"kafka" is not host:port`},
		"poll interval":     {"  - webhook:\n      github:\n        secretRef: {namespace: ops, name: github-hook, key: secret}\n", "  - githubPoll: {repository: o/r, interval: 2s, tokenSecretRef: {namespace: ops, name: gh, key: token}}\n", 15, "spec.sources[0].githubPoll.interval", "too short"},
		"poll both":         {"  - webhook:\n      github:\n        secretRef: {namespace: ops, name: github-hook, key: secret}\n", "  - githubPoll: {repository: o/r, organization: o, tokenSecretRef: {namespace: ops, name: gh, key: token}}\n", 15, "spec.sources[0].githubPoll", "exactly one of repository"},
		"ce batch":          {"  - webhook:\n      github:\n        secretRef: {namespace: ops, name: github-hook, key: secret}\n", "  - cloudEvents: {batch: Some, bearer: {secretRef: {namespace: ops, name: t, key: t}}}\n", 15, "spec.sources[0].cloudEvents.batch", `"Some": Refuse or Split`},
		"two verifications": {"      github:\n", "      bearer: {secretRef: {namespace: ops, name: t, key: t}}\n      github:\n", 15, "spec.sources[0].webhook", "set exactly one of github, hmac and bearer (this one has 2)"},
		"no verification":   {"      github:\n        secretRef: {namespace: ops, name: github-hook, key: secret}\n", "      maxBodyBytes: 10\n", 15, "spec.sources[0].webhook", "a source never accepts a delivery it cannot verify"},
		"secret namespace":  {"namespace: ops, name: github-hook", "name: github-hook", 17, "spec.sources[0].webhook.github.secretRef.namespace", "the Secret's namespace must be named"},
		"secret key":        {"key: secret}", "key: 'a b'}", 17, "spec.sources[0].webhook.github.secretRef.key", "a key of the Secret"},
		"hmac header":       {"      github:\n", "      hmac:\n        header: 'X Sig'\n", 17, "spec.sources[0].webhook.hmac.header", `"X Sig" is not an HTTP header name`},
		"body too large":    {"      github:\n", "      maxBodyBytes: 30000000\n      github:\n", 16, "spec.sources[0].webhook.maxBodyBytes", "out of range"},
		"filter syntax":     {"startsWith('/deploy ')", "startsWith('/deploy '", 19, "spec.sources[0].filter", "Syntax error"},
		"filter not bool":   {"filter: event == 'issue_comment' && payload.comment.body.startsWith('/deploy ')", "filter: event", 19, "spec.sources[0].filter", "must be a bool"},
		"filter reads self": {"filter: event == 'issue_comment'", "filter: self.spec.sha == 'x'", 19, "spec.sources[0].filter", "undeclared reference to 'self'"},
		"object other kind": {"    object:\n", "    object:\n      kind: Pod\n", 21, "spec.sources[0].object.kind", "the operator's own custom resource, Deploy"},
		"object no name":    {"        name: \"pr-${string(payload.issue.number)}\"\n", "", 21, "spec.sources[0].object.metadata.name", "required"},
		"object no ns":      {"        namespace: ops\n      spec:", "      spec:", 21, "spec.sources[0].object.metadata.namespace", "Deploy is namespaced"},
		"object status":     {"      spec:\n", "      status: {phase: x}\n      spec:\n", 24, "spec.sources[0].object.status", "the status is the operator's"},
		"object bad expr":   {"payload.comment.body.substring(8)", "payload.comment.body.substring(", 25, "spec.sources[0].object.spec.sha", "Syntax error"},
		"event and create":  {"    on: [event]", "    on: [event, create]", 28, "spec.handlers[0].on", "it cannot have other triggers (create)"},
		"unknown source":    {"    sources: [github]", "    sources: [gitlab]", 29, "spec.handlers[0].sources[0]", `there is no source named "gitlab" (sources: github)`},
		"duplicate source":  {"  handlers:\n", "  - name: github\n    webhook: {bearer: {secretRef: {namespace: ops, name: t, key: t}}}\n    object: {metadata: {name: x, namespace: ops}}\n  handlers:\n", 26, "spec.sources[1].name", `duplicate source name "github"`},
	} {
		t.Run(name, func(t *testing.T) {
			yaml := replace(t, sourcesOp, tc.from, tc.to)
			_, err := compileOne(t, "deployer.yaml", yaml, nil)
			wantOneError(t, err, "deployer.yaml", tc.line, tc.field, tc.message)
		})
	}
	// Sources on a handler without the event trigger.
	_, err := compileOne(t, "deployer.yaml", replace(t, sourcesOp, "    on: [event]", "    on: [create]"), nil)
	wantOneError(t, err, "deployer.yaml", 29, "spec.handlers[0].sources", "add event to on")
	// A source that neither runs a handler nor makes an object.
	idle := replace(t, sourcesOp, "    on: [event]\n    sources: [github]", "    on: [create]")
	idle = replace(t, idle, sourcesOp[strings.Index(sourcesOp, "    object:\n"):strings.Index(sourcesOp, "  handlers:\n")], "")
	_, err = compileOne(t, "deployer.yaml", idle, nil)
	wantOneError(t, err, "deployer.yaml", 15, "spec.sources[0]", "does nothing with a delivery")
	// The event trigger without sources.
	noSources := replace(t, sourcesOp, sourcesOp[strings.Index(sourcesOp, "  sources:\n"):strings.Index(sourcesOp, "  handlers:\n")], "")
	noSources = replace(t, noSources, "    sources: [github]\n", "")
	_, err = compileOne(t, "deployer.yaml", noSources, nil)
	wantOneError(t, err, "deployer.yaml", 16, "spec.handlers[0].on", "declares none: add spec.sources")
}

// TestCompileFilesReportsEveryFileAndKeepsTheGoodOnes: a missing file and
// an invalid Operator are both reported, each by its file, beside the
// definitions that compiled.
func TestCompileFilesReportsEveryFileAndKeepsTheGoodOnes(t *testing.T) {
	dir := t.TempDir()
	good, bad := filepath.Join(dir, "good.yaml"), filepath.Join(dir, "bad.yaml")
	if err := os.WriteFile(good, []byte(sourcesOp), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(bad, []byte(strings.Replace(sourcesOp, "name: github\n", "name: GitHub\n", 1)), 0o644); err != nil {
		t.Fatal(err)
	}
	missing := filepath.Join(dir, "missing.yaml")
	defs, err := CompileFiles(good, missing, bad)
	if len(defs) != 1 || defs[0].Source != good {
		t.Errorf("compiled %d definitions, want the good one", len(defs))
	}
	for _, want := range []string{missing + ": ", bad + ":18: spec.sources[0].name"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("error %v does not name %q", err, want)
		}
	}
	if defs, err := CompileFiles(good); err != nil || len(defs) != 1 {
		t.Errorf("a good file: %d definitions, %v", len(defs), err)
	}
}
