package engine_test

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/opkit-dev/opkit/internal/devcluster/clustertest"
	"github.com/opkit-dev/opkit/internal/engine"
)

// TestTheHooksEndpointSliceNamesTheLeaderOnly runs two engines of one
// leader election, each with a webhook source: the hooks EndpointSlice
// names the leader's address and hooks port, never the standby's; each
// /readyz?verbose says which replica leads; once the leader stops, the
// standby takes over and writes its own address, and a delivery to it is
// accepted; the last engine to stop empties the slice. The addresses are
// documentation addresses (the API refuses loopback ones in a slice):
// routing them is the Service proxy's part, not the engine's.
func TestTheHooksEndpointSliceNamesTheLeaderOnly(t *testing.T) {
	t.Parallel()
	env := clustertest.New(t)
	hookSecret(t, env, "s3cret")
	const name = "opkit-hooks"
	// As the manifests make it: no endpoints, no ports.
	create(t, env, &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Namespace: env.Namespace, Name: name, Labels: map[string]string{discoveryv1.LabelServiceName: name}},
		AddressType: discoveryv1.AddressTypeIPv4,
	})
	out := filepath.Join(t.TempDir(), "events.jsonl")
	d := hooksOperator(t, env, out)

	start := func(ip, pod string) (*engine.Engine, func(), chan error) {
		e, stop := runEngineWith(t, engine.Options{
			Config: env.Config, Namespace: env.Namespace, HooksAddr: "127.0.0.1:0", MetricsAddr: "127.0.0.1:0",
			LeaderElection: &engine.LeaderElection{Namespace: env.Namespace, Name: "engines"},
			HooksEndpoint:  &engine.HooksEndpoint{Namespace: env.Namespace, Name: name, IP: ip, Pod: pod},
		})
		applied := make(chan error, 1)
		go func() { applied <- e.Apply(t.Context(), d) }() // waits until it leads
		return e, stop, applied
	}
	slice := func() *discoveryv1.EndpointSlice {
		var s discoveryv1.EndpointSlice
		if err := env.Client.Get(t.Context(), client.ObjectKey{Namespace: env.Namespace, Name: name}, &s); err != nil {
			t.Fatal(err)
		}
		return &s
	}
	names := func(ip string, e *engine.Engine) func(context.Context) (bool, error) {
		return func(context.Context) (bool, error) {
			_, port, _ := net.SplitHostPort(e.HooksAddr())
			s := slice()
			return len(s.Endpoints) == 1 && len(s.Endpoints[0].Addresses) == 1 && s.Endpoints[0].Addresses[0] == ip &&
				len(s.Ports) == 1 && s.Ports[0].Port != nil && fmt.Sprint(*s.Ports[0].Port) == port && *s.Ports[0].Name == "hooks", nil
		}
	}
	readyz := func(e *engine.Engine) (string, string) {
		resp, err := http.Get("http://" + e.MetricsAddr() + "/readyz?verbose")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp.Header.Get("Opkit-Leading"), string(body)
	}

	a, stopA, appliedA := start("192.0.2.10", "engine-a")
	if err := <-appliedA; err != nil {
		t.Fatal(err)
	}
	eventually(t, 60*time.Second, "the slice names the first engine, the leader", names("192.0.2.10", a))
	b, stopB, appliedB := start("192.0.2.11", "engine-b")
	var standby string
	defer func() {
		if t.Failed() {
			t.Logf("the standby's last /readyz?verbose:\n%s", standby)
		}
	}()
	eventually(t, 60*time.Second, "the standby is ready and names the leader", func(context.Context) (bool, error) {
		leading, body := readyz(b)
		standby = body
		return leading == "false" && strings.Contains(body, "check passed") && strings.Contains(body, "this replica is a standby"), nil
	})
	if leading, body := readyz(a); leading != "true" || !strings.Contains(body, "leader: this replica, holder of the Lease "+env.Namespace+"/engines") {
		t.Errorf("the leader's /readyz?verbose (Opkit-Leading %q):\n%s", leading, body)
	}
	if s := slice(); s.Endpoints[0].TargetRef == nil || s.Endpoints[0].TargetRef.Name != "engine-a" {
		t.Errorf("the slice's endpoint refers to %v, want the Pod engine-a", s.Endpoints[0].TargetRef)
	}
	if !strings.Contains(standby, "leader: ") || strings.Contains(standby, "leader: none") {
		t.Errorf("the standby's /readyz?verbose does not name the holder:\n%s", standby)
	}
	select {
	case err := <-appliedB:
		t.Fatalf("the standby applied the operator while the first engine leads (%v)", err)
	default:
	}

	stopA()
	if err := <-appliedB; err != nil {
		t.Fatal(err)
	}
	eventually(t, 60*time.Second, "the slice names the new leader", names("192.0.2.11", b))
	url := "http://" + b.HooksAddr() + "/hooks/" + d.Operator.Name + "/github"
	body := []byte(`{"action": "created", "comment": {"body": "after the takeover"}, "text": "after the takeover"}`)
	if status, answer := deliver(t, url, delivery{id: "d-1", event: "issue_comment", body: body, secret: "s3cret"}); status != http.StatusAccepted {
		t.Errorf("a delivery to the new leader was answered %d %v, want 202", status, answer)
	}
	if leading, body := readyz(b); leading != "true" || !strings.Contains(body, "leader: this replica") {
		t.Errorf("the new leader's /readyz?verbose (Opkit-Leading %q):\n%s", leading, body)
	}

	stopB()
	if s := slice(); len(s.Endpoints) != 0 {
		t.Errorf("the last engine stopped and the slice still names %v", s.Endpoints)
	}
}
