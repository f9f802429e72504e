// Package why answers "why is this object like this?" (opkit why): the
// chain of what made an object what it is now, newest first, from the
// archive and the object itself, never from a tracing backend.
//
// The chain's entries:
//   - a change: a field manager's last write to the object
//     (metadata.managedFields: who, when, which fields, their values now),
//     with the run that made it when one was running for the object then,
//     or when the object names it (RunAnnotation);
//   - a run of the object (archive): its trigger, attempt, outcome, the
//     spec fields whose change caused it (its diff), what it wrote, who
//     decided or asked for it, and for a run on event its delivery;
//   - a delivery: the one whose handling ran a run of the chain, or that
//     applied the object (a source's object: DeliveryAnnotation), with
//     its source, event, sender and outcome;
//   - an owner: a child points to its owner, whose own chain says the
//     rest (opkit why of the owner).
//
// Contracts: Explain reads, never writes; an object it cannot read (gone,
// no access) is explained from the archive alone, and a record it cannot
// read (pruned, or withheld from its reader: ErrWithheld) is named as
// missing, not an error.
package why

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/opkit-dev/opkit/internal/archive"
)

// RunAnnotation names, on an object a handler wrote, the run that wrote
// it ($OPKIT_RUN_ID): what a handler sets to be found by opkit why.
const RunAnnotation = "opkit.dev/run"

// DeliveryAnnotation names, on a source's object, the delivery whose
// handling applied it last (its archive id).
const DeliveryAnnotation = "opkit.dev/delivery"

// ErrWithheld is what a Source answers (wrapped, with why) for a run or
// delivery it does not give its reader (no access, not served): the
// chain names it as not shown, with the error's words, not as pruned.
var ErrWithheld = errors.New("withheld")

// Source is what Explain reads of the archive: an archive or the runs API
// (archive.Reader). Its Get and GetDelivery may answer ErrWithheld.
type Source interface {
	Get(ctx context.Context, id string) (*archive.Run, error)
	List(ctx context.Context, q archive.Query) (*archive.Page, error)
	GetDelivery(ctx context.Context, id string) (*archive.Delivery, error)
}

// Ref names the object explained.
type Ref struct {
	Kind      string `json:"kind,omitempty"`
	Namespace string `json:"namespace,omitempty"`
	Name      string `json:"name"`
}

func (r Ref) String() string {
	s := r.Name
	if r.Namespace != "" {
		s = r.Namespace + "/" + s
	}
	if r.Kind != "" {
		s = r.Kind + " " + s
	}
	return s
}

// Chain is an object's explanation: its entries, newest first.
type Chain struct {
	Object  Ref     `json:"object"`
	Entries []Entry `json:"entries"`
	// Notes say what could not be read (the object, a pruned record).
	Notes []string `json:"notes,omitempty"`
}

// Entry is one link of the chain.
type Entry struct {
	At time.Time `json:"at"`
	// Kind is change, run, delivery or owner.
	Kind string `json:"kind"`
	// Summary is the entry in one line.
	Summary string `json:"summary"`
	// Cause names what caused it, when known: "run ID" (a change made
	// during it), "delivery ID" (a change or a run on event handling it),
	// "a re-run of ID".
	Cause string `json:"cause,omitempty"`
	// Caused names the run a change caused ("run ID"): its diff names a
	// field the change set.
	Caused string `json:"caused,omitempty"`

	Change   *Change          `json:"change,omitempty"`
	Run      *Run             `json:"run,omitempty"`
	Delivery *Delivery        `json:"delivery,omitempty"`
	Owner    *Ref             `json:"owner,omitempty"`
	Diff     []archive.Change `json:"diff,omitempty"`

	// after is what the entry sorts after: a change made during a run
	// comes after the run's start, whatever the second managedFields
	// rounds its time to.
	after time.Time
}

// rank orders entries of the same time: an effect before its cause.
var rank = map[string]int{"change": 0, "owner": 1, "run": 2, "delivery": 3}

// newestFirst orders a chain's entries.
func newestFirst(a, b Entry) int {
	if c := cmp.Or(b.after, b.At).Compare(cmp.Or(a.after, a.At)); c != 0 {
		return c
	}
	return rank[a.Kind] - rank[b.Kind]
}

