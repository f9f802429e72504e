package console

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/opkit-dev/opkit/api/v1alpha1"
	"github.com/opkit-dev/opkit/internal/archive"
	"github.com/opkit-dev/opkit/internal/definition"
)

// An operator's event sources (spec.sources) are read from its
// definition: the engine's beside the console (Options.Definitions), or
// its Operator object's in the cluster, compiled. An operator known from
// neither (its CRD alone, or the archive) shows the sources its
// deliveries came in on, without their settings.

// definitionEntry is a definition read from the cluster, kept for the
// catalog's ttl; one compiled is kept for as long as its Operator's
// generation.
type definitionEntry struct {
	at       time.Time
	uid      string
	gen      int64
	def      *definition.Definition
	invalid  string // why the Operator does not compile
	readFail error
}

// definition returns an operator's definition: the engine's, or its
// Operator object's, compiled. Neither is nil, nil. invalid is why the
// cluster's Operator does not compile.
func (c *catalog) definition(ctx context.Context, name string) (d *definition.Definition, invalid string, err error) {
	if c.defs != nil {
		for _, d := range c.defs() {
			if d.Operator.Name == name {
				return d, "", nil
			}
		}
	}
	c.mu.Lock()
	e, ok := c.definitions[name]
	c.mu.Unlock()
	if ok && time.Since(e.at) < c.ttl {
		return e.def, e.invalid, e.readFail
	}
	var o v1alpha1.Operator
	err = c.client.Get(ctx, client.ObjectKey{Name: name}, &o)
	next := definitionEntry{at: time.Now()}
	switch {
	case apierrors.IsNotFound(err) || meta.IsNoMatchError(err):
	case err != nil:
		next.readFail = fmt.Errorf("reading Operator %s from the cluster: %w", name, err)
	case ok && e.uid == string(o.UID) && e.gen == o.Generation && e.readFail == nil:
		next.uid, next.gen, next.def, next.invalid = e.uid, e.gen, e.def, e.invalid
	default:
		next.uid, next.gen = string(o.UID), o.Generation
		if next.def, err = definition.Compile(definition.FromCluster(o.DeepCopy())); err != nil {
			next.def, next.invalid = nil, err.Error()
		}
	}
	c.mu.Lock()
	if c.definitions == nil {
		c.definitions = map[string]definitionEntry{}
	}
	c.definitions[name] = next
	c.mu.Unlock()
	return next.def, next.invalid, next.readFail
}

// sourceURL is the page of an operator's event source.
func sourceURL(op, source string) string {
	return operatorURL(op) + "/sources/" + url.PathEscape(source)
}

// hookPath is where a source's deliveries are received.
func hookPath(op, source string) string {
	return "/hooks/" + url.PathEscape(op) + "/" + url.PathEscape(source)
}

// sourceInfo is what a source is, for people.
type sourceInfo struct {
	Name string
	// Path is where its deliveries are received (POST).
	Path string
	// Verify is how a delivery proves its sender; Kind is the kind of
	// verification (github, hmac, bearer).
	Verify, Kind string
	// Secret holds the shared secret (its value is not shown).
	Secret                      v1alpha1.SecretKeySelector
	DeliveryHeader, EventHeader string
	MaxBodyBytes                int64
	// Filter is the CEL condition a delivery must meet; "" for none.
	Filter string
	// Handlers are the handlers on event its deliveries run, in order.
	Handlers []*definition.Handler
	// Object is the kind of the custom resource it creates or patches per
	// delivery; "" for none.
	Object string
}

func sourceInfoOf(op string, s *definition.EventSource) *sourceInfo {
	info := &sourceInfo{Name: s.Name, Path: hookPath(op, s.Name), Kind: s.Verify, Secret: s.Secret,
		DeliveryHeader: s.DeliveryHeader, EventHeader: s.EventHeader, MaxBodyBytes: s.MaxBodyBytes, Handlers: s.Handlers}
	switch s.Verify {
	case definition.VerifyGitHub:
		info.Verify = fmt.Sprintf("GitHub's signature: an HMAC-SHA256 of the body with the shared secret, in %s (%s…)", s.SignatureHeader, s.SignaturePrefix)
	case definition.VerifyHMAC:
		info.Verify = fmt.Sprintf("an HMAC-SHA256 of the body with the shared secret, in hex, in %s", s.SignatureHeader)
		if s.SignaturePrefix != "" {
			info.Verify += fmt.Sprintf(" after %q", s.SignaturePrefix)
		}
	case definition.VerifyBearer:
		info.Verify = "a bearer token: Authorization: Bearer, then the shared secret"
	default:
		info.Verify = s.Verify
	}
	if s.Filter != nil {
		info.Filter = s.Filter.Source
	}
	if s.Object != nil {
		info.Object = s.Object.GVK.Kind
	}
	return info
}

// sourceRow is an operator's event source on its page: what it is, and
// its deliveries over the last day.
type sourceRow struct {
	Name, URL, Path, Kind string
	// Declared: in the operator's definition; otherwise known from its
	// deliveries alone.
	Declared bool
	// Last is when its latest delivery came; zero for none.
	Last time.Time
	// Day, Refused and Failed count its deliveries of the last 24 hours;
	// Capped says that only the latest 1000 of them were counted.
	Day, Refused, Failed int
	Capped               bool
}

