package executor

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/opkit-dev/opkit/api/v1alpha1"
)

func TestHTTPPostsContextWithTokenAndReadsResult(t *testing.T) {
	var gotBody, gotAuth, gotKey string
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		gotBody, gotAuth, gotKey = string(b), r.Header.Get("Authorization"), r.Header.Get("Idempotency-Key")
		_, _ = w.Write([]byte(`{"status": {"notified": "yes"}}`))
	}))
	defer srv.Close()
	var log bytes.Buffer
	h := &HTTP{
		Action:    v1alpha1.HTTPAction{URL: srv.URL + "/hook", TokenSecret: &v1alpha1.SecretKeySelector{Namespace: "ops", Name: "hook", Key: "token"}},
		Transport: srv.Client().Transport,
		Secret: func(_ context.Context, ns, name, key string) (string, error) {
			if ns+"/"+name+"/"+key != "ops/hook/token" {
				return "", errors.New("wrong secret")
			}
			return "s3cret", nil
		},
	}
	res, err := h.Run(context.Background(), Request{RunID: "r1", Key: "uid/3/notify", Input: []byte(`{"a":1}`), Timeout: 5 * time.Second, Log: &log})
	if err != nil {
		t.Fatal(err)
	}
	if gotBody != `{"a":1}` || gotAuth != "Bearer s3cret" || gotKey != "uid/3/notify" || res.Status["notified"] != "yes" {
		t.Errorf("body %q auth %q key %q result %+v", gotBody, gotAuth, gotKey, res)
	}
	if strings.Contains(log.String(), "s3cret") || !strings.Contains(log.String(), "200 OK") {
		t.Errorf("log %q should name the status and never the token", log.String())
	}
}

func TestHTTPFailures(t *testing.T) {
	for _, c := range []struct {
		name      string
		handler   http.HandlerFunc
		want      string
		permanent bool
	}{
		{"503", func(w http.ResponseWriter, _ *http.Request) { http.Error(w, "busy", http.StatusServiceUnavailable) }, "503 Service Unavailable", false},
		{"404", func(w http.ResponseWriter, _ *http.Request) { http.NotFound(w, nil) }, "404 Not Found", true},
		{"not JSON", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("<html>")) }, "output is not a JSON result", false},
		{"hangs", func(w http.ResponseWriter, r *http.Request) {
			_, _ = io.ReadAll(r.Body)
			select {
			case <-r.Context().Done():
			case <-time.After(10 * time.Second):
			}
		}, "timed out after 300ms", false},
	} {
		t.Run(c.name, func(t *testing.T) {
			srv := httptest.NewServer(c.handler)
			defer srv.Close()
			h := &HTTP{Action: v1alpha1.HTTPAction{URL: srv.URL}}
			_, err := h.Run(context.Background(), Request{Input: []byte("{}"), Timeout: 300 * time.Millisecond, Log: io.Discard})
			f := AsFailure(err)
			if err == nil || !strings.Contains(f.Message, c.want) || f.Permanent != c.permanent {
				t.Errorf("failure %+v, want %q permanent %v", f, c.want, c.permanent)
			}
		})
	}
}

// The runs of one handler reuse their connections: a run costs a
// request, not a dial (and, for https, a handshake), also in a burst.
func TestHTTPRunsReuseTheirConnections(t *testing.T) {
	var mu sync.Mutex
	dialed := 0
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.ReadAll(r.Body)
		_, _ = w.Write([]byte(`{"status": {"ok": true}}`))
	}))
	srv.Config.ConnState = func(_ net.Conn, state http.ConnState) {
		if state == http.StateNew {
			mu.Lock()
			dialed++
			mu.Unlock()
		}
	}
	srv.Start()
	defer srv.Close()
	h := &HTTP{Action: v1alpha1.HTTPAction{URL: srv.URL}}
	run := func() {
		res, err := h.Run(context.Background(), Request{Input: []byte("{}"), Timeout: 10 * time.Second, Log: io.Discard})
		if err != nil || res.Status["ok"] != true {
			t.Errorf("run: %+v, %v", res, err)
		}
	}
	for range 20 {
		run()
	}
	mu.Lock()
	if dialed != 1 {
		t.Errorf("20 runs one after the other made %d connections, want 1", dialed)
	}
	mu.Unlock()
	// Bursts of 8 at once: the second finds the first's connections open.
	for range 3 {
		var wg sync.WaitGroup
		for range 8 {
			wg.Go(run)
		}
		wg.Wait()
	}
	mu.Lock()
	defer mu.Unlock()
	if dialed > 1+8 {
		t.Errorf("three bursts of 8 runs made %d connections in all, want at most 9: the idle ones were not kept", dialed)
	}
}

// The token is the run's secret: a server that echoes it, in an error
// page, a result it returns or output that is no result, has it written
// as *** in the run's log, its result and its failure's message.
func TestHTTPNeverShowsTheTokenItSends(t *testing.T) {
	token := "s3cret-t0ken"
	long := strings.Repeat("eyJhbGciOiJSUzI1NiJ9", 45) // a ServiceAccount token's length: longer than any quote of the output
	pad := strings.Repeat("x", 190)                    // the token across the 200 bytes a refusal quotes
	for _, c := range []struct {
		name    string
		handler http.HandlerFunc
	}{
		{"an error page", func(w http.ResponseWriter, r *http.Request) {
			http.Error(w, "refused "+r.Header.Get("Authorization"), http.StatusForbidden)
		}},
		{"a result", func(w http.ResponseWriter, r *http.Request) {
			_, _ = w.Write([]byte(`{"status": {"echo": "` + r.Header.Get("Authorization") + `", "` + token + `": 1}, "events": [{"type": "Normal", "reason": "Echo", "message": "` + token + `"}]}`))
		}},
		{"output that is no result", func(w http.ResponseWriter, r *http.Request) {
			_, _ = w.Write([]byte(`token ` + token))
		}},
		{"an error page, the token across the quote's end", func(w http.ResponseWriter, r *http.Request) {
			http.Error(w, pad+strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer "), http.StatusForbidden)
		}},
		{"output that is no result, the token across the quote's end", func(w http.ResponseWriter, r *http.Request) {
			_, _ = w.Write([]byte(pad + strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer ")))
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			srv := httptest.NewServer(c.handler)
			defer srv.Close()
			var log bytes.Buffer
			secret := token
			if strings.Contains(c.name, "across") {
				secret = long
			}
			h := &HTTP{
				Action: v1alpha1.HTTPAction{URL: srv.URL, TokenSecret: &v1alpha1.SecretKeySelector{Namespace: "ops", Name: "hook", Key: "token"}},
				Secret: func(context.Context, string, string, string) (string, error) { return secret, nil },
			}
			res, err := h.Run(context.Background(), Request{Input: []byte("{}"), Timeout: 5 * time.Second, Log: &log})
			shown := log.String()
			if err != nil {
				shown += AsFailure(err).Message
			}
			if res != nil {
				shown += fmt.Sprint(res.Status, res.Events)
			}
			if strings.Contains(shown, secret[:8]) {
				t.Errorf("the token, or its start, is shown: %s", shown)
			}
			if !strings.Contains(shown, "***") {
				t.Errorf("the echoed token is not written as ***: %s", shown)
			}
		})
	}
}
