package executor

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/go-logr/logr"
	"golang.org/x/sys/unix"

	"github.com/opkit-dev/opkit/api/v1alpha1"
)

// Serve runs an exec handler's runs in processes that outlive them
// (exec.mode Serve): each process takes a binding context per line on its
// stdin and answers each with a result on one line of its stdout, one run
// at a time. What it writes on stderr before it answers a run is that
// run's log; between runs, the engine's log (what it writes after an
// answer may be the next run's: a process logs a run before answering
// it). A process is started when a run finds none free, up to
// Action.Processes (4 by default) at once; a run beyond them waits for one, within its timeout.
//
// A run ends as Exec's does: a result (or its error), or a *Failure. A
// process that times out, exits, writes more than a result's limit, or
// answers with a line that is not a result is stopped, and the next run
// starts a new one: an answer out of step would answer the wrong run.
//
// The environment is Exec's without the run's own variables (they are in
// the binding context: runId, trigger, idempotencyKey, attempt); values
// from Secrets are read at each run, and a process started with other
// values is replaced before the run. Action.ServiceAccount is refused by
// the definition: its token is per run.
//
// After Close, or once its processes are stopped, each run is a process
// of its own, as Exec's (one line in, end of input, one line out): a
// handler written for Serve reads to the end of its input and exits.
type Serve struct {
	Exec
	// Log receives what a process writes on stderr between runs.
	Log logr.Logger

	once   sync.Once
	slots  chan struct{} // a token per process that may run
	mu     sync.Mutex
	idle   []*served // started, free, the latest last
	closed bool
	// warming counts the Warm calls under way: Close waits for them.
	warming sync.WaitGroup
}

// served is one process of a Serve.
type served struct {
	cmd     *exec.Cmd
	env     []string
	stdin   io.WriteCloser
	stdout  *os.File        // its read end
	stderr  *os.File        // its read end, read through errConn
	errConn syscall.RawConn // stderr's, non-blocking
	lines   chan line       // stdout, a line at a time, then its error
	exited  chan struct{}   // closed once Wait returned
	waitErr error
	quit    chan struct{} // closed by stop
	grace   time.Duration

	mu   sync.Mutex // held while stderr is read and passed on
	log  io.Writer  // the run in flight's, or nil between runs
	idle logr.Logger
	buf  []byte
}

// line is a line of a process's stdout, or why there is none.
type line struct {
	text []byte
	err  error
}

// errLineTooLong says a process wrote more than a result's limit without
// ending the line.
var errLineTooLong = errors.New("line too long")

// Run runs req in a process of the pool.
func (s *Serve) Run(ctx context.Context, req Request) (*Result, error) {
	ctx, cancel := context.WithTimeout(ctx, req.Timeout)
	defer cancel()
	s.init()
	env, hidden, err := s.serveEnv(ctx, req)
	if err != nil {
		return hidden.redactResult(nil, err)
	}
	select {
	case s.slots <- struct{}{}:
	case <-ctx.Done():
		return nil, endedFailure(ctx, req.Timeout, fmt.Sprintf(" waiting for one of the handler's %d processes (exec.processes) to be free", cap(s.slots)))
	}
	defer func() { <-s.slots }()
	p, err := s.take(env)
	if errors.Is(err, errClosed) {
		return s.Exec.Run(ctx, req)
	}
	if err != nil {
		return hidden.redactResult(nil, err)
	}
	res, keep, err := p.run(ctx, req, hidden)
	s.put(p, keep)
	return hidden.redactResult(res, err)
}

var errClosed = errors.New("closed")

// init makes the slots, once.
func (s *Serve) init() {
	s.once.Do(func() {
		s.slots = make(chan struct{}, cmp.Or(int(s.Action.Processes), 4))
	})
}

// Warm starts the handler's processes ahead of its runs, up to as many
// as it may run at once, so that the first runs wait for none to start
// (a process's start is often longer than its runs: an interpreter's, a
// runtime's). It returns once they are started, or failed to (the runs
// then start their own, and say why). A handler whose environment reads
// a Secret of the run's object's namespace (valueFrom without a
// namespace) is not warmed: its processes' environment is known at a
// run. Neither are the slots runs hold (those runs start their own), nor
// as many as are idle already; nothing after Close or ctx's end, and
// Close waits for what Warm is starting.
func (s *Serve) Warm(ctx context.Context, handler string) {
	s.init()
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return
	}
	s.warming.Add(1)
	s.mu.Unlock()
	defer s.warming.Done()
	env, _, err := s.serveEnv(ctx, Request{Handler: handler})
	if err != nil {
		return
	}
	// The free slots, held while their processes start: a run started
	// meanwhile waits, then takes one of them.
	held := 0
