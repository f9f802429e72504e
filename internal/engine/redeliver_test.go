package engine_test

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/opkit-dev/opkit/api/v1alpha1"
	"github.com/opkit-dev/opkit/internal/archive"
	"github.com/opkit-dev/opkit/internal/devcluster/clustertest"
	"github.com/opkit-dev/opkit/internal/engine"
)

// askRedelivery creates a Redelivery of the delivery id in the test's
// namespace and waits for the engine's answer.
func askRedelivery(t *testing.T, env *clustertest.Env, id, by, reason string) v1alpha1.RedeliveryStatus {
	t.Helper()
	obj := v1alpha1.NewRedelivery(env.Namespace, v1alpha1.RedeliverySpec{Delivery: id, By: by, Reason: reason})
	create(t, env, obj)
	var status v1alpha1.RedeliveryStatus
	eventually(t, 60*time.Second, "the answer to the Redelivery of "+id, func(ctx context.Context) (bool, error) {
		got := &unstructured.Unstructured{}
		got.SetGroupVersionKind(obj.GroupVersionKind())
		if err := env.Client.Get(ctx, client.ObjectKeyFromObject(obj), got); err != nil {
			return false, err
		}
		_, s, err := v1alpha1.ReadRedelivery(got)
		status = s
		return s.Outcome != "", err
	})
	return status
}

