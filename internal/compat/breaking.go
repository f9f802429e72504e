package compat

import (
	"fmt"
	"strings"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"

	"github.com/opkit-dev/opkit/internal/definition"
)

// BreakingChangeError is the refusal of a definition whose CRD changes
// the installed one in ways Compare finds breaking (the engine's Apply,
// unless its Options.AllowBreaking). Nothing was changed.
type BreakingChangeError struct {
	// Operator and CRD name what was refused.
	Operator, CRD string
	// Findings are the breaking changes, each placed in the definition.
	Findings Findings
	// Lines are the findings as Error writes them, file:line first for a
	// definition from a file.
	Lines []string
}

func (e *BreakingChangeError) Error() string {
	var b strings.Builder
	n := len(e.Findings)
	changes := "changes"
	if n == 1 {
		changes = "change"
	}
	fmt.Fprintf(&b, "operator %s: refused: %d breaking %s to the installed CRD %s (clients would break or data be lost):", e.Operator, n, changes, e.CRD)
	for _, l := range e.Lines {
		b.WriteString("\n  " + l)
	}
	b.WriteString("\nchange the definition back, or apply it anyway with --allow-breaking (opkit lint FILE --against-cluster lists every change)")
	return b.String()
}

// RefuseBreaking returns a *BreakingChangeError when crd, d's, breaks the
// installed one, each finding placed in d; nil otherwise.
func RefuseBreaking(d *definition.Definition, installed, crd *apiextensionsv1.CustomResourceDefinition) error {
	breaking := Compare(installed, crd).Breaking()
	if len(breaking) == 0 {
		return nil
	}
	err := &BreakingChangeError{Operator: d.Operator.Name, CRD: crd.Name, Findings: breaking}
	for _, f := range breaking {
		err.Lines = append(err.Lines, f.At(d.Source, d.Line(f.DefinitionField)))
	}
	return err
}
