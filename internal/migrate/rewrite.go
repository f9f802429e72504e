package migrate

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/opkit-dev/opkit/api/v1alpha1"
)

// progress is what MigrationAnnotation holds.
type progress struct {
	// Storage is the version objects are rewritten at.
	Storage string `json:"storage"`
	// StoredBefore is status.storedVersions when the migration started.
	StoredBefore []string `json:"storedBefore"`
	// Continue is the continue token of the page in flight, "" for the
	// first page.
	Continue string `json:"continue,omitempty"`
	// After is the key (namespace/name) of the last object done in that
	// page; "" when none is.
	After string `json:"after,omitempty"`
	// Listed: every object is done; storedVersions is left to set.
	Listed  bool      `json:"listed,omitempty"`
	Counts  Counts    `json:"counts"`
	Started time.Time `json:"started"`
}

// loadProgress reads the CRD's progress annotation; one that cannot be
// read is said and ignored (the migration starts over, which is safe).
func loadProgress(crd *apiextensionsv1.CustomResourceDefinition, log func(string)) *progress {
	raw, ok := crd.Annotations[v1alpha1.MigrationAnnotation]
	if !ok {
		return nil
	}
	p := &progress{}
	if err := json.Unmarshal([]byte(raw), p); err != nil || p.Storage == "" {
		log(fmt.Sprintf("%s: the annotation %s does not hold a migration's progress (%v): starting over", crd.Name, v1alpha1.MigrationAnnotation, err))
		return nil
	}
	return p
}

// save writes p in the CRD's annotation (a merge patch of that key alone).
func (m *migration) save(ctx context.Context, p *progress) error {
	value, err := json.Marshal(p)
	if err != nil {
		return err
	}
	return m.patchAnnotation(ctx, string(value))
}

// clear removes the progress annotation.
func (m *migration) clear(ctx context.Context) error {
	return m.patchAnnotation(ctx, nil)
}

func (m *migration) patchAnnotation(ctx context.Context, value any) error {
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]any{v1alpha1.MigrationAnnotation: value}}})
	if err != nil {
		return err
	}
	crd := &apiextensionsv1.CustomResourceDefinition{ObjectMeta: metav1.ObjectMeta{Name: m.name}}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := m.crds.Patch(ctx, crd, client.RawPatch(types.MergePatchType, patch), client.FieldOwner(FieldManager)); err != nil {
		return fmt.Errorf("recording the migration's progress on CRD %s: %w", m.name, err)
	}
	return nil
}

// resourceOf is the client of the CRD's objects at version.
func resourceOf(crd *apiextensionsv1.CustomResourceDefinition, version string) resource {
	gvr := schema.GroupVersionResource{Group: crd.Spec.Group, Version: version, Resource: crd.Spec.Names.Plural}
	return resource{gvr: gvr, kind: crd.Spec.Names.Kind, namespaced: crd.Spec.Scope == apiextensionsv1.NamespaceScoped}
}

type resource struct {
	gvr        schema.GroupVersionResource
	kind       string
	namespaced bool
}

func (r resource) client(c dynamic.Interface, namespace string) dynamic.ResourceInterface {
	if r.namespaced {
		return c.Resource(r.gvr).Namespace(namespace)
	}
	return c.Resource(r.gvr)
}

// key is an object's place in the list's order, which is etcd's.
func key(obj *unstructured.Unstructured) string {
	if ns := obj.GetNamespace(); ns != "" {
		return ns + "/" + obj.GetName()
	}
	return obj.GetName()
}

// StorageVersionHash is the hash discovery gives a resource stored at
// group/version as kind: the first 8 bytes of the SHA-256 of
// "group/version/kind", in base64, as the API server computes it
// (k8s.io/apiserver's discovery.StorageVersionHash, whose package would
// bring the API server's dependencies with it).
func StorageVersionHash(group, version, kind string) string {
	sum := sha256.Sum256([]byte(group + "/" + version + "/" + kind))
	return base64.StdEncoding.EncodeToString(sum[:8])
}

