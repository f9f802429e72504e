package sdk_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/opkit-dev/opkit/internal/executor"
	"github.com/opkit-dev/opkit/internal/sdktools"
)

// tsDir is the TypeScript SDK's directory, from this package's.
const tsDir = "typescript"

// TestTypeScriptCompiledFilesAreCurrent checks that opkit.js and opkit.d.ts,
// which opkit init copies into a project that may never run tsc, are what
// tsc makes of opkit.ts now.
func TestTypeScriptCompiledFilesAreCurrent(t *testing.T) {
	t.Parallel()
	tsc := sdktools.TSC(t)
	out := t.TempDir()
	tsRun(t, exec.Command(tsc, "-p", filepath.Join(tsDir, "tsconfig.json"), "--outDir", out))
	for _, name := range []string{"opkit.js", "opkit.d.ts"} {
		want, err := os.ReadFile(filepath.Join(out, name))
		if err != nil {
			t.Fatalf("tsc made no %s: %v", name, err)
		}
		got, err := os.ReadFile(filepath.Join(tsDir, name))
		if err != nil {
			t.Errorf("sdk/typescript/%s: %v; make it: (cd sdk/typescript && %s -p tsconfig.json)", name, err, tsc)
			continue
		}
		if !bytes.Equal(got, want) {
			t.Errorf("sdk/typescript/%s is not what tsc makes of opkit.ts now (%s); regenerate it: (cd sdk/typescript && %s -p tsconfig.json)",
				name, tsFirstDifference(got, want), tsc)
		}
	}
}

// TestTypeScriptSDKTests compiles the SDK's own tests (sdk/typescript/test)
// with opkit.ts and runs them with node --test.
func TestTypeScriptSDKTests(t *testing.T) {
	t.Parallel()
	tsc, node := sdktools.TSC(t), sdktools.Node(t)
	out := t.TempDir()
	tsRun(t, exec.Command(tsc, "-p", filepath.Join(tsDir, "test", "tsconfig.json"), "--outDir", out))
	tsWrite(t, filepath.Join(out, "package.json"), `{"type": "module"}`)
	cmd := exec.Command(node, "--test", filepath.Join(out, "test", "opkit.test.js"))
	output := tsRun(t, cmd)
	if m := regexp.MustCompile(`(?m)^# pass (\d+)$`).FindStringSubmatch(output); m == nil || m[1] == "0" {
		t.Fatalf("node --test ran no test:\n%s", output)
	}
	if !regexp.MustCompile(`(?m)^# fail 0$`).MatchString(output) {
		t.Fatalf("node --test reports failures:\n%s", output)
	}
}

// TestTypeScriptTypeCheck runs tsc --strict --noEmit on the typed handlers
// of sdk/typescript/testdata: good.ts passes, and each bad one fails with
// one error, naming the field it gets wrong. (One tsc checks them all: each
// file is a module of its own, and its errors are named with it.)
func TestTypeScriptTypeCheck(t *testing.T) {
	t.Parallel()
	tsc := sdktools.TSC(t)
	bad := []struct{ file, field, what string }{
		{"misspelled_result.ts", "statsu", "a result's field misspelled"},
		{"unknown_field.ts", "nmae", "a spec field that is not the spec's"}, //nolint:misspell // the misspelling tsc must name
		{"misspelled_status.ts", "greetng", "a status field misspelled, in a typed table"},
	}
	files := []string{"good.ts"}
	for _, c := range bad {
		files = append(files, c.file)
	}
	out, err := tsCheck(t, tsc, files...)
	if err == nil {
		t.Fatalf("tsc --strict --noEmit passed the bad handlers too:\n%s", out)
	}
	errs := regexp.MustCompile(`(?m)^.*error TS\d+:.*$`).FindAllString(out, -1)
	errorsOf := func(file string) []string {
		var of []string
		for _, e := range errs {
			if strings.HasPrefix(e, filepath.Join(tsDir, "testdata", file)+"(") {
				of = append(of, e)
			}
		}
		return of
	}
	if of := errorsOf("good.ts"); len(of) > 0 {
		t.Errorf("tsc --strict --noEmit fails testdata/good.ts:\n%s", strings.Join(of, "\n"))
	}
	for _, c := range bad {
		if of := errorsOf(c.file); len(of) != 1 || !strings.Contains(of[0], "'"+c.field+"'") {
			t.Errorf("tsc on testdata/%s, %s: want one error, naming '%s'; got %d:\n%s", c.file, c.what, c.field, len(of), strings.Join(of, "\n"))
		}
	}
	n := 0
	for _, file := range files {
		n += len(errorsOf(file))
	}
	if n != len(errs) {
		t.Errorf("tsc reports errors in other files:\n%s", out)
	}
}

