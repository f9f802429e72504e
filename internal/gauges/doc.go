// Package gauges computes the object gauges opkit_objects and
// opkit_oldest_failing_object_age_seconds (docs/metrics.md) when
// scraped, from the running operators of every engine that Tracks its
// Sources.
//
// Contract: a reconcile Records each custom resource's gauged conditions
// (Ready, Degraded, Stalled, Paused) in its operator's Table, as the
// cache shows them, and the Table Forgets an object gone; a scrape sums
// the tables, O(1) per reconcile and a small record per object. A watch
// operator's objects are counted from its runner's handler records, with
// Stalled only. An operator removed or stopped has no series; engines of
// one process that run operators of the same name (tests) add up.
package gauges
