package admission

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/opkit-dev/opkit/internal/definition"
	"github.com/opkit-dev/opkit/internal/executor"
)

// TestServeAdmissionHandlersKeepTheirProcessesUntilTheOperatorChanges
// checks that an admission handler in exec.mode Serve answers from one
// process, and that the process is stopped when the operator's
// definition is set again, removed, or the server stops.
func TestServeAdmissionHandlersKeepTheirProcessesUntilTheOperatorChanges(t *testing.T) {
	dir := t.TempDir()
	handler := filepath.Join(dir, "allow.sh")
	if err := os.WriteFile(handler, []byte("#!/bin/bash\nwhile read -r line; do echo \"{\\\"allowed\\\": true, \\\"message\\\": \\\"$$\\\"}\"; done\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	def := func() *definition.Definition {
		t.Helper()
		srcs, err := definition.Load("op.yaml", []byte(`apiVersion: opkit.dev/v1alpha1
kind: Operator
metadata: {name: sites}
spec:
  resource:
    group: demo.example.com
    kind: Site
    versions:
    - name: v1
      schema: {type: object, properties: {a: {type: string}}}
  handlers:
  - name: check
    "on": [validate]
    admission: {operations: [CREATE]}
    exec: {command: [`+strconv.Quote(handler)+`], mode: Serve}
`))
		if err != nil {
			t.Fatal(err)
		}
		d, err := definition.Compile(srcs[0])
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	s := &Server{}
	// ask runs the check handler of the admitter set now twice and
	// returns the pid that answered, the same both times.
	ask := func() int {
		t.Helper()
		s.mu.Lock()
		ex := s.admitters["sites"].execs["check"]
		s.mu.Unlock()
		var pids []string
		for range 2 {
			res, err := ex.Run(context.Background(), executor.Request{RunID: "r", Handler: "check", Input: []byte(`{"runId": "r"}`), Timeout: 10 * time.Second, Log: &bytes.Buffer{}})
			if err != nil {
				t.Fatal(err)
			}
			pids = append(pids, res.Message)
		}
		if pids[0] != pids[1] {
			t.Fatalf("answered by processes %v; want one", pids)
		}
		pid, _ := strconv.Atoi(pids[0])
		return pid
	}
	gone := func(pid int, after string) {
		t.Helper()
		if err := syscall.Kill(pid, 0); err == nil {
			t.Errorf("process %d of the check handler still runs after %s", pid, after)
		}
	}
	for _, step := range []struct {
		what string
		end  func()
	}{
		{"the definition is set again", func() {
			if err := s.Set(def()); err != nil {
				t.Fatal(err)
			}
		}},
		{"the operator is removed", func() { s.Remove("sites") }},
		{"the server stops", func() {
			if names := s.Stop(); strings.Join(names, ",") != "sites" {
				t.Errorf("Stop returned %v", names)
			}
		}},
	} {
		if err := s.Set(def()); err != nil {
			t.Fatal(err)
		}
		pid := ask()
		step.end()
		gone(pid, step.what)
	}
}
