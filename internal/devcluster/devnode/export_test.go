package devnode

import (
	"context"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

// ReportStatus reports the status of the Node name as a dev node does,
// through cfg's client; the Node must exist.
func ReportStatus(ctx context.Context, cfg *rest.Config, name string) error {
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	n := &Node{opts: Options{Name: name, Version: "v0.0.0"}, client: cs}
	return n.updateStatus(ctx)
}
