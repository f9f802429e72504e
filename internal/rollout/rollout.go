package rollout

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"

	"github.com/opkit-dev/opkit/api/v1alpha1"
	"github.com/opkit-dev/opkit/internal/definition"
)

// Tick is how often the driver looks at its objects and at the Rollout's
// requests.
const Tick = time.Second

// Reasons of a running Operator's Ready condition whose rollout waits for
// a person (Note).
const (
	ReasonPaused     = "RolloutPaused"
	ReasonRolledBack = "RolledBack"
)

// Config is what a rollout needs of the engine.
type Config struct {
	// Client writes the Rollout and reads the operator's objects (from
	// the cache); Reader reads the Rollout from the API server (it is
	// read once a tick, by its driver alone).
	Client client.Client
	Reader client.Reader
	// Namespace is the engine's namespace; "" for the whole cluster.
	Namespace string
	Clock     clock.PassiveClock
	Log       logr.Logger
	// InstallCRD installs the Rollout CRD, if it is not yet.
	InstallCRD func(context.Context) error
	// Compile compiles a definition the Rollout keeps, as the engine runs
	// its definitions (typed).
	Compile func(*definition.Definition) (*definition.Definition, error)
	// Noted is called when the note changed (Note), to write it on the
	// Operator.
	Noted func(context.Context) error
}

// Name names an operator's Rollout object: the operator's name, and
// .<namespace> for an engine of one namespace (its objects are its own
// to roll out).
func Name(operator, namespace string) string {
	if namespace != "" {
		return operator + "." + namespace
	}
	return operator
}

// Note is what a rollout that waits for a person says on its Operator:
// Ready stays True, the operator runs, with this reason and message, and
// Degraded is True with them, so that kubectl get operators shows it.
type Note struct{ Reason, Message string }

// noteOf is the note of a rollout's status: Paused and RolledBack wait
// for a person; nil for any other phase.
func noteOf(op string, st *v1alpha1.RolloutStatus) *Note {
	switch st.Phase {
	case v1alpha1.RolloutPaused:
		return &Note{ReasonPaused, fmt.Sprintf("running; the rollout of definition %s is paused (%s): opkit rollout continue %s, or opkit rollout undo %s", st.To.Hash, st.Reason, op, op)}
	case v1alpha1.RolloutRolledBack:
		return &Note{ReasonRolledBack, fmt.Sprintf("running definition %s, not this one (%s), whose rollout was undone (%s): change the definition, or opkit rollout continue %s", st.From.Hash, st.To.Hash, st.Reason, op)}
	}
	return nil
}

// Rollout is an operator's rollout: prepared at its start, driven while
// it runs.
type Rollout struct {
	cfg Config
	def *definition.Definition // To: the definition the engine was given
	// from is the definition objects not moved are on; nil when every
	// object is on def (then nothing is driven).
	from  *definition.Definition
	moved map[types.NamespacedName]bool // as the Rollout says at the start
	// split runs both definitions, newest is what the engine knows of an
	// object beyond the cache (Drive's).
	split  splitter
	newest func(*unstructured.Unstructured) *unstructured.Unstructured
	moves  chan event.GenericEvent
	// said is the last problem logged, so that it is logged once.
	said string

	noteMu sync.Mutex
	note   *Note
}

// From is the definition the objects not moved are on; nil when every
// object is on the definition Prepare was given (nothing to drive).
func (ro *Rollout) From() *definition.Definition { return ro.from }

// Moved are the objects on the new definition at the start.
func (ro *Rollout) Moved() map[types.NamespacedName]bool { return ro.moved }

// Moves wakes the objects a step or an undo moved: the controller
// watches it.
func (ro *Rollout) Moves() <-chan event.GenericEvent { return ro.moves }

// Note is the rollout's note; nil when it waits for no person.
func (ro *Rollout) Note() *Note {
	if ro == nil {
		return nil
	}
	ro.noteMu.Lock()
	defer ro.noteMu.Unlock()
	return ro.note
}

// say keeps the note of st and, when it changed, has it written.
func (ro *Rollout) say(ctx context.Context, st *v1alpha1.RolloutStatus) {
	if !ro.setNote(st) || ro.cfg.Noted == nil {
		return
	}
	if err := ro.cfg.Noted(ctx); err != nil {
		ro.cfg.Log.Error(err, "saying the rollout's state on the Operator")
	}
}

// setNote keeps the note of st, and reports whether it changed.
func (ro *Rollout) setNote(st *v1alpha1.RolloutStatus) bool {
	note := noteOf(ro.def.Operator.Name, st)
	ro.noteMu.Lock()
	defer ro.noteMu.Unlock()
	if (note == nil) == (ro.note == nil) && (note == nil || *note == *ro.note) {
		return false
	}
	ro.note = note
	return true
}

