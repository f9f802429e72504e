package sdk_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"math"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/opkit-dev/opkit/internal/sdktools"
)

// TestPythonSDKUnittest runs the Python SDK's own tests
// (python/test_opkit_handler.py) and fails on any failure.
func TestPythonSDKUnittest(t *testing.T) {
	python := sdktools.Python(t)
	cmd := exec.Command(python, "-m", "unittest", "-v")
	cmd.Dir = "python"
	cmd.Env = pyEnv(t)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("python3 -m unittest in sdk/python: %v\n%s", err, out)
	}
	t.Logf("python3 -m unittest:\n%s", out)
	m := regexp.MustCompile(`(?m)^Ran (\d+) tests? in`).FindSubmatch(out)
	if m == nil {
		t.Fatalf("python3 -m unittest printed no count of tests run:\n%s", out)
	}
	if n, _ := strconv.Atoi(string(m[1])); n < 20 {
		t.Errorf("python3 -m unittest ran %d tests; test_opkit_handler.py has more: were they found?", n)
	}
}

// pyDiagnostic is one of pyright's --outputjson diagnostics.
type pyDiagnostic struct {
	File     string `json:"file"`
	Severity string `json:"severity"`
	Message  string `json:"message"`
	Rule     string `json:"rule"`
	Range    struct {
		Start struct {
			Line int `json:"line"`
		} `json:"start"`
	} `json:"range"`
}

// TestPythonSDKTypeCheck runs pyright (strict, python/pyrightconfig.json)
// on the SDK, its tests and handlers written on it: the good ones pass,
// and each bad one fails with exactly one error, which names what is
// wrong. One run checks them all, each file on its own.
func TestPythonSDKTypeCheck(t *testing.T) {
	pyright := sdktools.Pyright(t)
	good := []string{"opkit_handler.py", "test_opkit_handler.py", "testdata/greeting.py", "testdata/good.py", "testdata/program.py"}
	bad := map[string]string{
		"testdata/misspelled_result.py": `"statsu" is an undefined item in type "GreetResult"`,
		"testdata/unknown_field.py":     `"nmae" is not a defined key in "GreetingSpec"`, //nolint:misspell // the misspelling pyright must name
		"testdata/unknown_trigger.py":   `Argument of type "Literal['crate']" cannot be assigned to parameter "triggers"`,
		// diff is null in runs not about a change (resume, requeue...).
		"testdata/unchecked_diff.py": `Object of type "None" cannot be used as iterable value`,
	}
	files := append([]string(nil), good...)
	for f := range bad {
		files = append(files, f)
	}
	cmd := exec.Command(pyright, append([]string{"--project", "pyrightconfig.json", "--outputjson"}, files...)...)
	cmd.Dir = "python"
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	var report struct {
		Diagnostics []pyDiagnostic `json:"generalDiagnostics"`
		Summary     struct {
			FilesAnalyzed int `json:"filesAnalyzed"`
		} `json:"summary"`
	}
	if jerr := json.Unmarshal(out, &report); jerr != nil {
		t.Fatalf("pyright %s: %v (%v)\nstdout: %s\nstderr: %s", strings.Join(files, " "), jerr, err, out, stderr.Bytes())
	}
	if report.Summary.FilesAnalyzed != len(files) {
		t.Errorf("pyright analyzed %d files, not the %d given: %s", report.Summary.FilesAnalyzed, len(files), strings.Join(files, " "))
	}
	dir, _ := filepath.Abs("python")
	byFile := map[string][]pyDiagnostic{}
	for _, d := range report.Diagnostics {
		rel, rerr := filepath.Rel(dir, d.File)
		if rerr != nil {
			rel = d.File
		}
		if d.Severity == "error" || d.Severity == "warning" {
			byFile[filepath.ToSlash(rel)] = append(byFile[filepath.ToSlash(rel)], d)
		}
	}
	show := func(ds []pyDiagnostic) string {
		var b strings.Builder
		for _, d := range ds {
			b.WriteString("\n  " + strconv.Itoa(d.Range.Start.Line+1) + ": " + d.Severity + ": " + d.Message + " (" + d.Rule + ")")
		}
		return b.String()
	}
	for _, f := range good {
		if ds := byFile[f]; len(ds) > 0 {
			t.Errorf("pyright fails %s, which must pass:%s", f, show(ds))
		}
	}
	for f, want := range bad {
		ds := byFile[f]
		switch {
		case len(ds) == 0:
			t.Errorf("pyright passes %s, which must fail: %s", f, want)
		case len(ds) > 1 || !strings.Contains(ds[0].Message, want) || ds[0].Severity != "error":
			t.Errorf("pyright on %s: want one error, %s; got:%s", f, want, show(ds))
		default:
			t.Logf("pyright on %s:%s", f, show(ds))
		}
	}
}