free:
	for held < cap(s.slots) {
		select {
		case s.slots <- struct{}{}:
			held++
		default:
			break free
		}
	}
	s.mu.Lock()
	n := held - len(s.idle)
	s.mu.Unlock()
	var wg sync.WaitGroup
	for range max(n, 0) {
		wg.Go(func() {
			if ctx.Err() != nil {
				return
			}
			if p, err := s.start(env); err == nil {
				s.put(p, true)
			}
		})
	}
	wg.Wait()
	for range held {
		<-s.slots
	}
}

// Local is the executor of ex's action on this host: a process per run,
// or, in mode Serve, processes that outlive runs, whose words between
// runs go to log.
func Local(ex Exec, log logr.Logger) Executor {
	if ex.Action.Mode == v1alpha1.ExecServe {
		return &Serve{Exec: ex, Log: log}
	}
	return &ex
}

// warmer is an executor that keeps something running between runs,
// which it can start ahead of them (Serve.Warm).
type warmer interface {
	Warm(ctx context.Context, handler string)
}

// WarmAll starts, each at once, what the executors keep running between
// runs (a Serve handler's processes), by handler name; the others keep
// nothing.
func WarmAll(ctx context.Context, execs map[string]Executor) {
	for handler, ex := range execs {
		if w, ok := ex.(warmer); ok {
			go w.Warm(ctx, handler)
		}
	}
}

// CloseAll stops what the executors keep running between runs (a Serve
// handler's processes); the others keep nothing.
func CloseAll(execs map[string]Executor) {
	for _, ex := range execs {
		if c, ok := ex.(interface{ Close() }); ok {
			c.Close()
		}
	}
}

// serveEnv is the processes' environment for req, with the values it
// must not show.
func (s *Serve) serveEnv(ctx context.Context, req Request) ([]string, secrets, error) {
	env := inherited()
	env = append(env, "OPKIT_HANDLER="+req.Handler, "OPKIT_MODE=Serve")
	own, hidden, err := s.handlerEnv(ctx, req)
	return append(env, own...), hidden, err
}

// take returns a free process started with env, starting one when none
// is; errClosed after Close. The caller holds a slot.
func (s *Serve) take(env []string) (*served, error) {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil, errClosed
	}
	var stale []*served
	var p *served
	for len(s.idle) > 0 && p == nil {
		q := s.idle[len(s.idle)-1]
		s.idle = s.idle[:len(s.idle)-1]
		switch {
		case !slices.Equal(q.env, env):
			stale = append(stale, q) // a Secret's value changed
		case !q.ready():
			stale = append(stale, q) // it exited, or wrote out of turn
		default:
			p = q
		}
	}
	s.mu.Unlock()
	for _, q := range stale {
		go q.stop()
	}
	if p != nil {
		return p, nil
	}
	p, err := s.start(env)
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	closed := s.closed
	s.mu.Unlock()
	if closed {
		go p.stop()
		return nil, errClosed
	}
	return p, nil
}

// put gives p back after a run, or stops it when it cannot take another.
func (s *Serve) put(p *served, keep bool) {
	s.mu.Lock()
	if keep && !s.closed && len(s.idle) < cap(s.slots) {
		s.idle = append(s.idle, p)
		s.mu.Unlock()
		return
	}
	s.mu.Unlock()
	p.stop()
}

// Close stops the processes: a run in flight ends first (or at its
// timeout); the runs after it are processes of their own. It returns once
// the idle ones, and those Warm was starting, have exited.
func (s *Serve) Close() {
	s.mu.Lock()
	s.closed = true
	idle := s.idle
	s.idle = nil
	s.mu.Unlock()
	var wg sync.WaitGroup
	for _, p := range idle {
		wg.Go(p.stop)
	}
	wg.Wait()
	s.warming.Wait() // what they start now is stopped (put)
}

// start starts a process with env.
func (s *Serve) start(env []string) (*served, error) {
	cmd, grace := s.command(env)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, &Failure{Message: err.Error()}
	}
	// stdout and stderr are pipes of opkit's own, not Cmd's: Wait
	// would close them when the process exits, before its last words
	// are read.
	outR, outW, err := os.Pipe()
	if err != nil {
		return nil, &Failure{Message: err.Error()}
	}
	errR, errW, err := os.Pipe()
	if err != nil {
		_, _ = outR.Close(), outW.Close()
		return nil, &Failure{Message: err.Error()}
	}
	cmd.Stdout, cmd.Stderr = outW, errW
	err = cmd.Start()
	_, _ = outW.Close(), errW.Close()
	if err != nil {
		_, _ = outR.Close(), errR.Close()
		return nil, s.startFailure(err)
	}
	p := &served{
		cmd: cmd, env: env, stdin: stdin, stdout: outR, stderr: errR, lines: make(chan line),
		exited: make(chan struct{}), quit: make(chan struct{}), grace: grace,
		idle: s.Log.WithValues("pid", cmd.Process.Pid), buf: make([]byte, 32<<10),
	}
	go func() {
		p.waitErr = cmd.Wait()
		close(p.exited)
	}()
	if p.errConn, err = errR.SyscallConn(); err != nil {
		p.kill()
		p.stop()
		return nil, &Failure{Message: err.Error()}
	}
	go p.readStderr()
	go p.readStdout()
	return p, nil
}

