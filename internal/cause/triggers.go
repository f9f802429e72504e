package cause

import (
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/opkit-dev/opkit/api/v1alpha1"
	"github.com/opkit-dev/opkit/internal/definition"
)

// The triggers Decide finds for a handler: a change of the object, a\nschedule's slot.

// scheduleSlot is the slot of h's schedule due for obj at now, if any
// (due; the latest due: those missed while the engine was down are not
// run one by one); else how long until the next one. stalled says why the
// schedule cannot be computed (the object's own interval is not one: a
// change of it is an update that looks again).
func scheduleSlot(h *definition.Handler, hs *HandlerState, obj *unstructured.Unstructured, now time.Time) (slot time.Time, due bool, wait time.Duration, stalled string) {
	next, err := h.Next(scheduleBase(obj, hs), obj.Object)
	switch {
	case err != nil:
		return time.Time{}, false, 0, fmt.Sprintf("handler %s cannot be scheduled: %v", h.Name, err)
	case now.Before(next):
		return time.Time{}, false, next.Sub(now), ""
	}
	slot = next
	for n, err := h.Next(slot, obj.Object); err == nil && !n.After(now) && n.After(slot); n, err = h.Next(n, obj.Object) {
		slot = n
	}
	return slot, true, 0, ""
}

// changeTrigger is the trigger of h, held back or not, for a change of
// the object: its deletion, a new generation (create, update), a change
// of its related objects' inputs (update), its when condition turned
// true. It returns the inputs of the related objects it read ("" without
// any), and whether the trigger is their change. It records in hs what
// needs no run (a change that concerns it not, inputs first seen, a when
// seen false).
func (in Input) changeTrigger(st *State, h *definition.Handler, hs *HandlerState, held, deleting bool) (trigger, inputs string, relatedChange bool) {
	obj, g := in.Object, in.Object.GetGeneration()
	switch {
	case held:
	case deleting:
		if h.Fires(v1alpha1.OnDelete) && !hs.Deleted {
			trigger = v1alpha1.OnDelete
		}
	case hs.Generation < g && (h.Fires(v1alpha1.OnCreate) || h.Fires(v1alpha1.OnUpdate)):
		// create: this handler never succeeded for the object; update:
		// it did, for an older generation.
		switch {
		case hs.Generation == 0 && h.Fires(v1alpha1.OnCreate):
			trigger = v1alpha1.OnCreate
		case hs.Generation > 0 && h.Fires(v1alpha1.OnUpdate) && in.touches(h, Paths(in.diff(st.doneWith(hs), obj))):
			trigger = v1alpha1.OnUpdate
		default:
			st.done(in.Handlers, h, g, in.subject(obj)) // nothing in this change concerns it
		}
	}
	if in.Related != nil && !held {
		inputs = Inputs(h, in.Related)
	}
	if trigger == "" && !deleting && inputs != "" && hs.Generation >= g && hs.Inputs != inputs {
		switch {
		case hs.Inputs == "" || !h.Fires(v1alpha1.OnUpdate):
			hs.Inputs = inputs // first seen: what the handler started from
		default:
			trigger, relatedChange = v1alpha1.OnUpdate, true
		}
	}
	if cur, known := in.When[h.Name]; !held && !deleting && known && h.Fires(v1alpha1.OnWhen) {
		switch {
		case cur && !hs.WhenTrue && trigger == "":
			trigger = v1alpha1.OnWhen // became true: once, until it is seen false
		case !cur && hs.WhenTrue:
			// Seen false, also while another trigger of the handler
			// runs: its next turn to true is a transition.
			hs.WhenTrue = false
		}
	}
	return trigger, inputs, relatedChange
}
