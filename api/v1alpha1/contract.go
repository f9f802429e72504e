package v1alpha1

// The names opkit shares with the user and its own parts (engine, console,
// CLI): the annotations a person or tool sets on a custom resource, the
// conditions the engine writes on it, and the triggers runs are recorded
// with. They are part of the public contract: changing one breaks
// existing objects, scripts and dashboards.

// Annotations on a custom resource.
const (
	// RetryAnnotation, set to any value, clears the object's handlers'
	// failed attempts and Stalled state so that they run again; the engine
	// removes it. `opkit retry` and the console's Retry set it.
	RetryAnnotation = "opkit.dev/retry"
	// PauseAnnotation, set to any value, pauses the object's handlers: a
	// run in flight finishes and is recorded, but no handler starts
	// (create, update, delete, resume or schedule) until the annotation is
	// removed; then what came due meanwhile runs. Children are still kept
	// converged. The console's Pause and Resume set and remove it.
	PauseAnnotation = "opkit.dev/paused"
	// AppliedHashAnnotation, on a child, holds a hash of what opkit last
	// applied to it: a child whose template renders the same is not
	// written again.
	AppliedHashAnnotation = "opkit.dev/applied-hash"
)

// Condition types on every custom resource.
const (
	// ConditionReady is True when every child is applied and ready and no
	// handler has given up.
	ConditionReady = "Ready"
	// ConditionDegraded is True while a child cannot be applied.
	ConditionDegraded = "Degraded"
	// ConditionStalled is True while a handler has given up on the
	// object's generation.
	ConditionStalled = "Stalled"
	// ConditionPaused is True while the object's handlers are paused
	// (PauseAnnotation); it is absent otherwise.
	ConditionPaused = "Paused"
)

// TriggerRequeue is the trigger of a run that a handler asked for with
// requeueAfter in its result: the same handler runs again for the object
// after that long. It is not a value of Handler.On, whose triggers are the
// On* constants.
const TriggerRequeue = "requeue"

// MigrationAnnotation holds, on a CRD, the progress of a storage
// migration in flight (`opkit migrate`, or the engine's --migrate-storage):
// the storage version it rewrites objects to, the page it is at and its
// counts, so that an interrupted migration resumes where it stopped. It is
// removed when the migration ends; deleting it makes the next migration
// start over, which is safe (objects already rewritten cost a request each
// and are counted as already current).
const MigrationAnnotation = "opkit.dev/storage-migration"

// ConversionAnnotationPrefix is, followed by a version's name, the
// annotation in which a conversion keeps what the converted object's
// version cannot hold, as JSON, for the version it came from: fields its
// schema has no place for, and mapped values that do not convert back
// exactly. Converting back restores them and removes the annotation; it
// is absent when nothing is kept. See docs/conversion.md.
const ConversionAnnotationPrefix = "opkit.dev/conversion."
