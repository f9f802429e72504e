package conformance

import (
	"fmt"
	"slices"
)

// Defect is a known defect on main that the model finds: the generator's
// cases it breaks (Match) are left out of TestConformance's, so that make
// test stays green until its fix is merged. Issue says where it is
// tracked; Text what breaks.
type Defect struct {
	Issue string
	Text  string
	Match func(Case) bool
	// Decided: the defect is in the layer that decides runs
	// (internal/cause), which TestFast plays in its miniature engine:
	// TestFast leaves its cases out too.
	Decided bool
	// Avoid, when set, changes a case it matches into one it does not,
	// keeping the rest of it (Avoiding plays that instead of nothing).
	Avoid func(Case) Case
}

// Avoiding returns c changed so that it matches no known defect (a
// defect's Avoid, until none matches), and whether it could be; decided
// limits it to the defects of the deciding layer.
func Avoiding(c Case, decided bool) (Case, bool) {
	for range KnownDefects {
		d := known(c, decided)
		if d == nil {
			return c, Valid(c)
		}
		if d.Avoid == nil {
			return c, false
		}
		c = d.Avoid(clone(c))
	}
	return c, false
}

// KnownDefects are the defects the model found on main. The lead removes
// each entry when the fix that makes its cases pass is merged
// (TestRegressions then says so: its shrunk case passes).
var KnownDefects = []Defect{
	{
		Issue: "33.1",
		Text:  "a run gets the object as it was before the previous run wrote its status: the write is lost",
		Match: func(c Case) bool { return c.Def.Kind == CustomResource && writeThenRun(c) },
		Avoid: func(c Case) Case {
			for i := range c.Def.Handlers {
				c.Def.Handlers[i].Behaviour.Write = false
			}
			return c
		},
	},
	{
		Issue: "33.2",
		Text:  "a watched object's handler that lists delete beside another trigger never runs on its deletion (its key is its create's, which succeeded)",
		Match: func(c Case) bool {
			return c.Def.Kind == Watch && hasStep(c, OpDelete) && slices.ContainsFunc(c.Def.Handlers, func(h Handler) bool { return h.Fires(Delete) && len(h.On) > 1 })
		},
		Avoid: func(c Case) Case {
			for i, h := range c.Def.Handlers {
				if h.Fires(Delete) && len(h.On) > 1 {
					c.Def.Handlers[i].On = slices.DeleteFunc(c.Def.Handlers[i].On, func(t Trigger) bool { return t == Delete })
				}
			}
			return c
		},
	},
	{
		Issue: "33.3",
		Text:  "a handler that gave up holds back the enter handlers of a state that needs a person, and the decision waits silently",
		Match: func(c Case) bool {
			return slices.ContainsFunc(Expect(c).Ends, func(e End) bool { return e.OrRefused })
		},
	},
	{
		Issue:   "33 (found by the model: resume)",
		Text:    "with two or more resume handlers, only the first runs at an engine start: the object is marked resumed after one resume run",
		Decided: true,
		Match: func(c Case) bool {
			n := 0
			for _, h := range c.Def.Handlers {
				if h.Fires(Resume) {
					n++
				}
			}
			return n > 1 && (hasStep(c, OpStart) || hasStep(c, OpCrash))
		},
		Avoid: func(c Case) Case {
			seen := false
			for i, h := range c.Def.Handlers {
				if h.Fires(Resume) && seen && len(h.On) > 1 {
					c.Def.Handlers[i].On = slices.DeleteFunc(c.Def.Handlers[i].On, func(t Trigger) bool { return t == Resume })
				}
				seen = seen || h.Fires(Resume)
			}
			return c
		},
	},
	{
		Issue:   "33 (found by the model: stalled)",
		Text:    "a handler that gave up, then fails on a new generation (or its delete run), is never retried: its old Stalled mark holds the new run",
		Match:   failsAfterGivingUp,
		Decided: true,
	},
	{
		Issue:   "33 (found by the model: handled)",
		Decided: true,
		Text:    "an update is decided against the spec every create and update handler last finished with (status.opkit.handled), not against what the handler last finished with: while another handler has given up, a handler with fields runs again for changes that are not about them",
		Match: func(c Case) bool {
			if !slices.ContainsFunc(c.Def.Handlers, func(h Handler) bool { return h.Fires(Update) && len(h.Fields) > 0 }) {
				return false
			}
			return slices.ContainsFunc(Expect(c).Runs, func(r *Run) bool {
				return (r.Trigger == Create || r.Trigger == Update) && slices.Contains(r.Outcomes, GaveUp)
			})
		},
	},
}

// Known returns the first known defect c matches, or nil.
func Known(c Case) *Defect {
	return known(c, false)
}

// KnownDecided returns the first known defect of the deciding layer c
// matches, or nil.
func KnownDecided(c Case) *Defect {
	return known(c, true)
}

func known(c Case, decided bool) *Defect {
	i := slices.IndexFunc(KnownDefects, func(d Defect) bool { return (!decided || d.Decided) && d.Match(c) })
	if i < 0 {
		return nil
	}
	return &KnownDefects[i]
}

// Listed reports whether the defect of issue is still in KnownDefects.
func Listed(issue string) bool {
	return slices.ContainsFunc(KnownDefects, func(d Defect) bool { return d.Issue == issue })
}

func hasStep(c Case, op Op) bool {
	return slices.ContainsFunc(c.History, func(s Step) bool { return s.Op == op })
}

