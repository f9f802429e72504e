// Package agent is opkit's agent in a runner Pod: it pulls the runs of
// one operator's exec handlers that name one image from the engine
// (package runners) and runs each command as the engine's own exec
// executor does, with that executor's code (executor.Exec): argv only,
// stdin the binding context, stdout the result, stderr streamed back to
// the run's log as it comes, exit codes, a timeout that kills the process
// group, a process judged by its exit however late it is looked at. A
// handler in mode Serve keeps its processes between runs, as the engine's
// executor.Serve does locally, with its code and rules (one kept per
// handler; a new command, directory or processes count replaces it).
//
// The agent dials the engine over HTTPS, trusting only the CA file (read
// again when it changes: the kubelet updates a mounted ConfigMap when the
// engine rotates its CA), and authenticates with its projected
// ServiceAccount token (the kubelet renews it). Both files are read again
// at most every second, and after a request that failed or was refused
// as unauthorized.
//
// An engine replaced (upgraded, restarted, rescheduled, SIGKILLed) is
// found again within seconds: a take waits at most TakeTimeout (longer
// than the engine's long poll), a connection whose peer vanished without
// closing it ends after about 20 s of unanswered keepalives or unacked
// data, and every failure is followed by a new dial, through the
// Service, to whichever engine serves it now.
//
// Values from Secrets and a run's kubeconfig come with the run, from the
// engine; the engine redacts the log and the result. Relative command paths and working directories
// resolve from Options.Files, the operator's files.
//
// A run's stream that breaks (the engine stopped, or took the run back)
// kills the command: the engine runs it again with its key. Install
// copies the agent's own executable into a shared volume, for an init
// container to hand it to an image that has no opkit.
package agent

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"

	"github.com/opkit-dev/opkit/api/v1alpha1"
	"github.com/opkit-dev/opkit/internal/executor"
	"github.com/opkit-dev/opkit/internal/runners"
	"github.com/opkit-dev/opkit/internal/sleep"
)

// Options configures an agent.
type Options struct {
	// Engine is the engine's runner API, https://HOST:PORT. Required.
	Engine string
	// Operator and Image are the runs the agent takes. Required.
	Operator, Image string
	// Name is the runner's name in run records (its Pod's). Required.
	Name string
	// Files is the operator's directory: relative command paths and
	// working directories resolve from it. Defaults to the working
	// directory.
	Files string
	// CAFile is the PEM of the CAs that sign the engine's certificate,
	// read again at most every second, and after a request fails.
	// Required.
	CAFile string
	// TokenFile holds the runner's token, read again at most every
	// second, and after a request fails or is refused as unauthorized.
	// Required.
	TokenFile string
	// Parallel is how many runs the agent runs at once. Defaults to 4.
	Parallel int
	// Beat is the interval of heartbeats during a run. Defaults to 3s
	// (the engine's bound is 15s).
	Beat time.Duration
	// KillGrace is the time between SIGTERM and SIGKILL of a command on
	// timeout. Defaults to 2s.
	KillGrace time.Duration
	// TakeTimeout bounds a take, the engine's long poll for a run (25s
	// by default): an answer that does not come within it means the
	// engine went away, and the agent dials again. Defaults to 1m.
	TakeTimeout time.Duration
	// Log receives what the agent does. Defaults to none.
	Log logr.Logger
}

// Run pulls and runs runs until ctx ends.
func Run(ctx context.Context, opts Options) error {
	a, err := newAgent(opts)
	if err != nil {
		return err
	}
	var wg sync.WaitGroup
	for range a.opts.Parallel {
		wg.Go(func() { a.loop(ctx) })
	}
	wg.Wait()
	a.closeServes()
	return nil
}

type agent struct {
	opts  Options
	query string

	mu      sync.Mutex
	ca      []byte // the CA file's content client trusts
	client  *http.Client
	caError string // the CA file's last error, said once

	// caFile and tokenFile are read again at most every rereadEvery: a
	// run makes two requests (three with an engine of an earlier opkit), and
	// each read both (issue 53).
	caFile, tokenFile *reread

	// serves are the Serve handlers' processes, by handler: kept between
	// runs as the engine keeps them locally, replaced when the handler's
	// command, directory or processes change (the operator changed).
	servesMu sync.Mutex
	serves   map[string]*kept
}

