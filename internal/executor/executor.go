// Package executor runs one handler run: it hands the JSON binding context
// to the handler and reads back its JSON result. The executors — exec (a
// local process), http (a POST) and, later, job (a Kubernetes Job) — share
// one contract and know nothing of the engine's queue. Canned, a test
// double, answers with made-up results and runs nothing.
//
// The contract of [Executor.Run]:
//   - The run ends within Request.Timeout; on timeout the handler is
//     stopped (exec: its whole process group is killed).
//   - What the handler logs goes to Request.Log as it comes.
//   - A handler that finished and printed a valid result (or nothing)
//     gives a Result, possibly with Result.Error set by the handler.
//   - Everything else — a non-zero exit, a signal, a timeout, output that
//     is not a result or is too large or too deep — is a *Failure naming
//     what went wrong. A Failure is retried unless Permanent.
//   - An executor built by a Registry never hands a handler a binding
//     context nested deeper than jsondepth.MaxContext: the run is a
//     permanent Failure that says so, and the handler does not start.
package executor

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"math"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"k8s.io/apimachinery/pkg/types"

	"github.com/opkit-dev/opkit/internal/archive"
	"github.com/opkit-dev/opkit/internal/jsondepth"
)

// Request is one run of one handler.
type Request struct {
	RunID   string
	Handler string
	Trigger string
	// Key is the idempotency key, <uid>/<generation>/<handler>.
	Key     string
	Attempt int
	// Object is the custom resource the run is for.
	Object *ObjectRef
	// Input is the binding context, JSON.
	Input []byte
	// Timeout bounds the run.
	Timeout time.Duration
	// Log receives the handler's log. Required.
	Log io.Writer
	// Env, when not nil, is the handler's own environment for this run,
	// NAME=value, in place of Action.Env's: a runner's agent gets it with
	// the run, the engine having read the values from Secrets (and
	// redacting them from what the run shows).
	Env []string
	// OnRunner, when set, is called with the runner's name once a runner
	// claims the run (an exec handler with an image, InImage), in Run's
	// own goroutine, before Run returns: the run's record names it.
	// Executors that run nothing in a runner never call it.
	OnRunner func(runner string)
}

// ObjectRef names the object of a run.
type ObjectRef struct {
	APIVersion, Kind, Namespace, Name string
	UID                               types.UID
}

// Executor runs handlers of one kind.
type Executor interface {
	Run(ctx context.Context, req Request) (*Result, error)
}

// Result is what a handler returns, all of it optional.
type Result struct {
	// Status is merged into the object's .status. opkit's own fields
	// (observedGeneration, conditions, opkit) are refused.
	Status map[string]any `json:"status,omitempty"`
	// Events are posted on the object.
	Events []Event `json:"events,omitempty"`
	// RequeueAfter asks for the handler's trigger to be checked again after
	// this long, e.g. "30s".
	RequeueAfter string `json:"requeueAfter,omitempty"`
	// Error reports a failure the handler detected itself.
	Error *ResultError `json:"error,omitempty"`
	// Skipped says the run found nothing to do (a scheduled check that is
	// not due): it is recorded as Skipped, posts no Event, and replaces the
	// object's previous skipped run of the handler in the archive.
	Skipped bool `json:"skipped,omitempty"`
	// Refuse, in a run on event, turns the delivery down with this reason
	// (a /deploy from someone not allowed to deploy): the run is recorded
	// as Skipped, and the delivery as Handled with the reason "refused by
	// handler <name>: <reason>". Refused in a run of any other trigger.
	Refuse string `json:"refuse,omitempty"`

	// The answer of an admission handler (on validate or mutate), refused
	// in a run of any other trigger.
	//
	// Allowed says whether the request is allowed: required of a validate
	// handler; a mutate handler's defaults to true.
	Allowed *bool `json:"allowed,omitempty"`
	// Message says why a request is denied; kubectl prints it.
	Message string `json:"message,omitempty"`
	// Patch, of a mutate handler, is a JSON merge patch (RFC 7386) of the
	// object: {"spec": {"replicas": 1}} sets a field, null removes one.
	// It may change spec, metadata.labels and metadata.annotations.
	// An empty patch is one (it makes the result an admission answer),
	// and so it is kept when the result is encoded again (a runner's
	// reply, the archive's record).
	Patch map[string]any `json:"patch,omitzero"`
	// Warnings are shown to the client (kubectl prints each), allowed or
	// not.
	Warnings []string `json:"warnings,omitempty"`
}

