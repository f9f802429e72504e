package handler

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"runtime/debug"
	"slices"
	"strings"
)

// Func handles the runs of a trigger. It returns the result (nil: nothing
// to do) or an error, which fails the run: Permanent, Temporary, or any
// other (a bug: retried). When it returns an error its result is not
// written. ctx is done when the run is stopped (SIGTERM: its timeout, or
// the engine's end) and when it returns; Logf(ctx, ...) writes its log.
type Func[O, Old, S any] func(ctx context.Context, c *Context[O, Old]) (*Result[S], error)

// Handlers is a handler program's table: a Func per trigger, and under
// OnAny (or "") the default, for the triggers that have none. A run whose
// trigger has no Func and the table no default fails permanently, naming
// the triggers the table handles. Run it with Main.
//
// Generated code names it once: type Handlers =
// handler.Handlers[Greeting, GreetingSpec, GreetingStatus].
type Handlers[O, Old, S any] map[Trigger]Func[O, Old, S]

// AdmissionFunc answers an admission call. An error (of any kind) is no
// answer: the engine answers by the handler's failurePolicy. A validate
// function's answer says Allowed (Allow, Deny): one without it, nil
// included, is written as a permanent error saying so.
type AdmissionFunc[O any] func(ctx context.Context, c *AdmissionContext[O]) (*AdmissionResult, error)

// Admission is an admission handler program's table: an AdmissionFunc
// for OnValidate, OnMutate, or OnAny. Run it with Main.
type Admission[O any] map[Trigger]AdmissionFunc[O]

// Program is a table Main, Serve and Once run: Handlers or Admission.
type Program interface {
	// run answers one binding context: the compact JSON of its result
	// and the exit status a process per run ends with.
	run(ctx context.Context, input []byte, log *runLog) (out []byte, exit int)
}

var (
	_ Program = Handlers[any, any, any](nil)
	_ Program = Admission[any](nil)
)

// Exit statuses of a process per run (Once, Main).
const (
	exitOK        = 0  // a result, an error in it permanent or none
	exitBug       = 1  // an error not marked Temporary or Permanent, a panic
	exitTemporary = 75 // EX_TEMPFAIL: a temporary error
)

// Call runs c through h in-process as a process would: c is written as
// JSON and read back, the function found by its trigger and called, and
// what it returns written as the result JSON and read back. Errors become
// the error results the protocol writes (Permanent with
// Error.Permanent). The result is never nil. Logs go to ctx's (WithLog).
func (h Handlers[O, Old, S]) Call(ctx context.Context, c *Context[O, Old]) *Result[S] {
	return callJSON[Result[S]](ctx, h, c)
}

// Call runs c through a in-process as a process would, as
// Handlers.Call does.
func (a Admission[O]) Call(ctx context.Context, c *AdmissionContext[O]) *AdmissionResult {
	return callJSON[AdmissionResult](ctx, a, c)
}

func callJSON[R any](ctx context.Context, p Program, c any) *R {
	out, err := json.Marshal(c)
	if err == nil {
		out, _ = p.run(ctx, out, logOf(ctx))
		r := new(R)
		if err = json.Unmarshal(out, r); err == nil {
			return r
		}
		err = fmt.Errorf("reading the result %s: %w", out, err)
	}
	// Only a context or a result type that does not survive JSON comes
	// here: a bug of the test or of its types.
	r := new(R)
	_ = json.Unmarshal(mustMarshal(errorResult{Error: &ResultError{Message: "handler.Call: " + err.Error(), Permanent: true}}), r)
	return r
}

func (h Handlers[O, Old, S]) run(ctx context.Context, input []byte, log *runLog) ([]byte, int) {
	return call(ctx, input, log, func(c *Context[O, Old]) (func(context.Context, *Context[O, Old]) (*Result[S], error), error) {
		return find(h, c.Trigger, runTriggers, "handler.Handlers", "handler.Admission")
	})
}

