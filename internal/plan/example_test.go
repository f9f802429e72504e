package plan_test

import (
	"os"

	"github.com/opkit-dev/opkit/internal/plan"
)

func ExamplePlan_WriteText() {
	p := &plan.Plan{
		Operator: "website",
		Resource: "Website.demo.example.com",
		Summary:  plan.Summary{Objects: 2, Changed: 1, Updated: 1, Unchanged: 3, HandlerRuns: 1},
		Objects: []plan.Object{{
			Namespace: "default", Name: "hello",
			Children: []plan.Child{{ID: "server", APIVersion: "apps/v1", Kind: "Deployment", Namespace: "default", Name: "hello", Action: plan.Update,
				Changes: []plan.Change{{Op: "change", Path: "spec.template.spec.containers[0].image", Old: "busybox:1.36", New: "busybox:1.37"}}}},
			Handlers: []plan.HandlerRun{{Handler: "announce", Trigger: "create", Reason: "new create handler: its first run for this existing object"}},
		}},
	}
	p.WriteText(os.Stdout)
	// Output:
	// operator website: 2 Website objects, 1 with changes
	//   children: 0 created, 1 changed, 0 re-created, 0 pruned, 3 unchanged
	//   handlers: 1 run; status: 0 fields change; states: 0 effects
	//
	// Website default/hello
	//   ~ Deployment default/hello (child server) changed
	//       spec.template.spec.containers[0].image: "busybox:1.36" -> "busybox:1.37"
	//   > handler announce runs (create): new create handler: its first run for this existing object
}
