package engine_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/opkit-dev/opkit/internal/archive"
	"github.com/opkit-dev/opkit/internal/definition"
	"github.com/opkit-dev/opkit/internal/devcluster/clustertest"
	"github.com/opkit-dev/opkit/internal/engine"
	"github.com/opkit-dev/opkit/internal/source"
)

// eventHandlerEnv makes the test binary the event handler: it appends
// {key, deliveryId, event, text} to $OUT, and refuses the delivery when
// its payload says refuse; it first waits for the file its payload's
// hold names, if any, to exist.
const eventHandlerEnv = "OPKIT_TEST_EVENT_HANDLER"

// eventRecord is a line the event handler writes.
type eventRecord struct {
	Key        string `json:"key"`
	DeliveryID string `json:"deliveryId"`
	Event      string `json:"event"`
	Text       string `json:"text"`
	Trigger    string `json:"trigger"`
}

func testEventHandler() int {
	var bc struct {
		Trigger        string `json:"trigger"`
		IdempotencyKey string `json:"idempotencyKey"`
		Event          struct {
			DeliveryID string `json:"deliveryId"`
			Event      string `json:"event"`
			Payload    struct {
				Text   string `json:"text"`
				Refuse string `json:"refuse"`
				Hold   string `json:"hold"`
			} `json:"payload"`
		} `json:"event"`
	}
	if err := json.NewDecoder(os.Stdin).Decode(&bc); err != nil {
		fmt.Fprintln(os.Stderr, "bad binding context:", err)
		return 2
	}
	for deadline := time.Now().Add(2 * time.Minute); bc.Event.Payload.Hold != "" && time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if _, err := os.Stat(bc.Event.Payload.Hold); err == nil {
			break
		}
	}
	line, _ := json.Marshal(eventRecord{Key: bc.IdempotencyKey, DeliveryID: bc.Event.DeliveryID, Event: bc.Event.Event, Text: bc.Event.Payload.Text, Trigger: bc.Trigger})
	f, err := os.OpenFile(os.Getenv("OUT"), os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	_, _ = f.Write(append(line, '\n'))
	_ = f.Close()
	fmt.Fprintf(os.Stderr, "delivery %s: %s\n", bc.Event.DeliveryID, bc.Event.Payload.Text)
	if bc.Event.Payload.Refuse != "" {
		out, _ := json.Marshal(map[string]string{"refuse": bc.Event.Payload.Refuse})
		fmt.Println(string(out))
	}
	return 0
}

// eventRecords reads what the event handler wrote to out.
func eventRecords(t *testing.T, out string) []eventRecord {
	t.Helper()
	data, err := os.ReadFile(out)
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	var recs []eventRecord
	for line := range strings.SplitSeq(strings.TrimSpace(string(data)), "\n") {
		if line == "" {
			continue
		}
		var r eventRecord
		if err := json.Unmarshal([]byte(line), &r); err != nil {
			t.Fatalf("%s: %q: %v", out, line, err)
		}
		recs = append(recs, r)
	}
	return recs
}

// eventHandlerExec is the exec block of a handler that runs the test
// binary as the event handler, writing to out.
func eventHandlerExec(t *testing.T, out string) string {
	t.Helper()
	bin := clustertest.HandlerBinary(t)
	return fmt.Sprintf(`exec:
      command: [%q]
      env: [{name: %s, value: "1"}, {name: OUT, value: %q}]`, bin, eventHandlerEnv, out)
}

// hookSecret creates the Secret holding a source's secret in the test's
// namespace, or changes its value.
func hookSecret(t *testing.T, env *clustertest.Env, value string) {
	t.Helper()
	s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: env.Namespace, Name: "hook"}, StringData: map[string]string{"secret": value}}
	err := env.Client.Update(t.Context(), s)
	if client.IgnoreNotFound(err) != nil {
		t.Fatal(err)
	}
	if err != nil {
		create(t, env, s)
	}
}

