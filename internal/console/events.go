package console

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"

	"github.com/opkit-dev/opkit/internal/archive"
)

// The pages of webhook deliveries: /events lists them all, newest first;
// /operators/OPERATOR/sources/SOURCE says what one event source is and
// lists its deliveries; /events/ID shows one whole, with what it caused.
// Every delivery, accepted or refused, is in the archive; what its sender
// chose (its event, ids, reason, headers, payload) is escaped, and its
// headers and payload are shown redacted.

// deliveriesPerPage is the size of a page of deliveries.
const deliveriesPerPage = 50

// payloadShown is how much of a payload a delivery's page shows; opkit
// events show ID prints it whole.
const payloadShown = 1 << 20

// runsShown is how many of a delivery's runs a table row links.
const runsShown = 3

// deliveryOutcomes are the outcomes a list is filtered by, in the order a
// delivery goes through them.
var deliveryOutcomes = []archive.DeliveryOutcome{archive.DeliveryPending, archive.DeliveryHandled, archive.DeliveryFailed, archive.DeliveryRefused}

// deliveryFilter selects the deliveries of a table, as its page's query
// says: operator, source, outcome, refused (only those refused) and
// cursor (the page after the one that ended there).
type deliveryFilter struct {
	Operator, Source string
	Outcome          archive.DeliveryOutcome
	Refused          bool
	Cursor           string
}

// readDeliveryFilter reads a filter from a page's query; what it cannot
// read is a 400 that says why.
func readDeliveryFilter(q url.Values) (deliveryFilter, error) {
	f := deliveryFilter{Operator: q.Get("operator"), Source: q.Get("source"), Refused: q.Get("refused") != "", Cursor: q.Get("cursor")}
	if o := q.Get("outcome"); o != "" {
		i := slices.IndexFunc(deliveryOutcomes, func(d archive.DeliveryOutcome) bool { return strings.EqualFold(string(d), o) })
		if i < 0 {
			return f, badRequest("outcome %q is none of Pending, Handled, Failed, Refused", o)
		}
		f.Outcome = deliveryOutcomes[i]
	}
	if f.Cursor != "" && !archive.ValidID(f.Cursor) {
		return f, badRequest("cursor %q is not one this console links to: follow the list's Older deliveries link", f.Cursor)
	}
	return f, nil
}

// conflict says why the filter selects nothing, or "".
func (f deliveryFilter) conflict() string {
	if f.Refused && f.Outcome != "" && f.Outcome != archive.DeliveryRefused && f.Outcome != archive.DeliveryHandled {
		return fmt.Sprintf("Refused only and the outcome %s select nothing together: a refusal is Refused (by the source's checks) or Handled (by a handler); choose one of them.", f.Outcome)
	}
	return ""
}

// query is the filter's archive query, a page of deliveriesPerPage.
func (f deliveryFilter) query() archive.DeliveryQuery {
	return archive.DeliveryQuery{Operator: f.Operator, Source: f.Source, Outcome: f.Outcome, Refused: f.Refused,
		Cursor: f.Cursor, Limit: deliveriesPerPage}
}

// link is the query of the filter's page that starts after cursor, with
// the operator and source when all (the events list), without on a
// source's page.
func (f deliveryFilter) link(cursor string, all bool) string {
	v := url.Values{}
	if all && f.Operator != "" {
		v.Set("operator", f.Operator)
	}
	if all && f.Source != "" {
		v.Set("source", f.Source)
	}
	if f.Outcome != "" {
		v.Set("outcome", string(f.Outcome))
	}
	if f.Refused {
		v.Set("refused", "1")
	}
	if cursor != "" {
		v.Set("cursor", cursor)
	}
	return "?" + v.Encode()
}

// deliveryRow is a delivery in a table, with the runs it links.
type deliveryRow struct {
	archive.Delivery
	// RunIDs are its first runsShown runs; MoreRuns how many others.
	RunIDs   []string
	MoreRuns int
}

func rowsOf(ds []archive.Delivery) []deliveryRow {
	rows := make([]deliveryRow, 0, len(ds))
	for _, d := range ds {
		row := deliveryRow{Delivery: d}
		for _, id := range d.Runs {
			if len(row.RunIDs) == runsShown || !archive.ValidID(id) {
				row.MoreRuns++
				continue
			}
			row.RunIDs = append(row.RunIDs, id)
		}
		rows = append(rows, row)
	}
	return rows
}

