// Package archive keeps the record of every handler run: what triggered it,
// the change that caused it, its attempt, outcome, error and logs, so that a
// failure can be found and understood after the fact. It also keeps, as
// [HandlerRecord] records, what an operator remembers of the things it reacts to
// but does not own (a watched object, an operator-wide schedule), which it
// may not write to; and, as [Delivery] records, every webhook delivery an
// operator received, accepted or refused, and what its handling caused.
//
// A [Store] holds [Run] records, their logs, handler records and Delivery
// records. [OpenSQLite] is the embedded store: one file, WAL mode, a
// pure-Go driver. [OpenPostgres] is the shared one: a PostgreSQL database
// that several engines (a leader and its standbys), the console and the
// CLI use at once. [Open] chooses from the location: a postgres:// URL or
// a file's path. Every Store passes the conformance suite in
// archive/archivetest. A Store is two sides: an engine depends on its
// [Recorder], the console and the CLI on its [Reader]. Every archived run,
// whoever makes it (the runner, an admission call, a transition, a
// person's request), starts from [NewRun]; one recorded at once, with its
// log, is kept with [Keep].
//
// Contracts of every Store:
//   - Run ids ([NewID]) sort by start time; [Store.List] returns newest
//     first, a page at a time, with an opaque cursor for the next page.
//   - Logs are capped per run ([Options.LogLimit]): a longer log keeps its
//     head ([Options.LogHead]) and its tail, the rest of the limit; its
//     middle is dropped and the run is marked LogTruncated. Log offsets
//     are offsets in the stream the handler wrote, so a reader that
//     follows a log as it grows loses nothing but what was cut, and
//     [Store.Logs] marks each cut with a [CutMarker] line.
//   - A run finished as Skipped (it found nothing to do) replaces the
//     earlier Skipped runs of the same object (UID) and handler: a check
//     that is not due keeps one record, not one per tick.
//   - A run still Running when its engine stopped is ended by
//     [Store.CancelRunning] as Cancelled.
//   - Retention ([Store.Prune]) deletes finished runs by age and count,
//     with their logs; running runs are never pruned. It deletes
//     deliveries by the same age and count, counted apart from runs;
//     Pending deliveries are never pruned.
//   - handler records are one per operator and key, replaced whole by
//     [HandlerRecordStore.PutState], their Data kept byte for byte. They are not
//     runs: neither retention nor CancelRunning touches them; only
//     [HandlerRecordStore.DeleteState] removes one, when the engine forgets the
//     thing it stands for.
//   - A Pending delivery ([DeliveryStore.RecordDelivery]) is durable when
//     the call returns, a crash of the machine included: its sender is
//     acknowledged only then. It stays Pending, across restarts and
//     CancelRunning, until [DeliveryStore.FinishDelivery] records it
//     Handled or Failed; [DeliveryStore.PendingDeliveries] is what an
//     engine that starts handles.
//   - A delivery's idempotency key is (operator, source, sender's
//     delivery id): of the deliveries with one key, one only is
//     accepted, under any concurrency; the others are refused with
//     [ErrDuplicateDelivery] and stored by the caller as Refused. Refused
//     records never conflict. A key is remembered as long as its record
//     is kept.
//   - A source cursor ([CursorStore.SetCursor]) is one per operator and
//     source, replaced whole; like a State record, neither retention nor
//     CancelRunning touches it. It is where a consumer whose source keeps
//     no position (a GitHub poll) goes on from after a restart.
//   - A refused delivery's payload is capped ([Options.PayloadLimit]): a
//     longer one keeps its start and is marked PayloadTruncated, with its
//     whole size in PayloadBytes. An accepted one is kept whole, for its
//     handling.
//   - A run's binding context (Run.Input) and result (Run.Result) are
//     kept with it, for opkit rerun --same-input and opkit replay (the
//     engine gives neither when it is over 256 KiB); Get
//     returns them and the ids of the run's re-runs (Run.Reruns), List
//     neither.
//   - The archive stores what it is given: the engine gives it the
//     binding context as handlers get it, with the data of Secrets
//     (children, related objects) already dropped, never a value from a
//     Secret (a handler's env from secretKeyRef is not in it), and
//     redacts the credentials of a delivery's headers before recording it. A
//     payload is the sender's event, kept as received for its handling;
//     what shows it redacts its secrets and tokens ([RedactPayload]).
package archive

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/opkit-dev/opkit/api/v1alpha1"
	"github.com/opkit-dev/opkit/internal/jsondepth"
)