// TestTypeScriptDocsOnStdout checks that opkit.ts's doc comment and
// docs/sdk/typescript.md say what run keeps off the protocol's stdout and
// what it cannot (TestTypeScriptHandlerProcess shows both), how to spawn a
// child process, and that their examples await run().
func TestTypeScriptDocsOnStdout(t *testing.T) {
	t.Parallel()
	says := []string{
		"`console.log`", "`process.stdout.write`", // kept off stdout
		"`fs.writeSync(1, ...)`", "`stdio: \"inherit\"`", "`fork` by default", // not
		`stdio: ["ignore", 2, 2]`, "next binding context", // what to do, and why stdin "ignore"
		"await handlers.run();",
	}
	for _, path := range []string{filepath.Join(tsDir, "opkit.ts"), filepath.Join("..", "docs", "sdk", "typescript.md")} {
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		// The text, its lines joined as a reader reads them.
		text := regexp.MustCompile(`[ \t]*\n[ \t]*(\*[ \t]+)?`).ReplaceAllString(string(b), " ")
		for _, s := range says {
			if !strings.Contains(text, s) {
				t.Errorf("%s does not say %s", path, s)
			}
		}
		for _, wrong := range []string{"nothing but the SDK writes", "fs.writeSync(1, ...)`, gets past", "\nhandlers.run();"} {
			if strings.Contains(string(b), wrong) || strings.Contains(text, wrong) {
				t.Errorf("%s says %q, which is not so", path, wrong)
			}
		}
	}
}

