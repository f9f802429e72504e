package console

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/opkit-dev/opkit/api/v1alpha1"
	"github.com/opkit-dev/opkit/internal/archive"
)

// clusterScoped stands for the namespace of a cluster-scoped object in URLs.
const clusterScoped = "_"

// overviewRow is one operator on the overview.
type overviewRow struct {
	Op          *operator
	Total       int
	Counts      []stateCount
	RunsPerMin  string
	FailureRate string
	Failed      int
	Err         string
	// NotRunHere: the engine beside the console does not run it.
	NotRunHere bool
}

type stateCount struct {
	State state
	N     int
}

// statsWindow is the period of the overview's run rates.
const statsWindow = 15 * time.Minute

func (s *Server) overview(r *http.Request, u *user) (string, *view, error) {
	ctx := r.Context()
	v := &view{Title: "Operators", Nav: "overview", Live: "/"}
	ops, err := s.readable(ctx, u)
	if err != nil {
		v.Notices = append(v.Notices, "The cluster cannot be read: "+err.Error())
	}
	if w := s.catalog.Warning(); w != "" {
		v.Notices = append(v.Notices, w)
	}
	counts, err := s.opts.Archive.Counts(ctx, time.Now().Add(-statsWindow))
	if err != nil {
		v.Notices = append(v.Notices, "The run archive cannot be read: "+err.Error())
	}
	var rows []overviewRow
	for _, op := range ops {
		row := overviewRow{Op: op, NotRunHere: s.opts.Runs != nil && !s.opts.Runs(op.Name)}
		objs, err := s.catalog.Objects(ctx, op)
		if err != nil {
			row.Err = err.Error()
		}
		n := map[state]int{}
		for _, o := range objs {
			n[o.State]++
		}
		for _, st := range op.States() {
			if n[st] > 0 {
				row.Counts = append(row.Counts, stateCount{st, n[st]})
			}
		}
		row.Total = len(objs)
		c := counts[op.Name]
		row.RunsPerMin = strconv.FormatFloat(float64(c.Runs)/statsWindow.Minutes(), 'f', 1, 64)
		row.Failed = c.Failed
		row.FailureRate = "–"
		if c.Runs > 0 {
			row.FailureRate = strconv.FormatFloat(100*float64(c.Failed)/float64(c.Runs), 'f', 1, 64) + "%"
		}
		rows = append(rows, row)
	}
	v.Data = rows
	return "overview", v, nil
}

// failureGroup is the failed runs that share an error message.
type failureGroup struct {
	Error     string
	Count     int
	Stalled   int
	Latest    archive.Run
	Objects   []runRow // one run per object, newest first, at most 5
	More      int      // objects beyond those
	Operators []string
}

// runRow is a run with its object's name and link (in the inbox, an
// object's latest failed run with an error).
type runRow struct {
	archive.Run
	// Label names the object; Kind is said beside it for an object that
	// is not the operator's custom resource.
	Label, Kind, URL string
}

// failureWindows are the periods the inbox offers.
var failureWindows = []struct{ Label, Value string }{{"1 hour", "1h"}, {"24 hours", "24h"}, {"7 days", "168h"}}

