package executor

import (
	"context"
	"strings"
	"testing"

	"github.com/opkit-dev/opkit/api/v1alpha1"
	"github.com/opkit-dev/opkit/internal/definition"
)

func TestRegistryRoutesEachActionToItsOwnExecutor(t *testing.T) {
	named := func(name string) Executor {
		return Func(func(context.Context, Request) (*Result, error) {
			return &Result{Status: map[string]any{"by": name}}, nil
		})
	}
	reg := Registry{
		"exec": func(*definition.Handler) Executor { return named("exec") },
		"http": func(*definition.Handler) Executor { return named("http") },
	}
	for _, tc := range []struct {
		h    *definition.Handler
		want string
	}{
		{&definition.Handler{Name: "e", Exec: &v1alpha1.ExecAction{}}, "exec"},
		{&definition.Handler{Name: "h", HTTP: &v1alpha1.HTTPAction{}}, "http"},
	} {
		ex, err := reg.For(tc.h)
		if err != nil {
			t.Fatal(err)
		}
		res, _ := ex.Run(t.Context(), Request{})
		if res.Status["by"] != tc.want {
			t.Errorf("handler %s ran on %v; want %s", tc.h.Name, res.Status["by"], tc.want)
		}
	}
	for _, h := range []*definition.Handler{
		{Name: "j", Job: &v1alpha1.JobAction{}},
		{Name: "none"},
	} {
		_, err := reg.For(h)
		if err == nil || !strings.Contains(err.Error(), "handler "+h.Name+": no executor for action") || !strings.Contains(err.Error(), "exec, http") {
			t.Errorf("handler %s: err %v; want no executor, naming the known ones", h.Name, err)
		}
	}
}

func TestARegistrysExecutorRefusesABindingContextNestedPastTheLimit(t *testing.T) {
	started := 0
	reg := Registry{"exec": func(*definition.Handler) Executor {
		return Func(func(context.Context, Request) (*Result, error) { started++; return &Result{}, nil })
	}}
	ex, err := reg.For(&definition.Handler{Name: "e", Exec: &v1alpha1.ExecAction{}})
	if err != nil {
		t.Fatal(err)
	}
	// An object 100 deep among a binding context's related objects
	// (context.related.ID[i]) is within the limit; one level more is not.
	object := func(depth int) string { return strings.Repeat(`{"a":`, depth-1) + "{}" + strings.Repeat("}", depth-1) }
	within := `{"operator":"o","related":{"r":[` + object(100) + `]}}`
	if _, err := ex.Run(t.Context(), Request{Input: []byte(within)}); err != nil || started != 1 {
		t.Fatalf("a context carrying an object 100 deep: %v, started %d times; want run", err, started)
	}
	past := `{"operator":"o","related":{"r":[` + object(101) + `]}}`
	_, err = ex.Run(t.Context(), Request{Input: []byte(past)})
	f := AsFailure(err)
	if err == nil || !f.Permanent || !strings.Contains(f.Message, "the binding context is nested deeper than 103 objects and arrays") ||
		!strings.Contains(f.Message, "past opkit's limit of 100") || started != 1 {
		t.Errorf("a context carrying an object 101 deep: %v (permanent %v), started %d times; want a permanent failure naming the limit, and no start", err, err != nil && f.Permanent, started)
	}
}