// writeThenRun reports whether a writing run succeeds, in the model,
// before another run of the same object.
func writeThenRun(c Case) bool {
	written := map[int]bool{}
	for _, r := range Expect(c).Runs {
		if written[r.Life] {
			return true
		}
		if h := c.Def.Handler(r.Handler); h != nil && h.Behaviour.Write && r.Ended() == Succeeded {
			written[r.Life] = true
		}
	}
	return false
}

// failsAfterGivingUp reports whether, in the model, a handler's run fails
// after another run of the handler gave up.
func failsAfterGivingUp(c Case) bool {
	type handlerOf struct {
		life    int
		handler string
	}
	gaveUp := map[handlerOf]bool{}
	for _, r := range Expect(c).Runs {
		key := handlerOf{r.Life, r.Handler}
		if gaveUp[key] && slices.Contains(r.Outcomes, Failed) {
			return true
		}
		if slices.Contains(r.Outcomes, GaveUp) {
			gaveUp[key] = true
		}
	}
	return false
}

// Regression is a failing case the model found, shrunk, kept so that its
// defect stays fixed: TestRegressions plays each.
type Regression struct {
	Name  string
	Issue string
	Case  Case
}

func h(name string, b Behaviour, on ...Trigger) Handler {
	return Handler{Name: name, On: on, Behaviour: b, MaxAttempts: 2}
}

// writers are n handlers on trigger, each writing status.count+1.
func writers(n int, trigger Trigger) []Handler {
	out := make([]Handler, n)
	for i := range out {
		out[i] = h(fmt.Sprintf("h%d", i+1), Behaviour{Write: true}, trigger)
	}
	return out
}

// Regressions are the shrunk cases of the defects found, and the cases
// issue 33 asks to keep.
var Regressions = []Regression{
	{
		Name:  "two handlers writing status.count in turn lose no write",
		Issue: "33.1",
		Case: Case{
			Def:     Def{Kind: CustomResource, Handlers: []Handler{h("h1", Behaviour{Write: true}, Create), h("h2", Behaviour{Write: true}, Create)}},
			History: []Step{{Op: OpCreate}},
		},
	},
	{
		Name:  "three handlers writing status.count in turn lose no write",
		Issue: "33.1",
		Case: Case{
			Def:     Def{Kind: CustomResource, Handlers: writers(3, Create)},
			History: []Step{{Op: OpCreate}},
		},
	},
	{
		Name:  "eight handlers writing status.count in turn lose no write",
		Issue: "33.1",
		Case: Case{
			Def:     Def{Kind: CustomResource, Handlers: writers(8, Create)},
			History: []Step{{Op: OpCreate}},
		},
	},
	{
		Name:  "update, when and resume runs after a status write see it",
		Issue: "33.1",
		Case: Case{
			Def: Def{Kind: CustomResource, Handlers: []Handler{
				h("h1", Behaviour{Write: true}, Create), h("h2", Behaviour{Write: true}, Update),
				h("h3", Behaviour{Write: true}, When), h("h4", Behaviour{Write: true}, Resume),
			}},
			// a becomes 1: odd, the when condition turns true.
			History: []Step{{Op: OpCreate}, {Op: OpChange, Field: "a"}, {Op: OpStop}, {Op: OpStart}},
		},
	},
	{
		Name:  "a watched object's handler on create and delete runs on its deletion",
		Issue: "33.2",
		Case: Case{
			Def:     Def{Kind: Watch, Handlers: []Handler{h("h1", Behaviour{}, Create, Delete)}},
			History: []Step{{Op: OpCreate}, {Op: OpDelete}},
		},
	},
	{
		Name:  "a decision is taken or refused at once while a handler that gave up holds back the state's enter handler",
		Issue: "33.3",
		Case: Case{
			Def: Def{Kind: CustomResource, States: &Machine{}, Handlers: []Handler{
				h("h1", Behaviour{Fail: 1, Permanent: true}, Create),
				{Name: "h2", On: []Trigger{Enter}, States: []string{StateAsk}, MaxAttempts: 2},
			}},
			History: []Step{{Op: OpCreate}, {Op: OpDecide, Choice: StateDone}},
		},
	},
	{
		Name:  "every resume handler runs at an engine start",
		Issue: "33 (found by the model: resume)",
		Case: Case{
			Def:     Def{Kind: CustomResource, Handlers: []Handler{h("h1", Behaviour{}, Resume), h("h2", Behaviour{}, Resume)}},
			History: []Step{{Op: OpCreate}, {Op: OpStop}, {Op: OpStart}},
		},
	},
	{
		Name:  "an update that fails after the handler gave up on the generation before is retried",
		Issue: "33 (found by the model: stalled)",
		Case: Case{
			Def:     Def{Kind: CustomResource, Handlers: []Handler{h("h1", Behaviour{Fail: 2}, Create, Update)}},
			History: []Step{{Op: OpCreate}, {Op: OpChange, Field: "a"}},
		},
	},
	{
		Name:  "an update not about the handler's fields runs nothing while another handler has given up",
		Issue: "33 (found by the model: handled)",
		Case: Case{
			Def: Def{Kind: CustomResource, Handlers: []Handler{
				{Name: "h1", On: []Trigger{Update}, Fields: []string{"b"}, MaxAttempts: 2},
				h("h2", Behaviour{Fail: 1, Permanent: true}, Create),
			}},
			History: []Step{{Op: OpCreate}, {Op: OpChange, Field: "a"}},
		},
	},
	{
		Name:  "a resume run interrupted by a SIGKILL is replaced by the next start's",
		Issue: "",
		Case: Case{
			Def:     Def{Kind: CustomResource, Handlers: []Handler{h("h1", Behaviour{}, Resume)}},
			History: []Step{{Op: OpCreate}, {Op: OpStop}, {Op: OpStart}, {Op: OpCrash}},
		},
	},
}