// delivery is one request to a source.
type delivery struct {
	id, event   string
	body        []byte
	secret      string // signs the body, as GitHub does
	contentType string // defaults to application/json
	header      http.Header
}

// deliver posts d to url and returns the status and the answer's body.
func deliver(t *testing.T, url string, d delivery) (int, map[string]string) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, url, bytes.NewReader(d.body))
	if err != nil {
		t.Fatal(err)
	}
	ct := d.contentType
	if ct == "" {
		ct = "application/json"
	}
	req.Header.Set("Content-Type", ct)
	req.Header.Set("X-GitHub-Delivery", d.id)
	req.Header.Set("X-GitHub-Event", d.event)
	req.Header.Set("X-Hub-Signature-256", source.GitHubSignature([]byte(d.secret), d.body))
	for k, vs := range d.header {
		req.Header[k] = vs
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	var answer map[string]string
	if err := json.Unmarshal(data, &answer); err != nil {
		t.Fatalf("the answer to delivery %s is not JSON: %q", d.id, data)
	}
	return resp.StatusCode, answer
}

// waitDelivery waits until the archive's delivery id has the outcome.
func waitDelivery(t *testing.T, store archive.Store, id string, outcome archive.DeliveryOutcome) *archive.Delivery {
	t.Helper()
	var got *archive.Delivery
	eventually(t, 60*time.Second, "delivery "+id+" "+string(outcome), func(ctx context.Context) (bool, error) {
		d, err := store.GetDelivery(ctx, id)
		if err != nil {
			return false, err
		}
		got = d
		return d.Outcome == outcome, nil
	})
	return got
}

// hooksOperator is an Operator with a GitHub source whose deliveries of
// created issue comments run the event handler.
func hooksOperator(t *testing.T, env *clustertest.Env, out string) *definition.Definition {
	t.Helper()
	return hooksOperatorWith(t, env, out, "github")
}

// hooksOperatorWith is hooksOperator with its source named src.
func hooksOperatorWith(t *testing.T, env *clustertest.Env, out, src string) *definition.Definition {
	t.Helper()
	yaml := fmt.Sprintf(`apiVersion: opkit.dev/v1alpha1
kind: Operator
metadata: {name: hooks-%[1]s}
spec:
  sources:
  - name: %[3]s
    webhook:
      github: {secretRef: {namespace: %[1]s, name: hook, key: secret}}
      maxBodyBytes: 4096
    filter: event == 'issue_comment' && payload.action == 'created'
  handlers:
  - name: comment
    on: [event]
    timeout: 3m
    %[2]s
`, env.Namespace, eventHandlerExec(t, out), src)
	file := filepath.Join(t.TempDir(), "hooks.yaml")
	if err := os.WriteFile(file, []byte(yaml), 0o644); err != nil {
		t.Fatal(err)
	}
	return exampleDefinition(t, file)
}

