package runner

import (
	"context"
	"encoding/xml"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/opkit-dev/opkit/internal/archive"
	"github.com/opkit-dev/opkit/internal/scenario"
)

// A failure report shows the last reportRuns runs, and the last logTail
// bytes of each one's log.
const (
	reportRuns = 20
	logTail    = 2048
)

// failure is the report of a failed step: where, what was expected and
// found, then the scenario's runs with their logs, those of the failed
// runs and of the handlers the step named first.
func (r *scenarioRun) failure(step *scenario.Step, err error) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s:%d: %s: %v\n", r.sc.File, step.Line, describe(step), err)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	runs, lerr := r.runs(ctx, archive.Query{})
	if lerr != nil {
		fmt.Fprintf(&b, "(the runs cannot be read: %v)\n", lerr)
		return b.String()
	}
	if len(runs) == 0 {
		b.WriteString("no handler ran\n")
		return b.String()
	}
	if len(runs) > reportRuns {
		fmt.Fprintf(&b, "the last %d of %d runs, oldest first:\n", reportRuns, len(runs))
		runs = runs[:reportRuns]
	} else {
		b.WriteString("runs, oldest first:\n")
	}
	for i := len(runs) - 1; i >= 0; i-- {
		run := runs[i]
		mark := ""
		if r.wasNamed(run) {
			mark = " (checked by the step)"
		}
		fmt.Fprintf(&b, "  %s %s%s\n", run.ID, runLine(run), mark)
		l, err := r.store.Logs(ctx, run.ID, 0)
		if err != nil || len(l.Data) == 0 {
			continue
		}
		data := l.Data
		if len(data) > logTail {
			data = append([]byte("…"), data[len(data)-logTail:]...)
		}
		b.WriteString("    log:\n")
		for _, line := range strings.Split(strings.TrimRight(string(data), "\n"), "\n") {
			b.WriteString("      " + line + "\n")
		}
	}
	return b.String()
}

// wasNamed reports whether a failing step's check named the run's
// handler (and object).
func (r *scenarioRun) wasNamed(run archive.Run) bool {
	for _, q := range r.named {
		if q.Operator == run.Operator && q.Handler == run.Handler && (q.Name == "" || q.Name == run.Name) {
			return true
		}
	}
	return false
}

// report prints a scenario's end, as go test does: its verbose output
// (with -v), then PASS or FAIL with its failure.
func report(w io.Writer, res *Result, verbose bool) {
	name := fmt.Sprintf("%s: %s", res.Scenario.File, res.Scenario.Name)
	if verbose {
		fmt.Fprintf(w, "=== RUN   %s\n%s", name, res.Output)
	}
	if res.Passed() {
		if verbose {
			fmt.Fprintf(w, "--- PASS: %s (%.2fs)\n", name, res.Duration.Seconds())
		}
		return
	}
	fmt.Fprintf(w, "--- FAIL: %s (%.2fs)\n", name, res.Duration.Seconds())
	for _, line := range strings.Split(strings.TrimRight(res.Failure, "\n"), "\n") {
		fmt.Fprintf(w, "    %s\n", line)
	}
}

// WriteJUnit writes the results as a JUnit XML report, one test suite per
// scenario file, as CI systems read them.
func WriteJUnit(path string, results []*Result) error {
	type failure struct {
		Message string `xml:"message,attr"`
		Text    string `xml:",chardata"`
	}
	type testcase struct {
		Name      string    `xml:"name,attr"`
		Classname string    `xml:"classname,attr"`
		Time      string    `xml:"time,attr"`
		Failure   *failure  `xml:"failure,omitempty"`
		Skipped   *struct{} `xml:"skipped,omitempty"`
		SystemOut string    `xml:"system-out,omitempty"`
	}
	type suite struct {
		Name     string     `xml:"name,attr"`
		Tests    int        `xml:"tests,attr"`
		Failures int        `xml:"failures,attr"`
		Skipped  int        `xml:"skipped,attr"`
		Time     string     `xml:"time,attr"`
		Cases    []testcase `xml:"testcase"`
	}
	var suites []*suite
	byFile := map[string]*suite{}
	for _, res := range results {
		s := byFile[res.Scenario.File]
		if s == nil {
			s = &suite{Name: res.Scenario.File}
			byFile[res.Scenario.File] = s
			suites = append(suites, s)
		}
		c := testcase{Name: res.Scenario.Name, Classname: res.Scenario.File, Time: fmt.Sprintf("%.3f", res.Duration.Seconds()), SystemOut: res.Output}
		s.Tests++
		switch {
		case res.Skipped:
			c.Skipped = &struct{}{}
			s.Skipped++
		case res.Failure != "":
			first, _, _ := strings.Cut(res.Failure, "\n")
			c.Failure = &failure{Message: first, Text: res.Failure}
			s.Failures++
		}
		s.Cases = append(s.Cases, c)
	}
	for _, s := range suites {
		var total time.Duration
		for _, res := range results {
			if res.Scenario.File == s.Name {
				total += res.Duration
			}
		}
		s.Time = fmt.Sprintf("%.3f", total.Seconds())
	}
	data, err := xml.MarshalIndent(struct {
		XMLName xml.Name `xml:"testsuites"`
		Suites  []*suite `xml:"testsuite"`
	}{Suites: suites}, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append([]byte(xml.Header), append(data, '\n')...), 0o644)
}
