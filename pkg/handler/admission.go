package handler

// AdmissionContext is the input of an admission call (a handler on
// OnValidate or OnMutate, docs/admission.md). O is the custom resource's
// type.
type AdmissionContext[O any] struct {
	Operator string `json:"operator"`
	Handler  string `json:"handler"`
	// Trigger is OnValidate or OnMutate.
	Trigger Trigger `json:"trigger"`
	// RunID is the call's id in the archive (opkit logs RUN).
	RunID       string `json:"runId"`
	Traceparent string `json:"traceparent,omitempty"`
	// Operation is "CREATE", "UPDATE" or "DELETE".
	Operation string `json:"operation"`
	// Object is the object as it would be stored: nil for a DELETE.
	Object *O `json:"object"`
	// OldObject is the object as stored: nil for a CREATE.
	OldObject *O `json:"oldObject"`
	// UserInfo is who asks, as the API server authenticated them.
	UserInfo UserInfo `json:"userInfo"`
	// DryRun says the request writes nothing (kubectl --dry-run=server);
	// a handler has no side effects either way.
	DryRun  bool             `json:"dryRun"`
	Request AdmissionRequest `json:"request"`
}

// UserInfo is the user an admission request is made by.
type UserInfo struct {
	Username string              `json:"username,omitempty"`
	UID      string              `json:"uid,omitempty"`
	Groups   []string            `json:"groups,omitempty"`
	Extra    map[string][]string `json:"extra,omitempty"`
}

// AdmissionRequest names what the API server asks about.
type AdmissionRequest struct {
	// UID is the API server's id of the request.
	UID         string               `json:"uid"`
	Kind        GroupVersionKind     `json:"kind"`
	Resource    GroupVersionResource `json:"resource"`
	SubResource string               `json:"subResource,omitempty"`
	Namespace   string               `json:"namespace,omitempty"`
	// Name is empty for a create with generateName.
	Name string `json:"name,omitempty"`
}

// GroupVersionKind is a kind with its API group and version.
type GroupVersionKind struct {
	Group   string `json:"group"`
	Version string `json:"version"`
	Kind    string `json:"kind"`
}

// GroupVersionResource is a resource with its API group and version.
type GroupVersionResource struct {
	Group    string `json:"group"`
	Version  string `json:"version"`
	Resource string `json:"resource"`
}

// AdmissionResult is an admission call's answer: the result schema's
// fields for admission (docs/admission.md). A validate handler must set
// Allowed (Allow, Deny); a mutate handler's answer is allowed unless it
// says otherwise.
type AdmissionResult struct {
	// Allowed says whether the request is allowed.
	Allowed *bool `json:"allowed,omitempty"`
	// Message says why it is denied; kubectl prints it.
	Message string `json:"message,omitempty"`
	// Patch, of a mutate handler, is a JSON merge patch (RFC 7386) of
	// the object, of spec, metadata.labels and metadata.annotations:
	// map[string]any{"spec": map[string]any{"replicas": 1}}; a nil value
	// in it removes a field.
	Patch any `json:"patch,omitempty"`
	// Warnings are printed by the client, allowed or not.
	Warnings []string `json:"warnings,omitempty"`
	// Error says the handler could not answer: the engine answers by the
	// handler's failurePolicy. A function returns an error instead.
	Error *ResultError `json:"error,omitempty"`
}

// Allow is the answer that allows the request.
func Allow() *AdmissionResult {
	allowed := true
	return &AdmissionResult{Allowed: &allowed}
}

// Deny is the answer that denies the request, saying why.
func Deny(message string) *AdmissionResult {
	allowed := false
	return &AdmissionResult{Allowed: &allowed, Message: message}
}
