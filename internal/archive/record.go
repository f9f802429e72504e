package archive

import (
	"context"
	"time"

	"k8s.io/apimachinery/pkg/types"
)

// Object is what a run's record names of the object it was for; an
// unstructured.Unstructured is one.
type Object interface {
	GetAPIVersion() string
	GetKind() string
	GetNamespace() string
	GetName() string
	GetUID() types.UID
	GetGeneration() int64
}

// NewRun is the record every archived run starts from, whoever makes it:
// the runner, an admission call, a transition, a person's request. It is
// attempt 1 of operator's handler, of action, on obj (nil for none) for
// trigger, started at `at` with a new ID, Running. The caller sets the
// key, and what else it knows, before it inserts it.
func NewRun(operator, handler, action, trigger string, obj Object, at time.Time) *Run {
	r := &Run{
		ID: NewID(at), Operator: operator, Handler: handler, Action: action, Trigger: trigger,
		Attempt: 1, StartedAt: at.UTC(), Outcome: Running,
	}
	if obj != nil {
		r.APIVersion, r.Kind, r.Namespace, r.Name = obj.GetAPIVersion(), obj.GetKind(), obj.GetNamespace(), obj.GetName()
		r.UID, r.Generation = string(obj.GetUID()), obj.GetGeneration()
	}
	return r
}

// Instant makes r the record of something done at once, not run (a
// transition, a person's request taken): Succeeded, finished as it
// started. It returns r.
func (r *Run) Instant() *Run {
	r.Outcome, r.FinishedAt = Succeeded, r.StartedAt
	return r
}

// Keep inserts r with log as its log, also when ctx is done: what opkit
// did is recorded, also while the engine stops.
func Keep(ctx context.Context, a Recorder, r *Run, log string) error {
	ctx = context.WithoutCancel(ctx)
	if err := a.Insert(ctx, r); err != nil {
		return err
	}
	return a.AppendLog(ctx, r.ID, []byte(log))
}