// TestWebhookDeliveriesAreVerifiedRecordedAndHandledOnce: a signed delivery
// runs its handler once; the same delivery again, a bad signature, a body
// too large, a wrong content type and a filtered-out event are refused
// with their status and recorded with their reason, and run nothing; a
// rotated secret is used without a restart; a handler's refusal is the
// delivery's reason.
func TestWebhookDeliveriesAreVerifiedRecordedAndHandledOnce(t *testing.T) {
	t.Parallel()
	env := clustertest.New(t)
	store := newArchive(t)
	out := filepath.Join(t.TempDir(), "events.jsonl")
	hookSecret(t, env, "s3cret\n") // a trailing newline is not part of it
	e, _ := runEngineWith(t, engine.Options{Config: env.Config, Namespace: env.Namespace, Archive: store, HooksAddr: "127.0.0.1:0"})
	d := hooksOperator(t, env, out)
	if err := e.Apply(t.Context(), d); err != nil {
		t.Fatal(err)
	}
	op := d.Operator.Name
	url := "http://" + e.HooksAddr() + "/hooks/" + op + "/github"
	comment := func(text string) []byte {
		return []byte(fmt.Sprintf(`{"action": "created", "comment": {"body": %q}, "text": %q}`, text, text))
	}

	status, answer := deliver(t, url, delivery{id: "d-1", event: "issue_comment", body: comment("first"), secret: "s3cret"})
	if status != http.StatusAccepted || answer["outcome"] != "Pending" || answer["delivery"] == "" {
		t.Fatalf("a signed delivery was answered %d %v, want 202 Pending with the archive's id", status, answer)
	}
	first := waitDelivery(t, store, answer["delivery"], archive.DeliveryHandled)
	if len(first.Runs) != 1 {
		t.Fatalf("the delivery caused runs %v, want one", first.Runs)
	}
	run, err := store.Get(t.Context(), first.Runs[0])
	if err != nil {
		t.Fatal(err)
	}
	wantKey := op + "/event/github/d-1/comment"
	if run.Outcome != archive.Succeeded || run.Key != wantKey || run.Trigger != "event" || run.Kind != "Operator" || run.UID != first.ID {
		t.Errorf("its run: %s key %q trigger %s kind %s uid %s; want Succeeded, %q, event, Operator, the delivery's id", run.Outcome, run.Key, run.Trigger, run.Kind, run.UID, wantKey)
	}
	if got := first.Headers["X-Hub-Signature-256"]; !slices.Equal(got, []string{"[redacted]"}) {
		t.Errorf("the signature was recorded as %q, want it redacted", got)
	}

	big := comment(strings.Repeat("x", 5000))
	for _, c := range []struct {
		name   string
		d      delivery
		status int
		reason string
	}{
		{"the same delivery again", delivery{id: "d-1", event: "issue_comment", body: comment("first"), secret: "s3cret"}, http.StatusConflict, "replay of delivery d-1"},
		{"a bad signature", delivery{id: "d-2", event: "issue_comment", body: comment("forged"), secret: "guess"}, http.StatusUnauthorized, "bad signature"},
		{"a body too large", delivery{id: "d-3", event: "issue_comment", body: big, secret: "s3cret"}, http.StatusRequestEntityTooLarge, "larger than the source's limit of 4.0 KiB"},
		{"a wrong content type", delivery{id: "d-4", event: "issue_comment", body: comment("form"), secret: "s3cret", contentType: "application/x-www-form-urlencoded"}, http.StatusUnsupportedMediaType, "content type application/x-www-form-urlencoded"},
		{"another event", delivery{id: "d-5", event: "push", body: comment("push"), secret: "s3cret"}, http.StatusOK, "filtered out"},
		{"a payload the filter cannot read", delivery{id: "d-6", event: "issue_comment", body: []byte(`{"zen": "keep it simple"}`), secret: "s3cret"}, http.StatusOK, "filtered out: the filter failed on it"},
		{"a body that is not JSON", delivery{id: "d-7", event: "issue_comment", body: []byte(`action=created`), secret: "s3cret"}, http.StatusBadRequest, "the body is not JSON"},
		{"a body nested 1,500 deep", delivery{id: "d-7b", event: "issue_comment", body: []byte(strings.Repeat("[", 1500) + strings.Repeat("]", 1500)), secret: "s3cret"}, http.StatusBadRequest,
			"the body is nested deeper than 100 objects and arrays (at byte 100): opkit reads JSON at most 100 deep"},
	} {
		status, answer := deliver(t, url, c.d)
		if status != c.status || answer["outcome"] != "Refused" || !strings.Contains(answer["reason"], c.reason) {
			t.Errorf("%s: answered %d %v, want %d Refused with a reason saying %q", c.name, status, answer, c.status, c.reason)
			continue
		}
		got, err := store.GetDelivery(t.Context(), answer["delivery"])
		if err != nil {
			t.Errorf("%s: the refused delivery's record: %v", c.name, err)
			continue
		}
		if got.Outcome != archive.DeliveryRefused || got.Reason != answer["reason"] || got.DeliveryID != c.d.id && c.name != "a body too large" && c.name != "a wrong content type" {
			t.Errorf("%s: recorded %s %q (delivery id %q), want Refused with the reason answered", c.name, got.Outcome, got.Reason, got.DeliveryID)
		}
	}

	// A rotated secret is read again without a restart: a delivery signed
	// with the new one is accepted, one with the old one refused.
	hookSecret(t, env, "n3w")
	status, answer = deliver(t, url, delivery{id: "d-8", event: "issue_comment", body: comment("rotated"), secret: "n3w"})
	if status != http.StatusAccepted {
		t.Fatalf("a delivery signed with the rotated secret was answered %d %v, want 202", status, answer)
	}
	waitDelivery(t, store, answer["delivery"], archive.DeliveryHandled)
	if status, answer := deliver(t, url, delivery{id: "d-9", event: "issue_comment", body: comment("stale"), secret: "s3cret"}); status != http.StatusUnauthorized {
		t.Errorf("a delivery signed with the old secret was answered %d %v, want 401", status, answer)
	}

	// A handler that refuses the delivery: Handled, with its reason.
	status, answer = deliver(t, url, delivery{id: "d-10", event: "issue_comment", secret: "n3w",
		body: []byte(`{"action": "created", "text": "deploy please", "refuse": "mallory is not a member of org/deployers"}`)})
	if status != http.StatusAccepted {
		t.Fatalf("answered %d %v, want 202", status, answer)
	}
	refused := waitDelivery(t, store, answer["delivery"], archive.DeliveryHandled)
	if want := "refused by handler comment: mallory is not a member of org/deployers"; refused.Reason != want {
		t.Errorf("a delivery its handler refused has the reason %q, want %q", refused.Reason, want)
	}
	if run, err := store.Get(t.Context(), refused.Runs[0]); err != nil || run.Outcome != archive.Skipped {
		t.Errorf("the refusing run: %v, %v; want Skipped", run, err)
	}

	// Every handler ran once per accepted delivery, and for nothing else.
	var ids []string
	for _, r := range eventRecords(t, out) {
		ids = append(ids, r.DeliveryID)
		if r.Trigger != "event" || r.Key != op+"/event/github/"+r.DeliveryID+"/comment" {
			t.Errorf("the handler ran with trigger %q and key %q", r.Trigger, r.Key)
		}
	}
	if !slices.Equal(ids, []string{"d-1", "d-8", "d-10"}) {
		t.Errorf("the handler ran for the deliveries %v, want d-1, d-8 and d-10 once each", ids)
	}
	page, err := store.ListDeliveries(t.Context(), archive.DeliveryQuery{Operator: op, Refused: true})
	if err != nil {
		t.Fatal(err)
	}
	// Nine by the source's checks, and d-10, which its handler refused
	// (opkit events --refused lists both).
	if len(page.Deliveries) != 10 {
		t.Errorf("%d refused deliveries recorded, want 10", len(page.Deliveries))
	}
	// Requests that reach no source are answered, and not recorded.
	for path, want := range map[string]int{"/hooks/" + op + "/gitlab": 404, "/hooks/nobody/github": 404, "/other": 404} {
		resp, err := http.Post("http://"+e.HooksAddr()+path, "application/json", strings.NewReader("{}"))
		if err != nil {
			t.Fatal(err)
		}
		_ = resp.Body.Close()
		if resp.StatusCode != want {
			t.Errorf("POST %s: %d, want %d", path, resp.StatusCode, want)
		}
	}
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusMethodNotAllowed {
		t.Errorf("GET of a source: %s, want 405", resp.Status)
	}
}

