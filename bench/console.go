package main

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"time"

	"github.com/opkit-dev/opkit/internal/archive"
	"github.com/opkit-dev/opkit/internal/console"
)

// operatorName is the workload's Operator (printer.yaml), whose label the
// installed CRD carries; the archive scenario's runs are its runs.
const operatorName = "bench-printer"

// consolePages: the console's server time per page, with the archive of
// store st and n runs, and -console-objects Printers in the cluster.
// Requests go to the console's handler directly: the time is the server's,
// without a network. The object lists are cached for the console's
// default 2s, as served.
func (b *bench) consolePages(ctx context.Context, st store, n int) error {
	a, err := b.filledArchive(ctx, st, n)
	if err != nil {
		return err
	}
	runs := a.store
	if err := b.c.installCRD(ctx); err != nil {
		return err
	}
	names := make([]string, b.opts.ConsoleObjects)
	for i := range names {
		names[i] = fmt.Sprintf("obj-%d", i)
	}
	if err := b.c.createPrinters(ctx, names); err != nil {
		return err
	}
	defer func() { _ = b.c.cleanUp(context.WithoutCancel(ctx)) }()
	srv, err := console.New(console.Options{Archive: runs, Config: b.c.cfg})
	if err != nil {
		return err
	}
	failed, err := runs.List(ctx, archive.Query{Failed: true, Limit: 1})
	if err != nil {
		return err
	}
	if len(failed.Runs) == 0 {
		return errors.New("the archive has no failed run to show")
	}
	run := failed.Runs[0]
	pages := []struct{ name, path string }{
		{"overview", "/"},
		{"operator", "/operators/" + operatorName},
		{"object timeline", "/operators/" + operatorName + "/objects/" + run.Namespace + "/" + run.Name},
		{"run", "/runs/" + run.ID},
		// The runs started long ago: the inbox's period covers them all,
		// so that it groups its most, the latest 1000 failed runs.
		{"failures inbox", fmt.Sprintf("/failures?since=%dh", int(time.Since(b.runBase).Hours())+1)},
	}
	size := sizeLabel(n) + " runs"
	for _, p := range pages {
		lat := make([]time.Duration, 0, b.opts.ConsoleRequests)
		for range b.opts.ConsoleRequests {
			req := httptest.NewRequestWithContext(ctx, http.MethodGet, p.path, nil)
			rec := httptest.NewRecorder()
			t0 := time.Now()
			srv.ServeHTTP(rec, req)
			lat = append(lat, time.Since(t0))
			if rec.Code != http.StatusOK {
				return fmt.Errorf("console %s: %d\n%s", p.path, rec.Code, rec.Body.String())
			}
		}
		b.addLatencies(st, "console "+size, p.name, "page", lat, 50, 99)
	}
	return nil
}
