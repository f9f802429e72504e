package engine_test

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/opkit-dev/opkit/internal/devcluster/clustertest"
	"github.com/opkit-dev/opkit/internal/engine"
)

// TestTheRunnersEndpointSliceNamesTheLeadersRunnerAPIOnly runs two
// engines of one leader election, each serving the runner API on its own
// port: the runners Service's EndpointSlice names the leader's address
// and runner port, never the standby's, so that runners pull runs from
// the engine that runs the operators; once the leader stops, the new
// leader writes its own; the last to stop empties it.
func TestTheRunnersEndpointSliceNamesTheLeadersRunnerAPIOnly(t *testing.T) {
	t.Parallel()
	env := clustertest.New(t)
	const name = "opkit-runners"
	// As the manifests make it: no endpoints, no ports.
	create(t, env, &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Namespace: env.Namespace, Name: name, Labels: map[string]string{discoveryv1.LabelServiceName: name}},
		AddressType: discoveryv1.AddressTypeIPv4,
	})
	start := func(ip, pod, addr string) (*engine.Engine, func()) {
		return runEngineWith(t, engine.Options{
			Config: env.Config, MetricsAddr: "127.0.0.1:0",
			LeaderElection:  &engine.LeaderElection{Namespace: env.Namespace, Name: "engines"},
			RunnersEndpoint: &engine.RunnersEndpoint{HooksEndpoint: engine.HooksEndpoint{Namespace: env.Namespace, Name: name, IP: ip, Pod: pod}, Addr: addr},
		})
	}
	slice := func() *discoveryv1.EndpointSlice {
		var s discoveryv1.EndpointSlice
		if err := env.Client.Get(t.Context(), client.ObjectKey{Namespace: env.Namespace, Name: name}, &s); err != nil {
			t.Fatal(err)
		}
		return &s
	}
	names := func(ip, pod string, port int32) func(context.Context) (bool, error) {
		return func(context.Context) (bool, error) {
			s := slice()
			return len(s.Endpoints) == 1 && len(s.Endpoints[0].Addresses) == 1 && s.Endpoints[0].Addresses[0] == ip &&
				s.Endpoints[0].TargetRef != nil && s.Endpoints[0].TargetRef.Name == pod &&
				len(s.Ports) == 1 && s.Ports[0].Port != nil && *s.Ports[0].Port == port && s.Ports[0].Name != nil && *s.Ports[0].Name == "runners", nil
		}
	}

	_, stopA := start("192.0.2.20", "engine-a", "[::]:17384")
	eventually(t, 60*time.Second, "the slice names the first engine's runner API", names("192.0.2.20", "engine-a", 17384))
	b, stopB := start("192.0.2.21", "engine-b", "[::]:17385")
	eventually(t, 60*time.Second, "the second engine is a ready standby", func(context.Context) (bool, error) {
		resp, err := http.Get("http://" + b.MetricsAddr() + "/readyz?verbose")
		if err != nil {
			return false, nil
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp.Header.Get("Opkit-Leading") == "false" && strings.Contains(string(body), "this replica is a standby"), nil
	})
	if ok, _ := names("192.0.2.20", "engine-a", 17384)(t.Context()); !ok {
		t.Fatalf("with a standby, the slice names %+v %+v; want the leader's 192.0.2.20:17384 only", slice().Endpoints, slice().Ports)
	}

	stopA()
	eventually(t, 60*time.Second, "the slice names the new leader's runner API", names("192.0.2.21", "engine-b", 17385))
	stopB()
	if s := slice(); len(s.Endpoints) != 0 {
		t.Errorf("the last engine stopped and the slice still names %v", s.Endpoints)
	}
}
