// Package stack is opkit's composition root: it assembles a running
// engine (package engine) with its archive (package archive) and the
// listeners served beside it (the web console, package console), from one
// Options value. opkit run, opkit dev, opkit test's scenario runner,
// pkg/opkittest, the conformance checker and the bench each say what they
// want in Options and call [Start]; none of them puts the parts together
// itself.
//
// The name: a stack is what runs, the engine and what stands around it,
// as one thing that starts and stops together; "engine" is taken by the
// part that runs the operators, and the root must sit above it, since it
// also serves the console, which the engine never imports.
//
// # Flow
//
// Start, in this order:
//  1. opens the archive (Options.Archive), or takes the caller's
//     (Options.Store);
//  2. starts the listeners beside the engine: the console, whose URL the
//     engine's Events link, and which learns from the engine, once there is
//     one, which operators it runs;
//  3. creates the engine (engine.New binds its own listeners: metrics, and
//     the webhook server of admission and conversion; the hooks listener of
//     webhook deliveries is bound when the first operator with a source is
//     applied), and runs it in the background.
//
// [Stack.Apply] then applies definitions. The stack runs until the context
// given to Start ends or [Stack.Stop] is called; it then stops in the
// reverse order: the engine (its runs end), the listeners, and last the
// archive Start opened.
//
// # Where a new part goes
//
// A listener beside the engine (such as the runner API of exec handlers
// with an image) is started in step 2, served until the stack's context
// ends, and waited for by Stop, as the console is. What the engine runs
// handlers with is the engine's own (exec, job, http, and a test's Stubs):
// an executor of another kind is given to it through engine.Options in
// step 3, where the stack fills the options it owns.
//
// # Guarantees
//
//   - An archive Start opened is closed after the engine and the listeners
//     stopped, so that no run's end is lost; one the caller gave
//     (Options.Store) is never closed by the stack, so that a test reads it
//     after Stop.
//   - Start fails whole: what it started before the failure is stopped, and
//     the archive it opened is closed.
//   - Stop is safe to call more than once and from several goroutines; each
//     call returns the same error.
package stack

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"strings"
	"sync/atomic"
	"syscall"

	"github.com/opkit-dev/opkit/internal/archive"
	"github.com/opkit-dev/opkit/internal/console"
	"github.com/opkit-dev/opkit/internal/definition"
	"github.com/opkit-dev/opkit/internal/engine"
)

// Options configures [Start].
type Options struct {
	// Engine configures the engine (engine.New); Engine.Config is
	// required. Start sets its Archive (from Archive or Store) and, with a
	// Console, its ConsoleURL; its Notice defaults to Log.
	Engine engine.Options
	// Archive is where the runs are recorded: a SQLite file's path or a
	// PostgreSQL URL (archive.Open). Start opens it and Stop closes it,
	// once the engine stopped. Defaults to "": none, unless Store is set.
	Archive string
	// Store is an archive the caller opened, used instead of Archive. The
	// stack never closes it: the caller does, after Stop. Defaults to nil.
	Store archive.Store
	// Log, when set, is called with each line the archive says of its
	// health (archive.Options.Log), and the engine's notices unless
	// Engine.Notice is set. It must not block. Defaults to none.
	Log func(line string)
	// Console, when set, serves the web console beside the engine, from
	// the stack's archive (which it then requires). Defaults to nil: none.
	Console *Console
	// MetricsAnyPort makes the engine serve its metrics on another port of
	// Engine.MetricsAddr's host when that port is taken (opkit dev's
	// default address, held by another opkit dev). Defaults to false: a
	// taken port fails Start.
	MetricsAnyPort bool
}

// Stack is an engine running in the background with its archive and the
// listeners beside it. Use [Start], then [Stack.Apply].
type Stack struct {
	// Engine is the running engine.
	Engine *engine.Engine
	// Archive is the stack's archive (Options.Archive opened, or
	// Options.Store); nil without one.
	Archive archive.Store

	console *Serving // nil without one
	cancel  context.CancelFunc
	stopped chan struct{} // closed once everything stopped; err is set then
	err     error
}

