package console

import (
	"encoding/json"
	"fmt"
	"html/template"
	"io/fs"
	"path"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/opkit-dev/opkit/api/v1alpha1"
	"github.com/opkit-dev/opkit/internal/archive"
	"github.com/opkit-dev/opkit/internal/definition"
)

// parseTemplates parses the layout, and the parts pages share (files
// named _*.html), with each page, by page name.
func parseTemplates() (map[string]*template.Template, error) {
	base, err := template.New("").Funcs(funcs).ParseFS(templateFiles, "templates/layout.html", "templates/_*.html")
	if err != nil {
		return nil, fmt.Errorf("console: %w", err)
	}
	pages, err := fs.Glob(templateFiles, "templates/*.html")
	if err != nil {
		return nil, err
	}
	out := map[string]*template.Template{}
	for _, p := range pages {
		name := strings.TrimSuffix(path.Base(p), ".html")
		if name == "layout" || strings.HasPrefix(name, "_") {
			continue
		}
		t, err := template.Must(base.Clone()).ParseFS(templateFiles, p)
		if err != nil {
			return nil, fmt.Errorf("console: %w", err)
		}
		out[name] = t
	}
	return out, nil
}

var funcs = template.FuncMap{
	"ago":          ago,
	"duration":     runDuration,
	"objectURL":    objectURL,
	"objectOf":     func(r archive.Run) string { return r.Object() },
	"outcome":      outcomeBadge,
	"state":        stateBadge,
	"linkRuns":     linkRuns,
	"rfc3339":      func(t time.Time) string { return t.UTC().Format(time.RFC3339) },
	"label":        objectLabel,
	"join":         strings.Join,
	"humanBytes":   archive.HumanBytes,
	"until":        until,
	"dict":         dict,
	"value":        value,
	"slotOf":       slotOf,
	"delivery":     deliveryBadge,
	"sourceURL":    sourceURL,
	"cut":          cut,
	"clean":        clean,
	"add":          func(a, b int) int { return a + b },
	"short":        definition.ShortDuration,
	"trigger":      triggerWords,
	"transition":   transitionOf,
	"action":       actionOf,
	"rolloutPhase": rolloutBadge,
}

// clean is text a sender chose made readable: terminal control sequences
// and other control characters removed, valid UTF-8.
func clean(s string) string { return archive.CleanLog([]byte(s)) }

// cut is s cleaned and cut to n characters, with … where it was cut.
func cut(s string, n int) string {
	s = clean(s)
	r := []rune(s)
	if len(r) <= n {
		return s
	}
	return string(r[:n-1]) + "…"
}

// slotOf is the slot an operator-wide schedule's run is for, from its
// idempotency key (<operator>/schedule/<handler>/<unix time>); zero for
// another run.
func slotOf(r archive.Run) time.Time {
	rest, ok := strings.CutPrefix(r.Key, r.Operator+"/schedule/"+r.Handler+"/")
	if !ok {
		return time.Time{}
	}
	n, err := strconv.ParseInt(rest, 10, 64)
	if err != nil {
		return time.Time{}
	}
	return time.Unix(n, 0).UTC()
}

// value shows a diff's value: – for none, strings as they are, the rest
// as JSON.
func value(v any) string {
	switch v := v.(type) {
	case nil:
		return "–"
	case string:
		return v
	}
	data, err := json.Marshal(v)
	if err != nil {
		return fmt.Sprint(v)
	}
	return string(data)
}

// dict builds a map from key, value pairs, for sub-templates.
func dict(kv ...any) map[string]any {
	m := map[string]any{}
	for i := 0; i+1 < len(kv); i += 2 {
		k, _ := kv[i].(string)
		m[k] = kv[i+1]
	}
	return m
}

// ago says how long ago t was, coarsely.
func ago(t time.Time) string {
	if t.IsZero() {
		return "–"
	}
	d := time.Since(t)
	switch {
	case d < time.Second:
		return "just now"
	case d < time.Minute:
		return fmt.Sprintf("%ds ago", int(d.Seconds()))
	case d < time.Hour:
		return fmt.Sprintf("%dm ago", int(d.Minutes()))
	case d < 48*time.Hour:
		return fmt.Sprintf("%dh ago", int(d.Hours()))
	default:
		return fmt.Sprintf("%dd ago", int(d.Hours()/24))
	}
}

