package engine

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/opkit-dev/opkit/api/v1alpha1"
	"github.com/opkit-dev/opkit/internal/migrate"
)

// migrations are the storage migrations the engine runs, by CRD name.
type migrations struct {
	mu      sync.Mutex
	running map[string]bool
	wg      sync.WaitGroup
}

// migrateStorage starts, in the background, the migration of a CRD just
// applied (Options.MigrateStorage) when its status.storedVersions holds
// more than its storage version or a migration of it was interrupted, and
// none runs already. Its lines and its summary go to the engine's log;
// it ends with the engine (its progress saved: the next start resumes it).
// The operator's controller starts meanwhile: a migration's writes are
// updates like any other, which its reconciles see as no change.
func (e *Engine) migrateStorage(ctx context.Context, operator, name string) error {
	var crd apiextensionsv1.CustomResourceDefinition
	if err := e.mgr.GetAPIReader().Get(ctx, client.ObjectKey{Name: name}, &crd); err != nil {
		return fmt.Errorf("reading CRD %s for its storage migration: %w", name, err)
	}
	storage := ""
	for _, v := range crd.Spec.Versions {
		if v.Storage {
			storage = v.Name
		}
	}
	_, interrupted := crd.Annotations[v1alpha1.MigrationAnnotation]
	if !interrupted && slices.Equal(crd.Status.StoredVersions, []string{storage}) {
		return nil
	}
	m := &e.migrations
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.running[name] {
		return nil
	}
	if m.running == nil {
		m.running = map[string]bool{}
	}
	m.running[name] = true
	say := func(line string) {
		if e.opts.Notice != nil {
			e.opts.Notice(line)
		} else {
			e.mgr.GetLogger().Info(line, "operator", operator, "crd", name)
		}
	}
	ctx = e.ctx // the engine's: a migration outlives the Apply that started it
	m.wg.Go(func() {
		defer func() {
			m.mu.Lock()
			delete(m.running, name)
			m.mu.Unlock()
		}()
		say(fmt.Sprintf("operator %s: storage migration of CRD %s to %s (storedVersions %v), in the background", operator, name, storage, crd.Status.StoredVersions))
		rep, err := migrate.CRD(ctx, name, migrate.Options{
			Config: e.opts.Config, QPS: e.opts.MigrateQPS,
			Log: func(line string) { say("storage migration: " + line) },
		})
		if rep != nil && !rep.UpToDate && rep.Storage != "" {
			for _, line := range rep.Lines() {
				say("storage migration: " + line)
			}
		}
		switch {
		case err != nil && errors.Is(err, context.Canceled) && ctx.Err() != nil:
			say(fmt.Sprintf("storage migration of %s stopped with the engine; its next start resumes it", name))
		case err != nil:
			say(fmt.Sprintf("storage migration of %s failed: %v; the operator's next start tries again, or run: opkit migrate %s", name, err, name))
		}
	})
	return nil
}
