// Package v1alpha1 is the public contract of opkit: the Operator resource
// (group opkit.dev, version v1alpha1) that declares an operator. The Go types
// here mirror the CRD schema built by [CustomResourceDefinition]; both are
// written by hand, with no code generation and no markers.
//
// An Operator names the custom resource it owns (spec.resource, from which
// opkit builds a CRD), the child objects it keeps converged
// (spec.children, templates with ${...} CEL expressions), the status
// fields it derives (spec.status) and its handlers (spec.handlers). See
// docs/operators.md and docs/handlers.md for every field.
package v1alpha1

import (
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// Group and version of the Operator resource.
const (
	Group   = "opkit.dev"
	Version = "v1alpha1"
	Kind    = "Operator"
)

// SchemeGroupVersion is opkit.dev/v1alpha1.
var SchemeGroupVersion = schema.GroupVersion{Group: Group, Version: Version}

// AddToScheme registers Operator and OperatorList.
func AddToScheme(s *runtime.Scheme) error {
	s.AddKnownTypes(SchemeGroupVersion, &Operator{}, &OperatorList{})
	metav1.AddToGroupVersion(s, SchemeGroupVersion)
	return nil
}

// Operator declares one operator: a custom resource, its children and its
// status. It is cluster-scoped.
type Operator struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   OperatorSpec   `json:"spec"`
	Status OperatorStatus `json:"status,omitempty"`
}

// OperatorList is a list of Operators.
type OperatorList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []Operator `json:"items"`
}

// OperatorSpec is what an operator owns and does. It reacts to one of
// three things: the custom resource it owns (Resource), objects of any
// kind it watches but does not own (Watch), or, with neither, time alone:
// its handlers are then operator-wide schedules (a calendar).
type OperatorSpec struct {
	// Resource is the custom resource the operator owns; opkit installs its
	// CRD. At most one of Resource and Watch is set.
	Resource Resource `json:"resource,omitzero"`
	// Watch selects objects of any kind, which the operator neither owns
	// nor writes to: its handlers run for each of them (create, update,
	// delete, when, resume, schedule); their handler state is kept in the
	// run archive, not in the objects.
	Watch *Watch `json:"watch,omitempty"`
	// Related are objects each custom resource refers to but the operator
	// does not own (a Deployment named in its spec, the Pods with its
	// label): watched, so that their changes reconcile the custom resources
	// that refer to them, and read as related.<id> by children, status and
	// handlers. opkit never writes to them.
	Related []Related `json:"related,omitempty"`
	// Children are the objects kept converged for each custom resource, in
	// dependency order.
	Children []Child `json:"children,omitempty"`
	// Status maps a field of the custom resource's .status to a CEL
	// template evaluated after the children are applied, for example
	// phase: "${children.pod.status.phase}".
	Status map[string]string `json:"status,omitempty"`
	// Handlers are side effects run for each custom resource on create,
	// update, delete, engine start or a schedule, or for the operator on
	// an event from one of its sources; each run is recorded in the run
	// archive.
	Handlers []Handler `json:"handlers,omitempty"`
	// Sources are where the operator hears events from outside the
	// cluster: signed webhook deliveries (GitHub's, or any sender's), on
	// POST /hooks/<operator>/<source> of the engine's hooks listener. An
	// accepted delivery runs the handlers on event and applies the
	// source's object; every delivery, accepted or refused, is kept in
	// the run archive.
	Sources []Source `json:"sources,omitempty"`
	// States declare the life cycle of each custom resource: a finite
	// state machine whose current state the engine keeps in
	// status.state. Exactly one state is Initial. A transition happens
	// when its guard holds, when a state's timeout expires, or, from a
	// state that NeedsPerson, when a person decides (opkit decide); each
	// is recorded in the run archive and as an Event. Handlers on enter
	// and exit run once per transition. See docs/states.md.
	States []State `json:"states,omitempty"`
	// Rollout makes a change of this definition reach the custom
	// resources in steps instead of all at once: the objects a step names
	// move to the new definition, and the next step waits until they have
	// been healthy for Settle; one that goes Degraded or Stalled, or whose
	// handler fails, pauses the rollout until a person continues it or
	// undoes it (opkit rollout). The objects not moved yet stay on the
	// previous definition: its children, status and handlers. Only an
	// operator with a custom resource (spec.resource) rolls out in steps.
	// See docs/changing-operators.md.
	Rollout *Rollout `json:"rollout,omitempty"`
}