// kept is a Serve handler's executor, and the action it was made for.
type kept struct {
	action v1alpha1.ExecAction
	serve  *executor.Serve
}

func newAgent(opts Options) (*agent, error) {
	var missing []string
	for _, f := range []struct{ name, v string }{{"engine", opts.Engine}, {"operator", opts.Operator}, {"image", opts.Image}, {"name (POD_NAME)", opts.Name}, {"ca-file", opts.CAFile}, {"token-file", opts.TokenFile}} {
		if f.v == "" {
			missing = append(missing, f.name)
		}
	}
	if len(missing) > 0 {
		return nil, fmt.Errorf("agent: %s required", strings.Join(missing, ", "))
	}
	if u, err := url.Parse(opts.Engine); err != nil || u.Scheme != "https" || u.Host == "" {
		return nil, fmt.Errorf("agent: --engine %q is not an https://HOST:PORT URL", opts.Engine)
	}
	if opts.Parallel <= 0 {
		opts.Parallel = 4
	}
	if opts.Beat <= 0 {
		opts.Beat = 3 * time.Second
	}
	if opts.TakeTimeout <= 0 {
		opts.TakeTimeout = time.Minute
	}
	if opts.Files == "" {
		opts.Files, _ = os.Getwd()
	}
	q := url.Values{"operator": {opts.Operator}, "image": {opts.Image}}
	a := &agent{opts: opts, query: "?" + q.Encode(), caFile: &reread{path: opts.CAFile}, tokenFile: &reread{path: opts.TokenFile}}
	if _, err := a.httpClient(); err != nil {
		return nil, err
	}
	return a, nil
}

// httpClient is the client that trusts the CA file's content now: made
// again when the content changed, its old connections closed once idle.
// A CA file that cannot be read or parsed later keeps the client that
// trusts the last good one.
func (a *agent) httpClient() (*http.Client, error) {
	pem, err := a.caFile.read()
	a.mu.Lock()
	defer a.mu.Unlock()
	if err == nil && a.client != nil && bytes.Equal(pem, a.ca) {
		return a.client, nil
	}
	var pool *x509.CertPool
	switch {
	case err != nil:
		err = fmt.Errorf("agent: reading the engine's CA: %w", err)
	default:
		pool = x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			err = fmt.Errorf("agent: %s holds no PEM certificate", a.opts.CAFile)
		}
	}
	if err != nil {
		if a.client != nil {
			if err.Error() != a.caError {
				a.caError = err.Error()
				a.opts.Log.Error(err, "keeping the CA read before")
			}
			return a.client, nil
		}
		return nil, err
	}
	a.caError = ""
	if a.client != nil {
		a.opts.Log.Info("the engine's CA changed: trusting the new one", "file", a.opts.CAFile)
		a.client.CloseIdleConnections()
	}
	dialer := &net.Dialer{
		Timeout: 10 * time.Second,
		// A peer that vanished without closing (a node lost, a Pod's
		// address gone) is found in about 20 s, idle or mid-stream.
		KeepAliveConfig: net.KeepAliveConfig{Enable: true, Idle: 5 * time.Second, Interval: 5 * time.Second, Count: 3},
		Control:         userTimeout(20 * time.Second),
	}
	// Through $HTTPS_PROXY when set: the dev node resolves the engine's
	// Service for its Pods so (devnode.Node.ServiceProxy), as a proxy of
	// the cluster may.
	tr := &http.Transport{
		Proxy: http.ProxyFromEnvironment, DialContext: dialer.DialContext,
		TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}, TLSHandshakeTimeout: 10 * time.Second,
		MaxIdleConnsPerHost: a.opts.Parallel * 3, IdleConnTimeout: 90 * time.Second,
	}
	a.ca, a.client = pem, &http.Client{Transport: tr}
	return a.client, nil
}

