package agent

import (
	"bytes"
	"context"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"log"
	"maps"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/go-logr/logr/funcr"

	"github.com/opkit-dev/opkit/api/v1alpha1"
	"github.com/opkit-dev/opkit/internal/executor"
	"github.com/opkit-dev/opkit/internal/runners"
)

// An agent claims and streams a run in one request where the engine
// serves it, and in two (claim, then stream) with an engine of an
// earlier opkit, which neither serves the one request nor says it does;
// the run ends the same either way, its log and result whole. This
// engine hands the agent's next run on the answer to its last.
func TestAnAgentClaimsOnTheStreamAndFallsBackForAnEarlierEngine(t *testing.T) {
	r := newRig(t)
	r.script(t, "ok.sh", `read -r input; echo "saw $input" >&2; echo '{"status":{"ran":"yes"}}'`)
	for _, c := range []struct {
		name            string
		earlier, noNext bool
	}{{"this engine", false, false}, {"an engine that hands no next run on an answer", false, true}, {"an earlier engine", true, false}} {
		name, earlier := c.name, c.earlier
		t.Run(name, func(t *testing.T) {
			e := r.engine(t, earlier, 1)
			e.noNext.Store(c.noNext)
			const runs = 3
			for i := range runs {
				var log bytes.Buffer
				action := v1alpha1.ExecAction{Command: []string{"./hooks/ok.sh"}, Image: image}
				res, err := (&executor.InImage{Action: action, Operator: "demo", Runners: e.pool}).Run(t.Context(), request(&log, 10*time.Second))
				if err != nil || status(res) != `{"status":{"ran":"yes"}}` {
					t.Fatalf("run %d: %v, %v; its log:\n%s", i+1, status(res), err, log.String())
				}
				if !strings.Contains(log.String(), `saw {"object":{"spec":{"n":3}}}`) || !strings.Contains(log.String(), "runs it") {
					t.Errorf("run %d's log is\n%s\nwant the command's stderr and the runner's claim", i+1, log.String())
				}
			}
			if p := e.problems.String(); p != "" {
				t.Errorf("%s: the runs went wrong on the way:\n%s", name, p)
			}
			want := map[string]int{runners.PathRun: runs}
			if earlier {
				// A take's answer from an earlier engine names no
				// protocol: the agent never tries the one request.
				want = map[string]int{runners.PathStart: runs, runners.PathStream: runs}
			}
			// Its connection is kept from run to run (one TLS
			// handshake, not one a run).
			if n := e.conns.Load(); n >= runs {
				t.Errorf("%s: the agent opened %d connections for %d runs, one at a time; want them kept", name, n, runs)
			}
			got := e.requests()
			for _, p := range []string{runners.PathRun, runners.PathStart, runners.PathStream} {
				if got[p] != want[p] {
					t.Errorf("%s: the agent sent %d requests to %s; want %d (all: %v)", name, got[p], p, want[p], got)
				}
			}
			// This engine hands a run on the answer to the run before
			// (the next is submitted as soon as the last ends): one take
			// for all three, but a take whose poll ended first. An
			// earlier engine, or one that does not, a take a run.
			if takes, fold := got[runners.PathTake], !c.earlier && !c.noNext; fold && takes >= runs || !fold && takes < runs {
				t.Errorf("%s: the agent sent %d takes for %d runs, one at a time", name, takes, runs)
			}
		})
	}
}

// A claim the engine refuses (the run went back to the queue, or ended)
// leaves the agent free: it starts nothing, and takes the run again once
// it comes back.
func TestAnAgentWhoseClaimIsRefusedStartsNothingAndTakesTheNextRun(t *testing.T) {
	r := newRig(t)
	count := filepath.Join(r.files, "count")
	r.script(t, "count.sh", `echo x >> "$COUNT"; echo '{"status":{"ran":"yes"}}'`)
	e := r.engine(t, false, 1)
	e.refuseNextClaim.Store(true)
	action := v1alpha1.ExecAction{Command: []string{"./hooks/count.sh"}, Image: image, Env: []v1alpha1.EnvVar{{Name: "COUNT", Value: count}}}
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	var log bytes.Buffer
	res, err := (&executor.InImage{Action: action, Operator: "demo", Runners: e.pool}).Run(ctx, request(&log, 10*time.Second))
	if err != nil || status(res) != `{"status":{"ran":"yes"}}` {
		t.Fatalf("the run after a refused claim: %v, %v; its log:\n%s", status(res), err, log.String())
	}
	if b, _ := os.ReadFile(count); string(b) != "x\n" {
		t.Errorf("the command ran %q times; want once (nothing started on the refused claim)", b)
	}
	if got := e.requests()[runners.PathRun]; got != 2 {
		t.Errorf("the agent sent %d requests to %s; want 2 (the refused claim, then the run)", got, runners.PathRun)
	}
	p := e.problems.String()
	if strings.Contains(p, "engine: ") || !strings.Contains(p, "410 Gone: the run is no longer yours") {
		t.Errorf("the engine's server and the agent logged\n%s\nwant the agent's refused claim only", p)
	}
}

