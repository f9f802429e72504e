package engine

import (
	"errors"
	"fmt"

	"github.com/opkit-dev/opkit/internal/archive"
	"github.com/opkit-dev/opkit/internal/runsserver"
)

// The runs API: with Options.RunsAPI the engine serves its archive as
// runs.opkit.dev/v1alpha1 to the API server's aggregation layer, so that
// kubectl get runs, kubectl get --raw .../runs/ID/log and k9s read it.
// Package runsserver assembles it (the handler, its HTTPS server and
// certificate, the front proxy's authentication, the SubjectAccessReviews,
// the APIService), as it does for opkit console; its package doc says who
// may read.
//
// Every replica serves it, leader or standby: they all read the shared
// archive, and the Service in front of them may pick any.

// RunsAPIOptions configures the runs API the engine serves (see above).
// Archive defaults to Options.Archive, which must then read runs (an
// archive.Store does); Namespace, to Service's namespace, the engine's.
type RunsAPIOptions = runsserver.Options

// newRunsAPI makes the runs API's server and adds it to the manager, to
// run on every replica; it removes its APIService as the engine stops
// when it has an ExternalName.
func (e *Engine) newRunsAPI(store archive.Recorder) (*runsserver.Server, error) {
	o := *e.opts.RunsAPI
	if o.Archive == nil {
		r, ok := store.(archive.Reader)
		if !ok {
			return nil, errors.New("engine: RunsAPIOptions: the runs API serves the archive, and Options.Archive is none that reads runs (give RunsAPIOptions.Archive)")
		}
		o.Archive = r
	}
	srv, err := runsserver.New(e.opts.Config, o, e.mgr.GetLogger().WithName("runs-api"))
	if err != nil {
		return nil, fmt.Errorf("engine: the runs API: %w", err)
	}
	if err := e.mgr.Add(srv); err != nil {
		return nil, err
	}
	return srv, nil
}

// RunsAPIAddr is the address the runs API listens on, or "".
func (e *Engine) RunsAPIAddr() string {
	if e.runsAPI == nil {
		return ""
	}
	return e.runsAPI.Addr()
}

// RunsAPIName is the name of the runs API's APIService.
const RunsAPIName = runsserver.Name