// TestPendingDeliveriesAreHandledWhenTheEngineStarts: deliveries accepted
// by an engine that died before handling them are handled by the next,
// once: a handler that had succeeded for one is not run again.
func TestPendingDeliveriesAreHandledWhenTheEngineStarts(t *testing.T) {
	t.Parallel()
	env := clustertest.New(t)
	store := newArchive(t)
	out := filepath.Join(t.TempDir(), "events.jsonl")
	hookSecret(t, env, "s3cret")
	d := hooksOperator(t, env, out)
	op := d.Operator.Name
	ctx := t.Context()
	// What an engine left: two accepted deliveries; the handler had
	// succeeded for the second before the engine died.
	var ids []string
	for _, id := range []string{"p-1", "p-2"} {
		rec := &archive.Delivery{Operator: op, Source: "github", DeliveryID: id, Event: "issue_comment",
			Payload: []byte(`{"action": "created", "text": "left by ` + id + `"}`)}
		if err := store.RecordDelivery(ctx, rec); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, rec.ID)
	}
	done := &archive.Run{ID: archive.NewID(time.Now()), Operator: op, Handler: "comment", Action: "exec", Trigger: "event",
		APIVersion: "opkit.dev/v1alpha1", Kind: "Operator", Name: op, UID: ids[1], Key: op + "/event/github/p-2/comment",
		Attempt: 1, StartedAt: time.Now().UTC(), Outcome: archive.Running}
	if err := store.Insert(ctx, done); err != nil {
		t.Fatal(err)
	}
	done.Outcome, done.FinishedAt = archive.Succeeded, time.Now().UTC()
	if err := store.Finish(ctx, done); err != nil {
		t.Fatal(err)
	}

	e, _ := runEngineWith(t, engine.Options{Config: env.Config, Namespace: env.Namespace, Archive: store, HooksAddr: "127.0.0.1:0"})
	if err := e.Apply(ctx, d); err != nil {
		t.Fatal(err)
	}
	first := waitDelivery(t, store, ids[0], archive.DeliveryHandled)
	second := waitDelivery(t, store, ids[1], archive.DeliveryHandled)
	if len(first.Runs) != 1 || !slices.Equal(second.Runs, []string{done.ID}) {
		t.Errorf("runs of the deliveries: %v and %v; want a new one, and the run of before", first.Runs, second.Runs)
	}
	recs := eventRecords(t, out)
	if len(recs) != 1 || recs[0].DeliveryID != "p-1" || recs[0].Key != op+"/event/github/p-1/comment" {
		t.Errorf("the handler ran %+v; want once, for p-1 with its key", recs)
	}
	if pending, err := store.PendingDeliveries(ctx, op); err != nil || len(pending) != 0 {
		t.Errorf("pending deliveries left: %v %v", pending, err)
	}
}

