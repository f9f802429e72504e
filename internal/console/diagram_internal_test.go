package console

import (
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/opkit-dev/opkit/internal/definition"
)

// graphOf builds a graph from lines "Name[flags] -> To:Label, To:Label"
// (flags: i initial, f final, p needs a person; a ~ before a target makes
// the edge a timeout).
func graphOf(lines ...string) graph {
	var g graph
	for _, line := range lines {
		head, tail, _ := strings.Cut(line, "->")
		head = strings.TrimSpace(head)
		name, flags, _ := strings.Cut(head, "[")
		s := graphState{Name: name, Initial: strings.Contains(flags, "i"), Final: strings.Contains(flags, "f"), NeedsPerson: strings.Contains(flags, "p")}
		for e := range strings.SplitSeq(tail, ",") {
			e = strings.TrimSpace(e)
			if e == "" {
				continue
			}
			to, label, _ := strings.Cut(e, ":")
			timeout := strings.HasPrefix(to, "~")
			e := graphEdge{To: strings.TrimPrefix(to, "~"), Label: label, Timeout: timeout}
			if timeout {
				e.After = "10m"
			}
			s.Out = append(s.Out, e)
		}
		g.States = append(g.States, s)
	}
	return g
}

// database is examples/database/operator.yaml's states.
var database = graphOf(
	"Provisioning[i] -> Ready:Provisioned, ~NeedsAttention:ProvisioningTooSlow",
	"Ready -> Upgrading:VersionChanged",
	"Upgrading -> Verifying:Upgraded, ~NeedsAttention:UpgradeTooSlow",
	"Verifying -> Ready:Verified, NeedsAttention:VerificationFailed, ~NeedsAttention:VerificationTooSlow",
	"NeedsAttention[p] -> RollingBack:RollBack, Ready:Accepted",
	"RollingBack -> Ready:RolledBack",
)

func TestLayoutPlacesStatesApartAndEdgesOnTheirStates(t *testing.T) {
	for _, tc := range []struct {
		name    string
		g       graph
		current string
		// cols are each state's expected column; kinds, each edge's kind
		// in the order declared.
		cols  map[string]int
		kinds []edgeKind
	}{{
		name:  "a linear chain",
		g:     graphOf("A[i] -> B:Go", "B -> C:Go", "C -> D:Go", "D[f] ->"),
		cols:  map[string]int{"A": 0, "B": 1, "C": 2, "D": 3},
		kinds: []edgeKind{edgeForward, edgeForward, edgeForward},
	}, {
		name:    "a cycle, with a self-loop",
		g:       graphOf("Idle[i] -> Busy:Work", "Busy -> Busy:More, Idle:Done"),
		current: "Busy",
		cols:    map[string]int{"Idle": 0, "Busy": 1},
		kinds:   []edgeKind{edgeForward, edgeSelf, edgeLane},
	}, {
		name:  "a skip forward, a same-column edge and an unreachable state",
		g:     graphOf("S[i] -> A:a, B:b", "A -> C:c", "B -> A:ba", "C -> ~S:back, A:ca", "Lost -> S:x"),
		cols:  map[string]int{"S": 0, "A": 1, "B": 1, "C": 2, "Lost": 3},
		kinds: []edgeKind{edgeForward, edgeForward, edgeForward, edgeColumn, edgeLane, edgeLane, edgeLane},
	}, {
		name:    "examples/database",
		g:       database,
		current: "NeedsAttention",
		cols:    map[string]int{"Provisioning": 0, "Ready": 1, "NeedsAttention": 1, "Upgrading": 2, "RollingBack": 2, "Verifying": 3},
		kinds: []edgeKind{edgeForward, edgeForward, edgeForward, edgeForward, edgeLane, edgeLane, edgeLane, edgeLane,
			edgeForward, edgeColumn, edgeLane},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			d := layout(tc.g, tc.current)
			byName := map[string]*diagramNode{}
			for _, n := range d.Nodes {
				byName[n.Name] = n
				if n.X < 0 || n.Y < 0 || n.X+n.W > d.Width || n.Y+n.H > d.Height {
					t.Errorf("%s at %d,%d %dx%d is outside the %dx%d diagram", n.Name, n.X, n.Y, n.W, n.H, d.Width, d.Height)
				}
				if want, ok := tc.cols[n.Name]; !ok || n.Col != want {
					t.Errorf("%s is in column %d, want %d", n.Name, n.Col, want)
				}
				if n.Current != (n.Name == tc.current) || n.Current != strings.Contains(n.Note, "current") {
					t.Errorf("%s: current %v, note %q; the current state is %q", n.Name, n.Current, n.Note, tc.current)
				}
			}
			if len(d.Nodes) != len(tc.g.States) {
				t.Fatalf("%d nodes for %d states", len(d.Nodes), len(tc.g.States))
			}
			for i, a := range d.Nodes {
				for _, b := range d.Nodes[i+1:] {
					if a.X < b.X+b.W && b.X < a.X+a.W && a.Y < b.Y+b.H && b.Y < a.Y+a.H {
						t.Errorf("%s and %s overlap", a.Name, b.Name)
					}
				}
			}
			if len(d.Edges) != len(tc.kinds) {
				t.Fatalf("%d edges, want %d", len(d.Edges), len(tc.kinds))
			}
			for i, e := range d.Edges {
				what := fmt.Sprintf("edge %s -> %s (%s)", e.From, e.To, e.Label)
				if e.Kind != tc.kinds[i] {
					t.Errorf("%s is drawn as kind %d, want %d", what, e.Kind, tc.kinds[i])
				}
				if !onBorder(e.Start, byName[e.From]) {
					t.Errorf("%s starts at %v, not on %s's border", what, e.Start, e.From)
				}
				if !onBorder(e.End, byName[e.To]) {
					t.Errorf("%s ends at %v, not on %s's border", what, e.End, e.To)
				}
				if !strings.HasPrefix(e.D, fmt.Sprintf("M %d %d ", e.Start.X, e.Start.Y)) || !strings.HasSuffix(e.D, fmt.Sprintf(" %d %d", e.End.X, e.End.Y)) {
					t.Errorf("%s: its path %q does not run from %v to %v", what, e.D, e.Start, e.End)
				}
				if e.Timeout != strings.Contains(e.Class(), "timeout") {
					t.Errorf("%s: timeout %v, class %q", what, e.Timeout, e.Class())
				}
				// A lane route crosses no state.
				for j := 1; j < len(e.points); j++ {
					for _, n := range d.Nodes {
						if crosses(e.points[j-1], e.points[j], n) {
							t.Errorf("%s: its segment %v-%v crosses %s", what, e.points[j-1], e.points[j], n.Name)
						}
					}
				}
			}
		})
	}
}