// Definition is d as a Rollout keeps it.
func Definition(d *definition.Definition) (v1alpha1.RolloutDefinition, error) {
	op := d.Operator
	data, err := json.Marshal(struct {
		APIVersion string                `json:"apiVersion"`
		Kind       string                `json:"kind"`
		Metadata   map[string]string     `json:"metadata"`
		Spec       v1alpha1.OperatorSpec `json:"spec"`
	}{v1alpha1.SchemeGroupVersion.String(), v1alpha1.Kind, map[string]string{"name": op.Name}, op.Spec})
	if err != nil {
		return v1alpha1.RolloutDefinition{}, err
	}
	return v1alpha1.RolloutDefinition{Hash: d.Hash(), Operator: string(data)}, nil
}

// compileKept compiles a definition a Rollout keeps, with its files
// (exec handlers' commands) where d's are.
func (ro *Rollout) compileKept(kept v1alpha1.RolloutDefinition) (*definition.Definition, error) {
	d := ro.def
	var op v1alpha1.Operator
	if err := json.Unmarshal([]byte(kept.Operator), &op); err != nil {
		return nil, fmt.Errorf("operator %s: the definition %s its Rollout keeps is not an Operator: %w", d.Operator.Name, kept.Hash, err)
	}
	old, err := definition.Compile(&definition.Source{Operator: &op, File: d.Source})
	if err != nil {
		name := ro.name()
		return nil, fmt.Errorf("operator %s: the definition %s its objects are on, which its Rollout keeps, does not compile: %w; delete the Rollout %s (kubectl delete rollouts.opkit.dev %s) to apply the new definition to every object at once",
			d.Operator.Name, kept.Hash, err, name, name)
	}
	return ro.cfg.Compile(old)
}

// name is the name of the rollout's Rollout object.
func (ro *Rollout) name() string { return Name(ro.def.Operator.Name, ro.cfg.Namespace) }

// Prepare reads, or begins, the rollout of d, an operator with a custom
// resource: nil without spec.rollout (a Rollout left from one is told
// that every object is on d).
func Prepare(ctx context.Context, cfg Config, d *definition.Definition) (*Rollout, error) {
	name := Name(d.Operator.Name, cfg.Namespace)
	cfg.Log = cfg.Log.WithValues("operator", d.Operator.Name)
	to, err := Definition(d)
	if err != nil {
		return nil, err
	}
	if d.Rollout == nil {
		forget(ctx, cfg, d, name, to)
		return nil, nil
	}
	if err := cfg.InstallCRD(ctx); err != nil {
		return nil, fmt.Errorf("operator %s: %w", d.Operator.Name, err)
	}
	ro := &Rollout{cfg: cfg, def: d, moves: make(chan event.GenericEvent, 1024)}
	u, err := read(ctx, cfg.Reader, name)
	if apierrors.IsNotFound(err) {
		// The first definition: every object is on it.
		obj := &v1alpha1.RolloutObject{Status: v1alpha1.RolloutStatus{Phase: v1alpha1.RolloutComplete, From: to, To: to, Steps: len(d.Rollout.Steps), Step: len(d.Rollout.Steps),
			Reason: "the first definition the engine ran with spec.rollout: every object is on it"}}
		u = &unstructured.Unstructured{}
		u.SetGroupVersionKind(v1alpha1.SchemeGroupVersion.WithKind(v1alpha1.RolloutKind))
		u.SetName(name)
		if err := obj.Unstructured(u); err != nil {
			return nil, err
		}
		if err := cfg.Client.Create(ctx, u); err != nil {
			return nil, fmt.Errorf("operator %s: creating its Rollout %s: %w", d.Operator.Name, name, err)
		}
		return ro, nil
	}
	if err != nil {
		return nil, fmt.Errorf("operator %s: reading its Rollout %s: %w", d.Operator.Name, name, err)
	}
	obj, err := v1alpha1.ReadRollout(u)
	if err != nil {
		return nil, err
	}
	st := &obj.Status
	// on is the definition every object is on, when one is.
	var on string
	switch st.Phase {
	case v1alpha1.RolloutComplete:
		on = st.To.Hash
	case v1alpha1.RolloutRolledBack:
		on = st.From.Hash
		if st.To.Hash == to.Hash {
			// Undone: every object stays on From until the definition
			// changes or a person continues.
			if ro.from, err = ro.compileKept(st.From); err != nil {
				return nil, err
			}
			ro.moved = map[types.NamespacedName]bool{}
			cfg.Log.Info(fmt.Sprintf("operator %s: definition %s was rolled back (%s): every object stays on %s; change the definition, or run opkit rollout continue %s to roll it out again",
				d.Operator.Name, to.Hash, st.Reason, st.From.Hash, d.Operator.Name))
			return ro, nil
		}
	default: // under way
		if st.To.Hash == to.Hash {
			if ro.from, err = ro.compileKept(st.From); err != nil {
				return nil, err
			}
			ro.moved = keys(st.Moved)
			cfg.Log.Info(fmt.Sprintf("operator %s: goes on with the rollout of definition %s from %s: %s at step %d of %d, %d objects moved",
				d.Operator.Name, to.Hash, st.From.Hash, st.Phase, st.Step, st.Steps, len(st.Moved)))
			return ro, nil
		}
		// A definition other than the one rolled out: objects not
		// moved are on From; the moved ones go back to it, and the new
		// one rolls out from there.
		on = st.From.Hash
	}
	if on == to.Hash {
		if st.Phase != v1alpha1.RolloutComplete || st.To.Hash != to.Hash {
			*st = v1alpha1.RolloutStatus{Phase: v1alpha1.RolloutComplete, From: to, To: to, Steps: len(d.Rollout.Steps), Step: len(d.Rollout.Steps),
				Reason: "the definition is the one every object is on"}
			if err := write(ctx, cfg.Client, u, obj); err != nil {
				return nil, err
			}
		}
		return ro, nil
	}
	from := st.To
	if on != st.To.Hash {
		from = st.From
	}
	if ro.from, err = ro.compileKept(from); err != nil {
		return nil, err
	}
	ro.moved = map[types.NamespacedName]bool{}
	obj.Spec = v1alpha1.RolloutRequest{}
	*st = v1alpha1.RolloutStatus{Phase: v1alpha1.RolloutProgressing, From: from, To: to, Steps: len(d.Rollout.Steps),
		Reason: "a new definition: its first step is taken"}
	if err := write(ctx, cfg.Client, u, obj); err != nil {
		return nil, err
	}
	cfg.Log.Info(fmt.Sprintf("operator %s: rolls definition %s out in %d steps from %s, which every object is on until moved (opkit rollout status %s)",
		d.Operator.Name, to.Hash, st.Steps, from.Hash, d.Operator.Name))
	return ro, nil
}