// TestASourceCreatesAndPatchesItsObject: a source's object is created
// from the first delivery and patched by the next, each delivery naming
// it among what it caused.
func TestASourceCreatesAndPatchesItsObject(t *testing.T) {
	t.Parallel()
	env := clustertest.New(t)
	store := newArchive(t)
	hookSecret(t, env, "s3cret")
	group := "deploys-" + env.Namespace + ".example.com"
	yaml := fmt.Sprintf(`apiVersion: opkit.dev/v1alpha1
kind: Operator
metadata: {name: deploys-%[1]s}
spec:
  resource:
    group: %[2]s
    kind: Deploy
    versions:
    - name: v1
      schema:
        type: object
        properties:
          sha: {type: string}
          requestedBy: {type: string}
  sources:
  - name: github
    webhook:
      github: {secretRef: {namespace: %[1]s, name: hook, key: secret}}
    filter: payload.comment.body.startsWith('/deploy ')
    object:
      metadata:
        name: "pr-${string(payload.issue.number)}"
        namespace: %[1]s
        labels: {delivery: "${delivery.id}"}
      spec:
        sha: "${payload.comment.body.substring(8)}"
        requestedBy: "${payload.comment.user.login}"
`, env.Namespace, group)
	file := filepath.Join(t.TempDir(), "deploys.yaml")
	if err := os.WriteFile(file, []byte(yaml), 0o644); err != nil {
		t.Fatal(err)
	}
	e, _ := runEngineWith(t, engine.Options{Config: env.Config, Namespace: env.Namespace, Archive: store, HooksAddr: "127.0.0.1:0"}, file)
	url := "http://" + e.HooksAddr() + "/hooks/deploys-" + env.Namespace + "/github"
	get := func(ctx context.Context) (*unstructured.Unstructured, error) {
		u := &unstructured.Unstructured{}
		u.SetAPIVersion(group + "/v1")
		u.SetKind("Deploy")
		return u, env.Client.Get(ctx, client.ObjectKey{Namespace: env.Namespace, Name: "pr-12"}, u)
	}
	for i, sha := range []string{"abc1234", "def5678"} {
		body := fmt.Sprintf(`{"action": "created", "issue": {"number": 12}, "comment": {"body": "/deploy %s", "user": {"login": "alice"}}}`, sha)
		status, answer := deliver(t, url, delivery{id: fmt.Sprintf("o-%d", i), event: "issue_comment", body: []byte(body), secret: "s3cret"})
		if status != http.StatusAccepted {
			t.Fatalf("answered %d %v", status, answer)
		}
		rec := waitDelivery(t, store, answer["delivery"], archive.DeliveryHandled)
		if want := []string{"Deploy " + env.Namespace + "/pr-12"}; !slices.Equal(rec.Objects, want) {
			t.Errorf("the delivery caused the objects %v, want %v", rec.Objects, want)
		}
		u, err := get(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		got, _, _ := unstructured.NestedString(u.Object, "spec", "sha")
		by, _, _ := unstructured.NestedString(u.Object, "spec", "requestedBy")
		if got != sha || by != "alice" || u.GetLabels()["delivery"] != fmt.Sprintf("o-%d", i) {
			t.Errorf("the object after delivery %d: sha %q by %q, labels %v; want %s by alice", i, got, by, u.GetLabels(), sha)
		}
	}
}

// TestAFloodOfForgedDeliveriesIsRefusedEvenWhenTheSecretIsNotReadAgain
// sends forged deliveries faster than the limit of the Secret's rereads (10
// a second, burst 5): a forged delivery whose verification fails reads the
// Secret again only while the limit allows, and is refused either way. A
// reread the limit refused once let such a delivery through, answered 202
// and handled (seen in the webhook bench on a loaded machine).
func TestAFloodOfForgedDeliveriesIsRefusedEvenWhenTheSecretIsNotReadAgain(t *testing.T) {
	t.Parallel()
	env := clustertest.New(t)
	store := newArchive(t)
	out := filepath.Join(t.TempDir(), "events.jsonl")
	hookSecret(t, env, "s3cret")
	e, _ := runEngineWith(t, engine.Options{Config: env.Config, Namespace: env.Namespace, Archive: store, HooksAddr: "127.0.0.1:0"})
	d := hooksOperator(t, env, out)
	if err := e.Apply(t.Context(), d); err != nil {
		t.Fatal(err)
	}
	url := "http://" + e.HooksAddr() + "/hooks/" + d.Operator.Name + "/github"
	body := []byte(`{"action": "created", "comment": {"body": "forged"}}`)
	// The first reads the Secret into the cache; the rest find it there.
	if status, answer := deliver(t, url, delivery{id: "f-0", event: "issue_comment", body: body, secret: "s3cret"}); status != http.StatusAccepted {
		t.Fatalf("a signed delivery was answered %d %v, want 202", status, answer)
	}
	const n = 40
	statuses := make([]int, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			statuses[i], _ = deliver(t, url, delivery{id: fmt.Sprintf("f-%d", i+1), event: "issue_comment", body: body, secret: "a guess"})
		})
	}
	wg.Wait()
	for i, s := range statuses {
		if s != http.StatusUnauthorized {
			t.Errorf("forged delivery f-%d was answered %d, want 401", i+1, s)
		}
	}
	page, err := store.ListDeliveries(t.Context(), archive.DeliveryQuery{Operator: d.Operator.Name, Outcome: archive.DeliveryPending, Limit: 100})
	if err != nil {
		t.Fatal(err)
	}
	for _, dl := range page.Deliveries {
		if dl.DeliveryID != "f-0" {
			t.Errorf("forged delivery %s was accepted", dl.DeliveryID)
		}
	}
}