// pyEnv is the environment of the Python processes: the little an exec
// handler gets from the engine, the SDK on PYTHONPATH (opkit init copies
// it beside a project's handlers), and no __pycache__ in the checkout.
func pyEnv(t *testing.T, extra ...string) []string {
	t.Helper()
	sdk, err := filepath.Abs("python")
	if err != nil {
		t.Fatal(err)
	}
	return append([]string{
		"PATH=" + os.Getenv("PATH"),
		"HOME=" + t.TempDir(),
		"LANG=C.UTF-8",
		"PYTHONPATH=" + sdk,
		"PYTHONDONTWRITEBYTECODE=1",
		"OPKIT_HANDLER=greet",
	}, extra...)
}

// pyContext is a Greeting's binding context on trigger, as compact JSON.
func pyContext(t *testing.T, trigger, name string) []byte {
	t.Helper()
	b, err := json.Marshal(map[string]any{
		"operator":       "greetings",
		"handler":        "greet",
		"trigger":        trigger,
		"runId":          "01jd5v3q8m2k4x7zab",
		"idempotencyKey": "0b6a3f2e-1c1d-4b8e-9a39-2f1d7f4b1a11/1/greet",
		"attempt":        1,
		"object": map[string]any{
			"apiVersion": "demo.example.com/v1",
			"kind":       "Greeting",
			"metadata":   map[string]any{"name": strings.ToLower(name), "namespace": "default", "generation": 1},
			"spec":       map[string]any{"name": name, "language": "fr"},
			"status":     map[string]any{},
		},
		"old":      nil,
		"diff":     []any{},
		"children": map[string]any{},
	})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// pyProgram is the command of python/testdata/program.py, a handler
// program on the SDK.
func pyProgram(t *testing.T, extraEnv ...string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(sdktools.Python(t), filepath.Join("python", "testdata", "program.py"))
	cmd.Env = pyEnv(t, extraEnv...)
	return cmd
}

// pyRunOnce runs program.py as a process per run with stdin, and returns
// its stdout, stderr and exit status.
func pyRunOnce(t *testing.T, stdin []byte) (stdout, stderr string, code int) {
	t.Helper()
	cmd := pyProgram(t)
	cmd.Stdin = bytes.NewReader(stdin)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	var exit *exec.ExitError
	switch {
	case errors.As(err, &exit):
		code = exit.ExitCode()
	case err != nil:
		t.Fatal(err)
	}
	return out.String(), errOut.String(), code
}

// TestPythonHandlerProcessPerRun runs a handler program on the SDK as
// opkit runs an exec handler by default: one binding context on stdin,
// the result on stdout, the exit status 0, 75 or 1.
func TestPythonHandlerProcessPerRun(t *testing.T) {
	cases := []struct {
		name    string
		stdin   []byte
		stdout  string
		code    int
		stderrs []string // in the log, in order
	}{{
		name:    "greets",
		stdin:   pyContext(t, "create", "World"),
		stdout:  `{"status":{"greeting":"Bonjour, World!"},"events":[{"type":"Normal","reason":"Greeted","message":"Bonjour, World!"}]}`,
		stderrs: []string{"log: create of World (attempt 1)\n", "print: greeting World\n"},
	}, {
		name:    "a TemporaryError exits 75 with its error",
		stdin:   pyContext(t, "update", "temporary"),
		stdout:  `{"error":{"message":"the greeting service is down"}}`,
		code:    75,
		stderrs: []string{"log: update of temporary (attempt 1)\n"},
	}, {
		name:    "a PermanentError is a permanent error",
		stdin:   pyContext(t, "create", "permanent"),
		stdout:  `{"error":{"message":"no greeting for permanent","permanent":true}}`,
		stderrs: []string{"log: create of permanent (attempt 1)\n"},
	}, {
		name:    "a bug exits 1, its type in the message, its traceback in the log",
		stdin:   pyContext(t, "create", "bug"),
		stdout:  `{"error":{"message":"ValueError: invalid literal for int() with base 10: 'bug'"}}`,
		code:    1,
		stderrs: []string{"log: create of bug (attempt 1)\n", "Traceback (most recent call last):\n", "program.py", "ValueError: invalid literal for int() with base 10: 'bug'\n"},
	}, {
		name:    "a child process's stdout goes to the log",
		stdin:   pyContext(t, "create", "child"),
		stdout:  `{"status":{"greeting":"Bonjour, child!"},"events":[{"type":"Normal","reason":"Greeted","message":"Bonjour, child!"}]}`,
		stderrs: []string{"print: greeting child\n", "child: printed by a child process\n"},
	}, {
		name:    "a child process reads an empty stdin",
		stdin:   pyContext(t, "create", "stdin"),
		stdout:  `{"status":{"greeting":"Bonjour, stdin!"},"events":[{"type":"Normal","reason":"Greeted","message":"Bonjour, stdin!"}]}`,
		stderrs: []string{"print: greeting stdin\n", "child: read 0 characters of stdin\n"},
	}, {
		name:   "a trigger without a function fails permanently, naming it",
		stdin:  pyContext(t, "delete", "World"),
		stdout: `{"error":{"message":"no function for trigger \"delete\": this program handles create, update (@handlers.on(\"delete\") registers one, @handlers.on() the default for every trigger)","permanent":true}}`,
	}, {
		name:   "a binding context that is not JSON fails permanently",
		stdin:  []byte("hello"),
		stdout: `{"error":{"message":"the binding context is not JSON: Expecting value: line 1 column 1 (char 0); it begins \"hello\"","permanent":true}}`,
	}}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			stdout, stderr, code := pyRunOnce(t, tc.stdin)
			if stdout != tc.stdout+"\n" || code != tc.code {
				t.Errorf("exit %d, stdout:\n%s\nwant exit %d, stdout:\n%s\nstderr:\n%s", code, stdout, tc.code, tc.stdout, stderr)
			}
			rest := stderr
			for _, want := range tc.stderrs {
				i := strings.Index(rest, want)
				if i < 0 {
					t.Errorf("stderr lacks %q (after what came before it):\n%s", want, stderr)
					break
				}
				rest = rest[i+len(want):]
			}
		})
	}
}

