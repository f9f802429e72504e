package scenario

import (
	"math"
	"time"

	"k8s.io/apimachinery/pkg/runtime"
)

// decoder builds a Scenario from a document the schema has checked, and
// checks what the schema cannot. It reads leniently: a value of the wrong
// type, which the schema has reported, is left out.
type decoder struct {
	l   *errorList
	dir string // the scenario file's directory
	// applied are the objects of the apply files read by this Load so far:
	// a file's errors are reported by the first step that applies it.
	applied map[string][]Object
}

func (d *decoder) scenario(obj map[string]any) *Scenario {
	s := &Scenario{Timeout: DefaultTimeout}
	s.Name, _ = obj["scenario"].(string)
	ops, _ := obj["operators"].([]any)
	for i, v := range ops {
		if p, ok := v.(string); ok && p != "" {
			s.Operators = append(s.Operators, d.file(itemPath("operators", i), p))
		}
	}
	if t, ok := obj["timeout"].(string); ok {
		s.Timeout = d.timeout("timeout", t, DefaultTimeout)
	}
	steps, _ := obj["steps"].([]any)
	for i, v := range steps {
		if m, ok := v.(map[string]any); ok {
			s.Steps = append(s.Steps, d.step(itemPath("steps", i), m, s.Timeout))
		}
	}
	return s
}

func (d *decoder) step(field string, m map[string]any, timeout time.Duration) Step {
	s := Step{Line: d.l.line(field)}
	s.Name, _ = m["name"].(string)
	if v, ok := m["apply"].(map[string]any); ok {
		s.Apply = d.apply(keyPath(field, "apply"), v)
	}
	if v, ok := m["patch"].(map[string]any); ok {
		s.Patch = &Patch{Object: ref(v["object"]), Merge: object(v["merge"])}
	}
	if v, ok := m["delete"].(map[string]any); ok {
		s.Delete = &Delete{Object: ref(v["object"])}
	}
	if v, ok := m["retry"].(map[string]any); ok {
		s.Retry = &Retry{Object: ref(v["object"])}
	}
	if v, ok := m["advance"].(string); ok {
		s.Advance = &Advance{By: d.duration(keyPath(field, "advance"), v, 0)}
	}
	if v, ok := m["stub"].(map[string]any); ok {
		s.Stub = stub(v)
	}
	if v, ok := m["unstub"].(map[string]any); ok {
		s.Unstub = &Unstub{Handler: str(v, "handler"), Operator: str(v, "operator")}
	}
	if v, ok := m["send"].(map[string]any); ok {
		s.Send = send(v)
	}
	if v, ok := m["expect"].(map[string]any); ok {
		s.Expect = d.expect(keyPath(field, "expect"), v, timeout)
	}
	if v, ok := m["refused"].(map[string]any); ok {
		s.Refused = &Refused{Message: str(v, "message")}
		// One object, so that the step says which one is refused.
		if s.Apply != nil && len(s.Apply.Objects) > 1 {
			d.l.add(keyPath(field, "refused"), "an apply expected to be refused applies one object, and %s holds %d: apply the others in a step of their own", s.Apply.File, len(s.Apply.Objects))
		}
	}
	return s
}

func (d *decoder) apply(field string, m map[string]any) *Apply {
	if _, ok := m["file"]; !ok {
		checkObject(d.l, field, m)
		return &Apply{Objects: []Object{m}}
	}
	file, _ := m["file"].(string)
	if file == "" {
		return &Apply{} // reported by the schema
	}
	a := &Apply{File: d.file(keyPath(field, "file"), file)}
	if d.l.has(keyPath(field, "file")) {
		return a
	}
	objs, read := d.applied[a.File]
	if !read {
		var errs Errors
		objs, errs = loadObjects(a.File)
		d.l.addFrom(keyPath(field, "file"), errs)
		d.applied[a.File] = objs
	}
	for _, o := range objs { // each step its own copy, which the runner may change
		a.Objects = append(a.Objects, runtime.DeepCopyJSON(o))
	}
	return a
}