// Admission reports whether the result holds any field of an admission
// answer.
func (r *Result) Admission() bool {
	return r.Allowed != nil || r.Message != "" || r.Patch != nil || len(r.Warnings) > 0
}

// Event is a Kubernetes Event to post on the object.
type Event struct {
	// Type is Normal or Warning. Defaults to Normal.
	Type    string `json:"type,omitempty"`
	Reason  string `json:"reason"`
	Message string `json:"message"`
}

// ResultError is a failure reported in a result.
type ResultError struct {
	Message string `json:"message"`
	// Permanent: retrying cannot help; the object is Stalled at once.
	Permanent bool `json:"permanent,omitempty"`
}

// Failure is a run that did not produce a valid result. It is retried by
// the handler's policy unless Permanent; what becomes of the run (retry
// after, gave up) is the run's outcome, which the engine decides.
type Failure struct {
	Message string
	// Permanent: retrying cannot help.
	Permanent bool
}

func (f *Failure) Error() string { return f.Message }

// Exit status conventions of exec handlers.
const (
	// ExitTemporary (EX_TEMPFAIL) says: failed, try again later.
	ExitTemporary = 75
)

// exitFailure describes a handler that exited with a non-zero code, having
// written output (its result, if any): a result's error explains the
// failure best; exit status 75 says it is temporary (retried, as any
// failure that is not permanent); otherwise plain.
func exitFailure(code int, output []byte, plain string) *Failure {
	if res, err := ParseResult(output); err == nil && res.Error != nil {
		return &Failure{Message: fmt.Sprintf("exit status %d: %s", code, res.Error.Message), Permanent: res.Error.Permanent}
	}
	if code == ExitTemporary {
		return &Failure{Message: "exit status 75: temporary failure"}
	}
	return &Failure{Message: plain}
}

// MaxResultBytes bounds a result (stdout, a response body).
const MaxResultBytes = 1 << 20

var reservedStatus = []string{"observedGeneration", "conditions", "opkit"}

// ParseResult decodes and checks a result. Empty output is an empty result.
// Unknown fields are refused, to catch misspellings, and so is a result
// nested deeper than jsondepth.Max objects and arrays.
func ParseResult(out []byte) (*Result, error) { return parseResult(out, nil) }

// jsonSpace is the white space JSON allows between its tokens.
const jsonSpace = " \t\r\n"

