package scenario

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"
)

// head is the start of most malformed scenarios below: lines 1 to 3.
const head = "scenario: s\noperators: [operator.yaml]\nsteps:\n"

func TestLoadReportsEachProblemAtItsFieldAndLine(t *testing.T) {
	const file = "testdata/bad.test.yaml"
	cases := []struct {
		name string
		yaml string
		want []string
	}{
		{
			name: "unknown step",
			yaml: head + "- wait: 5s\n",
			want: []string{`testdata/bad.test.yaml:4: steps[0].wait: unknown step "wait": a step is one of apply, patch, delete, retry, advance, stub, unstub, send, expect; its other fields are name and refused`},
		},
		{
			name: "two actions in one step",
			yaml: head + "- advance: 1m\n  delete: {object: {kind: Printer, name: hello}}\n",
			want: []string{`testdata/bad.test.yaml:4: steps[0]: a step has one action, and this one has 2 (delete, advance): split it into steps`},
		},
		{
			name: "a step without an action",
			yaml: head + "- name: nothing to do\n",
			want: []string{`testdata/bad.test.yaml:4: steps[0]: a step needs an action: one of apply, patch, delete, retry, advance, stub, unstub, send, expect`},
		},
		{
			name: "CEL that does not compile",
			yaml: head + "- expect: {object: {kind: Pod, name: p}, cel: \"object.status.phase ==\"}\n",
			want: []string{`testdata/bad.test.yaml:4: steps[0].expect.cel: does not compile: Syntax error: mismatched input '<EOF>' expecting {'[', '{', '(', '.', '-', '!', 'true', 'false', 'null', NUM_FLOAT, NUM_INT, NUM_UINT, STRING, BYTES, IDENTIFIER} (column 23)`},
		},
		{
			name: "CEL of an unknown variable",
			yaml: head + "- expect:\n    object: {kind: Pod, name: p}\n    cel: self.status.ready\n",
			want: []string{`testdata/bad.test.yaml:6: steps[0].expect.cel: does not compile: undeclared reference to 'self' (in container '') (column 1)`},
		},
		{
			name: "CEL that is not a bool",
			yaml: head + "- expect: {object: {kind: Pod, name: p}, cel: \"size(object.metadata.name)\"}\n",
			want: []string{`testdata/bad.test.yaml:4: steps[0].expect.cel: has type int, not bool: an expect's cel must be true or false; compare the value, e.g. object.status.ready == true`},
		},
		{
			name: "CEL of a field, whose type is dyn",
			yaml: head + "- expect: {object: {kind: Pod, name: p}, cel: object.status.ready}\n",
			want: []string{`testdata/bad.test.yaml:4: steps[0].expect.cel: has type dyn (a value read from object, whose type is known only when it runs), not bool: an expect's cel must be true or false; compare the value, e.g. object.status.ready == true`},
		},
		{
			name: "missing operator file",
			yaml: "scenario: s\noperators:\n- operator.yaml\n- nosuch.yaml\nsteps:\n- advance: 1s\n",
			want: []string{`testdata/bad.test.yaml:4: operators[1]: no file testdata/nosuch.yaml: paths are relative to the scenario's file`},
		},
		{
			name: "operator file that is a directory",
			yaml: "scenario: s\noperators: [.]\nsteps:\n- advance: 1s\n",
			want: []string{`testdata/bad.test.yaml:2: operators[0]: testdata is a directory: name a file`},
		},
		{
			name: "apply file that is not a string",
			yaml: head + "- apply: {file: 3}\n",
			want: []string{`testdata/bad.test.yaml:4: steps[0].apply.file: must be a string, not the number 3: quote it`},
		},
		{
			name: "missing apply file",
			yaml: head + "- apply: {file: nosuch.yaml}\n",
			want: []string{`testdata/bad.test.yaml:4: steps[0].apply.file: no file testdata/nosuch.yaml: paths are relative to the scenario's file`},
		},
		{
			name: "bad durations",
			yaml: "scenario: s\noperators: [operator.yaml]\ntimeout: 1h\nsteps:\n- advance: 5 minutes\n- advance: 0s\n- advance: 10\n- expect: {object: {kind: Pod, name: p}, absent: true, timeout: 0s}\n",
			want: []string{
				`testdata/bad.test.yaml:3: timeout: must be at most 10m: a scenario that waits longer is too slow to run often; advance the clock (advance: 1h) instead of waiting for time to pass`,
				`testdata/bad.test.yaml:5: steps[0].advance: "5 minutes" is not a Go duration: write it with its unit, such as 30s, 5m or 1h30m`,
				`testdata/bad.test.yaml:6: steps[1].advance: must be more than 0`,
				`testdata/bad.test.yaml:7: steps[2].advance: must be a Go duration with its unit, such as 30s, 5m or 1h30m, not the number 10`,
				`testdata/bad.test.yaml:8: steps[3].expect.timeout: must be more than 0`,
			},
		},
		{
			name: "namespace given",
			yaml: head + "- apply:\n    apiVersion: v1\n    kind: ConfigMap\n    metadata: {name: c, namespace: default}\n- delete: {object: {kind: ConfigMap, name: c, namespace: default}}\n",
			want: []string{
				`testdata/bad.test.yaml:7: steps[0].apply.metadata.namespace: the namespace is the scenario's own: remove metadata.namespace`,
				`testdata/bad.test.yaml:8: steps[1].delete.object.namespace: an object's namespace is the scenario's own: remove namespace`,
			},
		},
		{
			name: "inline object without apiVersion or a valid name",
			yaml: head + "- apply: {kind: ConfigMap, metadata: {name: My_Config}}\n",
			want: []string{
				`testdata/bad.test.yaml:4: steps[0].apply.apiVersion: required: the object's group/version, e.g. v1`,
				`testdata/bad.test.yaml:4: steps[0].apply.metadata.name: "My_Config" is not an object name: lower-case letters, digits, '-' and '.', starting and ending with a letter or digit, at most 253`,
			},
		},
		{
			name: "unknown expect field",
			yaml: head + "- expect:\n    object: {kind: Pod, name: p}\n    matchs: {status: {phase: Running}}\n",
			want: []string{`testdata/bad.test.yaml:6: steps[0].expect.matchs: unknown field "matchs"; known: object, matches, cel, condition, absent, run, event, log, timeout`},
		},
		{
			name: "absent with matches",
			yaml: head + "- expect: {object: {kind: Pod, name: p}, absent: true, matches: {status: {}}}\n",
			want: []string{`testdata/bad.test.yaml:4: steps[0].expect.matches: cannot go with absent: true: an absent object has nothing to check; remove one of them`},
		},
		{
			name: "absent false",
			yaml: head + "- expect: {object: {kind: Pod, name: p}, absent: false}\n",
			want: []string{`testdata/bad.test.yaml:4: steps[0].expect.absent: must be true, to expect that the object does not exist; to wait until it exists, use matches: {} instead`},
		},
		{
			name: "an object without a check",
			yaml: head + "- expect: {object: {kind: Pod, name: p}}\n",
			want: []string{`testdata/bad.test.yaml:4: steps[0].expect: an expect of an object needs a check: at least one of matches, cel, condition, absent`},
		},
		{
			name: "two assertions in one expect",
			yaml: head + "- expect: {run: {handler: print}, log: {handler: print, contains: hi}}\n",
			want: []string{`testdata/bad.test.yaml:4: steps[0].expect: has run and log: give only one of object, run, event, log`},
		},
		{
			name: "empty steps",
			yaml: "scenario: s\noperators: [operator.yaml]\nsteps: []\n",
			want: []string{`testdata/bad.test.yaml:3: steps: must not be empty: give at least 1`},
		},
		{
			name: "required fields",
			yaml: "operators: [operator.yaml]\nsteps:\n- stub: {results: [{}]}\n",
			want: []string{
				`testdata/bad.test.yaml:1: scenario: required: the scenario's name, unique in its file`,
				`testdata/bad.test.yaml:3: steps[0].stub.handler: required: a handler's name`,
				`testdata/bad.test.yaml:3: steps[0].stub.results[0]: needs one of fail, result`,
			},
		},
		{
			name: "duplicate names",
			yaml: head + "- advance: 1s\n---\n" + head + "- advance: 2s\n",
			want: []string{`testdata/bad.test.yaml:6: scenario: the scenario at line 1 has this name already: give each scenario of a file its own`},
		},
		{
			name: "YAML syntax error",
			yaml: head + "- apply: {apiVersion: v1\n- advance: 1s\n",
			want: []string{`testdata/bad.test.yaml:4: invalid YAML near this line: did not find expected ',' or '}'`},
		},
		{
			name: "a tab",
			yaml: "scenario: s\n\toperators: [operator.yaml]\n",
			want: []string{`testdata/bad.test.yaml:2: invalid YAML near this line: found a tab character that violates indentation`},
		},
		{
			name: "wrong types",
			yaml: head + "- send: {source: 42, status: \"202\"}\n- expect: {run: {handler: print, attempt: 0}, timeout: [1s]}\n- expect: {object: {kind: Pod, name: p}, condition: {type: Ready, status: True}}\n",
			want: []string{
				`testdata/bad.test.yaml:4: steps[0].send.source: must be a string, not the number 42: quote it`,
				`testdata/bad.test.yaml:4: steps[0].send.status: must be an integer, not "202"`,
				`testdata/bad.test.yaml:5: steps[1].expect.run.attempt: must be at least 1`,
				`testdata/bad.test.yaml:5: steps[1].expect.timeout: must be a Go duration with its unit, such as 30s, 5m or 1h30m, not a list`,
				`testdata/bad.test.yaml:6: steps[2].expect.condition.status: must be one of True, False, Unknown, not the boolean true: quote it (YAML reads True and False unquoted as booleans)`,
			},
		},
		{
			name: "enums",
			yaml: head + "- expect: {run: {handler: print, trigger: created, outcome: Done}}\n",
			want: []string{
				`testdata/bad.test.yaml:4: steps[0].expect.run.trigger: must be one of create, update, delete, resume, schedule, when, event, requeue, validate, mutate, enter, exit, initial, guard, timeout, decision, not "created"`,
				`testdata/bad.test.yaml:4: steps[0].expect.run.outcome: must be one of Running, Succeeded, Failed, GaveUp, Cancelled, Skipped, Allowed, Denied, not "Done"`,
			},
		},
		{
			name: "refused on a step that sends no request",
			yaml: head + "- expect: {object: {kind: Pod, name: p}, absent: true}\n  refused: {message: x}\n- advance: 1s\n  refused: {message: x}\n- name: no action\n  refused: {message: x}\n",
			want: []string{
				`testdata/bad.test.yaml:5: steps[0].refused: only with apply, patch or delete, whose request the API server may refuse; not with expect`,
				`testdata/bad.test.yaml:7: steps[1].refused: only with apply, patch or delete, whose request the API server may refuse; not with advance`,
				`testdata/bad.test.yaml:8: steps[2]: a step needs an action: one of apply, patch, delete, retry, advance, stub, unstub, send, expect`,
			},
		},
		{
			name: "refused without its message, or with a field of its own",
			yaml: head + "- patch: {object: {kind: Pod, name: p}, merge: {a: 1}}\n  refused: {}\n- delete: {object: {kind: Pod, name: p}}\n  refused: {message: x, reason: Invalid}\n- delete: {object: {kind: Pod, name: p}}\n  refused: is immutable\n",
			want: []string{
				`testdata/bad.test.yaml:5: steps[0].refused.message: required: text the refusal's message contains`,
				`testdata/bad.test.yaml:7: steps[1].refused.reason: unknown field "reason"; known: message`,
				`testdata/bad.test.yaml:9: steps[2].refused: must be a mapping, not "is immutable"`,
			},
		},
		{
			name: "refused on an apply of several objects",
			yaml: head + "- apply: {file: printers.yaml}\n  refused: {message: x}\n",
			want: []string{`testdata/bad.test.yaml:5: steps[0].refused: an apply expected to be refused applies one object, and testdata/printers.yaml holds 2: apply the others in a step of their own`},
		},
		{
			name: "a misspelt refused",
			yaml: head + "- delete: {object: {kind: Pod, name: p}}\n  refuse: {message: x}\n",
			want: []string{`testdata/bad.test.yaml:5: steps[0].refuse: unknown step "refuse": a step is one of apply, patch, delete, retry, advance, stub, unstub, send, expect; its other fields are name and refused`},
		},
		{
			name: "a state transition's run with a handler, a handler's run with states, a run of neither",
			yaml: head + "- expect: {run: {handler: announce, trigger: guard}}\n- expect: {run: {handler: announce, trigger: enter, to: Ready}}\n- expect: {run: {from: Verifying}}\n",
			want: []string{
				`testdata/bad.test.yaml:4: steps[0].expect.run.handler: a state transition (trigger: initial, guard, timeout, decision) is opkit's, not a handler's run: remove handler, or give a handler's trigger`,
				`testdata/bad.test.yaml:5: steps[1].expect.run.to: names a state of a transition: only with a transition's trigger (initial, guard, timeout, decision), and without handler`,
				`testdata/bad.test.yaml:6: steps[2].expect.run.handler: required: a handler's name; only a state transition's record (trigger: initial, guard, timeout, decision) has none`,
				`testdata/bad.test.yaml:6: steps[2].expect.run.from: names a state of a transition: only with a transition's trigger (initial, guard, timeout, decision), and without handler`,
			},
		},
		{
			name: "a stub result that both fails and succeeds",
			yaml: head + "- stub: {handler: h, results: [{fail: x, result: {}}, {permanent: true, result: {}}]}\n",
			want: []string{
				`testdata/bad.test.yaml:4: steps[0].stub.results[0]: has fail and result: give only one of fail, result`,
				`testdata/bad.test.yaml:4: steps[0].stub.results[1].permanent: only with fail: add fail, or remove permanent`,
			},
		},
		{
			name: "keys JSON cannot hold",
			yaml: head + "- apply: {apiVersion: v1, kind: ConfigMap, metadata: {name: c}, data: {1: one, a: x, a: y}}\n",
			want: []string{
				`testdata/bad.test.yaml:4: steps[0].apply.data.1: a key must be a string, not a number: quote it ("1")`,
				`testdata/bad.test.yaml:4: steps[0].apply.data.a: duplicate key "a" (first at line 4): give it once`,
			},
		},
		{
			name: "not a mapping",
			yaml: "- advance: 1s\n",
			want: []string{`testdata/bad.test.yaml:1: a scenario is a mapping of scenario:, operators: and steps:, not a list`},
		},
		{
			name: "no document",
			yaml: "# nothing yet\n",
			want: []string{`testdata/bad.test.yaml: no scenario: a scenario file holds one or more YAML documents (separated by ---), each with scenario:, operators: and steps:`},
		},
		{
			name: "unknown top-level field",
			yaml: head + "- advance: 1s\ndescription: x\n",
			want: []string{`testdata/bad.test.yaml:5: description: unknown field "description"; known: scenario, operators, timeout, steps`},
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, err := Load(file, []byte(c.yaml))
			if got != nil {
				t.Errorf("got %d scenarios from a file with problems", len(got))
			}
			var errs Errors
			if !errors.As(err, &errs) {
				t.Fatalf("got %v, want Errors", err)
			}
			if lines := strings.Split(errs.Error(), "\n"); !reflect.DeepEqual(lines, c.want) {
				t.Errorf("got\n  %s\nwant\n  %s", strings.Join(lines, "\n  "), strings.Join(c.want, "\n  "))
			}
		})
	}
}

