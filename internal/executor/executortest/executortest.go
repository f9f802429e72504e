// Package executortest holds the checks of what a handler's run gives
// (its result, its failure's message, its log) that the fuzz targets of
// package executor and of the runner's agent (internal/agent) share,
// used by tests only.
//
// It does not import package executor, so that executor's own tests
// (package executor) can use it: the checks of a result take a *R whose
// fields are executor.Result's, read by their names, and panic naming a
// field that is not there (executortest_test checks them against
// executor.Result).
package executortest

import (
	"fmt"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"
)

// MaxMessage bounds a message a person reads (a refusal's, a failure's):
// what an Event, the object's status and the archive say, whatever the
// output held.
const MaxMessage = 4096

// CheckWords fails t unless msg, a message a person reads, says
// something, in text, and not too much of it.
func CheckWords(t testing.TB, msg string) {
	t.Helper()
	if strings.TrimSpace(msg) == "" {
		t.Fatal("a failure or refusal with no message")
	}
	if !utf8.ValidString(msg) {
		t.Fatalf("the message %q is not UTF-8", msg)
	}
	if len(msg) > MaxMessage {
		t.Fatalf("the message is %d bytes, more than %d: %.300q...", len(msg), MaxMessage, msg)
	}
}

// CheckHidden fails t when a Secret's value is in any of what a run
// gives the object, its Events, the archive and the console: its
// result's words, its failure (raw or quoted, as a message quotes
// output) and its log. A value with a * is not checked: *** next to it
// may spell it again. res is an *executor.Result.
func CheckHidden[R any](t testing.TB, secret string, res *R, err error, log string) {
	t.Helper()
	if strings.Contains(secret, "*") {
		return
	}
	if where := HiddenIn(secret, res, err, log); where != "" {
		t.Fatalf("the Secret's value %q is in the %s", secret, where)
	}
}

// HiddenIn says where secret is in what a run gave (res, an
// *executor.Result, or nil; err; log); "" where it is not. A
// requeueAfter and an event's type are not words that carry a value.
func HiddenIn[R any](secret string, res *R, err error, log string) string {
	if secret == "" {
		return ""
	}
	var found []string
	shows := func(where, s string) {
		if strings.Contains(s, secret) {
			found = append(found, fmt.Sprintf("%s %q", where, s))
		}
	}
	shows("log", log)
	if err != nil {
		shows("error", err.Error())
		shows("error, unquoted", unquoted(err.Error()))
	}
	if res != nil {
		r := reflect.ValueOf(res).Elem()
		var walk func(where string, v any)
		walk = func(where string, v any) {
			switch v := v.(type) {
			case string:
				shows(where, v)
			case map[string]any:
				for k, e := range v {
					shows(where+" key", k)
					walk(where+"."+k, e)
				}
			case []any:
				for _, e := range v {
					walk(where, e)
				}
			}
		}
		walk("status", get[map[string]any](r, "Status"))
		walk("patch", get[map[string]any](r, "Patch"))
		events := r.FieldByName("Events")
		if events.Kind() != reflect.Slice {
			panic(fmt.Sprintf("executortest: %s has no slice Events, as executor.Result has", r.Type()))
		}
		for i := range events.Len() {
			e := events.Index(i)
			shows("event", get[string](e, "Reason")+"\n"+get[string](e, "Message"))
		}
		if e := r.FieldByName("Error"); e.Kind() != reflect.Pointer {
			panic(fmt.Sprintf("executortest: %s has no pointer Error, as executor.Result has", r.Type()))
		} else if !e.IsNil() {
			shows("error message", get[string](e.Elem(), "Message"))
		}
		shows("refusal", get[string](r, "Refuse"))
		shows("admission message", get[string](r, "Message"))
		for _, w := range get[[]string](r, "Warnings") {
			shows("warning", w)
		}
	}
	return strings.Join(found, "; ")
}

// Normalized is *r, an executor.Result, with its empty fields that an
// encoding leaves out (status, events, warnings: all read by their
// length) nil. (go-cmp's EquateEmpty takes exponential time over a
// status nested 100 deep.)
func Normalized[R any](r *R) R {
	c := *r
	v := reflect.ValueOf(&c).Elem()
	for _, name := range []string{"Status", "Events", "Warnings"} {
		f := v.FieldByName(name)
		if k := f.Kind(); k != reflect.Map && k != reflect.Slice {
			panic(fmt.Sprintf("executortest: %s has no map or slice %s, as executor.Result has", v.Type(), name))
		}
		if f.Len() == 0 {
			f.SetZero()
		}
	}
	return c
}

// get is the field name of the struct v, of type T.
func get[T any](v reflect.Value, name string) T {
	if f := v.FieldByName(name); f.IsValid() && f.CanInterface() {
		if x, ok := f.Interface().(T); ok {
			return x
		}
	}
	var zero T
	panic(fmt.Sprintf("executortest: %s has no field %s of type %T, as executor.Result has", v.Type(), name, zero))
}

// unquoted is s with what Go's quoting escapes read back: a message that
// quotes output shows a value with a quote or a control character so.
func unquoted(s string) string {
	var b strings.Builder
	for len(s) > 0 {
		if s[0] != '\\' {
			b.WriteByte(s[0])
			s = s[1:]
			continue
		}
		r, mb, tail, err := strconv.UnquoteChar(s, '"')
		if err != nil {
			b.WriteByte(s[0])
			s = s[1:]
			continue
		}
		if mb {
			b.WriteRune(r)
		} else {
			b.WriteByte(byte(r))
		}
		s = tail
	}
	return b.String()
}