// parseResult is ParseResult; a refusal quotes the output as redact
// writes it (nil: as it is), before the quote is cut: a secret across the
// cut would otherwise show its start.
func parseResult(out []byte, redact func(string) string) (*Result, error) {
	text := func(b []byte) string {
		if redact != nil {
			return redact(string(b))
		}
		return string(b)
	}
	shown := func(b []byte) string { return excerpt([]byte(text(b))) }
	var r Result
	if len(bytes.TrimSpace(out)) == 0 {
		return &r, nil
	}
	if err := jsondepth.Check(out, jsondepth.Max); err != nil {
		return nil, &Failure{Message: fmt.Sprintf("invalid result: %v; opkit reads a result at most %d deep; output begins %q", err, jsondepth.Max, shown(out))}
	}
	dec := json.NewDecoder(bytes.NewReader(out))
	dec.DisallowUnknownFields()
	dec.UseNumber() // status and patch values: see exactNumbers
	if err := dec.Decode(&r); err != nil {
		if msg := resultFieldError(err, out); msg != "" {
			return nil, &Failure{Message: "invalid result: " + msg + "; output begins " + strconv.Quote(shown(out))}
		}
		return nil, &Failure{Message: fmt.Sprintf("output is not a JSON result: %v; output begins %q", err, shown(out))}
	}
	// Nothing but JSON's space may follow the result: not a second value,
	// nor a stray bracket (which Decoder.More does not see), nor another
	// space (a vertical tab: one JSON value is what json.Valid says).
	if rest := bytes.Trim(out[dec.InputOffset():], jsonSpace); len(rest) > 0 {
		if _, err := dec.Token(); err == nil {
			return nil, &Failure{Message: fmt.Sprintf("output has more than one JSON value; output begins %q", shown(out))}
		}
		return nil, &Failure{Message: fmt.Sprintf("output has %q after its JSON result, at byte %d: a result is one JSON value; output begins %q", short(text(rest)), len(out)-len(bytes.TrimLeft(out[dec.InputOffset():], jsonSpace)), shown(out))}
	}
	var problems []string
	for _, f := range []struct {
		name string
		m    map[string]any
	}{{"status", r.Status}, {"patch", r.Patch}} {
		if err := exactNumbers(f.m, f.name); err != nil {
			problems = append(problems, err.Error())
		}
	}
	for _, k := range reservedStatus {
		if _, ok := r.Status[k]; ok {
			problems = append(problems, fmt.Sprintf("status.%s is written by opkit and cannot be set by a handler", k))
		}
	}
	for i, e := range r.Events {
		if e.Type == "" {
			r.Events[i].Type = "Normal"
		}
		if e.Type != "" && e.Type != "Normal" && e.Type != "Warning" {
			problems = append(problems, fmt.Sprintf("events[%d].type %q is not Normal or Warning", i, short(e.Type)))
		}
		if e.Reason == "" {
			problems = append(problems, fmt.Sprintf("events[%d].reason is required", i))
		}
	}
	if r.RequeueAfter != "" {
		if d, err := time.ParseDuration(r.RequeueAfter); err != nil || d <= 0 {
			problems = append(problems, fmt.Sprintf("requeueAfter %q is not a positive duration such as 30s", short(r.RequeueAfter)))
		}
	}
	if r.Error != nil && r.Error.Message == "" {
		problems = append(problems, "error.message is required")
	}
	if len(problems) > maxProblems {
		problems = append(problems[:maxProblems], fmt.Sprintf("and %d more", len(problems)-maxProblems))
	}
	if len(problems) > 0 {
		return nil, &Failure{Message: "invalid result: " + strings.Join(problems, "; ")}
	}
	return &r, nil
}

// exactNumbers replaces, in place, each number of v (read as
// json.Number) by an int64 when its value is an integer that fits one
// (written 1000, 1e3 or 1000.0 alike: JSON writes it back 1000), and by
// a float64 otherwise, as the API server's own decoding reads them: an
// integer above 2^53 a handler writes into the status reaches the object
// as written, not rounded to the nearest float64. A number no float64
// holds (1e400) is an error naming where it is, the first in key order.
func exactNumbers(v any, at string) error {
	switch x := v.(type) {
	case map[string]any:
		for _, k := range slices.Sorted(maps.Keys(x)) {
			if err := exactNumber(x[k], at+"."+k, func(n any) { x[k] = n }); err != nil {
				return err
			}
		}
	case []any:
		for i, e := range x {
			if err := exactNumber(e, fmt.Sprintf("%s[%d]", at, i), func(n any) { x[i] = n }); err != nil {
				return err
			}
		}
	}
	return nil
}

// exactNumber sets a number e, at at, as exactNumbers reads it, or walks
// into it.
func exactNumber(e any, at string, set func(any)) error {
	n, ok := e.(json.Number)
	if !ok {
		return exactNumbers(e, at)
	}
	if i, ok := exactInt(n.String()); ok {
		set(i)
		return nil
	}
	f, err := n.Float64()
	if err != nil || math.IsInf(f, 0) {
		return fmt.Errorf("%q: the number %s is out of range", short(at), short(n.String()))
	}
	if f == math.Trunc(f) && f >= math.MinInt64 && f < math.MaxInt64 {
		set(int64(f)) // an integer only once rounded (-0 too): as JSON writes it back
		return nil
	}
	set(f)
	return nil
}

