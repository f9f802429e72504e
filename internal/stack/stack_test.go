package stack_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"

	"github.com/opkit-dev/opkit/internal/archive"
	"github.com/opkit-dev/opkit/internal/definition"
	"github.com/opkit-dev/opkit/internal/devcluster/clustertest"
	"github.com/opkit-dev/opkit/internal/engine"
	"github.com/opkit-dev/opkit/internal/stack"
	"github.com/opkit-dev/opkit/pkg/opkittest"
)

func TestMain(m *testing.M) { clustertest.Main(m) }

// seer watches the ConfigMaps labelled seen=yes of one namespace: it owns
// no custom resource, so the console learns it from the engine's
// definitions alone.
const seer = `apiVersion: opkit.dev/v1alpha1
kind: Operator
metadata: {name: %s}
spec:
  watch:
    apiVersion: v1
    kind: ConfigMap
    namespaces: [%s]
    selector: {matchLabels: {seen: "yes"}}
  handlers:
  - name: see
    on: [create]
    exec: {command: [/bin/sh, -c, 'echo seen >&2']}
`

func TestStackRunsTheEngineBesideItsConsoleAndClosesItsArchiveLast(t *testing.T) {
	env := clustertest.New(t)
	name := "seer-" + env.Namespace[len(env.Namespace)-6:]
	src, err := definition.Load("seer.yaml", fmt.Appendf(nil, seer, name, env.Namespace))
	if err != nil {
		t.Fatal(err)
	}
	d, err := definition.Compile(src[0])
	if err != nil {
		t.Fatal(err)
	}
	s, err := stack.Start(context.WithoutCancel(t.Context()), stack.Options{
		Engine:  engine.Options{Config: env.Config, Namespace: env.Namespace},
		Archive: filepath.Join(t.TempDir(), "runs.db"),
		Console: &stack.Console{Addr: "127.0.0.1:0"},
	})
	if err != nil {
		t.Fatal(err)
	}
	stopped := false
	t.Cleanup(func() {
		if !stopped {
			_ = s.Stop()
		}
	})
	if err := s.Apply(t.Context(), d); err != nil {
		t.Fatal(err)
	}
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: env.Namespace, Name: "one", Labels: map[string]string{"seen": "yes"}}}
	if err := env.Client.Create(t.Context(), cm); err != nil {
		t.Fatal(err)
	}
	opkittest.Eventually(t, 60*time.Second, "the create run archived as Succeeded", func(ctx context.Context) (bool, error) {
		runs, err := archive.ListAll(ctx, s.Archive, archive.Query{Operator: name, Outcome: archive.Succeeded})
		return len(runs) == 1, err
	})
	// The console learnt the operator from the engine beside it: it owns
	// no CRD to be found by.
	if page, err := get(s.ConsoleURL() + "/"); err != nil || !strings.Contains(page, `href="/operators/`+name+`"`) {
		t.Errorf("the console's overview: %v; want a link to the operator %s, which the engine runs:\n%s", err, name, page)
	}

	stopped = true
	if err := s.Stop(); err != nil {
		t.Fatalf("Stop: %v", err)
	}
	select {
	case <-s.Done():
	default:
		t.Error("Done is not closed after Stop returned")
	}
	if err := s.Stop(); err != nil {
		t.Errorf("a second Stop: %v; want the first's answer, nil", err)
	}
	if _, err := get(s.ConsoleURL() + "/"); err == nil {
		t.Errorf("the console still answers at %s after Stop", s.ConsoleURL())
	}
	if _, err := s.Archive.List(context.Background(), archive.Query{}); err == nil {
		t.Error("the archive the stack opened still answers after Stop; want it closed")
	}
}

func TestAGivenArchiveStaysOpenAfterAFailedStartAndAfterStop(t *testing.T) {
	env := clustertest.New(t)
	store, err := archive.OpenSQLite(t.Context(), filepath.Join(t.TempDir(), "runs.db"), archive.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = store.Close() })
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()

	_, err = stack.Start(t.Context(), stack.Options{
		Engine:  engine.Options{Config: env.Config, Namespace: env.Namespace},
		Store:   store,
		Console: &stack.Console{Addr: taken.Addr().String()},
	})
	if le, ok := errors.AsType[*stack.ListenError](err); !ok || le.Listener != "console" || le.Addr != taken.Addr().String() {
		t.Fatalf("the console's address taken: Start said %v; want a *ListenError of the console at %s", err, taken.Addr())
	}
	if _, err := store.List(t.Context(), archive.Query{}); err != nil {
		t.Errorf("the given archive after a failed Start: %v; want it open", err)
	}

	s, err := stack.Start(t.Context(), stack.Options{Engine: engine.Options{Config: env.Config, Namespace: env.Namespace}, Store: store})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Stop(); err != nil {
		t.Fatalf("Stop: %v", err)
	}
	if _, err := store.List(t.Context(), archive.Query{}); err != nil {
		t.Errorf("the given archive after Stop: %v; want it open, the caller's to close", err)
	}
}

func TestStartRequiresTheEnginesConfig(t *testing.T) {
	_, err := stack.Start(t.Context(), stack.Options{Console: &stack.Console{Addr: "127.0.0.1:0"}})
	if err == nil || !strings.Contains(err.Error(), "Options.Engine.Config is required") {
		t.Errorf("Start without a Config: %v; want an error naming Options.Engine.Config", err)
	}
	// A console needs the archive it reads.
	_, err = stack.Start(t.Context(), stack.Options{Engine: engine.Options{Config: &rest.Config{Host: "https://127.0.0.1:1"}}, Console: &stack.Console{Addr: "127.0.0.1:0"}})
	if err == nil || !strings.Contains(err.Error(), "Archive") {
		t.Errorf("a console without an archive: %v; want an error naming the archive", err)
	}
}

func get(url string) (string, error) {
	c := &http.Client{Timeout: 10 * time.Second}
	resp, err := c.Get(url)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		return string(body), fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	return string(body), err
}