func (a Admission[O]) run(ctx context.Context, input []byte, log *runLog) ([]byte, int) {
	return call(ctx, input, log, func(c *AdmissionContext[O]) (func(context.Context, *AdmissionContext[O]) (*AdmissionResult, error), error) {
		f, err := find(a, c.Trigger, admissionTriggers, "handler.Admission", "handler.Handlers")
		if err != nil || c.Trigger != OnValidate {
			return f, err
		}
		return func(ctx context.Context, c *AdmissionContext[O]) (*AdmissionResult, error) {
			res, err := f(ctx, c)
			if err == nil && (res == nil || res.Allowed == nil && res.Error == nil) {
				return nil, Permanent(errors.New("a validate handler answers whether the request is allowed: return handler.Allow() or handler.Deny(message), not a result without Allowed"))
			}
			return res, err
		}, nil
	})
}

// find is the function of table for trigger, or its default. A key of
// the table that is none of known (nor a default) is refused, naming it:
// a misspelt trigger would otherwise never run. other names the table
// for the other kind of triggers.
func find[F any](table map[Trigger]F, trigger Trigger, known []Trigger, name, other string) (F, error) {
	var zero F
	for k := range table {
		switch {
		case k == OnAny || k == "":
		case slices.Contains(known, k):
		case slices.Contains(runTriggers, k) || slices.Contains(admissionTriggers, k):
			return zero, fmt.Errorf("the program's %s has a function for %q, a trigger of a %s table", name, k, other)
		default:
			return zero, fmt.Errorf("the program's %s has a function for %q, which is not a trigger: the triggers are %s", name, k, list(known))
		}
	}
	if _, ok := table[OnAny]; ok {
		if _, ok := table[""]; ok {
			return zero, fmt.Errorf("the program's %s has two defaults, under %q and \"\": keep one", name, OnAny)
		}
	}
	if f, ok := table[trigger]; ok && trigger != "" {
		return f, nil
	}
	if f, ok := table[OnAny]; ok {
		return f, nil
	}
	if f, ok := table[""]; ok {
		return f, nil
	}
	var handles []string
	for _, t := range known {
		if _, ok := table[t]; ok {
			handles = append(handles, string(t))
		}
	}
	if len(handles) == 0 {
		return zero, fmt.Errorf("this program has no function for trigger %q: its %s is empty", trigger, name)
	}
	return zero, fmt.Errorf("this program has no function for trigger %q and no default: it handles %s", trigger, strings.Join(handles, ", "))
}

func list(ts []Trigger) string {
	s := make([]string, len(ts))
	for i, t := range ts {
		s[i] = string(t)
	}
	return strings.Join(s, ", ")
}

// call is a run: input read into a C, its function found, called, and
// its result or error written.
func call[C any, R any, PR interface {
	*R
	answer
}](ctx context.Context, input []byte, log *runLog, fn func(*C) (func(context.Context, *C) (PR, error), error)) ([]byte, int) {
	c := new(C)
	if err := readContext(input, c); err != nil {
		return failed(ctx, log, Permanent(err))
	}
	f, err := fn(c)
	if err != nil {
		return failed(ctx, log, Permanent(err))
	}
	runCtx, cancel := context.WithCancel(context.WithValue(ctx, logKey{}, log))
	defer cancel()
	res, err := protect(runCtx, f, c)
	if err != nil {
		return failed(ctx, log, err)
	}
	if res == nil {
		res = new(R)
	}
	out, err := marshal(res)
	if err != nil {
		return failed(ctx, log, fmt.Errorf("writing the result: %w", err))
	}
	if err := fits(out); err != nil {
		return failed(ctx, log, Permanent(err))
	}
	if e := res.failure(); e != nil && !e.Permanent {
		return out, exitTemporary
	}
	return out, exitOK
}

// protect calls f, turning a panic into an error whose stack goes to the
// run's log.
func protect[C, R any](ctx context.Context, f func(context.Context, *C) (R, error), c *C) (res R, err error) {
	defer func() {
		if v := recover(); v != nil {
			err = &panicError{value: v, stack: debug.Stack()}
		}
	}()
	return f(ctx, c)
}

type panicError struct {
	value any
	stack []byte
}

func (p *panicError) Error() string { return fmt.Sprintf("panic: %v", p.value) }

