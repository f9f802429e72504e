package webhook_test

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"github.com/opkit-dev/opkit/internal/devcluster/clustertest"
	"github.com/opkit-dev/opkit/internal/webhook"
)

func TestMain(m *testing.M) { clustertest.Main(m) }

// serve starts a server of the Secret name in the test's namespace, with
// /echo answering the length of the body it read, until the test ends.
func serve(t *testing.T, env *clustertest.Env, name string, onBundle func(context.Context, []byte) error) *webhook.Server {
	t.Helper()
	cs, err := kubernetes.NewForConfig(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	s, err := webhook.New(webhook.Options{
		Addr: "127.0.0.1:0", Names: []string{"127.0.0.1"}, Secret: types.NamespacedName{Namespace: env.Namespace, Name: name},
		Secrets: cs.CoreV1(), MaxBodyBytes: 1024, CheckEvery: 100 * time.Millisecond, OnBundle: onBundle,
	})
	if err != nil {
		t.Fatal(err)
	}
	s.Handle("/echo", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := webhook.ReadBody(w, r, s.MaxBodyBytes())
		if err != nil {
			return // answered 413
		}
		fmt.Fprint(w, len(body))
	}))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Start(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Start: %v", err)
		}
	})
	wait, stop := context.WithTimeout(t.Context(), 30*time.Second)
	defer stop()
	if err := s.WaitReady(wait); err != nil {
		t.Fatal(err)
	}
	return s
}

func TestTheServerSpeaksHTTP1OnlyCapsBodiesAndSharesItsCAWithEveryReplica(t *testing.T) {
	env := clustertest.New(t)
	var mu sync.Mutex
	var bundles [][]byte
	first := serve(t, env, "certs", func(_ context.Context, b []byte) error {
		mu.Lock()
		defer mu.Unlock()
		bundles = append(bundles, b)
		return nil
	})
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(first.CABundle()) {
		t.Fatal("the bundle holds no certificate")
	}
	// HTTP/2 is refused: a client that offers it gets HTTP/1.1.
	conn, err := tls.Dial("tcp", first.Addr(), &tls.Config{RootCAs: roots, ServerName: "127.0.0.1", NextProtos: []string{"h2", "http/1.1"}})
	if err != nil {
		t.Fatal(err)
	}
	if p := conn.ConnectionState().NegotiatedProtocol; p == "h2" {
		t.Errorf("the server negotiated %q", p)
	}
	_ = conn.Close()
	client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots}, ForceAttemptHTTP2: true}}
	post := func(s *webhook.Server, n int) (int, string) {
		t.Helper()
		resp, err := client.Post("https://"+s.Addr()+"/echo", "application/json", bytes.NewReader(make([]byte, n)))
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = resp.Body.Close() }()
		body, _ := io.ReadAll(resp.Body)
		if resp.ProtoMajor != 1 {
			t.Errorf("answered in %s", resp.Proto)
		}
		return resp.StatusCode, strings.TrimSpace(string(body))
	}
	if code, body := post(first, 100); code != http.StatusOK || body != "100" {
		t.Errorf("a 100-byte body: %d %q", code, body)
	}
	if code, body := post(first, 2048); code != http.StatusRequestEntityTooLarge || !strings.Contains(body, "larger than 1024 bytes") {
		t.Errorf("a 2048-byte body: %d %q; want 413", code, body)
	}
	// A second replica (or a restart) serves a certificate of the same CA.
	second := serve(t, env, "certs", nil)
	if !bytes.Equal(second.CABundle(), first.CABundle()) {
		t.Error("the second server has a bundle of its own")
	}
	if code, _ := post(second, 10); code != http.StatusOK {
		t.Errorf("the second server, trusted by the first's bundle: %d", code)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(bundles) != 1 || !bytes.Equal(bundles[0], first.CABundle()) {
		t.Errorf("OnBundle was called %d times; want once, with the bundle", len(bundles))
	}
}
