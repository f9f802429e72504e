// Package migrate rewrites the stored objects of a CustomResourceDefinition
// at its storage version, then drops the older versions from the CRD's
// status.storedVersions, so that a version no object is stored in any more
// can be removed from the CRD.
//
// # What is rewritten, and how
//
// Every object of the CRD, in every namespace, is listed in pages (at the
// storage version when it is served, else at another served version: the
// API server converts either way) and written back as read, with its
// resourceVersion: a no-op update. The API server decodes the object,
// encodes it at the storage version and writes it to etcd unless the
// bytes it would write are the bytes already stored (its store skips an
// unchanged write: k8s.io/apiserver's etcd3 GuaranteedUpdate). An object
// stored at an older version is encoded differently (its apiVersion at
// least), so it is written: it comes back with a new resourceVersion and
// is counted rewritten. One already stored at the storage version comes
// back unchanged and is counted already current. A conflict means someone
// wrote the object after it was listed, which stored it at the storage
// version: it is counted already current too, as the in-tree
// StorageVersionMigration controller does. An object deleted in between is
// counted gone. Any other refusal (a validation or an admission webhook
// that denies the write) is counted failed, with the object and the
// reason; errors worth retrying (429, 5xx, timeouts, a lost connection)
// are retried five times with back-off first. A refusal for lack of
// rights (401, 403) stops the migration: every object would fail alike.
//
// Writes go through the API server only, never to etcd: the migration is
// the same whatever converts between versions (today conversion None,
// which rewrites apiVersion alone; a conversion webhook later).
//
// # Order and guarantees
//
//  1. The CRD is read; its storage version is the target. Nothing is
//     done when status.storedVersions already holds that version alone.
//  2. The migration waits until the API server's discovery names the
//     storage version's hash for the resource (as
//     kube-storage-version-migrator does), so that no rewrite is encoded
//     at the version a server used before the CRD changed.
//  3. Objects are rewritten in key order (namespace/name), page by page.
//  4. Only when every object was rewritten, already current or gone, the
//     CRD's status.storedVersions is set to [storage version] through its
//     status subresource, guarded by the CRD's resourceVersion, after
//     checking that the storage version is still the one migrated to and
//     that no version was added to storedVersions meanwhile. If any
//     object failed, storedVersions is left as it was, and the error says
//     which objects and why (ErrObjectsFailed).
//
// # Resumable
//
// Progress — the storage version, storedVersions at the start, the
// continue token of the page in flight, the key of the last object done
// and the counts — is saved in the CRD's annotation
// v1alpha1.MigrationAnnotation after each page, every SaveEvery objects
// and when the migration is interrupted (its context ends). The next
// migration of the CRD resumes from there: it lists that page again from
// the same snapshot and skips the objects up to the last one done; the
// report's counts are the whole migration's. After a crash (no save on
// the way out) at most SaveEvery objects are written again, which the API
// server skips (already current). A continue token that has expired (the
// API server compacted its snapshot) is replaced by the one the API
// server offers, or the list starts over, skipping by key. A change of the
// storage version since starts the migration over. The annotation is
// removed when the migration ends, done or failed.
//
// # Rate
//
// Every list and write of an object waits its turn: at most Options.QPS
// requests a second, evenly spaced (no burst). The few reads and writes of
// the CRD itself are not counted.
//
// # Caveats
//
// With several API servers, step 2 learns only what the server that
// answers discovery serves; a server that has not yet seen the CRD change
// may still write objects at the old version until it does (seconds).
// Two migrations of one CRD at once are safe (each object is written at
// most twice, storedVersions is guarded) but share one progress record.
package migrate

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// DefaultQPS is the default rate of a migration's requests: each object's
// rewrite and each page's list.
const DefaultQPS = 50

// FieldManager names the migration's writes.
const FieldManager = "opkit-migrate"

// ErrObjectsFailed is returned when some objects could not be rewritten:
// status.storedVersions is left as it was.
var ErrObjectsFailed = errors.New("some objects could not be rewritten")