// Outcome is how a run ended.
type Outcome string

// Outcomes. A Failed run is retried (NextRetryAt says when); GaveUp is a
// failed run after which no retry comes: the last attempt, or a permanent
// error.
const (
	Running   Outcome = "Running"
	Succeeded Outcome = "Succeeded"
	Failed    Outcome = "Failed"
	GaveUp    Outcome = "GaveUp"
	Cancelled Outcome = "Cancelled"
	// Skipped: the handler ran and found nothing to do.
	Skipped Outcome = "Skipped"
	// Allowed and Denied are the answers of an admission handler (on
	// validate or mutate) to the API server; its Error says why one was
	// denied. An admission handler that gave no answer (it failed, or
	// hung past its timeout) is Failed, with no retry, and its Error says
	// what its failure policy answered instead.
	Allowed Outcome = "Allowed"
	Denied  Outcome = "Denied"
)

// Failure reports whether the outcome is a failure (Failed or GaveUp).
func (o Outcome) Failure() bool { return o == Failed || o == GaveUp }

// Change is one changed field between the last handled spec and the
// current one.
type Change struct {
	// Op is add, remove or change.
	Op string `json:"op"`
	// Path is the dotted path, e.g. spec.replicas.
	Path string `json:"path"`
	Old  any    `json:"old,omitempty"`
	New  any    `json:"new,omitempty"`
}

// Run is one execution of one handler for one object.
type Run struct {
	ID       string `json:"id"`
	Operator string `json:"operator"`
	Handler  string `json:"handler"`
	// Action is the executor: exec, job or http.
	Action string `json:"action"`
	// Trigger is create, update, delete, resume, schedule, when, event,
	// requeue, or validate or mutate (an admission call).
	Trigger string `json:"trigger"`
	// APIVersion and Kind are the object's.
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Namespace  string `json:"namespace,omitempty"`
	Name       string `json:"name"`
	UID        string `json:"uid"`
	Generation int64  `json:"generation"`
	// Key is the idempotency key, <uid>/<generation>/<handler>.
	Key     string   `json:"key"`
	Attempt int      `json:"attempt"`
	Diff    []Change `json:"diff,omitempty"`
	// Actor is the person whose decision caused the run: a state
	// transition chosen with opkit decide or the console; "" otherwise.
	Actor string `json:"actor,omitempty"`
	// Runner is the runner that ran the run (its Pod's name): an exec
	// handler with exec.image, in a cluster; "" for every other run, and
	// until a runner claims it ([Recorder.SetRunner]).
	Runner string `json:"runner,omitempty"`
	// RerunOf is the run a re-run repeats (trigger rerun, asked with
	// opkit rerun or the console's Run again); "" for every other run.
	// Actor is then the person who asked, and Reason why.
	RerunOf string `json:"rerunOf,omitempty"`
	Reason  string `json:"reason,omitempty"`
	// Reruns are the ids of the re-runs of this run, oldest first: set by
	// [Reader.Get] only, never by List.
	Reruns []string `json:"reruns,omitempty"`
	// Input is the binding context the handler got (JSON, Secrets
	// redacted: see the package doc), and Result what it answered (JSON;
	// empty when it answered nothing or failed without a result). Both
	// are set by [Reader.Get] only, never by List: they are large.
	Input  json.RawMessage `json:"input,omitempty"`
	Result json.RawMessage `json:"result,omitempty"`

	StartedAt  time.Time `json:"startedAt"`
	FinishedAt time.Time `json:"finishedAt,omitzero"`
	Outcome    Outcome   `json:"outcome"`
	Error      string    `json:"error,omitempty"`
	// NextRetryAt is when a Failed run is tried again.
	NextRetryAt time.Time `json:"nextRetryAt,omitzero"`
	// Writes are the API writes the result made (a status patch, events).
	Writes []string `json:"writes,omitempty"`

	// LogBytes is the size of the log the handler wrote; what is kept is
	// at most the archive's LogLimit.
	LogBytes     int64 `json:"logBytes"`
	LogTruncated bool  `json:"logTruncated,omitempty"`

	// Trace is the W3C traceparent of the run's span (package tracing):
	// its trace id finds the run in a tracing backend. "" for a run
	// recorded before opkit traced runs.
	Trace string `json:"trace,omitempty"`

	// LogTail is the end of the run's log, which the engine holds until
	// the run's end is recorded: Finish appends it, as AppendLog would,
	// in the same transaction as the end, so that a short run's log costs
	// no write of its own, and a refused end keeps its log with it. Never
	// read back: the log is read with Logs.
	LogTail []byte `json:"-"`

	// Record is a handler record (a watched object's state) that Insert
	// and Finish write, as PutHandlerRecord would, in the same
	// transaction as the run's start or end: the state a run's start
	// depends on is never recorded without the run, nor the run without
	// it, and neither costs a commit of its own. Finish writes it whenever
	// it succeeds, also when a later end was recorded before. It replaces
	// a stored record no later than itself (UpdatedAt), never a later one:
	// a run's start waits for a slot, and its object's record may have
	// been written again meanwhile. Never read back: records are read
	// with HandlerRecords.
	Record *HandlerRecord `json:"-"`
}

