package handler_test

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/opkit-dev/opkit/pkg/handler"
)

// asHandler in the environment makes the test binary the handler program
// of programTable: the tests below run it as opkit runs a handler.
const asHandler = "HANDLER_TEST_AS_PROGRAM"

func TestMain(m *testing.M) {
	if os.Getenv(asHandler) != "" {
		handler.Main(programTable)
	}
	os.Exit(m.Run())
}

// earlyStdout is descriptor 1 as a package taken before Main would hold
// it: it must write to the log too.
var earlyStdout = os.NewFile(1, "early stdout")

var programTable = table{
	handler.OnCreate: func(ctx context.Context, c *runCtx) (*result, error) {
		handler.Logf(ctx, "creating %s", c.Object.Metadata.Name)
		fmt.Println("a stray print")
		fmt.Fprintln(earlyStdout, "a stray write to descriptor 1")
		return &result{Status: &status{Greeting: "Hello, World!"}, RequeueAfter: handler.Duration(90 * time.Second)}, nil
	},
	handler.OnUpdate: fails(handler.Temporary(errors.New("the greeting service is down"))),
	handler.OnDelete: fails(handler.Permanent(errors.New("the DNS record is not ours"))),
	handler.OnResume: fails(errors.New("a bug")),
	handler.OnWhen:   func(context.Context, *runCtx) (*result, error) { panic("boom") },
	handler.OnSchedule: func(ctx context.Context, c *runCtx) (*result, error) {
		handler.Logf(ctx, "waiting for the slot")
		<-ctx.Done()
		return nil, fmt.Errorf("waiting for the slot: %w", context.Cause(ctx))
	},
}

// program is the test binary as the handler, in mode Serve or not.
func program(t *testing.T, serve bool) *exec.Cmd {
	t.Helper()
	cmd := exec.CommandContext(t.Context(), os.Args[0])
	cmd.Env = slices.DeleteFunc(os.Environ(), func(v string) bool { return strings.HasPrefix(v, "OPKIT_MODE=") })
	cmd.Env = append(cmd.Env, asHandler+"=1")
	if serve {
		cmd.Env = append(cmd.Env, "OPKIT_MODE=Serve")
	}
	cmd.WaitDelay = 10 * time.Second
	return cmd
}

func exitStatus(t *testing.T, err error) int {
	t.Helper()
	var exit *exec.ExitError
	switch {
	case err == nil:
		return 0
	case errors.As(err, &exit):
		return exit.ExitCode()
	default:
		t.Fatalf("the handler did not run: %v", err)
		return -1
	}
}

func TestAProcessPerRunAnswersAndExitsByTheErrorsKind(t *testing.T) {
	for _, c := range []struct {
		trigger handler.Trigger
		stdout  string
		exit    int
		stderr  string // a prefix of it
	}{
		{handler.OnCreate, `{"status":{"greeting":"Hello, World!"},"requeueAfter":"1m30s"}`, 0,
			"creating world\na stray print\na stray write to descriptor 1\n"},
		{handler.OnUpdate, `{"error":{"message":"the greeting service is down"}}`, 75, ""},
		{handler.OnDelete, `{"error":{"message":"the DNS record is not ours","permanent":true}}`, 0, ""},
		{handler.OnResume, `{"error":{"message":"a bug"}}`, 1, "error: a bug\n"},
		{handler.OnWhen, `{"error":{"message":"panic: boom"}}`, 1, "panic: boom\n\ngoroutine "},
		{handler.OnRequeue, `{"error":{"message":"this program has no function for trigger \"requeue\" and no default: it handles create, update, delete, resume, schedule, when","permanent":true}}`, 0, ""},
	} {
		cmd := program(t, false)
		cmd.Stdin = strings.NewReader(answer(t, world(c.trigger)))
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		exit := exitStatus(t, cmd.Run())
		if stdout.String() != c.stdout+"\n" || exit != c.exit || !strings.HasPrefix(stderr.String(), c.stderr) || c.stderr == "" && stderr.Len() > 0 {
			t.Errorf("%s: exit %d, stdout %q, stderr %q\nwant exit %d, stdout %q, stderr %q", c.trigger, exit, stdout.String(), stderr.String(), c.exit, c.stdout+"\n", c.stderr)
		}
	}
}

func TestAProcessPerRunAnswersAContextThatIsNotJSONWithAPermanentError(t *testing.T) {
	cmd := program(t, false)
	cmd.Stdin = strings.NewReader("hello")
	out, err := cmd.Output()
	want := `{"error":{"message":"reading the binding context: it is not JSON: invalid character 'h' looking for beginning of value (at byte 1 of \"hello\")","permanent":true}}` + "\n"
	if exit := exitStatus(t, err); string(out) != want || exit != 0 {
		t.Errorf("exit %d, stdout %q; want 0, %q", exit, out, want)
	}
}