// readStdout sends p's stdout on p.lines, a line at a time, then the
// error that ended it; a line longer than a result's limit ends it too.
func (p *served) readStdout() {
	defer p.stdout.Close()
	br := bufio.NewReaderSize(p.stdout, 64<<10)
	for {
		text, err := readAnswer(br, MaxResultBytes)
		select {
		case p.lines <- line{text: text, err: err}:
		case <-p.quit:
			return
		}
		if err != nil {
			close(p.lines)
			return
		}
	}
}

// readAnswer reads a line of a process's stdout, its newline included,
// with a nil error. A line longer than limit and its newline ends with
// errLineTooLong and what was read of it; an output that ends (io.EOF) or
// fails before the newline, with that error and what came of the line.
func readAnswer(br *bufio.Reader, limit int) ([]byte, error) {
	var text []byte
	for {
		chunk, err := br.ReadSlice('\n')
		text = append(text, chunk...)
		if len(text) > limit+1 {
			return text, errLineTooLong
		}
		if !errors.Is(err, bufio.ErrBufferFull) {
			return text, err
		}
	}
}

// readStderr passes p's stderr on until its end: to the run in flight's
// log, or the engine's between runs. Each read and its passing on happen
// under p.mu, so that drain sees all of what was written before it.
func (p *served) readStderr() {
	for {
		var n int
		var rerr error
		err := p.errConn.Read(func(fd uintptr) bool {
			p.mu.Lock()
			defer p.mu.Unlock()
			n, rerr = unix.Read(int(fd), p.buf)
			if errors.Is(rerr, unix.EAGAIN) {
				return false
			}
			if n > 0 {
				p.pass(p.buf[:n])
			}
			return true
		})
		if err != nil || rerr != nil || n <= 0 {
			return
		}
	}
}

// pass passes b on; p.mu is held.
func (p *served) pass(b []byte) {
	if p.log != nil {
		_, _ = p.log.Write(b)
		return
	}
	if text := strings.TrimRight(string(b), "\n"); text != "" {
		p.idle.Info("handler process, between runs: " + text)
	}
}

// drain passes on what p wrote on stderr and is not yet read; p.mu is
// held.
func (p *served) drain() {
	// Control, not Read: readStderr holds the descriptor's read lock
	// while it waits for more.
	_ = p.errConn.Control(func(fd uintptr) {
		for {
			n, err := unix.Read(int(fd), p.buf)
			if n <= 0 || err != nil {
				return
			}
			p.pass(p.buf[:n])
		}
	})
}

// setLog makes w the destination of p's stderr, after passing on what it
// wrote before.
func (p *served) setLog(w io.Writer) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.drain()
	p.log = w
}

// ready reports whether p may take a run: it has not exited and wrote
// nothing on stdout since its last answer.
func (p *served) ready() bool {
	select {
	case <-p.exited:
		return false
	case l, ok := <-p.lines:
		if ok && l.err == nil {
			p.idle.Info("handler process wrote a line between runs; it is stopped, as its next answer would be out of step", "line", excerpt(l.text))
		}
		return false
	default:
		return true
	}
}

// run hands req to p and reads its answer; keep says whether p can take
// the next run.
func (p *served) run(ctx context.Context, req Request, hidden secrets) (res *Result, keep bool, err error) {
	input := asLine(req.Input)
	stderr := &tailWriter{w: req.Log}
	redacted := &redactor{w: stderr, hidden: hidden}
	p.setLog(redacted)
	// detach passes on what the process logged before it answered (or
	// ended), then leaves its stderr to the engine's log.
	detach := sync.OnceFunc(func() {
		p.setLog(nil)
		redacted.Flush()
	})
	defer detach()
	wrote := make(chan error, 1)
	go func() {
		_, err := p.stdin.Write(input)
		wrote <- err
	}()
	var l line
	var ok bool
	select {
	case l, ok = <-p.lines:
	case <-p.exited:
		// Its descendants may hold stdout: they go with it.
		_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
		l, ok = <-p.lines
	case <-ctx.Done():
		// An answer that came as the time ran out is taken.
		select {
		case l, ok = <-p.lines:
		default:
			p.kill()
			return nil, false, endedFailure(ctx, req.Timeout, "; its process group was killed (the next run starts a new process)")
		}
	}
	if ok && errors.Is(l.err, errLineTooLong) {
		p.kill()
		return nil, false, overflowFailure()
	}
	if !ok || l.err != nil {
		return nil, false, p.exitFailure(ctx, stderr, detach, wrote)
	}
	detach()
	res, err = hidden.parseAnswer(l.text)
	if err != nil {
		return nil, false, err
	}
	return res, true, nil
}