// mayReadDeliveries checks that the user may read an operator's
// deliveries: what its page needs. An operator the console does not know
// is nil, and readable only without Kubernetes auth (see operatorNamed).
func (s *Server) mayReadDeliveries(ctx context.Context, u *user, name string) (*operator, error) {
	op, err := s.operatorNamed(ctx, name)
	if err != nil || op == nil {
		return op, err
	}
	return op, s.may(ctx, u, op, op.GVK, "get", op.listNamespaces()...)
}

// deliveryTable is one page of the deliveries a filter selects that the
// user may read, for a template: Rows, and the links Next (older) and
// First (the newest, when this page is not). all: the table is the
// events list's, with the operator and source columns.
func (s *Server) deliveryTable(ctx context.Context, u *user, v *view, f deliveryFilter, all bool) (map[string]any, error) {
	unfiltered, refused := f, f
	unfiltered.Outcome, unfiltered.Refused = "", false
	refused.Outcome, refused.Refused = "", true
	data := map[string]any{"All": all, "Filter": f, "Outcomes": deliveryOutcomes,
		"AllLink": unfiltered.link("", all), "RefusedLink": refused.link("", all)}
	if f.Cursor != "" {
		data["First"] = f.link("", all)
	}
	if why := f.conflict(); why != "" {
		v.Notices = append(v.Notices, why)
		return data, nil
	}
	page, err := s.opts.Archive.ListDeliveries(ctx, f.query())
	if err != nil {
		return nil, fmt.Errorf("the run archive cannot be read: %w", err)
	}
	ds := page.Deliveries
	if s.opts.Auth.Kubernetes && f.Operator == "" {
		// One check per operator on the page; the others' rows are left
		// out, and said to be.
		allowed := map[string]bool{}
		hidden := 0
		ds = slices.DeleteFunc(slices.Clone(ds), func(d archive.Delivery) bool {
			ok, seen := allowed[d.Operator]
			if !seen {
				_, err := s.mayReadDeliveries(ctx, u, d.Operator)
				var he *httpError
				switch {
				case err == nil:
					ok = true
				case errors.As(err, &he) && he.status == http.StatusForbidden:
				default:
					v.Notices = append(v.Notices, fmt.Sprintf("Access to operator %s's deliveries cannot be checked: %v", d.Operator, err))
				}
				allowed[d.Operator] = ok
			}
			if !ok {
				hidden++
			}
			return !ok
		})
		data["Hidden"] = hidden
	}
	data["Rows"] = rowsOf(ds)
	if page.Next != "" {
		data["Next"] = f.link(page.Next, all)
	}
	return data, nil
}

func (s *Server) eventsPage(r *http.Request, u *user) (string, *view, error) {
	ctx := r.Context()
	q := r.URL.Query()
	f, err := readDeliveryFilter(q)
	if err != nil {
		return "", nil, err
	}
	v := &view{Title: "Events", Nav: "events", Live: withQuery("/events", q.Encode())}
	if f.Operator != "" {
		if _, err := s.mayReadDeliveries(ctx, u, f.Operator); err != nil {
			return "", nil, err
		}
	}
	ops, err := s.readable(ctx, u)
	if err != nil {
		if s.opts.Auth.Kubernetes {
			return "", nil, err
		}
		v.Notices = append(v.Notices, "The cluster cannot be read: "+err.Error())
	}
	var names []string
	for _, op := range ops {
		names = append(names, op.Name)
	}
	if f.Operator != "" && !slices.Contains(names, f.Operator) {
		names = append(names, f.Operator)
	}
	data, err := s.deliveryTable(ctx, u, v, f, true)
	if err != nil {
		return "", nil, err
	}
	data["Operators"], data["Action"] = names, "/events"
	v.Data = data
	return "events", v, nil
}

// deliveryURL is a delivery's page.
func deliveryURL(id string) string { return "/events/" + url.PathEscape(id) }

// causedRun is a run a delivery started; Run is nil when the archive no
// longer has it, or ID is not a run id (Link false).
type causedRun struct {
	ID   string
	Link bool
	Run  *archive.Run
}

// causedObject is an object a delivery's handling created or patched:
// "Kind namespace/name", linking its timeline when it is the operator's
// own custom resource.
type causedObject struct {
	Text, URL string
}

// header is one header value.
type header struct{ Name, Value string }

