package console

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/opkit-dev/opkit/internal/archive"
	"github.com/opkit-dev/opkit/internal/why"
)

// whyPage is an object's "why is it like this?" page: the chain opkit why
// prints, newest first, each run and delivery linked to its page. It
// reads what the object's timeline reads, and the runs and deliveries the
// chain names only where the user may read them (the others are named as
// not shown). ?since=1h bounds it.
func (s *Server) whyPage(r *http.Request, u *user) (string, *view, error) {
	ctx := r.Context()
	var since time.Time
	if v := r.URL.Query().Get("since"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d <= 0 {
			return "", nil, badRequest("since %q: want a duration such as 1h or 30m", v)
		}
		since = time.Now().Add(-d)
	}
	t, err := s.objectTarget(r, u)
	if err != nil {
		return "", nil, err
	}
	ref := why.Ref{Kind: t.gvk.Kind, Namespace: t.ns, Name: t.name}
	obj, notice := s.readObject(ctx, t.gvk, t.ns, t.name)
	if t.op == nil && obj == nil && !t.hasKind {
		ref.Kind = "" // its runs, whatever their kind
	}
	chain, err := why.Explain(ctx, &readableArchive{s: s, u: u}, ref, obj, since)
	if err != nil {
		return "", nil, err
	}
	if obj == nil && len(chain.Entries) == 0 && t.op == nil {
		return "", nil, notFound("no operator %s, and nothing of %s in the archive", t.opName, objectLabel(t.ns, t.name))
	}
	self := objectURL(t.opName, t.ns, t.name)
	kind := ""
	if t.hasKind {
		kind = kindQuery(t.gvk)
	}
	title := "Why " + objectLabel(t.ns, t.name) + " is like this"
	v := &view{Title: title, Crumbs: []crumb{{"Operators", "/"}, {t.opName, operatorURL(t.opName)}, {objectLabel(t.ns, t.name), withQuery(self, kind)}}}
	if notice != "" {
		v.Notices = append(v.Notices, notice)
	}
	v.Notices = append(v.Notices, chain.Notes...)
	rows := make([]whyRow, 0, len(chain.Entries))
	for _, e := range chain.Entries {
		rows = append(rows, whyRowOf(t, e))
	}
	query := map[string]string{}
	if t.hasKind {
		query["apiVersion"], query["kind"] = t.gvk.GroupVersion().String(), t.gvk.Kind
	}
	v.Data = map[string]any{"Rows": rows, "Since": r.URL.Query().Get("since"), "SinceOptions": sinceOptions, "Self": self + "/why",
		"Query": query, "Kind": t.gvk.Kind, "CLI": whyCommand(ref)}
	return "why", v, nil
}

// whyRow is an entry of the chain as the page shows it, with its links.
type whyRow struct {
	why.Entry
	// Relation says how the entry stands to the run or delivery Link
	// names ("during", "which caused", "handling", "on", "a re-run of");
	// OwnerURL is an owner's page.
	Relation, Link, LinkText, OwnerURL string
	RunOutcome                         archive.Outcome
	DeliveryOutcome                    archive.DeliveryOutcome
}

func whyRowOf(t *objectTarget, e why.Entry) whyRow {
	row := whyRow{Entry: e}
	if e.Run != nil {
		row.RunOutcome = archive.Outcome(e.Run.Outcome)
	}
	if e.Delivery != nil {
		row.DeliveryOutcome = archive.DeliveryOutcome(e.Delivery.Outcome)
	}
	cause, relation := e.Cause, ""
	switch {
	case e.Caused != "":
		cause, relation = e.Caused, "which caused"
	case strings.HasPrefix(cause, "a re-run of "):
		relation = "a re-run of"
		cause = "run " + strings.TrimPrefix(cause, "a re-run of ")
	case e.Change != nil && strings.HasPrefix(cause, "run "):
		relation = "during"
	case strings.HasPrefix(cause, "delivery ") && e.Change != nil:
		relation = "handling"
	case strings.HasPrefix(cause, "delivery "):
		relation = "on"
	}
	if kind, id, ok := strings.Cut(cause, " "); ok && relation != "" && archive.ValidID(id) {
		switch kind {
		case "run":
			row.Relation, row.Link, row.LinkText = relation, "/runs/"+id, cause
		case "delivery":
			row.Relation, row.Link, row.LinkText = relation, deliveryURL(id), cause
		}
	}
	if e.Owner != nil {
		// A child's owner is the operator's own object.
		row.OwnerURL = objectURL(t.opName, e.Owner.Namespace, e.Owner.Name)
	}
	return row
}

// sinceOptions are the page's bounds.
var sinceOptions = []struct{ Value, Label string }{
	{"", "everything kept"}, {"1h", "the last hour"}, {"24h", "the last day"}, {"168h", "the last week"},
}

// whyCommand is the command that prints the same chain.
func whyCommand(ref why.Ref) string {
	cmd := "opkit why " + objectLabel(ref.Namespace, ref.Name)
	if ref.Kind != "" {
		cmd += " --kind " + ref.Kind
	}
	return cmd
}

// readableArchive is the archive as a user of the console may read it
// (why.Source): a run or delivery they may not read is withheld.
type readableArchive struct {
	s *Server
	u *user
}

func (a *readableArchive) Get(ctx context.Context, id string) (*archive.Run, error) {
	r, err := a.s.opts.Archive.Get(ctx, id)
	if err != nil {
		return nil, err
	}
	if _, err := a.s.mayReadRun(ctx, a.u, r); err != nil {
		return nil, fmt.Errorf("%w: you may not read it: %w", why.ErrWithheld, err)
	}
	return r, nil
}

func (a *readableArchive) List(ctx context.Context, q archive.Query) (*archive.Page, error) {
	// The object's own runs: the user may get the object (objectTarget).
	return a.s.opts.Archive.List(ctx, q)
}

func (a *readableArchive) GetDelivery(ctx context.Context, id string) (*archive.Delivery, error) {
	d, err := a.s.opts.Archive.GetDelivery(ctx, id)
	if err != nil {
		return nil, err
	}
	if _, err := a.s.mayReadDeliveries(ctx, a.u, d.Operator); err != nil {
		return nil, fmt.Errorf("%w: you may not read the deliveries of operator %s", why.ErrWithheld, d.Operator)
	}
	return d, nil
}