// Object returns namespace/name, or the name of a cluster-scoped object.
func (r *Run) Object() string {
	if r.Namespace == "" {
		return r.Name
	}
	return r.Namespace + "/" + r.Name
}

// Transition returns the states a run left and entered, for the record
// of a state transition (handler v1alpha1.TransitionHandler, its diff
// status.state.name from -> to); ok is false for any other run. from is
// "" for an object's initial state.
func (r *Run) Transition() (from, to string, ok bool) {
	if r.Handler != v1alpha1.TransitionHandler {
		return "", "", false
	}
	for _, c := range r.Diff {
		if c.Path == "status.state.name" {
			from, _ = c.Old.(string)
			to, _ = c.New.(string)
		}
	}
	return from, to, true
}

// Row is how a run reads in a table of runs (opkit runs, kubectl get
// runs): its handler, a state transition's as the states it left and
// entered; its duration, "-" while it runs; and a note: its error on one
// line, cut at 80 characters, or who decided a transition, or which run
// a re-run repeats and who asked.
func (r *Run) Row() (handler, duration, note string) {
	duration = "-"
	if !r.FinishedAt.IsZero() {
		duration = r.FinishedAt.Sub(r.StartedAt).Round(time.Millisecond).String()
	}
	note = strings.ReplaceAll(r.Error, "\n", " ")
	if len(note) > 80 {
		note = note[:77] + "..."
	}
	handler = r.Handler
	if from, to, ok := r.Transition(); ok {
		handler = "state " + cmp.Or(from, "-") + " -> " + to
		if r.Actor != "" {
			note = "decided by " + r.Actor
		}
	}
	if r.RerunOf != "" && note == "" {
		note = "re-run of " + r.RerunOf + " by " + cmp.Or(r.Actor, "-")
	}
	return handler, duration, note
}

// RerunRefusal says why r cannot be run again (opkit rerun, the
// console's Run again) from its record alone, with sameInput when the
// re-run is to get the recorded binding context; "" when its record
// allows it. What the record cannot tell (is its object still there, is
// its handler still defined) the asker and the engine check.
func (r *Run) RerunRefusal(sameInput bool) string {
	switch {
	case r.Kind == v1alpha1.Kind && r.APIVersion == v1alpha1.SchemeGroupVersion.String():
		other := "opkit schedule run " + r.Operator + " " + r.Handler
		if r.Trigger == v1alpha1.OnEvent {
			other = "opkit events redeliver ID (opkit events --operator " + r.Operator + " lists the deliveries)"
		}
		return fmt.Sprintf("run %s is operator %s's own (trigger %s), for no object: a re-run runs a handler again for an object; run this one again with %s", r.ID, r.Operator, r.Trigger, other)
	case r.Outcome == Running:
		return fmt.Sprintf("run %s is still running: wait for its end (opkit logs -f %s), then run it again", r.ID, r.ID)
	case r.Handler == v1alpha1.TransitionHandler:
		return fmt.Sprintf("run %s is the record of a state transition, not a handler's run: nothing runs again", r.ID)
	case r.Trigger == v1alpha1.OnValidate || r.Trigger == v1alpha1.OnMutate:
		return fmt.Sprintf("run %s answered an admission request of the API server (%s), which cannot be asked again: apply the object again instead", r.ID, r.Trigger)
	case sameInput && len(r.Input) == 0:
		return fmt.Sprintf("run %s has no recorded binding context (an earlier opkit did not keep it, or it was larger than the 256 KiB a run's record keeps): run it again with the object as it is now, without the same input", r.ID)
	}
	return ""
}