// until says how long until t.
func until(t time.Time) string {
	d := time.Until(t)
	switch {
	case d <= -time.Second:
		return "was due " + ago(t)
	case d < time.Second:
		return "due now"
	}
	return "in " + d.Round(time.Second).String()
}

func runDuration(r archive.Run) string {
	if r.FinishedAt.IsZero() {
		return "running for " + time.Since(r.StartedAt).Round(time.Second).String()
	}
	d := r.FinishedAt.Sub(r.StartedAt)
	if d < time.Second {
		return d.Round(time.Millisecond).String()
	}
	return d.Round(100 * time.Millisecond).String()
}

// badge is a status as a symbol and a word: never color alone.
type badge struct{ Class, Symbol, Text string }

func outcomeBadge(o archive.Outcome) badge {
	switch o {
	case archive.Succeeded:
		return badge{"ok", "✓", "Succeeded"}
	case archive.Failed:
		return badge{"bad", "✗", "Failed"}
	case archive.GaveUp:
		return badge{"bad", "⊗", "Gave up"}
	case archive.Running:
		return badge{"run", "⟳", "Running"}
	case archive.Cancelled:
		return badge{"warn", "⊘", "Cancelled"}
	case archive.Skipped:
		return badge{"", "–", "Skipped"}
	case archive.Allowed:
		return badge{"ok", "✓", "Allowed"}
	case archive.Denied:
		return badge{"warn", "⊘", "Denied"}
	}
	return badge{"", "?", string(o)}
}

func deliveryBadge(o archive.DeliveryOutcome) badge {
	switch o {
	case archive.DeliveryPending:
		return badge{"run", "…", "Pending"}
	case archive.DeliveryHandled:
		return badge{"ok", "✓", "Handled"}
	case archive.DeliveryFailed:
		return badge{"bad", "✗", "Failed"}
	case archive.DeliveryRefused:
		return badge{"warn", "⊘", "Refused"}
	}
	return badge{"", "?", string(o)}
}

func stateBadge(s state) badge {
	switch s {
	case stateReady:
		return badge{"ok", "✓", "Ready"}
	case stateNotReady:
		return badge{"warn", "…", "Not ready"}
	case stateDegraded:
		return badge{"bad", "✗", "Degraded"}
	case stateStalled:
		return badge{"bad", "⊗", "Stalled"}
	case statePaused:
		return badge{"warn", "‖", "Paused"}
	case stateRetrying:
		return badge{"warn", "↻", "Retrying"}
	case stateOK:
		return badge{"ok", "✓", "OK"}
	}
	return badge{"", "?", "Unknown"}
}

func rolloutBadge(phase string) badge {
	switch phase {
	case v1alpha1.RolloutProgressing:
		return badge{"run", "⟳", "Progressing"}
	case v1alpha1.RolloutPaused:
		return badge{"bad", "‖", "Paused"}
	case v1alpha1.RolloutComplete:
		return badge{"ok", "✓", "Complete"}
	case v1alpha1.RolloutRolledBack:
		return badge{"warn", "↶", "Rolled back"}
	}
	return badge{"", "?", phase}
}

// runID matches the run ids in Event messages, with the console URL the
// engine may add after them.
var runID = regexp.MustCompile(`\b([0-9a-hjkmnp-tv-z]{18})\b(?: \(https?://[^\s()]*/runs/[0-9a-z]{18}\))?`)

// linkRuns escapes an Event message and links the run ids in it to this
// console (the URL after an id is left out: the link is the same run).
func linkRuns(msg string) template.HTML {
	var b strings.Builder
	last := 0
	for _, m := range runID.FindAllStringSubmatchIndex(msg, -1) {
		id := msg[m[2]:m[3]]
		if !archive.ValidID(id) {
			continue
		}
		b.WriteString(template.HTMLEscapeString(msg[last:m[0]]))
		fmt.Fprintf(&b, `<a href="/runs/%s">%s</a>`, id, id)
		last = m[1]
	}
	b.WriteString(template.HTMLEscapeString(msg[last:]))
	return template.HTML(b.String()) //nolint:gosec // escaped above; ids are [0-9a-z]
}