func (s *Server) deliveryPage(r *http.Request, u *user) (string, *view, error) {
	ctx := r.Context()
	id := r.PathValue("id")
	if !archive.ValidID(id) {
		return "", nil, notFound("%q is not a delivery id: /events lists the deliveries the archive keeps", id)
	}
	d, err := s.opts.Archive.GetDelivery(ctx, id)
	if errors.Is(err, archive.ErrNotFound) {
		if _, runErr := s.opts.Archive.Get(ctx, id); runErr == nil {
			return "", nil, notFound("%s is a run, not a delivery: its page is /runs/%s", id, id)
		}
		return "", nil, notFound("no delivery %s in the run archive: it was never received here, or retention pruned it; /events lists the deliveries it keeps", id)
	}
	if err != nil {
		return "", nil, fmt.Errorf("the run archive cannot be read: %w", err)
	}
	op, err := s.mayReadDeliveries(ctx, u, d.Operator)
	if err != nil {
		return "", nil, err
	}
	v := &view{Title: "Delivery " + id, Crumbs: []crumb{{"Operators", "/"}, {d.Operator, operatorURL(d.Operator)},
		{"source " + d.Source, sourceURL(d.Operator, d.Source)}}}
	asked := r.URL.Query().Get("redelivery")
	redelivery := s.redeliveryOf(ctx, u, v, d, asked)
	switch {
	case redelivery != nil && redelivery.Asked != nil && (redelivery.Asked.Waiting || d.Outcome == archive.DeliveryPending):
		v.Live = deliveryURL(id) + "?" + url.Values{"redelivery": {asked}}.Encode()
	case d.Outcome == archive.DeliveryPending:
		v.Live = deliveryURL(id)
	}

	var runs []causedRun
	for _, rid := range d.Runs {
		c := causedRun{ID: rid, Link: archive.ValidID(rid)}
		if c.Link {
			run, err := s.opts.Archive.Get(ctx, rid)
			switch {
			case errors.Is(err, archive.ErrNotFound):
			case err != nil:
				v.Notices = append(v.Notices, fmt.Sprintf("Run %s cannot be read from the archive: %v", rid, err))
			default:
				c.Run = run
			}
		}
		runs = append(runs, c)
	}
	var objects []causedObject
	for _, o := range d.Objects {
		c := causedObject{Text: o}
		if kind, ref, ok := strings.Cut(o, " "); ok && op != nil && op.Owns() && kind == op.GVK.Kind {
			ns, name, namespaced := strings.Cut(ref, "/")
			if !namespaced {
				ns, name = "", ref
			}
			c.URL = objectURL(d.Operator, ns, name)
		}
		objects = append(objects, c)
	}
	var headers []header
	redactedHeaders := archive.RedactHeaders(d.Headers)
	for name, values := range redactedHeaders {
		for _, value := range values {
			headers = append(headers, header{name, value})
		}
	}
	slices.SortStableFunc(headers, func(a, b header) int { return strings.Compare(strings.ToLower(a.Name), strings.ToLower(b.Name)) })

	shown, cut := d.Payload, false
	if len(shown) > payloadShown {
		shown, cut = shown[:payloadShown], true
	}
	payload, isJSON, note := archive.ShowPayload(shown)
	label, class, meaning := deliveryMeaning(d.Outcome)
	v.Data = map[string]any{
		"D": d, "SourceURL": sourceURL(d.Operator, d.Source), "Runs": runs, "Objects": objects, "Headers": headers,
		"Payload": payload, "JSON": isJSON, "PayloadNote": note, "Size": max(d.PayloadBytes, int64(len(d.Payload))), "Kept": int64(len(d.Payload)),
		"ShownCut": cut, "Shown": int64(payloadShown),
		"ReasonLabel": label, "ReasonClass": class, "Meaning": meaning,
		"Pending": d.Outcome == archive.DeliveryPending, "Refused": d.Outcome == archive.DeliveryRefused,
		"Redeliver": redelivery,
	}
	return "delivery", v, nil
}

// deliveryMeaning says, for a delivery's page, what its reason is (label)
// and how grave (class), and what its outcome means.
func deliveryMeaning(o archive.DeliveryOutcome) (label, class, meaning string) {
	switch o {
	case archive.DeliveryPending:
		return "Reason", "warn", "accepted, not handled yet"
	case archive.DeliveryHandled:
		// A reason here is a handler's refusal: nothing was done.
		return "Why nothing was done", "warn", "accepted and handled"
	case archive.DeliveryFailed:
		return "Why its handling failed", "bad", "accepted, but its handling gave up"
	case archive.DeliveryRefused:
		return "Why it was refused", "bad", "not accepted, so never handled"
	}
	return "Reason", "warn", ""
}