// pyServer is program.py run as opkit runs an exec handler with mode
// Serve: binding contexts written to its stdin, answers read from its
// stdout, its log from its stderr.
type pyServer struct {
	t       *testing.T
	stdin   io.WriteCloser
	stdoutR *os.File
	stderrR *os.File
	answers *bufio.Reader
	log     strings.Builder // what logged read so far
	waited  chan struct{}
	waitErr error // once waited is closed
}

// startPyServer starts program.py in mode Serve; the test's end closes
// its stdin and kills what is left of it.
func startPyServer(t *testing.T) *pyServer {
	t.Helper()
	cmd := pyProgram(t, "OPKIT_MODE=Serve")
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdoutR, stdoutW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	stderrR, stderrW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout, cmd.Stderr = stdoutW, stderrW
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	stdoutW.Close()
	stderrW.Close()
	s := &pyServer{t: t, stdin: stdin, stdoutR: stdoutR, stderrR: stderrR, answers: bufio.NewReader(stdoutR), waited: make(chan struct{})}
	go func() {
		s.waitErr = cmd.Wait()
		close(s.waited)
	}()
	t.Cleanup(func() {
		_ = stdin.Close()
		_ = cmd.Process.Kill()
		<-s.waited
	})
	return s
}

// send writes the binding context of run on trigger for spec.name name.
func (s *pyServer) send(trigger, name string) error {
	_, err := s.stdin.Write(append(pyContext(s.t, trigger, name), '\n'))
	return err
}