// do sends req with the client of the CA file's content now.
func (a *agent) do(req *http.Request) (*http.Response, error) {
	c, err := a.httpClient()
	if err != nil {
		return nil, err
	}
	resp, err := c.Do(req)
	if err != nil || resp.StatusCode == http.StatusUnauthorized {
		// A new engine's CA, or a token rotated: the next request reads
		// the files again.
		a.caFile.expire()
		a.tokenFile.expire()
	}
	return resp, err
}

// rereadEvery is how long a read of the CA or token file serves: both are
// replaced long before the old content stops working (a projected token
// at 80% of its life), and a request that fails reads them again.
const rereadEvery = time.Second

// reread is a file's content, read again once rereadEvery has passed, or
// after expire.
type reread struct {
	path string

	mu   sync.Mutex
	data []byte
	err  error
	at   time.Time // of the last read; zero: read at the next call
	// bearer is an Authorization header of data, made once per read.
	bearer string
}

// authorization is the Authorization header of the token the file holds.
func (f *reread) authorization() (string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.readLocked(); f.err != nil {
		return "", f.err
	}
	if f.bearer == "" {
		f.bearer = "Bearer " + strings.TrimSpace(string(f.data))
	}
	return f.bearer, nil
}

func (f *reread) read() ([]byte, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.readLocked()
	return f.data, f.err
}

// readLocked reads the file again if its last read is too old; f.mu is
// held.
func (f *reread) readLocked() {
	if f.at.IsZero() || time.Since(f.at) >= rereadEvery {
		f.data, f.err = os.ReadFile(f.path)
		f.at, f.bearer = time.Now(), ""
	}
}

func (f *reread) expire() {
	f.mu.Lock()
	f.at = time.Time{}
	f.mu.Unlock()
}

// loop takes and runs runs, one at a time, until ctx ends. A run the
// engine hands on the answer to the run before is run without a take.
func (a *agent) loop(ctx context.Context) {
	var next *executor.RunnerWork
	for ctx.Err() == nil {
		w, oneRequest := next, true // handed on a run's answer: this engine serves PathRun
		next = nil
		if w == nil {
			var err error
			if w, oneRequest, err = a.take(ctx); err != nil {
				if ctx.Err() == nil {
					a.opts.Log.Error(err, "taking a run from the engine; trying again in 1s")
					sleep.For(ctx, time.Second)
				}
				continue
			}
		}
		if w == nil {
			continue
		}
		var err error
		if oneRequest {
			next, err = a.run(ctx, w)
		} else {
			err = a.runClaimed(ctx, w)
		}
		if err != nil && ctx.Err() == nil {
			a.opts.Log.Error(err, "run", "run", w.RunID, "handler", w.Handler)
		}
	}
}

// request makes a request to the engine, with the token its file holds
// (read again at most every rereadEvery).
func (a *agent) request(ctx context.Context, path string, body io.Reader) (*http.Request, error) {
	auth, err := a.tokenFile.authorization()
	if err != nil {
		return nil, fmt.Errorf("reading the runner's token: %w", err)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, strings.TrimSuffix(a.opts.Engine, "/")+path+a.query, body)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Authorization", auth)
	req.Header.Set(runners.RunnerHeader, a.opts.Name)
	return req, nil
}

// take waits for a run: nil when none came within the engine's poll.
// oneRequest is whether the engine claims and streams a run in one
// request (runners.PathRun): an engine of an earlier opkit does not.
func (a *agent) take(ctx context.Context) (w *executor.RunnerWork, oneRequest bool, err error) {
	ctx, cancel := context.WithTimeout(ctx, a.opts.TakeTimeout)
	defer cancel()
	req, err := a.request(ctx, runners.PathTake, nil)
	if err != nil {
		return nil, false, err
	}
	resp, err := a.do(req)
	if err != nil {
		if errors.Is(err, context.DeadlineExceeded) {
			return nil, false, fmt.Errorf("the engine did not answer a take within %s: dialing again", a.opts.TakeTimeout)
		}
		return nil, false, err
	}
	defer func() { _ = resp.Body.Close() }()
	switch resp.StatusCode {
	case http.StatusNoContent:
		return nil, false, nil
	case http.StatusOK:
		var w executor.RunnerWork
		if err := json.NewDecoder(resp.Body).Decode(&w); err != nil {
			return nil, false, fmt.Errorf("reading the run: %w", err)
		}
		return &w, resp.Header.Get(runners.ProtocolHeader) == runners.ProtocolRun, nil
	}
	return nil, false, refusal(resp)
}