// exactInt is the JSON number s when its value is an integer that fits
// an int64, read from its digits (never through a float64): 1e3,
// 1000.0 and 10000e-1 are 1000.
func exactInt(s string) (int64, bool) {
	if i, err := strconv.ParseInt(s, 10, 64); err == nil {
		return i, true
	}
	mant, exp := s, 0
	if k := strings.IndexAny(s, "eE"); k >= 0 {
		e, err := strconv.Atoi(s[k+1:])
		if err != nil || e > 40 || e < -40-len(s) {
			return 0, false // far outside an int64's reach (or ill-formed)
		}
		mant, exp = s[:k], e
	}
	sign := ""
	if strings.HasPrefix(mant, "-") {
		sign, mant = "-", mant[1:]
	}
	digits := mant
	if k := strings.IndexByte(mant, '.'); k >= 0 {
		digits = mant[:k] + mant[k+1:]
		exp -= len(mant) - k - 1
	}
	if exp < 0 {
		cut := len(digits) + exp
		if cut < 0 || strings.Trim(digits[max(cut, 0):], "0") != "" {
			return 0, false // a fraction is left
		}
		digits = digits[:cut]
	} else {
		digits += strings.Repeat("0", exp)
	}
	digits = strings.TrimLeft(digits, "0")
	if digits == "" {
		return 0, true // -0 too
	}
	i, err := strconv.ParseInt(sign+digits, 10, 64)
	return i, err == nil
}

// maxProblems is how many of a result's problems its refusal names: a
// person reads the first, whatever the handler wrote.
const maxProblems = 10

// short is s, or its start when it is longer than what a message quotes
// of a value.
func short(s string) string {
	if len(s) <= 100 {
		return s
	}
	return cutRunes(s, 100) + "..."
}

// cutRunes is the start of s, at most n bytes, not cutting a character.
func cutRunes(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}

// resultFields says what each field of a result holds, for the messages of
// a result that has a field of the wrong type.
var resultFields = map[string]string{
	"status":          `an object of status fields, e.g. "status": {"phase": "done"}`,
	"events":          `a list of events, e.g. "events": [{"reason": "Done", "message": "backed up"}]`,
	"events.type":     `a string, Normal or Warning`,
	"events.reason":   `a string, e.g. "Done"`,
	"events.message":  `a string`,
	"requeueAfter":    `a duration as a string, e.g. "requeueAfter": "30s"`,
	"error":           `an object, e.g. "error": {"message": "quota exceeded", "permanent": false}`,
	"error.message":   `a string`,
	"error.permanent": `true or false`,
	"skipped":         `true or false`,
	"refuse":          `a string`,
	"allowed":         `true or false`,
	"message":         `a string`,
	"patch":           `a JSON merge patch of the object, e.g. "patch": {"spec": {"replicas": 1}}`,
	"warnings":        `a list of strings`,
}

var unknownResultField = regexp.MustCompile(`^json: unknown field (".*")$`)

// resultFieldError says in plain words which field of a result is wrong
// and what it should hold; "" when err is not about one field. out is
// the result, to find where an unknown field is.
func resultFieldError(err error, out []byte) string {
	if te, ok := errors.AsType[*json.UnmarshalTypeError](err); ok && te.Field != "" {
		if n, ok := strings.CutPrefix(te.Value, "number "); ok {
			// A number that fits no float64 (1e400): the field holds
			// the right kind, the number is out of range.
			return fmt.Sprintf("field %q: the number %s is out of range (a result's numbers are 64-bit floats, up to about 1.8e308)", te.Field, short(n))
		}
		want := resultFields[te.Field]
		if want == "" {
			want = "another type"
		}
		return fmt.Sprintf("field %q: expected %s, got %s", te.Field, want, jsonKind(te.Value))
	}
	if m := unknownResultField.FindStringSubmatch(err.Error()); m != nil {
		name, uerr := strconv.Unquote(m[1])
		if uerr != nil {
			name = m[1]
		}
		switch where := unknownFieldIn(out, name); where {
		case "error":
			return fmt.Sprintf("unknown field %q in error: an error has message and permanent", short(name))
		case "":
			return fmt.Sprintf("unknown field %q: a result has status, events, requeueAfter, skipped and error (see docs/handlers.md); an admission handler's has allowed, message, patch and warnings (docs/admission.md)", short(name))
		default:
			return fmt.Sprintf("unknown field %q in %s: an event has type, reason and message", short(name), where)
		}
	}
	return ""
}