// waitServed waits until discovery names the storage version's hash for
// the resource: the API server then encodes at that version.
func (m *migration) waitServed(ctx context.Context, crd *apiextensionsv1.CustomResourceDefinition, storage, served string) error {
	want := StorageVersionHash(crd.Spec.Group, storage, crd.Spec.Names.Kind)
	var got string
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
		list, err := m.disc.ServerResourcesForGroupVersion(crd.Spec.Group + "/" + served)
		if err != nil {
			return false, nil // not served yet
		}
		for _, r := range list.APIResources {
			if r.Name == crd.Spec.Names.Plural {
				got = r.StorageVersionHash
				// An API server that publishes no hash cannot be asked.
				return got == want || got == "", nil
			}
		}
		return false, nil
	})
	if err != nil && ctx.Err() == nil {
		return fmt.Errorf("%s: the API server does not say it stores at %s yet (its storage version hash is %q, want %q): try again once the CRD change is served", m.name, storage, got, want)
	}
	return err
}

// count lists every object, for a dry run.
func (m *migration) count(ctx context.Context, res resource) error {
	token := ""
	for {
		if err := m.limit.wait(ctx); err != nil {
			return err
		}
		m.report.Requests++
		list, err := res.client(m.objects, "").List(ctx, metav1.ListOptions{Limit: m.opts.PageSize, Continue: token})
		if err != nil {
			return fmt.Errorf("listing %s: %w", res.gvr.GroupResource(), err)
		}
		m.report.Listed += len(list.Items)
		if token = list.GetContinue(); token == "" {
			return nil
		}
	}
}

// rewrite rewrites every object from where p stopped, saving p as it goes.
func (m *migration) rewrite(ctx context.Context, res resource, p *progress) error {
	sinceSave := 0
	for {
		list, err := m.list(ctx, res, p)
		if err != nil {
			return err
		}
		for i := range list.Items {
			obj := &list.Items[i]
			k := key(obj)
			if p.After != "" && k <= p.After {
				continue // done before this run stopped
			}
			outcome, err := m.rewriteOne(ctx, res, obj)
			if err != nil {
				return err
			}
			p.Counts.add(outcome)
			p.After = k
			m.report.Counts = p.Counts
			if m.opts.Progress != nil {
				m.opts.Progress(Progress{Object: k, Outcome: outcome, Counts: p.Counts})
			}
			if err := ctx.Err(); err != nil {
				return m.interrupted(err) // run saves p
			}
			if sinceSave++; sinceSave >= m.opts.SaveEvery {
				if err := m.save(ctx, p); err != nil {
					return err
				}
				sinceSave = 0
			}
		}
		next := list.GetContinue()
		m.logPage(list, next == "")
		if next == "" {
			return nil
		}
		p.Continue, p.After = next, ""
		if err := m.save(ctx, p); err != nil {
			return err
		}
		sinceSave = 0
	}
}

func (m *migration) interrupted(err error) error {
	return fmt.Errorf("%s: interrupted after %d objects; the progress is saved on the CRD: run the migration again to resume: %w", m.name, m.report.Counts.Total(), err)
}

// list lists the page p is at. An expired continue token is replaced by
// the one the API server offers, else the list starts over (p.After still
// skips the objects done).
func (m *migration) list(ctx context.Context, res resource, p *progress) (*unstructured.UnstructuredList, error) {
	for {
		if err := m.limit.wait(ctx); err != nil {
			return nil, m.interrupted(err)
		}
		m.report.Requests++
		list, err := res.client(m.objects, "").List(ctx, metav1.ListOptions{Limit: m.opts.PageSize, Continue: p.Continue})
		switch {
		case err == nil:
			return list, nil
		case ctx.Err() != nil:
			return nil, m.interrupted(ctx.Err())
		case apierrors.IsResourceExpired(err) && p.Continue != "":
			token := ""
			var status apierrors.APIStatus
			if errors.As(err, &status) {
				token = status.Status().Continue
			}
			m.opts.Log(fmt.Sprintf("%s: the list's snapshot expired; going on from a newer one", m.name))
			p.Continue = token
			if token == "" {
				p.After = "" // a fresh list: already-current objects are skipped by the API server
			}
		case retriable(err):
			if err := m.backOff(ctx, err, 0); err != nil {
				return nil, err
			}
		default:
			return nil, fmt.Errorf("listing %s: %w", res.gvr.GroupResource(), err)
		}
	}
}

// attempts bounds the tries of a write the API server refuses for now.
const attempts = 5

