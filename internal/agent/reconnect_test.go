package agent

import (
	"bytes"
	"context"
	"io"
	"net"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/opkit-dev/opkit/api/v1alpha1"
	"github.com/opkit-dev/opkit/internal/devcluster/clustertest"
	"github.com/opkit-dev/opkit/internal/executor"
	"github.com/opkit-dev/opkit/internal/runners"
)

// An engine replaced while its agent waits on it is found again, as a
// runner behind a Service finds the engine's new Pod: the old engine's
// connections left open and silent (as a proxy that never closes them
// leaves them), and the new engine serving a certificate of a new CA,
// which the agent's CA file gets later. The agent gives up the take it
// sent the old engine, dials again, trusts the file's new CA and takes
// the new engine's run, within seconds of the new engine being ready.
func TestAnAgentFindsAReplacedEngineBehindASilentConnectionWithANewCA(t *testing.T) {
	env := clustertest.New(t)
	client, err := kubernetes.NewForConfig(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	files := t.TempDir()
	if err := os.MkdirAll(filepath.Join(files, "hooks"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(files, "hooks", "ok.sh"), []byte("#!/bin/sh\necho '{\"status\":{\"ok\":true}}'\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	caFile := filepath.Join(t.TempDir(), "ca.crt")

	// serve starts an engine's runner API, writes the CA it published into
	// the agent's CA file, and points the switch at it.
	sw := newSwitch(t)
	serve := func(ctx context.Context) *runners.Serving {
		t.Helper()
		s, err := runners.Serve(ctx, runners.ServeOptions{
			Addr: "127.0.0.1:0", Namespace: env.Namespace, Client: client, LostAfter: 2 * time.Second, PollFor: 2 * time.Second,
		})
		if err != nil {
			t.Fatal(err)
		}
		if err := s.WaitReady(ctx); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(caFile, s.CABundle(), 0o600); err != nil {
			t.Fatal(err)
		}
		sw.route(s.Addr())
		return s
	}
	run := func(ctx context.Context, s *runners.Serving) (string, error) {
		var log bytes.Buffer
		ex := &executor.InImage{Action: v1alpha1.ExecAction{Command: []string{"./hooks/ok.sh"}, Image: image}, Operator: "demo", Runners: s}
		res, err := ex.Run(ctx, executor.Request{RunID: "r1", Handler: "h", Trigger: "create", Key: "u/1/h", Attempt: 1, Input: []byte(`{}`), Timeout: 10 * time.Second, Log: &log})
		return status(res), err
	}

	oldCtx, stopOld := context.WithCancel(t.Context())
	defer stopOld()
	old := serve(oldCtx)

	// The agent dials the switch, as a runner dials the engine's Service.
	r := &rig{env: env, client: client}
	opts := Options{Engine: "https://127.0.0.1:" + sw.port(), Operator: "demo", Image: image, Name: "runner-a", Files: files,
		CAFile: caFile, TokenFile: r.token(t, "opkit-runner-demo", runners.Audience), Parallel: 2,
		Beat: 300 * time.Millisecond, TakeTimeout: 3 * time.Second}
	agentCtx, stopAgent := context.WithCancel(t.Context())
	var wg sync.WaitGroup
	wg.Go(func() {
		if err := Run(agentCtx, opts); err != nil {
			t.Errorf("agent: %v", err)
		}
	})
	defer func() { stopAgent(); wg.Wait() }()
	if got, err := run(t.Context(), old); err != nil || got != `{"status":{"ok":true}}` {
		t.Fatalf("a run through the first engine: %s, %v", got, err)
	}

	// Replaced: the old engine stops, its connections stay open without
	// a word, and the new one keeps its certificate in a new Secret.
	sw.silence()
	stopOld()
	// The old engine may write either once more as it stops: removed
	// until both stay so.
	clustertest.Eventually(t, 30*time.Second, "the old engine's certificate removed", func(ctx context.Context) (bool, error) {
		_ = client.CoreV1().Secrets(env.Namespace).Delete(ctx, runners.TLSSecret, metav1.DeleteOptions{})
		_ = client.CoreV1().ConfigMaps(env.Namespace).Delete(ctx, runners.CAConfigMap, metav1.DeleteOptions{})
		_, errS := client.CoreV1().Secrets(env.Namespace).Get(ctx, runners.TLSSecret, metav1.GetOptions{})
		_, errC := client.CoreV1().ConfigMaps(env.Namespace).Get(ctx, runners.CAConfigMap, metav1.GetOptions{})
		return errS != nil && errC != nil, nil
	})
	oldCA, _ := os.ReadFile(caFile)
	fresh := serve(t.Context())
	if newCA, _ := os.ReadFile(caFile); bytes.Equal(oldCA, newCA) {
		t.Fatal("the new engine serves the old CA: the test would not check that the agent reads the new one")
	}

	// Within seconds: the bound is the take the agent gave up (3s here,
	// a minute by default), its retry and a dial, scaled for a loaded
	// machine; an agent that waits on the silent connection never takes
	// it.
	within := clustertest.Scaled(3*time.Second + 10*time.Second)
	ctx, cancel := context.WithTimeout(t.Context(), within)
	defer cancel()
	start := time.Now()
	got, err := run(ctx, fresh)
	if err != nil || got != `{"status":{"ok":true}}` {
		t.Fatalf("a run through the new engine, %s after it was ready: %s, %v; want it taken by the agent within %s", time.Since(start).Round(time.Millisecond), got, err, within)
	}
	t.Logf("the new engine's run was taken %s after it was ready", time.Since(start).Round(time.Millisecond))
}

// switchProxy forwards TCP connections to one address, which route
// changes for the connections that come after; silence leaves the
// connections made so far open, unanswered: a peer gone without a word.
type switchProxy struct {
	ln net.Listener

	mu     sync.Mutex
	target string
	open   []net.Conn // upstream connections, closed by silence
	held   []net.Conn // client connections silenced, closed at the end
}

func newSwitch(t *testing.T) *switchProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &switchProxy{ln: ln}
	go s.serve()
	t.Cleanup(func() {
		_ = ln.Close()
		s.mu.Lock()
		defer s.mu.Unlock()
		for _, c := range append(s.open, s.held...) {
			_ = c.Close()
		}
	})
	return s
}

func (s *switchProxy) port() string {
	_, port, _ := net.SplitHostPort(s.ln.Addr().String())
	return port
}

func (s *switchProxy) route(addr string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.target = addr
}

// silence cuts every connection made so far from its upstream, keeping
// the client's side open and unread.
func (s *switchProxy) silence() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, c := range s.open {
		_ = c.Close()
	}
	s.open = nil
}

func (s *switchProxy) serve() {
	for {
		c, err := s.ln.Accept()
		if err != nil {
			return
		}
		s.mu.Lock()
		target := s.target
		s.mu.Unlock()
		up, err := net.Dial("tcp", target)
		if err != nil {
			_ = c.Close()
			continue
		}
		s.mu.Lock()
		s.open = append(s.open, up)
		s.held = append(s.held, c)
		s.mu.Unlock()
		// Both copies end when up is closed; c is left open (closed at
		// the test's end) unless the client closes it.
		go func() { _, _ = io.Copy(up, c) }()
		go func() { _, _ = io.Copy(c, up) }()
	}
}
