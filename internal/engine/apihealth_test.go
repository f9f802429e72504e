package engine_test

import (
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/rest"

	"github.com/opkit-dev/opkit/internal/devcluster/clustertest"
	"github.com/opkit-dev/opkit/internal/engine"
)

// TestAChangeIsHandledWithinSecondsOfAnOutagesEnd closes the API server's
// port to the engine for 60 s (connections refused, as when the API
// server is down), long enough for client-go's reflectors to back off 30
// s and more between relists, while a Task is created; another is
// created as the port opens again. Each one's create handler starts
// within 10 s of then on a quiet machine (a generous bound: the engine
// asks the API server every 2 s), scaled on a loaded one
// (clustertest.Scaled). Before the engine held its relists through the outages it
// knew of, a change could wait out a reflector's back-off: 24.5 s after
// a 20 s outage.
func TestAChangeIsHandledWithinSecondsOfAnOutagesEnd(t *testing.T) {
	t.Parallel()
	env := clustertest.New(t)
	proxy := clustertest.NewProxy(t, strings.TrimPrefix(env.Config.Host, "https://"))
	cut := rest.CopyConfig(env.Config)
	cut.Host = "https://" + proxy.Addr()
	file, out := tasksOperator(t)
	runEngineWith(t, engine.Options{Config: cut, Namespace: env.Namespace}, file)
	cleanUpTasks(t, env)
	create(t, env, task(env.Namespace, "before", "", "x"))
	waitRecords(t, out, "before", 1, "the create run before the outage")

	proxy.Stop()
	create(t, env, task(env.Namespace, "during", "", "x"))
	time.Sleep(60 * time.Second)
	proxy.Start(t)
	back := time.Now()
	create(t, env, task(env.Namespace, "after", "", "x"))
	for _, name := range []string{"during", "after"} {
		r := waitRecords(t, out, name, 1, "the create run of the Task created "+name+" the outage")[0]
		at, err := time.Parse(time.RFC3339Nano, r.At)
		if err != nil {
			t.Fatal(err)
		}
		took := at.Sub(back)
		t.Logf("the Task created %s the outage: its handler started %s after its end", name, took.Round(10*time.Millisecond))
		if bound := clustertest.Scaled(10 * time.Second); took > bound {
			t.Errorf("the Task created %s the outage waited %s after its end for its handler; want %s at most", name, took.Round(100*time.Millisecond), bound.Round(time.Second))
		}
	}
}
