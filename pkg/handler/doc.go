// Package handler writes opkit handlers in Go: a program that reads a
// binding context (JSON) and writes a result (JSON), as docs/handlers.md
// says, written as typed functions registered per trigger. It imports the
// standard library only, so that a handler's module needs nothing of
// Kubernetes.
//
//	type Greeting = handler.Object[GreetingSpec, GreetingStatus]
//
//	func greet(ctx context.Context, c *handler.Context[Greeting, GreetingSpec]) (*handler.Result[GreetingStatus], error) {
//		g := "Hello, " + c.Object.Spec.Name + "!"
//		handler.Logf(ctx, "%s: %s", c.Trigger, g)
//		return &handler.Result[GreetingStatus]{Status: &GreetingStatus{Greeting: g}}, nil
//	}
//
//	func main() {
//		handler.Main(handler.Handlers[Greeting, GreetingSpec, GreetingStatus]{
//			handler.OnCreate: greet,
//			handler.OnUpdate: greet,
//		})
//	}
//
// Handlers maps each trigger to its Func, and OnAny (or "") to the
// default for the triggers without one. A run whose trigger has neither
// fails permanently, naming the triggers the program handles; so does
// every run of a table with a key that is no trigger (a misspelling).
// Admission handlers (validate, mutate) have a table of their own,
// Admission, with an AdmissionContext in and an AdmissionResult out: the
// fields of one are refused in the other by the engine, and here by the
// compiler.
//
// # Two modes, one program
//
// Main reads the environment. Without OPKIT_MODE=Serve (exec.mode Run, a
// job, opkit replay) the process answers one run: it reads all of stdin
// as the binding context, writes the result to stdout and exits (Once).
// With OPKIT_MODE=Serve it answers a binding context per line of stdin
// with one compact JSON line, flushed, and goes on until stdin ends, then
// exits 0 (Serve). A nil or zero result is written "{}".
//
// # Errors and exit statuses
//
// A Func's error fails the run; the result it returned with it is not
// written:
//
//	the function returns              the answer                                    exit (Once)
//	a result, or nil                  the result; nil is {}                         0
//	Permanent(err), *PermanentError   {"error": {"message": M, "permanent": true}}  0
//	Temporary(err), *TemporaryError   {"error": {"message": M}}                     75 (EX_TEMPFAIL)
//	any other error (a bug)           {"error": {"message": M}}                     1
//	a panic (a bug)                   {"error": {"message": "panic: V"}}            1
//	(a context it cannot read)        {"error": {"message": M, "permanent": true}}  0
//	(a result past opkit's limits)    {"error": {"message": M, "permanent": true}}  0
//
// opkit reads a result of at most 1 MiB (its newline included) that nests
// at most 100 objects and arrays: past either the engine would fail the
// run, and in Serve mode stop the process, so the SDK answers a
// permanent error naming the size or depth and the limit instead.
//
// M is err.Error(), or for a context that cannot be read what is wrong
// with it. The kinds are found with errors.As, so a wrapped Permanent
// (fmt.Errorf("releasing %s: %w", name, handler.Permanent(err))) is
// permanent, with the whole message. A bug's message is logged too, a
// panic's with its stack. A result whose own Error is set exits 0 when it
// is permanent, 75 when not. In Serve mode nothing exits: the answer
// carries the error and the loop goes on.
//
// The other SDKs write a failure of no kind (an exception) as
// "<Type>: <message>". Go's error types say nothing a reader needs
// (*errors.errorString, *fmt.wrapError), and Go's messages carry their
// context already, so the message is the error's own.
//
// # Standard output is the SDK's
//
// Only the answers go to stdout: in Serve mode a stray line would answer
// the wrong run, in a process per run it would spoil the result. Main
// keeps the process's stdout for itself and points file descriptor 1 at
// stderr before any run: fmt.Println, a logger made on os.Stdout, a child
// process started with the process's stdout, all write to the run's log.
// On a system without dup2 (Windows) only the variable os.Stdout is
// replaced: do not keep an *os.File of descriptor 1 taken before Main.
//
// # Logs
//
// A run's log is what the process writes to stderr while it runs: `opkit
// logs RUN` shows it. Logf(ctx, ...) writes a line of it (to the writer
// Serve and Once are given, or that WithLog sets); os.Stderr and stdout
// write there too. Writes to stderr are not buffered, so whatever a run
// logged before it returned is written before its answer, as Serve mode
// asks. A run that leaves goroutines logging after it returned writes
// into the next run's log.
//
// # Cancellation
//
// The ctx a Func gets is done when the run ends and when the process gets
// SIGTERM (or an interrupt): opkit stops a run that timed out with
// SIGTERM to its process group, and SIGKILL 2 seconds later. An error
// returned after a SIGTERM is a temporary failure (the run was stopped,
// not wrong), unless it is Permanent. After the run in flight is answered
// Main exits; a second signal kills at once.
//
// # Testing a handler
//
// Handlers.Call (and Admission.Call) run a context through the table
// in-process, as a process would: the context and the result pass
// through JSON, errors become the error results above. Serve and Once take
// readers and writers, and so test the protocol itself over pipes or
// buffers.
package handler
