package console_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"golang.org/x/net/html"

	"github.com/opkit-dev/opkit/api/v1alpha1"
	"github.com/opkit-dev/opkit/internal/archive"
	"github.com/opkit-dev/opkit/internal/console"
	"github.com/opkit-dev/opkit/internal/devcluster/clustertest"
)

// TestPagesAreAccessible checks every page's HTML for what a screen reader
// and a keyboard need: one main landmark and one h1, a label for every form
// control, header cells in every table, a name for every link and button,
// and statuses that say themselves in words, not in color alone.
func TestPagesAreAccessible(t *testing.T) {
	f, env := withChore(t, "plain", "x")
	create(t, env, chore(env.Namespace, "broken", "fail", "y"))
	failed := waitRuns(t, f, env.Namespace, "broken", archive.GaveUp, 1)[0]
	clustertest.Eventually(t, 30*time.Second, "the Stalled condition", func(context.Context) (bool, error) {
		return strings.Contains(get(t, f.url+"/operators/chores?state=Stalled"), ">broken</a>"), nil
	})
	for _, path := range []string{
		"/",
		"/operators/chores",
		"/operators/chores/objects/" + env.Namespace + "/broken",
		"/operators/chores/objects/" + env.Namespace + "/broken/why",
		"/runs/" + failed.ID,
		"/runs/" + failed.ID + "?q=boom",
		"/failures",
		"/runs/0000000000zzzzzzzz", // an error page
	} {
		assertAccessible(t, f.url, path)
	}

	// The pages of webhook deliveries, beside an engine that runs their
	// operator.
	ev := withDeliveries(t, f)
	for _, path := range []string{
		"/events",
		"/events?operator=" + ev.op + "&refused=1",
		"/events/" + ev.forged,
		"/events/" + ev.deployed,
		"/events/" + ev.turnedDown,
		"/events/" + ev.failed,
		"/events/" + ev.pending,
		"/events/" + ev.hostile,
		"/operators/" + ev.op,
		"/operators/" + ev.op + "/sources/github",
		"/operators/" + ev.op + "/sources/ci?outcome=Failed",
		"/runs/" + ev.run,
		"/events/0000000000zzzzzzzz", // an error page
	} {
		assertAccessible(t, ev.base, path)
	}

	// An operator with states: its diagram, and an object's page with the
	// diagram, the state and the decision form, and a transition's run.
	db := withDatabase(t, console.Auth{}, nil)
	run := db.transition(t, 4, "Verifying", "NeedsAttention", v1alpha1.TransitionGuard, "", "Verifying -> NeedsAttention: VerificationFailed", time.Now())
	db.setState(t, needsAttention(run.ID))
	for _, path := range []string{"/operators/database", db.path(), "/runs/" + run.ID} {
		assertAccessible(t, db.base, path)
	}
	if page := get(t, db.base+db.path()); !strings.Contains(page, `id="decide-reason"`) || !strings.Contains(page, `<svg class="states"`) {
		t.Errorf("the object page checked has no diagram or no decision form")
	}
}

// assertAccessible reports the accessibility problems of the page at
// base+path.
func assertAccessible(t *testing.T, base, path string) {
	t.Helper()
	r := do(t, "GET", base+path, nil)
	doc, err := html.Parse(strings.NewReader(r.body))
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	for _, problem := range accessibilityProblems(doc) {
		t.Errorf("%s: %s", path, problem)
	}
}

func accessibilityProblems(doc *html.Node) []string {
	var problems []string
	count := map[string]int{}
	ids := map[string]bool{}
	labels := map[string]bool{}
	var controls []string
	var walk func(n *html.Node)
	walk = func(n *html.Node) {
		if n.Type == html.ElementNode {
			count[n.Data]++
			if id := attr(n, "id"); id != "" {
				if ids[id] {
					problems = append(problems, fmt.Sprintf("id %q is used twice", id))
				}
				ids[id] = true
			}
			switch n.Data {
			case "html":
				if attr(n, "lang") == "" {
					problems = append(problems, "<html> has no lang")
				}
			case "label":
				labels[attr(n, "for")] = true
			case "input", "select", "textarea":
				if attr(n, "type") != "hidden" {
					controls = append(controls, attr(n, "id"))
				}
			case "a", "button":
				if strings.TrimSpace(text(n, false)) == "" && attr(n, "aria-label") == "" {
					problems = append(problems, fmt.Sprintf("a <%s> without a name", n.Data))
				}
			case "table":
				if !has(n, "th") {
					problems = append(problems, "a table without header cells")
				}
			case "th":
				if attr(n, "scope") == "" {
					problems = append(problems, fmt.Sprintf("<th>%s</th> without scope", text(n, false)))
				}
			case "svg":
				// A drawing says what it is: an image with a title and a
				// description (the diagram's words are beside it too).
				if attr(n, "role") != "img" || !hasChild(n, "title") || !hasChild(n, "desc") || attr(n, "aria-labelledby") == "" {
					problems = append(problems, "an <svg> that is not role=img with a <title>, a <desc> and aria-labelledby")
				}
			case "span":
				if strings.Contains(" "+attr(n, "class")+" ", " badge ") && strings.TrimSpace(text(n, true)) == "" {
					problems = append(problems, fmt.Sprintf("a status badge with no word: %q", text(n, false)))
				}
			}
		}
		for c := n.FirstChild; c != nil; c = c.NextSibling {
			walk(c)
		}
	}
	walk(doc)
	if count["main"] != 1 || count["h1"] != 1 {
		problems = append(problems, fmt.Sprintf("%d <main> and %d <h1>; want one each", count["main"], count["h1"]))
	}
	if count["nav"] == 0 {
		problems = append(problems, "no <nav>")
	}
	var refer func(n *html.Node)
	refer = func(n *html.Node) {
		for _, key := range []string{"aria-labelledby", "aria-describedby"} {
			for _, id := range strings.Fields(attr(n, key)) {
				if !ids[id] {
					problems = append(problems, fmt.Sprintf("%s names id %q, which is not on the page", key, id))
				}
			}
		}
		for c := n.FirstChild; c != nil; c = c.NextSibling {
			refer(c)
		}
	}
	refer(doc)
	for _, id := range controls {
		if id == "" || !labels[id] {
			problems = append(problems, fmt.Sprintf("form control %q has no <label for>", id))
		}
	}
	return problems
}

func attr(n *html.Node, key string) string {
	for _, a := range n.Attr {
		if a.Key == key {
			return a.Val
		}
	}
	return ""
}

// hasChild reports whether n has a child element tag.
func hasChild(n *html.Node, tag string) bool {
	for c := n.FirstChild; c != nil; c = c.NextSibling {
		if c.Type == html.ElementNode && c.Data == tag {
			return true
		}
	}
	return false
}

func has(n *html.Node, tag string) bool {
	for c := n.FirstChild; c != nil; c = c.NextSibling {
		if (c.Type == html.ElementNode && c.Data == tag) || has(c, tag) {
			return true
		}
	}
	return false
}

// text is the text of a node; with spoken, only what a screen reader reads
// (aria-hidden parts left out).
func text(n *html.Node, spoken bool) string {
	switch {
	case n.Type == html.TextNode:
		return n.Data
	case spoken && n.Type == html.ElementNode && attr(n, "aria-hidden") == "true":
		return ""
	}
	var b strings.Builder
	for c := n.FirstChild; c != nil; c = c.NextSibling {
		b.WriteString(text(c, spoken))
	}
	return b.String()
}
