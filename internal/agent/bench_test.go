package agent

import (
	"bytes"
	"slices"
	"testing"
	"time"

	"github.com/opkit-dev/opkit/api/v1alpha1"
	"github.com/opkit-dev/opkit/internal/executor"
)

// BenchmarkRunOverhead runs one handler through a warm agent and as a
// local exec, and reports each one's p50 latency and the difference
// (issue 36 wants it under 10ms):
//
//	go test -run '^$' -bench RunOverhead ./internal/agent/
func BenchmarkRunOverhead(b *testing.B) {
	r := newRig(b)
	r.startAgent(b, "runner-bench")
	r.script(b, "echo.sh", `cat >/dev/null; echo '{"status":{"ok":true}}'`)
	action := v1alpha1.ExecAction{Command: []string{"./hooks/echo.sh"}, Image: image}
	remote := &executor.InImage{Action: action, Operator: "demo", Runners: r.serving}
	localAction := action
	localAction.Command = []string{r.files + "/hooks/echo.sh"}
	localAction.WorkingDir = r.files
	local := &executor.Exec{Action: localAction}
	p50 := func(ex executor.Executor) time.Duration {
		var took []time.Duration
		for range b.N {
			var log bytes.Buffer
			start := time.Now()
			if _, err := ex.Run(b.Context(), request(&log, 10*time.Second)); err != nil {
				b.Fatal(err)
			}
			took = append(took, time.Since(start))
		}
		slices.Sort(took)
		return took[len(took)/2]
	}
	b.ResetTimer()
	l, a := p50(local), p50(remote)
	b.ReportMetric(float64(l.Microseconds())/1000, "local-p50-ms")
	b.ReportMetric(float64(a.Microseconds())/1000, "agent-p50-ms")
	b.ReportMetric(float64((a-l).Microseconds())/1000, "overhead-p50-ms")
}
