package console

import (
	"fmt"
	"strings"
	"time"

	"github.com/opkit-dev/opkit/internal/definition"
)

// The state diagram of an operator's life cycle (spec.states), drawn on
// the server as SVG: no script draws it, and the same states and
// transitions are listed in words beside it (machineOf), which is what a
// screen reader reads.
//
// The layout is layered: a state's column is its distance from the
// initial state along transitions (timeouts included), breadth first in
// the order declared; its row is the order it was reached in. States a
// walk from the initial one does not reach (a definition that loads has
// none) take a column of their own after the others. Every node of a
// column has the column's width, and columns are centred vertically.
//
// Edges:
//   - to the next column: a curve from the source's right side to the
//     target's left side, across the gap between them;
//   - back to an earlier column, or forward past one: a path with rounded
//     corners that leaves the source's right side, runs in the gap beside
//     it to a lane above (or below) every row, along the lane, and down
//     (or up) the gap before the target into its left side: it crosses no
//     state. Each such edge has a lane of its own;
//   - within a column: a curve out of the source's right side and into
//     the target's right side;
//   - to itself: a loop over the state.
//
// Timeout edges are dashed. A state that needs a person is drawn as a pill
// and says "asks a person"; a final state has a double border; the initial
// state has an arrow from a dot; the current state has a thick border and
// says "current". None of them is told by colour alone.

// Sizes, in SVG user units (pixels at 100%).
const (
	nodeH       = 50
	rowGap      = 46
	colGap      = 190
	margin      = 24
	laneGap     = 18
	loopRoom    = 40 // above the first row: self-loops and their labels
	entryRoom   = 44 // left of the first column: the initial state's arrow
	rightRoom   = 70 // right of the last column: bulges and lanes' verticals
	bottomExtra = 8
)

// graph is a state machine as the layout needs it.
type graph struct {
	States []graphState
}

type graphState struct {
	Name                        string
	Initial, Final, NeedsPerson bool
	Out                         []graphEdge
}

type graphEdge struct {
	To, Label string
	// Timeout edges are dashed; After says when (10m).
	Timeout bool
	After   string
}

// edgeKind is how an edge is drawn.
type edgeKind int

const (
	edgeForward edgeKind = iota // to the next column
	edgeLane                    // back, or forward past a column, by a lane
	edgeColumn                  // within a column
	edgeSelf                    // to itself
)

// point is a position in the diagram.
type point struct{ X, Y int }

// diagram is a laid out state machine, as the template draws it.
type diagram struct {
	// Title and Desc are the SVG's accessible name and description.
	Title, Desc   string
	Width, Height int
	Nodes         []*diagramNode
	Edges         []*diagramEdge
	// Entry is the initial state's arrow: from a dot at Entry[0] to
	// Entry[1] on the state's left side.
	Entry [2]point
}

type diagramNode struct {
	Name                                 string
	Initial, Final, NeedsPerson, Current bool
	X, Y, W, H                           int
	Col, Row                             int
	// Note is the second line: initial, final, asks a person, current.
	Note string
	// Title is what hovering it says, and its accessible name.
	Title string
}

// CX is the node's centre, X.
func (n *diagramNode) CX() int { return n.X + n.W/2 }

// NameY and NoteY are the baselines of its two lines; a node without a
// note has its name in the middle.
func (n *diagramNode) NameY() int {
	if n.Note == "" {
		return n.Y + 30
	}
	return n.Y + 22
}
func (n *diagramNode) NoteY() int { return n.Y + 40 }

// Rx is its corners' radius: a pill for a state that needs a person.
func (n *diagramNode) Rx() int {
	if n.NeedsPerson {
		return n.H / 2
	}
	return 6
}

type diagramEdge struct {
	From, To, Label string
	Timeout         bool
	// After is a timeout's delay, said under the edge's label.
	After string
	Kind  edgeKind
	// D is the SVG path; Start and End its ends, on the states' borders.
	D          string
	Start, End point
	// LabelX, LabelY place the label; Anchor is its text-anchor.
	LabelX, LabelY int
	Anchor         string
	// points are a lane route's corners, for the tests.
	points []point
}

// AfterY is the baseline of the After line: under the label, or for a
// lane's label (which sits on its lane) beside it instead.
func (e *diagramEdge) AfterY() int { return e.LabelY + 12 }