func refusal(resp *http.Response) error {
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	return fmt.Errorf("the engine answered %s: %s", resp.Status, strings.TrimSpace(string(b)))
}

// run claims w, runs it and streams its log and outcome in one request
// (runners.PathRun): the answer's headers are the claim, its first line
// the engine's acknowledgement of the outcome, and its second, if any,
// the agent's next run, which it returns (runners.NextHeader).
func (a *agent) run(ctx context.Context, w *executor.RunnerWork) (*executor.RunnerWork, error) {
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	pr, pw := io.Pipe()
	req, err := a.request(runCtx, runners.PathRun+w.ID, pr)
	if err != nil {
		return nil, err
	}
	req.Header.Set(runners.NextHeader, runners.NextOnAnswer)
	// The claim's answer comes at once; one that does not within
	// TakeTimeout is not waited for (the engine runs the run again).
	late := time.AfterFunc(a.opts.TakeTimeout, cancel)
	resp, err := a.do(req) //nolint:bodyclose // closed by the goroutine that reads the answer, or below
	if !late.Stop() && err == nil {
		err = fmt.Errorf("the engine did not answer the claim within %s", a.opts.TakeTimeout)
		_ = resp.Body.Close()
	}
	if err != nil {
		_ = pw.CloseWithError(errStreamClosed)
		return nil, err // not claimed, or the engine runs it again with its key
	}
	if resp.StatusCode != http.StatusOK {
		_ = pw.Close()       // the body ends: nothing was started
		err := refusal(resp) // taken back: another runner runs it
		_ = resp.Body.Close()
		return nil, err
	}
	sent := make(chan error, 1)
	handed := make(chan *executor.RunnerWork, 1)
	go func() {
		answer := json.NewDecoder(resp.Body)
		err := readAck(answer)
		var next *executor.RunnerWork
		if err == nil {
			// The outcome recorded: the run is done. The agent's next
			// run may follow (the engine waits for one as for a take),
			// then the answer's end, read before the request's context
			// ends: the connection is kept.
			sent <- nil
			var nw executor.RunnerWork
			switch err := answer.Decode(&nw); {
			case err == nil:
				next = &nw
			case !errors.Is(err, io.EOF):
				// The wait broke (the engine replaced?): the take that
				// follows reads the CA and token files again.
				a.caFile.expire()
				a.tokenFile.expire()
			}
			_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 4096))
		}
		// The engine answered, or the stream broke: a command still
		// running is killed at once.
		_ = pr.CloseWithError(errStreamClosed)
		cancel()
		_ = resp.Body.Close()
		if err != nil {
			sent <- err
		}
		handed <- next
	}()
	if err := a.stream(runCtx, cancel, w, pw, sent); err != nil {
		return nil, err
	}
	// The engine's wait for the next run lasts its take's poll; one that
	// does not end within TakeTimeout is not waited for.
	late = time.AfterFunc(a.opts.TakeTimeout, cancel)
	defer late.Stop()
	return <-handed, nil
}

// readAck reads the engine's answer to a run's stream (runners.Ack).
func readAck(answer *json.Decoder) error {
	var ack runners.Ack
	if err := answer.Decode(&ack); err != nil {
		if errors.Is(err, io.EOF) {
			return errors.New("the engine ended the run's stream without an answer")
		}
		var syntax *json.SyntaxError
		if errors.As(err, &syntax) {
			return fmt.Errorf("the engine's answer to the run's stream is not JSON: %w", err)
		}
		return err
	}
	if !ack.Recorded {
		return fmt.Errorf("the engine did not record the outcome: %s", ack.Refused)
	}
	return nil
}

