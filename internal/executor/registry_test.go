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
