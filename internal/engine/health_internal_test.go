package engine

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/opkit-dev/opkit/internal/archive"
	"github.com/opkit-dev/opkit/internal/health"
)

// insertRecorder is an archive whose Insert returns err; the readiness
// check reads only whether the archive's last write failed.
type insertRecorder struct {
	archive.Recorder
	err error
}

func (r *insertRecorder) Insert(context.Context, *archive.Run) error { return r.err }

// get serves one request of h and returns its status and body.
func get(t *testing.T, h http.Handler, path string) (int, string) {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
	body, _ := io.ReadAll(rec.Result().Body)
	return rec.Code, string(body)
}

func TestReadyzNamesEachFailingCheckAndHealthzStaysUp(t *testing.T) {
	t.Parallel()
	e := &Engine{started: make(chan struct{}), stopped: make(chan struct{}), running: newRegistry()}
	rec := &insertRecorder{}
	e.archive = health.NewArchiveWriter(rec, func(string) {}, prometheus.NewGauge(prometheus.GaugeOpts{Name: "writable"}))
	insert := func(err error) {
		rec.err = err
		_ = e.archive.Insert(t.Context(), &archive.Run{})
	}
	h := health.Handler(e.readyChecks(), &health.Lease{Leading: e.Leading})

	for _, tc := range []struct {
		what    string
		set     func()
		failing []string // the checks /readyz names failing
		reason  string   // the reason /readyz/<failing[0]> gives
	}{
		{"before Run", func() {}, []string{"api-server", "engine"}, "not checked yet"},
		{"started, the API not checked yet", func() { close(e.started) }, []string{"api-server"}, "not checked yet"},
		{"the API server cut off", func() { e.health.api.Set(errors.New("the API server is unreachable (connection refused)")) }, []string{"api-server"}, "the API server is unreachable"},
		{"the archive refusing runs", func() {
			e.health.api.Set(nil)
			insert(errors.New("disk full"))
		}, []string{"archive"}, "refused to record runs since " + time.Now().UTC().Format("2006-01-02T")},
		{"all well", func() { insert(nil) }, nil, ""},
		{"stopped", func() { close(e.stopped) }, []string{"engine"}, "not running"},
	} {
		tc.set()
		code, body := get(t, h, "/readyz")
		if want := map[bool]int{true: 500, false: 200}[len(tc.failing) > 0]; code != want {
			t.Errorf("%s: /readyz answered %d, want %d:\n%s", tc.what, code, want, body)
		}
		for _, check := range []string{"api-server", "archive", "engine"} {
			failing := strings.Contains(body, "[-]"+check+" failed")
			if want := strings.Contains(strings.Join(tc.failing, " "), check); failing != want && len(tc.failing) > 0 {
				t.Errorf("%s: check %s failing: %v, want %v:\n%s", tc.what, check, failing, want, body)
			}
		}
		if len(tc.failing) > 0 {
			if code, body := get(t, h, "/readyz/"+tc.failing[0]); code != 500 || !strings.Contains(body, tc.reason) {
				t.Errorf("%s: /readyz/%s answered %d %q, want 500 and %q", tc.what, tc.failing[0], code, body, tc.reason)
			}
		}
		if code, body := get(t, h, "/healthz"); code != 200 {
			t.Errorf("%s: /healthz answered %d, want 200 (liveness does not depend on the cluster):\n%s", tc.what, code, body)
		}
	}
	if code, body := get(t, h, "/readyz?verbose"); !strings.Contains(body, "[+]archive ok") || !strings.Contains(body, "[+]api-server ok") || code != 500 {
		t.Errorf("/readyz?verbose answered %d, want 500 listing every check:\n%s", code, body)
	}
}