func TestLoadReportsEveryDocumentsProblemsTogether(t *testing.T) {
	data := head + "- wait: 1s\n---\n" + "scenario: t\noperators: [operator.yaml]\nsteps:\n- advance: soon\n"
	_, err := Load("testdata/bad.test.yaml", []byte(data))
	var errs Errors
	if !errors.As(err, &errs) || len(errs) != 2 {
		t.Fatalf("got %v, want two errors", err)
	}
	if errs[0].Scenario != "s" || errs[0].Line != 4 || errs[1].Scenario != "t" || errs[1].Line != 9 || errs[1].Field != "steps[0].advance" {
		t.Errorf("got %#v and %#v", errs[0], errs[1])
	}
}

func TestLoadPlacesErrorsOfAnApplyFileInThatFile(t *testing.T) {
	dir := t.TempDir()
	write(t, filepath.Join(dir, "operator.yaml"), "kind: Operator\n")
	write(t, filepath.Join(dir, "objects.yaml"), "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: a, namespace: b}\n---\nkind: ConfigMap\nmetadata: {name: Bad}\n---\n- x\n")
	file := filepath.Join(dir, "a.test.yaml")
	// Two steps apply the file: its errors are reported once.
	write(t, file, head+"- apply: {file: objects.yaml}\n- apply: {file: objects.yaml}\n")
	_, err := LoadFile(file)
	objects := filepath.Join(dir, "objects.yaml")
	want := []string{
		objects + `:3: metadata.namespace: the namespace is the scenario's own: remove metadata.namespace`,
		objects + `:5: apiVersion: required: the object's group/version, e.g. v1`,
		objects + `:6: metadata.name: "Bad" is not an object name: lower-case letters, digits, '-' and '.', starting and ending with a letter or digit, at most 253`,
		objects + `:8: a document of an apply file is one Kubernetes object, a mapping, not a list`,
	}
	if err == nil || err.Error() != strings.Join(want, "\n") {
		t.Errorf("got\n%v\nwant\n%s", err, strings.Join(want, "\n"))
	}
}

