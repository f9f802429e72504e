// Package runsclient reads an engine's run archive through the cluster's
// runs API (runs.opkit.dev/v1alpha1, served by package runsapi behind the
// API server's aggregation layer), with a kubeconfig's credentials, as
// kubectl get runs does. The CLI's triage commands (opkit runs, logs,
// rerun, retry, events) read the archive of an engine in a cluster so,
// where its file cannot be reached.
//
// Contract:
//
//   - Open asks discovery first. A cluster that does not serve the group
//     (no engine runs with --runs-api) is an error wrapping ErrNotServed;
//     one whose APIService is registered but not available is an error
//     that says so and names it (the engine is down, or the API server
//     cannot reach it), not a fallback: reading another archive then
//     would show other runs as if they were the engine's.
//   - A Reader answers Get, List, Logs and ListDeliveries from what the
//     runs API serves: a run's record (its binding context and result
//     are not served), its log as the API serves it (control sequences
//     stripped, as opkit logs prints it), a delivery's record without
//     its payload and headers. A query the API cannot select
//     (archive.Query's UID, NoNamespace or Until) and what it does not
//     serve (Counts, States, GetDelivery's payload) are errors wrapping
//     ErrNotServed, which name --archive, the way to read the archive
//     itself.
//   - What the API server refuses (RBAC's 403, a 400) is an error with
//     its message; an unknown run is archive.ErrNotFound.
//   - Nothing is written: the runs API is read-only.
package runsclient

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/rest"

	runsv1alpha1 "github.com/opkit-dev/opkit/api/runs/v1alpha1"
	"github.com/opkit-dev/opkit/internal/archive"
)

var (
	// ErrNotServed is what the runs API does not serve.
	ErrNotServed = errors.New("not served by the runs API")
	// ErrUnavailable is a runs API registered that cannot be reached.
	ErrUnavailable = errors.New("the runs API is registered but not available")
)

// APIServiceName is the runs API's APIService.
var APIServiceName = runsv1alpha1.Version + "." + runsv1alpha1.Group

// Reader reads an engine's archive through the runs API.
type Reader struct {
	http *http.Client
	base string // the API server's URL, with the group's path
	host string // the API server, for messages
}

// Open returns a Reader of the runs API of the cluster cfg reaches, once
// discovery says the cluster serves it.
func Open(ctx context.Context, cfg *rest.Config) (*Reader, error) {
	hc, err := rest.HTTPClientFor(cfg)
	if err != nil {
		return nil, err
	}
	host := strings.TrimSuffix(cfg.Host, "/")
	if !strings.Contains(host, "://") {
		host = "https://" + host
	}
	r := &Reader{http: hc, base: host + strings.TrimSuffix(cfg.APIPath, "/") + "/apis/" + runsv1alpha1.Group + "/" + runsv1alpha1.Version, host: cfg.Host}
	var list metav1.APIResourceList
	status, err := r.get(ctx, r.base, &list)
	switch {
	case status == http.StatusNotFound:
		return nil, fmt.Errorf("the cluster at %s: %s/%s: %w (no engine there serves it: opkit run --runs-api-addr)", cfg.Host, runsv1alpha1.Group, runsv1alpha1.Version, ErrNotServed)
	case status == http.StatusServiceUnavailable:
		return nil, fmt.Errorf("the cluster at %s: %w (%w); kubectl get apiservice %s says why (the engine may be down), or read an archive with --archive", cfg.Host, ErrUnavailable, err, APIServiceName)
	case err != nil:
		return nil, fmt.Errorf("asking the cluster at %s for its runs API: %w", cfg.Host, err)
	}
	return r, nil
}

// String names what the Reader reads, for messages.
func (r *Reader) String() string { return "the runs API of the cluster at " + r.host }

// Close does nothing: each request is its own.
func (r *Reader) Close() error { return nil }

// statusError is an answer other than 200: the API server's Status
// message when it sent one.
type statusError struct {
	code    int
	message string
}

func (e *statusError) Error() string { return e.message }

// get reads url's JSON into v, and returns the HTTP status.
func (r *Reader) get(ctx context.Context, u string, v any) (int, error) {
	body, status, err := r.read(ctx, u, "application/json")
	if err != nil {
		return status, err
	}
	if err := json.Unmarshal(body, v); err != nil {
		return status, fmt.Errorf("%s: %w", u, err)
	}
	return status, nil
}

// read returns the body of a GET of u, or a statusError with the API
// server's message.
func (r *Reader) read(ctx context.Context, u, accept string) ([]byte, int, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return nil, 0, err
	}
	req.Header.Set("Accept", accept)
	resp, err := r.http.Do(req)
	if err != nil {
		return nil, 0, err
	}
	defer func() { _ = resp.Body.Close() }()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return nil, resp.StatusCode, err
	}
	if resp.StatusCode == http.StatusOK {
		return body, http.StatusOK, nil
	}
	msg := strings.TrimSpace(string(body))
	var st metav1.Status
	if json.Unmarshal(body, &st) == nil && st.Message != "" {
		msg = st.Message
	}
	return nil, resp.StatusCode, &statusError{code: resp.StatusCode, message: fmt.Sprintf("%s (HTTP %d)", msg, resp.StatusCode)}
}