// Query selects runs. Zero fields do not filter.
type Query struct {
	Operator  string
	Handler   string
	Namespace string
	// NoNamespace selects the runs whose object has no namespace: those
	// of cluster-scoped objects and of operator-wide schedules (kind
	// Operator). Namespace must then be empty.
	NoNamespace bool
	Name        string
	UID         string
	// Kind is the object's kind, matched exactly (Deployment); the runs of
	// an operator-wide schedule have the kind Operator.
	Kind string
	// Trigger is the run's trigger (Run.Trigger), e.g. schedule.
	Trigger string
	Outcome Outcome
	// Failed selects Failed and GaveUp runs.
	Failed bool
	// Since and Until bound the start time.
	Since, Until time.Time
	// Limit is the page size: defaults to 50, at most 1000.
	Limit int
	// Cursor is Page.Next of the previous page.
	Cursor string
}

// ListAll returns every run q selects, newest first, reading r's pages of
// up to 1,000 (q's Limit and Cursor are ignored).
func ListAll(ctx context.Context, r interface {
	List(context.Context, Query) (*Page, error)
}, q Query) ([]Run, error) {
	q.Limit, q.Cursor = 1000, ""
	var runs []Run
	for {
		page, err := r.List(ctx, q)
		if err != nil {
			return nil, err
		}
		runs = append(runs, page.Runs...)
		if page.Next == "" {
			return runs, nil
		}
		q.Cursor = page.Next
	}
}

// Page is one page of runs, newest first.
type Page struct {
	Runs []Run `json:"runs"`
	// Next is the cursor of the next page; empty on the last.
	Next string `json:"next,omitempty"`
}

// HandlerRecord is what an operator records of one thing it reacts to but does
// not own: a watched object (Key is its uid), or an operator-wide schedule
// (Key names it, e.g. "schedule/<handler>"). Data is the engine's, opaque
// to the archive (JSON).
type HandlerRecord struct {
	Operator string `json:"operator"`
	Key      string `json:"key"`
	// APIVersion, Kind, Namespace and Name are the watched object's, for
	// people reading the record; empty for a schedule.
	APIVersion string `json:"apiVersion,omitempty"`
	Kind       string `json:"kind,omitempty"`
	Namespace  string `json:"namespace,omitempty"`
	Name       string `json:"name,omitempty"`
	Data       []byte `json:"data"`
	// UpdatedAt is when the engine last wrote the record.
	UpdatedAt time.Time `json:"updatedAt"`
}

// Counts counts one operator's runs over a period.
type Counts struct {
	Runs   int `json:"runs"`
	Failed int `json:"failed"`
}

// Retention bounds what Prune keeps. Zero fields do not bound. Runs and
// webhook deliveries are counted apart: each kind keeps its MaxRuns
// newest, so that a flood of deliveries never pushes runs out of the
// archive, nor a busy operator's runs its deliveries.
type Retention struct {
	// MaxAge is the age past which finished runs and handled or refused
	// deliveries are deleted.
	MaxAge time.Duration
	// MaxRuns is how many runs are kept, and, counted apart, how many
	// refused deliveries and how many accepted ones (Pending ones and
	// those newer count; Pending ones are never deleted): refused
	// deliveries never push out the accepted ones, whose records
	// recognise replays.
	MaxRuns int
}

// Options configures a store.
type Options struct {
	// LogLimit caps the logs kept per run. Defaults to 1 MiB.
	LogLimit int64
	// LogHead is how much of the start of a log longer than LogLimit is
	// kept; the rest of LogLimit keeps its end. Defaults to a quarter of
	// LogLimit.
	LogHead int64
	// PayloadLimit caps the payload kept per refused webhook delivery: a
	// longer one keeps its start. Defaults to 256 KiB.
	PayloadLimit int64
	// CheckEvery is how often the archive checks that its file is still
	// the one open (see SQLite.Check). Defaults to 2s.
	CheckEvery time.Duration
	// Log reports each change of the archive's health, one line each.
	// Defaults to standard error.
	Log func(line string)
}