// answer reads the next line of stdout, waiting at most timeout.
func (s *pyServer) answer(timeout time.Duration) (string, error) {
	_ = s.stdoutR.SetReadDeadline(time.Now().Add(timeout))
	return s.answers.ReadString('\n')
}

// logged reads what the process wrote on stderr and is in the pipe now:
// what it wrote before its answer.
func (s *pyServer) logged() string {
	var got []byte
	buf := make([]byte, 64<<10)
	for {
		_ = s.stderrR.SetReadDeadline(time.Now().Add(20 * time.Millisecond))
		n, err := s.stderrR.Read(buf)
		got = append(got, buf[:n]...)
		if err != nil {
			break
		}
	}
	s.log.Write(got)
	return string(got)
}

// stderr is all the process wrote on stderr so far.
func (s *pyServer) stderr() string {
	s.logged()
	return s.log.String()
}

// waitLog waits at most timeout for want on stderr, and reports whether
// it came.
func (s *pyServer) waitLog(want string, timeout time.Duration) bool {
	for deadline := time.Now().Add(timeout); time.Now().Before(deadline); {
		if strings.Contains(s.stderr(), want) {
			return true
		}
	}
	return false
}

// end closes stdin and checks that the process then ends, with exit 0
// and nothing more on stdout.
func (s *pyServer) end() {
	s.t.Helper()
	if err := s.stdin.Close(); err != nil {
		s.t.Fatal(err)
	}
	rest, err := s.answer(time.Minute)
	if rest != "" || !errors.Is(err, io.EOF) {
		s.t.Errorf("after the last answer, stdout has %q (%v); want its end", rest, err)
	}
	select {
	case <-s.waited:
		if s.waitErr != nil {
			s.t.Errorf("at the end of stdin: %v, want exit 0; stderr:\n%s", s.waitErr, s.stderr())
		}
	case <-time.After(time.Minute):
		s.t.Fatalf("the process did not end a minute after its stdin did; stderr:\n%s", s.stderr())
	}
}