// Options configures [CRD].
type Options struct {
	// Config is the client configuration. Required. Its own rate limit is
	// replaced by QPS.
	Config *rest.Config
	// QPS bounds the lists and writes of objects, per second, evenly
	// spaced. Defaults to DefaultQPS (50).
	QPS float64
	// PageSize is the number of objects listed at once. Defaults to 500.
	PageSize int64
	// SaveEvery is the number of objects after which the progress is
	// saved on the CRD (also after each page, and when interrupted).
	// Defaults to 100.
	SaveEvery int
	// DryRun lists and counts the objects and writes nothing: no object,
	// no progress, no storedVersions. Defaults to false.
	DryRun bool
	// Progress, when set, is called after each object with what became of
	// it and the counts so far; it runs on the migration's goroutine, so
	// it must not block. Defaults to none.
	Progress func(Progress)
	// Log, when set, receives progress lines: the start or the
	// resumption, and after a page the counts so far, at most every 10
	// seconds. Defaults to none.
	Log func(line string)
	// Clock spaces the requests. Defaults to the real clock.
	Clock clock.Clock
}

// Outcome is what became of one object.
type Outcome string

// Outcomes.
const (
	// Rewritten: the API server wrote the object at the storage version.
	Rewritten Outcome = "rewritten"
	// Current: the object was already stored at the storage version, or
	// was written by someone else after it was listed.
	Current Outcome = "current"
	// Gone: the object was deleted after it was listed.
	Gone Outcome = "gone"
	// Failed: the API server refused the write (see Report.Failures).
	Failed Outcome = "failed"
)

// Counts are the objects of a migration by outcome.
type Counts struct {
	Rewritten int `json:"rewritten"`
	Current   int `json:"current"`
	Gone      int `json:"gone"`
	Failed    int `json:"failed"`
}

// Total is the number of objects done.
func (c Counts) Total() int { return c.Rewritten + c.Current + c.Gone + c.Failed }

func (c *Counts) add(o Outcome) {
	switch o {
	case Rewritten:
		c.Rewritten++
	case Current:
		c.Current++
	case Gone:
		c.Gone++
	case Failed:
		c.Failed++
	}
}

func (c Counts) String() string {
	return fmt.Sprintf("%d rewritten, %d already current, %d gone, %d failed", c.Rewritten, c.Current, c.Gone, c.Failed)
}

// Progress is passed to Options.Progress after each object.
type Progress struct {
	// Object is namespace/name (name alone when cluster-scoped).
	Object  string
	Outcome Outcome
	// Counts are the whole migration's so far, resumed runs included.
	Counts Counts
}

// Failure is an object the API server would not rewrite.
type Failure struct {
	Object string `json:"object"`
	Error  string `json:"error"`
}

// maxFailures bounds Report.Failures.
const maxFailures = 20

// Report says what a migration did.
type Report struct {
	// CRD is the CRD's name, plural.group.
	CRD string
	// Storage is the storage version the objects were rewritten at.
	Storage string
	// StoredBefore and StoredAfter are status.storedVersions before and
	// after; StoredAfter equals StoredBefore unless the migration ended.
	StoredBefore, StoredAfter []string
	// UpToDate: storedVersions held the storage version alone and no
	// migration was in flight; nothing was done.
	UpToDate bool
	// Counts are the whole migration's, the runs it resumed included.
	Counts Counts
	// Stopped: the run ended before every object was done (interrupted,
	// or an error); its progress is saved, and the next run resumes it.
	Stopped bool
	// Resumed are the counts of the earlier runs this one resumed, or nil.
	Resumed *Counts
	// Failures are the first objects that failed (at most 20), in order.
	Failures []Failure
	// DryRun: Listed is the number of objects found; nothing was written.
	DryRun bool
	Listed int
	// Requests is the number of lists and writes of objects this run made.
	Requests int
	// Took is how long this run took.
	Took time.Duration
}

