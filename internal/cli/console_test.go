package cli

import (
	"context"
	"net"
	"path/filepath"
	"strings"
	"testing"

	"k8s.io/client-go/rest"

	"github.com/opkit-dev/opkit/internal/archive"
	"github.com/opkit-dev/opkit/internal/console"
)

func TestConsoleTakesAnotherPortOnlyWhenTheAddressIsTheDefault(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	store, err := archive.OpenSQLite(ctx, filepath.Join(t.TempDir(), "runs.db"), archive.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = store.Close() }()
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	opts := console.Options{Archive: store, Config: &rest.Config{Host: "https://127.0.0.1:1"}} // never reached: nothing is served

	f := &consoleFlags{addrFlag: "console", addr: taken.Addr().String(), anyPort: true}
	served, err := f.console().Serve(ctx, opts)
	if err != nil {
		t.Fatalf("the default address taken: %v; want another port", err)
	}
	if served.URL == "http://"+taken.Addr().String() || !strings.HasPrefix(served.URL, "http://127.0.0.1:") {
		t.Errorf("console at %s; want loopback on another port than %s", served.URL, taken.Addr())
	}
	f = &consoleFlags{addrFlag: "console", addr: taken.Addr().String()}
	_, err = f.console().Serve(ctx, opts)
	if err = f.explain(err); err == nil || !strings.Contains(err.Error(), "choose another address with --console") {
		t.Errorf("the user's address taken: %v; want an error that says what to do", err)
	}
}
