package main

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/opkit-dev/opkit/internal/archive"
	"github.com/opkit-dev/opkit/internal/definition"
	"github.com/opkit-dev/opkit/internal/engine"
	"github.com/opkit-dev/opkit/internal/runners"
	"github.com/opkit-dev/opkit/internal/sleep"
	"github.com/opkit-dev/opkit/internal/stack"
)

// impl is one controller setting under test.
type impl struct {
	Name    string // as in the tables: opkit, baseline-1, baseline-8
	Kind    string // opkit or baseline
	Workers int    // 0: the implementation's default
	// Exe is the bench binary that runs it; empty: this one. An A/B
	// comparison (-opkit-b) runs opkit from a binary built at another
	// commit.
	Exe string
	// Serve runs opkit's exec handlers in exec.mode Serve (serveMode).
	Serve bool
	// ServeCommand, with Serve, is the Serve handlers' command instead of
	// lineServe's, a JSON array to which each handler's result is
	// appended (the Python handlers' drains).
	ServeCommand string
	// Runners runs opkit's exec handlers in a runner (runnersMode): an
	// agent process of this machine pulling them from the engine's
	// runner API, as a runner Pod's agent does.
	Runners bool
}

var (
	opkitDefaults = impl{Name: "opkit", Kind: "opkit"}
	baseline1     = impl{Name: "baseline-1", Kind: "baseline", Workers: 1}
	baseline8     = impl{Name: "baseline-8", Kind: "baseline", Workers: 8}
	// opkitB is opkit from another bench binary (-opkit-b).
	opkitB = impl{Name: "opkit-b", Kind: "opkit"}
	// opkitServe is opkit with the workload's exec handlers in
	// exec.mode Serve: no process per run.
	opkitServe = impl{Name: "opkit-serve", Kind: "opkit", Serve: true}
	// opkitRunners is opkitServe with the handlers in a runner.
	opkitRunners = impl{Name: "opkit-runners", Kind: "opkit", Serve: true, Runners: true}
)

// controller is a running controller process.
type controller struct {
	cmd    *exec.Cmd
	latest atomic.Pointer[stats]
	exited chan struct{} // closed when the process exited
	err    error         // how it exited, once exited is closed
	log    string
	// also stops what runs beside it (a runner's agent), once, when it
	// is stopped.
	also     func()
	alsoOnce sync.Once

	mu      sync.Mutex
	handled []handled // everything it reported handled, in order
}

// startController starts impl on the workload file def. archive is the
// SQLite path for opkit's run archive, or "off".
// A peer (im.isPeer) runs under its supervisor instead (startPeer).
func (b *bench) startController(im impl, def, archive string) (*controller, error) {
	if im.isPeer() {
		return b.startPeer(im, def)
	}
	env := []string{
		roleEnv + "=controller", implEnv + "=" + im.Kind, workersEnv + "=" + strconv.Itoa(im.Workers),
		definitionEnv + "=" + def, archiveEnv + "=" + archive, profileEnv + "=" + b.opts.ProfileDir, "KUBECONFIG=" + b.kubeconfig,
	}
	if im.Serve {
		env = append(env, serveEnv+"=1")
		if im.ServeCommand != "" {
			env = append(env, serveCommandEnv+"="+im.ServeCommand)
		}
	}
	if !im.Runners {
		return b.spawn(im, env, im.Exe)
	}
	addr, err := freeLoopbackAddr()
	if err != nil {
		return nil, err
	}
	c, err := b.spawn(im, append(env, runnersEnv+"="+addr), im.Exe)
	if err != nil {
		return nil, err
	}
	// The runner: an agent of the workload's operator, once the engine
	// has published its CA.
	stopAgent, agentLog, err := b.startAgent(context.Background(), addr, workloadOperator, runnerImage, runners.DefaultParallel)
	if err != nil {
		c.stop()
		return nil, fmt.Errorf("the runner's agent: %w", err)
	}
	c.log += ", the agent's: " + agentLog
	c.also = stopAgent
	return c, nil
}

// freeLoopbackAddr is an address on loopback with a port free now.
func freeLoopbackAddr() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer func() { _ = ln.Close() }()
	return ln.Addr().String(), nil
}

// spawn starts the bench's executable (exe, or this one when empty) with
// env added to this process's, as the controller im; its stderr goes to a
// log file in the work directory.
func (b *bench) spawn(im impl, env []string, exe string) (*controller, error) {
	if exe == "" {
		self, err := os.Executable()
		if err != nil {
			return nil, err
		}
		exe = self
	}
	name := im.Name
	if im.isPeer() {
		name = im.Kind // the peers' names have spaces
	}
	logFile, err := os.CreateTemp(b.workDir, name+"-*.log")
	if err != nil {
		return nil, err
	}
	defer func() { _ = logFile.Close() }()
	cmd := exec.Command(exe)
	cmd.Env = append(os.Environ(), env...)
	cmd.Stderr = logFile
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	c := &controller{cmd: cmd, exited: make(chan struct{}), log: logFile.Name()}
	go func() {
		readStats(bufio.NewScanner(out), c)
		c.err = cmd.Wait()
		close(c.exited)
	}()
	return c, nil
}