// Scope of a custom resource.
const (
	NamespaceScoped = "Namespaced"
	ClusterScoped   = "Cluster"
)

// Resource describes the custom resource and so its CRD.
type Resource struct {
	// Group is the API group, a DNS subdomain with at least one dot.
	Group string `json:"group"`
	// Kind is the CamelCase kind, e.g. Printer.
	Kind string `json:"kind"`
	// Names are derived from Kind unless given.
	Names Names `json:"names,omitempty"`
	// Scope is Namespaced or Cluster. Defaults to Namespaced.
	Scope string `json:"scope,omitempty"`
	// Versions served; exactly one is the storage version.
	Versions []ResourceVersion `json:"versions"`

	// ReadVersion is the version the operator's children, status
	// expressions and handlers are written against: the engine reads,
	// watches and patches custom resources at this version (the API
	// server converts them from the storage version), and self is typed
	// by its schema. A served version. Defaults to the storage version.
	ReadVersion string `json:"readVersion,omitempty"`
}

// Names are the resource's names. Each defaults from the kind: plural and
// singular are the lower-cased kind (plural with an "s", or "es" after s, x,
// z, ch, sh, or "ies" for a consonant + y), listKind is <Kind>List.
type Names struct {
	Plural     string   `json:"plural,omitempty"`
	Singular   string   `json:"singular,omitempty"`
	ShortNames []string `json:"shortNames,omitempty"`
	ListKind   string   `json:"listKind,omitempty"`
	Categories []string `json:"categories,omitempty"`
}

// ResourceVersion is one served version of the custom resource.
type ResourceVersion struct {
	// Name, e.g. v1 or v1alpha1.
	Name string `json:"name"`
	// Served says whether the API serves it. Defaults to true.
	Served *bool `json:"served,omitempty"`
	// Storage marks the version stored in etcd. Defaults to true when there
	// is a single version.
	Storage bool `json:"storage,omitempty"`
	// Schema is the OpenAPI v3 schema of .spec. The status schema is opkit's
	// and the fields of OperatorSpec.Status.
	Schema *apiextensionsv1.JSONSchemaProps `json:"schema,omitempty"`
	// StatusSchema types the status fields handlers write: an OpenAPI v3
	// object schema whose properties join .status, which stays open to
	// fields not declared. opkit types its own fields and those of
	// OperatorSpec.Status. The API server refuses a handler's result that
	// gives a declared field another type.
	StatusSchema *apiextensionsv1.JSONSchemaProps `json:"statusSchema,omitempty"`
	// PrinterColumns are shown by `kubectl get`. An Age column is added.
	PrinterColumns []apiextensionsv1.CustomResourceColumnDefinition `json:"printerColumns,omitempty"`
	// Immutable lists the fields that never change once an object is
	// created, as dotted paths from the object's root under spec
	// (spec.region, spec.storage.class): neither their value nor whether
	// they are set. Each path names a field of Schema, through objects
	// only (not the items of a list or the values of a map). opkit turns
	// each into x-kubernetes-validations transition rules that the API
	// server enforces on every update, with the message "<path> is
	// immutable: ...". Defaults to none.
	Immutable []string `json:"immutable,omitempty"`
	// Scale enables the scale subresource (kubectl scale, and a
	// HorizontalPodAutoscaler) with these paths: specReplicasPath an
	// integer field of Schema, statusReplicasPath an integer status field
	// the operator writes (spec.status or StatusSchema), and the optional
	// labelSelectorPath a string field, usually a status field holding
	// the label selector of the replicas' Pods. Each is checked at load.
	Scale *apiextensionsv1.CustomResourceSubresourceScale `json:"scale,omitempty"`

	// Conversion declares how objects of this version convert to and
	// from the storage version (see VersionConversion). Only on a version
	// that is not the storage version. When any version declares one, the
	// CRD's conversion strategy is Webhook, served by the engine;
	// otherwise it is None (the API server only rewrites apiVersion).
	Conversion *VersionConversion `json:"conversion,omitempty"`
}

// VersionConversion is how one version converts to and from the storage
// version, the hub: a conversion from version A to B goes A -> storage
// -> B. Fields not mapped carry over by the same path; what the other
// version's schema cannot hold is kept in the ConversionAnnotationPrefix
// annotation of the converted object and restored when it is converted
// back, so that a round trip loses nothing. An empty conversion ({})
// converts by carrying fields over alone.
type VersionConversion struct {
	// Fields map fields of this version to fields of the storage version,
	// each with a CEL expression each way.
	Fields []FieldConversion `json:"fields,omitempty"`
}