// Start assembles and starts a stack as opts says (see the package doc
// for the order). The stack runs until ctx ends or Stop is called: a
// caller whose stack outlives the context it starts with passes
// context.WithoutCancel(ctx). A listener beside the engine that could
// not bind its address is a *ListenError.
func Start(ctx context.Context, opts Options) (*Stack, error) {
	if opts.Engine.Config == nil {
		return nil, errors.New("stack: Options.Engine.Config is required")
	}
	runCtx, cancel := context.WithCancel(ctx)
	s := &Stack{cancel: cancel, stopped: make(chan struct{})}
	// afterEngine is what stops once the engine did, in reverse order of
	// starting: the listeners, then the archive Start opened.
	var afterEngine []func() error
	stopRest := func(err error) error {
		cancel()
		for i := len(afterEngine) - 1; i >= 0; i-- {
			if cerr := afterEngine[i](); err == nil {
				err = cerr
			}
		}
		return err
	}

	// 1. The archive.
	s.Archive = opts.Store
	if s.Archive == nil && opts.Archive != "" {
		store, err := archive.Open(ctx, opts.Archive, archive.Options{Log: opts.Log})
		if err != nil {
			cancel()
			return nil, err
		}
		s.Archive = store
		afterEngine = append(afterEngine, store.Close)
	}

	// 2. The listeners beside the engine, served until runCtx ends. The
	// console starts before the engine, whose Events link its URL, and
	// learns which operators the engine runs once there is one.
	var running atomic.Pointer[engine.Engine]
	if c := opts.Console; c != nil {
		redeliveries := c.RedeliveryNamespace
		if opts.Engine.Namespace != "" {
			redeliveries = opts.Engine.Namespace
		}
		served, err := c.Serve(runCtx, console.Options{
			Archive: s.Archive, Config: opts.Engine.Config, Auth: c.Auth, RedeliveryNamespace: redeliveries,
			Runs: func(name string) bool {
				e := running.Load()
				return e != nil && e.Runs(name)
			},
			Definitions: func() []*definition.Definition {
				if e := running.Load(); e != nil {
					return e.Definitions()
				}
				return nil
			},
			Standby: func() string {
				if e := running.Load(); e != nil {
					return e.Standby(context.Background())
				}
				return ""
			},
		})
		if err != nil {
			return nil, stopRest(err)
		}
		s.console = served
		afterEngine = append(afterEngine, served.Wait)
	}

	// 3. The engine, with the options the stack owns: its archive, the
	// console's URL, where its notices go. (An executor beyond the
	// engine's own is given to it here.)
	eopts := opts.Engine
	if s.Archive != nil {
		eopts.Archive = s.Archive
	}
	if s.console != nil {
		eopts.ConsoleURL = s.console.URL
	}
	if eopts.Notice == nil {
		eopts.Notice = opts.Log
	}
	e, err := newEngine(eopts, opts.MetricsAnyPort)
	if err != nil {
		return nil, stopRest(err)
	}
	s.Engine = e
	running.Store(e)
	go func() {
		err := e.Run(runCtx)
		s.err = stopRest(err) // the engine may end by itself: the rest stops too
		close(s.stopped)
	}()
	return s, nil
}

// newEngine is engine.New, on another port of the metrics address's host
// when anyPort allows it and the port is taken.
func newEngine(opts engine.Options, anyPort bool) (*engine.Engine, error) {
	e, err := engine.New(opts)
	if err != nil && anyPort && errors.Is(err, syscall.EADDRINUSE) {
		host, _, _ := net.SplitHostPort(opts.MetricsAddr)
		opts.MetricsAddr = net.JoinHostPort(host, "0")
		e, err = engine.New(opts)
	}
	return e, err
}

// Apply applies each definition in turn, as engine.Apply does, and stops
// at the first that fails, naming its file.
func (s *Stack) Apply(ctx context.Context, defs ...*definition.Definition) error {
	for _, d := range defs {
		if err := s.Engine.Apply(ctx, d); err != nil {
			return fmt.Errorf("applying %s: %w", d.Source, err)
		}
	}
	return nil
}

// ConsoleURL is the console's base URL, or "" without a console.
func (s *Stack) ConsoleURL() string {
	if s.console == nil {
		return ""
	}
	return s.console.URL
}

// MetricsURL is the URL of the engine's /metrics, or "" when it serves
// none.
func (s *Stack) MetricsURL() string {
	if addr := s.Engine.MetricsAddr(); addr != "" {
		return "http://" + addr + "/metrics"
	}
	return ""
}

