package migrate_test

import (
	"fmt"
	"time"

	"github.com/opkit-dev/opkit/internal/migrate"
)

// A migration's report, as opkit migrate prints it: one run that resumed
// an interrupted one, and one that met an object an admission policy
// refused to let be written.
func ExampleReport_Lines() {
	done := &migrate.Report{
		CRD: "notes.example.com", Storage: "v2", StoredBefore: []string{"v1", "v2"}, StoredAfter: []string{"v2"},
		Counts: migrate.Counts{Rewritten: 28, Current: 2}, Resumed: &migrate.Counts{Rewritten: 13}, Took: 1200 * time.Millisecond,
	}
	fmt.Println(done)
	failed := &migrate.Report{
		CRD: "notes.example.com", Storage: "v2", StoredBefore: []string{"v1", "v2"}, StoredAfter: []string{"v1", "v2"},
		Counts:   migrate.Counts{Rewritten: 5, Failed: 1},
		Failures: []migrate.Failure{{Object: "default/stuck", Error: "denied request: stuck notes stay as they are"}},
		Took:     300 * time.Millisecond,
	}
	fmt.Println(failed)
	// Output:
	// notes.example.com: 30 objects migrated to v2: 28 rewritten, 2 already current, 0 gone, 0 failed (resumed after 13) in 1.2s
	// storedVersions: [v1 v2] -> [v2]
	// notes.example.com: 6 objects migrated to v2: 5 rewritten, 0 already current, 0 gone, 1 failed in 300ms
	//   failed: default/stuck: denied request: stuck notes stay as they are
	// storedVersions: [v1 v2] (unchanged)
}