// serveAndRead starts the program in mode Serve with stdout and stderr on
// one pipe, as written, in order, and returns a function that sends a
// line and returns what the program wrote up to its answer, and one that
// ends its input and returns the rest and the exit status.
func serveAndRead(t *testing.T) (send func(line string) []string, end func() ([]string, int)) {
	t.Helper()
	cmd := program(t, true)
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	t.Cleanup(func() { r.Close() })
	cmd.Stdout, cmd.Stderr = w, w
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	if err := r.SetReadDeadline(time.Now().Add(time.Minute)); err != nil {
		t.Fatal(err)
	}
	lines := bufio.NewReader(r)
	send = func(line string) []string {
		t.Helper()
		if _, err := stdin.Write([]byte(line + "\n")); err != nil {
			t.Fatal(err)
		}
		var got []string
		for {
			l, err := lines.ReadString('\n')
			if err != nil {
				t.Fatalf("reading the program's output after %q: %v", got, err)
			}
			got = append(got, strings.TrimSuffix(l, "\n"))
			if strings.HasPrefix(l, "{") {
				return got
			}
		}
	}
	end = func() ([]string, int) {
		t.Helper()
		_ = stdin.Close()
		var rest []string
		for {
			l, err := lines.ReadString('\n')
			if err != nil {
				break
			}
			rest = append(rest, strings.TrimSuffix(l, "\n"))
		}
		return rest, exitStatus(t, cmd.Wait())
	}
	return send, end
}

func TestServeModeAnswersEachLineInOrderAfterItsLogAndExitsAtTheEnd(t *testing.T) {
	send, end := serveAndRead(t)
	for _, c := range []struct {
		trigger handler.Trigger
		want    []string
	}{
		{handler.OnCreate, []string{"creating world", "a stray print", "a stray write to descriptor 1", `{"status":{"greeting":"Hello, World!"},"requeueAfter":"1m30s"}`}},
		{handler.OnUpdate, []string{`{"error":{"message":"the greeting service is down"}}`}},
		{handler.OnResume, []string{"error: a bug", `{"error":{"message":"a bug"}}`}},
		{handler.OnDelete, []string{`{"error":{"message":"the DNS record is not ours","permanent":true}}`}},
	} {
		if got := send(answer(t, world(c.trigger))); !slices.Equal(got, c.want) {
			t.Errorf("%s: the program wrote\n%s\nwant\n%s", c.trigger, strings.Join(got, "\n"), strings.Join(c.want, "\n"))
		}
	}
	got := send("not JSON")
	if len(got) != 1 || !strings.HasPrefix(got[0], `{"error":{"message":"reading the binding context: it is not JSON: `) || !strings.HasSuffix(got[0], `,"permanent":true}}`) {
		t.Errorf("a line that is not JSON was answered %q", got)
	}
	if got := send(answer(t, world(handler.OnWhen))); got[0] != "panic: boom" || got[len(got)-1] != `{"error":{"message":"panic: boom"}}` {
		t.Errorf("a panic was answered\n%s", strings.Join(got, "\n"))
	}
	if got := send(answer(t, world(handler.OnCreate))); got[len(got)-1] != `{"status":{"greeting":"Hello, World!"},"requeueAfter":"1m30s"}` {
		t.Errorf("after a panic, create was answered %q", got)
	}
	if rest, exit := end(); len(rest) > 0 || exit != 0 {
		t.Errorf("at the end of its input the program wrote %q and exited %d, want nothing and 0", rest, exit)
	}
}

func TestServeModeWritesNothingButAnswersToStdout(t *testing.T) {
	cmd := program(t, true)
	var in strings.Builder
	for _, trigger := range []handler.Trigger{handler.OnCreate, handler.OnResume, handler.OnCreate} {
		in.WriteString(answer(t, world(trigger)) + "\n")
	}
	cmd.Stdin = strings.NewReader(in.String())
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	want := `{"status":{"greeting":"Hello, World!"},"requeueAfter":"1m30s"}
{"error":{"message":"a bug"}}
{"status":{"greeting":"Hello, World!"},"requeueAfter":"1m30s"}
`
	if exit := exitStatus(t, err); string(out) != want || exit != 0 {
		t.Errorf("exit %d, stdout\n%s\nwant 0 and\n%s", exit, out, want)
	}
	if n := strings.Count(stderr.String(), "a stray print\n"); n != 2 {
		t.Errorf("stderr has %d stray prints, want 2: %q", n, stderr.String())
	}
}

func TestSIGTERMCancelsTheRunWhichFailsTemporarily(t *testing.T) {
	cmd := program(t, false)
	cmd.Stdin = strings.NewReader(answer(t, world(handler.OnSchedule)))
	var stdout bytes.Buffer
	cmd.Stdout = &stdout
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	if l, err := bufio.NewReader(stderr).ReadString('\n'); l != "waiting for the slot\n" {
		t.Fatalf("the run logged %q (%v), want it waiting", l, err)
	}
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	exit := exitStatus(t, cmd.Wait())
	want := `{"error":{"message":"waiting for the slot: terminated signal received"}}` + "\n"
	if stdout.String() != want || exit != 75 {
		t.Errorf("after SIGTERM: exit %d, stdout %q; want 75, %q", exit, stdout.String(), want)
	}
}

func TestServeModeExitsOnSIGTERMBetweenRuns(t *testing.T) {
	cmd := program(t, true)
	stdin, err := cmd.StdinPipe() // open: the program waits for a line
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = stdin.Close() }()
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	// The signal may come before Main listens for it: the default
	// action ends the process too.
	time.Sleep(100 * time.Millisecond)
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		if err == nil {
			t.Errorf("the program exited 0 on SIGTERM; stderr %q", stderr.String())
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the program waits for a line after SIGTERM")
	}
}
