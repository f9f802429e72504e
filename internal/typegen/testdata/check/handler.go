// A handler program on the types generated from ../everything.yaml
// (types.go beside it when typecheck_test.go builds it): it must build,
// and fail to once a field is misspelt.
package main

import (
	"context"
	"fmt"
	"os"

	"github.com/opkit-dev/opkit/pkg/handler"
)

func reconcile(ctx context.Context, c *ReconcileAllContext) (*ReconcileAllResult, error) {
	related, err := WidgetRelatedOf(c)
	if err != nil {
		return nil, err
	}
	children, err := WidgetChildrenOf(c)
	if err != nil {
		return nil, err
	}
	spec := c.Object.Spec
	var size int32 = spec.Size
	mode := spec.Mode
	if mode == WidgetSpecModeFast && spec.Owner != nil && spec.Owner.Contact != nil {
		handler.Logf(ctx, "fast, for %s", *spec.Owner.Contact.Email)
	}
	for _, p := range spec.Ports {
		if p.Protocol != nil && *p.Protocol == WidgetSpecPortsItemProtocolUDP {
			handler.Logf(ctx, "port %s is UDP", p.Name)
		}
	}
	if c.Old != nil && c.Old.Size != size {
		handler.Logf(ctx, "resized from %d", c.Old.Size)
	}
	phase := WidgetStatusPhaseReady
	last := fmt.Sprint(size, len(related.Pods), related.App != nil, children.Config != nil)
	return &ReconcileAllResult{Status: &WidgetStatusUpdate{Phase: &phase, LastRun: &last, Counts: map[string]int64{"ports": int64(len(spec.Ports))}}}, nil
}

func hook(ctx context.Context, c *HookContext) (*HookResult, error) {
	if c.Event.Source != "hook" {
		return &HookResult{Refuse: "not from the hook"}, nil
	}
	return nil, nil
}

func check(ctx context.Context, c *CheckContext) (*CheckResult, error) {
	if c.Object != nil && c.Object.Spec.Mode == WidgetSpecModeSlow {
		return handler.Deny("slow widgets are not allowed"), nil
	}
	return handler.Allow(), nil
}

func main() {
	switch os.Getenv("OPKIT_HANDLER") {
	case "hook":
		handler.Main(HookHandlers{handler.OnEvent: hook})
	case "check":
		handler.Main(CheckHandlers{handler.OnValidate: check})
	default:
		handler.Main(ReconcileAllHandlers{handler.OnCreate: reconcile, handler.OnUpdate: reconcile})
	}
}