// Change is a field manager's last write to the object.
type Change struct {
	Manager     string `json:"manager"`
	Operation   string `json:"operation"`
	Subresource string `json:"subresource,omitempty"`
	// Fields are the fields it owns, as paths, with their values now
	// (a value only for a leaf that has one).
	Fields []Field `json:"fields"`
}

// Field is a field's path and its value now.
type Field struct {
	Path  string `json:"path"`
	Value any    `json:"value,omitempty"`
}

// Run is a run of the chain, as the archive holds it.
type Run struct {
	ID       string `json:"id"`
	Operator string `json:"operator"`
	Handler  string `json:"handler"`
	Trigger  string `json:"trigger"`
	Attempt  int    `json:"attempt"`
	Outcome  string `json:"outcome"`
	Error    string `json:"error,omitempty"`
	// Object is the run's object, when not the one explained.
	Object  string   `json:"object,omitempty"`
	Actor   string   `json:"actor,omitempty"`
	RerunOf string   `json:"rerunOf,omitempty"`
	Writes  []string `json:"writes,omitempty"`
	Trace   string   `json:"trace,omitempty"`
	// Logs is the command that shows its log.
	Logs string `json:"logs"`
}

// Delivery is a delivery of the chain.
type Delivery struct {
	ID         string `json:"id"`
	Source     string `json:"source"`
	DeliveryID string `json:"deliveryId,omitempty"`
	Event      string `json:"event,omitempty"`
	// Sender is who the delivery says sent it (GitHub's sender.login, a
	// CloudEvent's source), when it says.
	Sender  string `json:"sender,omitempty"`
	Outcome string `json:"outcome"`
	Reason  string `json:"reason,omitempty"`
}

// maxRuns bounds the runs of the object read: the newest.
const maxRuns = 200

// Explain builds the chain of ref: obj is the object as read now (nil
// when it could not be read), since bounds the entries' times (zero: no
// bound).
func Explain(ctx context.Context, src Source, ref Ref, obj *unstructured.Unstructured, since time.Time) (*Chain, error) {
	c := &Chain{Object: ref}
	x := &explainer{src: src, chain: c, runs: map[string]*archive.Run{}, deliveries: map[string]*archive.Delivery{}}
	if err := x.objectRuns(ctx, ref, since); err != nil {
		return nil, err
	}
	if obj != nil {
		if err := x.named(ctx, obj); err != nil {
			return nil, err
		}
		x.changes(obj)
		for _, o := range obj.GetOwnerReferences() {
			if o.Controller != nil && *o.Controller {
				owner := Ref{Kind: o.Kind, Namespace: obj.GetNamespace(), Name: o.Name}
				c.Entries = append(c.Entries, Entry{At: obj.GetCreationTimestamp().UTC(), Kind: "owner", Owner: &owner,
					Summary: fmt.Sprintf("a child of %s, written by its reconciles: opkit why %s --kind %s", owner, qualified(owner), owner.Kind)})
			}
		}
	}
	c.Entries = slices.DeleteFunc(c.Entries, func(e Entry) bool { return !since.IsZero() && e.At.Before(since) })
	slices.SortStableFunc(c.Entries, newestFirst)
	return c, nil
}

type explainer struct {
	src        Source
	chain      *Chain
	runs       map[string]*archive.Run      // by id: each run once
	deliveries map[string]*archive.Delivery // read, nil when pruned
	// applied is the delivery that applied the object (a source's
	// object's DeliveryAnnotation), when read.
	applied *archive.Delivery
}

// objectRuns adds the object's own runs.
func (x *explainer) objectRuns(ctx context.Context, ref Ref, since time.Time) error {
	q := archive.Query{Namespace: ref.Namespace, NoNamespace: ref.Namespace == "", Name: ref.Name, Kind: ref.Kind, Since: since}
	for n := 0; n < maxRuns; {
		q.Limit = maxRuns - n
		page, err := x.src.List(ctx, q)
		if err != nil {
			return fmt.Errorf("the runs of %s: %w", ref, err)
		}
		for i := range page.Runs {
			if n++; n > maxRuns {
				break
			}
			if err := x.run(ctx, &page.Runs[i], ""); err != nil {
				return err
			}
		}
		if page.Next == "" || len(page.Runs) == 0 {
			break
		}
		q.Cursor = page.Next
	}
	if n := len(x.runs); n >= maxRuns {
		x.chain.Notes = append(x.chain.Notes, fmt.Sprintf("only the newest %d runs of the object are read: --since narrows the chain", maxRuns))
	}
	return nil
}