// stats returns the latest figures the controller reported; it fails when
// the controller has exited.
func (c *controller) stats() (stats, error) {
	select {
	case <-c.exited:
		return stats{}, fmt.Errorf("the controller exited (%w); its log: %s", c.err, c.log)
	default:
	}
	s := c.latest.Load()
	if s == nil {
		return stats{}, nil
	}
	return *s, nil
}

// wait waits for the named Printers as [tracker.wait] does, and gives up
// as soon as the controller exits instead of at the timeout. Its error
// names the controller and its log.
func (c *controller) wait(ctx context.Context, tr *tracker, names []string, needChild, needDone bool, timeout time.Duration) (time.Time, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		select {
		case <-c.exited:
			cancel()
		case <-ctx.Done():
		}
	}()
	last, err := tr.wait(ctx, names, needChild, needDone, timeout)
	if err == nil {
		return last, nil
	}
	select {
	case <-c.exited:
		return last, fmt.Errorf("the controller exited (%w): %w (log: %s)", c.err, err, c.log)
	default:
		return last, fmt.Errorf("%w (log: %s)", err, c.log)
	}
}

// stop stops the controller and waits for it, killing it after 30s. It may
// be called more than once.
func (c *controller) stop() {
	c.alsoOnce.Do(func() {
		if c.also != nil {
			c.also()
		}
	})
	_ = c.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-c.exited:
	case <-time.After(30 * time.Second):
		_ = c.cmd.Process.Kill()
		<-c.exited
	}
}

// settle waits until the controller has made no write for 5s: the end of
// its work queue, and of its Events, which the events library sends in the
// background. After 2 minutes it gives up: the idle figures will show the
// writes.
func (c *controller) settle(ctx context.Context) error {
	last, err := c.stats()
	if err != nil {
		return err
	}
	quiet, deadline := time.Now(), time.Now().Add(2*time.Minute)
	for time.Since(quiet) < 5*time.Second && time.Now().Before(deadline) {
		if !sleep.For(ctx, statsInterval) {
			return ctx.Err()
		}
		s, err := c.stats()
		if err != nil {
			return err
		}
		if s.Writes != last.Writes {
			last, quiet = s, time.Now()
		}
	}
	return nil
}

// sample reads the controller's stats now and again after d.
func (c *controller) sample(ctx context.Context, d time.Duration) (before, after stats, err error) {
	if before, err = c.stats(); err != nil {
		return
	}
	if !sleep.For(ctx, d+2*statsInterval) {
		return before, before, ctx.Err()
	}
	after, err = c.stats()
	return
}

// tempArchive returns a new archive path in dir; the suite removes dir at
// its end.
func tempArchive(dir string) string {
	return filepath.Join(dir, fmt.Sprintf("runs-%d.db", time.Now().UnixNano()))
}

// inProcess is an engine the bench runs in its own process, with an
// archive of its own, for a scenario that reads the archive once the
// engine stopped.
type inProcess struct {
	*stack.Stack
	store *archive.SQLite
	// log is where the engine logs, for an error to point at.
	log string
}

// startInProcess starts an engine in this process with opts, its Config
// the bench's, on a new SQLite archive, and applies d. close stops the
// engine, if it runs still, and closes the archive.
func (b *bench) startInProcess(ctx context.Context, opts engine.Options, d *definition.Definition) (_ *inProcess, closeAll func(), err error) {
	store, err := archive.OpenSQLite(ctx, tempArchive(b.workDir), archive.Options{})
	if err != nil {
		return nil, nil, err
	}
	e := &inProcess{store: store, log: b.engineLog()}
	opts.Config = b.c.cfg
	if e.Stack, err = stack.Start(ctx, stack.Options{Engine: opts, Store: store}); err != nil {
		_ = store.Close()
		return nil, nil, err
	}
	closeAll = func() { _ = e.Stop(); _ = store.Close() }
	if err := e.Engine.Apply(ctx, d); err != nil {
		closeAll()
		return nil, nil, fmt.Errorf("applying operator %s: %w (log: %s)", d.Operator.Name, err, e.log)
	}
	return e, closeAll, nil
}

// stopped stops the engine; an error says where its log is.
func (e *inProcess) stopped() error {
	if err := e.Stop(); err != nil {
		return fmt.Errorf("the engine: %w (log: %s)", err, e.log)
	}
	return nil
}