// Class is the edge's CSS classes.
func (e *diagramEdge) Class() string {
	if e.Timeout {
		return "edge timeout"
	}
	return "edge"
}

// textWidth estimates the width of text at the diagram's font sizes.
func textWidth(s string, px float64) int {
	return int(float64(len([]rune(s)))*px + 0.5)
}

// layout places the states and routes the transitions of g, with current
// (a state's name, or "") marked.
func layout(g graph, current string) *diagram {
	d := &diagram{}
	if len(g.States) == 0 {
		return d
	}
	index := map[string]int{}
	for i, s := range g.States {
		index[s.Name] = i
	}
	start, col, columns := layoutColumns(g, index)

	nodes, rows, colW := layoutNodes(g, columns, current)

	// Edges: their kinds, and a lane for each that needs one. A lane
	// route goes over the rows when its ends are in the upper half, under
	// them otherwise.
	var edges []pendingEdge
	var above, below int
	bulges := map[int]int{}
	for i, s := range g.States {
		for _, e := range s.Out {
			j, ok := index[e.To]
			if !ok {
				continue
			}
			p := pendingEdge{from: i, to: j, e: e}
			switch {
			case i == j:
				p.kind = edgeSelf
			case col[j] == col[i]:
				p.kind = edgeColumn
				p.bulge = bulges[col[i]]
				bulges[col[i]]++
			case col[j] == col[i]+1:
				p.kind = edgeForward
			default:
				p.kind = edgeLane
				upper := float64(nodes[i].Row+nodes[j].Row)/2 < float64(rows-1)/2+0.01
				if upper {
					p.above, p.lane = true, above
					above++
				} else {
					p.lane = below
					below++
				}
			}
			edges = append(edges, p)
		}
	}

	// Positions.
	top := margin + above*laneGap + loopRoom
	pitch := nodeH + rowGap
	colX := make([]int, len(columns))
	x := margin + entryRoom
	for c := range columns {
		colX[c] = x
		x += colW[c] + colGap
	}
	d.Width = x - colGap + rightRoom + 8*max(0, maxValue(bulges)-1) + margin
	gridBottom := top + rows*pitch - rowGap
	d.Height = gridBottom + 20 + below*laneGap + bottomExtra + margin
	for c, members := range columns {
		offset := (rows - len(members)) * pitch / 2
		for r, i := range members {
			n := nodes[i]
			n.X, n.W = colX[c], colW[c]
			n.Y = top + offset + r*pitch
		}
	}
	d.Nodes = make([]*diagramNode, 0, len(nodes))
	for _, members := range columns {
		for _, i := range members {
			d.Nodes = append(d.Nodes, nodes[i])
		}
	}
	first := nodes[start]
	d.Entry = [2]point{{first.X - entryRoom + 8, first.Y + nodeH/2}, {first.X, first.Y + nodeH/2}}

	for _, p := range edges {
		s, t := nodes[p.from], nodes[p.to]
		de := &diagramEdge{From: s.Name, To: t.Name, Label: p.e.Label, Timeout: p.e.Timeout, Kind: p.kind, Anchor: "middle"}
		if p.e.After != "" {
			de.After = "after " + p.e.After
		}
		p.route(de, s, t, top, gridBottom)
		d.Edges = append(d.Edges, de)
	}
	return d
}

// layoutNodes are the nodes of g's states, placed in columns (current
// the object's state), with the most rows of a column and each column's
// width.
func layoutNodes(g graph, columns [][]int, current string) (nodes []*diagramNode, rows int, colW []int) {
	nodes = make([]*diagramNode, len(g.States))
	for c, members := range columns {
		rows = max(rows, len(members))
		for r, i := range members {
			s := g.States[i]
			n := &diagramNode{Name: s.Name, Initial: s.Initial, Final: s.Final, NeedsPerson: s.NeedsPerson,
				Current: s.Name == current, Col: c, Row: r, H: nodeH}
			var notes []string
			if s.Initial {
				notes = append(notes, "initial")
			}
			if s.Final {
				notes = append(notes, "final")
			}
			if s.NeedsPerson {
				notes = append(notes, "asks a person")
			}
			if n.Current {
				notes = append(notes, "current")
			}
			n.Note = strings.Join(notes, " · ")
			n.Title = s.Name
			if n.Note != "" {
				n.Title += " (" + n.Note + ")"
			}
			nodes[i] = n
		}
	}
	colW = make([]int, len(columns))
	for c, members := range columns {
		w := 96
		for _, i := range members {
			w = max(w, textWidth(nodes[i].Name, 9)+28, textWidth(nodes[i].Note, 6.6)+28)
		}
		colW[c] = w
	}
	return nodes, rows, colW
}