// TestPythonHandlerServe runs a handler program on the SDK as opkit runs
// an exec handler with mode Serve: a binding context per line, each
// answered by one line, its log on stderr before it; what the handler
// prints never reaches stdout; the end of stdin ends it, exit 0.
func TestPythonHandlerServe(t *testing.T) {
	s := startPyServer(t)
	runs := []struct {
		trigger, name string
		answer        string
		logs          []string
	}{{
		trigger: "create", name: "World",
		answer: `{"status":{"greeting":"Bonjour, World!"},"events":[{"type":"Normal","reason":"Greeted","message":"Bonjour, World!"}]}`,
		logs:   []string{"log: create of World (attempt 1)\n", "print: greeting World\n"},
	}, {
		trigger: "update", name: "bug",
		answer: `{"error":{"message":"ValueError: invalid literal for int() with base 10: 'bug'"}}`,
		logs:   []string{"log: update of bug (attempt 1)\n", "print: greeting bug\n", "Traceback (most recent call last):\n", "ValueError: invalid literal for int() with base 10: 'bug'\n"},
	}, {
		trigger: "update", name: "child",
		answer: `{"status":{"greeting":"Bonjour, child!"},"events":[{"type":"Normal","reason":"Greeted","message":"Bonjour, child!"}]}`,
		logs:   []string{"log: update of child (attempt 1)\n", "print: greeting child\n", "child: printed by a child process\n"},
	}}
	for i, run := range runs {
		if err := s.send(run.trigger, run.name); err != nil {
			t.Fatalf("run %d: writing its binding context: %v", i+1, err)
		}
		line, err := s.answer(time.Minute)
		if err != nil {
			t.Fatalf("run %d: no answer: %v (read %q); stderr:\n%s", i+1, err, line, s.stderr())
		}
		if line != run.answer+"\n" {
			t.Errorf("run %d: answer\n%s\nwant\n%s", i+1, line, run.answer)
		}
		// Everything the run logged is in the stderr pipe by the time its
		// answer is read: the SDK flushes stderr before it answers.
		got := s.logged()
		rest := got
		for _, want := range run.logs {
			j := strings.Index(rest, want)
			if j < 0 {
				t.Errorf("run %d: its log before its answer lacks %q (after what came before it):\n%s", i+1, want, got)
				break
			}
			rest = rest[j+len(want):]
		}
	}

	// The end of stdin ends the process, with exit 0 and nothing more on
	// stdout.
	s.end()
}

// TestPythonHandlerServeChildStdin runs, in mode Serve, a handler whose
// child process reads its stdin (subprocess.run without stdin=, as cat
// would): the child reads an empty stdin (/dev/null), not the engine's
// stream of binding contexts, so it neither blocks on it nor swallows the
// next context, and both runs are answered, in order.
func TestPythonHandlerServeChildStdin(t *testing.T) {
	s := startPyServer(t)
	if err := s.send("update", "stdin"); err != nil {
		t.Fatal(err)
	}
	// The next context comes while the first run's handler runs: it
	// prints before it starts its child.
	if !s.waitLog("print: greeting stdin\n", time.Minute) {
		t.Fatalf("the first run did not start; stderr:\n%s", s.stderr())
	}
	if err := s.send("create", "World"); err != nil {
		t.Fatal(err)
	}
	for i, name := range []string{"stdin", "World"} {
		want := `{"status":{"greeting":"Bonjour, ` + name + `!"},"events":[{"type":"Normal","reason":"Greeted","message":"Bonjour, ` + name + `!"}]}` + "\n"
		line, err := s.answer(30 * time.Second)
		if err != nil {
			// A child reading the engine's stream ends at its end: close
			// it, to see what it read.
			_ = s.stdin.Close()
			select {
			case <-s.waited:
			case <-time.After(time.Minute):
			}
			t.Fatalf("run %d: no answer in 30s (%v, read %q): the handler's child process read the binding contexts' stream? stderr:\n%s", i+1, err, line, s.stderr())
		}
		if line != want {
			t.Errorf("run %d: answer\n%s\nwant\n%s", i+1, line, want)
		}
	}
	if log := s.stderr(); !strings.Contains(log, "child: read 0 characters of stdin\n") {
		t.Errorf("the child process read something of stdin, which must be empty:\n%s", log)
	}
	s.end()
}

