package executor

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
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