// withDefaults fills the options left out.
func (o Options) withDefaults() Options {
	if o.LogLimit <= 0 {
		o.LogLimit = DefaultLogLimit
	}
	if o.LogHead <= 0 || o.LogHead > o.LogLimit {
		o.LogHead = o.LogLimit / 4
	}
	if o.PayloadLimit <= 0 {
		o.PayloadLimit = DefaultPayloadLimit
	}
	if o.CheckEvery <= 0 {
		o.CheckEvery = 2 * time.Second
	}
	if o.Log == nil {
		o.Log = func(line string) { fmt.Fprintln(os.Stderr, "opkit: "+line) }
	}
	return o
}

// DefaultLogLimit is the default per-run log cap.
const DefaultLogLimit = 1 << 20

// Log is a piece of a run's log.
type Log struct {
	// Data is the log from the offset asked for to the end of what is
	// stored, with a CutMarker line where a part was cut.
	Data []byte
	// Next is the offset to read the rest from, as it comes.
	Next int64
	// Truncated says the log lost a part (its middle) to the limit.
	Truncated bool
}

// CutMarker is the line that stands in a log for n bytes cut from it. It
// starts on a line of its own.
func CutMarker(n int64) string {
	return fmt.Sprintf("\n[opkit: %s of this log cut here; the archive keeps a long log's start and end]\n", HumanBytes(n))
}

// HumanBytes is n in B, KiB or MiB, for people.
func HumanBytes(n int64) string {
	switch {
	case n < 1<<10:
		return fmt.Sprintf("%d B", n)
	case n < 1<<20:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	default:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	}
}

// ErrNotFound is returned for an unknown run or delivery id.
var ErrNotFound = errors.New("not found")

// HandlerRecordStore keeps handler records. Its methods are safe for concurrent
// use.
type HandlerRecordStore interface {
	// HandlerRecords returns every handler record of an operator, ordered by Key;
	// none is an empty slice.
	HandlerRecords(ctx context.Context, operator string) ([]HandlerRecord, error)
	// PutHandlerRecord inserts the record (s.Operator, s.Key), or replaces it
	// whole. Both must be set. UpdatedAt is the caller's; a zero one is
	// stored as the time of the call.
	PutHandlerRecord(ctx context.Context, s *HandlerRecord) error
	// DeleteHandlerRecord deletes a record; one that is absent is no error.
	DeleteHandlerRecord(ctx context.Context, operator, key string) error
}

// Store is a run archive, and the handler records and the Delivery records kept beside
// the runs: what an engine records and what the console and the CLI read.
// Its methods are safe for concurrent use.
type Store interface {
	Recorder
	Reader
}

