package cli

import (
	"net"
	"strings"
	"testing"

	"k8s.io/client-go/rest"

	"github.com/opkit-dev/opkit/internal/engine"
	"github.com/opkit-dev/opkit/internal/stack"
)

func TestMetricsAddrTakenNamesTheFlag(t *testing.T) {
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	f := &metricsFlag{addr: taken.Addr().String()}
	// The engine binds the address in New, before it contacts the API
	// server: Start fails there.
	_, err = stack.Start(t.Context(), stack.Options{Engine: engine.Options{Config: &rest.Config{Host: "https://127.0.0.1:1"}, MetricsAddr: f.addr}})
	err = f.explain(err)
	if want := "--metrics-addr " + taken.Addr().String() + ": "; err == nil || !strings.HasPrefix(err.Error(), want) || !strings.Contains(err.Error(), "address already in use") {
		t.Errorf("an address given and taken: %v; want an error starting %q, saying it is in use", err, want)
	}
}