// pendingEdge is a transition to draw: its ends, its kind, and its lane
// or bulge.
type pendingEdge struct {
	from, to int
	e        graphEdge
	kind     edgeKind
	lane     int
	above    bool
	bulge    int // within a column: the how-many-th from the column
}

// route draws p into de, from node s to node t: top is the grid's top,
// gridBottom its bottom, between which lanes run above or below.
func (p pendingEdge) route(de *diagramEdge, s, t *diagramNode, top, gridBottom int) {
	sy, ty := s.Y+nodeH/2, t.Y+nodeH/2
	switch p.kind {
	case edgeSelf:
		cx := s.CX()
		de.Start, de.End = point{cx - 12, s.Y}, point{cx + 12, s.Y}
		de.D = fmt.Sprintf("M %d %d C %d %d, %d %d, %d %d", cx-12, s.Y, cx-34, s.Y-36, cx+34, s.Y-36, cx+12, s.Y)
		de.LabelX, de.LabelY = cx, s.Y-32
	case edgeForward:
		sx, tx := s.X+s.W, t.X
		mid := (sx + tx) / 2
		de.Start, de.End = point{sx, sy}, point{tx, ty}
		de.D = fmt.Sprintf("M %d %d C %d %d, %d %d, %d %d", sx, sy, mid, sy, mid, ty, tx, ty)
		de.LabelX, de.LabelY = mid, (sy+ty)/2-6
	case edgeColumn:
		sx, tx := s.X+s.W, t.X+t.W
		out := sx + 36 + 10*p.bulge
		de.Start, de.End = point{sx, sy}, point{tx, ty}
		de.D = fmt.Sprintf("M %d %d C %d %d, %d %d, %d %d", sx, sy, out, sy, out, ty, tx, ty)
		de.LabelX, de.LabelY, de.Anchor = out-6, (sy+ty)/2+4, "start"
	case edgeLane:
		// Out of the source's right side into the gap after its
		// column, to the lane, along it, down the gap before the
		// target's column into its left side.
		off := 10 + 7*(p.lane%5)
		sx, tx := s.X+s.W, t.X
		outX, inX := sx+off, tx-off
		var laneY int
		if p.above {
			laneY = top - loopRoom + 4 - p.lane*laneGap
		} else {
			laneY = gridBottom + 20 + p.lane*laneGap
		}
		de.Start, de.End = point{sx, sy}, point{tx, ty}
		de.points = []point{{sx, sy}, {outX, sy}, {outX, laneY}, {inX, laneY}, {inX, ty}, {tx, ty}}
		de.D = roundedPath(de.points, 6)
		de.LabelX, de.LabelY = (outX+inX)/2, laneY-4
	}
}

// layoutColumns places g's states in columns, breadth first from the
// initial state (start; col gives each state's column), the states no
// transition reaches in a last column of their own. index is each state's
// position by name.
func layoutColumns(g graph, index map[string]int) (start int, col []int, columns [][]int) {
	col = make([]int, len(g.States))
	for i := range col {
		col[i] = -1
	}
	for i, s := range g.States {
		if s.Initial {
			start = i
			break
		}
	}
	col[start] = 0
	queue := []int{start}
	for len(queue) > 0 {
		i := queue[0]
		queue = queue[1:]
		for len(columns) <= col[i] {
			columns = append(columns, nil)
		}
		columns[col[i]] = append(columns[col[i]], i)
		for _, e := range g.States[i].Out {
			j, ok := index[e.To]
			if ok && col[j] < 0 {
				col[j] = col[i] + 1
				queue = append(queue, j)
			}
		}
	}
	var unreached []int
	for i := range g.States {
		if col[i] < 0 {
			col[i] = len(columns)
			unreached = append(unreached, i)
		}
	}
	if len(unreached) > 0 {
		columns = append(columns, unreached)
	}
	return start, col, columns
}

func maxValue(m map[int]int) int {
	n := 0
	for _, v := range m {
		n = max(n, v)
	}
	return n
}

