package definition

import (
	"fmt"
	"strings"
	"time"

	"github.com/opkit-dev/opkit/api/v1alpha1"
)

// A handler's schedule: its slots, compiled from spec.handlers[].schedule.

// NextSlot returns an operator-wide schedule's first slot after t: the
// next multiple of Every since the Unix epoch, or the next time of Cron in
// its time zone. Every engine computes the same slots.
func (h *Handler) NextSlot(t time.Time) (time.Time, error) {
	if h.Cron != nil {
		return h.Next(t, nil)
	}
	if h.Every <= 0 {
		return time.Time{}, fmt.Errorf("handler %s has no fixed interval", h.Name)
	}
	ns, every := t.UnixNano(), int64(h.Every)
	return time.Unix(0, ns-ns%every+every), nil
}

// Next returns the first scheduled time after t for the object self (an
// interval computed from the object may fail: the error names the field,
// the expression and what it gave; a cron fails when it has no time in
// the five years after t).
func (h *Handler) Next(t time.Time, self map[string]any) (time.Time, error) {
	if h.Cron != nil {
		loc := h.Location
		if loc == nil {
			loc = time.UTC
		}
		next := h.Cron.Next(t.In(loc))
		if next.IsZero() {
			// robfig/cron gives up after five years: a date that never
			// comes (Compile refuses those).
			return time.Time{}, fmt.Errorf("handler %s: its cron has no time after %s", h.Name, t.UTC().Format(time.RFC3339))
		}
		return next, nil
	}
	every, err := h.Interval(self)
	if err != nil {
		return time.Time{}, err
	}
	return t.Add(every), nil
}

// Interval is the handler's schedule.every for the object self.
func (h *Handler) Interval(self map[string]any) (time.Duration, error) {
	if h.EveryExpr == nil {
		return h.Every, nil
	}
	v, err := h.EveryExpr.eval(Vars{Self: self}.activation(nil))
	if err != nil {
		return 0, err
	}
	field := h.EveryExpr.parts[0].expr.Field
	var d time.Duration
	switch v := v.(type) {
	case string:
		if d, err = time.ParseDuration(v); err != nil {
			return 0, fmt.Errorf("%s: gave %q, not a duration like 90s or 5m", field, v)
		}
	case int64, float64:
		return 0, fmt.Errorf("%s: gave the number %v, not a duration: add a unit, like \"${...}s\"", field, v)
	default:
		return 0, fmt.Errorf("%s: gave %v, not a duration like 90s or 5m", field, v)
	}
	if d < MinEvery {
		return 0, fmt.Errorf("%s: gave %s, shorter than the %s minimum", field, d, MinEvery)
	}
	return d, nil
}

func compileSchedule(l *errorList, envs *celEnvs, field string, h v1alpha1.Handler, c *Handler, subj subject) {
	s := h.Schedule
	if s != nil {
		c.Location = time.UTC
		if s.TimeZone != "" {
			loc, err := time.LoadLocation(s.TimeZone)
			switch {
			case err != nil || s.TimeZone == "Local":
				l.add(field+".schedule.timeZone", "%q is not an IANA time zone like Europe/Prague or America/New_York", s.TimeZone)
			case s.Cron == "":
				l.add(field+".schedule.timeZone", "a time zone applies to cron, and this schedule has none")
			default:
				c.Location = loc
			}
		}
		switch {
		case s.CatchUp != "" && subj != calendarSubject:
			l.add(field+".schedule.catchUp", "catchUp is for operator-wide schedules (an Operator with neither resource nor watch); a schedule per object runs its next slot after downtime")
		case s.CatchUp == "" || s.CatchUp == v1alpha1.CatchUpOnce:
			c.CatchUp = v1alpha1.CatchUpOnce
		case s.CatchUp == v1alpha1.CatchUpSkip:
			c.CatchUp = v1alpha1.CatchUpSkip
		default:
			l.add(field+".schedule.catchUp", "%q: expected %s or %s", s.CatchUp, v1alpha1.CatchUpOnce, v1alpha1.CatchUpSkip)
		}
	}
	switch {
	case s == nil && c.Fires(v1alpha1.OnSchedule):
		l.add(field+".schedule", "required by the schedule trigger: every or cron")
	case s == nil:
	case !c.Fires(v1alpha1.OnSchedule):
		l.add(field+".schedule", "set, but the handler has no schedule trigger")
	case (s.Every != "") == (s.Cron != ""):
		l.add(field+".schedule", "set exactly one of every and cron")
	case strings.HasPrefix(s.Cron, "TZ=") || strings.HasPrefix(s.Cron, "CRON_TZ="):
		// The parser would take the zone from the expression, over
		// timeZone, and panics when no field follows it.
		zone, rest, _ := strings.Cut(s.Cron, " ")
		l.add(field+".schedule.cron", "%q: set the time zone in timeZone (timeZone: %s, cron: %q)", s.Cron, zone[strings.Index(zone, "=")+1:], strings.TrimSpace(rest))
	case s.Cron != "":
		sched, err := cronParser.Parse(s.Cron)
		switch {
		case err != nil:
			l.add(field+".schedule.cron", "%q is not a cron expression of five fields: %v", s.Cron, err)
		case strings.HasPrefix(s.Cron, "@every") && subj == calendarSubject:
			// Its times count from whenever an engine looks, which no two
			// engines agree on.
			l.add(field+".schedule.cron", "%q: an operator-wide schedule's slots are the same for every engine: write every: %s, whose slots are its multiples since the Unix epoch", s.Cron, strings.TrimSpace(strings.TrimPrefix(s.Cron, "@every")))
		case sched.Next(cronCheckFrom).IsZero():
			l.add(field+".schedule.cron", "%q never comes due (no such date)", s.Cron)
		default:
			c.Cron = sched
		}
	case strings.Contains(s.Every, "${") && subj == calendarSubject:
		l.add(field+".schedule.every", "an operator-wide schedule has no object to compute its interval from: write a duration like 90s or 1h")
	case strings.Contains(s.Every, "${"):
		c.EveryExpr = compileEvery(l, envs, field+".schedule.every", s.Every)
	default:
		d, err := time.ParseDuration(s.Every)
		switch {
		case err != nil:
			l.add(field+".schedule.every", "%q is not a duration: write one like 90s, 5m or 1h30m, or a ${...} template over the object that gives one", s.Every)
		case d < MinEvery:
			l.add(field+".schedule.every", "%s is shorter than the %s minimum", d, MinEvery)
		default:
			c.Every = d
		}
	}
}

// compileEvery compiles a schedule.every template: over self only, giving
// a string (a duration with its unit) or a CEL duration.
func compileEvery(l *errorList, envs *celEnvs, field, every string) *Slot {
	if envs == nil {
		return nil // the resource's schema is broken: reported already
	}
	slot := compileString(l, envs.object, field, every, nil)
	if slot == nil {
		return nil
	}
	for _, p := range slot.parts {
		if p.expr == nil {
			continue
		}
		if len(p.expr.Children) > 0 {
			l.add(field, "${%s} reads children; a schedule is computed from self alone", p.expr.Source)
			return nil
		}
		if len(slot.parts) == 1 && p.expr.Type.String() != "string" && p.expr.Type.String() != "google.protobuf.Duration" {
			l.add(field, "${%s} is of type %s; expected a duration, like ${duration(self.spec.interval)} or ${self.spec.everySeconds}s", p.expr.Source, p.expr.Type)
			return nil
		}
	}
	return slot
}