// Lines is the report in a few lines, for a terminal or a log.
func (r *Report) Lines() []string {
	switch {
	case r.UpToDate:
		return []string{fmt.Sprintf("%s: every object is stored at %s already (storedVersions %v): nothing to migrate", r.CRD, r.Storage, r.StoredBefore)}
	case r.DryRun:
		return []string{
			fmt.Sprintf("%s: dry run: %d objects would be rewritten at %s (those stored at it already are skipped by the API server)", r.CRD, r.Listed, r.Storage),
			fmt.Sprintf("storedVersions: %v, would become [%s]", r.StoredBefore, r.Storage),
		}
	}
	head := fmt.Sprintf("%s: %d objects migrated to %s: %s", r.CRD, r.Counts.Total(), r.Storage, r.Counts)
	if r.Stopped {
		head = fmt.Sprintf("%s: stopped after %d objects migrated to %s: %s", r.CRD, r.Counts.Total(), r.Storage, r.Counts)
	}
	if r.Resumed != nil {
		head += fmt.Sprintf(" (resumed after %d)", r.Resumed.Total())
	}
	lines := []string{head + " in " + r.Took.Round(100*time.Millisecond).String()}
	for _, f := range r.Failures {
		lines = append(lines, fmt.Sprintf("  failed: %s: %s", f.Object, f.Error))
	}
	if more := r.Counts.Failed - len(r.Failures); more > 0 && r.Resumed == nil {
		lines = append(lines, fmt.Sprintf("  and %d more", more))
	}
	if slices.Equal(r.StoredBefore, r.StoredAfter) {
		lines = append(lines, fmt.Sprintf("storedVersions: %v (unchanged)", r.StoredBefore))
	} else {
		lines = append(lines, fmt.Sprintf("storedVersions: %v -> %v", r.StoredBefore, r.StoredAfter))
	}
	return lines
}

// String is Lines joined.
func (r *Report) String() string { return strings.Join(r.Lines(), "\n") }

// CRD migrates the objects of the CRD named name (plural.group) to its
// storage version, then sets its status.storedVersions to that version
// alone, as the package doc says. The report is returned with any error:
// ErrObjectsFailed when some objects failed, the context's error (wrapped)
// when it ended first (the progress saved: run it again to resume).
func CRD(ctx context.Context, name string, opts Options) (*Report, error) {
	m, err := newMigration(name, opts)
	if err != nil {
		return nil, err
	}
	return m.run(ctx)
}

// migration is one run of CRD.
type migration struct {
	name    string
	opts    Options
	crds    client.Client
	objects dynamic.Interface
	disc    discovery.DiscoveryInterface
	limit   *limiter
	report  *Report
	started time.Time
	// lastLog is when a progress line was last written.
	lastLog time.Time
}

func newMigration(name string, opts Options) (*migration, error) {
	if opts.Config == nil {
		return nil, errors.New("migrate: Options.Config is required")
	}
	if opts.QPS <= 0 {
		opts.QPS = DefaultQPS
	}
	if opts.PageSize <= 0 {
		opts.PageSize = 500
	}
	if opts.SaveEvery <= 0 {
		opts.SaveEvery = 100
	}
	if opts.Clock == nil {
		opts.Clock = clock.RealClock{}
	}
	if opts.Log == nil {
		opts.Log = func(string) {}
	}
	cfg := rest.CopyConfig(opts.Config)
	cfg.QPS, cfg.Burst, cfg.RateLimiter = -1, 0, nil // the migration's own limiter spaces its requests
	if cfg.UserAgent == "" {
		cfg.UserAgent = FieldManager
	}
	scheme := runtime.NewScheme()
	if err := apiextensionsv1.AddToScheme(scheme); err != nil {
		return nil, err
	}
	crds, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		return nil, err
	}
	objects, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	disc, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		return nil, err
	}
	return &migration{name: name, opts: opts, crds: crds, objects: objects, disc: disc,
		limit: newLimiter(opts.QPS, opts.Clock), report: &Report{CRD: name, DryRun: opts.DryRun}}, nil
}