// path is the URL of resource, in namespace ns ("" for all), with query.
func (r *Reader) path(ns, resource string, query url.Values) string {
	p := r.base
	if ns != "" {
		p += "/namespaces/" + url.PathEscape(ns)
	}
	p += "/" + resource
	if len(query) > 0 {
		p += "?" + query.Encode()
	}
	return p
}

// selectors builds a list's query: labelSelector and fieldSelector of
// the terms given, non-empty, and limit and continue.
func selectors(terms [][2]string, limit int, cursor string) url.Values {
	var fields []string
	for _, t := range terms {
		if t[1] != "" {
			fields = append(fields, t[0]+"="+t[1])
		}
	}
	q := url.Values{}
	if len(fields) > 0 {
		q.Set("fieldSelector", strings.Join(fields, ","))
	}
	if limit > 0 {
		q.Set("limit", fmt.Sprint(limit))
	}
	if cursor != "" {
		q.Set("continue", cursor)
	}
	return q
}

// List returns the runs q selects, newest first.
func (r *Reader) List(ctx context.Context, q archive.Query) (*archive.Page, error) {
	switch {
	case q.UID != "":
		return nil, fmt.Errorf("selecting runs by their object's UID: %w; read the archive with --archive", ErrNotServed)
	case q.NoNamespace:
		return nil, fmt.Errorf("selecting the runs of objects with no namespace: %w; read the archive with --archive", ErrNotServed)
	case !q.Until.IsZero():
		return nil, fmt.Errorf("selecting runs started before a time: %w; read the archive with --archive", ErrNotServed)
	}
	terms := [][2]string{
		{"spec.operator", q.Operator}, {"spec.handler", q.Handler}, {"spec.trigger", q.Trigger},
		{"status.outcome", string(q.Outcome)}, {"spec.object.kind", q.Kind},
	}
	if q.Failed {
		terms = append(terms, [2]string{"status.failed", "true"})
	}
	if !q.Since.IsZero() {
		terms = append(terms, [2]string{"status.startedSince", q.Since.UTC().Format(time.RFC3339Nano)})
	}
	query := selectors(terms, q.Limit, q.Cursor)
	if q.Name != "" {
		// The object's name is a label; a name that is no label value is
		// on no run's label, and selected here instead.
		if len(validation.IsValidLabelValue(q.Name)) == 0 {
			query.Set("labelSelector", runsv1alpha1.LabelObject+"="+q.Name)
		}
	}
	var list runsv1alpha1.RunList
	if _, err := r.get(ctx, r.path(q.Namespace, "runs", query), &list); err != nil {
		return nil, fmt.Errorf("listing runs through %s: %w", r, err)
	}
	page := &archive.Page{Next: list.Continue}
	for i := range list.Items {
		run := runOf(&list.Items[i])
		if q.Name != "" && run.Name != q.Name {
			continue
		}
		page.Runs = append(page.Runs, *run)
	}
	return page, nil
}

// Get returns run id, or archive.ErrNotFound.
func (r *Reader) Get(ctx context.Context, id string) (*archive.Run, error) {
	obj, err := r.run(ctx, id)
	if err != nil {
		return nil, err
	}
	return runOf(obj), nil
}

// run finds run id in every namespace: its namespace is its object's,
// which its id does not say.
func (r *Reader) run(ctx context.Context, id string) (*runsv1alpha1.Run, error) {
	if !archive.ValidID(id) {
		return nil, archive.ErrNotFound
	}
	var list runsv1alpha1.RunList
	if _, err := r.get(ctx, r.path("", "runs", selectors([][2]string{{"metadata.name", id}}, 0, "")), &list); err != nil {
		return nil, fmt.Errorf("reading run %s through %s: %w", id, r, err)
	}
	if len(list.Items) == 0 {
		return nil, archive.ErrNotFound
	}
	return &list.Items[0], nil
}

// Logs returns run id's log from offset, as the runs API serves it:
// cleaned of control sequences, a long log's cut marked.
func (r *Reader) Logs(ctx context.Context, id string, offset int64) (*archive.Log, error) {
	obj, err := r.run(ctx, id)
	if err != nil {
		return nil, err
	}
	u := r.base + "/namespaces/" + url.PathEscape(obj.Namespace) + "/runs/" + url.PathEscape(id) + "/log"
	body, _, err := r.read(ctx, u, "text/plain")
	if err != nil {
		return nil, fmt.Errorf("reading the log of run %s through %s: %w", id, r, err)
	}
	offset = min(max(offset, 0), int64(len(body)))
	return &archive.Log{Data: body[offset:], Next: int64(len(body)), Truncated: obj.Status.LogTruncated}, nil
}

