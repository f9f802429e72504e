package health

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Lease says which replica of an engine leads: the holder of the
// coordination.k8s.io Lease of its leader election.
type Lease struct {
	// Reader reads the Lease from the API server.
	Reader client.Reader
	// Namespace and Name name the Lease; Name is "" without leader
	// election.
	Namespace, Name string
	// Leading says whether this replica acts.
	Leading func() bool
}

// LeaderInfo is what /leader answers.
type LeaderInfo struct {
	// Leading says whether this engine acts.
	Leading bool `json:"leading"`
	// Election is false without leader election.
	Election bool `json:"election"`
	// Lease is namespace/name; Holder the identity that holds it, as
	// the Lease says; Renewed when it last renewed it.
	Lease   string    `json:"lease,omitempty"`
	Holder  string    `json:"holder,omitempty"`
	Renewed time.Time `json:"renewed,omitzero"`
}

// Info reads the Lease (not without leader election); a Lease that
// cannot be read within 5s names no holder.
func (l *Lease) Info(ctx context.Context) LeaderInfo {
	info := LeaderInfo{Leading: l.Leading()}
	if l.Name == "" {
		return info
	}
	info.Election, info.Lease = true, l.Namespace+"/"+l.Name
	var lease coordinationv1.Lease
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if err := l.Reader.Get(ctx, client.ObjectKey{Namespace: l.Namespace, Name: l.Name}, &lease); err == nil {
		if lease.Spec.HolderIdentity != nil {
			info.Holder = *lease.Spec.HolderIdentity
		}
		if lease.Spec.RenewTime != nil {
			info.Renewed = lease.Spec.RenewTime.UTC()
		}
	}
	return info
}

// ServeHTTP answers /leader: whether this engine acts, and which replica
// holds the Lease.
func (l *Lease) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(l.Info(r.Context()))
}

// Standby says why the engine does not act: it is a standby of leader
// election, waiting for the Lease another replica holds (named, with its
// last renewal). It is "" while the engine acts, and without leader
// election.
func (l *Lease) Standby(ctx context.Context) string {
	if l.Name == "" || l.Leading() {
		return ""
	}
	info := l.Info(ctx)
	if info.Holder == "" {
		return fmt.Sprintf("This engine is a standby: it acts once it holds the Lease %s, which no replica holds now.", info.Lease)
	}
	return fmt.Sprintf("This engine is a standby: %s holds the Lease %s (renewed %s) and acts; this one takes over if it stops renewing it.",
		info.Holder, info.Lease, info.Renewed.Format(time.RFC3339))
}

// line says which replica leads, for /readyz?verbose.
func (info LeaderInfo) line() string {
	switch {
	case !info.Election:
		return "leader: this replica (no leader election)"
	case info.Leading:
		return fmt.Sprintf("leader: this replica, holder of the Lease %s", info.Lease)
	case info.Holder == "":
		return fmt.Sprintf("leader: none; this replica is a standby and takes the Lease %s once it can", info.Lease)
	default:
		return fmt.Sprintf("leader: %s, holder of the Lease %s (renewed %s); this replica is a standby", info.Holder, info.Lease, info.Renewed.Format(time.RFC3339))
	}
}
