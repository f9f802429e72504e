// Package v1alpha1 is the read-only API the run archive is served as to
// kubectl, k9s and every Kubernetes client: group runs.opkit.dev, version
// v1alpha1, resources runs (with the subresource runs/log) and
// deliveries, both namespaced. Nothing here is stored in etcd: an
// aggregated API server (internal/runsapi) answers from the archive, so
// the objects can be read (get, list, watch) and never written.
//
// A Run is named by its run id. Its namespace is its object's; the runs
// of an object with none (a cluster-scoped object, an operator-wide
// schedule) and every Delivery are in the namespace the server is
// configured with: the engine's. The labels in [RunLabels] let kubectl
// select runs (-l); the fields in [RunFields] and [DeliveryFields] are
// those a field selector may name.
//
// The types are written by hand, like the Operator's, with no code
// generation.
package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// Group and version of the runs API; the kinds it serves.
const (
	Group        = "runs.opkit.dev"
	Version      = "v1alpha1"
	RunKind      = "Run"
	DeliveryKind = "Delivery"
)

// SchemeGroupVersion is runs.opkit.dev/v1alpha1.
var SchemeGroupVersion = schema.GroupVersion{Group: Group, Version: Version}

// The labels of a Run, each the value of a field of the run, set when the
// value is a valid label value (an object's name longer than 63
// characters is not). A label selector may name them with = (or ==, or in
// with one value).
const (
	LabelOperator = "opkit.dev/operator"
	LabelHandler  = "opkit.dev/handler"
	LabelTrigger  = "opkit.dev/trigger"
	// LabelObject is the name of the run's object (without its namespace:
	// that is the Run's).
	LabelObject  = "opkit.dev/object"
	LabelOutcome = "opkit.dev/outcome"
	// LabelSource is a Delivery's: the webhook source it came in on.
	LabelSource = "opkit.dev/source"
)

// RunLabels are the labels a Run has and a selector of runs may name;
// DeliveryLabels a Delivery's.
var (
	RunLabels      = []string{LabelOperator, LabelHandler, LabelTrigger, LabelObject, LabelOutcome}
	DeliveryLabels = []string{LabelOperator, LabelSource, LabelOutcome}
)

// RunFields are the fields a field selector of runs may name, with =;
// DeliveryFields those of deliveries.
var (
	RunFields      = []string{"metadata.name", "metadata.namespace", "status.outcome", "spec.handler", "spec.operator", "spec.trigger", "spec.object.kind", "status.failed"}
	DeliveryFields = []string{"metadata.name", "metadata.namespace", "status.outcome", "spec.operator", "spec.source"}
)

// AddToScheme registers the kinds of runs.opkit.dev/v1alpha1.
func AddToScheme(s *runtime.Scheme) error {
	s.AddKnownTypes(SchemeGroupVersion, &Run{}, &RunList{}, &Delivery{}, &DeliveryList{})
	metav1.AddToGroupVersion(s, SchemeGroupVersion)
	return nil
}

// Run is one execution of one handler for one object, as the archive
// keeps it. Its creationTimestamp is when it started; its
// resourceVersion changes when it finishes (see internal/runsapi for
// what a watch may resume from).
type Run struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   RunSpec   `json:"spec"`
	Status RunStatus `json:"status"`
}

// RunSpec is what ran, for what and why.
type RunSpec struct {
	Operator string `json:"operator"`
	Handler  string `json:"handler"`
	// Action is the handler's executor: exec, job or http.
	Action string `json:"action,omitempty"`
	// Trigger is what caused the run: create, update, delete, resume,
	// schedule, when, event, requeue, rerun, validate, mutate, or a
	// state machine's.
	Trigger string          `json:"trigger"`
	Object  ObjectReference `json:"object"`
	// Generation is the object's generation the run handled.
	Generation int64 `json:"generation,omitempty"`
	// Key is the idempotency key, <uid>/<generation>/<handler>.
	Key     string `json:"key,omitempty"`
	Attempt int    `json:"attempt"`
	// Actor is the person whose decision caused the run (a state
	// transition decided, a re-run asked for).
	Actor string `json:"actor,omitempty"`
	// RerunOf is the run this one runs again, and Reason why it was asked.
	RerunOf string `json:"rerunOf,omitempty"`
	Reason  string `json:"reason,omitempty"`
	// Trace is the W3C traceparent of the run's span: its trace id finds
	// the run in a tracing backend (docs/observability.md).
	Trace string `json:"trace,omitempty"`
}

