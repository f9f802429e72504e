package run

import (
	"context"
	"fmt"
	"strings"
	"sync"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/opkit-dev/opkit/api/v1alpha1"
	"github.com/opkit-dev/opkit/internal/cause"
	"github.com/opkit-dev/opkit/internal/request"
)

// pauseChanged records, once each, the object's handlers paused and
// resumed (v1alpha1.PauseAnnotation, on the object or on its Operator),
// with who did it and why (the annotation's Pause; v1alpha1.ResumedAnnotation
// for a resume): in the archive, as a record of v1alpha1.PauseHandler, and
// as an Event. st.Paused remembers the pause recorded ("v:" and the
// object's annotation, "op:" and the Operator's), so that each is recorded
// once across reconciles and restarts; the object's own pause is the one
// recorded while both hold. A custom resource's ResumedAnnotation is
// removed once its resume is recorded; a watched object's stays, as opkit
// never writes to it.
func (rn *Runner) pauseChanged(ctx context.Context, cr *unstructured.Unstructured, st *cause.State, op operatorPauseState, res *Step) error {
	annotations := cr.GetAnnotations()
	value, paused := annotations[v1alpha1.PauseAnnotation]
	resumed, hasResumed := annotations[v1alpha1.ResumedAnnotation]
	now := ""
	switch {
	case paused:
		now = "v:" + value
	case op.paused:
		now = "op:" + op.value
	}
	if st.Paused != now {
		// A resume is recorded when the handlers run again, or when the
		// object's own pause ends under its Operator's.
		wasOperator := strings.HasPrefix(st.Paused, "op:")
		switch {
		case st.Paused == "" || now != "" && (wasOperator || paused):
		case wasOperator:
			rn.recordPause(ctx, cr, st, v1alpha1.TriggerResumed, v1alpha1.ReadRequest(op.resumed), rn.def.Operator.Name)
		default:
			var p v1alpha1.Pause
			if hasResumed {
				p = v1alpha1.ReadRequest(resumed)
			}
			rn.recordPause(ctx, cr, st, v1alpha1.TriggerResumed, p, "")
		}
		switch {
		case paused:
			rn.recordPause(ctx, cr, st, v1alpha1.TriggerPaused, v1alpha1.ReadRequest(value), "")
		case now != "":
			rn.recordPause(ctx, cr, st, v1alpha1.TriggerPaused, v1alpha1.ReadRequest(op.value), rn.def.Operator.Name)
		}
	}
	st.Paused = now
	if paused || !hasResumed || rn.watched {
		return nil
	}
	// Recorded (now or before): the request is consumed. Guarded by a test
	// of the value read, so that a newer resume is not lost.
	if err := rn.client.Patch(ctx, cr, client.RawPatch(types.JSONPatchType, request.RemovePatch(v1alpha1.ResumedAnnotation, resumed))); err != nil {
		return fmt.Errorf("removing %s: %w", v1alpha1.ResumedAnnotation, err)
	}
	rn.mem.Record(cr.DeepCopy())
	res.Wrote = true
	return nil
}

// EndPause ends the object's own pause on obj, the last state kept of a
// watched object that is gone: nothing is left to resume it, and the
// pause kept may have ended before it went (resumed, then deleted, while
// no engine ran). Its delete handlers run, and its resume is recorded
// once, by opkit, saying why. Its operator's pause still holds them until
// the operator is resumed. (A watched object held by opkit's finalizer is
// not gone: its pause holds until a person resumes it.)
func EndPause(obj *unstructured.Unstructured) {
	annotations := obj.GetAnnotations()
	if _, paused := annotations[v1alpha1.PauseAnnotation]; !paused {
		return
	}
	delete(annotations, v1alpha1.PauseAnnotation)
	annotations[v1alpha1.ResumedAnnotation] = v1alpha1.Pause{By: "opkit",
		Reason: "the object is gone, and its pause with it (nothing is left to resume): its delete handlers run"}.Value()
	obj.SetAnnotations(annotations)
}

// operatorPause is the pause of the whole operator: the annotation
// v1alpha1.PauseAnnotation on its Operator, which the engine's Operator
// reconcile hands to the runner (PauseOperator). While it holds, no
// handler of any of the operator's objects starts, as if each carried
// the annotation, and no operator-wide schedule's slot runs.
type operatorPause struct {
	mu sync.Mutex
	operatorPauseState
	// changed is closed, and replaced, at each change.
	changed chan struct{}
}