// TestTypeScriptHandlerProcess compiles testdata/program.ts as a project
// would (its tsconfig, the committed opkit.js and opkit.d.ts beside it)
// and runs it with node: a process per run, and OPKIT_MODE=Serve.
func TestTypeScriptHandlerProcess(t *testing.T) {
	t.Parallel()
	tsc, node := sdktools.TSC(t), sdktools.Node(t)
	program := tsProject(t, tsc)

	greeted := func(greeting string) string {
		return `{"status":{"greeting":"` + greeting + `"},"events":[{"type":"Normal","reason":"Greeted","message":"` + greeting + `"}]}`
	}
	const bug = `{"error":{"message":"TypeError: Cannot read properties of undefined (reading 'text')"}}`
	const never = `{"error":{"message":"the handler's promise never settled: it returned before its work was done"}}`

	for _, c := range []struct {
		name, stdin string
		args        []string // the program's arguments
		code        int
		stdout      string // a regular expression all of stdout matches
		stderr      []string
	}{
		{name: "a result", stdin: tsContext("create", "World"), code: 0,
			stdout: regexp.QuoteMeta(greeted("Hello, World!") + "\n"),
			stderr: []string{"console.log of the run for World\n", "log of the run for World\n"}},
		{name: "nothing returned", stdin: tsContext("delete", "World"), code: 0, stdout: regexp.QuoteMeta("{}\n")},
		{name: "TemporaryError", stdin: tsContext("update", "temporary"), code: 75,
			stdout: regexp.QuoteMeta(`{"error":{"message":"the greeting service is down"}}` + "\n")},
		{name: "PermanentError", stdin: tsContext("update", "permanent"), code: 0,
			stdout: regexp.QuoteMeta(`{"error":{"message":"no greeting in Klingon","permanent":true}}` + "\n")},
		{name: "a bug", stdin: tsContext("create", "bug"), code: 1, stdout: regexp.QuoteMeta(bug + "\n"),
			stderr: []string{"TypeError: Cannot read properties of undefined (reading 'text')\n    at "}},
		{name: "no function for the trigger", stdin: tsContext("resume", "World"), code: 0,
			stdout: regexp.QuoteMeta(`{"error":{"message":"no function for trigger \"resume\": this program handles create, update, delete (handlers.on(\"resume\", fn) registers one, handlers.on(fn) the default for every trigger)","permanent":true}}` + "\n")},
		{name: "not JSON", stdin: "{nope\n", code: 0,
			stdout: `\{"error":\{"message":"the binding context is not valid JSON: [^\n]*; it begins \\"\{nope\\\\n\\"","permanent":true\}\}` + "\n"},
		// Node.js, with nothing left to do, would exit 0 having written
		// nothing: a success.
		{name: "a promise that never settles", stdin: tsContext("create", "never"), code: 1,
			stdout: regexp.QuoteMeta(never + "\n"), stderr: []string{"opkit: the handler's function returned a promise that never settled"}},
		{name: "a promise that never settles, run() not awaited", stdin: tsContext("create", "never"), args: []string{"--no-await"}, code: 1,
			stdout: regexp.QuoteMeta(never + "\n"), stderr: []string{"opkit: the handler's function returned a promise that never settled"}},
		{name: "a child process as the SDK's doc says: stdio ignore, 2, 2", stdin: tsContext("create", "child"), code: 0,
			stdout: regexp.QuoteMeta(greeted("Hi, child!") + "\n"), stderr: []string{"stdout of the child of the run for child\n"}},
		// What the doc says the SDK cannot keep off stdout: should this
		// change, so should opkit.ts's doc and docs/sdk/typescript.md.
		{name: "a child process with inherited stdout writes among the answers", stdin: tsContext("create", "child inherit"), code: 0,
			stdout: regexp.QuoteMeta("stdout of the child of the run for child inherit\n{}\n")},
	} {
		t.Run("per run/"+c.name, func(t *testing.T) {
			t.Parallel()
			var stdout, stderr bytes.Buffer
			cmd := tsCommand(t, node, program, false, c.stdin)
			cmd.Args = append(cmd.Args, c.args...)
			cmd.Stdout, cmd.Stderr = &stdout, &stderr
			code := tsExitCode(t, cmd.Run())
			if code != c.code {
				t.Errorf("exit status %d, want %d; stderr:\n%s", code, c.code, stderr.String())
			}
			if !regexp.MustCompile(`^(?:` + c.stdout + `)$`).MatchString(stdout.String()) {
				t.Errorf("stdout:\n%s\nwant it to match:\n%s", stdout.String(), c.stdout)
			}
			for _, s := range c.stderr {
				if !strings.Contains(stderr.String(), s) {
					t.Errorf("stderr does not have %q:\n%s", s, stderr.String())
				}
			}
		})
	}

	names := []string{"World", "bug", "Ada"}
	answers := []string{greeted("Hello, World!"), bug, greeted("Bonjour, Ada!")}
	var stdin strings.Builder
	for _, name := range names {
		stdin.WriteString(tsContext("create", name))
	}

	t.Run("Serve/a line per context, only answers on stdout", func(t *testing.T) {
		t.Parallel()
		var stdout, stderr bytes.Buffer
		cmd := tsCommand(t, node, program, true, stdin.String())
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		if code := tsExitCode(t, cmd.Run()); code != 0 {
			t.Errorf("at the end of stdin: exit status %d, want 0; stderr:\n%s", code, stderr.String())
		}
		if want := strings.Join(answers, "\n") + "\n"; stdout.String() != want {
			t.Errorf("stdout:\n%s\nwant the answers, in order, and nothing else:\n%s", stdout.String(), want)
		}
		for _, name := range names {
			if s := "console.log of the run for " + name + "\n"; !strings.Contains(stderr.String(), s) {
				t.Errorf("stderr does not have what the program's console.log wrote, %q:\n%s", s, stderr.String())
			}
		}
	})

	t.Run("Serve/a promise that never settles, at the end of stdin", func(t *testing.T) {
		t.Parallel()
		var stdout, stderr bytes.Buffer
		cmd := tsCommand(t, node, program, true, tsContext("create", "never"))
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		if code := tsExitCode(t, cmd.Run()); code != 1 {
			t.Errorf("exit status %d, want 1; stderr:\n%s", code, stderr.String())
		}
		if want := never + "\n"; stdout.String() != want {
			t.Errorf("stdout:\n%s\nwant:\n%s", stdout.String(), want)
		}
	})

	t.Run("Serve/a child process with stdin ignored takes no binding context", func(t *testing.T) {
		t.Parallel()
		var stdout, stderr bytes.Buffer
		cmd := tsCommand(t, node, program, true, tsContext("create", "child")+tsContext("create", "World"))
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		if code := tsExitCode(t, cmd.Run()); code != 0 {
			t.Errorf("exit status %d, want 0; stderr:\n%s", code, stderr.String())
		}
		if want := greeted("Hi, child!") + "\n" + greeted("Hello, World!") + "\n"; stdout.String() != want {
			t.Errorf("stdout:\n%s\nwant:\n%s", stdout.String(), want)
		}
		if s := "stdout of the child of the run for child\n"; !strings.Contains(stderr.String(), s) {
			t.Errorf("stderr does not have the child's output, %q:\n%s", s, stderr.String())
		}
	})

	t.Run("Serve/requeueAfter: the SDK passes only what the engine accepts", func(t *testing.T) {
		t.Parallel()
		tsRequeueAfter(t, node, program)
	})

	t.Run("Serve/each run's log before its answer", func(t *testing.T) {
		t.Parallel()
		// stdout and stderr share one pipe, so what comes out is in the
		// order the process wrote it.
		var both bytes.Buffer
		cmd := tsCommand(t, node, program, true, stdin.String())
		cmd.Stdout, cmd.Stderr = &both, &both
		if code := tsExitCode(t, cmd.Run()); code != 0 {
			t.Errorf("exit status %d, want 0; output:\n%s", code, both.String())
		}
		// Each run logs three lines (console.log's, console.error's, its
		// end), the bug two and its stack.
		run, logged, traced := 0, 0, false
		for _, line := range strings.Split(strings.TrimSuffix(both.String(), "\n"), "\n") {
			switch {
			case strings.HasPrefix(line, "{"):
				if run >= len(names) || line != answers[run] {
					t.Fatalf("answer %d is %s, want %s; output:\n%s", run+1, line, answers[min(run, len(answers)-1)], both.String())
				}
				if want := map[bool]int{true: 2, false: 3}[names[run] == "bug"]; logged != want || traced != (names[run] == "bug") {
					t.Fatalf("the answer of the run for %s came before its log was all written; output:\n%s", names[run], both.String())
				}
				run, logged, traced = run+1, 0, false
			case strings.HasSuffix(line, "of the run for "+tsAt(names, run)):
				logged++
			case strings.HasPrefix(line, "    at "):
				traced = true
			case strings.Contains(line, "of the run for "):
				t.Fatalf("%q came while the run for %s was answered; output:\n%s", line, tsAt(names, run), both.String())
			}
		}
		if run != len(names) {
			t.Fatalf("%d answers, want %d; output:\n%s", run, len(names), both.String())
		}
	})
}