// unknownFieldIn says where out has the field name that a result does
// not: "" at the top, "error", or "events[i]".
func unknownFieldIn(out []byte, name string) string {
	var top struct {
		Events []map[string]json.RawMessage `json:"events"`
		Error  map[string]json.RawMessage   `json:"error"`
	}
	var fields map[string]json.RawMessage
	if json.Unmarshal(out, &fields) != nil {
		return ""
	}
	if _, ok := fields[name]; ok {
		return ""
	}
	// What is unknown is below: where, when the rest is as it should be.
	_ = json.Unmarshal(out, &top)
	if _, ok := top.Error[name]; ok {
		return "error"
	}
	for i, e := range top.Events {
		if _, ok := e[name]; ok {
			return fmt.Sprintf("events[%d]", i)
		}
	}
	return ""
}

// jsonKind names a JSON value kind as encoding/json reports it.
func jsonKind(v string) string {
	switch v {
	case "object", "array":
		return "an " + v
	case "number", "string":
		return "a " + v
	case "bool":
		return "true or false"
	}
	return v
}

// RequeueDuration returns RequeueAfter parsed, or 0.
func (r *Result) RequeueDuration() time.Duration {
	d, _ := time.ParseDuration(r.RequeueAfter)
	return d
}

func excerpt(b []byte) string {
	if len(b) > 200 {
		return string(b[:200]) + "..."
	}
	return string(b)
}

// AsFailure returns err as a *Failure, wrapping other errors as plain
// failures.
func AsFailure(err error) *Failure {
	var f *Failure
	if errors.As(err, &f) {
		return f
	}
	return &Failure{Message: err.Error()}
}

// tailWriter passes what is written on to w, when there is one, and keeps
// the last bytes of it: the end of a failed handler's stderr says why.
type tailWriter struct {
	w    io.Writer
	tail []byte
}

// tailBytes is how much of its log (stderr, or a pod's log) a tailWriter keeps.
const tailBytes = 1024

func (t *tailWriter) Write(p []byte) (int, error) {
	t.tail = append(t.tail, p...)
	if len(t.tail) > tailBytes {
		t.tail = append(t.tail[:0], t.tail[len(t.tail)-tailBytes:]...)
	}
	if t.w == nil {
		return len(p), nil
	}
	return t.w.Write(p)
}

// lastLine is the last line written with something in it, without
// control sequences, at most 200 bytes.
func (t *tailWriter) lastLine() string {
	lines := strings.Split(strings.ReplaceAll(string(t.tail), "\r", "\n"), "\n")
	for i := len(lines) - 1; i >= 0; i-- {
		line := strings.ToValidUTF8(strings.TrimSpace(archive.CleanLog([]byte(lines[i]))), "\uFFFD")
		if line == "" {
			continue
		}
		if len(line) > 200 {
			line = cutRunes(line, 197) + "..."
		}
		return line
	}
	return ""
}

// limitedBuffer keeps up to limit bytes and remembers whether more came.
type limitedBuffer struct {
	buf      bytes.Buffer
	limit    int
	overflow bool
	onFull   func()
}

func (b *limitedBuffer) Write(p []byte) (int, error) {
	if room := b.limit - b.buf.Len(); len(p) > room {
		b.buf.Write(p[:max(room, 0)])
		if !b.overflow && b.onFull != nil {
			b.onFull()
		}
		b.overflow = true
		return len(p), nil
	}
	return b.buf.Write(p)
}

// secrets are values a run must not show: wherever the handler writes
// one, opkit writes *** instead.
type secrets []string

// redact replaces each value in text.
func (h secrets) redact(text string) string {
	for _, v := range h {
		if v != "" {
			text = strings.ReplaceAll(text, v, "***")
		}
	}
	return text
}

// parseResult is ParseResult of output that may hold the values: a
// refusal quotes the output with them written as *** before the quote is
// cut, so that a value across the cut shows no start of it either.
func (h secrets) parseResult(out []byte) (*Result, error) {
	if h.longest() == 0 {
		return ParseResult(out)
	}
	return parseResult(out, h.redactMessage)
}