// Counts is not served.
func (r *Reader) Counts(context.Context, time.Time) (map[string]archive.Counts, error) {
	return nil, fmt.Errorf("counts of runs by operator: %w", ErrNotServed)
}

// HandlerRecords is not served.
func (r *Reader) HandlerRecords(context.Context, string) ([]archive.HandlerRecord, error) {
	return nil, fmt.Errorf("the handler records of an operator: %w; read the archive with --archive", ErrNotServed)
}

// ListDeliveries returns the deliveries q selects, newest first, without
// payloads or headers.
func (r *Reader) ListDeliveries(ctx context.Context, q archive.DeliveryQuery) (*archive.DeliveryPage, error) {
	switch {
	case q.Refused:
		return nil, fmt.Errorf("selecting the deliveries turned away (--refused): %w; select --outcome Refused, or read the archive with --archive", ErrNotServed)
	case !q.Until.IsZero():
		return nil, fmt.Errorf("selecting deliveries received before a time: %w; read the archive with --archive", ErrNotServed)
	}
	terms := [][2]string{{"spec.operator", q.Operator}, {"spec.source", q.Source}, {"status.outcome", string(q.Outcome)}}
	if !q.Since.IsZero() {
		terms = append(terms, [2]string{"status.receivedSince", q.Since.UTC().Format(time.RFC3339Nano)})
	}
	var list runsv1alpha1.DeliveryList
	if _, err := r.get(ctx, r.path("", "deliveries", selectors(terms, q.Limit, q.Cursor)), &list); err != nil {
		return nil, fmt.Errorf("listing webhook deliveries through %s: %w", r, err)
	}
	page := &archive.DeliveryPage{Next: list.Continue}
	for i := range list.Items {
		page.Deliveries = append(page.Deliveries, *deliveryOf(&list.Items[i]))
	}
	return page, nil
}

// GetDelivery is not served: the runs API keeps a delivery's payload and
// headers to the archive.
func (r *Reader) GetDelivery(context.Context, string) (*archive.Delivery, error) {
	return nil, fmt.Errorf("a delivery's payload and headers: %w (kept to the archive); read it with --archive, or list deliveries with opkit events", ErrNotServed)
}

// IsNotServed reports whether err is something the runs API does not
// serve.
func IsNotServed(err error) bool { return errors.Is(err, ErrNotServed) }

func runOf(o *runsv1alpha1.Run) *archive.Run {
	run := &archive.Run{
		ID: o.Name, Operator: o.Spec.Operator, Handler: o.Spec.Handler, Action: o.Spec.Action, Trigger: o.Spec.Trigger,
		APIVersion: o.Spec.Object.APIVersion, Kind: o.Spec.Object.Kind, Namespace: o.Spec.Object.Namespace, Name: o.Spec.Object.Name, UID: o.Spec.Object.UID,
		Generation: o.Spec.Generation, Key: o.Spec.Key, Attempt: o.Spec.Attempt, Actor: o.Spec.Actor, RerunOf: o.Spec.RerunOf, Reason: o.Spec.Reason,
		Outcome: archive.Outcome(o.Status.Outcome), StartedAt: o.Status.StartedAt.Time, Error: o.Status.Error,
		Runner: o.Status.Runner, LogBytes: o.Status.LogBytes, LogTruncated: o.Status.LogTruncated,
	}
	if t := o.Status.FinishedAt; t != nil {
		run.FinishedAt = t.Time
	}
	if t := o.Status.NextRetryAt; t != nil {
		run.NextRetryAt = t.Time
	}
	return run
}

func deliveryOf(o *runsv1alpha1.Delivery) *archive.Delivery {
	d := &archive.Delivery{
		ID: o.Name, Operator: o.Spec.Operator, Source: o.Spec.Source, DeliveryID: o.Spec.DeliveryID, Event: o.Spec.Event,
		PayloadBytes: o.Spec.PayloadBytes, PayloadTruncated: o.Spec.PayloadTruncated,
		RedeliveryOf: o.Spec.RedeliveryOf, RedeliveredBy: o.Spec.RedeliveredBy, RedeliveryReason: o.Spec.RedeliveryReason,
		Outcome: archive.DeliveryOutcome(o.Status.Outcome), Reason: o.Status.Reason, ReceivedAt: o.Status.ReceivedAt.Time,
		Runs: o.Status.Runs, Objects: o.Status.Objects,
	}
	if t := o.Status.HandledAt; t != nil {
		d.HandledAt = t.Time
	}
	return d
}

var _ archive.Reader = (*Reader)(nil)