// tsRequeueAfter has program (in mode Serve) return requeueAfter strings,
// edge cases and random ones, and compares what the SDK lets through with
// what the engine's executor.ParseResult (time.ParseDuration) accepts: the
// SDK must refuse whatever the engine would, and pass whatever the engine
// accepts that the result's schema allows (a digit, a fraction, a unit,
// repeated: not Go's sign, bare "0", ".5s" or "μs").
func tsRequeueAfter(t *testing.T, node, program string) {
	schema := regexp.MustCompile(`^([0-9]+(\.[0-9]+)?(ns|us|µs|ms|s|m|h))+$`)
	durations := []string{
		"30s", "1h30m", "1.5h", "0s", "0.0000000001s", "0.000000001s", "0.9ns", "1.9ns", "0.5us", "0.0005us",
		"0.0000000000001h", "0.0000000000003h", "0.3333333333333333333333h", "2562047h47m16.854775807s",
		"2562047h47m16.854775808s", "2562047h47m17s", "2562048h", "2562047.7880152155h", "2562047.78801521h",
		"9223372036854775807ns", "9223372036854775808ns", "9223372036854775.807us", "9223372036854775.808us",
		"9223372036854.775807ms", "9223372036.854775807s", "9223372036.854775808s", "153722867m16.854775807s",
		"153722867.280912930117m", "9223372036854775808ns9223372036854775808ns", "18446744073709551616ns",
		"99999999999999999999999999999s", "000000000000000000000000000001s", "1.99999999999999999999999999ns",
		"1h0.00000000000000000000000000001s", "0.00000000000000000000000000001h", "1µs", "1μs", "+5s", "-5s",
		".5s", "5.s", "0", "", "5", "5 s", "1d", "1e3s", "1.5.5s", "1h1h1h",
	}
	rnd := rand.New(rand.NewPCG(1, 2))
	units := []string{"ns", "us", "µs", "ms", "s", "m", "h"}
	digits := func(most int) string {
		n := rnd.IntN(most + 1)
		b := make([]byte, n)
		for i := range b {
			b[i] = byte('0' + rnd.IntN(10))
			if rnd.IntN(3) == 0 {
				b[i] = '0'
			}
		}
		return string(b)
	}
	for range 400 {
		var d strings.Builder
		for range 1 + rnd.IntN(3) {
			d.WriteString(digits([]int{3, 12, 20}[rnd.IntN(3)]))
			if rnd.IntN(2) == 0 {
				d.WriteString("." + digits([]int{3, 12, 25}[rnd.IntN(3)]))
			}
			d.WriteString(units[rnd.IntN(len(units))])
		}
		durations = append(durations, d.String())
	}

	var stdin strings.Builder
	for _, d := range durations {
		stdin.WriteString(tsContext("create", "requeue "+d))
	}
	var stdout, stderr bytes.Buffer
	cmd := tsCommand(t, node, program, true, stdin.String())
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if code := tsExitCode(t, cmd.Run()); code != 0 {
		t.Fatalf("exit status %d, want 0; stderr:\n%s", code, stderr.String())
	}
	answers := strings.Split(strings.TrimSuffix(stdout.String(), "\n"), "\n")
	if len(answers) != len(durations) {
		t.Fatalf("%d answers, want %d; stdout:\n%s", len(answers), len(durations), stdout.String())
	}
	passed, refused := 0, 0
	for i, d := range durations {
		q, err := json.Marshal(map[string]string{"requeueAfter": d})
		if err != nil {
			t.Fatal(err)
		}
		_, engineErr := executor.ParseResult(q)
		var answer struct {
			RequeueAfter *string
			Error        *struct {
				Message   string
				Permanent bool
			}
		}
		if err := json.Unmarshal([]byte(answers[i]), &answer); err != nil {
			t.Fatalf("answer for %q: %v: %s", d, err, answers[i])
		}
		switch {
		case answer.RequeueAfter != nil && *answer.RequeueAfter == d && answer.Error == nil:
			passed++
			if engineErr != nil {
				t.Errorf("requeueAfter %q: the SDK passes it, the engine refuses it: %v", d, engineErr)
			}
		case answer.Error != nil && answer.Error.Permanent && strings.HasPrefix(answer.Error.Message, `result field "requeueAfter" `):
			refused++
			if engineErr == nil && schema.MatchString(d) {
				t.Errorf("requeueAfter %q: the SDK refuses it (%s), the engine and the schema accept it", d, answer.Error.Message)
			}
		default:
			t.Errorf("requeueAfter %q: answer %s, want it written or refused permanently, naming the field", d, answers[i])
		}
	}
	if passed < 100 || refused < 50 {
		t.Errorf("%d durations passed and %d refused: want more of each to compare", passed, refused)
	}
}