// excerpt is the start of b as a run shows it, the values written as ***
// before it is cut.
func (h secrets) excerpt(b []byte) string {
	if h.longest() == 0 {
		return excerpt(b)
	}
	return excerpt([]byte(h.redactMessage(string(b))))
}

// longest is the length of the longest value.
func (h secrets) longest() int {
	n := 0
	for _, v := range h {
		n = max(n, len(v))
	}
	return n
}

// redactMessage replaces each value in a failure's message, also as Go
// quotes it: a message quotes the start of the output (ParseResult), and
// a value with a quote, a backslash or a control character shows so.
func (h secrets) redactMessage(text string) string {
	text = h.redact(text)
	for _, v := range h {
		if q := strconv.Quote(v); v != "" && q[1:len(q)-1] != v {
			text = strings.ReplaceAll(text, q[1:len(q)-1], "***")
		}
	}
	return text
}

// redactResult replaces the values in what a run returns: its failure's
// message, and the strings of its result (status, its keys included,
// Events, error, a delivery's refusal, and an admission answer's
// message, warnings and patch), which go to the object, its Events, the
// API server's client and the archive.
func (h secrets) redactResult(res *Result, err error) (*Result, error) {
	if h.longest() == 0 {
		return res, err
	}
	var f *Failure
	if errors.As(err, &f) {
		f.Message = h.redactMessage(f.Message)
	}
	if res == nil {
		return res, err
	}
	var walk func(v any) any
	walk = func(v any) any {
		switch v := v.(type) {
		case string:
			return h.redact(v)
		case map[string]any:
			return h.redactMap(v, walk)
		case []any:
			for i, e := range v {
				v[i] = walk(e)
			}
		}
		return v
	}
	res.Status = h.redactMap(res.Status, walk)
	for i := range res.Events {
		res.Events[i].Reason, res.Events[i].Message = h.redact(res.Events[i].Reason), h.redact(res.Events[i].Message)
	}
	if res.Error != nil {
		res.Error.Message = h.redact(res.Error.Message)
	}
	// A delivery's refusal is its Handled reason, and the archive's.
	res.Refuse = h.redact(res.Refuse)
	// An admission answer goes to the client and the archive alike.
	res.Message = h.redact(res.Message)
	for i, w := range res.Warnings {
		res.Warnings[i] = h.redact(w)
	}
	res.Patch = h.redactMap(res.Patch, walk)
	return res, err
}

// redactMap is m with its keys redacted and its values walked: a key is
// written to the object as a value is. Keys that become one keep the
// value of the last in order, whatever the map's order. A nil map stays
// nil.
func (h secrets) redactMap(m map[string]any, walk func(any) any) map[string]any {
	if m == nil {
		return nil
	}
	out := make(map[string]any, len(m))
	for _, k := range slices.Sorted(maps.Keys(m)) {
		out[h.redact(k)] = walk(m[k])
	}
	return out
}

// redactor passes a log on with hidden's values replaced. The end of a
// write that could be the start of a value is kept back until the next
// write, or Flush, so that a value split across writes is replaced too.
type redactor struct {
	w       io.Writer
	hidden  secrets
	pending []byte
}

func (r *redactor) Write(p []byte) (int, error) {
	hold := r.hidden.longest() - 1 // the most of a value a write can end with
	if hold < 0 {
		return r.w.Write(p)
	}
	r.pending = []byte(r.hidden.redact(string(append(r.pending, p...))))
	if cut := len(r.pending) - hold; cut > 0 {
		if _, err := r.w.Write(r.pending[:cut]); err != nil {
			return 0, err
		}
		r.pending = r.pending[cut:]
	}
	return len(p), nil
}

// Flush writes what was kept back.
func (r *redactor) Flush() {
	if len(r.pending) > 0 {
		_, _ = r.w.Write(r.pending)
		r.pending = nil
	}
}

// namespaceOr is ns, or the object's namespace when ns is "".
func (r Request) namespaceOr(ns string) string {
	if ns == "" && r.Object != nil {
		return r.Object.Namespace
	}
	return ns
}
