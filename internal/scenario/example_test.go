package scenario_test

import (
	"fmt"

	"github.com/opkit-dev/opkit/internal/scenario"
)

func ExampleLoad() {
	scenarios, err := scenario.Load("testdata/example.test.yaml", []byte(`
scenario: a printer prints
operators: [operator.yaml]
steps:
- apply: {apiVersion: example.com/v1, kind: Printer, metadata: {name: hello}, spec: {text: hi}}
- expect:
    object: {kind: Printer, name: hello}
    condition: {type: Ready, status: "True"}
- expect: {run: {handler: print, object: hello, outcome: Succeeded}, timeout: 1m}
`))
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, s := range scenarios[0].Steps {
		fmt.Printf("line %d: %s\n", s.Line, s.Kind())
	}
	fmt.Println(scenarios[0].Operators, scenarios[0].Steps[1].Expect.Timeout, scenarios[0].Steps[2].Expect.Timeout)
	// Output:
	// line 5: apply
	// line 6: expect
	// line 9: expect
	// [testdata/operator.yaml] 30s 1m0s
}

func ExampleLoad_errors() {
	_, err := scenario.Load("printer.test.yaml", []byte(`
scenario: a printer prints
operators: [operator.yaml]
steps:
- aply: {apiVersion: example.com/v1, kind: Printer, metadata: {name: hello}}
- expect: {object: {kind: Printer, name: hello}, cel: "object.status.printed"}
- advance: 5
`))
	fmt.Println(err)
	// Output:
	// printer.test.yaml:3: operators[0]: no file operator.yaml: paths are relative to the scenario's file
	// printer.test.yaml:5: steps[0].aply: unknown step "aply": a step is one of apply, patch, delete, retry, advance, stub, unstub, send, expect; its other fields are name and refused
	// printer.test.yaml:6: steps[1].expect.cel: has type dyn (a value read from object, whose type is known only when it runs), not bool: an expect's cel must be true or false; compare the value, e.g. object.status.ready == true
	// printer.test.yaml:7: steps[2].advance: must be a Go duration with its unit, such as 30s, 5m or 1h30m, not the number 5
}
