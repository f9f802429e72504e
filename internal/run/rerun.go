package run

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"go.opentelemetry.io/otel/attribute"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/opkit-dev/opkit/api/v1alpha1"
	"github.com/opkit-dev/opkit/internal/archive"
	"github.com/opkit-dev/opkit/internal/cause"
	"github.com/opkit-dev/opkit/internal/definition"
	"github.com/opkit-dev/opkit/internal/request"
)

// A re-run is a person's request (v1alpha1.RerunAnnotation, written by
// opkit rerun or the console) to run an earlier run's handler once more
// for its object. Like a decision, it travels on the object, so that who
// may ask is who may patch the object (Kubernetes RBAC), and the engine
// answers on the object: an Event RerunStarted naming the new run, or
// RerunRefused saying why. The re-run is one run: it is recorded with
// trigger rerun, the key <original key>/rerun/<n>, the person as its
// actor and their reason, linked to the run it repeats; it is not
// retried, and it changes none of the handler's records (what the
// handler is done with, its failed attempts), so that the object's own
// triggers go on as before.

// rerunRequested takes the object's re-run request, if it has one that
// is new, and returns the run it starts (nil for none: no request, or a
// request refused with an Event). A custom resource's annotation is
// removed once read (wrote: cr is then as the write left it); a watched
// object's is remembered in st (RerunSeen), as opkit writes nothing to
// it. A request that cannot be read from the archive now stays, and the
// error makes the reconcile try again.
func (rn *Runner) rerunRequested(ctx context.Context, cr *unstructured.Unstructured, st *cause.State, vars definition.Vars, subject map[string]any) (p *Pending, wrote bool, err error) {
	raw, ok := cr.GetAnnotations()[v1alpha1.RerunAnnotation]
	if !ok || rn.watched && raw == st.RerunSeen {
		return nil, false, nil
	}
	var req v1alpha1.Rerun
	perr := json.Unmarshal([]byte(raw), &req)
	var orig *archive.Run
	if perr == nil && archive.ValidID(req.Run) {
		orig, err = rn.archive.Get(ctx, req.Run)
		if err != nil && !errors.Is(err, archive.ErrNotFound) {
			return nil, false, fmt.Errorf("reading run %s, which %s asks to run again: %w", req.Run, v1alpha1.RerunAnnotation, err)
		}
	}
	// The request is read: it is answered once, whatever the answer.
	if rn.watched {
		st.RerunSeen = raw
	} else {
		patch := []byte(`{"metadata":{"annotations":{"` + v1alpha1.RerunAnnotation + `":null}}}`)
		if err := rn.client.Patch(ctx, cr, client.RawPatch(types.MergePatchType, patch)); err != nil {
			return nil, false, fmt.Errorf("removing %s: %w", v1alpha1.RerunAnnotation, err)
		}
		rn.mem.Record(cr.DeepCopy())
		wrote = true
	}
	refuse := func(format string, args ...any) (*Pending, bool, error) {
		why := fmt.Sprintf(format, args...)
		request.Rerun.Answer(rn.events, cr, request.Rerun.Refused, fmt.Sprintf("re-run request %s (by %s) refused: %s", or(req.Request, "-"), request.Rerun.Who(req.By), why))
		return nil, wrote, nil
	}
	if perr != nil {
		return refuse("the annotation %s is not a re-run request (%v): use opkit rerun", v1alpha1.RerunAnnotation, perr)
	}
	if why := rerunRefusal(rn.def, cr, req, orig); why != "" {
		return refuse("%s", why)
	}
	h := handlerNamed(rn.def, orig.Handler)
	var recorded BindingContext
	if len(orig.Input) > 0 {
		if err := json.Unmarshal(orig.Input, &recorded); err != nil && req.SameInput {
			return refuse("the binding context run %s recorded cannot be read (%v): run it again without --same-input", orig.ID, err)
		}
	}
	n, err := rn.rerunNumber(ctx, orig)
	if err != nil {
		return nil, wrote, err
	}
	c := &cause.Cause{
		Handler: h, Trigger: v1alpha1.TriggerRerun, Generation: cr.GetGeneration(), Key: RerunKey(orig.Key, n), Attempt: 1,
		Due: rn.clock.Now(), Old: recorded.Old, Diff: orig.Diff,
	}
	if p, err = rn.start(ctx, cr, c, vars, subject, false, ""); err != nil {
		return nil, wrote, err
	}
	p.f.run.RerunOf, p.f.run.Actor, p.f.run.Reason = orig.ID, req.By, req.Reason
	p.input.RerunOf = orig.ID
	if p.f.span.IsRecording() {
		p.f.span.SetAttributes(attribute.String("opkit.run.rerun_of", orig.ID), attribute.String("opkit.actor", req.By))
	}
	if req.SameInput {
		p.recorded = &recorded
	}
	input := "the object as it is now"
	if req.SameInput {
		input = "the binding context run " + orig.ID + " got"
	}
	rn.events.Eventf(cr, nil, corev1.EventTypeNormal, v1alpha1.EventRerunStarted, runAction(p.f.run.ID), "re-run request %s (by %s): run %s runs handler %s again, as run %s, with %s", or(req.Request, "-"), request.Rerun.Who(req.By), orig.ID, h.Name, rn.runRef(p.f.run.ID), input)
	return p, wrote, nil
}