// FieldConversion maps one field of a version to one of the storage
// version. ToStorage and FromStorage are given together or not at all.
type FieldConversion struct {
	// Field is the field's path in this version, from the object's root:
	// spec.size. A field of objects, not inside a list or a map.
	Field string `json:"field"`
	// StorageField is its path in the storage version, e.g.
	// spec.resources.memory. Defaults to Field (a transform in place).
	StorageField string `json:"storageField,omitempty"`
	// ToStorage is a CEL expression giving the storage version's value
	// from self (this version's value) and object (this version's whole
	// object), e.g. "self == 'small' ? '512Mi' : '2Gi'". Defaults to self
	// (a rename). A null result leaves the field out.
	ToStorage string `json:"toStorage,omitempty"`
	// FromStorage gives this version's value from self (the storage
	// version's value) and object (the storage version's whole object).
	// Defaults to self.
	FromStorage string `json:"fromStorage,omitempty"`
}

// IsZero reports whether no resource is declared.
func (r Resource) IsZero() bool {
	return r.Group == "" && r.Kind == "" && len(r.Versions) == 0 && r.Scope == "" && r.ReadVersion == "" && r.Names.Plural == "" &&
		r.Names.Singular == "" && r.Names.ListKind == "" && len(r.Names.ShortNames) == 0 && len(r.Names.Categories) == 0
}

// Watch selects the objects of one kind an operator reacts to without
// owning them: those in Namespaces (all when empty) that carry the
// Selector's labels and for which Filter holds.
type Watch struct {
	// APIVersion and Kind are the kind, e.g. apps/v1 Deployment; neither
	// may be an expression.
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	// Namespaces limits the watch to these namespaces; the engine then
	// needs to list and watch the kind in those namespaces only. Defaults
	// to every namespace (and is empty for a cluster-scoped kind).
	Namespaces []string `json:"namespaces,omitempty"`
	// Selector selects by labels, as a Deployment's selector does. The
	// API server filters: objects without the labels never reach opkit.
	Selector *metav1.LabelSelector `json:"selector,omitempty"`
	// Filter is a CEL condition over self (the object); an object for
	// which it is false is treated as not watched: an object that stops
	// matching is forgotten, no delete handler runs for it.
	Filter string `json:"filter,omitempty"`
	// Finalizer makes opkit hold its finalizer (opkit.dev/<operator>) on
	// each watched object, so that the delete handlers run before the
	// object is gone, with the object as it is then. It is opkit's only
	// write to watched objects, and needs patch rights on the kind; while
	// no engine runs, deleting a watched object waits for one, and an
	// object that stops matching has the finalizer removed. Defaults to
	// false: the delete handlers run after the object is gone.
	Finalizer bool `json:"finalizer,omitempty"`
}

// Related names, for each custom resource, an object or a set of objects
// of one kind that it refers to. Exactly one of Name and Selector is set.
type Related struct {
	// ID names it in expressions: related.<id>. A lower-case identifier,
	// unique among the related objects.
	ID string `json:"id"`
	// APIVersion and Kind are its kind, e.g. apps/v1 Deployment; neither
	// may be an expression.
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	// Name is one object, a template over self (e.g.
	// "${self.spec.deployment}"); related.<id> is that object. An
	// expression reading it while it does not exist waits, as for a child
	// not yet created.
	Name string `json:"name,omitempty"`
	// Selector selects by labels, each value a template over self;
	// related.<id> is the list of matching objects, sorted by name, empty
	// when none match.
	Selector map[string]string `json:"selector,omitempty"`
	// Namespace, a template over self, is where it is; it defaults to the
	// custom resource's namespace. A cluster-scoped kind has none.
	Namespace string `json:"namespace,omitempty"`
	// Namespaces limits where the engine reads and watches this kind for
	// the reference: it lists and watches it in these namespaces only,
	// and needs the permission there alone; a reference that names
	// another namespace is an error of its custom resource, and nothing
	// there is read. Defaults to all namespaces.
	Namespaces []string `json:"namespaces,omitempty"`
}