func (m *migration) run(ctx context.Context) (*Report, error) {
	m.started = time.Now()
	defer func() { m.report.Took = time.Since(m.started) }()
	r := m.report
	crd, storage, served, err := m.getCRD(ctx)
	if err != nil {
		return r, err
	}
	r.Storage = storage
	r.StoredBefore = slices.Clone(crd.Status.StoredVersions)
	r.StoredAfter = r.StoredBefore
	p := loadProgress(crd, m.opts.Log)
	if p != nil && p.Storage != storage {
		m.opts.Log(fmt.Sprintf("%s: the storage version is %s now, not %s as when the interrupted migration started: starting over", m.name, storage, p.Storage))
		p = nil
	}
	if p == nil && slices.Equal(crd.Status.StoredVersions, []string{storage}) {
		r.UpToDate = true
		return r, nil
	}
	res := resourceOf(crd, served)
	if m.opts.DryRun {
		return r, m.count(ctx, res)
	}
	if err := m.waitServed(ctx, crd, storage, served); err != nil {
		return r, err
	}
	if p == nil {
		p = &progress{Storage: storage, StoredBefore: slices.Clone(crd.Status.StoredVersions), Started: time.Now().UTC()}
		m.opts.Log(fmt.Sprintf("%s: migrating every object to %s (storedVersions %v)", m.name, storage, crd.Status.StoredVersions))
	} else {
		resumed := p.Counts
		r.Resumed = &resumed
		m.opts.Log(fmt.Sprintf("%s: resuming the migration to %s after %d objects (%s)", m.name, storage, resumed.Total(), resumed))
	}
	r.Counts = p.Counts
	if !p.Listed {
		if err := m.rewrite(ctx, res, p); err != nil {
			r.Stopped = true
			if serr := m.save(context.WithoutCancel(ctx), p); serr != nil {
				err = errors.Join(err, fmt.Errorf("saving the progress: %w", serr))
			}
			return r, err
		}
	}
	if r.Counts.Failed > 0 {
		if err := m.clear(ctx); err != nil {
			return r, err
		}
		return r, fmt.Errorf("%s: %d objects could not be rewritten at %s, so status.storedVersions stays %v: %w",
			m.name, r.Counts.Failed, storage, r.StoredBefore, ErrObjectsFailed)
	}
	p.Listed = true
	if err := m.save(ctx, p); err != nil {
		return r, err
	}
	after, err := m.setStoredVersions(ctx, p)
	if err != nil {
		return r, err
	}
	r.StoredAfter = after
	return r, m.clear(ctx)
}

// getCRD reads the CRD and its versions (see versions).
func (m *migration) getCRD(ctx context.Context) (crd *apiextensionsv1.CustomResourceDefinition, storage, served string, err error) {
	crd = &apiextensionsv1.CustomResourceDefinition{}
	if err := m.crds.Get(ctx, client.ObjectKey{Name: m.name}, crd); err != nil {
		return nil, "", "", fmt.Errorf("reading CRD %s: %w", m.name, err)
	}
	storage, served, err = versions(crd)
	return crd, storage, served, err
}

// versions returns the CRD's storage version and the version objects are
// read and written at: the storage version when served, else the first
// served one.
func versions(crd *apiextensionsv1.CustomResourceDefinition) (storage, served string, err error) {
	for _, v := range crd.Spec.Versions {
		if v.Storage {
			storage = v.Name
		}
	}
	for _, v := range crd.Spec.Versions {
		if v.Served && (served == "" || v.Name == storage) {
			served = v.Name
		}
	}
	switch {
	case storage == "":
		return "", "", fmt.Errorf("CRD %s has no storage version", crd.Name)
	case served == "":
		return "", "", fmt.Errorf("CRD %s serves no version: its objects cannot be read to be rewritten; serve one (served: true) first", crd.Name)
	}
	return storage, served, nil
}