// rerunRefusal says why the request req, found on cr, cannot be taken for
// the archived run orig (nil: not in the archive); "" when it can.
func rerunRefusal(def *definition.Definition, cr *unstructured.Unstructured, req v1alpha1.Rerun, orig *archive.Run) string {
	op := def.Operator.Name
	switch {
	case orig == nil:
		return fmt.Sprintf("run %q is not in the archive (opkit runs --object %s lists this object's runs)", req.Run, objectName(cr))
	case orig.Operator != op:
		return fmt.Sprintf("run %s is operator %s's, not %s's", orig.ID, orig.Operator, op)
	case orig.UID != string(cr.GetUID()):
		return fmt.Sprintf("run %s ran for another object (%s %s, uid %s), which is gone: a re-run is for the object its run was for", orig.ID, orig.Kind, orig.Object(), orig.UID)
	case orig.RerunRefusal(req.SameInput) != "":
		return orig.RerunRefusal(req.SameInput)
	case handlerNamed(def, orig.Handler) == nil:
		return fmt.Sprintf("handler %s is no longer in operator %s's definition", orig.Handler, op)
	}
	return ""
}

// rerunNumber is the number of the next re-run of orig's key: one more
// than the re-runs of any run of that key so far (orig's among them), not
// of orig alone (Run.Reruns). A
// key retried after a re-run of its first attempt has an attempt with no
// re-run of its own, whose first re-run would have the key the earlier
// re-run had: a handler that keys its side effects by it would take the
// second for the first, done already.
func (rn *Runner) rerunNumber(ctx context.Context, orig *archive.Run) (int, error) {
	n := 0
	runs, err := archive.ListAll(ctx, rn.archive, archive.Query{Operator: orig.Operator, UID: orig.UID, Handler: orig.Handler, Trigger: v1alpha1.TriggerRerun})
	if err != nil {
		return 0, fmt.Errorf("reading the re-runs of run %s's key: %w", orig.ID, err)
	}
	for _, r := range runs {
		if rest, ok := strings.CutPrefix(r.Key, orig.Key+"/rerun/"); ok {
			if k, err := strconv.Atoi(rest); err == nil {
				n = max(n, k)
			}
		}
	}
	return n + 1, nil
}

// RerunKey is the idempotency key of the n-th re-run of a run whose key
// is key.
func RerunKey(key string, n int) string { return key + "/rerun/" + strconv.Itoa(n) }

// handlerNamed is the definition's handler of that name, or nil.
func handlerNamed(def *definition.Definition, name string) *definition.Handler {
	for _, h := range def.Handlers {
		if h.Name == name {
			return h
		}
	}
	return nil
}

// objectName is namespace/name, or the name of a cluster-scoped object.
func objectName(cr *unstructured.Unstructured) string {
	if cr.GetNamespace() == "" {
		return cr.GetName()
	}
	return cr.GetNamespace() + "/" + cr.GetName()
}

// or is s, or otherwise when s is empty.
func or(s, otherwise string) string {
	if strings.TrimSpace(s) == "" {
		return otherwise
	}
	return s
}