func (s *Server) failures(r *http.Request, u *user) (string, *view, error) {
	ctx := r.Context()
	window := r.URL.Query().Get("since")
	d, err := time.ParseDuration(window)
	if err != nil || d <= 0 {
		window, d = "24h", 24*time.Hour
	}
	v := &view{Title: "Failures", Nav: "failures", Live: "/failures?since=" + url.QueryEscape(window)}
	allowed := map[string]*operator{}
	ops, err := s.readable(ctx, u)
	if err != nil {
		if s.opts.Auth.Kubernetes {
			return "", nil, err
		}
		v.Notices = append(v.Notices, "The cluster cannot be read: "+err.Error())
	}
	for _, op := range ops {
		allowed[op.Name] = op
	}
	page, err := s.opts.Archive.List(ctx, archive.Query{Failed: true, Since: time.Now().Add(-d), Limit: 1000})
	if err != nil {
		return "", nil, fmt.Errorf("the run archive cannot be read: %w", err)
	}
	var groups []*failureGroup
	byError := map[string]*failureGroup{}
	seen := map[string]bool{} // error + object
	for _, run := range page.Runs {
		op := allowed[run.Operator]
		if s.opts.Auth.Kubernetes && op == nil {
			continue
		}
		ok, err := s.mayList(ctx, u, op, &run)
		if err != nil {
			return "", nil, err
		}
		if !ok {
			continue
		}
		msg := firstLine(run.Error)
		g := byError[msg]
		if g == nil {
			g = &failureGroup{Error: msg, Latest: run}
			byError[msg] = g
			groups = append(groups, g)
		}
		g.Count++
		if run.Outcome == archive.GaveUp {
			g.Stalled++
		}
		if !slices.Contains(g.Operators, run.Operator) {
			g.Operators = append(g.Operators, run.Operator)
		}
		obj := runRow{Run: run, Label: run.Object(), URL: runObjectURL(op, &run)}
		switch {
		case eventRun(&run):
			obj.Label, obj.Kind = "delivery "+run.UID, "webhook delivery"
		case calendarRun(&run):
			obj.Label, obj.Kind = run.Handler, "operator-wide schedule"
		case op == nil || !op.Owns():
			obj.Kind = run.Kind
		}
		key := strings.Join([]string{msg, run.Operator, run.Kind, obj.Label}, "\x00")
		if !seen[key] {
			seen[key] = true
			if len(g.Objects) < 5 {
				g.Objects = append(g.Objects, obj)
			} else {
				g.More++
			}
		}
	}
	v.Data = map[string]any{"Groups": groups, "Window": window, "Windows": failureWindows, "Capped": page.Next != ""}
	return "failures", v, nil
}

func firstLine(s string) string {
	s, _, _ = strings.Cut(strings.TrimSpace(s), "\n")
	if s == "" {
		return "(no error message)"
	}
	return s
}

// operatorPaused says who paused the whole operator name and why, read
// from its Operator in the cluster (opkit pause --operator NAME --all);
// "" when it is not paused, or has no Operator there.
func (s *Server) operatorPaused(ctx context.Context, name string) string {
	op := &v1alpha1.Operator{}
	if err := s.catalog.client.Get(ctx, client.ObjectKey{Name: name}, op); err != nil {
		return ""
	}
	value, paused := op.Annotations[v1alpha1.PauseAnnotation]
	if !paused {
		return ""
	}
	p := v1alpha1.ReadRequest(value)
	msg := "Paused as a whole by " + p.By
	if p.By == "" {
		msg = "Paused as a whole by someone unknown"
	}
	if p.At != "" {
		msg += " at " + p.At
	}
	if p.Reason != "" {
		msg += ": " + p.Reason
	}
	return msg + ". No handler of its objects starts, nor any of its schedules, until it is resumed (opkit resume --operator " + name + " --all)."
}

func operatorURL(name string) string { return "/operators/" + url.PathEscape(name) }

// pageLink is the query of page n, or "" when there is none.
func pageLink(q url.Values, n, pages int) string {
	if n < 1 || n > pages {
		return ""
	}
	q2 := url.Values{}
	for k, vs := range q {
		q2[k] = vs
	}
	q2.Set("page", strconv.Itoa(n))
	return "?" + q2.Encode()
}

// logPageSize is how much of a log one page shows.
const logPageSize = 64 << 10

// logLine is one line of a searched log.
type logLine struct {
	N    int
	Text string
}