// A runner that sends a frame longer than runners.MaxFrame (a broken
// one: an agent's frames are a result at most, or a piece of a log) has
// its run cancelled at once, the engine's reason naming the limit; the
// engine reads no further than the limit.
func TestAFrameLongerThanTheLimitCancelsItsRunNamingTheLimit(t *testing.T) {
	r := newRig(t)
	e, srv, _ := r.runnerAPI(t, false)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	ran := make(chan error, 1)
	go func() {
		action := v1alpha1.ExecAction{Command: []string{"./hooks/any.sh"}, Image: image}
		_, err := (&executor.InImage{Action: action, Operator: "demo", Runners: e.pool}).Run(ctx, request(&bytes.Buffer{}, 10*time.Second))
		ran <- err
	}()
	token, err := os.ReadFile(r.token(t, "opkit-runner-demo", runners.Audience))
	if err != nil {
		t.Fatal(err)
	}
	post := func(path string, body io.Reader) *http.Response {
		t.Helper()
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, srv.URL+path+"?operator=demo&image="+url.QueryEscape(image), body)
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Authorization", "Bearer "+strings.TrimSpace(string(token)))
		req.Header.Set(runners.RunnerHeader, "broken-runner")
		resp, err := srv.Client().Do(req)
		if err != nil {
			t.Fatalf("POST %s: %v", path, err)
		}
		return resp
	}
	take := post(runners.PathTake, nil)
	var w executor.RunnerWork
	if err := json.NewDecoder(take.Body).Decode(&w); err != nil || take.StatusCode != http.StatusOK {
		t.Fatalf("the take: %s, %v", take.Status, err)
	}
	_ = take.Body.Close()
	// A log frame one byte longer than the limit, its line ended.
	frame := io.MultiReader(strings.NewReader(`{"log":"`), io.LimitReader(repeat('A'), runners.MaxFrame), strings.NewReader(`"}`+"\n"))
	resp := post(runners.PathRun+w.ID, frame)
	defer func() { _ = resp.Body.Close() }()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("the claim: %s; want 200", resp.Status)
	}
	select {
	case err := <-ran:
		if want := fmt.Sprintf("runner broken-runner sent a frame of more than %d bytes; the run is cancelled", runners.MaxFrame); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("the run ended with %v; want an error saying %q", err, want)
		}
	case <-ctx.Done():
		t.Fatal("the run did not end after its runner sent a frame over the limit")
	}
}

// repeat reads b for ever.
type repeat byte

func (b repeat) Read(p []byte) (int, error) {
	for i := range p {
		p[i] = byte(b)
	}
	return len(p), nil
}

// BenchmarkServeRunsThroughTheAgent runs a Serve handler through an
// agent in this process, four at once, with the run claimed on its
// stream and, for comparison, claimed then streamed (an earlier engine),
// and reports the process's CPU per run (the engine's side and the
// agent's; not the handler's process) and runs a second:
//
//	go test -run '^$' -bench ServeRunsThroughTheAgent -count 6 ./internal/agent/
func BenchmarkServeRunsThroughTheAgent(b *testing.B) {
	r := newRig(b)
	r.script(b, "serve.sh", `while read -r line; do echo '{"status":{"ok":true}}'; done`)
	for _, earlier := range []bool{false, true} {
		b.Run(map[bool]string{false: "one request", true: "claim then stream"}[earlier], func(b *testing.B) {
			e := r.engine(b, earlier, 4)
			action := v1alpha1.ExecAction{Command: []string{"./hooks/serve.sh"}, Image: image, Mode: v1alpha1.ExecServe}
			ex := &executor.InImage{Action: action, Operator: "demo", Runners: e.pool}
			if _, err := ex.Run(b.Context(), request(&bytes.Buffer{}, 10*time.Second)); err != nil {
				b.Fatal(err) // the Serve process started, the connections made
			}
			cpu := func() time.Duration {
				var ru syscall.Rusage
				_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
				return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
			}
			b.SetParallelism(2) // four at once on two cores, as the agent's --parallel 4
			before, start := cpu(), time.Now()
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					if _, err := ex.Run(b.Context(), request(&bytes.Buffer{}, 10*time.Second)); err != nil {
						b.Error(err)
						return
					}
				}
			})
			b.StopTimer()
			b.ReportMetric(float64((cpu()-before).Microseconds())/1000/float64(b.N), "cpu-ms/run")
			b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "runs/s")
			if p := e.problems.String(); p != "" {
				b.Errorf("the runs went wrong on the way:\n%s", p)
			}
		})
	}
}

