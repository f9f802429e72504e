package compat

import (
	"encoding/json"
	"fmt"
	"slices"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
)

// Severity says how bad a finding is.
type Severity string

const (
	// Breaking is a change that breaks clients or loses data. opkit run
	// and opkit dev refuse it unless --allow-breaking; opkit lint exits 1.
	Breaking Severity = "breaking"
	// Warning is a risky change: existing objects and clients keep working.
	Warning Severity = "warning"
)

// Finding is one change between the old and the new CRD.
type Finding struct {
	Severity Severity
	// Version is the version the change is in, e.g. v1; empty for a change
	// of the whole CRD (its group, kind, scope).
	Version string
	// Field is where the change is, as a user reads it:
	// versions[v1].spec.size, versions[v1].spec.items[*].name (a list's
	// items), versions[v1].spec.labels.* (a map's values), scope, group.
	Field string
	// DefinitionField is the same place in the new Operator definition,
	// e.g. spec.resource.versions[0].schema.properties.size; empty when
	// it has none.
	DefinitionField string
	// Reason says what changed and what it does to objects and clients.
	Reason string
}

func (f Finding) String() string {
	return fmt.Sprintf("%s: %s: %s", f.Field, f.Severity, f.Reason)
}

// Findings are the changes found, CRD-wide ones first, then version by
// version in the old CRD's order, each schema's fields in name order.
type Findings []Finding

// Breaking returns the breaking findings.
func (fs Findings) Breaking() Findings {
	var out Findings
	for _, f := range fs {
		if f.Severity == Breaking {
			out = append(out, f)
		}
	}
	return out
}

// Compare finds the changes from old to updated that break clients or lose
// data, and the risky ones (see the package doc). It changes neither.
func Compare(old, updated *apiextensionsv1.CustomResourceDefinition) Findings {
	c := &comparer{}
	if !c.identity(old, updated) {
		return c.out
	}
	newIndex := map[string]int{}
	for i, v := range updated.Spec.Versions {
		newIndex[v.Name] = i
	}
	stored := storedVersions(old)
	for _, ov := range old.Spec.Versions {
		i, ok := newIndex[ov.Name]
		if !ok {
			c.removedVersion(ov, slices.Contains(stored, ov.Name))
			continue
		}
		nv := updated.Spec.Versions[i]
		base := fmt.Sprintf("spec.resource.versions[%d]", i)
		at := path{user: "versions[" + ov.Name + "]", def: base, version: ov.Name}
		if ov.Served && !nv.Served {
			c.add(Breaking, at.to(".served", ".served"),
				"%s is no longer served: its clients get 404 Not Found; keep serving it until none uses it", ov.Name)
		}
		if scaled(ov) && !scaled(nv) {
			c.add(Breaking, at.to(".subresources.scale", ".scale"),
				"the scale subresource is removed: kubectl scale and HorizontalPodAutoscalers of %s %s stop working", updated.Spec.Names.Kind, ov.Name)
		}
		c.root(at, schemaOf(&ov), schemaOf(&nv))
	}
	c.storage(old, updated, newIndex)
	return c.out
}

// comparer collects findings.
type comparer struct {
	out Findings
}

func (c *comparer) add(s Severity, p path, format string, args ...any) {
	c.out = append(c.out, Finding{Severity: s, Version: p.version, Field: p.user, DefinitionField: p.def, Reason: fmt.Sprintf(format, args...)})
}

// path is a place in both spellings (Finding.Field and DefinitionField).
type path struct {
	user, def, version string
}

// to is a place under p: each suffix, with its separator (".size",
// "[*]"), appended to its spelling; def only when p has one.
func (p path) to(user, def string) path {
	out := path{user: p.user + user, version: p.version}
	if p.def != "" && def != "" {
		out.def = p.def + def
	}
	return out
}

// identity compares what names the CRD and its scope; it returns false
// when the CRD's name differs (another CRD: nothing more to compare).
func (c *comparer) identity(old, updated *apiextensionsv1.CustomResourceDefinition) bool {
	on, nn := old.Spec.Names, updated.Spec.Names
	orphaned := func(what string) string {
		return fmt.Sprintf("this is another CRD, %s.%s: the objects of %s are orphaned (neither served by the new one nor deleted); keep the %s, or move the objects over yourself",
			nn.Plural, updated.Spec.Group, old.Name, what)
	}
	renamed := false
	if old.Spec.Group != updated.Spec.Group {
		c.add(Breaking, path{user: "group", def: "spec.resource.group"}, "the group changes from %s to %s: %s", old.Spec.Group, updated.Spec.Group, orphaned("group"))
		renamed = true
	}
	if on.Plural != nn.Plural {
		c.add(Breaking, path{user: "names.plural", def: "spec.resource.names.plural"}, "the plural changes from %s to %s: %s", on.Plural, nn.Plural, orphaned("plural"))
		renamed = true
	}
	if renamed {
		return false
	}
	if on.Kind != nn.Kind {
		c.add(Breaking, path{user: "names.kind", def: "spec.resource.kind"},
			"the kind changes from %s to %s: clients and manifests that name %s are refused", on.Kind, nn.Kind, on.Kind)
	}
	if old.Spec.Scope != updated.Spec.Scope {
		c.add(Breaking, path{user: "scope", def: "spec.resource.scope"},
			"the scope changes from %s to %s: the API server refuses to change the scope of an installed CRD; a resource of the other scope is another CRD, and its objects must be created again", old.Spec.Scope, updated.Spec.Scope)
	}
	if on.Singular != "" && on.Singular != nn.Singular {
		c.add(Warning, path{user: "names.singular", def: "spec.resource.names.singular"},
			"the singular name changes from %s to %s: kubectl commands that name %s fail", on.Singular, nn.Singular, on.Singular)
	}
	for _, s := range on.ShortNames {
		if !slices.Contains(nn.ShortNames, s) {
			c.add(Warning, path{user: "names.shortNames", def: "spec.resource.names.shortNames"},
				"the short name %s is removed: kubectl commands that use it fail", s)
		}
	}
	return true
}

