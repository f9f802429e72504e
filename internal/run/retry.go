package run

import (
	"context"
	"fmt"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/opkit-dev/opkit/api/v1alpha1"
	"github.com/opkit-dev/opkit/internal/cause"
	"github.com/opkit-dev/opkit/internal/request"
)

// retryRequested clears the failed attempts when the object asks for a
// retry (v1alpha1.RetryAnnotation). Each retry taken is recorded once,
// with who asked and why (recordRetry).
//
// A watched object's value is remembered in st (RetrySeen): it is the
// owner's to remove. A custom resource's request is taken in two steps,
// so that a SIGKILL at any point loses neither the request nor the
// attempts it cleared: the first clears them, records the retry and
// remembers the value in st, which the caller's status write keeps (the
// run the step starts waits for that write: Step.writeFirst); a later
// step, reading that value back from the object's status, removes the
// annotation, and once it is gone the value is forgotten, so that the
// same value set again is a new request. Killed before the status
// write, the next engine finds the annotation and takes it again.
func (rn *Runner) retryRequested(ctx context.Context, cr *unstructured.Unstructured, st *cause.State, res *Step) error {
	v, ok := cr.GetAnnotations()[v1alpha1.RetryAnnotation]
	if !rn.watched {
		return rn.customRetry(ctx, cr, st, res, v, ok)
	}
	if ok && v != st.RetrySeen && !failing(st) {
		st.RetrySeen = v // a value set before anything failed asks for nothing
	}
	if !ok || v == st.RetrySeen {
		return nil
	}
	clearAttempts(st)
	st.RetrySeen = v
	rn.recordRetry(ctx, cr, v1alpha1.ReadRequest(v))
	return nil
}

// customRetry is retryRequested for a custom resource, whose annotation
// opkit removes; v is its value, ok whether it is set.
func (rn *Runner) customRetry(ctx context.Context, cr *unstructured.Unstructured, st *cause.State, res *Step, v string, ok bool) error {
	switch {
	case !ok:
		st.RetrySeen = "" // taken and removed
		return nil
	case v == cause.Read(cr).RetrySeen:
		// Taken, and its status written: the request is done. Guarded by
		// a test of the value read: a newer request, written meanwhile,
		// is not lost (the patch fails, and the next step takes it).
		if err := rn.client.Patch(ctx, cr, client.RawPatch(types.JSONPatchType, request.RemovePatch(v1alpha1.RetryAnnotation, v))); err != nil {
			return fmt.Errorf("clearing %s: %w", v1alpha1.RetryAnnotation, err)
		}
		rn.mem.Record(cr.DeepCopy())
		res.Wrote = true
		return nil
	case v == st.RetrySeen:
		return nil // taken; its status write is still to come
	}
	clearAttempts(st)
	st.RetrySeen = v
	res.writeFirst = true
	rn.recordRetry(ctx, cr, v1alpha1.ReadRequest(v))
	return nil
}

// clearAttempts forgets every handler's failed attempts, and that it gave
// up.
func clearAttempts(st *cause.State) {
	for _, hs := range st.Handlers {
		hs.Attempt, hs.Target, hs.NextRetryAt, hs.Stalled, hs.LastError = 0, 0, "", false, ""
	}
}

// recordRetry records one retry of cr's handlers asked for by r: the
// RetryRequested Event, and a record of v1alpha1.RetryHandler in the
// archive whose log says who asked and why. An archive that cannot
// record it is reported in a Warning Event; the retry itself holds.
func (rn *Runner) recordRetry(ctx context.Context, cr *unstructured.Unstructured, r v1alpha1.RetryRequest) {
	sentence := "retry asked by " + request.Retry.Who(r.By)
	if r.Reason != "" {
		sentence += ": " + r.Reason
	}
	rec := request.Retry.Record(rn.def.Operator.Name, cr, r.By)
	request.Retry.Answer(rn.events, cr, request.Retry.Taken, fmt.Sprintf("%s; failed attempts cleared, handlers run again (run %s)", sentence, rn.runRef(rec.ID)))
	log := sentence
	if r.At != "" {
		log += " (asked at " + r.At + ")"
	}
	request.Retry.Keep(ctx, rn.archive, rn.events, cr, rec, log+"; failed attempts cleared, handlers run again.\n", sentence)
}

// failing reports whether a handler has failed attempts or has given up.
func failing(st *cause.State) bool {
	for _, hs := range st.Handlers {
		if hs.Attempt > 0 || hs.Stalled {
			return true
		}
	}
	return false
}