// parseAnswer reads a process's answer, a line of its stdout (readAnswer),
// as ParseResult does, quoting it with h's values hidden; a line that is
// not a result is a *Failure that says what an answer is, and that the
// process is stopped.
func (h secrets) parseAnswer(text []byte) (*Result, error) {
	res, err := h.parseResult(text)
	if err != nil {
		f := AsFailure(err)
		f.Message += "; in exec.mode Serve a result is one line of JSON (print it compact, then flush), and the process is stopped, as its next answer could be out of step"
		return nil, f
	}
	return res, nil
}

// stdinOf is what a process per run of action reads: the binding
// context, or, for a Serve handler run so (in a runner, after its pool
// closed, replayed), its one line, ended, or a shell's read would not
// return it.
func stdinOf(action v1alpha1.ExecAction, input []byte) []byte {
	if action.Mode == v1alpha1.ExecServe {
		return asLine(input)
	}
	return input
}

// asLine is the binding context on one line, ended by a newline. The
// engine's binding contexts are compact JSON already, and are passed as
// they are (a runner's come ended by their newline, stdinOf); anything
// else with a line break is compacted when it is JSON, else its line
// breaks are replaced by spaces, so that it stays one line.
func asLine(input []byte) []byte {
	body := bytes.TrimSuffix(input, []byte("\n"))
	if bytes.IndexByte(body, '\n') < 0 && bytes.IndexByte(body, '\r') < 0 {
		// One line already (a JSON string holds its line breaks escaped):
		// not scanned again, at every run, for the spaces Compact drops.
		return append(body[:len(body):len(body)], '\n')
	}
	var b bytes.Buffer
	b.Grow(len(input) + 1)
	if json.Compact(&b, input) != nil {
		b.Reset()
		b.WriteString(lineBreaks.Replace(string(bytes.TrimSpace(input))))
	}
	b.WriteByte('\n')
	return b.Bytes()
}

// lineBreaks replaces each line break with a space: a reader that splits
// lines at a lone \r too would read two.
var lineBreaks = strings.NewReplacer("\r\n", " ", "\r", " ", "\n", " ")

// exitFailure says why p ended its output without answering: how it
// exited and the last line of its log.
func (p *served) exitFailure(ctx context.Context, stderr *tailWriter, detach func(), wrote <-chan error) error {
	select {
	case <-p.exited:
	case <-ctx.Done():
		p.kill()
		<-p.exited
	}
	detach()
	plain := "the process ended its output without answering"
	var exitErr *exec.ExitError
	switch {
	case errors.As(p.waitErr, &exitErr):
		if ws, ok := exitErr.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			plain = fmt.Sprintf("the process was killed by signal %s before answering", ws.Signal())
			break
		}
		plain = fmt.Sprintf("the process exited with status %d before answering", exitErr.ExitCode())
	case p.waitErr == nil:
		plain = "the process exited with status 0 before answering (in exec.mode Serve it reads a binding context per line until the end of its input)"
	}
	if line := stderr.lastLine(); line != "" {
		plain += ": " + line
	}
	select {
	case err := <-wrote:
		if errors.Is(err, syscall.EPIPE) {
			plain += " (it did not read the binding context)"
		}
	default:
	}
	if exitErr != nil && exitErr.ExitCode() == ExitTemporary {
		return &Failure{Message: plain + "; exit status 75: temporary failure"}
	}
	return &Failure{Message: plain}
}

// kill stops p's process group at once: SIGTERM, then SIGKILL after its
// grace.
func (p *served) kill() {
	pid := p.cmd.Process.Pid
	_ = syscall.Kill(-pid, syscall.SIGTERM)
	go func() {
		select {
		case <-p.exited:
		case <-time.After(p.grace):
		}
		_ = syscall.Kill(-pid, syscall.SIGKILL)
	}()
}

// stop ends p: the end of its input asks it to exit; after its grace it
// is killed. It returns once p exited.
func (p *served) stop() {
	_ = p.stdin.Close()
	select {
	case <-p.exited:
	case <-time.After(p.grace):
		p.kill()
		<-p.exited
	}
	// Whatever the leader did, leave nothing of its group behind.
	_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
	close(p.quit)
	p.mu.Lock()
	p.drain()
	p.mu.Unlock()
	_, _ = p.stdout.Close(), p.stderr.Close()
}