// Child is one object templated for each custom resource.
type Child struct {
	// ID names the child in expressions: children.<id>. A lower-case
	// identifier, unique in the Operator.
	ID string `json:"id"`
	// Template is the object, with ${...} CEL expressions in its strings.
	// A string that is one expression takes the expression's type; in a
	// longer string each expression is turned into a string.
	Template apiextensionsv1.JSON `json:"template"`
	// IncludeWhen are CEL expressions; the child exists only while all are
	// true. Defaults to always.
	IncludeWhen []string `json:"includeWhen,omitempty"`
	// ReadyWhen are CEL expressions over the child (as "self"); the custom
	// resource is Ready when every child's are true. Defaults to exists.
	ReadyWhen []string `json:"readyWhen,omitempty"`
	// Recreate deletes and re-creates the child when its template changes a
	// field the API will not update (a Pod's spec). Defaults to false; opkit
	// also recreates when the API answers that a field is immutable.
	Recreate bool `json:"recreate,omitempty"`
}

// Triggers of a handler (Handler.On).
const (
	OnCreate   = "create"
	OnUpdate   = "update"
	OnDelete   = "delete"
	OnResume   = "resume"
	OnSchedule = "schedule"
	// OnWhen fires each time the handler's When condition becomes true.
	OnWhen = "when"
	// OnEvent fires for each accepted delivery of the handler's Sources.
	OnEvent = "event"
	// OnValidate makes the handler an admission check: the API server
	// asks it, through the engine's webhook, whether a create, update or
	// delete of a custom resource is allowed (Handler.Admission).
	OnValidate = "validate"
	// OnMutate makes the handler an admission mutation: it may change a
	// custom resource as it is created or updated (defaults a schema
	// cannot express), or deny it (Handler.Admission).
	OnMutate = "mutate"
	// OnEnter fires once each time the object enters one of the handler's
	// States (the initial state included), after the transition is
	// recorded.
	OnEnter = "enter"
	// OnExit fires once each time the object leaves one of the handler's
	// States, after the transition is recorded and before the new state's
	// enter handlers.
	OnExit = "exit"
)

// Handler is a side effect run for a custom resource. It has exactly one
// executor: Exec, Job or HTTP.
type Handler struct {
	// Name identifies the handler in runs, status and idempotency keys. A
	// DNS label, unique in the Operator.
	Name string `json:"name"`
	// On lists the triggers: create (no generation handled yet), update (a
	// newer generation), delete (the object is being deleted; opkit holds a
	// finalizer until the handler succeeds), resume (the engine started)
	// and schedule (see Schedule).
	On []string `json:"on"`
	// When is a CEL condition over self, children and related, for the
	// when trigger: the handler runs once each time it becomes true
	// (children.server.status.updatedReplicas == self.spec.replicas).
	When string `json:"when,omitempty"`
	// Fields restricts update to changes of these fields, as dotted paths
	// from the object's root (spec.replicas, spec.template). Defaults to
	// any change of the spec.
	Fields []string `json:"fields,omitempty"`
	// Schedule is required with the schedule trigger.
	Schedule *Schedule `json:"schedule,omitempty"`
	// States are the states whose entering (trigger enter) or leaving
	// (trigger exit) runs the handler; required with those triggers, and
	// only with them.
	States []string `json:"states,omitempty"`
	// Sources are the event sources whose accepted deliveries run the
	// handler, for the event trigger; defaults to all of them. A handler
	// on event runs for the operator, once per delivery, with the
	// delivery in its binding context: it has no other trigger.
	Sources []string `json:"sources,omitempty"`
	// Timeout bounds one run. Defaults to 5m.
	Timeout metav1.Duration `json:"timeout,omitzero"`
	// Retry is how failed runs are retried. Defaults to 5 attempts, 1s
	// initial delay doubling up to 5m, 10% jitter.
	Retry *Retry `json:"retry,omitempty"`
	// Admission is how the API server calls a handler on validate or
	// mutate (its only trigger); defaults as its fields say.
	Admission *Admission `json:"admission,omitempty"`

	// Exec runs a local command.
	Exec *ExecAction `json:"exec,omitempty"`
	// Job runs a Kubernetes Job per run.
	Job *JobAction `json:"job,omitempty"`
	// HTTP posts to a URL.
	HTTP *HTTPAction `json:"http,omitempty"`
}