// runClaimed claims w (runners.PathStart), then runs it and streams its
// log and outcome (runners.PathStream): for an engine of an earlier opkit.
func (a *agent) runClaimed(ctx context.Context, w *executor.RunnerWork) error {
	claimCtx, cancelClaim := context.WithTimeout(ctx, a.opts.TakeTimeout)
	defer cancelClaim()
	req, err := a.request(claimCtx, runners.PathStart+w.ID, nil)
	if err != nil {
		return err
	}
	resp, err := a.do(req)
	if err != nil {
		return err // not claimed: the engine gives it to another runner
	}
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusNoContent {
		return refusal(resp) // taken back: another runner runs it
	}

	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	pr, pw := io.Pipe()
	sent := make(chan error, 1)
	go func() {
		req, err := a.request(runCtx, runners.PathStream+w.ID, pr)
		if err == nil {
			var resp *http.Response
			if resp, err = a.do(req); err == nil {
				if resp.StatusCode != http.StatusNoContent {
					err = refusal(resp)
				}
				_ = resp.Body.Close()
			}
		}
		// The stream broke or ended: a command still running is killed.
		_ = pr.CloseWithError(errStreamClosed)
		cancel()
		sent <- err
	}()
	return a.stream(runCtx, cancel, w, pw, sent)
}

// stream runs w, its stderr, heartbeats and outcome written to pw as
// frames, and waits for the engine's answer on sent. runCtx ends (cancel)
// when the stream breaks or the engine answers.
func (a *agent) stream(runCtx context.Context, cancel context.CancelFunc, w *executor.RunnerWork, pw *io.PipeWriter, sent chan error) error {
	frames := &frameWriter{w: pw}
	beats := time.NewTicker(a.opts.Beat)
	stopBeats := make(chan struct{})
	go func() {
		defer beats.Stop()
		for {
			select {
			case <-beats.C:
				_ = frames.send(runners.Frame{Beat: true})
			case <-stopBeats:
				return
			}
		}
	}()
	res, runErr := a.execute(runCtx, w, frames)
	close(stopBeats)
	if runCtx.Err() != nil {
		_ = pw.Close()
		return fmt.Errorf("the run's stream to the engine broke: the command was stopped: %w", <-sent)
	}
	if err := frames.send(runners.Frame{Outcome: executor.NewReply(res, runErr)}); err != nil {
		return fmt.Errorf("sending the outcome: %w", err)
	}
	_ = pw.Close()
	// The engine answers once it has read the outcome; one that does not
	// within TakeTimeout went away (it runs the run again with its key).
	select {
	case err := <-sent:
		return err
	case <-time.After(a.opts.TakeTimeout):
		cancel()
		if err := <-sent; err != nil {
			return fmt.Errorf("the engine did not acknowledge the outcome within %s: it went away, and runs it again (%w)", a.opts.TakeTimeout, err)
		}
		return nil // acknowledged as the wait ended
	}
}

var errStreamClosed = errors.New("the stream to the engine closed")