// Recorder is the archive as an engine uses it: the runs, logs, states
// and deliveries it records, and the few reads its decisions need (has a
// key succeeded, which deliveries wait, the runs of a delivery). An
// engine depends on nothing else. Its methods are safe for concurrent
// use.
type Recorder interface {
	// Insert records a new run. r.ID must be set (NewID).
	Insert(ctx context.Context, r *Run) error
	// Finish records how a run ended: FinishedAt, Outcome, Error,
	// NextRetryAt, Writes and Result, and Runner when it is set (an empty one
	// keeps what SetRunner recorded), and appends LogTail to its log, all
	// in one transaction. A Skipped run replaces the object's earlier
	// Skipped runs of the handler. An end that is not later (FinishedAt)
	// than the one recorded changes none of the run's fields and is no
	// error: the same end again (a write retried whose commit went
	// through) appends its tail once, and an older one kept for a retry
	// does not undo a newer one (its LogTail is still appended); a
	// Cancelled end (written for a run found Running) is replaced by any.
	// An unknown run is ErrNotFound.
	Finish(ctx context.Context, r *Run) error
	// SetRunner records the runner that claimed a running run (Run.Runner),
	// so that a run in flight names it. An unknown run is ErrNotFound.
	SetRunner(ctx context.Context, id, runner string) error
	// AppendLog adds to a run's log, up to the cap.
	AppendLog(ctx context.Context, id string, p []byte) error
	// Get returns one run, or ErrNotFound: the run a re-run repeats.
	Get(ctx context.Context, id string) (*Run, error)
	// Succeeded reports whether a run with this idempotency key succeeded.
	Succeeded(ctx context.Context, key string) (bool, error)
	// SucceededRun returns the latest run with this idempotency key that
	// succeeded, result included, or nil when none did: an engine that
	// finds a run succeeded before a crash kept it from applying its
	// result applies the recorded one.
	SucceededRun(ctx context.Context, key string) (*Run, error)
	// List returns the runs q selects, newest first.
	List(ctx context.Context, q Query) (*Page, error)
	// CancelRunning ends every Running run as Cancelled with reason, and
	// returns how many: those of every engine using the store, so only
	// the acting engine calls it (a leader, never a standby).
	CancelRunning(ctx context.Context, reason string) (int, error)
	// Prune deletes finished runs, and deliveries that are not Pending,
	// beyond the retention, and returns how many records (runs and
	// deliveries). A store shared by several engines prunes for one at a
	// time; the others' calls return 0.
	Prune(ctx context.Context, keep Retention) (int, error)
	HandlerRecordStore
	DeliveryRecorder
	CursorStore
}

// Reader is the archive as the console and the CLI read it: runs and
// their logs, states and deliveries; they never write. Its methods are
// safe for concurrent use.
type Reader interface {
	// Get returns one run, or ErrNotFound.
	Get(ctx context.Context, id string) (*Run, error)
	// Logs returns a run's log from a byte offset of the stream the
	// handler wrote on. An unknown run is ErrNotFound.
	Logs(ctx context.Context, id string, offset int64) (*Log, error)
	// List returns the runs q selects, newest first.
	List(ctx context.Context, q Query) (*Page, error)
	// Counts returns, by operator, the runs started at or after since and
	// how many of them failed (Failed or GaveUp).
	Counts(ctx context.Context, since time.Time) (map[string]Counts, error)
	// HandlerRecords returns every handler record of an operator, ordered by Key;
	// none is an empty slice.
	HandlerRecords(ctx context.Context, operator string) ([]HandlerRecord, error)
	DeliveryReader
	Close() error
}

// keptDiff is a run's diff as the archive keeps and gives it: a value
// nested deeper than jsondepth.Max objects and arrays (an object's field
// past what opkit reads) is replaced by a text saying so, so that no
// reader indents it line by line or meets a decoder's own limit.
func keptDiff(diff []Change) []Change {
	var out []Change
	for i, c := range diff {
		if jsondepth.Value(c.Old, jsondepth.Max) && jsondepth.Value(c.New, jsondepth.Max) {
			continue
		}
		if out == nil {
			out = slices.Clone(diff)
		}
		for _, v := range []*any{&out[i].Old, &out[i].New} {
			if !jsondepth.Value(*v, jsondepth.Max) {
				*v = fmt.Sprintf("(a value nested deeper than %d objects and arrays, not kept)", jsondepth.Max)
			}
		}
	}
	if out == nil {
		return diff
	}
	return out
}

func marshal(v any) string {
	if v == nil {
		return ""
	}
	data, _ := json.Marshal(v)
	if string(data) == "null" {
		return ""
	}
	return string(data)
}

// LogPiece is a stored piece of a log, at its offset in the stream.
type LogPiece struct {
	Pos  int64
	Data []byte
}

// JoinLog joins the stored pieces of a log from offset on, in order, with
// a CutMarker where bytes are missing between them; for stores.
func JoinLog(offset int64, pieces []LogPiece) *Log {
	l := &Log{Next: offset}
	for _, p := range pieces {
		if p.Pos > l.Next {
			l.Data = append(l.Data, CutMarker(p.Pos-l.Next)...)
			l.Next = p.Pos
		}
		data := p.Data
		if skip := l.Next - p.Pos; skip > 0 {
			if skip >= int64(len(data)) {
				continue
			}
			data = data[skip:]
		}
		l.Data = append(l.Data, data...)
		l.Next = p.Pos + int64(len(p.Data))
	}
	return l
}
