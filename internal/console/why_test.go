package console_test

import (
	"context"
	"html"
	"net/http"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/opkit-dev/opkit/internal/archive"
	"github.com/opkit-dev/opkit/internal/devcluster/clustertest"
)

// TestTheWhyPageSaysWhatMadeAnObjectLikeThis: a Chore created, then its
// spec changed by bob, has on its why page (linked from its timeline),
// newest first: the update run with bob's change as its cause, bob's
// change, the create run. A ConfigMap a handler on event wrote (it names
// its run, opkit.dev/run) has the run and alice's delivery behind it,
// each linked to its page.
func TestTheWhyPageSaysWhatMadeAnObjectLikeThis(t *testing.T) {
	f, env := withChore(t, "why", "first")
	ctx := t.Context()
	u := &unstructured.Unstructured{}
	u.SetAPIVersion("console.example.com/v1")
	u.SetKind("Chore")
	clustertest.Eventually(t, 30*time.Second, "bob changes the Chore's text", func(ctx context.Context) (bool, error) {
		if err := env.Client.Get(ctx, client.ObjectKey{Namespace: env.Namespace, Name: "why"}, u); err != nil {
			return false, err
		}
		_ = unstructured.SetNestedField(u.Object, "second", "spec", "text")
		return env.Client.Update(ctx, u, client.FieldOwner("bob")) == nil, nil
	})
	runs := waitRuns(t, f, env.Namespace, "why", archive.Succeeded, 2)
	created, updated := runs[1], runs[0]
	if created.Trigger != "create" || updated.Trigger != "update" {
		t.Fatalf("the Chore's runs: %s then %s; want create then update", created.Trigger, updated.Trigger)
	}

	self := "/operators/chores/objects/" + env.Namespace + "/why"
	mustContain(t, "the timeline", get(t, f.url+self), `<a class="why-link" href="`+self+`/why">`)
	page := get(t, f.url+self+"/why")
	mustContain(t, "the why page", page, "Why "+env.Namespace+"/why is like this", "opkit why "+env.Namespace+"/why --kind Chore",
		`<strong class="manager">bob</strong>`, "<code>spec.text</code> = <code>second</code>",
		`which caused <a class="cause-link" href="/runs/`+updated.ID+`">`, `<a class="run-link" href="/runs/`+created.ID+`">`)
	order := []string{`href="/runs/` + updated.ID + `">run `, `<strong class="manager">bob</strong>`, `href="/runs/` + created.ID + `">run `}
	at := -1
	for _, s := range order {
		i := strings.Index(page, s)
		if i < at {
			t.Errorf("the why page has %q before what comes after it, newest first: %q", s, order)
		}
		at = i
	}
	if r := do(t, http.MethodGet, f.url+self+"/why?since=forever", nil); r.status != http.StatusBadRequest || !strings.Contains(r.body, "want a duration") {
		t.Errorf("since=forever: %d; want 400 naming what is wrong\n%s", r.status, r.body)
	}
	if page := get(t, f.url+self+"/why?since=1h"); !strings.Contains(page, `<option value="1h" selected>`) {
		t.Errorf("since=1h is not the selected bound:\n%s", page)
	}

	// A ConfigMap written by a handler on event of an operator this
	// console does not run, which names its run.
	const op = "hooks-why"
	at0 := time.Now().Add(-time.Minute)
	d := &archive.Delivery{Operator: op, Source: "github", Event: "issue_comment", DeliveryID: "d-why", ReceivedAt: at0,
		Payload: []byte(`{"action":"created","sender":{"login":"alice"}}`)}
	if err := f.store.RecordDelivery(ctx, d); err != nil {
		t.Fatal(err)
	}
	run := record(t, f.store, archive.Run{Operator: op, Handler: "deploy", Action: "exec", Trigger: "event", APIVersion: "opkit.dev/v1alpha1",
		Kind: "Operator", Name: op, UID: d.ID, Key: op + "/event/deploy/" + d.ID, Attempt: 1, StartedAt: at0.Add(time.Second),
		Outcome: archive.Succeeded, Input: []byte(`{"event":{"id":"` + d.ID + `"}}`)})
	d.Outcome, d.Runs, d.HandledAt = archive.DeliveryHandled, []string{run}, at0.Add(2*time.Second)
	if err := f.store.FinishDelivery(ctx, d); err != nil {
		t.Fatal(err)
	}
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: env.Namespace, Name: "deployed", Annotations: map[string]string{"opkit.dev/run": run}},
		Data: map[string]string{"image": "v2"}}
	if err := env.Client.Create(ctx, cm, client.FieldOwner("deploy-handler")); err != nil {
		t.Fatal(err)
	}
	page = get(t, f.url+"/operators/"+op+"/objects/"+env.Namespace+"/deployed/why?apiVersion=v1&kind=ConfigMap")
	mustContain(t, "the ConfigMap's why page", page, `<strong class="manager">deploy-handler</strong>`, "<code>data.image</code>",
		`<a class="run-link" href="/runs/`+run+`">`, `on <a class="cause-link" href="/events/`+d.ID+`">delivery `+d.ID+`</a>`,
		`<a class="delivery-link" href="/events/`+d.ID+`">`, `by <strong class="sender">alice</strong>`,
		// the kind stays in the bound's form
		`<input type="hidden" name="kind" value="ConfigMap">`)
	if strings.Contains(page, html.EscapeString("no longer in the archive")) {
		t.Errorf("the ConfigMap's why page says a record is missing:\n%s", page)
	}
}