// forget tells the Rollout of an operator that no longer has
// spec.rollout, if it has one, that every object is on d.
func forget(ctx context.Context, cfg Config, d *definition.Definition, name string, to v1alpha1.RolloutDefinition) {
	u, err := read(ctx, cfg.Reader, name)
	if err != nil {
		return // none (or no CRD): nothing to tell
	}
	obj, err := v1alpha1.ReadRollout(u)
	if err != nil || (obj.Status.Phase == v1alpha1.RolloutComplete && obj.Status.To.Hash == to.Hash) {
		return
	}
	obj.Spec = v1alpha1.RolloutRequest{}
	obj.Status = v1alpha1.RolloutStatus{Phase: v1alpha1.RolloutComplete, From: to, To: to,
		Reason: "the definition has no spec.rollout: it was applied to every object at once"}
	if err := write(ctx, cfg.Client, u, obj); err != nil {
		cfg.Log.Info(fmt.Sprintf("operator %s: its Rollout %s could not be told that every object is on definition %s: %v", d.Operator.Name, name, to.Hash, err))
	}
}

// read reads a Rollout.
func read(ctx context.Context, r client.Reader, name string) (*unstructured.Unstructured, error) {
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(v1alpha1.SchemeGroupVersion.WithKind(v1alpha1.RolloutKind))
	if err := r.Get(ctx, client.ObjectKey{Name: name}, u); err != nil {
		return nil, err
	}
	return u, nil
}

// write writes obj over u, the Rollout as read: a conflict (a person's
// request written meanwhile) is an error, and read again next.
func write(ctx context.Context, c client.Client, u *unstructured.Unstructured, obj *v1alpha1.RolloutObject) error {
	obj.Status.MovedCount = len(obj.Status.Moved)
	if err := obj.Unstructured(u); err != nil {
		return err
	}
	if err := c.Update(ctx, u); err != nil {
		return fmt.Errorf("writing the Rollout %s: %w", u.GetName(), err)
	}
	return nil
}

func keys(names []string) map[types.NamespacedName]bool {
	out := make(map[types.NamespacedName]bool, len(names))
	for _, n := range names {
		out[objectKey(n)] = true
	}
	return out
}

// objectKey reads namespace/name, or a cluster-scoped object's name.
func objectKey(s string) types.NamespacedName {
	if ns, name, ok := strings.Cut(s, "/"); ok {
		return types.NamespacedName{Namespace: ns, Name: name}
	}
	return types.NamespacedName{Name: s}
}

// objectName is objectKey's inverse.
func objectName(k types.NamespacedName) string {
	if k.Namespace == "" {
		return k.Name
	}
	return k.Namespace + "/" + k.Name
}
