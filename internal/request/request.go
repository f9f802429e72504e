// Package request is a person's request made through the Kubernetes API:
// opkit retry, rerun, pause and resume (of an object or of a whole
// operator), schedule run (run now), events redeliver, decide, and
// rollout continue and undo, and the console's buttons that write the
// same.
//
// Every kind follows one protocol, whichever package acts on it:
//
//   - It travels on what it is about — an annotation on the object or the
//     Operator (Kind.Annotation), or an object of its own (a Redelivery, a
//     Rollout's spec.request) — so that who may ask is who may write that
//     (Kubernetes RBAC), and it says who asked, why and when (by, reason,
//     at: v1alpha1.Request and the request types that embed the same).
//   - Only the replica that acts takes it (the leader, or the engine
//     running the operator), and takes it once: an annotation is removed
//     with a patch guarded by the value read (Remove, RemovePatch), so
//     that a newer request written meanwhile is not lost; one on a
//     watched object, which opkit never writes, is remembered as answered
//     in the object's handler record instead.
//   - It is answered where the person looks: an Event on the object (the
//     kind's Taken, Failed or Refused reason, under its Action), or the
//     status of its own object; a refusal says why, in words that name
//     the command to use instead.
//   - What it changed in what runs is recorded in the run archive: as
//     the run it starts (a re-run, a run now, a redelivery's runs, with
//     the person as the run's actor), or, when it starts none (a retry, a
//     pause, a resume), as a record of the kind's Handler (Record, Keep),
//     finished as it starts. An archive that cannot record it is said in a
//     Warning Event; the request itself holds.
//
// Kinds lists the kinds; the packages that act on each are named there.
package request

import (
	"context"
	"encoding/json"
	"strings"
	"time"

	"go.opentelemetry.io/otel/attribute"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/opkit-dev/opkit/api/v1alpha1"
	"github.com/opkit-dev/opkit/internal/archive"
	"github.com/opkit-dev/opkit/internal/cause"
	"github.com/opkit-dev/opkit/internal/statemachine"
	"github.com/opkit-dev/opkit/internal/tracing"
)

// Kind is one kind of request: where it travels, the command that makes
// it, the Events that answer it, and the archive's record of it.
type Kind struct {
	// Name is the request, as messages say it ("retry", "re-run").
	Name string
	// Command is the CLI that makes it.
	Command string
	// Annotation carries it; a run now's is this prefix and the handler's
	// name; "" for a request that is an object of its own.
	Annotation string
	// Action is the action of the Events that answer it.
	Action string
	// Taken, Failed and Refused are the reasons of those Events: taken
	// (a Normal Event), taken and failed, refused (Warning Events); ""
	// where it is answered otherwise (Answered says how).
	Taken, Failed, Refused string
	// Answered says where the answer is when it is not an Event.
	Answered string
	// Handler and Trigger name the archive's record of a request that
	// starts no run of its own ("" for one whose runs are its record).
	Handler, Trigger string
	// By names the package that acts on it.
	By string
}

// The kinds of request.
var (
	Retry = Kind{Name: "retry", Command: "opkit retry", Annotation: v1alpha1.RetryAnnotation, Action: "Retry", Taken: "RetryRequested",
		Handler: v1alpha1.RetryHandler, Trigger: v1alpha1.TriggerRetry, By: "run"}
	Rerun = Kind{Name: "re-run", Command: "opkit rerun", Annotation: v1alpha1.RerunAnnotation, Action: "Rerun",
		Taken: v1alpha1.EventRerunStarted, Refused: v1alpha1.EventRerunRefused, By: "run"}
	Pause = Kind{Name: "pause", Command: "opkit pause", Annotation: v1alpha1.PauseAnnotation, Action: "Pause", Taken: "Paused",
		Handler: v1alpha1.PauseHandler, Trigger: v1alpha1.TriggerPaused, By: "run"}
	Resume = Kind{Name: "resume", Command: "opkit resume", Annotation: v1alpha1.ResumedAnnotation, Action: "Pause", Taken: "Resumed",
		Handler: v1alpha1.PauseHandler, Trigger: v1alpha1.TriggerResumed, By: "run"}
	PauseOperator = Kind{Name: "pause of a whole operator", Command: "opkit pause --operator OP --all", Annotation: v1alpha1.PauseAnnotation,
		Action: "Pause", Taken: "OperatorPaused", By: "engine (each object's pause: run)"}
	ResumeOperator = Kind{Name: "resume of a whole operator", Command: "opkit resume --operator OP --all", Annotation: v1alpha1.ResumedAnnotation,
		Action: "Pause", Taken: "OperatorResumed", By: "engine (each object's resume: run)"}
	RunNow = Kind{Name: "run now", Command: "opkit schedule run", Annotation: v1alpha1.RunNowAnnotationPrefix, Action: "RunNow",
		Taken: "RanNow", Failed: "RunNowFailed", Refused: "RunNowRefused", By: "calendar"}
	Decide = Kind{Name: "decision", Command: "opkit decide", Annotation: v1alpha1.DecisionAnnotation, Action: "Decide",
		Taken: statemachine.EventDecided, Refused: statemachine.EventDecisionRefused, By: "lifecycle"}
	Redeliver = Kind{Name: "redelivery", Command: "opkit events redeliver", Answered: "the Redelivery's status: Accepted, with the new delivery record, or Refused, with the reason", By: "delivery"}
	Continue  = Kind{Name: "rollout continue", Command: "opkit rollout continue", Answered: "the Rollout's status.reason", By: "rollout"}
	Undo      = Kind{Name: "rollout undo", Command: "opkit rollout undo", Answered: "the Rollout's status.reason", By: "rollout"}
)

