package conformance_test

import (
	"fmt"

	"github.com/opkit-dev/opkit/internal/conformance"
)

// Two handlers of a custom resource write status.count in turn; the
// engine is SIGKILLed during the update and started again. The model
// says each run, its attempts, and the count each must leave.
func ExampleExpect() {
	c := conformance.Case{
		Def: conformance.Def{Kind: conformance.CustomResource, Handlers: []conformance.Handler{
			{Name: "first", On: []conformance.Trigger{"create", "update"}, MaxAttempts: 2, Behaviour: conformance.Behaviour{Write: true}},
			{Name: "second", On: []conformance.Trigger{"create", "resume"}, MaxAttempts: 2, Behaviour: conformance.Behaviour{Fail: 1, Write: true}},
		}},
		History: []conformance.Step{{Op: conformance.OpCreate}, {Op: conformance.OpChange, Field: "a"}, {Op: conformance.OpCrash}},
	}
	e := conformance.Expect(c)
	for _, r := range e.Runs {
		fmt.Println(r.ID(), r.Outcomes)
	}
	fmt.Printf("status.count: %d\n", e.Ends[0].Count)
	// Output:
	// object #1 first create gen 1 [Succeeded]
	// object #1 second create gen 1 [Failed Succeeded]
	// object #1 first update gen 2 [Succeeded]
	// object #1 second resume gen 2 start 2 [Failed Succeeded]
	// status.count: 4
}