// Schedule runs a handler periodically: for each object in an operator
// with a resource or a watch, or once per slot for the operator itself in
// an operator with neither. Exactly one of Every and Cron is set.
type Schedule struct {
	// Every is a Go duration (90s, 1h), at least 1s, or, per object, a
	// template over the object that gives one, e.g.
	// "${self.spec.everySeconds}s" or "${duration(self.spec.interval)}".
	// An operator-wide schedule's slots are the multiples of Every since
	// the Unix epoch, so that every engine agrees on them.
	Every string `json:"every,omitempty"`
	// Cron is a cron expression of five fields, in TimeZone.
	Cron string `json:"cron,omitempty"`
	// TimeZone is the IANA time zone of Cron, e.g. Europe/Prague.
	// Defaults to UTC.
	TimeZone string `json:"timeZone,omitempty"`
	// CatchUp is what an operator-wide schedule does with the slots it
	// missed while no engine ran: Skip them, or run Once for the latest
	// of them. Defaults to Once.
	CatchUp string `json:"catchUp,omitempty"`
}

// Admission is how the API server calls an admission handler (on
// validate or mutate) through the engine's webhook.
type Admission struct {
	// Operations are the requests the handler is asked about: CREATE,
	// UPDATE, DELETE. Defaults to CREATE and UPDATE.
	Operations []string `json:"operations,omitempty"`
	// FailurePolicy is the answer when the handler cannot give one (it
	// fails, hangs past Timeout, or the engine is unreachable): Fail
	// denies the request, Ignore allows it. Defaults to Fail.
	FailurePolicy string `json:"failurePolicy,omitempty"`
	// Timeout is how long the API server waits for the answer, 1s to
	// 30s; the engine answers a little before it. Defaults to 10s.
	Timeout metav1.Duration `json:"timeout,omitzero"`
	// MatchConditions are CEL conditions the API server evaluates before
	// calling the handler (over object, oldObject, request and
	// authorizer, as in a ValidatingWebhookConfiguration); the handler is
	// called only when all are true. At most 63 (opkit adds one).
	MatchConditions []MatchCondition `json:"matchConditions,omitempty"`
}

// MatchCondition is one condition of Admission.MatchConditions.
type MatchCondition struct {
	// Name identifies the condition in the API server's errors; a
	// qualified name, unique in the handler.
	Name string `json:"name"`
	// Expression is CEL giving a bool.
	Expression string `json:"expression"`
}

// Admission operations (Admission.Operations).
const (
	OperationCreate = "CREATE"
	OperationUpdate = "UPDATE"
	OperationDelete = "DELETE"
)

// Admission failure policies (Admission.FailurePolicy).
const (
	FailurePolicyFail   = "Fail"
	FailurePolicyIgnore = "Ignore"
)

// Catch-up policies of an operator-wide schedule (Schedule.CatchUp).
const (
	CatchUpSkip = "Skip"
	CatchUpOnce = "Once"
)

// Retry is the retry policy of a handler: exponential back-off per object.
type Retry struct {
	// MaxAttempts is the number of runs before the object is Stalled.
	// Defaults to 5.
	MaxAttempts int32 `json:"maxAttempts,omitempty"`
	// InitialDelay is the delay after the first failure. Defaults to 1s.
	InitialDelay metav1.Duration `json:"initialDelay,omitzero"`
	// MaxDelay caps the delay. Defaults to 5m.
	MaxDelay metav1.Duration `json:"maxDelay,omitzero"`
	// Factor multiplies the delay after each failure. Defaults to 2.
	Factor float64 `json:"factor,omitempty"`
	// Jitter adds up to this fraction of the delay at random. Defaults to
	// 0.1.
	Jitter *float64 `json:"jitter,omitempty"`
}

// EnvVar is an environment variable: a literal value, or one read from a
// Secret at each run.
type EnvVar struct {
	Name  string `json:"name"`
	Value string `json:"value,omitempty"`
	// ValueFrom reads the value from a Secret; it is never written to the
	// Operator, the archive, the binding context, Events or logs.
	ValueFrom *EnvVarSource `json:"valueFrom,omitempty"`
}

// EnvVarSource is where an environment variable's value comes from.
type EnvVarSource struct {
	// SecretKeyRef is one key of a Secret. Required.
	SecretKeyRef *SecretKeyRef `json:"secretKeyRef,omitempty"`
}

// SecretKeyRef names one key of a Secret. Namespace defaults to the
// object's (required for a cluster-scoped resource's exec handlers; a job
// handler reads Secrets of its Job's namespace only).
type SecretKeyRef struct {
	Namespace string `json:"namespace,omitempty"`
	Name      string `json:"name"`
	Key       string `json:"key"`
}