// failed is the answer for err: its kind decides "permanent" and the exit
// status; an error of no kind (a bug) is logged, with its stack if it
// was a panic. An error returned after ctx was cancelled (SIGTERM) is
// temporary: the run was stopped, not wrong.
func failed(ctx context.Context, log *runLog, err error) ([]byte, int) {
	msg := err.Error()
	if msg == "" {
		msg = fmt.Sprintf("an error of type %T with no message", err)
	}
	var k kind
	var p *panicError
	switch {
	case errors.As(err, &k) && k.permanent():
		return mustMarshal(errorResult{Error: &ResultError{Message: msg, Permanent: true}}), exitOK
	case errors.As(err, &k):
		return mustMarshal(errorResult{Error: &ResultError{Message: msg}}), exitTemporary
	case errors.As(err, &p):
		log.printf("%s\n\n%s", msg, p.stack)
	case ctx.Err() != nil:
		return mustMarshal(errorResult{Error: &ResultError{Message: msg}}), exitTemporary
	default:
		log.printf("error: %s", msg)
	}
	return mustMarshal(errorResult{Error: &ResultError{Message: msg}}), exitBug
}

// errorResult is the result of a failed run, of either kind.
type errorResult struct {
	Error *ResultError `json:"error"`
}

// readContext reads a binding context, naming what is wrong with one
// that cannot be read.
func readContext(input []byte, c any) error {
	input = bytes.TrimSpace(input)
	if len(input) == 0 {
		return errors.New("reading the binding context: the input is empty, where a JSON object was expected")
	}
	err := json.Unmarshal(input, c)
	var syntax *json.SyntaxError
	var typ *json.UnmarshalTypeError
	switch {
	case err == nil:
		return nil
	case errors.As(err, &syntax):
		return fmt.Errorf("reading the binding context: it is not JSON: %w (at byte %d of %s)", syntax, syntax.Offset, start(input))
	case errors.As(err, &typ) && typ.Field != "":
		return fmt.Errorf("reading the binding context: field %q is a JSON %s, which the program's type %s cannot hold (at byte %d)", typ.Field, typ.Value, typ.Type, typ.Offset)
	default:
		return fmt.Errorf("reading the binding context: %w", err)
	}
}

// start quotes the start of input, for a message.
func start(input []byte) string {
	const n = 40
	if len(input) > n {
		return fmt.Sprintf("%q...", input[:n])
	}
	return fmt.Sprintf("%q", input)
}

// The engine's limits on a result (internal/executor.MaxResultBytes,
// internal/jsondepth.Max). Past them the engine fails the run, and in
// mode Serve stops the process (the line is too long), which is
// retried: the SDK answers with a permanent error instead.
const (
	// maxResultBytes bounds a result as written, its newline included.
	maxResultBytes = 1 << 20
	// maxResultDepth bounds the nesting of a result's objects and
	// arrays, the result itself included.
	maxResultDepth = 100
)

// fits says why out, a result, is past the engine's limits, or nil.
func fits(out []byte) error {
	if n := len(out) + 1; n > maxResultBytes {
		return fmt.Errorf("the result is %d bytes with its newline, more than opkit's limit of %d (1 MiB)", n, maxResultBytes)
	}
	if d := depth(out); d > maxResultDepth {
		return fmt.Errorf("the result nests %d objects and arrays deep, more than opkit's limit of %d", d, maxResultDepth)
	}
	return nil
}

// depth is how deeply data, valid JSON, nests objects and arrays.
func depth(data []byte) int {
	deepest, d := 0, 0
	inString := false
	for i := 0; i < len(data); i++ {
		c := data[i]
		if inString {
			switch c {
			case '\\':
				i++ // the escaped byte, a quote included
			case '"':
				inString = false
			}
			continue
		}
		switch c {
		case '"':
			inString = true
		case '{', '[':
			d++
			deepest = max(deepest, d)
		case '}', ']':
			d--
		}
	}
	return deepest
}

// marshal writes v as compact JSON on one line, without escaping <, >
// and & (a message reads as written).
func marshal(v any) ([]byte, error) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(b.Bytes(), []byte("\n")), nil
}

func mustMarshal(v any) []byte {
	b, err := marshal(v)
	if err != nil {
		panic(err) // only our own types come here
	}
	return b
}
