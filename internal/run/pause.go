package run

import (
	"context"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/opkit-dev/opkit/api/v1alpha1"
	"github.com/opkit-dev/opkit/internal/archive"
	"github.com/opkit-dev/opkit/internal/cause"
)

// pauseChanged records, once each, the object's handlers paused and
// resumed (v1alpha1.PauseAnnotation), with who did it and why (the
// annotation's Pause; v1alpha1.ResumedAnnotation for a resume): in the
// archive, as a record of v1alpha1.PauseHandler, and as an Event. st.Paused
// remembers the pause recorded, so that each is recorded once across
// reconciles and restarts. A custom resource's ResumedAnnotation is
// removed once its resume is recorded; a watched object's stays, as opkit
// never writes to it.
func (rn *Runner) pauseChanged(ctx context.Context, cr *unstructured.Unstructured, st *cause.State, res *Step) error {
	annotations := cr.GetAnnotations()
	value, paused := annotations[v1alpha1.PauseAnnotation]
	resumed, hasResumed := annotations[v1alpha1.ResumedAnnotation]
	switch {
	case paused && st.Paused != "v:"+value:
		p := v1alpha1.ReadPause(value)
		rn.recordPause(ctx, cr, v1alpha1.TriggerPaused, p)
		st.Paused = "v:" + value
	case !paused && st.Paused != "":
		var p v1alpha1.Pause
		if hasResumed {
			p = v1alpha1.ReadPause(resumed)
		}
		rn.recordPause(ctx, cr, v1alpha1.TriggerResumed, p)
		st.Paused = ""
	}
	if paused || !hasResumed || rn.watched {
		return nil
	}
	// Recorded (now or before): the request is consumed. Guarded by a test
	// of the value read, so that a newer resume is not lost.
	path := "/metadata/annotations/" + strings.ReplaceAll(strings.ReplaceAll(v1alpha1.ResumedAnnotation, "~", "~0"), "/", "~1")
	patch := fmt.Appendf(nil, `[{"op":"test","path":%q,"value":%q},{"op":"remove","path":%q}]`, path, resumed, path)
	if err := rn.client.Patch(ctx, cr, client.RawPatch(types.JSONPatchType, patch)); err != nil {
		return fmt.Errorf("removing %s: %w", v1alpha1.ResumedAnnotation, err)
	}
	rn.mem.Record(cr.DeepCopy())
	res.Wrote = true
	return nil
}

// recordPause records one pause or resume (trigger) of cr's handlers by
// p: an Event, and a record in the archive whose log says why. An archive
// that cannot record it is reported in a Warning Event; the pause itself
// holds.
func (rn *Runner) recordPause(ctx context.Context, cr *unstructured.Unstructured, trigger string, p v1alpha1.Pause) {
	by := p.By
	if by == "" {
		by = "someone (the annotation " + v1alpha1.PauseAnnotation + " names nobody)"
	}
	what := "paused"
	if trigger == v1alpha1.TriggerResumed {
		what = "resumed"
	}
	sentence := fmt.Sprintf("handlers %s by %s", what, by)
	if p.Reason != "" {
		sentence += ": " + p.Reason
	}
	now := time.Now().UTC()
	r := &archive.Run{
		ID: archive.NewID(now), Operator: rn.def.Operator.Name, Handler: v1alpha1.PauseHandler, Action: "pause", Trigger: trigger,
		APIVersion: cr.GetAPIVersion(), Kind: cr.GetKind(), Namespace: cr.GetNamespace(), Name: cr.GetName(), UID: string(cr.GetUID()),
		Generation: cr.GetGeneration(), Attempt: 1, Actor: p.By, StartedAt: now, FinishedAt: now, Outcome: archive.Succeeded,
	}
	r.Key = string(cr.GetUID()) + "/" + trigger + "/" + r.ID
	rn.events.Eventf(cr, nil, corev1.EventTypeNormal, strings.ToUpper(what[:1])+what[1:], runAction(r.ID), "%s (run %s)", sentence, rn.runRef(r.ID))
	ctx = context.WithoutCancel(ctx) // seen, it is recorded, also when the engine is stopping
	log := sentence
	if p.At != "" {
		log += " (asked at " + p.At + ")"
	}
	err := rn.archive.Insert(ctx, r)
	if err == nil {
		err = rn.archive.AppendLog(ctx, r.ID, []byte(log+".\n"))
	}
	if err != nil {
		rn.events.Eventf(cr, nil, corev1.EventTypeWarning, "ArchiveFailed", "Pause", "%s: not recorded in the archive: %v", sentence, err)
	}
}
