// Package inventory is the list of the children a custom resource's
// reconciles applied, which opkit keeps in its status.opkit.children: a
// child no longer rendered (removed from the definition, excluded by
// includeWhen, or renamed by its template) is found there and pruned by
// the engine.
//
// Contract: Read never fails (an unreadable record reads as empty, and
// nothing is pruned from it); Generic gives the list as a status decoded
// from JSON holds it, so that comparing it with the one read shows no
// change where there is none.
package inventory

import (
	"encoding/json"
	"slices"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// Ref names one object a custom resource's reconcile applied. The
// list of them, its inventory, is kept in status.opkit.children: a child no
// longer rendered (removed from the definition, excluded by includeWhen, or
// renamed by its template) is found there and pruned.
type Ref struct {
	ID         string `json:"id"`
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Namespace  string `json:"namespace,omitempty"`
	Name       string `json:"name"`
}

// RefOf names obj, the child of id.
func RefOf(id string, obj *unstructured.Unstructured) Ref {
	return Ref{ID: id, APIVersion: obj.GetAPIVersion(), Kind: obj.GetKind(), Namespace: obj.GetNamespace(), Name: obj.GetName()}
}

func (c Ref) String() string {
	if c.Namespace == "" {
		return c.Kind + " " + c.Name
	}
	return c.Kind + " " + c.Namespace + "/" + c.Name
}

// Generic returns refs as the status holds them once decoded.
func Generic(refs []Ref) []any {
	out := make([]any, len(refs))
	for i, c := range refs {
		m := map[string]any{"id": c.ID, "apiVersion": c.APIVersion, "kind": c.Kind, "name": c.Name}
		if c.Namespace != "" {
			m["namespace"] = c.Namespace
		}
		out[i] = m
	}
	return out
}

// Read returns the children recorded in the custom resource's
// status; an unreadable record reads as empty.
func Read(cr *unstructured.Unstructured) []Ref {
	raw, _, _ := unstructured.NestedFieldNoCopy(cr.Object, "status", "opkit", "children")
	data, err := json.Marshal(raw)
	if err != nil {
		return nil
	}
	var refs []Ref
	_ = json.Unmarshal(data, &refs)
	return refs
}

// Append adds ref to refs unless it is there.
func Append(refs []Ref, ref Ref) []Ref {
	if slices.Contains(refs, ref) {
		return refs
	}
	return append(refs, ref)
}