// Done is closed once the stack stopped: its context ended, Stop was
// called, or the engine ended by itself. Err then says why.
func (s *Stack) Done() <-chan struct{} { return s.stopped }

// Err is, once Done is closed, the first error of the engine, the
// listeners and the archive as they stopped; nil before.
func (s *Stack) Err() error {
	select {
	case <-s.stopped:
		return s.err
	default:
		return nil
	}
}

// Wait waits until the stack stopped and returns Err.
func (s *Stack) Wait() error {
	<-s.stopped
	return s.err
}

// Stop stops the stack and waits until it stopped (see the package doc
// for the order), returning Err.
func (s *Stack) Stop() error {
	s.cancel()
	return s.Wait()
}

// ListenOnLoopback sets the engine options o to listen, on free ports of
// 127.0.0.1, for what defs need: webhook deliveries (HooksAddr) when one
// has sources, admission calls (Webhook) when one has admission
// handlers. It is what a test's engine needs, whose plane's API server
// and senders are on loopback.
func ListenOnLoopback(o *engine.Options, defs ...*definition.Definition) {
	for _, d := range defs {
		if slices.ContainsFunc(d.Sources, func(s *definition.EventSource) bool { return !s.Consumed() }) {
			o.HooksAddr = "127.0.0.1:0"
		}
		if len(d.Admission) > 0 {
			o.Webhook = &engine.WebhookOptions{Addr: "127.0.0.1:0"}
		}
	}
}

// Console is the web console as a stack serves it.
type Console struct {
	// Addr is the address to serve it on, e.g. 127.0.0.1:7380. Required.
	Addr string
	// AnyPort serves it on another port of Addr's host when Addr's is
	// taken (the default address, held by another opkit dev). Defaults to
	// false: a taken port is an error.
	AnyPort bool
	// URL is its public base URL, linked from Events. Defaults to
	// http://ADDR, ADDR the one bound.
	URL string
	// Auth says who may use it (console.Options.Auth). The zero value
	// admits everyone, on loopback only.
	Auth console.Auth
	// RedeliveryNamespace is where its Redeliver button creates
	// Redelivery objects (console.Options.RedeliveryNamespace). Beside an
	// engine of one namespace (engine.Options.Namespace), Start uses that
	// one instead, the only one the engine answers. Defaults to "": no
	// Redeliver button, unless the engine has a namespace.
	RedeliveryNamespace string
}

// Serve binds c.Addr and serves the console of opts, with c.Auth, until
// ctx ends. It is how a stack serves its console, and how opkit console
// serves one without an engine. A taken address is a *ListenError.
func (c Console) Serve(ctx context.Context, opts console.Options) (*Serving, error) {
	opts.Auth = c.Auth
	if opts.RedeliveryNamespace == "" {
		opts.RedeliveryNamespace = c.RedeliveryNamespace
	}
	srv, err := console.New(opts)
	if err != nil {
		return nil, err
	}
	ln, err := srv.Listen(c.Addr)
	if err != nil && c.AnyPort {
		// The default port is taken (another opkit dev?): any free one.
		if host, _, splitErr := net.SplitHostPort(c.Addr); splitErr == nil {
			ln, err = srv.Listen(net.JoinHostPort(host, "0"))
		}
	}
	if err != nil {
		return nil, &ListenError{Listener: "console", Addr: c.Addr, Err: err}
	}
	s := &Serving{URL: strings.TrimSuffix(c.URL, "/"), done: make(chan error, 1)}
	if s.URL == "" {
		s.URL = "http://" + ln.Addr().String()
	}
	go func() { s.done <- srv.Serve(ctx, ln) }()
	return s, nil
}

// Serving is a listener serving in the background until its context
// ends.
type Serving struct {
	// URL is its base URL.
	URL  string
	done chan error
}

// Wait waits until it stopped serving and returns why, once; nil when
// its context ended.
func (s *Serving) Wait() error { return <-s.done }

// ListenError is a listener of the stack that could not bind its address.
// Its message is the listener's own; Listener and Addr let a command name
// the flag to change.
type ListenError struct {
	// Listener names it: "console".
	Listener string
	// Addr is the address it was given.
	Addr string
	Err  error
}

func (e *ListenError) Error() string { return e.Err.Error() }

func (e *ListenError) Unwrap() error { return e.Err }
