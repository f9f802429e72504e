package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestRunWritesItsLogInTheFormatAsked runs opkit run on the local plane
// with each --log-format until it has said what it runs, then stops it:
// in text no line is JSON, in json every line is, opkit's own and
// controller-runtime's alike.
func TestRunWritesItsLogInTheFormatAsked(t *testing.T) {
	t.Parallel()
	cl, c := startPlane(t)
	def := filepath.Join(t.TempDir(), "notes.yaml")
	if err := os.WriteFile(def, []byte(notesOperator), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, format := range []string{"text", "json"} {
		cmd, out := startOpkit(t, "run", "-f", def, "--kubeconfig", cl.KubeconfigPath(), "--metrics-addr", "127.0.0.1:0",
			"--archive", filepath.Join(t.TempDir(), "runs.db"), "--log-format", format)
		waitOutput(t, out, "operator notes: running", 2*time.Minute)
		createNote(t, c, "log-"+format, "x")
		// controller-runtime says its controller started its workers.
		// controller-runtime's line: its manager serves the metrics.
		waitOutput(t, out, "starting server", 30*time.Second)
		if err := cmd.Process.Signal(os.Interrupt); err != nil {
			t.Fatal(err)
		}
		if err := cmd.Wait(); err != nil {
			t.Errorf("--log-format %s: opkit run after Ctrl-C: %v\n%s", format, err, out.String())
		}
		jsonLines, controllerRuntime := 0, 0
		for line := range strings.Lines(out.String()) {
			if strings.TrimSpace(line) == "" {
				continue
			}
			var obj map[string]any
			if json.Unmarshal([]byte(line), &obj) == nil {
				jsonLines++
				if obj["logger"] != "opkit" {
					controllerRuntime++
				}
			} else if format == "json" {
				t.Errorf("--log-format json: a line that is not JSON: %q", line)
			}
		}
		if format == "text" && jsonLines > 0 {
			t.Errorf("--log-format text: %d JSON lines:\n%s", jsonLines, out.String())
		}
		// A line of its own: the first, on a loaded machine, or any later.
		if format == "text" && !strings.Contains("\n"+out.String(), "\nINFO starting server ") {
			t.Errorf("--log-format text: controller-runtime's line is not LEVEL message:\n%s", out.String())
		}
		if format == "json" && (controllerRuntime == 0 || jsonLines < 3) {
			t.Errorf("--log-format json: want opkit's lines and controller-runtime's:\n%s", out.String())
		}
	}
}