// removedVersion reports a version of the old CRD that the new one lacks.
func (c *comparer) removedVersion(v apiextensionsv1.CustomResourceDefinitionVersion, stored bool) {
	at := path{user: "versions[" + v.Name + "]", def: "spec.resource.versions", version: v.Name}
	switch {
	case stored:
		c.add(Breaking, at, "version %s is removed, and objects are still stored as %s (status.storedVersions): the API server refuses to drop it, and they would be lost; rewrite them at the storage version first (opkit migrate), keeping %s (served: false if you wish) until then", v.Name, v.Name, v.Name)
	case v.Served:
		c.add(Breaking, at, "version %s is removed: its clients get 404 Not Found; stop serving it first (served: false), and remove it once none uses it", v.Name)
	}
}

// storage reports a change of storage version without conversion between
// versions whose schemas differ.
func (c *comparer) storage(old, updated *apiextensionsv1.CustomResourceDefinition, newIndex map[string]int) {
	oldS, newS := storageVersion(old), storageVersion(updated)
	if oldS == nil || newS == nil || oldS.Name == newS.Name {
		return
	}
	if sameSchema(schemaOf(oldS), schemaOf(newS)) || converts(updated, oldS.Name, newS.Name) {
		return
	}
	i := newIndex[newS.Name]
	c.add(Breaking, path{user: "versions[" + newS.Name + "].storage", def: fmt.Sprintf("spec.resource.versions[%d].storage", i), version: newS.Name},
		"the storage version changes from %s to %s, whose schema differs, and the CRD has no conversion: objects stored as %s are served as %s unchanged, losing the fields %s does not declare; keep %s the storage version (%s may be served beside it) until conversion is declared",
		oldS.Name, newS.Name, oldS.Name, newS.Name, newS.Name, oldS.Name, newS.Name)
}

// converts reports whether crd converts objects between versions from
// and to: a conversion webhook does. A definition that declares
// conversion (docs/conversion.md) has a CRD of strategy Webhook, whether
// built by CRD (opkit lint), by CRDWith with the engine's clientConfig
// (Apply), or read back from the API server; opkit's conversion converts
// every version to and from the storage version, so the strategy is all
// there is to check.
func converts(crd *apiextensionsv1.CustomResourceDefinition, from, to string) bool {
	conv := crd.Spec.Conversion
	return conv != nil && conv.Strategy == apiextensionsv1.WebhookConverter
}

// storedVersions are the versions objects may be stored in: the CRD's
// status.storedVersions, or its storage version when it has none (a CRD
// built from a file).
func storedVersions(crd *apiextensionsv1.CustomResourceDefinition) []string {
	if len(crd.Status.StoredVersions) > 0 {
		return crd.Status.StoredVersions
	}
	if v := storageVersion(crd); v != nil {
		return []string{v.Name}
	}
	return nil
}

func storageVersion(crd *apiextensionsv1.CustomResourceDefinition) *apiextensionsv1.CustomResourceDefinitionVersion {
	for i := range crd.Spec.Versions {
		if crd.Spec.Versions[i].Storage {
			return &crd.Spec.Versions[i]
		}
	}
	return nil
}

func scaled(v apiextensionsv1.CustomResourceDefinitionVersion) bool {
	return v.Subresources != nil && v.Subresources.Scale != nil
}

// schemaOf is a version's whole schema, or nil.
func schemaOf(v *apiextensionsv1.CustomResourceDefinitionVersion) *apiextensionsv1.JSONSchemaProps {
	if v.Schema == nil {
		return nil
	}
	return v.Schema.OpenAPIV3Schema
}

// sameSchema reports whether two versions' .spec schemas say the same,
// descriptions aside.
func sameSchema(a, b *apiextensionsv1.JSONSchemaProps) bool {
	return specJSON(a) == specJSON(b)
}

func specJSON(s *apiextensionsv1.JSONSchemaProps) string {
	if s == nil {
		return ""
	}
	spec, ok := s.Properties["spec"]
	if !ok {
		return ""
	}
	spec = *spec.DeepCopy()
	stripDescriptions(&spec)
	data, _ := json.Marshal(spec) // maps are written in key order
	return string(data)
}

func stripDescriptions(s *apiextensionsv1.JSONSchemaProps) {
	if s == nil {
		return
	}
	s.Description, s.Title, s.Example = "", "", nil
	for k, p := range s.Properties {
		stripDescriptions(&p)
		s.Properties[k] = p
	}
	if s.Items != nil {
		stripDescriptions(s.Items.Schema)
	}
	if s.AdditionalProperties != nil {
		stripDescriptions(s.AdditionalProperties.Schema)
	}
}

// At is f as one line of a report: file:line: field: severity: reason,
// the line left out when 0, the file when "" (a definition read from the
// cluster: the caller names it).
func (f Finding) At(file string, line int) string {
	switch {
	case file != "" && line > 0:
		return fmt.Sprintf("%s:%d: %s", file, line, f)
	case file != "":
		return file + ": " + f.String()
	}
	return f.String()
}
