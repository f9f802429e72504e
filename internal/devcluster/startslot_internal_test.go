package devcluster

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"
)

// TestAStartWaitsForTheMachinesSlot: with one slot, a second start waits
// while the first holds it, says so once, and takes it when it is let
// go; a start whose context ends while it waits fails with the reason.
func TestAStartWaitsForTheMachinesSlot(t *testing.T) {
	t.Setenv("TMPDIR", t.TempDir())
	t.Setenv(startSlotsEnv, "1")
	first, err := takeStartSlot(t.Context(), &bytes.Buffer{})
	if err != nil || first.f == nil {
		t.Fatalf("the first start's slot: %+v, %v", first, err)
	}

	ctx, cancel := context.WithTimeout(t.Context(), 300*time.Millisecond)
	defer cancel()
	var log bytes.Buffer
	if _, err := takeStartSlot(ctx, &log); err == nil || !strings.Contains(err.Error(), "waiting for another plane of this machine to start first") {
		t.Fatalf("a second start while the slot is held: %v; want it to wait until its context ends", err)
	}
	if !strings.Contains(log.String(), "waiting for another plane") || strings.Count(log.String(), "\n") != 1 {
		t.Errorf("the waiting start said %q; want one line saying it waits", log.String())
	}

	got := make(chan startSlot)
	go func() {
		s, err := takeStartSlot(t.Context(), &bytes.Buffer{})
		if err != nil {
			t.Error(err)
		}
		got <- s
	}()
	select {
	case s := <-got:
		t.Fatalf("a start took the slot the first still holds: %+v", s)
	case <-time.After(300 * time.Millisecond): // must not happen: not scaled
	}
	first.release()
	second := <-got // the test's own timeout bounds this wait
	if second.f == nil {
		t.Fatal("the second start took no slot once the first let it go")
	}
	second.release()
}

// TestStartSlotsAreOneATwoCores: without OPKIT_PLANE_STARTS, a machine
// starts one plane a two cores, at least one.
func TestStartSlotsAreOneATwoCores(t *testing.T) {
	t.Setenv(startSlotsEnv, "")
	if n := startSlots(); n < 1 {
		t.Errorf("startSlots() = %d", n)
	}
	t.Setenv(startSlotsEnv, "3")
	if n := startSlots(); n != 3 {
		t.Errorf("with %s=3: %d slots", startSlotsEnv, n)
	}
}