// run adds r, and its delivery for a run on event; object names r's
// object when it is not the one explained.
func (x *explainer) run(ctx context.Context, r *archive.Run, object string) error {
	if x.runs[r.ID] != nil {
		return nil
	}
	x.runs[r.ID] = r
	e := Entry{At: r.StartedAt, Kind: "run", Diff: r.Diff, Run: &Run{
		ID: r.ID, Operator: r.Operator, Handler: r.Handler, Trigger: r.Trigger, Attempt: r.Attempt, Outcome: string(r.Outcome),
		Error: r.Error, Object: object, Actor: r.Actor, RerunOf: r.RerunOf, Writes: r.Writes, Trace: r.Trace, Logs: "opkit logs " + r.ID,
	}}
	e.Summary = runSummary(r, object)
	if r.Trigger == "event" {
		id, err := x.deliveryOf(ctx, r)
		if err != nil {
			return err
		}
		if id != "" {
			e.Cause = "delivery " + id
			if _, err := x.delivery(ctx, id, "ran "+r.Handler); err != nil {
				return err
			}
		}
	}
	if r.RerunOf != "" {
		e.Cause = "a re-run of " + r.RerunOf
	}
	x.chain.Entries = append(x.chain.Entries, e)
	return nil
}

// runSummary is a run in one line.
func runSummary(r *archive.Run, object string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "run %s: handler %s on %s", r.ID, r.Handler, r.Trigger)
	if object != "" {
		fmt.Fprintf(&b, " of %s", object)
	}
	if r.Attempt > 1 {
		fmt.Fprintf(&b, ", attempt %d", r.Attempt)
	}
	fmt.Fprintf(&b, ": %s", r.Outcome)
	if r.Error != "" {
		fmt.Fprintf(&b, " (%s)", clip(r.Error, 100))
	}
	if len(r.Diff) > 0 {
		var changed []string
		for _, c := range r.Diff {
			changed = append(changed, diffText(c))
		}
		fmt.Fprintf(&b, "; caused by %s", strings.Join(changed, ", "))
	}
	if len(r.Writes) > 0 {
		fmt.Fprintf(&b, "; wrote %s", strings.Join(r.Writes, "; "))
	}
	if r.Actor != "" {
		fmt.Fprintf(&b, "; by %s", r.Actor)
	}
	return b.String()
}

// diffText is a field's change in a few words.
func diffText(c archive.Change) string {
	switch c.Op {
	case "add":
		return fmt.Sprintf("%s set to %s", c.Path, short(c.New))
	case "remove":
		return fmt.Sprintf("%s removed (was %s)", c.Path, short(c.Old))
	}
	return fmt.Sprintf("%s %s -> %s", c.Path, short(c.Old), short(c.New))
}

func short(v any) string {
	b, _ := json.Marshal(v)
	return clip(string(b), 60)
}

func clip(s string, n int) string {
	s = strings.ReplaceAll(s, "\n", " ")
	if len(s) > n {
		return s[:n-3] + "..."
	}
	return s
}

// deliveryOf is the archive id of the delivery a run on event handled,
// read from its binding context ("" when the archive kept none).
func (x *explainer) deliveryOf(ctx context.Context, r *archive.Run) (string, error) {
	full := r
	if len(r.Input) == 0 {
		got, err := x.src.Get(ctx, r.ID)
		if errors.Is(err, archive.ErrNotFound) || errors.Is(err, ErrWithheld) {
			return "", nil
		}
		if err != nil {
			return "", fmt.Errorf("run %s: %w", r.ID, err)
		}
		full = got
	}
	var bc struct {
		Event struct {
			ID string `json:"id"`
		} `json:"event"`
	}
	_ = json.Unmarshal(full.Input, &bc)
	return bc.Event.ID, nil
}

