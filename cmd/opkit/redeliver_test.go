package main

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/opkit-dev/opkit/internal/archive"
	"github.com/opkit-dev/opkit/internal/devcluster/clustertest"
)

// accepted is opkit events redeliver's line for an accepted redelivery.
var accepted = regexp.MustCompile(`(?m)^accepted as delivery ([0-9a-z]{18}): follow it with opkit events show ([0-9a-z]{18})$`)

// TestEventsRedeliverHandlesADeliveryAgainOrSaysWhyNot: opkit events
// redeliver, against an opkit run that received a signed delivery, prints
// who asked and the accepted answer with the new delivery's id, which is
// then handled under a key of its own; the sender's own redelivery is
// refused (409) saying how to redeliver on purpose, and that refused
// delivery, redelivered, is handled; an id the archive does not hold is
// refused, with the engine's reason, and exits 1.
func TestEventsRedeliverHandlesADeliveryAgainOrSaysWhyNot(t *testing.T) {
	t.Parallel()
	cl, c := startPlane(t)
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "handler.sh"), []byte(keyHandler), 0o755); err != nil {
		t.Fatal(err)
	}
	def := filepath.Join(dir, "hooks.yaml")
	if err := os.WriteFile(def, fmt.Appendf(nil, hooksOperatorYAML, dir), 0o644); err != nil {
		t.Fatal(err)
	}
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "hook"}, StringData: map[string]string{"secret": "s3cret"}}
	if err := c.Create(t.Context(), secret); err != nil {
		t.Fatal(err)
	}
	archivePath := filepath.Join(dir, "runs.db")
	_, out := startOpkit(t, "run", "-f", def, "--kubeconfig", cl.KubeconfigPath(), "--archive", archivePath, "--hooks-addr", "127.0.0.1:0", "--metrics-addr", "0")
	url := hooksSourceURL(t, out)

	status, answer := postDelivery(t, url, "d-1", "s3cret", []byte(`{"action": "created"}`))
	if status != http.StatusAccepted {
		t.Fatalf("answered %d %v, want 202", status, answer)
	}
	first := answer["delivery"]
	clustertest.Eventually(t, 60*time.Second, "the delivery handled", func(context.Context) (bool, error) {
		return opkitEvent(t, archivePath, first).Outcome == archive.DeliveryHandled, nil
	})

	res := opkit(t, "", "events", "redeliver", first, "--reason", "the record handler is fixed", "--kubeconfig", cl.KubeconfigPath())
	mustSucceed(t, res, "opkit events redeliver "+first)
	m := accepted.FindStringSubmatch(res.stdout)
	if m == nil || m[1] != m[2] || !strings.Contains(res.stdout, "redelivery of "+first+" asked by ") || !strings.Contains(res.stdout, "(Redelivery default/"+first+"-") {
		t.Fatalf("opkit events redeliver printed:\n%s\nwant who asked, the Redelivery, and the accepted answer with the new delivery's id", res.stdout)
	}
	again := m[1]
	clustertest.Eventually(t, 60*time.Second, "the redelivery handled", func(context.Context) (bool, error) {
		return opkitEvent(t, archivePath, again).Outcome == archive.DeliveryHandled, nil
	})
	want := []string{"hooks/event/github/d-1/record", "hooks/event/github/d-1/redelivery/" + again + "/record"}
	if keys := keysIn(filepath.Join(dir, "keys")); !slices.Equal(keys, want) {
		t.Errorf("the handler ran with the keys %v, want %v", keys, want)
	}
	shown := opkit(t, "", "events", "show", again, "--archive", archivePath)
	mustSucceed(t, shown, "opkit events show "+again)
	if !strings.Contains(shown.stdout, "Redelivery of:") || !strings.Contains(shown.stdout, first+", asked by ") || !strings.Contains(shown.stdout, ": the record handler is fixed") {
		t.Errorf("opkit events show %s does not name its original, who asked and why:\n%s", again, shown.stdout)
	}

	// The sender's own redelivery is refused as a replay, saying how to
	// redeliver on purpose; the refused record is redelivered, and
	// handled.
	status, answer = postDelivery(t, url, "d-1", "s3cret", []byte(`{"action": "created"}`))
	replay := answer["delivery"]
	if status != http.StatusConflict || !strings.Contains(answer["reason"], "opkit events redeliver "+replay) {
		t.Fatalf("the sender's redelivery answered %d %v, want 409 saying opkit events redeliver %s", status, answer, replay)
	}
	res = opkit(t, "", "events", "redeliver", replay, "--reason", "GitHub's redelivery, on purpose", "--kubeconfig", cl.KubeconfigPath())
	mustSucceed(t, res, "opkit events redeliver "+replay)
	m = accepted.FindStringSubmatch(res.stdout)
	if m == nil {
		t.Fatalf("opkit events redeliver of the refused replay printed:\n%s\nwant it accepted", res.stdout)
	}
	clustertest.Eventually(t, 60*time.Second, "the refused replay's redelivery handled", func(context.Context) (bool, error) {
		return opkitEvent(t, archivePath, m[1]).Outcome == archive.DeliveryHandled, nil
	})
	if keys := keysIn(filepath.Join(dir, "keys")); len(keys) != 3 || keys[2] != "hooks/event/github/d-1/redelivery/"+m[1]+"/record" {
		t.Errorf("after the refused replay's redelivery, the handler ran with the keys %v; want a third, of its redelivery", keys)
	}

	unknown := archive.NewID(time.Now())
	res = opkit(t, "", "events", "redeliver", unknown, "--kubeconfig", cl.KubeconfigPath())
	if want := "refused: no delivery " + unknown + " in the run archive"; res.code != 1 || !strings.Contains(res.stderr, want) {
		t.Errorf("opkit events redeliver of an unknown id: exit %d, stderr %q; want 1 saying %q", res.code, res.stderr, want)
	}
	if strings.Contains(res.stdout, "accepted") {
		t.Errorf("a refused redelivery printed %q", res.stdout)
	}
}