// TestADeliveryIsRedeliveredOnPurposeThroughARedeliveryObject: a handled
// delivery, and one its handler refused, are handled again when a
// Redelivery asks: recorded as redeliveries of the original (linked both
// ways, who and why), their handler run again under a key of its own;
// the sender's own redelivery stays a replay (409) whose answer says how
// to redeliver on purpose; an unknown id, a delivery refused before it
// was verified or filtered out, one still being handled, and a source no
// longer in the definition are refused with their reason.
func TestADeliveryIsRedeliveredOnPurposeThroughARedeliveryObject(t *testing.T) {
	t.Parallel()
	env := clustertest.New(t)
	store := newArchive(t)
	out := filepath.Join(t.TempDir(), "events.jsonl")
	hookSecret(t, env, "s3cret")
	e, _ := runEngineWith(t, engine.Options{Config: env.Config, Archive: store, HooksAddr: "127.0.0.1:0", Namespace: env.Namespace})
	d := hooksOperator(t, env, out)
	if err := e.Apply(t.Context(), d); err != nil {
		t.Fatal(err)
	}
	op := d.Operator.Name
	url := "http://" + e.HooksAddr() + "/hooks/" + op + "/github"
	send := func(id, event, body, secret string) (int, map[string]string) {
		return deliver(t, url, delivery{id: id, event: event, body: []byte(body), secret: secret})
	}

	status, answer := send("d-1", "issue_comment", `{"action": "created", "text": "first"}`, "s3cret")
	if status != http.StatusAccepted {
		t.Fatalf("answered %d %v, want 202", status, answer)
	}
	first := waitDelivery(t, store, answer["delivery"], archive.DeliveryHandled)

	// The sender's redelivery is a replay, and says how to redeliver.
	status, answer = send("d-1", "issue_comment", `{"action": "created", "text": "first"}`, "s3cret")
	if want := "opkit events redeliver " + answer["delivery"]; status != http.StatusConflict || !strings.Contains(answer["reason"], want) {
		t.Errorf("the sender's redelivery was answered %d %v, want 409 saying %q", status, answer, want)
	}

	got := askRedelivery(t, env, first.ID, "alice", "the comment handler is fixed")
	if got.Outcome != v1alpha1.RedeliveryAccepted || !archive.ValidID(got.Redelivery) {
		t.Fatalf("the Redelivery of a handled delivery was answered %+v, want Accepted with the new record's id", got)
	}
	again := waitDelivery(t, store, got.Redelivery, archive.DeliveryHandled)
	if again.RedeliveryOf != first.ID || again.RedeliveredBy != "alice" || again.RedeliveryReason != "the comment handler is fixed" || again.DeliveryID != "d-1" || len(again.Runs) != 1 {
		t.Errorf("the redelivery was recorded as %+v, want of %s, by alice, with the reason, delivery id d-1, one run", again, first.ID)
	}
	if orig, err := store.GetDelivery(t.Context(), first.ID); err != nil || !slices.Equal(orig.Redeliveries, []string{again.ID}) {
		t.Errorf("the original's Redeliveries: %v (%v), want [%s]", orig.Redeliveries, err, again.ID)
	}
	wantKey := fmt.Sprintf("%s/event/github/d-1/redelivery/%s/comment", op, again.ID)
	if run, err := store.Get(t.Context(), again.Runs[0]); err != nil || run.Key != wantKey || run.Outcome != archive.Succeeded || run.UID != again.ID {
		t.Errorf("the redelivery's run: %+v (%v), want Succeeded with key %s", run, err, wantKey)
	}

	// A delivery its handler refused: handled again, and handled this time.
	status, answer = send("d-2", "issue_comment", `{"action": "created", "text": "deploy", "refuse": "not now"}`, "s3cret")
	if status != http.StatusAccepted {
		t.Fatalf("answered %d %v, want 202", status, answer)
	}
	turnedDown := waitDelivery(t, store, answer["delivery"], archive.DeliveryHandled)
	if got := askRedelivery(t, env, turnedDown.ID, "bob", ""); got.Outcome != v1alpha1.RedeliveryAccepted {
		t.Errorf("the Redelivery of a delivery its handler refused was answered %+v, want Accepted", got)
	} else {
		waitDelivery(t, store, got.Redelivery, archive.DeliveryHandled)
	}
	var keys []string
	for _, r := range eventRecords(t, out) {
		keys = append(keys, r.Key)
	}
	if want := []string{op + "/event/github/d-1/comment", wantKey}; len(keys) != 4 || !slices.Equal(keys[:2], want) {
		t.Errorf("the handler ran with the keys %v, want %v then d-2's twice", keys, want)
	}

	// Refused, each with its reason, and nothing recorded.
	_, forged := send("d-3", "issue_comment", `{"action": "created"}`, "guess")
	_, filtered := send("d-4", "push", `{"action": "created"}`, "s3cret")
	hold := filepath.Join(t.TempDir(), "release")
	status, answer = send("d-5", "issue_comment", fmt.Sprintf(`{"action": "created", "text": "slow", "hold": %q}`, hold), "s3cret")
	if status != http.StatusAccepted {
		t.Fatalf("answered %d %v, want 202", status, answer)
	}
	slow := answer["delivery"]
	for _, c := range []struct{ name, id, reason string }{
		{"an unknown id", archive.NewID(time.Now()), "no delivery"},
		{"a delivery refused before it was verified", forged["delivery"], "refused before its sender was verified (bad signature)"},
		{"a delivery the filter refuses", filtered["delivery"], "the filter of source github refuses delivery " + filtered["delivery"]},
		{"a delivery still being handled", slow, "is still being handled"},
	} {
		if got := askRedelivery(t, env, c.id, "alice", ""); got.Outcome != v1alpha1.RedeliveryRefused || !strings.Contains(got.Reason, c.reason) {
			t.Errorf("%s: answered %+v, want Refused saying %q", c.name, got, c.reason)
		}
	}
	if err := os.WriteFile(hold, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	waitDelivery(t, store, slow, archive.DeliveryHandled)

	// The source renamed: its deliveries can no longer be handled.
	if err := e.Apply(t.Context(), hooksOperatorWith(t, env, out, "gh")); err != nil {
		t.Fatal(err)
	}
	if got := askRedelivery(t, env, first.ID, "alice", ""); got.Outcome != v1alpha1.RedeliveryRefused || !strings.Contains(got.Reason, "no longer has the source github") {
		t.Errorf("a delivery of a source gone: answered %+v, want Refused saying the source is gone", got)
	}
	if orig, err := store.GetDelivery(t.Context(), first.ID); err != nil || len(orig.Redeliveries) != 1 {
		t.Errorf("refused Redeliveries recorded deliveries: %v (%v)", orig.Redeliveries, err)
	}
}