func (s *Server) runPage(r *http.Request, u *user) (string, *view, error) {
	ctx := r.Context()
	id := r.PathValue("id")
	if !archive.ValidID(id) {
		return "", nil, notFound("%q is not a run id", id)
	}
	run, err := s.opts.Archive.Get(ctx, id)
	if err != nil {
		return "", nil, err
	}
	op, err := s.mayReadRun(ctx, u, run)
	if err != nil {
		return "", nil, err
	}
	stored, err := s.opts.Archive.Logs(ctx, id, 0)
	if err != nil {
		return "", nil, err
	}
	log := archive.CleanLog(stored.Data)
	q := r.URL.Query()
	objURL, objLabel := runObjectURL(op, run), objectLabel(run.Namespace, run.Name)
	switch {
	case eventRun(run):
		objLabel = "delivery " + run.UID
	case calendarRun(run):
		objLabel = "schedule " + run.Handler
	}
	v := &view{Title: "Run " + id, Crumbs: []crumb{{"Operators", "/"}, {run.Operator, operatorURL(run.Operator)}, {objLabel, objURL}}}
	if run.Outcome == archive.Running {
		v.Live = "/runs/" + id + "?" + q.Encode()
	}
	data := map[string]any{"Run": run, "Truncated": stored.Truncated, "LogBytes": run.LogBytes, "ObjectURL": objURL, "Search": "",
		"Calendar": calendarRun(run), "Event": eventRun(run), "Actions": op != nil && op.Owns() && run.Outcome.Failure() && !operatorRun(run) && !admissionRun(run),
		"NoActions": noActions(op), "Admission": admissionRun(run), "Transition": transitionOf(*run)}
	if eventRun(run) {
		data["NoActions"] = noActionsEvent
	}
	if admissionRun(run) {
		data["NoActions"] = noActionsAdmission
	}
	if op != nil && op.Owns() {
		data["ActionURL"] = objectURL(run.Operator, run.Namespace, run.Name)
		data["Rerun"], data["MaxReason"] = run.RerunRefusal(false) == "", maxReason
	}

	if search := q.Get("q"); search != "" {
		var lines []logLine
		needle := strings.ToLower(search)
		for i, line := range strings.Split(log, "\n") {
			if strings.Contains(strings.ToLower(line), needle) {
				lines = append(lines, logLine{i + 1, line})
				if len(lines) == 1000 {
					break
				}
			}
		}
		data["Search"], data["Matches"] = search, lines
	} else {
		pages := splitLog(log)
		n, err := strconv.Atoi(q.Get("page"))
		if err != nil || n < 1 || n > len(pages) {
			n = len(pages) // the end of a log says the most
		}
		data["Log"], data["Page"], data["Pages"] = pages[n-1], n, len(pages)
		if n > 1 {
			data["Prev"] = pageLink(url.Values{}, n-1, len(pages))
		}
		if n < len(pages) {
			data["Next"] = pageLink(url.Values{}, n+1, len(pages))
		}
	}
	v.Data = data
	return "run", v, nil
}

// splitLog cuts a log into pages of about logPageSize, at line ends.
func splitLog(log string) []string {
	var pages []string
	for len(log) > logPageSize {
		cut := strings.LastIndexByte(log[:logPageSize], '\n') + 1
		if cut == 0 {
			cut = logPageSize
		}
		pages = append(pages, log[:cut])
		log = log[cut:]
	}
	return append(pages, log)
}

