package health

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr/funcr"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	toolscache "k8s.io/client-go/tools/cache"

	"github.com/opkit-dev/opkit/internal/informer"
)

// flakyListWatch fails its calls while failing is set, and counts them.
type flakyListWatch struct {
	mu      sync.Mutex
	failing bool
	calls   int
}

func (f *flakyListWatch) call() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls++
	if f.failing {
		return errors.New("connection refused")
	}
	return nil
}

func (f *flakyListWatch) set(failing bool) {
	f.mu.Lock()
	f.failing = failing
	f.mu.Unlock()
}

func (f *flakyListWatch) lw() *toolscache.ListWatch {
	return &toolscache.ListWatch{
		ListWithContextFunc: func(context.Context, metav1.ListOptions) (runtime.Object, error) {
			if err := f.call(); err != nil {
				return nil, err
			}
			return &metav1.List{}, nil
		},
		WatchFuncWithContext: func(context.Context, metav1.ListOptions) (watch.Interface, error) {
			if err := f.call(); err != nil {
				return nil, err
			}
			return watch.NewEmptyWatch(), nil
		},
	}
}

func TestAListFailingThroughAKnownOutageIsMadeAgainAtItsEnd(t *testing.T) {
	o := NewOutage()
	f := &flakyListWatch{failing: true}
	held := (&informer.Informers{Outage: o}).Held(f.lw()).(toolscache.ListerWatcherWithContext)

	// Not known away: a failure is the reflector's, at once.
	if _, err := held.ListWithContext(t.Context(), metav1.ListOptions{}); err == nil {
		t.Fatal("a failing list succeeded")
	}
	// Known away: the call waits for the API server's return, then is
	// made again, and succeeds.
	o.Set(true)
	listed, watched := make(chan error, 1), make(chan error, 1)
	go func() {
		_, err := held.ListWithContext(t.Context(), metav1.ListOptions{})
		listed <- err
	}()
	go func() {
		_, err := held.WatchWithContext(t.Context(), metav1.ListOptions{})
		watched <- err
	}()
	select {
	case err := <-listed:
		t.Fatalf("the list returned during the outage: %v", err)
	case err := <-watched:
		t.Fatalf("the watch returned during the outage: %v", err)
	case <-time.After(300 * time.Millisecond):
	}
	f.set(false)
	o.Set(false)
	for what, done := range map[string]chan error{"list": listed, "watch": watched} {
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("the %s after the outage: %v", what, err)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("the %s was not made again when the API server came back", what)
		}
	}
	// A call held when the informer stops ends with it.
	o.Set(true)
	f.set(true)
	ctx, cancel := context.WithCancel(t.Context())
	go func() {
		_, err := held.ListWithContext(ctx, metav1.ListOptions{})
		listed <- err
	}()
	cancel()
	select {
	case err := <-listed:
		if err == nil {
			t.Error("a list ended by its context succeeded")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("a held list outlived its context")
	}
}

func TestClientGosEventRetriesAreNotLoggedWhileTheAPIServerIsAway(t *testing.T) {
	o := NewOutage()
	var mu sync.Mutex
	var lines []string
	logged := func() []string {
		mu.Lock()
		defer mu.Unlock()
		return slices.Clone(lines)
	}
	log := o.QuietLogger(funcr.New(func(_, args string) {
		mu.Lock()
		lines = append(lines, args)
		mu.Unlock()
	}, funcr.Options{})).WithName("events")
	retry := func() { log.Error(errors.New("EOF"), eventRetried) }
	asked := func() {
		t.Helper()
		select {
		case <-o.now:
		case <-time.After(10 * time.Second):
			t.Fatal("the line asked for no check")
		}
	}

	// Away: left out, at once.
	o.Set(true)
	retry()
	// Not known away: the line asks for a check at once, and is left out
	// when the check finds the API server away (the start of an outage)...
	o.Set(false)
	retry()
	asked()
	o.Set(true)
	// ... and written when it answers (a failure of its own).
	o.Set(false)
	retry()
	asked()
	o.Set(false)
	// Any other line goes through.
	log.Error(errors.New("forbidden"), "Server rejected event (will not retry!)")
	within10s(t, "two lines logged", func() bool { return len(logged()) >= 2 })
	got := logged()
	retries := 0
	for _, l := range got {
		if strings.Contains(l, eventRetried) {
			retries++
		}
	}
	if len(got) != 2 || retries != 1 {
		t.Errorf("logged %q; want the retry while the API server answered, and the rejection", got)
	}
}

// within10s polls cond, every 10 ms, for up to 10 s.
func within10s(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !cond(); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("not within 10s: %s", what)
		}
	}
}