// TestPythonRequeueAfterIsGos checks requeueAfter in the SDK against the
// engine, which reads it with Go's time.ParseDuration and takes it
// positive: on many strings, the SDK's result check accepts exactly what
// Go does; and requeue_after() writes a timedelta as a duration Go reads
// back as the same (or refuses one past Go's maximum).
func TestPythonRequeueAfterIsGos(t *testing.T) {
	durations := []string{
		"30s", "1h30m", "1.5h", "1ns", "+30s", "-30s", ".5s", "5.s", ".s", "0", "+0", "-0", "0s", "", "30",
		"30s\n", " 30s", "30s ", "1h 30m", "5µs", "5μs", "5us", "1e3s", "1S", "1d",
		"0.0000000001s", "0.9ns", "0.999999999999999999999999s", "1.0000000000000000000001ns",
		"2562047h47m16.854775807s", "2562047h47m16.854775808s", "2562047h", "2562048h", "4800000h",
		"9223372036854775807ns", "9223372036854775808ns", "-9223372036854775808ns", "99999999999999999999h",
		"9223372036854775808ns9223372036854775808ns30s", "000000000000000000000000001s",
	}
	pieces := []string{"0", "1", "7", "00", "2562047", "854775807", "9223372036854775807", "9223372036854775808", ".", ".5",
		"+", "-", "h", "m", "s", "ms", "us", "µs", "μs", "ns", "x", "e", " ", "\n"}
	r := rand.New(rand.NewPCG(1, 2))
	for range 5000 {
		var b strings.Builder
		for range 1 + r.IntN(7) {
			b.WriteString(pieces[r.IntN(len(pieces))])
		}
		durations = append(durations, b.String())
	}
	const maxMicros = math.MaxInt64 / 1000
	micros := []int64{1, 999, 1000, 1500, 1_000_000, 1_500_000, 60_000_000, 3_600_000_000, 86_401_000_000, maxMicros, maxMicros + 1, 200000 * 86_400_000_000}
	for range 500 {
		micros = append(micros, 1+r.Int64N(maxMicros), 1+r.Int64N(1_000_000_000))
	}
	in, err := json.Marshal(map[string]any{"durations": durations, "micros": micros})
	if err != nil {
		t.Fatal(err)
	}
	const script = `
import json, sys
from datetime import timedelta
import opkit_handler as opkit

handlers = opkit.Handlers()
handlers.on()(lambda ctx: {"requeueAfter": ctx["requeueAfter"]})
given = json.load(sys.stdin)
accepted = ["error" not in handlers.call({"trigger": "update", "requeueAfter": d}) for d in given["durations"]]
written = []
for us in given["micros"]:
    try:
        written.append(opkit.requeue_after(timedelta(microseconds=us)))
    except ValueError as e:
        written.append("ValueError: " + str(e))
json.dump({"accepted": accepted, "written": written}, sys.stdout)
`
	cmd := exec.Command(sdktools.Python(t), "-c", script)
	cmd.Env = pyEnv(t)
	cmd.Stdin = bytes.NewReader(in)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("python: %v\n%s", err, stderr.Bytes())
	}
	var got struct {
		Accepted []bool   `json:"accepted"`
		Written  []string `json:"written"`
	}
	if err := json.Unmarshal(out, &got); err != nil || len(got.Accepted) != len(durations) || len(got.Written) != len(micros) {
		t.Fatalf("python printed %.300q (%v)", out, err)
	}
	wrong := 0
	for i, d := range durations {
		v, err := time.ParseDuration(d)
		if want := err == nil && v > 0; got.Accepted[i] != want && wrong < 20 {
			wrong++
			t.Errorf("requeueAfter %q: the SDK accepts it %v, the engine %v (time.ParseDuration: %v, %v)", d, got.Accepted[i], want, v, err)
		}
	}
	for i, us := range micros {
		w := got.Written[i]
		if us > maxMicros {
			if !strings.HasPrefix(w, "ValueError: requeue_after takes at most Go's maximum duration, 2562047h47m16.854775807s") {
				t.Errorf("requeue_after(timedelta(microseconds=%d)), past Go's maximum, = %q; want a ValueError naming the maximum", us, w)
			}
			continue
		}
		if v, err := time.ParseDuration(w); err != nil || v != time.Duration(us)*time.Microsecond {
			t.Errorf("requeue_after(timedelta(microseconds=%d)) = %q, which Go reads as %v (%v); want %v", us, w, v, err, time.Duration(us)*time.Microsecond)
		}
	}
}