// sourcesWindow is the period an operator page counts deliveries over.
const sourcesWindow = 24 * time.Hour

// operatorSources lists an operator's event sources, declared first, then
// those only its deliveries name; notices say what could not be read.
func (s *Server) operatorSources(ctx context.Context, name string) ([]sourceRow, []string) {
	var notices []string
	var rows []sourceRow
	index := map[string]int{}
	add := func(row sourceRow) *sourceRow {
		if i, ok := index[row.Name]; ok {
			return &rows[i]
		}
		row.URL = sourceURL(name, row.Name)
		row.Path = hookPath(name, row.Name)
		index[row.Name] = len(rows)
		rows = append(rows, row)
		return &rows[len(rows)-1]
	}
	d, invalid, err := s.catalog.definition(ctx, name)
	switch {
	case err != nil:
		notices = append(notices, "Its event sources cannot be read: "+err.Error())
	case invalid != "":
		// The operator page says so already.
	case d != nil:
		for _, src := range d.Sources {
			kind := src.Verify // github, hmac, bearer
			switch {
			case src.Consumed():
				kind = src.Kind
			case src.Kind == definition.KindCloudEvents:
				kind = "CloudEvents, " + src.Verify
			}
			add(sourceRow{Name: src.Name, Kind: kind, Declared: true})
		}
	}
	page, err := s.opts.Archive.ListDeliveries(ctx, archive.DeliveryQuery{Operator: name, Since: time.Now().Add(-sourcesWindow), Limit: 1000})
	if err != nil {
		return rows, append(notices, "The run archive's deliveries cannot be read: "+err.Error())
	}
	for _, dl := range page.Deliveries {
		row := add(sourceRow{Name: dl.Source})
		if row.Last.IsZero() {
			row.Last = dl.ReceivedAt
		}
		row.Day++
		switch dl.Outcome {
		case archive.DeliveryRefused:
			row.Refused++
		case archive.DeliveryFailed:
			row.Failed++
		}
		row.Capped = page.Next != ""
	}
	// The latest delivery of those that had none today; and of an
	// operator with no source known, the source of its latest.
	for i := range rows {
		if !rows[i].Last.IsZero() {
			continue
		}
		last, err := s.opts.Archive.ListDeliveries(ctx, archive.DeliveryQuery{Operator: name, Source: rows[i].Name, Limit: 1})
		if err == nil && len(last.Deliveries) > 0 {
			rows[i].Last = last.Deliveries[0].ReceivedAt
		}
	}
	if len(rows) == 0 {
		last, err := s.opts.Archive.ListDeliveries(ctx, archive.DeliveryQuery{Operator: name, Limit: 1})
		if err == nil && len(last.Deliveries) > 0 {
			add(sourceRow{Name: last.Deliveries[0].Source, Last: last.Deliveries[0].ReceivedAt})
		}
	}
	return rows, notices
}

func (s *Server) sourcePage(r *http.Request, u *user) (string, *view, error) {
	ctx := r.Context()
	opName, name := r.PathValue("operator"), r.PathValue("source")
	if _, err := s.mayReadDeliveries(ctx, u, opName); err != nil {
		return "", nil, err
	}
	q := r.URL.Query()
	f, err := readDeliveryFilter(q)
	if err != nil {
		return "", nil, err
	}
	f.Operator, f.Source = opName, name
	v := &view{Title: "Source " + name, Crumbs: []crumb{{"Operators", "/"}, {opName, operatorURL(opName)}}}
	v.Live = withQuery(sourceURL(opName, name), q.Encode())
	var info *sourceInfo
	d, invalid, err := s.catalog.definition(ctx, opName)
	switch {
	case err != nil:
		v.Notices = append(v.Notices, "Its settings cannot be read: "+err.Error())
	case invalid != "":
		v.Notices = append(v.Notices, "Its Operator does not compile, so the source's settings cannot be shown: "+invalid)
	case d != nil:
		if src := d.EventSource(name); src != nil {
			info = sourceInfoOf(opName, src)
		}
	}
	data, err := s.deliveryTable(ctx, u, v, f, false)
	if err != nil {
		return "", nil, err
	}
	rows, _ := data["Rows"].([]deliveryRow)
	if info == nil && d != nil && len(rows) == 0 && f.Cursor == "" && f.Outcome == "" && !f.Refused {
		var names []string
		for _, src := range d.Sources {
			names = append(names, src.Name)
		}
		return "", nil, notFound("operator %s has no event source %s (its sources: %s), and the run archive has no delivery on one", opName, name, orNone(names))
	}
	if info == nil && d == nil && len(rows) == 0 && f.Cursor == "" && f.Outcome == "" && !f.Refused {
		return "", nil, notFound("no event source %s of operator %s is known here: its definition is not, and the run archive has no delivery on one", name, opName)
	}
	data["Source"], data["Name"], data["Path"], data["Known"] = info, name, hookPath(opName, name), d != nil
	data["Action"] = sourceURL(opName, name)
	v.Data = data
	return "source", v, nil
}

func orNone(names []string) string {
	if len(names) == 0 {
		return "none"
	}
	return strings.Join(names, ", ")
}