// Kinds are every kind of request, in the order docs/architecture.md
// lists them.
var Kinds = []Kind{Retry, Rerun, Pause, Resume, PauseOperator, ResumeOperator, RunNow, Decide, Redeliver, Continue, Undo}

// Who names who asked, for a message: by, or someone, as the kind's
// annotation names nobody (a value written by hand; blank names nobody
// too).
func (k Kind) Who(by string) string {
	if strings.TrimSpace(by) != "" {
		return by
	}
	switch {
	case k.Annotation == "":
		return "someone"
	case strings.HasSuffix(k.Annotation, "/"):
		return "someone (the request names nobody)"
	}
	return "someone (the annotation " + k.Annotation + " names nobody)"
}

// ReasonSuffix is ": reason", to follow who asked for something in a
// message, or "" for no reason.
func ReasonSuffix(reason string) string {
	if reason == "" {
		return ""
	}
	return ": " + reason
}

// Answer posts the Event that answers a request of kind k on obj: a
// Warning when reason is k.Failed or k.Refused, else a Normal Event.
func (k Kind) Answer(rec events.EventRecorder, obj runtime.Object, reason, message string) {
	kind := corev1.EventTypeNormal
	if reason == k.Failed || reason == k.Refused {
		kind = corev1.EventTypeWarning
	}
	rec.Eventf(obj, nil, kind, reason, k.Action, "%s", cause.Truncate(message))
}

// RemovePatch is a JSON patch that removes the annotation name from an
// object if its value is still value: the API server refuses it
// (Invalid) when the annotation changed since it was read, so that a
// newer request written meanwhile is not lost. The value is encoded as
// JSON, whatever it holds: one set by hand may hold what Go's quoting
// would not encode as JSON, and a patch that never applies would leave
// the request forever.
func RemovePatch(name, value string) []byte {
	path := "/metadata/annotations/" + strings.NewReplacer("~", "~0", "/", "~1").Replace(name)
	patch, _ := json.Marshal([]map[string]string{{"op": "test", "path": path, "value": value}, {"op": "remove", "path": path}}) // strings: it cannot fail
	return patch
}

// Remove takes a request: it removes the annotation name from obj on the
// API server, unless its value is no longer value (a newer request,
// which the next read takes) or obj is gone; those two are not errors.
func Remove(ctx context.Context, c client.Writer, obj client.Object, name, value string) error {
	err := c.Patch(ctx, obj, client.RawPatch(types.JSONPatchType, RemovePatch(name, value)))
	if apierrors.IsNotFound(err) || apierrors.IsInvalid(err) {
		return nil
	}
	return err
}

// Record is the archive's record of a request of kind k made on obj that
// starts no run of its own (k.Handler, a name no handler of an Operator
// has): finished as it starts, with the person (actor; "" when nobody is
// named) as its actor, trigger k.Trigger, and the key
// <uid>/<trigger>/<id> (a caller that must make it once sets a key of its
// own).
func (k Kind) Record(operator string, obj *unstructured.Unstructured, actor string) *archive.Run {
	r := archive.NewRun(operator, k.Handler, strings.ToLower(k.Action), k.Trigger, obj, time.Now()).Instant()
	r.Actor, r.Key = actor, string(obj.GetUID())+"/"+r.Trigger+"/"+r.ID
	return r
}

// Keep inserts r, a Record, with its log; when the archive cannot, a
// Warning Event on obj says that what sentence tells was not recorded.
// It is kept also when ctx is done: seen, a request is recorded, also
// while the engine stops.
//
// The request is a span of the reconcile that took it (package tracing),
// whose traceparent its record keeps.
func (k Kind) Keep(ctx context.Context, a archive.Recorder, rec events.EventRecorder, obj runtime.Object, r *archive.Run, log, sentence string) {
	ctx, span := tracing.Tracer().Start(tracing.Ensure(ctx), "request "+k.Action)
	defer span.End()
	if span.IsRecording() {
		span.SetAttributes(attribute.String("opkit.operator", r.Operator), attribute.String("opkit.request", k.Action),
			attribute.String("opkit.actor", r.Actor), attribute.String("opkit.run.id", r.ID))
	}
	r.Trace, _ = tracing.Traceparent(ctx)
	if err := archive.Keep(ctx, a, r, log); err != nil {
		rec.Eventf(obj, nil, corev1.EventTypeWarning, "ArchiveFailed", k.Action, "%s: not recorded in the archive: %v", sentence, err)
	}
}
