// Package conformance is a reference model of the run guarantees that
// docs/handlers.md ("What opkit guarantees") makes, and the generator of
// the cases it is checked on.
//
// # The model
//
// Expect is pure: no client, no clock, no import of the engine, cause or
// statemachine. It is written from the docs' promises, not from the
// engine's code, so that it disagrees where the engine is wrong. Given a
// definition drawn from a small space (Def: a custom resource, with or
// without a small state machine, or a watch of labelled ConfigMaps;
// handlers, in declared order, each with a set of triggers among create,
// update, delete, resume and when, or enter of a state; fields or none;
// and a behaviour: succeed, write status.count+1 from what the run saw,
// fail N times, give up; each run in a process of its own or, exec.mode
// Serve, by a process that outlives runs (the same behaviour, answered
// on a line; the model expects the same of both); and optionally a source, a webhook,
// CloudEvents over HTTP or a NATS JetStream stream, with handlers on event and an object template that
// applies the custom resource) and
// a history (Step: create, change a spec field, change an annotation,
// delete, opkit retry, a person's decision, pause the object's handlers
// and resume them, stop the engine gracefully or
// with SIGKILL, start it, SIGKILL it during a run, post a delivery to the
// source or publish it to its stream, post one again, ask for one to
// be handled again), it says which runs must happen — handler,
// trigger, object life, generation, engine start, state visit or
// delivery, and the outcome of every attempt — what each run must see,
// how each object ends, how each delivery is answered and recorded, and
// which traces the runs and the deliveries are in.
//
// Deliveries (docs/events.md): each delivery id is recorded once,
// answered 202, and handled once, after a SIGKILL too: its source's
// object applied (created by the first, its spec.a changed by the next,
// the custom resource's handlers then running as for any create or
// change), then each handler on event in declared order, one after the
// other, under the key <operator>/event/<source>/<delivery id>/<handler>,
// retried by its policy; a handler that gave up ends it Failed, else it
// is Handled. A handler run sees the payload that was posted. A delivery
// posted again to a webhook is a replay: answered 409, recorded Refused,
// nothing runs; so is a CloudEvent posted again, in the binding's other
// mode (binary or structured) than the post it repeats, as its id and
// source are the event's. A NATS source's delivery is a message of its stream, its
// id <stream>:<stream sequence>, acked rather than answered; one
// published while no engine runs waits in the stream, and the next start
// records and handles it as any other. A message published again is a
// new message, with a new sequence: a new delivery, so the history has
// no replay of one. A Kafka source's delivery is a record of its topic,
// its id <topic>:<partition>:<offset>, committed rather than answered,
// and otherwise as a NATS message.
//
// Traces (docs/observability.md), with tracing on in the engine (its
// OTEL_* environment names an OTLP endpoint, as the checker's always
// does): every run of a handler is recorded with a trace (its span's
// traceparent), which its handler gets in its binding context, and a
// process of its own in TRACEPARENT; the attempts of a key after one that
// Failed are in that one's trace (Run.Continues: "every attempt of a key
// after a failure is one trace"; after one that gave up, opkit retry's
// attempts need not be); each delivery's record continues its sender's
// trace (the traceparent it was sent with, SenderTraceparent: a webhook's
// header, a CloudEvent's extension, a NATS message's or a Kafka record's
// header), a redelivery's is a trace of its own (not the one of the
// delivery it redelivers), and every run on event of a delivery, every
// attempt, is in its record's trace; and the run a delivery's object
// caused (Run.CausedBy) is in the delivery's trace.
//
// What a run must see (read-your-writes): the spec of the
// generation its key names; status.count equal to the number of writing
// runs that succeeded for the object before it started; for an enter
// run, the visit it runs for. How an object ends: there or gone, its
// spec as the history wrote it, status.count, status.state, no decision
// left waiting (a decision is taken or refused at once), and for a watched object nothing of
// opkit's on it.
//
// The engine plays each step to the end before the next (the checker
// waits for it), or, while it is stopped, after it starts. Where the docs
// leave a choice, the model takes one and says so here:
//   - "Handled before" (resume's "each object that existed before" for a
//     custom resource, "handled before" for a watched object) is read as
//     status.opkit.handled recorded: every create and update handler done
//     with the generation, once nothing else is due, or with the status
//     write of a transition (before the enter runs of the state it makes,
//     which a SIGKILL may interrupt), but not while the object is paused,
//     on its own or with its operator. An object created while no engine
//     ran gets its create runs at the start, not a resume run.
//   - Runs go one at a time per object, the most urgent first (create and
//     update, then enter and the state's transition, then when and
//     resume), in declared order. A handler that failed and waits for its
//     retry holds back the handlers declared after it ("so that provision
//     can come before announce"); those before it go on meanwhile. One
//     that gave up holds back its own runs and those after it until the
//     spec changes or opkit retry, but for delete runs: a deletion
//     proceeds; and but for the enter runs of the state the object is in,
//     which nothing declared before them holds back (docs/states.md, "A
//     handler that gave up"): the one that gave up makes none, and the
//     visit does not wait for it. A delete run that gave up keeps the
//     finalizer until opkit retry. An enter run that gave up is done with
//     for its visit.
//   - An update is about the change since the handler last succeeded (or
//     since the generation a change not about its fields passed it).
//   - A resume run is for one start ("once per start"; its key names the
//     start): one the engine's end interrupted, or that had not run yet,
//     is replaced by the next start's, not run again with its key.
//   - A watched object's generation counts the changes an engine saw:
//     those made while no engine ran are one.
//   - A webhook delivery or a CloudEvent is posted only while the engine runs: one posted
//     while none listens gets no answer and is the sender's to post
//     again, so nothing is recorded of it, and the generator draws none.
//     A NATS message (a Kafka record) is published at any time, but for one the source's
//     object template applies, which is published only while the engine
//     runs: applied at a start, the object's runs and those of the
//     changes made meanwhile would be in no order the docs say; nor is a
//     SIGKILL drawn in the first run of a start with messages to handle
//     (a delivery's or the object's, in no order either). A delivery's
//     handling and the object's runs are not ordered: the model checks
//     each on its own, and draws no SIGKILL in the first run of a
//     delivery that applies the object (which of the two runs first is
//     not the docs' to say). A SIGKILL in the first run of one of a
//     delivery's handlers is drawn: the run is Cancelled, the delivery
//     stays Pending, and the next start runs it again with its key, as
//     its first attempt; the handlers before it that succeeded do not
//     run again.
//     Nothing applies the object while it is being deleted.
//   - Pauses (docs/handlers.md, "Pausing an object's handlers"): nothing
//     runs for a paused object, a delete run included (a paused custom
//     resource being deleted keeps opkit's finalizer until it is
//     resumed); it is still seen (a watched object's changes still
//     count). The resume runs what came due, once: a resume run of a
//     start made while paused runs then, and an update is about the
//     change since the handler last ran. An engine records each pause
//     and each resume it sees once; a pause undone while no engine ran
//     is not seen. A watched object that is gone takes its pause with
//     it: its delete runs come, and its resume is recorded, by opkit
//     (when it has delete handlers: without, it is forgotten). No
//     decision is drawn on a paused object.
//   - A whole operator paused (docs/handlers.md, "Pausing a whole
//     operator"), for a definition that is an Operator in the cluster
//     (Def.Cluster): no handler of any of its objects starts, a watched
//     object's delete runs included, until it is resumed; each object is
//     recorded paused once and resumed once, and while both its own pause
//     and its operator's hold, its own is the one recorded. A watched
//     object gone whose delete handler gave up has no run to hold: its
//     pauses are not recorded; one created again under the name of a
//     gone one whose delete runs wait is unseen until they are done, its
//     pause with it.
//   - Re-runs (docs/handlers.md, "opkit rerun"): of a handler's last
//     create or update run for the object, one request at a time. The
//     next step of the object takes it, before what is due (a paused
//     object's at its resume; one deleted first never does): one run,
//     trigger rerun, key <key>/rerun/<n> with n counting the key's
//     re-runs, not retried (a failure is GaveUp), changing none of the
//     handler's records; it sees the object as it is then, or with
//     --same-input the one its run saw, and a result that writes status
//     writes it. No SIGKILL is drawn in a re-run: one cut is Cancelled
//     and not run again (its request was taken).
//   - Redeliveries (docs/events.md, "Redelivering on purpose"): of a
//     delivery the sender sent, accepted and handled (neither it nor a
//     redelivery of it Pending: the engine refuses those), while the
//     engine runs or, for a source that applies no object, while it is
//     stopped (the next start answers it; one that applies the object is
//     not drawn then, as for a NATS message). Each is accepted, recorded
//     once with the sender's id and payload, linked to the record it
//     redelivers, and handled as a delivery is: each handler on event in
//     declared order, retried by its policy, under the key
//     <operator>/event/<source>/<delivery id>/redelivery/<its record's
//     id>/<handler>, the attempts counted afresh under that key; the
//     source's object applied again with the payload's spec.a (created
//     again if it is gone; no change if it holds that already). A
//     SIGKILL in one of its handlers' first run is drawn as for a
//     delivery. A redelivery is never a replay: it is neither answered
//     nor recorded Refused.
//   - Traces: "every run" with a trace is read as every handler's run;
//     the archive's other records (a pause or resume, opkit retry's
//     request, a transition) are no span's and need none. A run that a
//     SIGKILL interrupted and that runs again with its key after the
//     start is not promised its first try's trace (only a failure
//     carries a trace over), unless it follows a failure: its tries are
//     in the failure's trace, as any attempt after it.
//   - The run a delivery's object caused: the docs say the reconcile that
//     next decides a run of the object continues the object's trace
//     annotation, once ("the next run it decides is in the trace of the
//     delivery that created or changed the object"). The model promises
//     it of the create or update run of the generation the delivery's
//     apply made, when that is the object's next run (Run.CausedBy): the
//     create run of the object the first delivery created, the update
//     run of a later one's change. Not of a next run of another kind (a
//     re-run, an enter, when, resume or delete run taken first), nor of
//     the run of a generation a person's change made before the next run
//     (the annotation is still the delivery's, and the run sees both
//     changes: the model promises nothing of it), nor of the runs after
//     the next one (another handler's create run of the same generation,
//     which the engine may decide in the same reconcile, or in one that
//     has not yet recorded the annotation seen, and so put in the
//     delivery's trace as well). Two deliveries' changes before the next
//     run (made while the object is paused) are two generations, the
//     run for the last: it is promised the last delivery's trace, whose
//     write the annotation holds. An apply that changes nothing (a
//     redelivery of the payload the object holds) writes the annotation
//     all the same: a next run still to come for an earlier delivery's
//     generation is then in the redelivery's trace. A SIGKILL before the
//     object's status records the annotation seen makes the next
//     engine's reconcile continue it again (more runs in the trace, none
//     fewer); none is drawn in the first run of a delivery that applies
//     the object anyway.
//   - A decision is taken once the visit's enter runs are done, which a
//     handler that gave up does not hold back; were they still not done,
//     it would be taken or refused at once (a DecisionRefused Event), and
//     the model stops there: nothing is drawn after such a decision.
//
// Not drawn, as the docs do not say: a resume or when handler that fails
// (how its retries interleave with the create and update runs of the
// handlers declared after it, and what a later start does with a resume
// run that gave up). Not modelled yet: operator-wide schedules and the
// schedule and requeue triggers (they need time to pass on a clock the
// engine process does not share), related fields, a decision on a paused
// object,
// a githubPoll source (the same contract, but the checker would have to
// serve GitHub's API), a CloudEvents batch, a Kafka topic of several
// partitions, a filter that refuses a
// delivery, a handler's refusal of one, a redelivery the engine refuses,
// leader election, and of traces, the spans themselves (that they reach
// the receiver, and how they hang together: an engine SIGKILLed loses
// those it had not exported) and what is in no delivery's trace (a run no
// delivery caused may be in one: "any other reconcile starts a trace of
// its own" is not checked). "Where the state is" says
// where, and is not a behaviour to check.
//
// # The checks
//
// Generate draws a case from a seed and a Space; Spaces are the spaces
// TestConformance and make soak take in turn (SpaceOf: the seed picks
// it), each but DefaultSpace with a Plot, steps its histories follow
// where they can, so that the meetings rare in DefaultSpace (a message
// published while no engine runs, then redelivered; a whole operator's
// pause with the object's) are made in most of that space's cases;
// Valid says whether a history can be played; Compare checks what was observed against an Expectation and
// names the guarantee each broken promise is of; Shrink cuts a failing
// case down; Scenario prints one as an opkit test scenario and as Go.
// The checker itself is in the tests (TestConformance): it renders each
// case into an Operator whose exec handlers run the test binary as a
// recorder, plays the history against an engine process on the local
// control plane (the test binary again, so that it can be SIGKILLed),
// waits after each step until the engine is quiet (no delivery left
// Pending, every message published recorded), posts deliveries to the
// engine's hooks listener with the source's bearer token or publishes
// them to the case's own JetStream server (natstest's, in the test
// process; the stream CONFORMANCE, read by the engine's consumer from
// its first message), and compares what the recorder, the answers and
// the archive saw. Every engine it starts traces, to an OTLP receiver in
// the test process (tracingtest), and each delivery is sent with its
// sender's traceparent; the traces are read from the archive's records. TestFast plays cases through cause.Decide
// in a miniature engine loop (BenchmarkFast: thousands a second); it
// draws no source, as the deciding layer has no deliveries.
//
// KnownDefects lists the defects on main that the model finds, each with
// its issue: TestConformance leaves their cases out until the fix is
// merged, so that make test stays green; make soak draws them too unless
// KNOWN=0. Regressions keeps each one's shrunk case, which TestRegressions
// plays: one of a known defect must still fail; one of another that meets
// a known defect may break the promise that one breaks (Defect.Row), and
// no other. The model itself is never weakened for them.
package conformance