// onBorder reports whether p lies on n's border.
func onBorder(p point, n *diagramNode) bool {
	if n == nil {
		return false
	}
	inX, inY := p.X >= n.X && p.X <= n.X+n.W, p.Y >= n.Y && p.Y <= n.Y+n.H
	return inX && (p.Y == n.Y || p.Y == n.Y+n.H) || inY && (p.X == n.X || p.X == n.X+n.W)
}

// crosses reports whether the axis-parallel segment a-b enters n's
// inside (touching its border does not count).
func crosses(a, b point, n *diagramNode) bool {
	x0, x1 := min(a.X, b.X), max(a.X, b.X)
	y0, y1 := min(a.Y, b.Y), max(a.Y, b.Y)
	return x0 < n.X+n.W && x1 > n.X && y0 < n.Y+n.H && y1 > n.Y
}

func TestRoundedPathRoundsEveryCorner(t *testing.T) {
	got := roundedPath([]point{{0, 0}, {20, 0}, {20, 4}, {40, 4}}, 6)
	want := "M 0 0 L 14 0 Q 20 0, 20 2 L 20 2 Q 20 4, 26 4 L 40 4"
	if got != want {
		t.Errorf("roundedPath = %q, want %q", got, want)
	}
}

// TestMachineOfTheDatabaseExample: examples/database's states, as loaded,
// are drawn and said in words: every state and transition, guards and
// timeouts, the question and the choices' descriptions.
func TestMachineOfTheDatabaseExample(t *testing.T) {
	data, err := os.ReadFile("../../examples/database/operator.yaml")
	if err != nil {
		t.Fatal(err)
	}
	srcs, err := definition.Load("operator.yaml", data)
	if err != nil {
		t.Fatal(err)
	}
	d, err := definition.Compile(srcs[0])
	if err != nil {
		t.Fatal(err)
	}
	m := machineOf(d, "Verifying", "Database")
	if m == nil {
		t.Fatal("no machine for a definition with states")
	}
	var names []string
	edges := 0
	for _, s := range m.States {
		names = append(names, s.Name)
		edges += len(s.Transitions)
		if s.Timeout != nil {
			edges++
		}
	}
	if got := strings.Join(names, " "); got != "Provisioning Ready Upgrading Verifying NeedsAttention RollingBack" {
		t.Errorf("states %s", got)
	}
	if len(m.Diagram.Edges) != edges || edges != 11 {
		t.Errorf("%d edges drawn, %d transitions and timeouts listed; want 11 of each", len(m.Diagram.Edges), edges)
	}
	current := 0
	for _, n := range m.Diagram.Nodes {
		if n.Current {
			current++
			if n.Name != "Verifying" {
				t.Errorf("%s is drawn as current", n.Name)
			}
		}
	}
	if current != 1 {
		t.Errorf("%d current states drawn, want 1", current)
	}
	want := layout(database, "Verifying")
	for i, n := range m.Diagram.Nodes {
		if w := want.Nodes[i]; n.Name != w.Name || n.Col != w.Col || n.Row != w.Row {
			t.Errorf("node %d: %s at %d,%d; the table's graph has %s at %d,%d", i, n.Name, n.Col, n.Row, w.Name, w.Col, w.Row)
		}
	}
	na := m.States[4]
	if !na.NeedsPerson || !strings.HasPrefix(na.Question, "The new version failed its checks.") ||
		na.Transitions[0].Description == "" || na.Transitions[0].Guard != "" {
		t.Errorf("NeedsAttention: %+v", na)
	}
	if v := m.States[3]; !strings.Contains(v.Transitions[0].Guard, "children.verify.status.succeeded") || v.Timeout == nil || v.Timeout.After != 10*time.Minute {
		t.Errorf("Verifying: %+v", v)
	}
	if !strings.Contains(m.Diagram.Desc, "the current state is Verifying") {
		t.Errorf("the diagram's description: %q", m.Diagram.Desc)
	}
}
