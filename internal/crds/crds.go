// Package crds installs CustomResourceDefinitions as opkit does: server-side
// applied by opkit's field manager, taking over conflicting fields, then
// waited for until the API server has established them and the engine's
// REST mapper maps each served version (a read of a new kind before that
// fails with "no matches for kind"). opkit's own kinds (Operator,
// Redelivery, Rollout) are installed once per Installer.
//
// It knows nothing of the engine, nor of an operator's definition: the
// engine builds each CRD (package definition, webhook.Operators for one
// with conversion) and hands it here.
package crds

import (
	"context"
	"fmt"
	"sync"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Installer installs CRDs with Client (apply) and Reader (reads from the
// API: the cache does not watch CRDs), and waits for Mapper to map them.
// It is safe for concurrent use.
type Installer struct {
	Client       client.Client
	Reader       client.Reader
	Mapper       meta.RESTMapper
	FieldManager string

	mu   sync.Mutex
	once map[string]bool // opkit's own CRDs installed, by name
}

// Apply applies crd, taking over conflicting fields.
func (i *Installer) Apply(ctx context.Context, crd *apiextensionsv1.CustomResourceDefinition) error {
	u, err := runtime.DefaultUnstructuredConverter.ToUnstructured(crd)
	if err != nil {
		return err
	}
	apply := client.ApplyConfigurationFromUnstructured(&unstructured.Unstructured{Object: u})
	return i.Client.Apply(ctx, apply, client.FieldOwner(i.FieldManager), client.ForceOwnership)
}

// WaitEstablished waits, up to a minute, until the CRD name is
// established; its names refused are an error at once.
func (i *Installer) WaitEstablished(ctx context.Context, name string) error {
	return WaitEstablished(ctx, i.Reader, name)
}

// Own installs the CRD of one of opkit's own kinds, once: applied, then
// waited for until it is served and mapped. A failure is tried again at
// the next call.
func (i *Installer) Own(ctx context.Context, crd *apiextensionsv1.CustomResourceDefinition, kind string) error {
	i.mu.Lock()
	done := i.once[crd.Name]
	i.mu.Unlock()
	if done {
		return nil
	}
	if err := i.Apply(ctx, crd); err != nil {
		return fmt.Errorf("installing the %s CRD: %w", kind, err)
	}
	if err := i.WaitEstablished(ctx, crd.Name); err != nil {
		return fmt.Errorf("the %s CRD %s: %w", kind, crd.Name, err)
	}
	if err := i.waitMapped(ctx, crd); err != nil {
		return fmt.Errorf("the %s CRD %s: %w", kind, crd.Name, err)
	}
	i.mu.Lock()
	defer i.mu.Unlock()
	if i.once == nil {
		i.once = map[string]bool{}
	}
	i.once[crd.Name] = true
	return nil
}

// waitMapped waits, up to 30 seconds, until the REST mapper maps each
// served version of crd, established: the API server's discovery
// publishes a new kind a moment after its CRD is established (the mapper
// reloads a group's discovery on each miss).
func (i *Installer) waitMapped(ctx context.Context, crd *apiextensionsv1.CustomResourceDefinition) error {
	gk := schema.GroupKind{Group: crd.Spec.Group, Kind: crd.Spec.Names.Kind}
	var last error
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		for _, v := range crd.Spec.Versions {
			if !v.Served {
				continue
			}
			if _, last = i.Mapper.RESTMapping(gk, v.Name); last != nil {
				return false, nil
			}
		}
		return true, nil
	})
	if err != nil && last != nil {
		return fmt.Errorf("its kind is not in the API server's discovery: %w", last)
	}
	return err
}

// WaitEstablished waits, up to a minute, until the CRD name is
// established; its names refused are an error at once. reader must read
// CRDs (the API server, or a client with apiextensions in its scheme).
func WaitEstablished(ctx context.Context, reader client.Reader, name string) error {
	return wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 60*time.Second, true, func(ctx context.Context) (bool, error) {
		var crd apiextensionsv1.CustomResourceDefinition
		if err := reader.Get(ctx, client.ObjectKey{Name: name}, &crd); err != nil {
			return false, client.IgnoreNotFound(err)
		}
		for _, c := range crd.Status.Conditions {
			if c.Type == apiextensionsv1.NamesAccepted && c.Status == apiextensionsv1.ConditionFalse {
				return false, fmt.Errorf("names not accepted: %s", c.Message)
			}
			if c.Type == apiextensionsv1.Established && c.Status == apiextensionsv1.ConditionTrue {
				return true, nil
			}
		}
		return false, nil
	})
}