// roundedPath joins the points with straight lines whose corners are
// rounded with radius r (less where a segment is too short for it).
func roundedPath(pts []point, r int) string {
	var b strings.Builder
	fmt.Fprintf(&b, "M %d %d", pts[0].X, pts[0].Y)
	for i := 1; i < len(pts)-1; i++ {
		prev, at, next := pts[i-1], pts[i], pts[i+1]
		in := min(r, dist(prev, at)/2)
		out := min(r, dist(at, next)/2)
		a := toward(at, prev, in)
		c := toward(at, next, out)
		fmt.Fprintf(&b, " L %d %d Q %d %d, %d %d", a.X, a.Y, at.X, at.Y, c.X, c.Y)
	}
	last := pts[len(pts)-1]
	fmt.Fprintf(&b, " L %d %d", last.X, last.Y)
	return b.String()
}

// dist is the length of an axis-parallel segment.
func dist(a, b point) int { return abs(a.X-b.X) + abs(a.Y-b.Y) }

// toward is the point n units from a toward b (axis-parallel).
func toward(a, b point, n int) point {
	return point{a.X + sign(b.X-a.X)*n, a.Y + sign(b.Y-a.Y)*n}
}

func abs(n int) int {
	if n < 0 {
		return -n
	}
	return n
}

func sign(n int) int {
	switch {
	case n < 0:
		return -1
	case n > 0:
		return 1
	}
	return 0
}

// machine is an operator's life cycle as the console shows it: the
// diagram, and the same in words.
type machine struct {
	Diagram *diagram
	States  []machineState
	// Current is the state the object is in; "" on the operator's page.
	Current string
}

type machineState struct {
	Name                                 string
	Initial, Final, NeedsPerson, Current bool
	Question                             string
	Transitions                          []machineTransition
	Timeout                              *machineTimeout
	Refuses                              []string
	Enter, Exit                          []string
}

type machineTransition struct {
	To, Guard, Reason, Description string
	// Set are the status fields the transition writes, as "name = template".
	Set []string
}

type machineTimeout struct {
	After      time.Duration
	To, Reason string
}

// machineOf is the life cycle of a definition's custom resource, with
// current marked; nil when it declares none.
func machineOf(d *definition.Definition, current, kind string) *machine {
	if d == nil || d.States == nil || len(d.States.States) == 0 {
		return nil
	}
	m := &machine{Current: current}
	var g graph
	transitions := 0
	for _, s := range d.States.States {
		ms := machineState{Name: s.Name, Initial: d.States.Initial == s, Final: s.Final, NeedsPerson: s.NeedsPerson,
			Question: s.Question, Current: s.Name == current, Refuses: s.Refuses}
		gs := graphState{Name: s.Name, Initial: ms.Initial, Final: s.Final, NeedsPerson: s.NeedsPerson}
		for _, t := range s.Transitions {
			mt := machineTransition{To: t.To, Reason: t.Reason, Description: t.Description}
			for _, f := range t.Set {
				mt.Set = append(mt.Set, "status."+f.Name+" = "+f.Template)
			}
			if t.When != nil {
				mt.Guard = t.When.Source
			}
			ms.Transitions = append(ms.Transitions, mt)
			gs.Out = append(gs.Out, graphEdge{To: t.To, Label: t.Reason})
			transitions++
		}
		if to := s.Timeout; to != nil {
			ms.Timeout = &machineTimeout{After: to.After, To: to.To, Reason: to.Reason}
			gs.Out = append(gs.Out, graphEdge{To: to.To, Label: to.Reason, Timeout: true, After: definition.ShortDuration(to.After)})
			transitions++
		}
		for _, h := range s.Enter {
			ms.Enter = append(ms.Enter, h.Name)
		}
		for _, h := range s.Exit {
			ms.Exit = append(ms.Exit, h.Name)
		}
		m.States = append(m.States, ms)
		g.States = append(g.States, gs)
	}
	m.Diagram = layout(g, current)
	m.Diagram.Title = "The life cycle of a " + kind
	desc := fmt.Sprintf("A state diagram: %d states and %d transitions", len(g.States), transitions)
	if d.States.Initial != nil {
		desc += ", starting in " + d.States.Initial.Name
	}
	if current != "" {
		desc += "; the current state is " + current
	}
	m.Diagram.Desc = desc + ". The list after the diagram says each state and its transitions in words."
	return m
}

// Lane reports whether the edge runs along a lane: its label is one line.
func (e *diagramEdge) Lane() bool { return e.Kind == edgeLane || e.Kind == edgeSelf }