// execute runs the command as a local exec handler runs on the engine's
// host: with executor.Exec, a process per run, or in mode Serve with the
// handler's executor.Serve, whose processes outlive the run. The run's
// environment is the engine's (values from Secrets read there, at each
// run): a Serve process started with other values is replaced before
// the run, as locally.
func (a *agent) execute(ctx context.Context, w *executor.RunnerWork, log io.Writer) (*executor.Result, error) {
	req := executor.Request{
		RunID: w.RunID, Handler: w.Handler, Trigger: w.Trigger, Key: w.Key, Attempt: w.Attempt,
		Input: w.Input, Timeout: w.TimeoutDuration(), Log: log, Env: w.Env,
	}
	action := v1alpha1.ExecAction{Command: append([]string(nil), w.Command...), WorkingDir: w.WorkingDir, Mode: w.Mode, Processes: w.Processes}
	// Resolved as the definition resolves them from its file's directory.
	if len(action.Command) > 0 && strings.Contains(action.Command[0], "/") && !filepath.IsAbs(action.Command[0]) {
		action.Command[0] = filepath.Join(a.opts.Files, action.Command[0])
	}
	if !filepath.IsAbs(action.WorkingDir) {
		action.WorkingDir = filepath.Join(a.opts.Files, action.WorkingDir)
	}
	if w.Mode == v1alpha1.ExecServe && len(w.Kubeconfig) == 0 {
		return a.serve(w.Handler, action).Run(ctx, req)
	}
	ex := &executor.Exec{Action: action, KillGrace: a.opts.KillGrace}
	if len(w.Kubeconfig) > 0 {
		// The engine requested the token: the kubeconfig is handed on as
		// a private file, as a local run's.
		ex.Action.ServiceAccount = &v1alpha1.ServiceAccountRef{Namespace: "-", Name: "-"}
		ex.Credentials = func(context.Context, string, string, time.Duration) ([]byte, string, error) {
			return w.Kubeconfig, "", nil
		}
	}
	return ex.Run(ctx, req)
}

// serve is the Serve executor of handler for action: the one kept, or a
// new one that replaces it (whose processes are stopped once idle) when
// the action changed.
func (a *agent) serve(handler string, action v1alpha1.ExecAction) *executor.Serve {
	a.servesMu.Lock()
	defer a.servesMu.Unlock()
	k := a.serves[handler]
	if k != nil && slices.Equal(k.action.Command, action.Command) && k.action.WorkingDir == action.WorkingDir && k.action.Processes == action.Processes {
		return k.serve
	}
	if k != nil {
		// Runs in its processes finish first; the idle ones are stopped
		// (not under the lock: a stop may wait for a grace period).
		go k.serve.Close()
	}
	if a.serves == nil {
		a.serves = map[string]*kept{}
	}
	s := &executor.Serve{Exec: executor.Exec{Action: action, KillGrace: a.opts.KillGrace}, Log: a.opts.Log.WithValues("handler", handler)}
	a.serves[handler] = &kept{action: action, serve: s}
	return s
}

// closeServes stops the Serve handlers' processes.
func (a *agent) closeServes() {
	a.servesMu.Lock()
	defer a.servesMu.Unlock()
	for _, k := range a.serves {
		k.serve.Close()
	}
	a.serves = nil
}

// frameWriter writes frames, one JSON line each, to the run's stream;
// as an io.Writer it sends log frames.
type frameWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (f *frameWriter) send(fr runners.Frame) error {
	b, err := json.Marshal(fr)
	if err != nil {
		return err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	_, err = f.w.Write(append(b, '\n'))
	return err
}

func (f *frameWriter) Write(p []byte) (int, error) {
	if err := f.send(runners.Frame{Log: bytes.Clone(p)}); err != nil {
		return 0, err
	}
	return len(p), nil
}

// Install copies the running executable to DIR/opkit, mode 0755: an init
// container gives the agent to a runner's image this way.
func Install(dir string) error {
	self, err := os.Executable()
	if err != nil {
		return fmt.Errorf("agent install: finding opkit's own executable: %w", err)
	}
	in, err := os.Open(self)
	if err != nil {
		return fmt.Errorf("agent install: %w", err)
	}
	defer func() { _ = in.Close() }()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("agent install: %w", err)
	}
	dst := filepath.Join(dir, "opkit")
	tmp, err := os.CreateTemp(dir, ".opkit-")
	if err != nil {
		return fmt.Errorf("agent install: %w", err)
	}
	defer func() { _ = os.Remove(tmp.Name()) }()
	if _, err := io.Copy(tmp, in); err != nil {
		_ = tmp.Close()
		return fmt.Errorf("agent install: copying to %s: %w", dir, err)
	}
	if err := tmp.Chmod(0o755); err != nil {
		_ = tmp.Close()
		return fmt.Errorf("agent install: %w", err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("agent install: %w", err)
	}
	if err := os.Rename(tmp.Name(), dst); err != nil {
		return fmt.Errorf("agent install: %w", err)
	}
	return nil
}