// rewriteOne writes obj back as read and says what became of it; an
// error stops the migration.
func (m *migration) rewriteOne(ctx context.Context, res resource, obj *unstructured.Unstructured) (Outcome, error) {
	rv := obj.GetResourceVersion()
	for attempt := 0; ; attempt++ {
		if err := m.limit.wait(ctx); err != nil {
			return "", m.interrupted(err)
		}
		m.report.Requests++
		out, err := res.client(m.objects, obj.GetNamespace()).Update(ctx, obj, metav1.UpdateOptions{FieldManager: FieldManager})
		switch {
		case err == nil && out.GetResourceVersion() == rv:
			return Current, nil // the API server found nothing to write
		case err == nil:
			return Rewritten, nil
		case apierrors.IsConflict(err):
			return Current, nil // written since it was listed: at the storage version
		case apierrors.IsNotFound(err):
			return Gone, nil
		case ctx.Err() != nil:
			return "", m.interrupted(ctx.Err())
		case apierrors.IsForbidden(err) || apierrors.IsUnauthorized(err):
			return "", fmt.Errorf("%s: not allowed to rewrite %s %s (the migration needs list and update on %s): %w",
				m.name, res.kind, key(obj), res.gvr.GroupResource(), err)
		case retriable(err) && attempt+1 < attempts:
			if err := m.backOff(ctx, err, attempt); err != nil {
				return "", err
			}
		default:
			if len(m.report.Failures) < maxFailures {
				m.report.Failures = append(m.report.Failures, Failure{Object: key(obj), Error: err.Error()})
			}
			return Failed, nil
		}
	}
}

// retriable says whether an error may go away by itself.
func retriable(err error) bool {
	return apierrors.IsTooManyRequests(err) || apierrors.IsServerTimeout(err) || apierrors.IsTimeout(err) ||
		apierrors.IsServiceUnavailable(err) || apierrors.IsInternalError(err) || apierrors.IsUnexpectedServerError(err) ||
		!isAPIStatus(err) // a lost connection, a reset, an EOF
}

func isAPIStatus(err error) bool {
	var status apierrors.APIStatus
	return errors.As(err, &status)
}

// backOff waits before another try: what the API server asks for, else
// 1s, 2s, 4s...
func (m *migration) backOff(ctx context.Context, err error, attempt int) error {
	delay := time.Second << attempt
	if seconds, ok := apierrors.SuggestsClientDelay(err); ok {
		delay = time.Duration(seconds) * time.Second
	}
	m.opts.Log(fmt.Sprintf("%s: %v; trying again in %s", m.name, err, delay))
	select {
	case <-ctx.Done():
		return m.interrupted(ctx.Err())
	case <-m.opts.Clock.After(delay):
		return nil
	}
}

// logPage writes a progress line after a page, at most every 10 seconds
// unless it is the last.
func (m *migration) logPage(list *unstructured.UnstructuredList, last bool) {
	now := time.Now()
	if last || now.Sub(m.lastLog) < 10*time.Second {
		return
	}
	m.lastLog = now
	line := fmt.Sprintf("%s: %d objects done (%s)", m.name, m.report.Counts.Total(), m.report.Counts)
	if rest := list.GetRemainingItemCount(); rest != nil {
		line += fmt.Sprintf(", about %d to go", *rest)
	}
	m.opts.Log(line)
}

// setStoredVersions sets the CRD's status.storedVersions to [p.Storage],
// guarded by its resourceVersion, once it checked that the storage
// version is still p.Storage and that no version was stored meanwhile.
func (m *migration) setStoredVersions(ctx context.Context, p *progress) ([]string, error) {
	for {
		crd, storage, _, err := m.getCRD(ctx)
		if err != nil {
			return nil, err
		}
		stored := crd.Status.StoredVersions
		if storage != p.Storage {
			return stored, fmt.Errorf("%s: the storage version changed from %s to %s during the migration; storedVersions stays %v: run the migration again", m.name, p.Storage, storage, stored)
		}
		for _, v := range stored {
			if v != p.Storage && !slices.Contains(p.StoredBefore, v) {
				return stored, fmt.Errorf("%s: version %s was added to storedVersions during the migration, so objects may be stored at it; storedVersions stays %v: run the migration again", m.name, v, stored)
			}
		}
		if slices.Equal(stored, []string{p.Storage}) {
			return stored, nil
		}
		crd.Status.StoredVersions = []string{p.Storage}
		err = m.crds.Status().Update(ctx, crd, client.FieldOwner(FieldManager))
		switch {
		case err == nil:
			return crd.Status.StoredVersions, nil
		case apierrors.IsConflict(err):
			continue // the CRD changed: check again
		default:
			return stored, fmt.Errorf("setting status.storedVersions of CRD %s to [%s]: %w", m.name, p.Storage, err)
		}
	}
}