// ExecAction runs a process: argv only, never a shell. The binding context
// is its stdin, its result its stdout, its stderr the run's log. Without
// Image it runs on the engine's host; with Image, in a cluster, it runs in
// a warm runner Pod of that image, through opkit's agent.
type ExecAction struct {
	// Command is the argv. A relative path with a slash is resolved from
	// the directory of the definition's file (in a runner, from the
	// operator's files).
	Command []string `json:"command"`
	// Image is the container image the command runs in when the engine
	// runs in a cluster (python:3.12-slim): a runner Pod of that image
	// takes the runs. Without runners (opkit dev, a laptop) the command
	// runs on the engine's host, as without Image.
	Image string `json:"image,omitempty"`
	// Env is added to a minimal environment (PATH, HOME, LANG).
	Env []EnvVar `json:"env,omitempty"`
	// WorkingDir defaults to the definition file's directory, or the
	// engine's working directory for Operators read from the cluster.
	WorkingDir string `json:"workingDir,omitempty"`
	// ServiceAccount gives the process access to the cluster as this
	// ServiceAccount: a token requested for each run, valid a little past
	// its timeout, in a private kubeconfig file named by $KUBECONFIG.
	// Without it the process has no credentials.
	ServiceAccount *ServiceAccountRef `json:"serviceAccount,omitempty"`
	// Mode is Run (the default): a process per run, the binding context
	// its stdin, its stdout the result; or Serve: processes that outlive
	// runs, each taking a binding context per line on its stdin and
	// answering each with a result on one line of its stdout, one run at a
	// time (no fork per run). In a runner Pod (Image, in a cluster) each
	// run is a process of its own either way.
	Mode ExecMode `json:"mode,omitempty"`
	// Processes bounds the processes of a Serve handler running at once;
	// a run beyond them waits for one within its timeout. Defaults to 4.
	Processes int32 `json:"processes,omitempty"`
}

// ExecMode is how an exec handler's process lives: a run's, or many
// runs'.
type ExecMode string

// The modes of an exec handler.
const (
	ExecRun   ExecMode = "Run"
	ExecServe ExecMode = "Serve"
)

// ServiceAccountRef names a ServiceAccount. Namespace defaults to the
// object's; a cluster-scoped resource names it.
type ServiceAccountRef struct {
	Namespace string `json:"namespace,omitempty"`
	Name      string `json:"name"`
}

// JobAction runs a Kubernetes Job per run, in the custom resource's
// namespace, with restricted pod security.
type JobAction struct {
	// Namespace of the Job. Defaults to the object's; required for a
	// cluster-scoped resource.
	Namespace string   `json:"namespace,omitempty"`
	Image     string   `json:"image"`
	Command   []string `json:"command,omitempty"`
	Args      []string `json:"args,omitempty"`
	Env       []EnvVar `json:"env,omitempty"`
	// ServiceAccountName is the pod's service account. Its token is mounted
	// only with AutomountServiceAccountToken.
	ServiceAccountName           string `json:"serviceAccountName,omitempty"`
	AutomountServiceAccountToken bool   `json:"automountServiceAccountToken,omitempty"`
	// TTLSecondsAfterFinished deletes the finished Job. Defaults to 3600.
	TTLSecondsAfterFinished *int32 `json:"ttlSecondsAfterFinished,omitempty"`
}

// HTTPAction posts the binding context to a URL; the response body is the
// result.
type HTTPAction struct {
	URL string `json:"url"`
	// CABundle is PEM certificates trusted for an https URL, in addition to
	// the system's.
	CABundle string `json:"caBundle,omitempty"`
	// TokenSecret names a Secret key whose value is sent as a bearer token.
	TokenSecret *SecretKeySelector `json:"tokenSecret,omitempty"`
}

// SecretKeySelector names one key of a Secret.
type SecretKeySelector struct {
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	Key       string `json:"key"`
}

// OperatorStatus reports the operator's state.
type OperatorStatus struct {
	// ObservedGeneration is the generation last acted on.
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// Conditions: Ready (CRD established and controller running) and
	// Degraded (the definition is invalid, with the reason).
	Conditions []metav1.Condition `json:"conditions,omitempty"`
	// CRD is the name of the installed CustomResourceDefinition.
	CRD string `json:"crd,omitempty"`
}
