package main

import (
	"encoding/xml"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestOpkitTestRefusesMalformedScenariosBeforeStartingAnything: every
// problem of every scenario file is reported with its file and line, and
// no control plane starts.
func TestOpkitTestRefusesMalformedScenariosBeforeStartingAnything(t *testing.T) {
	dir := t.TempDir()
	printer, err := filepath.Abs("../../examples/printer/operator.yaml")
	if err != nil {
		t.Fatal(err)
	}
	files := map[string]string{
		"unknown-step.test.yaml": "scenario: an unknown step\noperators: [" + printer + "]\nsteps:\n- wait: 5s\n",
		"bad-cel.test.yaml":      "scenario: a bad expression\noperators: [" + printer + "]\nsteps:\n- expect:\n    object: {kind: Printer, name: x}\n    cel: object.status.phase ==\n",
		"missing.test.yaml":      "scenario: a missing operator\noperators: [no-such-operator.yaml]\nsteps:\n- delete: {object: {kind: Printer, name: x}}\n",
		"no-handler.test.yaml":   "scenario: a stub of no handler\noperators: [" + printer + "]\nsteps:\n- apply: {apiVersion: demo.example.com/v1, kind: Printer, metadata: {name: x}, spec: {text: x}}\n- stub: {handler: print, results: [{fail: boom}]}\n",
	}
	for name, content := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	r := opkit(t, t.TempDir(), "test", dir)
	out := r.stdout + r.stderr
	if r.code == 0 {
		t.Fatalf("opkit test passed malformed scenarios:\n%s", out)
	}
	for _, want := range []string{
		filepath.Join(dir, "unknown-step.test.yaml") + ":4: steps[0].wait: unknown step \"wait\"",
		filepath.Join(dir, "bad-cel.test.yaml") + ":6: steps[0].expect.cel:",
		filepath.Join(dir, "missing.test.yaml") + ":2: operators[0]:",
		filepath.Join(dir, "no-handler.test.yaml") + ":5: steps[1].stub: operator printer has no handler \"print\"",
		"nothing run",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("the output lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "control plane") {
		t.Errorf("a control plane started for malformed scenarios:\n%s", out)
	}
}

// TestOpkitTestReportsAWrongScenarioWithTheFieldAndTheRunsLogs runs two
// scenarios as a user does, on a control plane of their own: the right
// one passes; the wrong one (a child field that differs) fails naming the
// field, what was expected and found, with the logs of the handlers that
// ran; the exit code is 1, and the JUnit report says the same.
func TestOpkitTestReportsAWrongScenarioWithTheFieldAndTheRunsLogs(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("starts a control plane")
	}
	dir := t.TempDir()
	var ops []string
	for _, f := range []string{"../../examples/printer/operator.yaml", "../../examples/handlers/operator.yaml"} {
		abs, err := filepath.Abs(f)
		if err != nil {
			t.Fatal(err)
		}
		ops = append(ops, abs)
	}
	const steps = `steps:
- apply: {apiVersion: demo.example.com/v1, kind: Greeting, metadata: {name: world}, spec: {name: World}}
- apply: {apiVersion: demo.example.com/v1, kind: Printer, metadata: {name: hello}, spec: {text: hello}}
- expect: {run: {operator: greetings, handler: greet, object: world, outcome: Succeeded}}
`
	scenarios := "scenario: right\noperators: [" + strings.Join(ops, ", ") + "]\n" + steps +
		"- expect: {object: {kind: Pod, name: hello-print}, matches: {spec: {containers: [{command: [echo, hello]}]}}}\n" +
		"---\nscenario: wrong\noperators: [" + strings.Join(ops, ", ") + "]\n" + steps +
		"- expect: {object: {kind: Pod, name: hello-print}, matches: {spec: {containers: [{command: [echo, goodbye]}]}}, timeout: 3s}\n"
	file := filepath.Join(dir, "greet.test.yaml")
	if err := os.WriteFile(file, []byte(scenarios), 0o600); err != nil {
		t.Fatal(err)
	}
	junit := filepath.Join(dir, "junit.xml")
	r := opkit(t, t.TempDir(), "test", "-p", "2", "--junit", junit, file)
	out := r.stdout + r.stderr
	t.Logf("opkit test:\n%s", out)
	if r.code != 1 {
		t.Errorf("exit %d, want 1", r.code)
	}
	for _, want := range []string{
		"--- FAIL: " + file + ": wrong",
		file + ":15: expect Pod/hello-print matches: not so within 3s",
		`spec.containers[0].command[1]: want "goodbye", found "hello"`,
		"greet Greeting world create: Succeeded, attempt 1",
		"create (attempt 1): Hello, World!", // greet's log
		"1 passed, 1 failed",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("the output lacks %q", want)
		}
	}
	if strings.Contains(out, "--- FAIL: "+file+": right") {
		t.Errorf("the right scenario failed")
	}
	data, err := os.ReadFile(junit)
	if err != nil {
		t.Fatal(err)
	}
	var report struct {
		Suites []struct {
			Tests    int `xml:"tests,attr"`
			Failures int `xml:"failures,attr"`
			Cases    []struct {
				Name    string `xml:"name,attr"`
				Failure *struct {
					Message string `xml:"message,attr"`
				} `xml:"failure"`
			} `xml:"testcase"`
		} `xml:"testsuite"`
	}
	if err := xml.Unmarshal(data, &report); err != nil {
		t.Fatalf("the JUnit report does not parse: %v\n%s", err, data)
	}
	if len(report.Suites) != 1 || report.Suites[0].Tests != 2 || report.Suites[0].Failures != 1 ||
		report.Suites[0].Cases[1].Name != "wrong" || report.Suites[0].Cases[1].Failure == nil || report.Suites[0].Cases[0].Failure != nil {
		t.Errorf("the JUnit report:\n%s", data)
	}
}