func stub(m map[string]any) *Stub {
	s := &Stub{Handler: str(m, "handler"), Operator: str(m, "operator")}
	results, _ := m["results"].([]any)
	for _, v := range results {
		r, _ := v.(map[string]any)
		permanent, _ := r["permanent"].(bool)
		s.Results = append(s.Results, StubResult{
			Fail: str(r, "fail"), Permanent: permanent, Result: object(r["result"]), Log: str(r, "log"),
		})
	}
	return s
}

func send(m map[string]any) *Send {
	s := &Send{
		Source: str(m, "source"), Operator: str(m, "operator"), Event: str(m, "event"), ID: str(m, "id"),
		Payload: object(m["payload"]), Status: DefaultSendStatus,
	}
	if s.Payload == nil {
		s.Payload = Object{}
	}
	if h, ok := m["headers"].(map[string]any); ok {
		s.Headers = make(map[string]string, len(h))
		for k, v := range h {
			s.Headers[k], _ = v.(string)
		}
	}
	if n, ok := integer(m["status"]); ok {
		s.Status = n
	}
	return s
}

func (d *decoder) expect(field string, m map[string]any, timeout time.Duration) *Expect {
	e := &Expect{Timeout: timeout}
	if t, ok := m["timeout"].(string); ok {
		e.Timeout = d.timeout(keyPath(field, "timeout"), t, timeout)
	}
	if _, ok := m["object"].(map[string]any); ok {
		o := &ExpectObject{Ref: ref(m["object"]), Matches: object(m["matches"])}
		o.Absent, _ = m["absent"].(bool)
		if src, ok := m["cel"].(string); ok && src != "" {
			o.CEL = d.cel(keyPath(field, "cel"), src)
		}
		if c, ok := m["condition"].(map[string]any); ok {
			o.Condition = &Condition{Type: str(c, "type"), Status: str(c, "status"), Reason: str(c, "reason")}
		}
		e.Object = o
	}
	if r, ok := m["run"].(map[string]any); ok {
		e.Run = &ExpectRun{
			Handler: str(r, "handler"), Operator: str(r, "operator"), Object: str(r, "object"),
			Trigger: str(r, "trigger"), From: str(r, "from"), To: str(r, "to"), Outcome: str(r, "outcome"),
		}
		e.Run.Attempt, _ = integer(r["attempt"])
		if n, ok := integer(r["count"]); ok {
			e.Run.Count = &n
		}
	}
	if ev, ok := m["event"].(map[string]any); ok {
		e.Event = &ExpectEvent{Reason: str(ev, "reason"), Type: str(ev, "type"), Message: str(ev, "message")}
		if _, ok := ev["object"].(map[string]any); ok {
			r := ref(ev["object"])
			e.Event.Object = &r
		}
	}
	if lg, ok := m["log"].(map[string]any); ok {
		e.Log = &ExpectLog{
			Handler: str(lg, "handler"), Operator: str(lg, "operator"), Object: str(lg, "object"),
			Contains: str(lg, "contains"),
		}
	}
	return e
}

// str is m[key] when it is a string, "" otherwise.
func str(m map[string]any, key string) string {
	s, _ := m[key].(string)
	return s
}

// object is v when it is a map, nil otherwise.
func object(v any) Object {
	m, _ := v.(map[string]any)
	return m
}

func ref(v any) Ref {
	m, _ := v.(map[string]any)
	return Ref{APIVersion: str(m, "apiVersion"), Kind: str(m, "kind"), Name: str(m, "name")}
}

// integer is v when it is a whole number that fits an int.
func integer(v any) (int, bool) {
	switch n := v.(type) {
	case int64:
		if n >= math.MinInt && n <= math.MaxInt {
			return int(n), true
		}
	case float64:
		if n == math.Trunc(n) && n >= math.MinInt32 && n <= math.MaxInt32 {
			return int(n), true
		}
	}
	return 0, false
}