// tsContext is a binding context of trigger for the Greeting name, on a
// line.
func tsContext(trigger, name string) string {
	b, err := json.Marshal(map[string]any{
		"operator": "greetings", "handler": "greet", "trigger": trigger,
		"runId": "01jd5v3q8m2k4x7zab", "idempotencyKey": "0b6a3f2e/1/greet", "attempt": 1,
		"object": map[string]any{
			"apiVersion": "demo.example.com/v1", "kind": "Greeting",
			"metadata": map[string]any{"name": strings.ToLower(name), "namespace": "default", "generation": 1},
			"spec":     map[string]any{"name": name},
		},
		"old": nil, "diff": nil, "children": map[string]any{},
	})
	if err != nil {
		panic(err)
	}
	return string(b) + "\n"
}

// tsAt is names[i], or "" past its end.
func tsAt(names []string, i int) string {
	if i < len(names) {
		return names[i]
	}
	return ""
}

// tsProject makes a project of testdata/program.ts, as opkit init's
// files and a project's tsconfig make one, compiles it, and gives the path
// of the program's JavaScript.
func tsProject(t *testing.T, tsc string) string {
	t.Helper()
	dir := t.TempDir()
	for from, to := range map[string]string{
		"opkit.js":             "opkit.js",
		"opkit.d.ts":           "opkit.d.ts",
		"testdata/program.ts":  "testdata/program.ts",
		"testdata/greeting.ts": "testdata/greeting.ts",
	} {
		b, err := os.ReadFile(filepath.Join(tsDir, from))
		if err != nil {
			t.Fatal(err)
		}
		tsWrite(t, filepath.Join(dir, to), string(b))
	}
	tsWrite(t, filepath.Join(dir, "package.json"), `{"type": "module"}`)
	tsWrite(t, filepath.Join(dir, "tsconfig.json"), `{
  "compilerOptions": {"target": "ES2022", "module": "nodenext", "strict": true, "types": []},
  "include": ["testdata/*.ts"]
}`)
	tsRun(t, exec.Command(tsc, "-p", filepath.Join(dir, "tsconfig.json")))
	return filepath.Join(dir, "testdata", "program.js")
}