// operatorPauseState is the operator's pause as last read.
type operatorPauseState struct {
	paused bool
	// value is the Operator's PauseAnnotation while paused.
	value string
	// resumed is the Operator's ResumedAnnotation as last seen: who
	// resumed it, named in its objects' records of the resume.
	resumed string
}

// set changes the pause; false when nothing changed.
func (p *operatorPause) set(value string, paused bool, resumed string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !paused {
		value = ""
	}
	if resumed == "" {
		resumed = p.resumed // the annotation is removed once read: the resume keeps it
	}
	changed := p.paused != paused || p.value != value
	p.operatorPauseState = operatorPauseState{paused: paused, value: value, resumed: resumed}
	if changed && p.changed != nil {
		close(p.changed)
		p.changed = nil
	}
	return changed
}

// get returns the pause, and a channel closed at its next change.
func (p *operatorPause) get() (operatorPauseState, <-chan struct{}) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.changed == nil {
		p.changed = make(chan struct{})
	}
	return p.operatorPauseState, p.changed
}

// PauseOperator sets the operator's own pause, as its Operator's
// annotations say: value and paused are its v1alpha1.PauseAnnotation,
// resumed its v1alpha1.ResumedAnnotation ("" for none). When the pause
// changes, every object the runner knows is reconciled again, to record
// it and, on a resume, to run what came due meanwhile; it returns
// whether it changed.
func (rn *Runner) PauseOperator(value string, paused bool, resumed string) bool {
	if !rn.paused.set(value, paused, resumed) {
		return false
	}
	rn.WakeAll()
	return true
}

// OperatorPaused returns who paused the whole operator and why, and
// whether it is paused.
func (rn *Runner) OperatorPaused() (v1alpha1.Pause, bool) {
	st, _ := rn.paused.get()
	return v1alpha1.ReadRequest(st.value), st.paused
}

// WaitResumed waits while the operator is paused; false when ctx ended
// first.
func (rn *Runner) WaitResumed(ctx context.Context) bool {
	for {
		st, changed := rn.paused.get()
		if !st.paused {
			return true
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return false
		}
	}
}

// recordPause records one pause or resume (trigger) of cr's handlers by
// p: an Event, and a record in the archive whose log says why. operator
// names the operator when the pause is its Operator's, of all its objects;
// "" for the object's own. An archive that cannot record it is reported
// in a Warning Event; the pause itself holds.
//
// Each record has a key, <life>/pause/<n>, n counting the object's
// records (st.PauseRecords): one that the archive holds already was made
// by an engine killed before it wrote st, and is not made again, nor its
// Event posted. The record and st are not written at once, so that the
// key, not the order of the writes, makes each recorded once.
func (rn *Runner) recordPause(ctx context.Context, cr *unstructured.Unstructured, st *cause.State, trigger string, p v1alpha1.Pause, operator string) {
	st.PauseRecords++
	key := fmt.Sprintf("%s/pause/%d", st.Life(cr.GetUID()), st.PauseRecords)
	if done, err := rn.archive.Succeeded(ctx, key); err == nil && done {
		return
	}
	by := request.Pause.Who(p.By)
	what := "paused"
	if trigger == v1alpha1.TriggerResumed {
		what = "resumed"
	}
	sentence := fmt.Sprintf("handlers %s by %s", what, by)
	if operator != "" {
		sentence = fmt.Sprintf("handlers %s with all of operator %s's, by %s", what, operator, by)
	}
	if p.Reason != "" {
		sentence += ": " + p.Reason
	}
	k := request.Pause
	if trigger == v1alpha1.TriggerResumed {
		k = request.Resume
	}
	r := k.Record(rn.def.Operator.Name, cr, p.By)
	r.Key = key
	rn.events.Eventf(cr, nil, corev1.EventTypeNormal, k.Taken, runAction(r.ID), "%s (run %s)", sentence, rn.runRef(r.ID))
	log := sentence
	if p.At != "" {
		log += " (asked at " + p.At + ")"
	}
	k.Keep(ctx, rn.archive, rn.events, cr, r, log+".\n", sentence)
}