// rawLog serves a run's whole log as text, control sequences removed.
func (s *Server) rawLog(w http.ResponseWriter, r *http.Request) {
	u, err := s.auth.authenticate(r.Context(), r)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	id := r.PathValue("id")
	if !archive.ValidID(id) {
		s.fail(w, r, notFound("%q is not a run id", id))
		return
	}
	run, err := s.opts.Archive.Get(r.Context(), id)
	if err == nil {
		_, err = s.mayReadRun(r.Context(), u, run)
	}
	var stored *archive.Log
	if err == nil {
		stored, err = s.opts.Archive.Logs(r.Context(), id, 0)
	}
	if err != nil {
		s.fail(w, r, err)
		return
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("Content-Disposition", `inline; filename="`+id+`.log"`)
	_, _ = w.Write([]byte(archive.CleanLog(stored.Data)))
}

// mayAct returns the operator named opName, when u may act on its
// objects in ns: it owns a custom resource (an action is an annotation on
// it), and u may patch those.
func (s *Server) mayAct(ctx context.Context, u *user, opName, ns string) (*operator, error) {
	op, err := s.catalog.Operator(ctx, opName)
	switch {
	case err != nil:
	case op == nil:
		err = notFound("no operator %s in the cluster", opName)
	case !op.Owns():
		// Refused before any access check: nobody may do it.
		err = &httpError{http.StatusConflict, noActions(op)}
	default:
		err = s.may(ctx, u, op, op.GVK, "patch", ns)
	}
	if err != nil {
		return nil, err
	}
	return op, nil
}

// act runs an action on an object: retry, pause or resume; or decide
// (see decide).
func (s *Server) act(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	u, ok := s.formUser(w, r)
	if !ok {
		return
	}
	opName, ns, name, action := r.PathValue("operator"), r.PathValue("namespace"), r.PathValue("name"), r.PathValue("action")
	if ns == clusterScoped {
		ns = ""
	}
	if action == "decide" {
		s.decide(w, r, u, opName, ns, name)
		return
	}
	// Who acted, for the engine's record: the signed-in user; nobody known
	// when the console runs without authentication.
	var patch string
	switch action {
	case "retry":
		// At to the nanosecond: on a watched object each new value is one
		// retry.
		by := v1alpha1.RetryRequest{By: u.Name, At: time.Now().UTC().Format(time.RFC3339Nano)}.Value()
		patch = fmt.Sprintf(`{"metadata":{"annotations":{%q:%q}}}`, v1alpha1.RetryAnnotation, by)
	case "pause", "resume":
		by := v1alpha1.Pause{By: u.Name, At: time.Now().UTC().Format(time.RFC3339)}.Value()
		if action == "pause" {
			patch = fmt.Sprintf(`{"metadata":{"annotations":{%q:%q}}}`, v1alpha1.PauseAnnotation, by)
		} else {
			patch = fmt.Sprintf(`{"metadata":{"annotations":{%q:null,%q:%q}}}`, v1alpha1.PauseAnnotation, v1alpha1.ResumedAnnotation, by)
		}
	default:
		s.fail(w, r, notFound("no action %q: retry, pause, resume or decide", action))
		return
	}
	op, err := s.mayAct(ctx, u, opName, ns)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	obj := &unstructured.Unstructured{}
	obj.SetGroupVersionKind(op.GVK)
	obj.SetNamespace(ns)
	obj.SetName(name)
	if err := s.client.Patch(ctx, obj, client.RawPatch(types.MergePatchType, []byte(patch))); err != nil {
		if apierrors.IsNotFound(err) {
			err = notFound("%s %s does not exist", op.GVK.Kind, objectLabel(ns, name))
		}
		s.fail(w, r, err)
		return
	}
	http.Redirect(w, r, backTo(r.PostFormValue("back"), objectURL(opName, ns, name)), http.StatusSeeOther)
}

// postForm is the form of a POST, parsed as PostFormValue parses it.
func postForm(r *http.Request) url.Values {
	_ = r.PostFormValue("csrf")
	return r.PostForm
}

// backTo is where an action's form sends its user back: the form's back,
// a path of this console, else fallback. A path is one a browser reads
// as this console's: it starts with one slash, and holds no backslash
// (which a browser reads as a slash) nor any byte a browser drops or
// that is not a URL's (a tab in "/\t/evil.example" would make it
// "//evil.example", another site).
func backTo(back, fallback string) string {
	if !strings.HasPrefix(back, "/") || strings.HasPrefix(back, "//") || strings.ContainsAny(back, "\\") {
		return fallback
	}
	for _, c := range []byte(back) {
		if c <= ' ' || c >= 0x7f {
			return fallback
		}
	}
	if u, err := url.Parse(back); err != nil || u.Scheme != "" || u.Host != "" || u.User != nil {
		return fallback
	}
	return back
}

func (s *Server) loginPage(w http.ResponseWriter, r *http.Request) {
	if !s.opts.Auth.enabled() {
		http.Redirect(w, r, "/", http.StatusSeeOther)
		return
	}
	s.renderLogin(w, http.StatusOK, "")
}

func (s *Server) renderLogin(w http.ResponseWriter, status int, notice string) {
	v := &view{Title: "Sign in", Data: s.opts.Auth.Kubernetes}
	if notice != "" {
		v.Notices = []string{notice}
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_ = s.tmpl["login"].ExecuteTemplate(w, "layout", v)
}

func (s *Server) login(w http.ResponseWriter, r *http.Request) {
	if !s.opts.Auth.enabled() {
		http.Redirect(w, r, "/", http.StatusSeeOther)
		return
	}
	if origin := r.Header.Get("Origin"); origin != "" {
		if o, err := url.Parse(origin); err != nil || o.Host != r.Host {
			s.renderLogin(w, http.StatusForbidden, "sign-in from another site refused")
			return
		}
	}
	token := strings.TrimSpace(r.PostFormValue("token"))
	if _, err := s.auth.check(r.Context(), token); err != nil {
		s.renderLogin(w, http.StatusForbidden, "That token is not valid.")
		return
	}
	http.SetCookie(w, &http.Cookie{Name: cookieName, Value: token, Path: "/", HttpOnly: true, SameSite: http.SameSiteStrictMode, Secure: r.TLS != nil})
	http.Redirect(w, r, "/", http.StatusSeeOther)
}

func (s *Server) logout(w http.ResponseWriter, r *http.Request) {
	http.SetCookie(w, &http.Cookie{Name: cookieName, Value: "", Path: "/", MaxAge: -1, HttpOnly: true, SameSite: http.SameSiteStrictMode})
	http.Redirect(w, r, "/login", http.StatusSeeOther)
}