// tsCheck runs tsc --strict --noEmit on testdata's files, as a project's
// tsconfig (ES2022, nodenext) would, with no @types of the machine's; its
// output names each file from this package's directory.
func tsCheck(t *testing.T, tsc string, files ...string) (string, error) {
	t.Helper()
	var paths []string
	for _, file := range files {
		path, err := filepath.Abs(filepath.Join(tsDir, "testdata", file))
		if err != nil {
			t.Fatal(err)
		}
		paths = append(paths, path)
	}
	config, err := json.Marshal(map[string]any{
		"compilerOptions": map[string]any{"strict": true, "noEmit": true, "target": "ES2022", "module": "nodenext", "types": []string{}},
		"files":           paths,
	})
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	tsWrite(t, filepath.Join(dir, "tsconfig.json"), string(config))
	cmd := exec.Command(tsc, "-p", filepath.Join(dir, "tsconfig.json"), "--pretty", "false")
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// tsCommand is node running program with stdin, in the environment an
// exec handler gets: with OPKIT_MODE=Serve when serve.
func tsCommand(t *testing.T, node, program string, serve bool, stdin string) *exec.Cmd {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	cmd := exec.CommandContext(ctx, node, program)
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + os.Getenv("HOME"), "OPKIT_HANDLER=greet"}
	if serve {
		cmd.Env = append(cmd.Env, "OPKIT_MODE=Serve")
	}
	cmd.Stdin = strings.NewReader(stdin)
	return cmd
}

// tsExitCode is the exit status of a process that ran with err.
func tsExitCode(t *testing.T, err error) int {
	t.Helper()
	if err == nil {
		return 0
	}
	var exit *exec.ExitError
	if !errors.As(err, &exit) {
		t.Fatalf("running the program: %v", err)
	}
	return exit.ExitCode()
}

// tsRun runs cmd, failing the test with its output if it fails, and gives
// its output.
func tsRun(t *testing.T, cmd *exec.Cmd) string {
	t.Helper()
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%s: %v\n%s", strings.Join(cmd.Args, " "), err, out)
	}
	return string(out)
}

// tsWrite writes a file, and its directory.
func tsWrite(t *testing.T, path, text string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
}

// tsFirstDifference says where got first differs from want, by line.
func tsFirstDifference(got, want []byte) string {
	g, w := strings.Split(string(got), "\n"), strings.Split(string(want), "\n")
	for i := 0; i < len(g) && i < len(w); i++ {
		if g[i] != w[i] {
			return "line " + strconv.Itoa(i+1) + " is " + strconv.Quote(g[i]) + ", tsc makes " + strconv.Quote(w[i])
		}
	}
	return "it has " + strconv.Itoa(len(g)) + " lines, tsc makes " + strconv.Itoa(len(w))
}
