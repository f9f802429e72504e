package archive

import (
	"context"
	"time"
)

// PruneEvery is how often KeepPruned applies the retention.
const PruneEvery = time.Hour

// KeepPruned applies keep to a now and every PruneEvery until ctx ends,
// telling report what each pass removed, or why it failed. A zero keep
// prunes nothing.
func KeepPruned(ctx context.Context, a Recorder, keep Retention, report func(n int, err error)) {
	if keep == (Retention{}) {
		return
	}
	for {
		report(a.Prune(ctx, keep))
		select {
		case <-ctx.Done():
			return
		case <-time.After(PruneEvery):
		}
	}
}
