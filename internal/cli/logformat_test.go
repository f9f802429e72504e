package cli

import (
	"encoding/json"
	"errors"
	"fmt"
	stdlog "log"
	"os"
	"strings"
	"testing"

	"github.com/go-logr/logr"
	uberzap "go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

// logEveryWay writes to log as each logger of opkit run does: opkit's own
// lines (one in two writes, a warning, a blank line), controller-runtime's
// logger, client-go's klog through its sink, and Go's standard logger.
func logEveryWay(t *testing.T, log *lockedBuffer, format string) {
	t.Helper()
	w := (&logFormatFlag{format: format}).writer(log)
	logger := engineLogger(w, uberzap.NewAtomicLevelAt(zapcore.InfoLevel))
	defer stdlog.SetOutput(os.Stderr)
	klogTo.Store(&logger)
	defer klogTo.Store(nil)

	fmt.Fprintln(w, "operator notes: running (Note.notes.example.com, notes.yaml)")
	fmt.Fprint(w, "stopp")
	fmt.Fprint(w, "ing\n\n")
	printWarnings(w)
	fmt.Fprintln(w, "warning: operator notes: a warning")
	logger.WithName("controller-runtime.metrics").Info("Starting metrics server", "bind-address", "127.0.0.1:7381", "secure", false)
	logger.WithName("controller-runtime.source").Error(errors.New("connection refused"), "failed to get informer", "kind", "Note")
	klog := logr.New(klogSink{}).WithName("reflector")
	klog.Info("Unable to write event (may retry after sleeping)", "event", "x")
	klog.Error(errors.New("boom"), "Unhandled Error")
	stdlog.Print("http: TLS handshake error from 127.0.0.1:5555: EOF")
	if err := logged(w, errors.New("the engine stopped:\nsecond line")); err == nil {
		t.Fatal("logged returned no error")
	}
}

// messages are what logEveryWay writes, one a line, in either format.
var messages = []string{
	"operator notes: running (Note.notes.example.com, notes.yaml)",
	"stopping",
	"operator notes: a warning",
	"Starting metrics server",
	"failed to get informer",
	"Unable to write event (may retry after sleeping)",
	"Unhandled Error",
	"http: TLS handshake error from 127.0.0.1:5555: EOF",
}

func TestTextLogsHaveNoJSONLine(t *testing.T) {
	var log lockedBuffer
	logEveryWay(t, &log, logText)
	out := log.String()
	for line := range strings.Lines(out) {
		var obj map[string]any
		if json.Unmarshal([]byte(line), &obj) == nil {
			t.Errorf("a JSON line in the text log: %s", line)
		}
	}
	for _, msg := range messages {
		if !strings.Contains(out, msg) {
			t.Errorf("the text log lacks %q:\n%s", msg, out)
		}
	}
	if !strings.Contains(out, "ERROR controller-runtime.source: failed to get informer") || !strings.Contains(out, "INFO reflector: Unable to write event") {
		t.Errorf("the loggers' lines do not read LEVEL logger: message:\n%s", out)
	}
	if strings.Contains(out, "logformat_test.go") {
		t.Errorf("a stack trace in the text log:\n%s", out)
	}
	// Main prints the error of a text log.
	if strings.Contains(out, "the engine stopped") {
		t.Errorf("the error was written to the text log, where Main prints it:\n%s", out)
	}
}

func TestJSONLogsHaveOneJSONObjectALine(t *testing.T) {
	var log lockedBuffer
	logEveryWay(t, &log, logJSON)
	levels := map[string]string{}
	for line := range strings.Lines(log.String()) {
		var obj struct {
			Level string `json:"level"`
			TS    string `json:"ts"`
			Msg   string `json:"msg"`
		}
		if err := json.Unmarshal([]byte(line), &obj); err != nil || obj.Level == "" || obj.TS == "" || obj.Msg == "" {
			t.Errorf("not a JSON object with level, ts and msg (%v): %q", err, line)
			continue
		}
		levels[obj.Msg] = obj.Level
	}
	for msg, level := range map[string]string{
		messages[0]: "info", messages[1]: "info", messages[2]: "warn", messages[3]: "info", messages[4]: "error",
		messages[5]: "info", messages[6]: "error", messages[7]: "info",
		"the engine stopped:\nsecond line": "error",
	} {
		if got, ok := levels[msg]; !ok || got != level {
			t.Errorf("%q: level %q (logged: %v), want %q", msg, got, ok, level)
		}
	}
}

func TestALoggedErrorIsNotPrintedAgainByMain(t *testing.T) {
	var stdout, stderr lockedBuffer
	code := Main([]string{"run", "--log-format", "json", "--kubeconfig", "no-such-kubeconfig", "--metrics-addr", "0"}, &stdout, &stderr)
	if code != 1 {
		t.Errorf("exit %d, want 1", code)
	}
	lines := strings.Split(strings.TrimSpace(stderr.String()), "\n")
	for _, line := range lines {
		var obj map[string]any
		if err := json.Unmarshal([]byte(line), &obj); err != nil {
			t.Errorf("not a JSON line: %q", line)
		}
	}
	if len(lines) != 1 || !strings.Contains(lines[0], "no-such-kubeconfig") {
		t.Errorf("want the error once, as JSON:\n%s", stderr.String())
	}
	code = Main([]string{"run", "--log-format", "yaml"}, &stdout, &stderr)
	if code != 1 || !strings.Contains(stderr.String(), `--log-format "yaml": want text`) {
		t.Errorf("--log-format yaml: exit %d, %s", code, stderr.String())
	}
}