// testEngine is a runner API over TLS in this process, with an agent
// pulling from it; as an engine of an earlier opkit, it serves no
// runners.PathRun and says so on no take's answer.
type testEngine struct {
	pool     *runners.Pool
	problems lockedBuffer // the server's errors (a handler's panic among them), the agent's
	// refuseNextClaim makes the next claim name a run the engine does not
	// know, as if it went back to the queue.
	refuseNextClaim atomic.Bool
	// noNext drops the agent's ask for its next run on a run's answer
	// (runners.NextHeader), as an engine would that ignores it.
	noNext atomic.Bool
	conns  atomic.Int32 // connections the agent opened

	mu     sync.Mutex
	counts map[string]int // requests by path (a run's ID left out)
}

func (e *testEngine) requests() map[string]int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return maps.Clone(e.counts)
}

func (r *rig) engine(t testing.TB, earlier bool, parallel int) *testEngine {
	t.Helper()
	e, srv, ca := r.runnerAPI(t, earlier)
	o := r.options(fmt.Sprintf("runner-%t", earlier), r.token(t, "opkit-runner-demo", runners.Audience))
	o.Engine, o.CAFile, o.Parallel = srv.URL, ca, parallel
	o.Log = funcr.New(func(_, args string) {
		if strings.Contains(args, `"error"`) {
			_, _ = fmt.Fprintf(&e.problems, "agent: %s\n", args)
		}
	}, funcr.Options{})
	ctx, cancel := context.WithCancel(t.Context())
	var wg sync.WaitGroup
	wg.Go(func() {
		if err := Run(ctx, o); err != nil {
			t.Errorf("agent: %v", err)
		}
	})
	t.Cleanup(func() { cancel(); wg.Wait() })
	return e
}

// runnerAPI is the engine's runner API without an agent: its server, and the
// file of its CA.
func (r *rig) runnerAPI(t testing.TB, earlier bool) (*testEngine, *httptest.Server, string) {
	t.Helper()
	e := &testEngine{pool: runners.NewPool(), counts: map[string]int{}}
	e.pool.LostAfter = 2 * time.Second
	api := &runners.Server{Pool: e.pool, Reviews: r.client.AuthenticationV1().TokenReviews(), Namespace: r.env.Namespace, PollFor: 2 * time.Second}
	inner := api.Handler()
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		path := req.URL.Path
		for _, p := range []string{runners.PathRun, runners.PathStart, runners.PathStream} {
			if strings.HasPrefix(req.URL.Path, p) {
				path = p
			}
		}
		e.mu.Lock()
		e.counts[path]++
		e.mu.Unlock()
		if e.noNext.Load() {
			req.Header.Del(runners.NextHeader)
		}
		if path == runners.PathRun && e.refuseNextClaim.CompareAndSwap(true, false) {
			req.URL.Path = runners.PathRun + "taken-back"
		}
		if earlier {
			if path == runners.PathRun {
				http.NotFound(w, req)
				return
			}
			w = &withoutProtocol{ResponseWriter: w}
		}
		inner.ServeHTTP(w, req)
	}))
	srv.Config.ErrorLog = log.New(&e.problems, "engine: ", 0)
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			e.conns.Add(1)
		}
	}
	srv.StartTLS()
	t.Cleanup(srv.Close)
	ca := filepath.Join(t.TempDir(), "ca.crt")
	if err := os.WriteFile(ca, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw}), 0o600); err != nil {
		t.Fatal(err)
	}
	return e, srv, ca
}

type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// withoutProtocol is an engine of an earlier opkit's answer: no
// runners.ProtocolHeader.
type withoutProtocol struct{ http.ResponseWriter }

func (w *withoutProtocol) WriteHeader(code int) {
	w.Header().Del(runners.ProtocolHeader)
	w.ResponseWriter.WriteHeader(code)
}

func (w *withoutProtocol) Write(p []byte) (int, error) {
	w.Header().Del(runners.ProtocolHeader)
	return w.ResponseWriter.Write(p)
}

func (w *withoutProtocol) Unwrap() http.ResponseWriter { return w.ResponseWriter }