// delivery adds the delivery id, and returns it (nil when the archive no
// longer has it); what says what it did for the chain.
func (x *explainer) delivery(ctx context.Context, id, what string) (*archive.Delivery, error) {
	if d, ok := x.deliveries[id]; ok {
		return d, nil
	}
	d, err := x.src.GetDelivery(ctx, id)
	switch {
	case errors.Is(err, archive.ErrNotFound):
		x.deliveries[id] = nil
		x.chain.Notes = append(x.chain.Notes, "delivery "+id+" is no longer in the archive (pruned)")
		return nil, nil
	case errors.Is(err, ErrWithheld):
		x.deliveries[id] = nil
		x.chain.Notes = append(x.chain.Notes, "delivery "+id+" is not shown ("+err.Error()+")")
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("delivery %s: %w", id, err)
	}
	x.deliveries[id] = d
	e := Entry{At: d.ReceivedAt, Kind: "delivery", Delivery: &Delivery{
		ID: d.ID, Source: d.Source, DeliveryID: d.DeliveryID, Event: d.Event, Sender: sender(d), Outcome: string(d.Outcome), Reason: d.Reason,
	}}
	var b strings.Builder
	fmt.Fprintf(&b, "delivery %s from source %s", d.ID, d.Source)
	if d.Event != "" {
		fmt.Fprintf(&b, ": %s", d.Event)
	}
	if s := e.Delivery.Sender; s != "" {
		fmt.Fprintf(&b, " by %s", s)
	}
	if d.DeliveryID != "" {
		fmt.Fprintf(&b, " (the sender's id %s)", d.DeliveryID)
	}
	fmt.Fprintf(&b, ", %s; %s", d.Outcome, what)
	e.Summary = b.String()
	x.chain.Entries = append(x.chain.Entries, e)
	return d, nil
}

// sender is who a delivery says sent it: GitHub's sender.login, else a
// CloudEvent's ce-source; "" when it says neither.
func sender(d *archive.Delivery) string {
	var p struct {
		Sender struct {
			Login string `json:"login"`
		} `json:"sender"`
	}
	if json.Unmarshal(d.Payload, &p) == nil && p.Sender.Login != "" {
		return p.Sender.Login
	}
	for k, v := range d.Headers {
		if strings.EqualFold(k, "ce-source") && len(v) > 0 {
			return v[0]
		}
	}
	return ""
}

// named adds what the object's annotations name: the run that wrote it,
// the delivery that applied it.
func (x *explainer) named(ctx context.Context, obj *unstructured.Unstructured) error {
	a := obj.GetAnnotations()
	if id := a[RunAnnotation]; id != "" && archive.ValidID(id) {
		r, err := x.src.Get(ctx, id)
		switch {
		case errors.Is(err, archive.ErrNotFound):
			x.chain.Notes = append(x.chain.Notes, "run "+id+", which wrote the object ("+RunAnnotation+"), is no longer in the archive")
		case errors.Is(err, ErrWithheld):
			x.chain.Notes = append(x.chain.Notes, "run "+id+", which wrote the object ("+RunAnnotation+"), is not shown ("+err.Error()+")")
		case err != nil:
			return fmt.Errorf("run %s: %w", id, err)
		default:
			if err := x.run(ctx, r, r.Object()); err != nil {
				return err
			}
		}
	}
	if id := a[DeliveryAnnotation]; id != "" && archive.ValidID(id) {
		d, err := x.delivery(ctx, id, "applied the object")
		if err != nil {
			return err
		}
		x.applied = d
	}
	return nil
}