func TestLoadFileOfAMissingFileNamesIt(t *testing.T) {
	_, err := LoadFile("testdata/nosuch.test.yaml")
	if err == nil || err.Error() != "testdata/nosuch.test.yaml: no such file or directory" {
		t.Errorf("got %v", err)
	}
}

func TestLoadReadsEveryStep(t *testing.T) {
	got, err := LoadFile("testdata/all-steps.test.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 {
		t.Fatalf("got %d scenarios, want 2", len(got))
	}
	// A compiled program cannot be compared: evaluate it, then leave it out.
	cel := got[0].Steps[2].Expect.Object.CEL
	if ok, err := cel.Eval(Object{"status": map[string]any{"phase": "Succeeded"}}); !ok || err != nil {
		t.Errorf("cel on a Succeeded Pod: got %v, %v; want true", ok, err)
	}
	if ok, err := cel.Eval(Object{"status": map[string]any{"phase": "Running"}}); ok || err != nil {
		t.Errorf("cel on a Running Pod: got %v, %v; want false", ok, err)
	}
	cel.Program = nil

	printer := Ref{Kind: "Printer", Name: "hello"}
	want := []*Scenario{{
		Name:      "the printer prints, reprints and cleans up",
		File:      "testdata/all-steps.test.yaml",
		Line:      2,
		Operators: []string{"testdata/operator.yaml", "testdata/notifier.yaml"},
		Timeout:   20 * time.Second,
		Steps: []Step{
			{Line: 6, Name: "create a printer", Apply: &Apply{Objects: []Object{{
				"apiVersion": "example.com/v1", "kind": "Printer",
				"metadata": map[string]any{"name": "hello"},
				"spec":     map[string]any{"text": "hi", "copies": int64(3), "ratio": 1.5},
			}}}},
			{Line: 8, Apply: &Apply{File: "testdata/printers.yaml", Objects: []Object{
				{"apiVersion": "example.com/v1", "kind": "Printer", "metadata": map[string]any{"name": "one"}, "spec": map[string]any{"text": "first"}},
				{"apiVersion": "example.com/v1", "kind": "Printer", "metadata": map[string]any{"name": "two"}, "spec": map[string]any{"text": "second", "copies": int64(2), "ratio": 0.5}},
			}}},
			{Line: 9, Expect: &Expect{Timeout: 10 * time.Second, Object: &ExpectObject{
				Ref:       Ref{APIVersion: "v1", Kind: "Pod", Name: "hello-printer"},
				Matches:   Object{"spec": map[string]any{"containers": []any{map[string]any{"name": "print"}}}},
				CEL:       &CEL{Source: "object.status.phase == 'Succeeded'"},
				Condition: &Condition{Type: "Ready", Status: "True", Reason: "Printed"},
			}}},
			{Line: 15, Expect: &Expect{Timeout: 20 * time.Second, Run: &ExpectRun{
				Handler: "print", Object: "hello", Operator: "printer", Trigger: "create", Outcome: "Succeeded", Attempt: 1, Count: ptr(1),
			}}},
			{Line: 16, Expect: &Expect{Timeout: 20 * time.Second, Log: &ExpectLog{Handler: "print", Object: "hello", Contains: "printed hi"}}},
			{Line: 17, Patch: &Patch{Object: printer, Merge: Object{"spec": map[string]any{"text": "bye"}}}},
			{Line: 18, Stub: &Stub{Handler: "print", Operator: "printer", Results: []StubResult{
				{Fail: "boom", Log: "stubbed failure"},
				{Fail: "boom", Permanent: true},
				{Result: Object{"status": map[string]any{"printed": true}}},
			}}},
			{Line: 25, Expect: &Expect{Timeout: 20 * time.Second, Event: &ExpectEvent{
				Object: &printer, Reason: "HandlerFailed", Type: "Warning", Message: "boom",
			}}},
			{Line: 26, Retry: &Retry{Object: printer}},
			{Line: 27, Advance: &Advance{By: time.Hour}},
			{Line: 28, Unstub: &Unstub{Handler: "print", Operator: "printer"}},
			{Line: 29, Send: &Send{
				Source: "github", Operator: "deploy-notifier", Event: "push",
				Payload: Object{"ref": "refs/heads/main", "commits": []any{map[string]any{"id": "abc"}}},
				Headers: map[string]string{"X-Foo": "bar"}, Status: 200,
			}},
			{Line: 36, Delete: &Delete{Object: printer}},
			{Line: 37, Expect: &Expect{Timeout: 20 * time.Second, Object: &ExpectObject{Ref: printer, Absent: true}}},
		},
	}, {
		Name:      "a second scenario in the same file",
		File:      "testdata/all-steps.test.yaml",
		Line:      39,
		Operators: []string{"testdata/operator.yaml"},
		Timeout:   DefaultTimeout,
		Steps: []Step{
			{Line: 42, Send: &Send{Source: "github", Payload: Object{}, Status: DefaultSendStatus}},
			{Line: 43, Expect: &Expect{Timeout: DefaultTimeout, Event: &ExpectEvent{Reason: "Printed"}}},
			{Line: 44, Name: "a refused apply", Apply: &Apply{Objects: []Object{{
				"apiVersion": "example.com/v1", "kind": "Printer", "metadata": map[string]any{"name": "bad"}, "spec": map[string]any{"text": ""},
			}}}, Refused: &Refused{Message: "spec.text in body should be at least 1 chars long"}},
			{Line: 47, Patch: &Patch{Object: printer, Merge: Object{"spec": map[string]any{"text": "bye"}}}, Refused: &Refused{Message: "cannot change"}},
			{Line: 49, Delete: &Delete{Object: printer}, Refused: &Refused{Message: "denied"}},
			{Line: 51, Expect: &Expect{Timeout: DefaultTimeout, Run: &ExpectRun{Handler: "print", Trigger: "enter"}}},
			{Line: 52, Expect: &Expect{Timeout: DefaultTimeout, Run: &ExpectRun{
				Trigger: "decision", Object: "hello", From: "NeedsAttention", To: "Ready", Count: ptr(1),
			}}},
		},
	}}
	if !reflect.DeepEqual(got, want) {
		g, _ := json.MarshalIndent(got, "", "  ")
		w, _ := json.MarshalIndent(want, "", "  ")
		t.Errorf("got\n%s\nwant\n%s", g, w)
	}
	var kinds []string
	for _, s := range got[0].Steps {
		kinds = append(kinds, s.Kind())
	}
	wantKinds := []string{"apply", "apply", "expect", "expect", "expect", "patch", "stub", "expect", "retry", "advance", "unstub", "send", "delete", "expect"}
	if !reflect.DeepEqual(kinds, wantKinds) {
		t.Errorf("kinds: got %v, want %v", kinds, wantKinds)
	}
	if got[1].Steps[5].Expect.Run.Transition() || !got[1].Steps[6].Expect.Run.Transition() {
		t.Errorf("Transition: a run of trigger enter is a handler's, one of trigger decision a transition's")
	}
}

func TestLoadResolvesAnchorsAliasesAndMergeKeys(t *testing.T) {
	data := head + "- apply: &obj {apiVersion: v1, kind: ConfigMap, metadata: {name: a}, data: {x: \"1\"}}\n" +
		"- apply:\n    <<: *obj\n    data: {x: \"2\"}\n"
	got, err := Load("testdata/anchors.test.yaml", []byte(data))
	if err != nil {
		t.Fatal(err)
	}
	second := got[0].Steps[1].Apply.Objects[0]
	want := Object{"apiVersion": "v1", "kind": "ConfigMap", "metadata": map[string]any{"name": "a"}, "data": map[string]any{"x": "2"}}
	if !reflect.DeepEqual(second, want) {
		t.Errorf("got %v, want %v", second, want)
	}
}

func write(t *testing.T, path, data string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
}

func ptr[T any](v T) *T { return &v }