// ObjectReference names the object a run was for. Namespace is empty for
// a cluster-scoped object and for an operator-wide schedule's run (kind
// Operator, name the operator's).
type ObjectReference struct {
	APIVersion string `json:"apiVersion,omitempty"`
	Kind       string `json:"kind,omitempty"`
	Namespace  string `json:"namespace,omitempty"`
	Name       string `json:"name"`
	UID        string `json:"uid,omitempty"`
}

// RunStatus is how the run went.
type RunStatus struct {
	// Outcome is Running, Succeeded, Failed (retried at NextRetryAt),
	// GaveUp, Cancelled, Skipped, Allowed or Denied.
	Outcome    string       `json:"outcome"`
	StartedAt  metav1.Time  `json:"startedAt"`
	FinishedAt *metav1.Time `json:"finishedAt,omitempty"`
	Error      string       `json:"error,omitempty"`
	// NextRetryAt is when a Failed run is tried again.
	NextRetryAt *metav1.Time `json:"nextRetryAt,omitempty"`
	// Runner is the runner Pod that ran the run (an exec handler with an
	// image, in a cluster).
	Runner string `json:"runner,omitempty"`
	// LogBytes is the size of the log the handler wrote; LogTruncated
	// says the archive kept its start and end only (runs/log marks the
	// cut).
	LogBytes     int64 `json:"logBytes,omitempty"`
	LogTruncated bool  `json:"logTruncated,omitempty"`
}

// RunList is a list of Runs, newest first.
type RunList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []Run `json:"items"`
}

// Delivery is the record of one webhook delivery an operator received,
// accepted or refused, and what its handling caused. Its payload is not
// served (opkit events shows it, redacted).
type Delivery struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   DeliverySpec   `json:"spec"`
	Status DeliveryStatus `json:"status"`
}

// DeliverySpec is what came in.
type DeliverySpec struct {
	Operator string `json:"operator"`
	// Source is the operator's webhook source it came in on.
	Source string `json:"source"`
	// DeliveryID is the sender's id of the delivery.
	DeliveryID string `json:"deliveryId,omitempty"`
	// Event is the kind of event the sender says it is.
	Event            string `json:"event,omitempty"`
	PayloadBytes     int64  `json:"payloadBytes"`
	PayloadTruncated bool   `json:"payloadTruncated,omitempty"`
	// RedeliveryOf is the delivery a redelivery on purpose handles again,
	// RedeliveredBy who asked and RedeliveryReason why.
	RedeliveryOf     string `json:"redeliveryOf,omitempty"`
	RedeliveredBy    string `json:"redeliveredBy,omitempty"`
	RedeliveryReason string `json:"redeliveryReason,omitempty"`
}

// DeliveryStatus is where the delivery stands.
type DeliveryStatus struct {
	// Outcome is Pending, Handled, Failed or Refused.
	Outcome string `json:"outcome"`
	// Reason says why it was Refused or Failed, or why a handler turned
	// it down.
	Reason     string       `json:"reason,omitempty"`
	ReceivedAt metav1.Time  `json:"receivedAt"`
	HandledAt  *metav1.Time `json:"handledAt,omitempty"`
	// Runs are the runs its handling started; Objects the objects it
	// created or patched ("Kind namespace/name").
	Runs    []string `json:"runs,omitempty"`
	Objects []string `json:"objects,omitempty"`
}

// DeliveryList is a list of Deliveries, newest first.
type DeliveryList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []Delivery `json:"items"`
}