// changes adds each field manager's last write to obj, with the run that
// was running for it then, if any.
func (x *explainer) changes(obj *unstructured.Unstructured) {
	for _, mf := range obj.GetManagedFields() {
		if mf.Time == nil || mf.FieldsV1 == nil {
			continue
		}
		at := mf.Time.UTC()
		// opkit's own records in status (status.opkit) say nothing a
		// reader of the chain needs: its runs are there already.
		fields := slices.DeleteFunc(Fields(obj.Object, mf.FieldsV1.GetRawBytes()), func(f Field) bool { return strings.HasPrefix(f.Path, "status.opkit.") })
		if len(fields) == 0 {
			continue
		}
		for i := range fields {
			if secretValue(obj, fields[i].Path) {
				fields[i].Value = nil
			}
		}
		e := Entry{At: at, Kind: "change", Change: &Change{Manager: mf.Manager, Operation: string(mf.Operation), Subresource: mf.Subresource, Fields: fields}}
		var paths []string
		for _, f := range fields {
			p := f.Path
			if f.Value != nil {
				p += " = " + short(f.Value)
			}
			paths = append(paths, p)
		}
		more := ""
		if len(paths) > 4 {
			more = fmt.Sprintf(" and %d more", len(paths)-4)
			paths = paths[:4]
		}
		where := ""
		if mf.Subresource != "" {
			where = " (" + mf.Subresource + ")"
		}
		e.Summary = fmt.Sprintf("%s%s by %s (%s)%s", strings.Join(paths, ", "), more, mf.Manager, mf.Operation, where)
		switch r, c := x.during(at), x.caused(at, fields); {
		case strings.HasPrefix(mf.Manager, "opkit-source-") && x.applied != nil:
			// A source's object, applied by the delivery it names.
			d := x.applied
			e.Cause, e.after = "delivery "+d.ID, d.ReceivedAt.Add(time.Nanosecond)
			e.Summary += ", handling delivery " + d.ID
		case c != nil:
			// The cause of a run that started after it: just before the
			// run, as it may have come after another run of its second
			// (managedFields' times are in seconds); where it came
			// seconds before the run, at its time.
			e.after = c.StartedAt.Add(-time.Nanosecond)
			if at.Before(c.StartedAt.Add(-2 * time.Second)) {
				e.after = at
			}
			e.Caused = "run " + c.ID
			e.Summary += fmt.Sprintf(", which caused run %s (%s)", c.ID, c.Handler)
		case r != nil:
			e.Cause, e.after = "run "+r.ID, r.StartedAt
			if at.After(r.StartedAt) {
				e.after = at
			}
			e.Summary += fmt.Sprintf(", during run %s (%s)", r.ID, r.Handler)
		}
		x.chain.Entries = append(x.chain.Entries, e)
	}
}

// causes reports whether a change of fields is a cause of r: it set a
// field whose change r's diff names.
func causes(fields []Field, r *archive.Run) bool {
	for _, c := range r.Diff {
		for _, f := range fields {
			switch {
			case f.Path == c.Path:
				// The value it set is the one the run saw, when both
				// are known: a run of the same second that saw an
				// older value was not caused by it.
				if f.Value == nil || c.New == nil || same(f.Value, c.New) {
					return true
				}
			case strings.HasPrefix(f.Path, c.Path+".") || strings.HasPrefix(f.Path, c.Path+"["):
				return true
			}
		}
	}
	return false
}

// same reports whether two values read from JSON are equal.
func same(a, b any) bool {
	x, errA := json.Marshal(a)
	y, errB := json.Marshal(b)
	return errA == nil && errB == nil && string(x) == string(y)
}

// causeWindow is how long after a change a run it caused may start (a
// slot waited for, a reconcile later).
const causeWindow = 30 * time.Second

// caused is the first run of the chain that a change of fields at caused:
// it started within causeWindow after it (managedFields' times are in
// seconds), and its diff names one of the fields.
func (x *explainer) caused(at time.Time, fields []Field) *archive.Run {
	var first *archive.Run
	for _, r := range x.runs {
		if r.StartedAt.Before(at) || !r.StartedAt.Before(at.Add(causeWindow)) || !causes(fields, r) {
			continue
		}
		if first == nil || r.StartedAt.Before(first.StartedAt) {
			first = r
		}
	}
	return first
}

// secretValue reports whether the value at path of obj is one opkit why
// does not print: a Secret's data, and the annotation kubectl keeps the
// last applied object in (a Secret's stringData in plain text).
func secretValue(obj *unstructured.Unstructured, path string) bool {
	if strings.HasPrefix(path, "metadata.annotations.kubectl.kubernetes.io/last-applied-configuration") {
		return true
	}
	return obj.GetKind() == "Secret" && (strings.HasPrefix(path, "data.") || strings.HasPrefix(path, "stringData."))
}

// during is the run of the chain running at (managedFields' times are in
// seconds: a run's window is widened to its seconds).
func (x *explainer) during(at time.Time) *archive.Run {
	var best *archive.Run
	for _, r := range x.runs {
		start := r.StartedAt.Truncate(time.Second)
		end := cmp.Or(r.FinishedAt, time.Now()).Truncate(time.Second).Add(time.Second)
		if !at.Before(start) && at.Before(end) && (best == nil || r.StartedAt.After(best.StartedAt)) {
			best = r
		}
	}
	return best
}

// qualified is ref as opkit why takes it: NAMESPACE/NAME, or NAME.
func qualified(ref Ref) string {
	if ref.Namespace == "" {
		return ref.Name
	}
	return ref.Namespace + "/" + ref.Name
}
